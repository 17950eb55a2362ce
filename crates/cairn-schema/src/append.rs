//! An append to a list field of a stored object as a change that commutes
//! ([`ListAppend`], a [`RecordMerge`]): the bytes it makes of a record are
//! the record with the elements added at the end of the field's list,
//! whatever else other appends added before it. The typed layer keeps it
//! in an embedded transaction (`Transaction::append`), and the object
//! server in a client's (an `Append` change of OBJ_FLUSH), where it is applied at
//! commit to the record as it then stands (`cairn_storage::txn`, module
//! `append`).
//!
//! A record says its class and schema version in its header
//! (`docs/encoding.md`); the field is found by name in the schema of the
//! record's own version, and the fields before it are stepped over by
//! their stored types, so an append applies to a record of any version
//! that has the field with the same type. A version without it (an older
//! one, read with the field's default) makes the append not apply: the
//! caller then rewrites the object whole, in its own version.

use std::collections::HashMap;
use std::sync::Arc;

use cairn_codec::{Reader, Writer};
use cairn_storage::txn::{RecordEdit, RecordMerge};

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::types::{skip_elements, skip_value, TypeDesc};

/// Where a list field sits in each schema version of a class: the types of
/// the fields before it, for the versions that have it as a list of the
/// same element type.
#[derive(Debug)]
pub struct ListField {
    class: u32,
    name: String,
    elem: TypeDesc,
    /// `elem` as a schema stores a type descriptor (what an object client
    /// sends with its appends).
    elem_encoded: Vec<u8>,
    before: HashMap<u16, Vec<TypeDesc>>,
    /// The versions in which it is the last field: an append there adds
    /// at the record's end ([`ListAppend`]'s `edit`).
    last: std::collections::HashSet<u16>,
}

impl ListField {
    /// The list field `name` of class `class`, whose elements are of type
    /// `elem`, as the catalog's schemas place it. An error if no version
    /// of the class has it as such a list.
    pub fn of(cat: &Catalog, class: u32, name: &str, elem: &TypeDesc) -> Result<ListField> {
        let list = TypeDesc::Seq(Box::new(elem.clone()));
        let mut before = HashMap::new();
        let mut last = std::collections::HashSet::new();
        for (&(c, version), fields) in &cat.schemas {
            if c != class {
                continue;
            }
            if let Some(at) = fields.iter().position(|f| f.name == name && f.ty == list) {
                before.insert(version, fields[..at].iter().map(|f| f.ty.clone()).collect());
                if at + 1 == fields.len() {
                    last.insert(version);
                }
            }
        }
        if before.is_empty() {
            let class_name = cat
                .names
                .get(&class)
                .cloned()
                .unwrap_or_else(|| format!("class {class}"));
            return Err(Error::InvalidArgument(format!(
                "{class_name} has no field {name} of type {list} to append to"
            )));
        }
        Ok(ListField {
            class,
            name: name.to_string(),
            elem: elem.clone(),
            elem_encoded: crate::catalog::encode_type_desc(elem),
            before,
            last,
        })
    }

    /// Whether schema version `version` of the class has the field.
    pub fn in_version(&self, version: u16) -> bool {
        self.before.contains_key(&version)
    }

    /// The class.
    pub fn class(&self) -> u32 {
        self.class
    }

    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The elements' type.
    pub fn elem(&self) -> &TypeDesc {
        &self.elem
    }

    /// The elements' type encoded as a schema stores it
    /// ([`crate::catalog::encode_type_desc`]).
    pub fn elem_encoded(&self) -> &[u8] {
        &self.elem_encoded
    }
}

/// Elements added at the end of a list field: see the module docs.
#[derive(Debug)]
pub struct ListAppend {
    field: Arc<ListField>,
    /// The elements, encoded one after another.
    elems: Vec<u8>,
    count: u64,
}

impl ListAppend {
    /// `count` elements encoded in `elems`, to be added to `field`. The
    /// elements are checked against the field's element type (bytes from
    /// a client are never trusted): exactly `count` values, nothing left.
    pub fn new(field: Arc<ListField>, elems: Vec<u8>, count: u64) -> Result<ListAppend> {
        let mut r = Reader::within("appended elements", &elems);
        let n = r
            .check_count("element count", count, 1)
            .and_then(|n| skip_elements(&field.elem, n, &mut r))
            .and_then(|()| r.finish("elements"));
        if let Err(e) = n {
            return Err(Error::InvalidArgument(format!(
                "elements appended to {}: {e}",
                field.name
            )));
        }
        Ok(ListAppend { field, elems, count })
    }

    /// An append of `count` elements encoded in `elems` to the list field
    /// `name` of class `class`, whose elements' type is `elem` encoded by
    /// [`crate::catalog::encode_type_desc`] — as an object client sends
    /// it — placed by `cat`, the server's own catalog (what the client
    /// says is checked against it, never trusted). `fields` keeps the
    /// fields placed so far (one per class, name and type).
    pub fn from_wire(
        cat: &Catalog,
        fields: &mut HashMap<(u32, String, Vec<u8>), Arc<ListField>>,
        class: u32,
        name: &str,
        elem: &[u8],
        count: u64,
        elems: Vec<u8>,
    ) -> Result<ListAppend> {
        let key = (class, name.to_string(), elem.to_vec());
        let field = match fields.get(&key) {
            Some(f) => Arc::clone(f),
            None => {
                let ty = crate::catalog::decode_type_desc(elem)
                    .map_err(|e| Error::InvalidArgument(format!("the element type of an append to {name}: {e}")))?;
                let f = Arc::new(ListField::of(cat, class, name, &ty)?);
                fields.insert(key, Arc::clone(&f));
                f
            }
        };
        ListAppend::new(field, elems, count)
    }

    /// The field appended to.
    pub fn field(&self) -> &Arc<ListField> {
        &self.field
    }

    /// The elements, encoded one after another.
    pub fn elems(&self) -> &[u8] {
        &self.elems
    }

    /// How many elements [`ListAppend::elems`] holds.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Where the list's count starts and its elements end in `record`, and
    /// its count.
    fn locate(&self, record: &[u8]) -> std::result::Result<(usize, usize, u64), String> {
        let mut r = Reader::within("record", record);
        let version = self.version_of(&mut r)?;
        let before = self.before_in(version)?;
        let found = (|| {
            for ty in before {
                skip_value(ty, &mut r)?;
            }
            let at = r.offset();
            let n = r.get_len("list length")?;
            let n_checked = r.check_count("list length", n, 1)?;
            skip_elements(&self.field.elem, n_checked, &mut r)?;
            Ok((at, r.offset(), n))
        })();
        found.map_err(|e: cairn_codec::DecodeError| e.to_string())
    }

    /// The record's schema version, read from its header, which must be of
    /// the field's class.
    fn version_of(&self, r: &mut Reader<'_>) -> std::result::Result<u16, String> {
        let class = r.u32("class id").map_err(|e| e.to_string())?;
        let version = r.u16("schema version").map_err(|e| e.to_string())?;
        if class != self.field.class {
            return Err(format!(
                "the record is of class {class}, the append to {} is for class {}",
                self.field.name, self.field.class
            ));
        }
        Ok(version)
    }

    /// The types of the fields before the list in schema version `version`.
    fn before_in(&self, version: u16) -> std::result::Result<&[TypeDesc], String> {
        self.field.before.get(&version).map(Vec::as_slice).ok_or_else(|| {
            format!(
                "schema version {version} of class {} has no list field {}",
                self.field.class, self.field.name
            )
        })
    }
}

/// Bytes of `n` as LEB128.
fn len_size(n: u64) -> usize {
    let bits = 64 - n.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

impl RecordMerge for ListAppend {
    fn apply(&self, record: &[u8]) -> std::result::Result<Vec<u8>, String> {
        let (at, end, n) = self.locate(record)?;
        let total = n
            .checked_add(self.count)
            .ok_or_else(|| format!("list {} would hold more than 2^64 elements", self.field.name))?;
        let mut w = Writer::with_capacity(record.len() + self.elems.len() + 1);
        w.put(&record[..at]);
        w.put_len(total);
        w.put(&record[at + len_size(n)..end]);
        w.put(&self.elems);
        w.put(&record[end..]);
        Ok(w.into_bytes())
    }

    fn max_growth(&self) -> usize {
        // The count's LEB128 grows by at most the bytes of what it adds.
        self.elems.len() + len_size(self.count)
    }

    /// A list append travels to a server as the object service's append
    /// carries it (a page client's, kept by its server at object grain).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    /// Where the list is the record's last field and its new count takes
    /// as many bytes as the old: the count overwritten and the elements
    /// added at the end (the list's elements, and so the record past
    /// `head`, are never read).
    fn edit(&self, head: &[u8], len: u64) -> Option<RecordEdit> {
        let mut r = Reader::within("record", head);
        let version = self.version_of(&mut r).ok()?;
        if !self.field.last.contains(&version) {
            return None;
        }
        for ty in self.before_in(version).ok()? {
            skip_value(ty, &mut r).ok()?;
        }
        let at = r.offset();
        let n = r.get_len("list length").ok()?;
        let total = n.checked_add(self.count)?;
        if len_size(total) != len_size(n) || (at + len_size(n)) as u64 > len {
            return None;
        }
        let mut w = Writer::with_capacity(len_size(total));
        w.put_len(total);
        Some(RecordEdit {
            writes: vec![(at, w.into_bytes())],
            append: self.elems.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::FieldDesc;
    use proptest::prelude::*;

    /// A record's header: class id and schema version.
    fn header(class: u32, version: u16) -> Vec<u8> {
        [&class.to_le_bytes()[..], &version.to_le_bytes()].concat()
    }

    fn field(name: &str, ty: TypeDesc) -> FieldDesc {
        FieldDesc {
            name: name.into(),
            ty,
            has_default: false,
        }
    }

    /// Class 7: version 1 `{ name: String, tags: Vec<u16> }`, version 2
    /// `{ id: u32, name: String, note: Option<u8>, tags: Vec<u16> }`,
    /// version 3 `{ name: String }` (no list).
    fn catalog() -> Catalog {
        let mut cat = Catalog::default();
        let tags = field("tags", TypeDesc::Seq(Box::new(TypeDesc::U16)));
        cat.schemas
            .insert((7, 1), vec![field("name", TypeDesc::String), tags.clone()]);
        cat.schemas.insert(
            (7, 2),
            vec![
                field("id", TypeDesc::U32),
                field("name", TypeDesc::String),
                field("note", TypeDesc::Option(Box::new(TypeDesc::U8))),
                tags,
            ],
        );
        cat.schemas.insert((7, 3), vec![field("name", TypeDesc::String)]);
        cat.schemas.insert(
            (7, 4),
            vec![
                field("tags", TypeDesc::Seq(Box::new(TypeDesc::U16))),
                field("name", TypeDesc::String),
            ],
        );
        cat
    }

    /// `record` with `e` made: its writes, then its bytes at the end.
    fn edited(record: &[u8], e: &RecordEdit) -> Vec<u8> {
        let mut r = record.to_vec();
        for (at, bytes) in &e.writes {
            r[*at..at + bytes.len()].copy_from_slice(bytes);
        }
        r.extend_from_slice(&e.append);
        r
    }

    #[test]
    fn an_append_is_an_edit_in_place_only_where_the_list_ends_the_record() {
        let a = ListAppend::new(tags_field(), u16s(&[9]), 1).unwrap();
        let v2 = record_v2("q", &[1, 2]);
        let e = a.edit(&v2, v2.len() as u64).expect("last field, same count width");
        assert_eq!(edited(&v2, &e), a.apply(&v2).unwrap());
        // Not the last field (version 4): no edit, though apply works.
        let mut w = Writer::new();
        w.put(&header(7, 4));
        w.put_len(1);
        w.put(&u16s(&[5]));
        w.put_len(1);
        w.put(b"z");
        let v4 = w.into_bytes();
        assert!(a.edit(&v4, v4.len() as u64).is_none());
        assert!(a.apply(&v4).is_ok());
        // A count whose width grows (127 -> 128), a version without the
        // field, another class, a head cut before the count: no edit.
        let long = record_v2("q", &[0; 127]);
        assert!(a.edit(&long, long.len() as u64).is_none());
        let v3 = [&header(7, 3)[..], &[1, b'z']].concat();
        assert!(a.edit(&v3, v3.len() as u64).is_none());
        let other = [&header(8, 2)[..], &v2[6..]].concat();
        assert!(a.edit(&other, other.len() as u64).is_none());
        assert!(a.edit(&v2[..8], v2.len() as u64).is_none());
    }

    fn tags_field() -> Arc<ListField> {
        Arc::new(ListField::of(&catalog(), 7, "tags", &TypeDesc::U16).unwrap())
    }

    fn u16s(v: &[u16]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// A version-2 record with `tags`, and a trailing field's worth of
    /// nothing (the list is last).
    fn record_v2(name: &str, tags: &[u16]) -> Vec<u8> {
        let mut w = Writer::new();
        w.put(&header(7, 2));
        w.put(&5u32.to_le_bytes());
        w.put_len(name.len() as u64);
        w.put(name.as_bytes());
        w.put(&[1, 9]);
        w.put_len(tags.len() as u64);
        w.put(&u16s(tags));
        w.into_bytes()
    }

    fn record_v1(name: &str, tags: &[u16]) -> Vec<u8> {
        let mut w = Writer::new();
        w.put(&header(7, 1));
        w.put_len(name.len() as u64);
        w.put(name.as_bytes());
        w.put_len(tags.len() as u64);
        w.put(&u16s(tags));
        w.into_bytes()
    }

    #[test]
    fn appends_at_the_end_of_the_list_in_every_version_that_has_it() {
        let f = tags_field();
        let a = ListAppend::new(f.clone(), u16s(&[7, 8]), 2).unwrap();
        assert_eq!(a.apply(&record_v2("ab", &[1])).unwrap(), record_v2("ab", &[1, 7, 8]));
        assert_eq!(a.apply(&record_v1("", &[])).unwrap(), record_v1("", &[7, 8]));
        let v3 = [header(7, 3), vec![1, b'x']].concat();
        let e = a.apply(&v3).unwrap_err();
        assert!(e.contains("schema version 3") && e.contains("tags"), "{e}");
        let other = [header(8, 1), vec![0, 0]].concat();
        assert!(a.apply(&other).unwrap_err().contains("class 8"));
        let cut = &record_v2("ab", &[1, 2])[..12];
        assert!(a.apply(cut).is_err(), "a damaged record is refused");
    }

    #[test]
    fn elements_are_checked_and_a_missing_field_is_named() {
        let f = tags_field();
        assert!(
            ListAppend::new(f.clone(), vec![1, 2, 3], 2).is_err(),
            "3 bytes are not two u16s"
        );
        assert!(ListAppend::new(f.clone(), u16s(&[1, 2]), 1).is_err(), "bytes left over");
        assert!(ListAppend::new(f, vec![], u64::MAX).is_err(), "a hostile count");
        let e = ListField::of(&catalog(), 7, "name", &TypeDesc::U16).unwrap_err();
        assert!(e.to_string().contains("no field name of type Vec<u16>"), "{e}");
    }

    #[test]
    fn an_append_from_the_wire_is_placed_by_the_servers_catalog() {
        use crate::catalog::encode_type_desc;
        let cat = catalog();
        let mut fields = HashMap::new();
        let u16_ty = encode_type_desc(&TypeDesc::U16);
        let a = ListAppend::from_wire(&cat, &mut fields, 7, "tags", &u16_ty, 1, u16s(&[9])).unwrap();
        assert_eq!(a.apply(&record_v1("q", &[1])).unwrap(), record_v1("q", &[1, 9]));
        assert_eq!((a.count(), a.elems(), a.field().name()), (1, &u16s(&[9])[..], "tags"));
        // The field is placed once per class, name and type.
        ListAppend::from_wire(&cat, &mut fields, 7, "tags", &u16_ty, 2, u16s(&[1, 2])).unwrap();
        assert_eq!(fields.len(), 1);
        // A type the catalog does not give the field, a damaged type, a
        // class without it, elements that are not of the type: refused.
        let u32_ty = encode_type_desc(&TypeDesc::U32);
        let e = ListAppend::from_wire(&cat, &mut fields, 7, "tags", &u32_ty, 1, vec![0; 4]).unwrap_err();
        assert!(e.to_string().contains("Vec<u32>"), "{e}");
        let e = ListAppend::from_wire(&cat, &mut fields, 7, "tags", &[99], 1, vec![0; 2]).unwrap_err();
        assert!(e.to_string().contains("element type"), "{e}");
        let e = ListAppend::from_wire(&cat, &mut fields, 7, "tags", &[3, 3], 1, vec![0; 2]).unwrap_err();
        assert!(e.to_string().contains("element type"), "{e}");
        assert!(ListAppend::from_wire(&cat, &mut fields, 8, "tags", &u16_ty, 1, vec![0; 2]).is_err());
        assert!(ListAppend::from_wire(&cat, &mut fields, 7, "tags", &u16_ty, 2, vec![0; 2]).is_err());
    }

    proptest! {
        /// Against a model: appending to a record is the record of the list
        /// with the elements added, whatever the list's length (counts
        /// across LEB128 widths), and the growth stays within the bound.
        #[test]
        fn an_append_is_the_record_of_the_longer_list(
            name in "[a-z]{0,20}",
            tags in proptest::collection::vec(any::<u16>(), 0..300),
            more in proptest::collection::vec(any::<u16>(), 1..200),
        ) {
            let a = ListAppend::new(tags_field(), u16s(&more), more.len() as u64).unwrap();
            let before = record_v2(&name, &tags);
            let after = a.apply(&before).unwrap();
            let all: Vec<u16> = tags.iter().chain(&more).copied().collect();
            prop_assert_eq!(&after, &record_v2(&name, &all));
            prop_assert!(after.len() - before.len() <= a.max_growth());
        }

        /// An edit in place, given any head of the record, makes exactly
        /// the record `apply` makes, and is offered whenever the head holds
        /// the count and its width stays.
        #[test]
        fn an_edit_in_place_makes_what_apply_makes(
            name in "[a-z]{0,20}",
            tags in proptest::collection::vec(any::<u16>(), 0..300),
            more in proptest::collection::vec(any::<u16>(), 1..200),
            cut in any::<prop::sample::Index>(),
        ) {
            let a = ListAppend::new(tags_field(), u16s(&more), more.len() as u64).unwrap();
            let before = record_v2(&name, &tags);
            let head = &before[..cut.index(before.len() + 1)];
            if let Some(e) = a.edit(head, before.len() as u64) {
                prop_assert_eq!(edited(&before, &e), a.apply(&before).unwrap());
            }
            let same_width = len_size(tags.len() as u64) == len_size((tags.len() + more.len()) as u64);
            prop_assert_eq!(a.edit(&before, before.len() as u64).is_some(), same_width);
        }
    }
}

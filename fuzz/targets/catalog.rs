//! The catalog's decoders on arbitrary bytes: a schema (field names, flags,
//! nested type descriptors), and a whole catalog — the input's entries are
//! written into the classes, indexes and roots trees of a fresh database,
//! which is then opened (loading every class and schema), a type registered
//! (evolution rules, index set-up) and used (a root, an index query, an
//! insert). Every step may fail, none may panic.
//!
//! Input: byte 0 bit 0 says whether to build a database; then the schema
//! bytes are the whole input after byte 0; the database entries are read
//! from the same bytes as `tree (u8: 0 roots, 1 classes, 2 indexes)`,
//! `key length (u8)`, key, `value length (u8)`, value, repeated.

use cairn::fuzzing::{decode_schema, encode_schema};
use cairn::storage::btree::BTree;
use cairn::storage::{Db, DbOptions, PageId};
use cairn::{Database, Index, Options, Persistent};

/// The type registered against the fuzzed catalog.
#[derive(Persistent, Debug, Clone)]
pub struct Part {
    #[cairn(index)]
    pub id: u32,
    pub name: String,
}

const BY_ID: Index<u32, Part> = Index::on("id");

/// Runs the target on one input; panics only on a bug.
pub fn run(data: &[u8]) {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    if let Ok(fields) = decode_schema(body) {
        let again = decode_schema(&encode_schema(&fields)).expect("a re-encoded schema decodes");
        assert_eq!(again, fields);
    }
    if flags & 1 == 1 {
        with_database(body);
    }
}

/// The entries of `body`: (tree, key, value).
pub fn entries(body: &[u8]) -> Vec<(u8, &[u8], &[u8])> {
    fn take<'a>(n: usize, rest: &mut &'a [u8]) -> Option<&'a [u8]> {
        let (a, b) = rest.split_at_checked(n)?;
        *rest = b;
        Some(a)
    }
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(head) = take(2, &mut rest) {
        let (tree, klen) = (head[0] % 3, usize::from(head[1]));
        let Some(key) = take(klen, &mut rest) else { break };
        let Some(vlen) = take(1, &mut rest) else { break };
        let Some(value) = take(usize::from(vlen[0]), &mut rest) else {
            break;
        };
        out.push((tree, key, value));
    }
    out
}

fn with_database(body: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut opts = Options::default();
    opts.storage.background = false;
    opts.storage.volume.buffer_frames = 64;
    opts.cache_bytes = 1 << 20;
    Database::open_with(&path, opts.clone()).unwrap().close().unwrap();
    write_entries(&path, &opts.storage, body);
    let Ok(db) = Database::open_with(&path, opts) else {
        return;
    };
    if db.register::<Part>().is_err() {
        return;
    }
    if let Ok(mut tx) = db.begin() {
        let _ = tx.root::<Part>("part");
        let _ = tx.find(&BY_ID, &1);
        if let Ok(r) = tx.create(Part {
            id: 1,
            name: "fuzz".into(),
        }) {
            let _ = tx.set_root("part", &r);
            let _ = tx.find(&BY_ID, &1);
        }
        let _ = tx.commit();
    };
}

/// Writes the input's entries into the catalog trees named by the meta
/// object (the first object of `cairn.system`), replacing equal keys.
pub fn write_entries(path: &std::path::Path, opts: &DbOptions, body: &[u8]) {
    let db = Db::open(path, opts).unwrap();
    let system = db.group("cairn.system").unwrap();
    let mut txn = db.begin().unwrap();
    let meta = txn.scan_all(system).unwrap()[0];
    let m = txn.read(meta).unwrap();
    let root = |i: usize| PageId(u32::from_le_bytes(m[8 + 4 * i..12 + 4 * i].try_into().unwrap()));
    let trees: Vec<BTree> = (0..3).map(|i| BTree::open(&mut txn, root(i)).unwrap()).collect();
    for (tree, key, value) in entries(body) {
        let t = trees[usize::from(tree)];
        // Keys and values of up to 255 bytes each fit a 4 KiB page; an
        // entry the tree refuses (an empty key) is just left out.
        let _ = t.delete(&mut txn, key, None);
        let _ = t.insert(&mut txn, key, value);
    }
    txn.commit().unwrap();
    db.close().unwrap();
}

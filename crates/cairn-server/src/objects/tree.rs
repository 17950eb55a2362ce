//! The B+-tree requests of object sessions: the server walks the tree for
//! the client (TREE_OPEN, TREE_CREATE, TREE_APPLY, TREE_GET and
//! TREE_GET_OBJECTS, TREE_GET_FOR_UPDATE, TREE_RANGE, TREE_DESTROY), with rights on the leaves
//! that enclose a lookup's key.

use super::*;
use crate::callbacks::right_key;
use cairn_net::rights::RightKey;

/// The B+-tree requests: the tree is opened (and so checked) from its root
/// for each, in the client's transaction.
pub(super) fn tree(core: &Core, state: &SessionState, req: ObjectRequest) -> Result<Vec<u8>, Error> {
    let Some(txn) = req.txn() else {
        return Err(Error::Internal("not a tree request".into()));
    };
    let (_, t) = state.txn_or_begin(&core.db, txn)?;
    let mut t = lock(&t);
    let t = &mut *t;
    match req {
        ObjectRequest::TreeOpen { root, .. } => {
            open_client_tree(t, root)?;
            let group = t.group_of_page(PageId(root))?.map_or(NO_GROUP, |g| g.0);
            Ok(group.to_le_bytes().to_vec())
        }
        ObjectRequest::TreeCreate { group, unique, .. } => {
            let tree = BTree::create(t, GroupId(group), unique)?;
            Ok(tree.root().0.to_le_bytes().to_vec())
        }
        ObjectRequest::TreeApply { root, ops, .. } => tree_apply(t, root, &ops),
        ObjectRequest::TreeGet {
            root,
            limit,
            key,
            objects,
            ..
        } => tree_get(core, state, t, root, limit, &key, objects),
        ObjectRequest::TreeGetForUpdate { root, keys, .. } => tree_get_for_update(core, t, root, &keys),
        ObjectRequest::TreeRange {
            root,
            limit,
            lo,
            hi,
            after,
            ..
        } => tree_range(core, t, root, limit, &lo, &hi, after.as_deref()),
        ObjectRequest::TreeDestroy { root, .. } => {
            let tree = open_client_tree(t, root)?;
            t.tree_destroy(tree)?;
            Ok(Vec::new())
        }
        _ => Err(Error::Internal("not a tree request".into())),
    }
}

/// TREE_APPLY: the changes made; the reply lists the pages they changed,
/// which are the client's to know: it drops the lookups it keeps under
/// them (its own changes are not called back).
fn tree_apply(t: &mut Txn, root: u32, ops: &[TreeOp]) -> Result<Vec<u8>, Error> {
    let tree = open_client_tree(t, root)?;
    if t.locks_key_ranges(&tree) {
        // Kept by the transaction, locked by key, applied at its commit:
        // no page changes now (and no lookup is kept under a leaf's right
        // on a server that locks key ranges).
        for op in ops {
            match op {
                TreeOp::Insert { key, value } => {
                    t.tree_insert(&tree, key, value)?;
                }
                TreeOp::Delete { key, value } => {
                    t.tree_delete(&tree, key, value.as_deref())?;
                }
            }
        }
        return Ok(encode_pages(&[]));
    }
    let mut changed = Vec::new();
    let mut rec = Recording {
        inner: t,
        pages: &mut changed,
    };
    for op in ops {
        match op {
            TreeOp::Insert { key, value } => {
                tree.insert(&mut rec, key, value)?;
            }
            TreeOp::Delete { key, value } => {
                tree.delete(&mut rec, key, value.as_deref())?;
            }
        }
    }
    let mut pages: Vec<u32> = changed.iter().map(|p| p.0).collect();
    pages.sort_unstable();
    pages.dedup();
    Ok(encode_pages(&pages))
}

/// TREE_GET and TREE_GET_OBJECTS: the key's values (at most `limit`),
/// rights on the leaves that enclose the key, and for TREE_GET_OBJECTS the
/// object each value names.
fn tree_get(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    root: u32,
    limit: u32,
    key: &[u8],
    objects: bool,
) -> Result<Vec<u8>, Error> {
    let tree = open_client_tree(t, root)?;
    let key_ranges = t.locks_key_ranges(&tree);
    let (values, guards) = if key_ranges {
        let Some(l) = t.tree_lookup_guarded(&tree, key, limit as usize, true)? else {
            return Err(Error::Internal("a lookup that may wait said it would".into()));
        };
        (l.values, l.complete.then_some(l.gaps))
    } else {
        let mut values = Vec::new();
        t.tree_get_each(&tree, key, |v| {
            values.push(v.to_vec());
            values.len() < limit as usize
        })?;
        (values, None)
    };
    let bytes: usize = values.iter().map(|v| v.len() + 8).sum();
    // No "more" in this reply: values past the message bound are
    // an error, not left out (a range reads any number).
    if bytes > core.reply_bytes_max {
        return Err(Error::LimitExceeded {
            what: "bytes of one key's values in a TREE_GET reply (ask for fewer, or read them as a range)",
            value: bytes as u64,
            limit: core.reply_bytes_max as u64,
        });
    }
    let rights = if values.is_empty() || !(state.object || (core.db.locks_key_ranges() && !state.file)) {
        // (A page session keeps a lookup only under gap rights: a
        // page-locking server's leaf rights are the object client's. A
        // file session keeps none.)
        Vec::new()
    } else if key_ranges {
        guards.map_or_else(Vec::new, |gaps| register_all(core, state, &gaps))
    } else if t.is_snapshot() && core.db.locks_key_ranges() {
        snapshot_gap_rights(core, state, &tree, key, limit, &values)?
    } else {
        leaf_rights(core, state, t, &tree, key, values.len())?
    };
    let objects = if objects {
        values_objects(core, state, t, root, &values, bytes)?
    } else {
        Vec::new()
    };
    Ok(ValuesAndObjects {
        values,
        objects,
        rights,
    }
    .encode())
}

/// TREE_GET_FOR_UPDATE: the first value of each key, read to be changed
/// next. Under page locking the root and each key's leaf are locked for
/// update (U: readers share it, another such lookup waits) before they are
/// read, the leaves in key order (one global order); under key-range locking the
/// keys are locked as TREE_GET locks them. No right is granted: the client
/// does not keep the answer. Run again after a parked wait, it finds the
/// leaves it locked held and goes on.
fn tree_get_for_update(core: &Core, t: &mut Txn, root: u32, keys: &[Vec<u8>]) -> Result<Vec<u8>, Error> {
    if !core.db.locks_key_ranges() {
        // The root first, before anything reads it (opening the tree does):
        // every lookup reads it (S to the end, as every page of its path),
        // and a split the transaction's insert makes next takes X on it —
        // under S, two such transactions each wait for the other's lookup.
        // Under U they queue at the root; readers still share it.
        t.lock_to_read_for_update(PageId(root))?;
    }
    let tree = open_client_tree(t, root)?;
    let key_ranges = t.locks_key_ranges(&tree);
    // Each key's leaf, locked in key order (then read from, not descended
    // to again).
    let mut leaves = std::collections::HashMap::new();
    if !key_ranges {
        let mut ordered: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        ordered.sort_unstable();
        ordered.dedup();
        for key in ordered {
            leaves.insert(key, tree.leaf_of_for_update(t, key)?);
        }
    }
    let mut firsts = Vec::with_capacity(keys.len());
    let mut bytes = 4;
    for key in keys {
        let first = match leaves.get(key.as_slice()) {
            Some(&leaf) => {
                let mut first = None;
                tree.get_each_in(t, leaf, key, |v| {
                    first = Some(v.to_vec());
                    false
                })?;
                first
            }
            None => {
                let Some(l) = t.tree_lookup_guarded(&tree, key, 1, true)? else {
                    return Err(Error::Internal("a lookup that may wait said it would".into()));
                };
                l.values.into_iter().next()
            }
        };
        bytes += 5 + first.as_ref().map_or(0, Vec::len);
        if bytes > core.reply_bytes_max {
            return Err(Error::LimitExceeded {
                what: "bytes of a TREE_GET_FOR_UPDATE reply (ask for fewer keys)",
                value: bytes as u64,
                limit: core.reply_bytes_max as u64,
            });
        }
        firsts.push(first);
    }
    Ok(encode_firsts(&firsts))
}

/// The OBJ_FETCH part of the object each value (an OID) names, read under
/// S with its right to cache it; past the message bound (`bytes` of the
/// reply so far) the rest go as their lengths alone (read by range, or
/// fetched, when wanted).
fn values_objects(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    root: u32,
    values: &[Vec<u8>],
    mut bytes: usize,
) -> Result<Vec<Vec<u8>>, Error> {
    let mut parts = Vec::with_capacity(values.len());
    // A snapshot's: S taken for a moment by a transaction of the
    // session's own (`right_if_current`), begun on the first object.
    let mut locker = None;
    let page_size = t.page_size();
    for v in values {
        let o: [u8; OID_BYTES] = v[..].try_into().map_err(|_| Error::Corrupt {
            page: PageId(root),
            reason: format!("a value of {} bytes in a tree of OIDs", v.len()),
        })?;
        let (len, mut whole) = read_one(t, oid_of(&o), false)?;
        let size = whole.as_ref().map_or(0, Vec::len) + 64;
        if bytes + size > core.reply_bytes_max {
            whole = None;
        } else {
            bytes += size;
        }
        let right = if t.is_snapshot() {
            right_if_current(core, state, &mut locker, page_size, oid_of(&o), whole.as_deref())
        } else {
            grant(core, state, t, oid_of(&o), &whole)
        };
        parts.push(fetched_part(&o, len, whole, right));
    }
    Ok(parts)
}

/// TREE_RANGE: entries from `lo` to `hi` (after the entry `after` of the
/// key `lo` names, when resuming), at most `limit` and within the message
/// bound; "more" tells the client to ask again from the last entry sent.
fn tree_range(
    core: &Core,
    t: &mut Txn,
    root: u32,
    limit: u32,
    lo: &std::ops::Bound<Vec<u8>>,
    hi: &std::ops::Bound<Vec<u8>>,
    after: Option<&[u8]>,
) -> Result<Vec<u8>, Error> {
    let tree = open_client_tree(t, root)?;
    let mut entries = Vec::new();
    let mut bytes = 0usize;
    let mut more = false;
    let resume_key = match (lo, after) {
        (std::ops::Bound::Included(k), Some(_)) => Some(k.clone()),
        _ => None,
    };
    // Through the transaction: under key-range locking every entry sent is
    // locked with the gap below it, and a range read to its end locks the
    // gap past it; else the leaves read are locked.
    t.tree_scan(
        &tree,
        lo.as_ref().map(|k| &k[..]),
        hi.as_ref().map(|k| &k[..]),
        |k, v| {
            if let (Some(rk), Some(after)) = (&resume_key, after) {
                if k == &rk[..] && v <= after {
                    return true;
                }
            }
            // Past the count asked for or the message bound: the
            // client asks again from the last entry sent.
            let size = k.len() + v.len() + 8;
            if entries.len() == limit as usize || (!entries.is_empty() && bytes + size > core.reply_bytes_max) {
                more = true;
                return false;
            }
            bytes += size;
            entries.push((k.to_vec(), v.to_vec()));
            true
        },
    )?;
    Ok(encode_entries(&entries, more))
}

/// Rights on every one of `keys` (whose locks are held now), or none if
/// there are more than a reply names or any is refused (those granted go
/// back).
fn register_all(core: &Core, state: &SessionState, keys: &[Resource]) -> Vec<(RightKey, u64)> {
    if keys.len() > LOOKUP_LEAVES_MAX {
        return Vec::new();
    }
    let epochs = core.callbacks.register_many(state.client, keys);
    if epochs.contains(&0) {
        let granted: Vec<(Resource, u64)> = keys
            .iter()
            .zip(&epochs)
            .filter(|(_, e)| **e != 0)
            .map(|(k, e)| (*k, *e))
            .collect();
        core.callbacks.give_back(state.client, &granted);
        return Vec::new();
    }
    keys.iter()
        .zip(epochs)
        .filter_map(|(k, e)| Some((right_key(*k)?, e)))
        .collect()
}

/// Rights on the gaps that guard a snapshot's lookup of `key` on a server
/// that locks key ranges, when its answer (`values`) is the present's too:
/// a transaction of the session's own ([`momentary_locker`]) looks the key
/// up again under its locks without waiting, and holds them until the
/// request ends, so no writer comes between the answer and its rights.
/// None if it would wait, or finds another answer.
fn snapshot_gap_rights(
    core: &Core,
    state: &SessionState,
    tree: &BTree,
    key: &[u8],
    limit: u32,
    values: &[Vec<u8>],
) -> Result<Vec<(RightKey, u64)>, Error> {
    let mut locker = None;
    let l = momentary_locker(core, state, &mut locker)?;
    Ok(match l.tree_lookup_guarded(tree, key, limit as usize, false)? {
        Some(now) if now.complete && now.values == values => register_all(core, state, &now.gaps),
        _ => Vec::new(),
    })
}

/// Rights on the leaves that enclose `key` ([`BTree::leaves_enclosing`]:
/// any change to its entries takes X on one of them; their locks are held
/// now), when they hold no more entries of it than were answered; none
/// otherwise, or if any right is refused (those granted go back). At a
/// snapshot, only if every such leaf the snapshot read is the leaf's
/// committed image ([`leaves_current`]): the answer is then the present's
/// too. Never on a server that locks key ranges: a commit there changes
/// the leaves under no page lock (its lookups are kept under rights on
/// gaps instead).
fn leaf_rights(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    tree: &BTree,
    key: &[u8],
    answered: usize,
) -> Result<Vec<(RightKey, u64)>, Error> {
    if core.db.locks_key_ranges() {
        return Ok(Vec::new());
    }
    let Some((leaves, count)) = tree.leaves_enclosing(t, key, LOOKUP_LEAVES_MAX)? else {
        return Ok(Vec::new());
    };
    if count != answered {
        return Ok(Vec::new());
    }
    // A snapshot's: S on the leaves for the rest of this request, so none
    // changes before its right is registered (and a writer then calls it
    // back).
    let mut locker = None;
    if t.is_snapshot() && !leaves_current(core, state, t, &leaves, &mut locker)? {
        return Ok(Vec::new());
    }
    let keys: Vec<Resource> = leaves.iter().map(|l| Resource::Page(*l)).collect();
    Ok(register_all(core, state, &keys))
}

/// Whether each of `leaves`, as snapshot `t` read it, is the leaf's
/// committed image (the same LSN) and S on it can be taken at once by
/// `locker` (a transaction of the session's own, begun here; it holds the
/// locks until it drops, at the end of the request): as the page server's
/// snapshot fetch judges a page, so a snapshot's lookup is kept for later
/// transactions when the leaves have not changed since it began. Never
/// waits.
fn leaves_current(
    core: &Core,
    state: &SessionState,
    t: &mut Txn,
    leaves: &[PageId],
    locker: &mut Option<Txn>,
) -> Result<bool, Error> {
    let l = momentary_locker(core, state, locker)?;
    for &leaf in leaves {
        if !matches!(l.try_lock_resource(Resource::Page(leaf), LockMode::S), Ok(true)) {
            return Ok(false);
        }
        let seen = cairn_storage::page::lsn(&t.snapshot_page(leaf)?);
        if cairn_storage::page::lsn(&core.db.read_committed(leaf)?) != seen {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Opens the B+-tree a client names by its root page. A page that is not a
/// tree's root — past the volume, of another kind, a node below a root — is
/// the client's mistake (INVALID), never reported as damage: only a page
/// that is a root and then fails to read is [`Error::Corrupt`].
fn open_client_tree(t: &mut Txn, root: u32) -> Result<BTree, Error> {
    use cairn_storage::access::PageAccess;
    let id = PageId(root);
    if root == 0 || root >= cairn_storage::record::object::ObjectSpace::page_count(t) {
        return Err(Error::InvalidArgument(format!(
            "page {id} names no B+-tree root: it is outside the volume"
        )));
    }
    // The header only: a whole-node check here cost every TREE_GET ~6 µs
    // (the adaptive client's warm lookups 1.09×); the operation checks the
    // nodes it reads.
    let is_root = PageAccess::read(t, id, cairn_storage::btree::is_root_page)?;
    if !is_root {
        return Err(Error::InvalidArgument(format!(
            "page {id} is not the root of a B+-tree"
        )));
    }
    BTree::open(t, id)
}

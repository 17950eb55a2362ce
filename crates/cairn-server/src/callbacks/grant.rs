//! Granting rights to cache: registering a right (and its epoch) when a
//! client fetches under a lock, within the table's bound and never while
//! another client's writer is marked on the key, and taking rights a client
//! gives back unasked.

use cairn_storage::lock::Resource;
use cairn_storage::ClientId;

use super::{lock, right_key, Callbacks};

impl Callbacks {
    /// Whether `client` holds a right to cache `key` now.
    pub fn has_right(&self, client: ClientId, key: Resource) -> bool {
        lock(&self.table)
            .by_client
            .get(&client)
            .is_some_and(|keys| keys.contains(&key))
    }

    /// Gives `client` the right to cache `key` (a page or an object; its
    /// transaction holds a lock on it now) and returns the right's epoch,
    /// or 0 if a writer of another client is calling it back or locking it
    /// (or, for an object, its page), or if the table holds its maximum of
    /// rights (a right already held is renewed even then).
    pub fn register(&self, client: ClientId, key: Resource) -> u64 {
        self.register_many(client, &[key])[0]
    }

    /// [`Callbacks::register`] for each of `keys` under one lock (the
    /// objects of a page an adaptive client fetches together): the epochs
    /// in order.
    pub fn register_many(&self, client: ClientId, keys: &[Resource]) -> Vec<u64> {
        let mut t = lock(&self.table);
        let (mut granted, mut refused) = (0, 0);
        let epochs = keys
            .iter()
            .map(|&key| {
                if right_key(key).is_none() || t.other_writer(client, key) {
                    return 0;
                }
                if !t.no_rights.is_empty() && t.no_rights.contains(&client) {
                    return 0;
                }
                let renewal = t.entries.get(&key).is_some_and(|r| r.cachers.contains_key(&client));
                if !renewal && t.rights >= self.rights_max {
                    // The table is full: the page is served under the lock
                    // alone and the client revalidates it by LSN next time
                    // (correct, one round trip more); a right given up
                    // makes room again.
                    refused += 1;
                    return 0;
                }
                t.next_epoch += 1;
                let epoch = t.next_epoch;
                t.entries.entry(key).or_default().cachers.insert(client, epoch);
                t.by_client.entry(client).or_default().insert(key);
                if let Resource::Object(o) = key {
                    t.objects_on.entry(o.page).or_default().insert(o);
                }
                if let Some(root) = key.tree() {
                    t.gaps_on.entry(root).or_default().insert(key);
                }
                if !renewal {
                    t.rights += 1;
                }
                granted += 1;
                epoch
            })
            .collect();
        drop(t);
        if granted + refused > 0 {
            let mut st = lock(&self.stats);
            st.rights_granted += granted;
            st.rights_refused_full += refused;
        }
        epochs
    }

    /// `client` gives its rights to cache `rights` back unasked (it no
    /// longer caches those pages): each goes if its epoch is still the one
    /// named (a right renewed since stays). A callback already sent for
    /// one of them is answered as usual (the client answers "dropped").
    pub fn give_back(&self, client: ClientId, rights: &[(Resource, u64)]) {
        let mut t = lock(&self.table);
        let before = t.rights;
        for &(key, epoch) in rights {
            t.unregister(client, key, Some(epoch));
        }
        let n = (before - t.rights) as u64;
        drop(t);
        lock(&self.stats).rights_given_back += n;
    }
}

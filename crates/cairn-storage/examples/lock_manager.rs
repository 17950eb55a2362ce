//! Times the lock manager alone, in one thread: transactions that each
//! take 1,000 new locks and release them all, as a reader under object or
//! key-range locking does. Prints nanoseconds per lock, release included
//! (docs/benchmarks.md, "Cheaper locks").
//!
//! `cargo run --release -p cairn-storage --example lock_manager`

use std::time::Instant;

use cairn_storage::lock::{LockManager, LockMode, LockOptions, LockOwner, Resource};
use cairn_storage::{ClientId, Oid, PageId, SlotIdx, TxnId, Uniq};

const LOCKS: u32 = 1_000;
const TXNS: u64 = 3_000;

/// Runs `TXNS` transactions of `LOCKS` calls of `take` and prints the time
/// per call.
fn time(name: &str, take: impl Fn(&LockManager, LockOwner, u32)) {
    let m = LockManager::new(LockOptions::default());
    let start = Instant::now();
    for t in 0..TXNS {
        let owner = LockOwner::new(ClientId(0), TxnId(t + 1));
        for i in 0..LOCKS {
            take(&m, owner, i);
        }
        m.release_all(owner);
    }
    let ns = start.elapsed().as_nanos() as f64 / (TXNS * u64::from(LOCKS)) as f64;
    println!("{name:28} {ns:6.1} ns per lock, release included");
}

fn main() {
    let object = |i: u32| Oid {
        page: PageId(i / 20 + 7),
        slot: SlotIdx((i % 20) as u16),
        uniq: Uniq(1),
    };
    time("S on 1,000 objects", |m, o, i| {
        m.lock(o, Resource::Object(object(i)), LockMode::S)
            .expect("no conflict");
    });
    time("S on 1,000 pages", |m, o, i| {
        m.lock(o, Resource::Page(PageId(i + 7)), LockMode::S)
            .expect("no conflict");
    });
    time("S on 10 pages, 100 times", |m, o, i| {
        m.lock(o, Resource::Page(PageId(i % 10 + 7)), LockMode::S)
            .expect("no conflict");
    });
    time("try S on 1,000 pages", |m, o, i| {
        m.try_lock(o, Resource::Page(PageId(i + 7)), LockMode::S)
            .expect("no conflict");
    });
}

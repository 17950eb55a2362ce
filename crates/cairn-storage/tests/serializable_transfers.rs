//! Serializability: many threads move money between accounts in concurrent
//! transactions (deadlock victims retry) while auditors sum every account in
//! read-only transactions. Every audit, and the final state after a crash and
//! recovery, must see the same total. `CAIRN_TRANSFERS` scales the work.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cairn_storage::volume::VolumeOptions;
use cairn_storage::{Db, DbOptions, Error, GroupId, Oid, Txn};

const ACCOUNTS: usize = 48;
const INITIAL: u64 = 1_000;

fn balance(t: &mut Txn, oid: Oid) -> Result<u64, Error> {
    let b = t.read(oid)?;
    Ok(u64::from_le_bytes(b[..8].try_into().unwrap()))
}

fn account(balance: u64) -> Vec<u8> {
    // 500 bytes: 7 accounts to a page, so transfers contend on pages.
    let mut v = balance.to_le_bytes().to_vec();
    v.resize(500, 0xAB);
    v
}

/// A tiny deterministic generator (xorshift), one per thread.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn is_retryable(e: &Error) -> bool {
    matches!(e, Error::Deadlock { .. } | Error::LockTimeout { .. })
}

#[test]
fn concurrent_transfers_keep_the_total_and_audits_never_see_a_partial_transfer() {
    let transfers: u64 = std::env::var("CAIRN_TRANSFERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let opts = DbOptions {
        volume: VolumeOptions {
            buffer_frames: 64,
            ..VolumeOptions::default()
        },
        lock_timeout: Duration::from_secs(5),
        ..DbOptions::default()
    };
    let db = Db::create(&path, &opts).unwrap();
    let mut t = db.begin().unwrap();
    let accounts: Vec<Oid> = (0..ACCOUNTS)
        .map(|_| t.create(GroupId::DEFAULT, &account(INITIAL)).unwrap())
        .collect();
    t.commit().unwrap();
    let total = INITIAL * ACCOUNTS as u64;
    let retries = AtomicU64::new(0);
    let audits = AtomicU64::new(0);

    std::thread::scope(|s| {
        for w in 0..6u64 {
            let (db, accounts, retries) = (&db, &accounts, &retries);
            s.spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w + 1));
                let mut done = 0;
                while done < transfers {
                    let a = accounts[(rng.next() % ACCOUNTS as u64) as usize];
                    let b = accounts[(rng.next() % ACCOUNTS as u64) as usize];
                    if a == b {
                        continue;
                    }
                    let amount = rng.next() % 50;
                    let attempt = (|| {
                        let mut t = db.begin()?;
                        let ba = balance(&mut t, a)?;
                        let bb = balance(&mut t, b)?;
                        let x = amount.min(ba);
                        t.update(a, &account(ba - x))?;
                        t.update(b, &account(bb + x))?;
                        t.commit()
                    })();
                    match attempt {
                        Ok(()) => done += 1,
                        Err(e) if is_retryable(&e) => {
                            retries.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("transfer failed: {e}"),
                    }
                }
            });
        }
        for _ in 0..2 {
            let (db, accounts, audits, retries) = (&db, &accounts, &audits, &retries);
            s.spawn(move || {
                for _ in 0..transfers / 10 {
                    let attempt = (|| {
                        let mut t = db.begin()?;
                        let mut sum = 0;
                        for &a in accounts {
                            sum += balance(&mut t, a)?;
                        }
                        t.commit()?;
                        Ok::<_, Error>(sum)
                    })();
                    match attempt {
                        Ok(sum) => {
                            assert_eq!(sum, total, "an audit saw money created or destroyed");
                            audits.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if is_retryable(&e) => {
                            retries.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("audit failed: {e}"),
                    }
                }
            });
        }
    });
    assert!(audits.load(Ordering::Relaxed) > 0, "some audits completed");
    let stats = db.stats();
    eprintln!(
        "commits {} retries {} deadlocks {} fsyncs {}",
        stats.commits,
        retries.load(Ordering::Relaxed),
        stats.locks.deadlocks,
        stats.wal.fsyncs
    );
    assert!(stats.commits >= 6 * transfers);

    // Crash (no checkpoint, dirty pages lost) and recover: the total holds.
    drop(db);
    let db = Db::open(&path, &opts).unwrap();
    let mut t = db.begin().unwrap();
    let sum: u64 = accounts.iter().map(|&a| balance(&mut t, a).unwrap()).sum();
    assert_eq!(sum, total);
    t.commit().unwrap();
    db.close().unwrap();
}

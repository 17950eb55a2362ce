//! Creating a database: a crash anywhere during `Db::create` and the first
//! commit, and a leftover log in a new database's directory.

use std::path::Path;

use cairn_storage::check::check_database;
use cairn_storage::io::Vfs;
use cairn_storage::sim::{ImageKind, SimDisk};
use cairn_storage::{Db, GroupId};

use crate::harness::{check_opts, config, crash_candidates, db_path, no_panic, opts, Failures};
use crate::model::{recover_and_check, registry_bytes, Model, State};
use crate::workload::fresh_disk;

/// A crash anywhere while a database is created (its directory included)
/// and its first commit made: once `Db::create` returned and the commit was
/// acknowledged, the commit survives; before that, `Db::open_or_create`
/// gives a working database.
#[test]
fn crash_while_creating_a_database() {
    let cfg = config();
    let mut f = Failures::new("crash_while_creating_a_database", &cfg);
    let run = |disk: &SimDisk, model: &mut Model| {
        let o = opts(disk);
        let db = Db::create(&db_path(), &o).map_err(|e| e.to_string())?;
        model.created = true;
        let mut t = db.begin().map_err(|e| e.to_string())?;
        let oid = t
            .create(GroupId::DEFAULT, &registry_bytes(1))
            .map_err(|e| e.to_string())?;
        model.ever.insert(oid);
        let mut s = State {
            seq: 1,
            registry: Some(oid),
            ..State::default()
        };
        model.in_flight = Some(s.clone());
        t.commit().map_err(|e| e.to_string())?;
        model.acked = std::mem::take(&mut s);
        model.in_flight = None;
        drop(db);
        Ok::<(), String>(())
    };
    let probe = SimDisk::new();
    probe.make_durable_dir(Path::new("/data"));
    probe.record_trace(true);
    run(&probe, &mut Model::default()).expect("creates without faults");
    let trace = probe.trace();
    let points = match cfg.index {
        Some(i) => vec![i],
        None => crash_candidates(&trace, 0),
    };
    let mut images = 0;
    for &at in &points {
        let disk = SimDisk::new();
        disk.make_durable_dir(Path::new("/data"));
        disk.set_crash_at(Some(at));
        let mut model = Model::default();
        let _ = no_panic(|| run(&disk, &mut model));
        disk.crash_now();
        for kind in ImageKind::ALL {
            images += 1;
            let img = disk.image(kind, at);
            let at_s = format!("CAIRN_CRASH_INDEX={at} CAIRN_CRASH_IMAGE={kind}");
            if model.acked.registry.is_some() || model.in_flight.is_some() {
                if let Err(e) = recover_and_check(&img, &model) {
                    f.add_known(
                        e.contains("no such directory").then_some("dir-not-synced"),
                        at_s,
                        format!("crash at op {at} after Db::create returned, image {kind}: {e}"),
                    );
                }
            } else {
                let r = no_panic(|| {
                    let db = Db::open_or_create(&db_path(), &opts(&img))
                        .map_err(|e| format!("open_or_create after a crash during create: {e}"))?;
                    db.close().map_err(|e| e.to_string())?;
                    let report = check_database(&db_path(), &check_opts(&img));
                    if report.is_ok() {
                        Ok(())
                    } else {
                        Err(format!("check: {:?}", report.problems))
                    }
                });
                if let Err(e) = r {
                    f.add_known(
                        e.contains("already exists").then_some("create-retry"),
                        at_s,
                        format!("crash at op {at} during Db::create, image {kind}: {e}"),
                    );
                }
            }
        }
    }
    eprintln!(
        "crash_while_creating_a_database: {} crash points, {images} images recovered, {} failures",
        points.len(),
        f.list.len()
    );
    f.finish();
}

/// A directory holding only a log left behind by an earlier database: a new
/// database created there must not replay it.
#[test]
fn a_new_database_does_not_replay_a_leftover_log() {
    let disk = fresh_disk();
    let o = opts(&disk);
    let db = Db::create(&db_path(), &o).unwrap();
    let mut t = db.begin().unwrap();
    let mut old = Vec::new();
    for i in 0..20u8 {
        old.push(t.create(GroupId::DEFAULT, &vec![i; 700]).unwrap());
    }
    t.commit().unwrap();
    drop(db); // a crash: the objects are only in the log
    for name in ["MANIFEST", "volume.cairn"] {
        disk.remove_file(&db_path().join(name)).unwrap();
    }
    let r = no_panic(|| {
        // Creating over the old log is refused with an error naming it; once
        // it is removed, the new database holds nothing of the old one. And
        // a leftover log that appears later is refused at open.
        match Db::create(&db_path(), &o) {
            Err(cairn_storage::Error::AlreadyExists { path }) if path.ends_with("wal") => {}
            Err(e) => {
                return Err(format!(
                    "create over a leftover log: expected AlreadyExists naming wal/, got {e}"
                ))
            }
            Ok(_) => return Err("create over a leftover log succeeded".into()),
        }
        let wal_dir = db_path().join("wal");
        let segments = disk.list_dir(&wal_dir).map_err(|e| e.to_string())?;
        let saved: Vec<(std::path::PathBuf, Vec<u8>)> = segments
            .iter()
            .map(|n| {
                let p = wal_dir.join(n);
                let f = disk.open(&p, false).unwrap();
                let mut b = vec![0u8; f.len().unwrap() as usize];
                f.read_exact_at(&mut b, 0).unwrap();
                (p, b)
            })
            .collect();
        for (p, _) in &saved {
            disk.remove_file(p).map_err(|e| e.to_string())?;
        }
        let db = Db::create(&db_path(), &o).map_err(|e| format!("create after removing the old log: {e}"))?;
        let mut t = db.begin().map_err(|e| e.to_string())?;
        for oid in &old {
            if let Ok(b) = t.read(*oid) {
                return Err(format!(
                    "object {oid} of the old database reads {} bytes in the new one",
                    b.len()
                ));
            }
        }
        drop(t);
        db.close().map_err(|e| e.to_string())?;
        let report = check_database(&db_path(), &check_opts(&disk));
        if !report.is_ok() {
            return Err(format!("check: {:?}", report.problems));
        }
        // An old segment copied over the new log's segment of the same name:
        // refused at open.
        let (p, b) = saved.first().ok_or("the old database had no log segment")?;
        let f = if disk.exists(p) {
            disk.open(p, false).map_err(|e| e.to_string())?
        } else {
            disk.open(p, true).map_err(|e| e.to_string())?
        };
        f.set_len(0).map_err(|e| e.to_string())?;
        f.write_all_at(b, 0).map_err(|e| e.to_string())?;
        f.sync_data().map_err(|e| e.to_string())?;
        match Db::open(&db_path(), &o) {
            Err(cairn_storage::Error::ForeignLog { .. }) => Ok(()),
            Err(e) => Err(format!("open with a foreign segment: expected ForeignLog, got {e}")),
            Ok(_) => Err("open with a foreign segment succeeded".into()),
        }
    });
    let mut f = Failures::new("a_new_database_does_not_replay_a_leftover_log", &config());
    if let Err(e) = r {
        f.add_known(Some("leftover-wal"), String::new(), e);
    }
    f.finish();
}

//! A small CAD assembly: assemblies contain composite parts, which are
//! graphs of atomic parts. Builds a design, names it, walks it to total the
//! mass, changes one atomic part, and walks it again in a new transaction.
//!
//! ```sh
//! cargo run -p cairn --example cad_assembly -- /tmp/cad.cairn
//! # without a directory: in a temporary one, removed at the end
//! cargo run -p cairn --example cad_assembly
//! # or against a running `cairn serve`:
//! cargo run -p cairn --example cad_assembly -- --connect cairn://127.0.0.1:7411
//! ```

use cairn::{Database, List, Map, Persistent, Ref};

#[derive(Persistent, Debug, Clone)]
struct Point {
    x: f64,
    y: f64,
}

#[derive(Persistent, Debug, Clone)]
struct AtomicPart {
    name: String,
    at: Point,
    mass_g: u32,
    connected: List<Ref<AtomicPart>>,
}

#[derive(Persistent, Debug, Clone)]
struct CompositePart {
    name: String,
    root: Ref<AtomicPart>,
    parts: List<Ref<AtomicPart>>,
    #[cairn(default)]
    notes: Option<String>,
}

#[derive(Persistent, Debug, Clone)]
struct Assembly {
    name: String,
    components: Map<String, Ref<CompositePart>>,
    sub: List<Ref<Assembly>>,
}

fn mass(tx: &mut cairn::Transaction<'_>, a: &Ref<Assembly>) -> cairn::Result<u64> {
    let asm = tx.get(a)?;
    let mut total = 0;
    for c in asm.components.values() {
        let comp = tx.get(c)?;
        for p in comp.parts.iter() {
            total += u64::from(tx.get(p)?.mass_g);
        }
    }
    for s in asm.sub.iter() {
        total += mass(tx, s)?;
    }
    Ok(total)
}

fn main() -> cairn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    // Without a directory named, the database lives in a temporary one,
    // removed at the end (after `db`, declared below it, is dropped).
    let scratch = tempfile::tempdir().expect("a temporary directory");
    // The one line that differs between embedded and client-server.
    let db = if args.get(1).map(String::as_str) == Some("--connect") {
        let url = args.get(2).cloned().unwrap_or_else(|| "cairn://127.0.0.1:7411".into());
        Database::connect(&url, cairn::Options::default())?
    } else {
        let dir = match args.get(1) {
            Some(dir) => std::path::PathBuf::from(dir),
            None => scratch.path().join("cad-example.cairn"),
        };
        let _ = std::fs::remove_dir_all(&dir);
        Database::open(&dir)?
    };
    let mut tx = db.begin()?;
    let mut subs = List::new();
    for s in 0..3 {
        let mut components = Map::new();
        for c in 0..4 {
            // Atomic parts of one composite are clustered near each other.
            let first = tx.create_in(
                "design",
                AtomicPart {
                    name: format!("a{s}.{c}.0"),
                    at: Point { x: 0.0, y: 0.0 },
                    mass_g: 10,
                    connected: List::new(),
                },
            )?;
            let mut parts = List::new();
            parts.push(first.clone());
            for i in 1..20u32 {
                let p = tx.create_near(
                    &first,
                    AtomicPart {
                        name: format!("a{s}.{c}.{i}"),
                        at: Point {
                            x: f64::from(i),
                            y: f64::from(i * 2),
                        },
                        mass_g: 10 + i,
                        connected: List::new(),
                    },
                )?;
                let prev = parts.last().cloned().expect("one part at least");
                tx.update(&prev, |a| a.connected.push(p.clone()))?;
                parts.push(p);
            }
            let comp = tx.create_near(
                &first,
                CompositePart {
                    name: format!("c{s}.{c}"),
                    root: first.clone(),
                    parts,
                    notes: None,
                },
            )?;
            components.insert(format!("component-{c}"), comp);
        }
        subs.push(tx.create_in(
            "design",
            Assembly {
                name: format!("sub{s}"),
                components,
                sub: List::new(),
            },
        )?);
    }
    let top = tx.create_in(
        "design",
        Assembly {
            name: "top".into(),
            components: Map::new(),
            sub: subs,
        },
    )?;
    tx.set_root("design", &top)?;
    tx.commit()?;

    let mut tx = db.begin()?;
    let top: Ref<Assembly> = tx.root("design")?;
    let before = mass(&mut tx, &top)?;
    // Make one atomic part heavier.
    let sub0 = tx.get(&top)?.sub[0].clone();
    let comp = tx.get(&sub0)?.components["component-0"].clone();
    let root = tx.get(&comp)?.root.clone();
    tx.update(&root, |a| a.mass_g += 1000)?;
    tx.commit()?;

    let mut tx = db.begin()?;
    let after = mass(&mut tx, &top)?;
    tx.commit()?;
    println!("design mass: {before} g, after the change: {after} g");
    assert_eq!(after, before + 1000);
    println!("object cache: {:?}", db.cache_stats());
    db.close()
}

//! `in-memory`: the floor. The same graph in plain Rust structures — parts
//! in a `Vec`, connections as indices into it both ways, a `HashMap` from id
//! to index as the lookup index — with nothing on disk. Its warm times are
//! the physical limit the other systems are measured against.

use std::collections::HashMap;

use crate::oo1::generate::{Check, Graph, PartSpec, CONN_TYPES, PART_TYPES};
use crate::oo1::system::{Counters, Result, System, Visits};

struct Conn {
    to: usize,
    kind: &'static str,
    length: i32,
}

struct Part {
    id: u32,
    kind: &'static str,
    x: i32,
    y: i32,
    build: i64,
    to: Vec<Conn>,
    from: Vec<usize>,
}

/// The in-memory floor.
#[derive(Default)]
pub struct InMemory {
    parts: Vec<Part>,
    by_id: HashMap<u32, usize>,
}

impl InMemory {
    /// An empty system.
    pub fn new() -> InMemory {
        InMemory::default()
    }

    fn index_of(&self, id: u32) -> Result<usize> {
        self.by_id
            .get(&id)
            .copied()
            .ok_or_else(|| crate::oo1::system::Error::Wrong {
                system: "in-memory".into(),
                reason: format!("no part {id}"),
            })
    }

    fn add(&mut self, p: &PartSpec) -> Result<()> {
        let at = self.parts.len();
        let mut to = Vec::with_capacity(p.to.len());
        for c in &p.to {
            let t = self
                .index_of(c.to)
                .or_else(|e| if c.to == p.id { Ok(at) } else { Err(e) })?;
            to.push(Conn {
                to: t,
                kind: CONN_TYPES[usize::from(c.kind)],
                length: c.length,
            });
        }
        self.parts.push(Part {
            id: p.id,
            kind: PART_TYPES[usize::from(p.kind)],
            x: p.x,
            y: p.y,
            build: p.build,
            to,
            from: Vec::new(),
        });
        self.by_id.insert(p.id, at);
        for k in 0..p.to.len() {
            let t = self.parts[at].to[k].to;
            self.parts[t].from.push(at);
        }
        Ok(())
    }

    fn forward(&self, i: usize, hops: u32, v: &mut Visits) {
        let p = &self.parts[i];
        v.visit(p.x, p.y, p.kind);
        if hops > 0 {
            for c in &p.to {
                self.forward(c.to, hops - 1, v);
            }
        }
    }

    fn backward(&self, i: usize, hops: u32, v: &mut Visits) {
        let p = &self.parts[i];
        v.visit(p.x, p.y, p.kind);
        if hops > 0 {
            for &f in &p.from {
                self.backward(f, hops - 1, v);
            }
        }
    }
}

impl System for InMemory {
    fn name(&self) -> &'static str {
        "in-memory"
    }

    fn build(&mut self, graph: &Graph) -> Result<()> {
        self.parts = Vec::with_capacity(graph.parts.len());
        self.by_id = HashMap::with_capacity(graph.parts.len());
        // Connections may point forward, so make every part first.
        for p in &graph.parts {
            self.by_id.insert(p.id, self.parts.len());
            self.parts.push(Part {
                id: p.id,
                kind: p.kind_str(),
                x: p.x,
                y: p.y,
                build: p.build,
                to: Vec::with_capacity(p.to.len()),
                from: Vec::new(),
            });
        }
        for (i, p) in graph.parts.iter().enumerate() {
            for c in &p.to {
                let t = self.index_of(c.to)?;
                self.parts[i].to.push(Conn {
                    to: t,
                    kind: c.kind_str(),
                    length: c.length,
                });
                self.parts[t].from.push(i);
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        Ok(())
    }

    fn open_cold(&mut self) -> Result<()> {
        // Nothing to evict: the floor has no disk and no cache.
        Ok(())
    }

    fn lookup(&mut self, ids: &[u32]) -> Result<Visits> {
        let mut v = Visits::default();
        for &id in ids {
            let p = &self.parts[self.index_of(id)?];
            v.visit(p.x, p.y, p.kind);
        }
        Ok(v)
    }

    fn traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        let mut v = Visits::default();
        self.forward(self.index_of(start)?, hops, &mut v);
        Ok(v)
    }

    fn reverse_traversal(&mut self, start: u32, hops: u32) -> Result<Visits> {
        let mut v = Visits::default();
        self.backward(self.index_of(start)?, hops, &mut v);
        Ok(v)
    }

    fn insert(&mut self, parts: &[PartSpec]) -> Result<Visits> {
        let mut v = Visits::default();
        for p in parts {
            v.visit(p.x, p.y, p.kind_str());
            self.add(p)?;
        }
        Ok(v)
    }

    fn remove(&mut self, parts: &[PartSpec]) -> Result<()> {
        // The batch is the last parts added: undo in reverse order.
        for p in parts.iter().rev() {
            let at = self.index_of(p.id)?;
            debug_assert_eq!(at, self.parts.len() - 1, "removing the newest part");
            let removed = self.parts.pop().expect("the part exists");
            for c in removed.to.iter().rev() {
                if c.to != at {
                    let from = &mut self.parts[c.to].from;
                    let k = from.iter().rposition(|&f| f == at).expect("the reverse link exists");
                    from.remove(k);
                }
            }
            self.by_id.remove(&p.id);
        }
        Ok(())
    }

    fn check(&mut self) -> Result<Check> {
        let mut c = Check::default();
        for p in &self.parts {
            c.add_part(p.id, p.kind, p.x, p.y, p.build);
            for k in &p.to {
                c.add_connection(p.id, self.parts[k.to].id, k.kind, k.length);
            }
            for &f in &p.from {
                c.add_reverse(self.parts[f].id, p.id);
            }
        }
        Ok(c)
    }

    fn size_on_disk_bytes(&self) -> Option<u64> {
        None
    }

    fn counters(&self) -> Counters {
        Counters::default()
    }
}

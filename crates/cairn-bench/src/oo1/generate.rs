//! The OO1 database and the random choices of each run, generated exactly as
//! the paper's section 3 says.
//!
//! From one Park–Miller stream (seed 1 by default):
//!
//! 1. for part 1..=N in order: `type = rand[1..10] − 1` (`"part-type0"` ..
//!    `"part-type9"`), `x = rand[1..100000] − 1`, `y` likewise, `build =`
//!    1990-01-01 plus `rand[1..10 years in seconds] − 1` seconds;
//! 2. for part 1..=N, for each of its 3 connections: the paper's locality rule
//!    ([`connect`]), then `type = rand[1..10] − 1` (`"conn-type0"` ..) and
//!    `length = rand[1..100000] − 1`.
//!
//! The check ([`Check`]) is an order-independent digest of every part and
//! connection, plus one of the reverse links, so any system can compute it
//! from what it stored and every system must print the same line.

use super::rng::ParkMiller;

/// Connections from each part.
pub const CONNECTIONS_PER_PART: usize = 3;
/// Parts added by one insert run.
pub const INSERT_PARTS: usize = 100;
/// Ids fetched by one lookup run.
pub const LOOKUP_IDS: usize = 1_000;
/// Hops of a traversal.
pub const TRAVERSAL_HOPS: u32 = 7;
/// Part visits of a forward traversal, counting duplicates: 1 + 3 + … + 3⁷.
pub const TRAVERSAL_VISITS: u64 = 3_280;
/// The smallest database the locality rule works for (`N / 200 ≥ 1`).
pub const PARTS_MIN: u32 = 200;
/// 1990-01-01T00:00:00Z, the start of the build dates' 10-year range.
pub const BUILD_EPOCH_S: i64 = 631_152_000;
/// Ten years of seconds (the build dates' range).
pub const BUILD_RANGE_S: u32 = 10 * 365 * 86_400;

/// One connection: the part it goes to, its type (0..10) and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnSpec {
    /// The id of the part connected to.
    pub to: u32,
    /// Type index: `"conn-type{kind}"`.
    pub kind: u8,
    /// Length in `[0, 99999]`.
    pub length: i32,
}

/// One part with its three outgoing connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartSpec {
    /// Unique id.
    pub id: u32,
    /// Type index: `"part-type{kind}"`.
    pub kind: u8,
    /// Position, each in `[0, 99999]`.
    pub x: i32,
    /// See `x`.
    pub y: i32,
    /// Build date, seconds since the Unix epoch.
    pub build: i64,
    /// The connections from this part.
    pub to: [ConnSpec; CONNECTIONS_PER_PART],
}

/// The type strings, so systems need not format them.
pub const PART_TYPES: [&str; 10] = [
    "part-type0",
    "part-type1",
    "part-type2",
    "part-type3",
    "part-type4",
    "part-type5",
    "part-type6",
    "part-type7",
    "part-type8",
    "part-type9",
];
/// The connection type strings.
pub const CONN_TYPES: [&str; 10] = [
    "conn-type0",
    "conn-type1",
    "conn-type2",
    "conn-type3",
    "conn-type4",
    "conn-type5",
    "conn-type6",
    "conn-type7",
    "conn-type8",
    "conn-type9",
];

impl PartSpec {
    /// The part's type string.
    pub fn kind_str(&self) -> &'static str {
        PART_TYPES[usize::from(self.kind)]
    }
}

impl ConnSpec {
    /// The connection's type string.
    pub fn kind_str(&self) -> &'static str {
        CONN_TYPES[usize::from(self.kind)]
    }
}

/// The generated database: `parts[i].id == i + 1`.
#[derive(Clone, Debug)]
pub struct Graph {
    /// Every part, in id order.
    pub parts: Vec<PartSpec>,
}

/// What a system holds, reduced to counts and digests; identical for every
/// system that stored the graph correctly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// Parts.
    pub parts: u64,
    /// Connections, counted from their source parts.
    pub connections: u64,
    /// Digest of every part's fields and every connection's fields.
    pub checksum: u64,
    /// Reverse links (counted from their target parts).
    pub reverse_connections: u64,
    /// Digest of the reverse links as (from, to) pairs.
    pub reverse_checksum: u64,
}

impl Check {
    /// Adds a part.
    pub fn add_part(&mut self, id: u32, kind: &str, x: i32, y: i32, build: i64) {
        self.parts += 1;
        let h = fold(
            fold(
                fold(fold(fold(0x5041_5254, u64::from(id)), str_digest(kind)), x as u64),
                y as u64,
            ),
            build as u64,
        );
        self.checksum = self.checksum.wrapping_add(h);
    }

    /// Adds a connection, seen from its source.
    pub fn add_connection(&mut self, from: u32, to: u32, kind: &str, length: i32) {
        self.connections += 1;
        let h = fold(
            fold(
                fold(fold(0x434f_4e4e, u64::from(from)), u64::from(to)),
                str_digest(kind),
            ),
            length as u64,
        );
        self.checksum = self.checksum.wrapping_add(h);
    }

    /// Adds a reverse link: `to` knows it is connected from `from`.
    pub fn add_reverse(&mut self, from: u32, to: u32) {
        self.reverse_connections += 1;
        let h = fold(fold(0x5245_5653, u64::from(from)), u64::from(to));
        self.reverse_checksum = self.reverse_checksum.wrapping_add(h);
    }

    /// The line every system must print identically.
    pub fn line(&self) -> String {
        format!(
            "check: {} parts, {} connections ({} reverse), checksum {:016x}",
            self.parts, self.connections, self.reverse_connections, self.checksum
        )
    }
}

/// SplitMix64's finaliser over `h` and `v`: a good 64-bit mix.
fn fold(h: u64, v: u64) -> u64 {
    let mut z = h.rotate_left(23) ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn str_digest(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The paper's locality rule for one connection of `part` in a database of
/// `n` parts: 90% (`rand[1..10] > 1`) to a random part among the closest 1%
/// by id ([`near_target`]), else any part `rand[1..n]`.
pub fn connect(rng: &mut ParkMiller, part: u32, n: u32) -> u32 {
    if rng.rand(10) > 1 {
        near_target(part, n, rng.rand(n / 100))
    } else {
        rng.rand(n)
    }
}

/// The near branch of the rule, given `r = rand[1..n/100]`:
/// `cpart = part + r − 1 − n/200`, "doubled up at the ends" (raised by
/// `n/200` below `n/200`, lowered by `n/200` above `n − n/200`) so the id
/// stays in `1..=n`. For a part past `n` (an inserted one) the result is at
/// most `part` (a connection to itself when `n / 100` is odd), so it exists.
pub fn near_target(part: u32, n: u32, r: u32) -> u32 {
    let (n, part, r) = (i64::from(n), i64::from(part), i64::from(r));
    let mut cpart = part + r - 1 - n / 200;
    if cpart < n / 200 {
        cpart += n / 200;
    }
    if cpart > n - n / 200 {
        cpart -= n / 200;
    }
    debug_assert!(cpart >= 1, "the rule keeps ids positive");
    cpart as u32
}

fn connections(rng: &mut ParkMiller, part: u32, n: u32) -> [ConnSpec; CONNECTIONS_PER_PART] {
    std::array::from_fn(|_| {
        let to = connect(rng, part, n);
        ConnSpec {
            to,
            kind: (rng.rand(10) - 1) as u8,
            length: (rng.rand(100_000) - 1) as i32,
        }
    })
}

fn attributes(rng: &mut ParkMiller, id: u32) -> PartSpec {
    let kind = (rng.rand(10) - 1) as u8;
    let x = (rng.rand(100_000) - 1) as i32;
    let y = (rng.rand(100_000) - 1) as i32;
    let build = BUILD_EPOCH_S + i64::from(rng.rand(BUILD_RANGE_S) - 1);
    let none = ConnSpec {
        to: 0,
        kind: 0,
        length: 0,
    };
    PartSpec {
        id,
        kind,
        x,
        y,
        build,
        to: [none; CONNECTIONS_PER_PART],
    }
}

impl Graph {
    /// Generates the database of `n` parts (at least [`PARTS_MIN`]) from `rng`.
    pub fn generate(rng: &mut ParkMiller, n: u32) -> Graph {
        assert!(n >= PARTS_MIN, "OO1 needs at least {PARTS_MIN} parts");
        let mut parts: Vec<PartSpec> = (1..=n).map(|id| attributes(rng, id)).collect();
        for p in &mut parts {
            p.to = connections(rng, p.id, n);
        }
        Graph { parts }
    }

    /// Parts.
    pub fn part_count(&self) -> u32 {
        self.parts.len() as u32
    }

    /// The part with `id` (the generator's own array; systems may not do this).
    pub fn part(&self, id: u32) -> &PartSpec {
        &self.parts[id as usize - 1]
    }

    /// For each part (by index), the ids of the parts connected to it, in
    /// generation order (a part appears once per connection).
    pub fn reverse(&self) -> Vec<Vec<u32>> {
        let mut from = vec![Vec::new(); self.parts.len()];
        for p in &self.parts {
            for c in &p.to {
                from[c.to as usize - 1].push(p.id);
            }
        }
        from
    }

    /// The check every system must reproduce.
    pub fn check(&self) -> Check {
        let mut c = Check::default();
        for p in &self.parts {
            c.add_part(p.id, p.kind_str(), p.x, p.y, p.build);
            for k in &p.to {
                c.add_connection(p.id, k.to, k.kind_str(), k.length);
                c.add_reverse(p.id, k.to);
            }
        }
        c
    }
}

/// The 100 parts of one insert run into a database of `n` parts: ids
/// `n+1 ..= n+100`, attributes as at generation, connections by the same
/// locality rule with the database's `n` (so 90% go to the parts with the
/// largest ids, possibly earlier parts of the same batch or the part itself,
/// and 10% to any of the original parts).
pub fn insert_batch(rng: &mut ParkMiller, n: u32) -> Vec<PartSpec> {
    (n + 1..=n + INSERT_PARTS as u32)
        .map(|id| {
            let mut p = attributes(rng, id);
            p.to = connections(rng, id, n);
            p
        })
        .collect()
}

/// The ids of one lookup run.
pub fn lookup_ids(rng: &mut ParkMiller, n: u32) -> Vec<u32> {
    (0..LOOKUP_IDS).map(|_| rng.rand(n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_has_three_connections_to_existing_parts() {
        let g = Graph::generate(&mut ParkMiller::new(1), 2_000);
        assert_eq!(g.parts.len(), 2_000);
        for (i, p) in g.parts.iter().enumerate() {
            assert_eq!(p.id as usize, i + 1);
            assert!((0..100_000).contains(&p.x) && (0..100_000).contains(&p.y));
            assert!(p.to.iter().all(|c| (1..=2_000).contains(&c.to)));
        }
        let c = g.check();
        assert_eq!((c.parts, c.connections, c.reverse_connections), (2_000, 6_000, 6_000));
    }

    #[test]
    fn about_ninety_percent_of_connections_are_near() {
        let n = 20_000;
        let g = Graph::generate(&mut ParkMiller::new(1), n);
        let near = g
            .parts
            .iter()
            .flat_map(|p| p.to.iter().map(move |c| (p.id, c.to)))
            .filter(|&(f, t)| f.abs_diff(t) <= n / 100)
            .count();
        let share = near as f64 / (3 * n) as f64;
        // 90% by the rule, plus the random 10% that happen to land near.
        assert!((0.89..0.92).contains(&share), "near share {share}");
    }

    /// How often each target id comes out of the near branch for `part`,
    /// over every value of `r`.
    fn near_histogram(part: u32, n: u32) -> std::collections::BTreeMap<u32, u32> {
        let mut h = std::collections::BTreeMap::new();
        for r in 1..=n / 100 {
            *h.entry(near_target(part, n, r)).or_default() += 1;
        }
        h
    }

    #[test]
    fn the_locality_rule_doubles_up_at_the_ends() {
        let n = 20_000;
        // Mid-range: the 200 ids around the part, once each.
        let mid = near_histogram(10_000, n);
        assert_eq!(
            mid.keys().copied().collect::<Vec<_>>(),
            (9_900..=10_099).collect::<Vec<_>>()
        );
        assert!(mid.values().all(|&c| c == 1));
        // Part 50: the window 50−100 ..= 50+99 has its ids below 100 raised
        // by 100, so the targets are 50..=199 with 100..=149 twice.
        let low = near_histogram(50, n);
        assert_eq!(low.keys().copied().collect::<Vec<_>>(), (50..=199).collect::<Vec<_>>());
        for (&id, &count) in &low {
            assert_eq!(count, if (100..=149).contains(&id) { 2 } else { 1 }, "id {id}");
        }
        // Part N−49, mirrored: targets N−199 ..= N−50 with N−149 ..= N−100 twice.
        let high = near_histogram(n - 49, n);
        assert_eq!(
            high.keys().copied().collect::<Vec<_>>(),
            (n - 199..=n - 50).collect::<Vec<_>>()
        );
        for (&id, &count) in &high {
            assert_eq!(count, if (n - 149..=n - 100).contains(&id) { 2 } else { 1 }, "id {id}");
        }
        // Every target of every part is in range, at both extremes too.
        for part in [1, 2, 99, 100, 101, n / 2, n - 101, n - 100, n - 99, n] {
            let h = near_histogram(part, n);
            assert!(h.keys().all(|t| (1..=n).contains(t)), "part {part}");
        }
        // An inserted part's near targets lie below it (so they exist); with
        // an odd n/100 the fold can also land on the part itself.
        for part in n + 1..=n + 100 {
            assert!(near_histogram(part, n).keys().all(|&t| t < part));
            assert!(near_histogram(part, 500).keys().all(|&t| t <= part));
        }
    }

    #[test]
    fn inserted_parts_connect_to_existing_parts() {
        let n = 500;
        let batch = insert_batch(&mut ParkMiller::new(9), n);
        assert_eq!(batch.len(), INSERT_PARTS);
        for p in &batch {
            // At most the part itself (when N/100 is odd the fold can land on it).
            assert!(p.to.iter().all(|c| c.to >= 1 && c.to <= p.id), "{p:?}");
        }
    }

    #[test]
    fn the_check_depends_on_every_field() {
        let g = Graph::generate(&mut ParkMiller::new(1), 300);
        let base = g.check();
        let mut h = g.clone();
        h.parts[7].to[1].length += 1;
        assert_ne!(h.check().checksum, base.checksum);
        let mut h = g.clone();
        h.parts[0].x += 1;
        assert_ne!(h.check().checksum, base.checksum);
        assert_eq!(Graph::generate(&mut ParkMiller::new(1), 300).check(), base);
    }
}

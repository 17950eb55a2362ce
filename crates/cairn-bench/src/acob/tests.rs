//! Unit tests of the ACOB generator: the layout, the clustering rule, the
//! smearing, the query plans and their determinism. Statistical checks use
//! bounds of several standard deviations computed from the model, so they
//! hold for any seed, not only the one used here.

use super::generate::*;
use crate::oo1::rng::ParkMiller;

fn config(clustering: u32, region_pages: u32, smeared: bool) -> AcobConfig {
    AcobConfig {
        objects_per_set: OBJECTS_PER_SET,
        clustering,
        region_pages,
        smeared,
        seed: 1,
    }
}

fn set(clustering: u32, region_pages: u32, smeared: bool) -> Set {
    match Set::generate(&config(clustering, region_pages, smeared)) {
        Ok(set) => set,
        Err(e) => panic!("generating a valid set failed: {e}"),
    }
}

/// Every (source page, target page) pair of a set's attachments.
fn attachment_pages(set: &Set) -> Vec<(u32, u32)> {
    let mut pairs = Vec::new();
    for (o, spec) in (0..set.object_count()).map(ObjectIdx).zip(set.objects()) {
        for t in spec.attachments {
            pairs.push((o.home_page().0, t.home_page().0));
        }
    }
    pairs
}

/// Objects whose home page is within `half` pages of `page`, counted
/// directly from the pages of every object.
fn objects_within(set: &Set, page: u32, half: u32) -> u32 {
    let n = set.object_count();
    (0..n)
        .filter(|&t| ObjectIdx(t).home_page().0.abs_diff(page) <= half)
        .count() as u32
}

#[test]
fn a_page_holds_five_objects_of_seven_records_and_a_set_300_pages() {
    assert_eq!(RECORDS_PER_OBJECT, 7);
    assert_eq!(
        OBJECTS_PER_PAGE,
        PAGE_BYTES / (RECORD_BYTES * RECORDS_PER_OBJECT as u32)
    );
    assert_eq!(OBJECTS_PER_PAGE, 5);
    let s = set(30, 5, false);
    assert_eq!(s.page_count(), 300);
    assert_eq!(s.objects().len(), 1500);
    let Ok(layout) = s.layout() else {
        panic!("layout failed")
    };
    assert_eq!(layout.len(), 300 * SLOTS_PER_PAGE as usize);
    for (p, page) in layout.chunks(SLOTS_PER_PAGE as usize).enumerate() {
        let mut objects: Vec<u32> = page.iter().flatten().map(|(o, _)| o.0).collect();
        assert_eq!(objects.len(), 35, "page {p} is full");
        objects.dedup();
        assert_eq!(
            objects.len(),
            5,
            "page {p} holds 5 objects, each in 7 consecutive slots"
        );
    }
}

#[test]
fn every_record_of_an_unsmeared_set_is_on_its_objects_page() {
    for f in [0, 50, 100] {
        let s = set(f, 5, false);
        assert!(s.swaps().is_empty() && s.smeared_objects().is_empty());
        assert_eq!(s.displaced_object_count(), 0);
        for (o, spec) in (0..s.object_count()).map(ObjectIdx).zip(s.objects()) {
            for r in RecordIdx::ALL {
                assert_eq!(spec.places[usize::from(r.get())].page, PageIdx(o.0 / 5));
                assert_eq!(spec.places[usize::from(r.get())], o.home_place(r));
            }
        }
        assert_eq!(s.check_invariants(), Ok(()));
    }
}

#[test]
fn a_partly_filled_last_page_is_allowed() {
    let cfg = AcobConfig {
        objects_per_set: 1502,
        clustering: 100,
        ..config(0, 9, true)
    };
    let Ok(s) = Set::generate(&cfg) else {
        panic!("1502 objects is valid")
    };
    assert_eq!(s.page_count(), 301);
    let Ok(layout) = s.layout() else {
        panic!("layout failed")
    };
    assert_eq!(layout.iter().filter(|c| c.is_none()).count(), 35 - 2 * 7);
    assert!(s.objects().iter().flat_map(|o| o.attachments).all(|t| t.0 < 1502));
}

#[test]
fn out_of_range_configuration_names_the_field() {
    let cases = [
        (
            AcobConfig {
                objects_per_set: 0,
                ..AcobConfig::default()
            },
            "objects_per_set",
        ),
        (
            AcobConfig {
                objects_per_set: 1,
                ..AcobConfig::default()
            },
            "objects_per_set",
        ),
        (
            AcobConfig {
                objects_per_set: OBJECTS_PER_SET_MAX + 1,
                ..AcobConfig::default()
            },
            "objects_per_set",
        ),
        (
            AcobConfig {
                clustering: 101,
                ..AcobConfig::default()
            },
            "clustering",
        ),
        (
            AcobConfig {
                region_pages: 0,
                ..AcobConfig::default()
            },
            "region_pages",
        ),
        (
            AcobConfig {
                region_pages: 4,
                ..AcobConfig::default()
            },
            "region_pages",
        ),
    ];
    for (cfg, field) in cases {
        match Set::generate(&cfg) {
            Err(e @ AcobError::OutOfRange { field: named, .. }) => {
                assert_eq!(named, field);
                assert!(e.to_string().contains(field), "{e}");
            }
            other => panic!("{cfg:?} gave {other:?}"),
        }
    }
    assert_eq!(AcobConfig::default().validate(), Ok(()));
}

#[test]
fn the_clustering_region_is_truncated_at_the_ends_of_the_set() {
    for region in [1, 5, 9] {
        let half = region / 2;
        for page in 0..300 {
            let (first, last) = clustering_region(PageIdx(page), region, 300);
            assert_eq!(first.0, page.saturating_sub(half));
            assert_eq!(last.0, (page + half).min(299));
        }
    }
}

#[test]
fn at_f100_region_1_every_target_is_on_the_same_page() {
    let s = set(100, 1, false);
    assert!(attachment_pages(&s).iter().all(|(from, to)| from == to));
}

#[test]
fn at_f100_every_target_is_within_half_the_region_and_the_whole_region_is_used() {
    for region in [5, 9] {
        let half = region / 2;
        let s = set(100, region, false);
        let mut seen = vec![false; region as usize];
        for (from, to) in attachment_pages(&s) {
            let distance = from.abs_diff(to);
            assert!(distance <= half, "region {region}: page {from} attaches page {to}");
            // Offsets −half ..= half all occur (away from the ends).
            seen[(i64::from(to) - i64::from(from) + i64::from(half)) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "region {region}: offsets used {seen:?}");
    }
}

#[test]
fn at_f0_about_one_target_in_300_is_on_the_same_page() {
    let Ok(sets) = generate_sets(&config(0, 5, false)) else {
        panic!("valid config")
    };
    let (mut same, mut expected, mut variance) = (0u32, 0.0f64, 0.0f64);
    for s in &sets {
        for (o, spec) in (0..s.object_count()).map(ObjectIdx).zip(s.objects()) {
            // Uniform over the set: the chance of landing on o's page.
            let p = f64::from(objects_within(s, o.home_page().0, 0)) / f64::from(s.object_count());
            for t in spec.attachments {
                same += u32::from(t.home_page() == o.home_page());
                expected += p;
                variance += p * (1.0 - p);
            }
        }
    }
    assert!((expected / (5.0 * 12_000.0) - 1.0 / 300.0).abs() < 1e-9);
    let sd = variance.sqrt();
    assert!(
        (f64::from(same) - expected).abs() <= 5.0 * sd,
        "{same} same-page targets of 60000, expected {expected:.1} ± {:.1}",
        5.0 * sd
    );
}

#[test]
fn at_f50_about_half_the_targets_are_within_the_region() {
    for region in [1, 5, 9] {
        let half = region / 2;
        let s = set(50, region, false);
        let n = f64::from(s.object_count());
        let (mut within, mut expected, mut variance) = (0u32, 0.0f64, 0.0f64);
        for (o, spec) in (0..s.object_count()).map(ObjectIdx).zip(s.objects()) {
            let page = o.home_page().0;
            // Half the time in the region; half the time uniform, which
            // lands in the region in proportion to its objects.
            let p = 0.5 + 0.5 * f64::from(objects_within(&s, page, half)) / n;
            for t in spec.attachments {
                within += u32::from(t.home_page().0.abs_diff(page) <= half);
                expected += p;
                variance += p * (1.0 - p);
            }
        }
        let sd = variance.sqrt();
        assert!(
            (f64::from(within) - expected).abs() <= 5.0 * sd,
            "region {region}: {within} of 12000 within, expected {expected:.1} ± {:.1}",
            5.0 * sd
        );
        // About half: the uniform half adds at most the region's share of the set.
        let excess = expected / 12_000.0 - 0.5;
        assert!(
            excess > 0.0 && excess <= 0.5 * f64::from(region) / 300.0 + 1e-9,
            "{excess}"
        );
    }
}

#[test]
fn smearing_chooses_exactly_a_quarter_of_the_objects() {
    let s = set(30, 5, true);
    let mut chosen: Vec<u32> = s.smeared_objects().iter().map(|o| o.0).collect();
    assert_eq!(chosen.len(), 1500 / 4);
    chosen.sort_unstable();
    chosen.dedup();
    assert_eq!(chosen.len(), 1500 / 4, "distinct objects");
    assert!(chosen.iter().all(|&o| o < 1500));
}

#[test]
fn smearing_moves_about_a_quarter_of_the_chosen_objects_non_root_records() {
    let s = set(30, 5, true);
    let chosen = s.smeared_objects();
    let mut moved_by_record = [0u32; RECORDS_PER_OBJECT];
    for w in s.swaps() {
        assert!(chosen.contains(&w.object), "{w:?} starts from a chosen object");
        assert_ne!(w.object, w.partner, "{w:?} swaps with another object");
        assert_ne!(w.record, RecordIdx::ROOT, "{w:?}: roots never move");
        assert_eq!(
            w.record.level(),
            w.partner_record.level(),
            "{w:?}: the corresponding record"
        );
        assert!(w.partner.0 < s.object_count());
        moved_by_record[usize::from(w.record.get())] += 1;
    }
    // Each of the 6 non-root records of each chosen object: Binomial(k, 1/4).
    let k = chosen.len() as f64;
    let (mean, sd) = (k * 0.25, (k * 0.25 * 0.75).sqrt());
    for (r, &moved) in moved_by_record.iter().enumerate().skip(1) {
        assert!(
            (f64::from(moved) - mean).abs() <= 5.0 * sd,
            "record {r}: {moved} moved, expected {mean}"
        );
    }
    let total = s.swaps().len() as f64;
    let (mean, sd) = (6.0 * k * 0.25, (6.0 * k * 0.25 * 0.75).sqrt());
    assert!(
        (total - mean).abs() <= 5.0 * sd,
        "{total} moves, expected {mean:.1} ± {:.1}",
        5.0 * sd
    );
}

#[test]
fn a_smeared_set_is_its_created_layout_after_exactly_its_swaps() {
    let s = set(30, 5, true);
    let mut replay: Vec<ObjectSpec> = (0..s.object_count())
        .map(ObjectIdx)
        .zip(s.objects())
        .map(|(o, spec)| ObjectSpec {
            places: RecordIdx::ALL.map(|r| o.home_place(r)),
            attachments: spec.attachments,
        })
        .collect();
    for w in s.swaps() {
        super::generate::apply_swap(&mut replay, w);
    }
    assert_eq!(replay.as_slice(), s.objects());
}

#[test]
fn a_smeared_set_uses_every_slot_exactly_once() {
    let s = set(30, 5, true);
    assert_eq!(s.check_invariants(), Ok(()));
    let Ok(layout) = s.layout() else {
        panic!("two records share a slot")
    };
    assert!(
        layout.iter().all(|c| c.is_some()),
        "every slot of 300 full pages is used"
    );
    let mut places: Vec<Place> = s.objects().iter().flat_map(|o| o.places).collect();
    let mut home: Vec<Place> = (0..s.object_count())
        .map(ObjectIdx)
        .flat_map(|o| RecordIdx::ALL.map(|r| o.home_place(r)))
        .collect();
    places.sort_unstable();
    home.sort_unstable();
    assert_eq!(places, home, "a permutation of the created slots");
    for (o, spec) in (0..s.object_count()).map(ObjectIdx).zip(s.objects()) {
        assert_eq!(spec.places[0], o.home_place(RecordIdx::ROOT), "object {} root", o.0);
    }
    let away = (0..s.object_count())
        .map(ObjectIdx)
        .zip(s.objects())
        .flat_map(|(o, spec)| spec.places.iter().map(move |p| p.page != o.home_page()))
        .filter(|&a| a)
        .count();
    assert!(away > 0 && away <= 2 * s.swaps().len(), "{away} records away");
}

#[test]
fn smearing_displaces_the_objects_its_swaps_touch() {
    // An object stays whole only if it started no move and no other
    // object's move picked it; partners are uniform over the other n − 1.
    let s = set(30, 5, true);
    let n = f64::from(s.object_count());
    let chosen = s.smeared_objects().len() as f64;
    let moves = s.swaps().len() as f64;
    let not_hit = (1.0 - 1.0 / (n - 1.0)).powf(moves);
    let expected = chosen * (1.0 - 0.75f64.powi(6) * not_hit) + (n - chosen) * (1.0 - not_hit);
    let displaced = f64::from(s.displaced_object_count());
    eprintln!("displaced objects: {displaced} of {n} (expected about {expected:.0})");
    assert!(
        (displaced / expected - 1.0).abs() < 0.08,
        "{displaced} displaced, expected about {expected:.0}"
    );
}

#[test]
fn smearing_changes_places_not_references() {
    let (plain, smeared) = (set(30, 5, false), set(30, 5, true));
    for (a, b) in plain.objects().iter().zip(smeared.objects()) {
        assert_eq!(a.attachments, b.attachments);
    }
    assert_ne!(plain.objects(), smeared.objects());
}

#[test]
fn scan_reads_every_record_once_breadth_first_in_physical_order() {
    for smeared in [false, true] {
        let s = set(30, 5, smeared);
        let visits = scan_order(&s);
        assert_eq!(visits.len(), 1500 * 7);
        for (i, v) in visits.iter().enumerate() {
            assert_eq!(v.object, ObjectIdx((i / 7) as u32), "objects in key order");
            assert_eq!(usize::from(v.record.get()), i % 7, "records breadth-first");
            assert_eq!(v.depth, v.record.level());
            assert_eq!(Some(v.place), s.place(v.object, v.record));
            assert!(!v.update);
        }
        let pages: Vec<u32> = visits.iter().map(|v| v.place.page.0).collect();
        let in_order = pages.windows(2).all(|w| w[0] <= w[1]);
        assert_eq!(in_order, !smeared, "only a smeared set leaves page order");
        let roots: Vec<u32> = visits.iter().filter(|v| v.depth == 0).map(|v| v.place.page.0).collect();
        assert!(roots.windows(2).all(|w| w[0] <= w[1]), "roots are in page order");
    }
}

/// Checks that `visits` are depth-first traversals of `set`: each visit at
/// depth d > 0 is a child of the latest visit at depth d − 1. Returns the
/// number of starts.
fn check_traversal_shape(set: &Set, visits: &[Visit]) -> usize {
    let mut path: Vec<Visit> = Vec::new();
    let mut starts = 0;
    for v in visits {
        assert_eq!(
            Some(v.place),
            set.place(v.object, v.record),
            "{v:?} is where the record lives"
        );
        assert!(v.depth <= DEPTH_MAX);
        assert_eq!(v.record.level(), v.depth % 3, "{v:?}: depths 0, 3, 6 are roots");
        let d = usize::from(v.depth);
        assert!(d <= path.len(), "{v:?} skips a depth");
        path.truncate(d);
        if d == 0 {
            starts += 1;
        } else {
            let parent = path[d - 1];
            match parent.record.children() {
                Some(children) => {
                    assert_eq!(v.object, parent.object, "{v:?} stays in its object");
                    assert!(children.contains(&v.record), "{v:?} is a child of {parent:?}");
                }
                None => {
                    let Some(leaf) = parent.record.leaf_number() else {
                        panic!("{parent:?}")
                    };
                    let Some(spec) = set.object(parent.object) else {
                        panic!("{parent:?}")
                    };
                    assert_eq!(v.record, RecordIdx::ROOT);
                    assert!(
                        spec.attachments[2 * leaf..2 * leaf + 2].contains(&v.object),
                        "{v:?} from {parent:?}"
                    );
                }
            }
        }
        path.push(*v);
    }
    starts
}

#[test]
fn random_read_is_300_depth_first_traversals_to_depth_6() {
    for smeared in [false, true] {
        let s = set(30, 5, smeared);
        let visits = random_read(&s, &mut ParkMiller::new(7));
        assert_eq!(check_traversal_shape(&s, &visits), RANDOM_OBJECTS as usize);
        assert!(visits.iter().all(|v| !v.update));
        assert!(visits.iter().any(|v| v.depth == DEPTH_MAX));
    }
}

#[test]
fn random_read_reads_about_43_records_per_start_17_at_depth_6() {
    // The expectation from the tree: a record at depth d is reached when all
    // d steps above it are taken, and there are 2^d records at depth d.
    let p = f64::from(STEP_PERCENT) / 100.0;
    let expected_at = |d: i32| 2f64.powi(d) * p.powi(d);
    let expected_total: f64 = (0..=6).map(expected_at).sum();
    let expected_deep = expected_at(6);
    assert!((expected_total - expected_reads_per_start()).abs() < 1e-9);
    assert!((expected_deep - expected_reads_at_depth(DEPTH_MAX)).abs() < 1e-9);

    let s = set(30, 5, false);
    let mut rng = ParkMiller::new(11);
    let (mut totals, mut deeps) = (Vec::new(), Vec::new());
    for _ in 0..100 {
        let visits = random_read(&s, &mut rng);
        for (i, v) in visits.iter().enumerate() {
            if v.depth == 0 {
                totals.push(0.0);
                deeps.push(0.0);
            }
            assert!(i > 0 || v.depth == 0);
            if let (Some(t), Some(d)) = (totals.last_mut(), deeps.last_mut()) {
                *t += 1.0;
                *d += f64::from(u8::from(v.depth == DEPTH_MAX));
            }
        }
    }
    let check = |name: &str, xs: &[f64], expected: f64| {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let bound = 5.0 * (var / n).sqrt();
        eprintln!("{name}: {mean:.3} per start over {n} starts (expected {expected:.3} ± {bound:.3})");
        assert!(
            (mean - expected).abs() <= bound,
            "{name}: {mean:.3}, expected {expected:.3} ± {bound:.3}"
        );
    };
    assert_eq!(totals.len(), 100 * RANDOM_OBJECTS as usize);
    check("records read", &totals, expected_total);
    check("records at depth 6", &deeps, expected_deep);
}

#[test]
fn the_papers_44_and_17_are_the_per_depth_expectations_rounded() {
    let rounded: f64 = (0..=DEPTH_MAX).map(|d| expected_reads_at_depth(d).round()).sum();
    assert_eq!(rounded, 44.0);
    assert_eq!(expected_reads_at_depth(DEPTH_MAX).round(), 17.0);
    assert_eq!(expected_reads_per_start().round(), 43.0);
}

#[test]
fn random_update_is_random_read_with_the_depth_6_records_rewritten() {
    let s = set(30, 5, true);
    let read = random_read(&s, &mut ParkMiller::new(3));
    let update = random_update(&s, &mut ParkMiller::new(3));
    assert_eq!(read.len(), update.len());
    for (r, u) in read.iter().zip(&update) {
        assert_eq!(
            (r.object, r.record, r.depth, r.place),
            (u.object, u.record, u.depth, u.place)
        );
        assert_eq!(u.update, u.depth == DEPTH_MAX);
    }
    assert!(update.iter().any(|v| v.update));
}

#[test]
fn the_same_seed_gives_the_same_set_and_visits() {
    for smeared in [false, true] {
        let cfg = config(50, 5, smeared);
        let (Ok(a), Ok(b)) = (Set::generate(&cfg), Set::generate(&cfg)) else {
            panic!("valid config")
        };
        assert_eq!(a, b);
        assert_eq!(
            random_read(&a, &mut ParkMiller::new(9)),
            random_read(&b, &mut ParkMiller::new(9))
        );
        assert_eq!(
            random_update(&a, &mut ParkMiller::new(9)),
            random_update(&b, &mut ParkMiller::new(9))
        );
        assert_eq!(scan_order(&a), scan_order(&b));
        let Ok(c) = Set::generate(&AcobConfig { seed: 2, ..cfg }) else {
            panic!("valid config")
        };
        assert_ne!(a, c, "another seed, another set");
        assert_ne!(
            random_read(&a, &mut ParkMiller::new(9)),
            random_read(&a, &mut ParkMiller::new(10))
        );
    }
}

#[test]
fn the_five_sets_are_drawn_one_after_another_from_one_stream() {
    let cfg = config(30, 5, true);
    let Ok(sets) = generate_sets(&cfg) else {
        panic!("valid config")
    };
    assert_eq!(sets.len(), SET_NAMES.len());
    assert_eq!(Ok(&sets[0]), Set::generate(&cfg).as_ref());
    let mut rng = ParkMiller::new(cfg.seed);
    for s in &sets {
        assert_eq!(Ok(s), Set::generate_from(&cfg, &mut rng).as_ref());
        assert_eq!(s.check_invariants(), Ok(()));
    }
    assert_ne!(sets[0], sets[1], "same parameters, their own draws");
}

#[test]
fn record_indexes_form_a_breadth_first_binary_tree() {
    assert_eq!(RecordIdx::new(7), None);
    let mut reached = vec![RecordIdx::ROOT];
    for r in RecordIdx::ALL {
        assert_eq!(RecordIdx::new(r.get()), Some(r));
        match (r.children(), r.leaf_number()) {
            (Some(c), None) => {
                assert!(c.iter().all(|child| child.level() == r.level() + 1));
                reached.extend(c);
            }
            (None, Some(l)) => assert_eq!(usize::from(r.get()), 3 + l),
            other => panic!("{r:?}: {other:?}"),
        }
    }
    assert_eq!(reached, RecordIdx::ALL.to_vec(), "breadth-first order");
    let levels: Vec<u8> = RecordIdx::ALL.iter().map(|r| r.level()).collect();
    assert_eq!(levels, [0, 1, 1, 2, 2, 2, 2]);
}

//! `#[derive(Persistent)]` (issue 4). Depends on no other Cairn crate.

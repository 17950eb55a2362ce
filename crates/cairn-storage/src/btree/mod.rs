//! The B+-tree (being written).

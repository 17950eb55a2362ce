//! The volume (being written).

//! The lock manager (being written).

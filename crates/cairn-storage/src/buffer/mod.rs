//! The buffer pool (being written).

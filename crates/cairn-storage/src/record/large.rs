//! Large objects (being written).

//! Slotted record pages (being written).

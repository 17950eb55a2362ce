//! Records: slotted pages, physical OIDs with forwarding, large objects.

pub mod large;
pub mod object;
pub mod slotted;

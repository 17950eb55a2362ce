//! Records: slotted pages, physical OIDs with forwarding, large objects.
//!
//! [`object`] is API (see the crate docs); [`slotted`] and [`large`], the
//! page formats below it, are the tool interface.

pub mod large;
pub mod object;
pub mod slotted;

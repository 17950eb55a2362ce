//! Cairn's public API. The typed layer (`Database`, `Transaction`, `Ref<T>`,
//! `#[derive(Persistent)]`) arrives with issue 4; today this crate re-exports
//! the storage manager so applications and tools have one entry point.

pub use cairn_storage as storage;

//! The wire protocol and RPC layer (issue 5). Depends on `cairn-storage` for OID and page-id types only; does no disk I/O.

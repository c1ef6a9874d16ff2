//! Durable stores for the harness runtime: [`SqliteStore`], the embedded default (one file,
//! WAL, group commit), and [`suite`], the store conformance suite every backend passes,
//! [`MemoryStore`](harness_core::store::MemoryStore) included.
//!
//! The contract is [`ExecutionStore`](harness_core::store::ExecutionStore), in harness-core.

mod sqlite;
pub mod suite;

pub use sqlite::SqliteStore;

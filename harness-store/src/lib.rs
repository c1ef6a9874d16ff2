//! Durable stores for the harness runtime: [`SqliteStore`], the embedded default (one file,
//! WAL, group commit), `PostgresStore` for several replicas (feature `postgres`, on by
//! default: fencing by the database's clock, a live tail across processes with
//! LISTEN/NOTIFY), and [`suite`], the store conformance suite every backend passes,
//! [`MemoryStore`](harness_core::store::MemoryStore) included.
//!
//! [`files`]: uploaded files, each its caller's until its expiry, in the same database.
//!
//! The contract is [`ExecutionStore`](harness_core::store::ExecutionStore), in harness-core.
#![warn(missing_docs)]
// docs.rs: a badge naming the feature on each item that needs one.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod common;
pub mod files;
#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;
pub mod suite;

#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

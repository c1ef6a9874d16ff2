//! What the runtime owns, kept in a store: execution records, their event logs, leases with
//! fencing tokens, action resolutions and cancel requests, and idempotency records.
//!
//! [`ExecutionStore`] is the contract every backend implements: [`MemoryStore`] (here: tests
//! and the quickstart), and the durable ones of the `harness-store` crate (SQLite, the
//! embedded default, and PostgreSQL for several replicas). One store conformance suite
//! (`harness_store::suite`) checks all of them against the same rules.
//!
//! # The rules
//!
//! - **Records.** [`create`](ExecutionStore::create) writes an execution's record once. With
//!   an idempotency key (scoped by the record's principal), a second create with the same key
//!   and the same request fingerprint returns the first record ([`Created::Existing`]); with
//!   another fingerprint it fails with [`StoreError::IdempotencyConflict`]. Of two concurrent
//!   creates with one key, on any number of processes, exactly one writes.
//! - **Leases and fencing.** Only the holder of an execution's current lease may append to
//!   its log or release it. [`acquire`](ExecutionStore::acquire) succeeds when no lease is
//!   held or the held one has expired, and hands out a [`FencingToken`] greater than every
//!   earlier one of that execution. A write carrying an older token, or one whose lease has
//!   expired, is refused with [`StoreError::Fenced`] by the store itself, in the same
//!   transaction as the write: a replica that lost its lease can append nothing, whatever it
//!   believes.
//! - **Events.** [`append`](ExecutionStore::append) adds a batch atomically: all of it or
//!   none. Sequence numbers continue the stored log without a gap or a repeat
//!   ([`StoreError::Sequence`]); nothing follows a terminal event ([`StoreError::Ended`]); the
//!   record's state follows the lifecycle events appended. An acknowledged append is
//!   durable to the backend's promise (see each backend's docs).
//! - **Reads.** [`read`](ExecutionStore::read) returns up to `limit` events after a cursor,
//!   in order, from any process; [`tail`](ExecutionStore::tail) wakes a reader when more are
//!   stored (within the process for the embedded backends; across processes for PostgreSQL).
//! - **Answers and cancels.** [`resolve`](ExecutionStore::resolve) records the answer to an
//!   action at most once, whoever sends it, from wherever: a second answer fails with
//!   [`StoreError::AlreadyResolved`]. [`request_cancel`](ExecutionStore::request_cancel)
//!   records the first cancel request; the owner reads both (and is woken by `tail`).
//! - **Failures** are [`StoreError::Unavailable`] (retryable), [`StoreError::Full`] (the
//!   disk is full: retryable once space is freed) or [`StoreError::Corrupt`], never a
//!   missing value. A failed write is not applied, wholly.
//! - **A full disk pauses a durable execution**: its writer retries the batch (with backoff,
//!   at most a second apart) while readers see nothing past the last stored event; once space
//!   returns it goes on, with its own one terminal event, and so do new executions, without a
//!   restart. The lease's renewals fail meanwhile: a disk full for longer than the lease term
//!   ends the execution as any store outage that long does (this replica stops the run, and
//!   recovery writes its one terminal event, `OWNER_LOST`, once the store takes writes).
//!   The run's events wait in memory meanwhile, as for any store outage.

mod execution;
mod memory;

pub use self::execution::*;
pub use self::memory::MemoryStore;

#[cfg(test)]
mod tests;

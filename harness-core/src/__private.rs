//! Support for the code that `harness-macros` generates: `#[derive(Adapter)]` and
//! `#[derive(AdapterOptions)]` reach this crate only through this module (or through a crate
//! that re-exports it, named with `#[adapter(crate = "...")]`).
//!
//! Not public API: nothing here is covered by semver, and nothing here should be named by hand.
//! The public side of the derives is [`Adapter`], [`Describe`], [`AdapterOptions`], [`ClosedSchema`],
//! [`OptionsValidator`] and [`InvalidOptions`] in [`crate::manifest`].

pub use std::sync::OnceLock;

pub use serde_json::Value;

pub use crate::capability::{Capability, CapabilityKey, EvidenceId, SupportLevel};
pub use crate::id::AdapterId;
pub use crate::manifest::{
    Adapter, AdapterOptions, ClosedSchema, ContractVersion, Dependency, DependencyKind, Describe,
    ExecutionMode, HarnessDescriptor, HarnessDescriptorBuilder, InvalidOptions, OperatorProfileId,
    OptionsValidator, TrustBoundary,
};

/// The adapter id `id`, which the derive checked against the id pattern.
///
/// # Panics
///
/// If `id` is not an adapter id (the derive refuses such an attribute).
#[must_use]
pub fn adapter_id(id: &'static str) -> AdapterId {
    id.parse()
        .unwrap_or_else(|e| panic!("`#[derive(Adapter)]` let through an invalid id: {e}"))
}

/// The operator profile id `id`, which the derive checked against the profile pattern.
///
/// # Panics
///
/// If `id` is not an operator profile id (the derive refuses such an attribute).
#[must_use]
pub fn profile_id(id: &'static str) -> OperatorProfileId {
    id.parse().unwrap_or_else(|e| {
        panic!("`#[derive(Adapter)]` let through an invalid operator profile id: {e}")
    })
}

/// The evidence id `id`, which the derive checked against the evidence pattern.
///
/// # Panics
///
/// If `id` is not an evidence id (the derive refuses such an attribute).
#[must_use]
pub fn evidence_id(id: &'static str) -> EvidenceId {
    id.parse()
        .unwrap_or_else(|e| panic!("`#[derive(Adapter)]` let through an invalid evidence id: {e}"))
}

/// The contract version `n`, which the derive checked is at least 1.
///
/// # Panics
///
/// If `n` is 0 (the derive refuses such an attribute).
#[must_use]
pub const fn contract_version(n: u32) -> ContractVersion {
    match ContractVersion::new(n) {
        Some(v) => v,
        None => panic!("`#[derive(Adapter)]` let through contract version 0"),
    }
}

/// Builds the descriptor the derive assembled.
///
/// # Panics
///
/// With every problem, if the descriptor is invalid: the derive checks everything it declares
/// at compile time, so only an options schema that accepts unknown fields (through an
/// `unchecked` field or a hand-written `AdapterOptions`) can get here.
#[must_use]
pub fn build_manifest(adapter: &str, builder: HarnessDescriptorBuilder) -> HarnessDescriptor {
    match builder.build() {
        Ok(descriptor) => descriptor,
        Err(e) => panic!("`#[derive(Adapter)]` on `{adapter}` declares an invalid descriptor: {e}"),
    }
}

/// The options schema of `T`, as [`AdapterOptions::options_schema`] generates it by default.
#[must_use]
pub fn options_schema_for<T: AdapterOptions>() -> Value {
    crate::manifest::generate_options_schema::<T>()
}

/// The options schema of adapter `A`. Going through `A` (whose `Options` is known to be
/// `AdapterOptions`) rather than naming the options type again keeps a wrong options type to
/// one error, at the `options = ...` the author wrote.
#[must_use]
pub fn options_schema_of<A: Adapter + ?Sized>() -> Value {
    <A::Options as AdapterOptions>::options_schema()
}

pub use crate::manifest::ValidatorCell;

impl Default for ValidatorCell {
    fn default() -> Self {
        Self::new()
    }
}

/// Compiles only if `T`'s schema rejects unknown fields; the derive calls it for every field
/// type, spanned at the field, so the error points there.
pub fn assert_closed<T: ClosedSchema + ?Sized>() {}

/// The options type of the fallback impl `#[derive(Adapter)]` emits next to its errors.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoOptions {}

impl ClosedSchema for NoOptions {}
impl AdapterOptions for NoOptions {}

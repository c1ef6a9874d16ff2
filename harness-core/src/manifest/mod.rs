//! The provider manifest: a [`HarnessDescriptor`] says who an adapter is, which contract
//! versions it speaks, how and where it runs, what it depends on, which options it accepts and
//! which capabilities it offers.
//!
//! A descriptor is pure data. Building one (with [`HarnessDescriptor::builder`] or by
//! deserializing JSON) performs no I/O: no provider call, no file or network access; the
//! options schema is checked in memory, and a `$ref` that is not local to the schema is
//! reported as invalid rather than fetched. Both ways of building run
//! [`HarnessDescriptor::validate`], so an invalid descriptor never exists.
//!
//! ```
//! use harness_core::capability::{Capability, CapabilityKey};
//! use harness_core::manifest::{
//!     ContractVersion, Dependency, DependencyKind, ExecutionMode, HarnessDescriptor,
//!     TrustBoundary,
//! };
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Options {
//!     model: String,
//!     max_turns: Option<u32>,
//! }
//!
//! let descriptor = HarnessDescriptor::builder("gemini_cli".parse().unwrap(), "0.3.1")
//!     .name("Gemini CLI over ACP")
//!     .contract_version(ContractVersion::V1)
//!     .execution_mode(ExecutionMode::in_process())
//!     .trust_boundary(TrustBoundary::LocalSubprocess)
//!     .dependency(Dependency::new(DependencyKind::NpmPackage, "@google/gemini-cli", ">=0.3"))
//!     .options_schema_for::<Options>()
//!     .capability(CapabilityKey::StreamText, Capability::native())
//!     .build()
//!     .unwrap();
//!
//! let json = serde_json::to_value(&descriptor).unwrap();
//! assert_eq!(json["executionMode"], serde_json::json!({"mode": "in_process", "compatibilityOnly": true}));
//! assert_eq!(json["contractVersions"], serde_json::json!([1]));
//! let back: HarnessDescriptor = serde_json::from_value(json).unwrap();
//! assert_eq!(back, descriptor);
//! ```

// One file per part, each importing what it uses; every public item is
// re-exported here, so paths stay `harness_core::manifest::Item`.
mod checks;
mod derived;
mod descriptor;
mod errors;
mod mode;
mod support;
mod version;

pub use self::checks::*;
pub use self::derived::*;
pub use self::descriptor::*;
pub use self::errors::*;
pub use self::mode::*;
pub use self::version::*;

#[cfg(test)]
mod tests;

//! JSON Schemas of every wire type, as committed under `schemas/` at the workspace root.
//!
//! The workspace test `tests/schemas.rs` regenerates them and fails when a committed file has
//! drifted from the types; `UPDATE_SCHEMAS=1 cargo test --test schemas` rewrites them.
//!
//! Under `schemas/baseline/v<N>/` lies a copy of them as contract version `N` pinned them,
//! with `contract.json` ([`compat::contract_semantics`]): `harness-core/tests/schema_compat.rs`
//! fails when today's schemas are incompatible with the baseline of
//! [`ContractVersion::CURRENT`](crate::manifest::ContractVersion::CURRENT) (see [`compat`]).
//!
//! ```
//! let schemas = harness_core::schema::wire_schemas();
//! assert!(schemas.iter().any(|(name, _)| *name == "event"));
//! ```

pub mod compat;

use schemars::{JsonSchema, Schema, generate::SchemaSettings};

/// The schema of `T` under the settings used for every committed schema (JSON Schema 2020-12).
#[must_use]
pub fn schema_for<T: JsonSchema>() -> Schema {
    SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>()
}

/// Every wire type's schema, by file stem (`schemas/<name>.json`).
#[must_use]
pub fn wire_schemas() -> Vec<(&'static str, Schema)> {
    use crate::{action, artifact, capability, error, event, lifecycle, manifest};
    vec![
        ("event", schema_for::<event::Event>()),
        ("action_request", schema_for::<action::ActionRequest>()),
        ("action_response", schema_for::<action::ActionResponse>()),
        (
            "action_resolution",
            schema_for::<action::ActionResolution>(),
        ),
        ("artifact", schema_for::<artifact::ArtifactDescriptor>()),
        ("public_error", schema_for::<error::PublicError>()),
        (
            "capability_report",
            schema_for::<capability::CapabilityReport>(),
        ),
        ("requirement", schema_for::<capability::Requirement>()),
        ("manifest", schema_for::<manifest::HarnessDescriptor>()),
        ("execution_state", schema_for::<lifecycle::ExecutionState>()),
    ]
}

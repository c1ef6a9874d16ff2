use super::mode::{DependencyKind, TrustBoundary};
use super::version::ContractVersion;
use crate::id::AdapterId;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Lists JSON pointers for a message: `` `/a` ``, with the root as "the root".
pub(crate) fn list_pointers(pointers: &[String]) -> String {
    pointers
        .iter()
        .map(|p| {
            if p.is_empty() {
                "the root".to_owned()
            } else {
                format!("`{p}`")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One thing wrong with a [`HarnessDescriptor`](super::HarnessDescriptor).
///
/// Each message names the field, what was wrong and what would be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The builder was not given a required field.
    #[error("`{field}` is required: call `HarnessDescriptorBuilder::{method}`")]
    Missing {
        /// The wire name of the field.
        field: &'static str,
        /// The builder method that sets it.
        method: &'static str,
    },
    /// The display name is empty, too long or has control characters.
    #[error("`name` `{value}` is invalid: expected 1 to 128 characters without control characters")]
    InvalidName {
        /// The rejected name, truncated to 80 characters.
        value: String,
    },
    /// No contract version is declared.
    #[error("`contractVersions` is empty: declare every supported contract version, such as [1]")]
    NoContractVersions,
    /// A contract version is declared more than once.
    #[error(
        "contract version {version} is listed more than once in `contractVersions`: list each version once"
    )]
    DuplicateContractVersion {
        /// The repeated version.
        version: ContractVersion,
    },
    /// The implementation version is not `MAJOR.MINOR.PATCH[-pre][+build]`.
    #[error(
        "`implementationVersion` `{value}` is invalid ({reason}): expected \
         MAJOR.MINOR.PATCH[-pre][+build], such as `1.4.0` or `2.0.0-rc.1+build.5`"
    )]
    InvalidImplementationVersion {
        /// The rejected version, truncated to 80 characters.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The trust boundary is not one the execution mode can provide.
    #[error(
        "`trustBoundary` `{boundary}` does not fit execution mode `{mode}`: expected {}",
        .expected.iter().map(|b| format!("`{b}`")).collect::<Vec<_>>().join(" or ")
    )]
    TrustBoundaryMismatch {
        /// The wire name of the execution mode.
        mode: &'static str,
        /// The declared boundary.
        boundary: TrustBoundary,
        /// The boundaries that mode permits.
        expected: &'static [TrustBoundary],
    },
    /// A dependency has an invalid name or version requirement.
    #[error("dependency `{name}` ({kind}) is invalid: {problem}")]
    InvalidDependency {
        /// The dependency's name, truncated to 80 characters.
        name: String,
        /// Its kind.
        kind: DependencyKind,
        /// What is wrong and what would be right.
        problem: &'static str,
    },
    /// A dependency is listed more than once.
    #[error("dependency `{name}` ({kind}) is listed more than once: list each dependency once")]
    DuplicateDependency {
        /// The dependency's name.
        name: String,
        /// Its kind.
        kind: DependencyKind,
    },
    /// The options schema is not a valid JSON Schema.
    #[error("`optionsSchema` is not a valid JSON Schema: {reason}")]
    InvalidOptionsSchema {
        /// Why the schema was rejected.
        reason: String,
    },
    /// The options schema's root does not describe a JSON object.
    #[error(
        "`optionsSchema` must describe a JSON object: expected a root with `\"type\": \"object\"`, \
         `properties` and `\"additionalProperties\": false`"
    )]
    OptionsSchemaNotObject,
    /// Some object schemas in the options schema accept unknown fields.
    #[error(
        "`optionsSchema` accepts unknown fields at {}: add `#[serde(deny_unknown_fields)]` to the \
         options types (or `\"additionalProperties\": false` to each listed object schema)",
        list_pointers(.pointers)
    )]
    OpenOptionsSchema {
        /// JSON pointers (RFC 6901; `""` is the root) of the open object schemas.
        pointers: Vec<String>,
    },
    /// The certification evidence version is malformed.
    #[error(
        "`certificationEvidenceVersion` `{value}` is invalid: expected 1 to 128 characters from \
         [A-Za-z0-9._:+-]"
    )]
    InvalidCertificationEvidenceVersion {
        /// The rejected value, truncated to 80 characters.
        value: String,
    },
}

/// A descriptor was refused: every problem found, not just the first.
///
/// ```
/// use harness_core::manifest::{ExecutionMode, HarnessDescriptor, ManifestError};
///
/// let err = HarnessDescriptor::builder("scripted".parse().unwrap(), "1.0")
///     .execution_mode(ExecutionMode::in_process())
///     .build()
///     .unwrap_err();
/// assert_eq!(err.errors.len(), 2);
/// assert!(matches!(err.errors[0], ManifestError::NoContractVersions));
/// assert!(matches!(err.errors[1], ManifestError::InvalidImplementationVersion { .. }));
/// assert!(err.to_string().starts_with("invalid harness descriptor `scripted`: "));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid harness descriptor `{id}`: {}",
    .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
)]
pub struct InvalidManifest {
    /// The adapter the descriptor is for.
    pub id: AdapterId,
    /// Every problem found, in field order.
    pub errors: Vec<ManifestError>,
}

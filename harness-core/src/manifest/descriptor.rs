use schemars::JsonSchema;
use serde::de::{self};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::checks::{
    check_implementation_version, check_options_schema, valid_evidence_version, valid_name,
};
use super::errors::{InvalidManifest, ManifestError};
use super::mode::{Dependency, ExecutionMode, TrustBoundary};
use super::support::truncate_for_echo;
use super::version::ContractVersion;
use crate::capability::{Capability, CapabilityKey, CapabilityReport};
use crate::id::AdapterId;
use crate::wire::UnknownFields;

// ---------------------------------------------------------------------------------------------
// Descriptor
// ---------------------------------------------------------------------------------------------

/// The provider manifest of one adapter.
///
/// Fields: the stable [`AdapterId`], a display name, every supported [`ContractVersion`], one
/// implementation version (`MAJOR.MINOR.PATCH[-pre][+build]`), the [`ExecutionMode`] and
/// [`TrustBoundary`], required [`Dependency`]s, the JSON Schema of the adapter's options (which
/// must reject unknown fields), the [`CapabilityReport`], and the version of the conformance
/// evidence that certified it.
///
/// Build one with [`HarnessDescriptor::builder`] or deserialize it (camelCase); both validate,
/// so every `HarnessDescriptor` is valid. Building performs no I/O.
///
/// A descriptor written by a newer version may carry optional fields this one does not know:
/// they are read, kept and written back as they were (see [`crate::wire`]); the execution
/// mode alone refuses a field it does not know, since it says what the adapter can reach.
///
/// ```
/// use harness_core::manifest::HarnessDescriptor;
///
/// let json = serde_json::json!({
///     "id": "scripted",
///     "name": "Scripted",
///     "contractVersions": [1],
///     "implementationVersion": "0.1.0",
///     "executionMode": {"mode": "in_process", "compatibilityOnly": true},
///     "trustBoundary": "host_process",
///     "optionsSchema": {"type": "object", "additionalProperties": false},
///     "capabilities": {"stream.text": {"level": "native"}}
/// });
/// let descriptor: HarnessDescriptor = serde_json::from_value(json.clone()).unwrap();
/// assert_eq!(descriptor.id().as_str(), "scripted");
///
/// // An options schema that accepts unknown fields is refused at deserialization.
/// let mut open = json;
/// open["optionsSchema"] = serde_json::json!({"type": "object"});
/// let err = serde_json::from_value::<HarnessDescriptor>(open).unwrap_err();
/// assert!(err.to_string().contains("`optionsSchema` accepts unknown fields at the root"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    title = "HarnessDescriptor",
    description = "The provider manifest of one adapter (adapter contract v1)."
)]
pub struct HarnessDescriptor {
    /// The stable adapter id, matching `^[a-z][a-z0-9_]{1,63}$`.
    pub(crate) id: AdapterId,
    /// The display name.
    #[schemars(length(min = 1, max = 128))]
    pub(crate) name: String,
    /// Every supported contract version (non-empty, no duplicates).
    #[schemars(length(min = 1), extend("uniqueItems" = true))]
    pub(crate) contract_versions: Vec<ContractVersion>,
    /// The adapter's version, `MAJOR.MINOR.PATCH[-pre][+build]`.
    #[schemars(regex(
        pattern = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$"
    ))]
    pub(crate) implementation_version: String,
    /// Where and how the runtime executes.
    pub(crate) execution_mode: ExecutionMode,
    /// What a fault or compromise of the adapter can reach.
    pub(crate) trust_boundary: TrustBoundary,
    /// What the adapter needs in order to run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) dependencies: Vec<Dependency>,
    /// The JSON Schema of the adapter's options; every object schema in it rejects unknown
    /// fields.
    pub(crate) options_schema: Value,
    /// The declared capabilities.
    pub(crate) capabilities: CapabilityReport,
    /// The version of the conformance evidence that certified this adapter version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) certification_evidence_version: Option<String>,
    /// Fields a newer writer added that this version does not know, written back as read
    /// (see [`crate::wire`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: UnknownFields,
}

impl HarnessDescriptor {
    /// Starts a descriptor for adapter `id` at `implementation_version`.
    pub fn builder(
        id: AdapterId,
        implementation_version: impl Into<String>,
    ) -> HarnessDescriptorBuilder {
        HarnessDescriptorBuilder {
            id,
            implementation_version: implementation_version.into(),
            name: None,
            contract_versions: Vec::new(),
            execution_mode: None,
            trust_boundary: None,
            dependencies: Vec::new(),
            options_schema: None,
            capabilities: CapabilityReport::new(),
            certification_evidence_version: None,
        }
    }

    /// The adapter id.
    #[must_use]
    pub fn id(&self) -> &AdapterId {
        &self.id
    }

    /// Top-level fields a newer writer added that this version does not know (kept, and
    /// written back when the descriptor is serialized again).
    #[must_use]
    pub fn unknown_fields(&self) -> &UnknownFields {
        &self.unknown
    }

    /// The display name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every supported contract version, as declared.
    #[must_use]
    pub fn contract_versions(&self) -> &[ContractVersion] {
        &self.contract_versions
    }

    /// The implementation version.
    #[must_use]
    pub fn implementation_version(&self) -> &str {
        &self.implementation_version
    }

    /// The execution mode.
    #[must_use]
    pub fn execution_mode(&self) -> &ExecutionMode {
        &self.execution_mode
    }

    /// The trust boundary.
    #[must_use]
    pub fn trust_boundary(&self) -> TrustBoundary {
        self.trust_boundary
    }

    /// The dependencies.
    #[must_use]
    pub fn dependencies(&self) -> &[Dependency] {
        &self.dependencies
    }

    /// The options JSON Schema.
    #[must_use]
    pub fn options_schema(&self) -> &Value {
        &self.options_schema
    }

    /// The declared capabilities.
    #[must_use]
    pub fn capabilities(&self) -> &CapabilityReport {
        &self.capabilities
    }

    /// The certification evidence version, if certified.
    #[must_use]
    pub fn certification_evidence_version(&self) -> Option<&str> {
        self.certification_evidence_version.as_deref()
    }

    /// The highest contract version both this descriptor and `supported` list.
    #[must_use]
    pub fn highest_common_version(&self, supported: &[ContractVersion]) -> Option<ContractVersion> {
        ContractVersion::highest_common(&self.contract_versions, supported)
    }

    /// Checks everything the field types do not: the name, that contract versions are
    /// non-empty and distinct, the implementation version format, that the trust boundary fits
    /// the execution mode, dependencies (valid, distinct), that the options schema is a valid
    /// JSON Schema describing an object and rejecting unknown fields everywhere (see
    /// [`open_object_schemas`](super::checks::open_object_schemas)), and the certification evidence version.
    ///
    /// Pure and in memory: no I/O.
    ///
    /// # Errors
    ///
    /// Every problem found, in field order.
    pub fn validate(&self) -> Result<(), Vec<ManifestError>> {
        let mut errors = Vec::new();
        if !valid_name(&self.name) {
            errors.push(ManifestError::InvalidName {
                value: truncate_for_echo(&self.name),
            });
        }
        if self.contract_versions.is_empty() {
            errors.push(ManifestError::NoContractVersions);
        }
        let mut reported = Vec::new();
        for (i, v) in self.contract_versions.iter().enumerate() {
            if self.contract_versions[..i].contains(v) && !reported.contains(v) {
                reported.push(*v);
                errors.push(ManifestError::DuplicateContractVersion { version: *v });
            }
        }
        if let Err(reason) = check_implementation_version(&self.implementation_version) {
            errors.push(ManifestError::InvalidImplementationVersion {
                value: truncate_for_echo(&self.implementation_version),
                reason,
            });
        }
        let permitted = self.execution_mode.permitted_trust_boundaries();
        if !permitted.contains(&self.trust_boundary) {
            errors.push(ManifestError::TrustBoundaryMismatch {
                mode: self.execution_mode.as_str(),
                boundary: self.trust_boundary,
                expected: permitted,
            });
        }
        for (i, dep) in self.dependencies.iter().enumerate() {
            if let Some(problem) = dep.problem() {
                errors.push(ManifestError::InvalidDependency {
                    name: truncate_for_echo(&dep.name),
                    kind: dep.kind,
                    problem,
                });
            }
            let earlier = self.dependencies[..i]
                .iter()
                .filter(|d| d.kind == dep.kind && d.name == dep.name)
                .count();
            // Report a repeated dependency once, at its second occurrence.
            if earlier == 1 {
                errors.push(ManifestError::DuplicateDependency {
                    name: truncate_for_echo(&dep.name),
                    kind: dep.kind,
                });
            }
        }
        check_options_schema(&self.options_schema, &mut errors);
        if let Some(v) = &self.certification_evidence_version
            && !valid_evidence_version(v)
        {
            errors.push(ManifestError::InvalidCertificationEvidenceVersion {
                value: truncate_for_echo(v),
            });
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// The wire form before validation.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawHarnessDescriptor {
    id: AdapterId,
    name: String,
    contract_versions: Vec<ContractVersion>,
    implementation_version: String,
    execution_mode: ExecutionMode,
    trust_boundary: TrustBoundary,
    #[serde(default)]
    dependencies: Vec<Dependency>,
    options_schema: Value,
    capabilities: CapabilityReport,
    #[serde(default)]
    certification_evidence_version: Option<String>,
    #[serde(flatten)]
    unknown: UnknownFields,
}

impl TryFrom<RawHarnessDescriptor> for HarnessDescriptor {
    type Error = InvalidManifest;
    fn try_from(raw: RawHarnessDescriptor) -> Result<Self, Self::Error> {
        let descriptor = Self {
            id: raw.id,
            name: raw.name,
            contract_versions: raw.contract_versions,
            implementation_version: raw.implementation_version,
            execution_mode: raw.execution_mode,
            trust_boundary: raw.trust_boundary,
            dependencies: raw.dependencies,
            options_schema: raw.options_schema,
            capabilities: raw.capabilities,
            certification_evidence_version: raw.certification_evidence_version,
            unknown: raw.unknown,
        };
        match descriptor.validate() {
            Ok(()) => Ok(descriptor),
            Err(errors) => Err(InvalidManifest {
                id: descriptor.id,
                errors,
            }),
        }
    }
}

impl<'de> Deserialize<'de> for HarnessDescriptor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawHarnessDescriptor::deserialize(d)?;
        Self::try_from(raw).map_err(de::Error::custom)
    }
}

/// Builds a [`HarnessDescriptor`]; see [`HarnessDescriptor::builder`].
///
/// Defaults: the name is the adapter id; the trust boundary is the first one the execution
/// mode permits ([`ExecutionMode::permitted_trust_boundaries`]); no dependencies; the options
/// schema is the closed empty object `{"type": "object", "additionalProperties": false}` (no
/// options); no capabilities declared. The contract versions and the execution mode have no
/// default: a descriptor states them.
///
/// ```
/// use harness_core::manifest::{ContractVersion, ExecutionMode, HarnessDescriptor, TrustBoundary};
///
/// let d = HarnessDescriptor::builder("scripted".parse().unwrap(), "0.1.0")
///     .contract_version(ContractVersion::V1)
///     .execution_mode(ExecutionMode::in_process())
///     .build()
///     .unwrap();
/// assert_eq!(d.name(), "scripted");
/// assert_eq!(d.trust_boundary(), TrustBoundary::HostProcess);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct HarnessDescriptorBuilder {
    id: AdapterId,
    implementation_version: String,
    name: Option<String>,
    contract_versions: Vec<ContractVersion>,
    execution_mode: Option<ExecutionMode>,
    trust_boundary: Option<TrustBoundary>,
    dependencies: Vec<Dependency>,
    options_schema: Option<Value>,
    capabilities: CapabilityReport,
    certification_evidence_version: Option<String>,
}

impl HarnessDescriptorBuilder {
    /// Sets the display name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a supported contract version.
    pub fn contract_version(mut self, version: ContractVersion) -> Self {
        self.contract_versions.push(version);
        self
    }

    /// Adds several supported contract versions.
    pub fn contract_versions(
        mut self,
        versions: impl IntoIterator<Item = ContractVersion>,
    ) -> Self {
        self.contract_versions.extend(versions);
        self
    }

    /// Sets the execution mode.
    pub fn execution_mode(mut self, mode: ExecutionMode) -> Self {
        self.execution_mode = Some(mode);
        self
    }

    /// Sets the trust boundary (by default the first one the execution mode permits).
    pub fn trust_boundary(mut self, boundary: TrustBoundary) -> Self {
        self.trust_boundary = Some(boundary);
        self
    }

    /// Adds a dependency.
    pub fn dependency(mut self, dependency: Dependency) -> Self {
        self.dependencies.push(dependency);
        self
    }

    /// Sets the options JSON Schema.
    pub fn options_schema(mut self, schema: Value) -> Self {
        self.options_schema = Some(schema);
        self
    }

    /// Sets the options JSON Schema to the one schemars generates for `T` (JSON Schema
    /// 2020-12, for deserialization). Derive `T` with `#[serde(deny_unknown_fields)]`, or the
    /// build fails.
    pub fn options_schema_for<T: JsonSchema>(self) -> Self {
        let schema = schemars::generate::SchemaSettings::draft2020_12()
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<T>();
        self.options_schema(schema.to_value())
    }

    /// Declares a capability.
    pub fn capability(mut self, key: CapabilityKey, capability: Capability) -> Self {
        self.capabilities.declare(key, capability);
        self
    }

    /// Replaces the whole capability report.
    pub fn capabilities(mut self, report: CapabilityReport) -> Self {
        self.capabilities = report;
        self
    }

    /// Sets the certification evidence version.
    pub fn certification_evidence_version(mut self, version: impl Into<String>) -> Self {
        self.certification_evidence_version = Some(version.into());
        self
    }

    /// Builds and validates the descriptor. Pure: no I/O.
    ///
    /// # Errors
    ///
    /// [`InvalidManifest`] listing every problem: a missing execution mode, and everything
    /// [`HarnessDescriptor::validate`] finds.
    pub fn build(self) -> Result<HarnessDescriptor, InvalidManifest> {
        let mut errors = Vec::new();
        let mode_given = self.execution_mode.is_some();
        let execution_mode = self.execution_mode.unwrap_or_else(|| {
            errors.push(ManifestError::Missing {
                field: "executionMode",
                method: "execution_mode",
            });
            // A stand-in so that every other problem is still reported.
            ExecutionMode::ProviderManaged
        });
        let trust_boundary = self
            .trust_boundary
            .unwrap_or_else(|| execution_mode.default_trust_boundary());
        let name = self.name.unwrap_or_else(|| self.id.to_string());
        let descriptor = HarnessDescriptor {
            id: self.id,
            name,
            contract_versions: self.contract_versions,
            implementation_version: self.implementation_version,
            execution_mode,
            trust_boundary,
            dependencies: self.dependencies,
            options_schema: self.options_schema.unwrap_or_else(
                || serde_json::json!({"type": "object", "additionalProperties": false}),
            ),
            capabilities: self.capabilities,
            certification_evidence_version: self.certification_evidence_version,
            unknown: UnknownFields::default(),
        };
        if let Err(found) = descriptor.validate() {
            // Without a real mode, a boundary mismatch against the stand-in means nothing.
            errors.extend(found.into_iter().filter(|e| {
                mode_given || !matches!(e, ManifestError::TrustBoundaryMismatch { .. })
            }));
        }
        if errors.is_empty() {
            Ok(descriptor)
        } else {
            Err(InvalidManifest {
                id: descriptor.id,
                errors,
            })
        }
    }
}

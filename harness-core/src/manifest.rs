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

use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::capability::{Capability, CapabilityKey, CapabilityReport};
use crate::id::{AdapterId, InvalidId};

/// Cuts an echoed input to 80 characters.
fn truncate_for_echo(s: &str) -> String {
    if s.chars().count() > 80 {
        let mut v: String = s.chars().take(77).collect();
        v.push_str("...");
        v
    } else {
        s.to_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Contract version
// ---------------------------------------------------------------------------------------------

/// A version of the adapter contract: an integer, at least 1. On the wire a plain integer.
///
/// ```
/// use harness_core::manifest::ContractVersion;
/// assert_eq!(ContractVersion::V1.get(), 1);
/// assert_eq!(serde_json::to_string(&ContractVersion::V1).unwrap(), "1");
/// assert_eq!(serde_json::from_str::<ContractVersion>("2").unwrap().get(), 2);
/// assert!(serde_json::from_str::<ContractVersion>("0").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContractVersion(NonZeroU32);

impl ContractVersion {
    /// Contract version 1, the one this engine implements.
    pub const V1: Self = Self(NonZeroU32::MIN);

    /// The version `n`; `None` for zero.
    #[must_use]
    pub const fn new(n: u32) -> Option<Self> {
        match NonZeroU32::new(n) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }

    /// The version number.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0.get()
    }

    /// The highest version present in both lists, if any.
    ///
    /// ```
    /// use harness_core::manifest::ContractVersion;
    /// let v = |n| ContractVersion::new(n).unwrap();
    /// assert_eq!(ContractVersion::highest_common(&[v(1), v(2), v(3)], &[v(2), v(1)]), Some(v(2)));
    /// assert_eq!(ContractVersion::highest_common(&[v(2)], &[v(1)]), None);
    /// ```
    #[must_use]
    pub fn highest_common(a: &[Self], b: &[Self]) -> Option<Self> {
        a.iter().filter(|v| b.contains(v)).max().copied()
    }
}

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for ContractVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.get())
    }
}

struct ContractVersionVisitor;

impl Visitor<'_> for ContractVersionVisitor {
    type Value = ContractVersion;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a contract version: an integer >= 1")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        u32::try_from(v)
            .ok()
            .and_then(ContractVersion::new)
            .ok_or_else(|| {
                E::custom(format_args!(
                    "invalid contract version {v}: expected an integer >= 1 (such as 1)"
                ))
            })
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format_args!(
                "invalid contract version {v}: expected an integer >= 1 (such as 1)"
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for ContractVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_u64(ContractVersionVisitor)
    }
}

impl JsonSchema for ContractVersion {
    fn schema_name() -> Cow<'static, str> {
        "ContractVersion".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "integer",
            "minimum": 1,
            "maximum": u32::MAX,
            "description": "An adapter contract version."
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Execution mode and trust boundary
// ---------------------------------------------------------------------------------------------

/// The id of an operator-owned sandbox profile, such as `gvisor-small` or `kata.gpu_a100`.
///
/// The operator defines what a profile means (image, command, service account, volumes,
/// RuntimeClass, NetworkPolicy, ...); an adapter only names one. Profile ids follow adapter ids
/// (`^[a-z][a-z0-9_]{1,63}$`) but also allow `-` and `.`, because operators usually name profiles
/// after Kubernetes objects, whose names use them: `^[a-z][a-z0-9._-]{1,63}$`.
///
/// ```
/// use harness_core::manifest::OperatorProfileId;
/// assert!("gvisor-small".parse::<OperatorProfileId>().is_ok());
/// assert!("kata.gpu_a100".parse::<OperatorProfileId>().is_ok());
/// assert!("Gvisor".parse::<OperatorProfileId>().is_err());
/// assert!("x".parse::<OperatorProfileId>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OperatorProfileId(Box<str>);

/// The pattern every [`OperatorProfileId`] matches.
pub const OPERATOR_PROFILE_ID_PATTERN: &str = "^[a-z][a-z0-9._-]{1,63}$";

impl OperatorProfileId {
    /// Checks `s` against [`OPERATOR_PROFILE_ID_PATTERN`].
    #[must_use]
    pub const fn is_valid(s: &str) -> bool {
        let b = s.as_bytes();
        if b.len() < 2 || b.len() > 64 || !b[0].is_ascii_lowercase() {
            return false;
        }
        let mut i = 1;
        while i < b.len() {
            let c = b[i];
            if !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'.')) {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The id as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for OperatorProfileId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if Self::is_valid(s) {
            Ok(Self(s.into()))
        } else {
            Err(InvalidId {
                kind: "operator profile id",
                value: truncate_for_echo(s),
                expected: "a lowercase id matching ^[a-z][a-z0-9._-]{1,63}$",
            })
        }
    }
}

impl TryFrom<String> for OperatorProfileId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

crate::id::string_id_common!(
    OperatorProfileId,
    OPERATOR_PROFILE_ID_PATTERN,
    "An operator-owned sandbox profile id."
);

/// The marker carried by [`ExecutionMode::InProcess`]: in-process execution is
/// compatibility-only, and the descriptor must say so.
///
/// It serializes as `true` and deserializes only from `true`, so
/// `{"mode":"in_process","compatibilityOnly":false}` (or without the field) is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CompatibilityOnly;

const COMPATIBILITY_ONLY_MESSAGE: &str = "in_process execution is compatibility-only and must say so: \
     expected `\"compatibilityOnly\": true`";

impl Serialize for CompatibilityOnly {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(true)
    }
}

struct CompatibilityOnlyVisitor;

impl Visitor<'_> for CompatibilityOnlyVisitor {
    type Value = CompatibilityOnly;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("`true` (in_process execution is compatibility-only)")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        if v {
            Ok(CompatibilityOnly)
        } else {
            Err(E::custom(COMPATIBILITY_ONLY_MESSAGE))
        }
    }
}

impl<'de> Deserialize<'de> for CompatibilityOnly {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_bool(CompatibilityOnlyVisitor)
    }
}

impl JsonSchema for CompatibilityOnly {
    fn schema_name() -> Cow<'static, str> {
        "CompatibilityOnly".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "boolean", "const": true })
    }
}

/// Where and how an adapter's runtime executes.
///
/// Wire form, tagged by `mode`:
///
/// - `{"mode": "sandbox_pod", "profileId": "gvisor-small"}`: in a sandbox worker pod built from
///   an operator-owned profile. The descriptor only names the profile; it cannot supply a raw
///   Pod spec, image, command, service account, volume, RuntimeClass or NetworkPolicy, and
///   such fields are rejected with a message saying so.
/// - `{"mode": "provider_managed"}`: on the provider's infrastructure, behind the control
///   plane's remote client.
/// - `{"mode": "in_process", "compatibilityOnly": true}`: inside the engine's process. Allowed
///   for compatibility only, and the descriptor must say so explicitly.
///
/// ```
/// use harness_core::manifest::ExecutionMode;
///
/// let mode: ExecutionMode =
///     serde_json::from_str(r#"{"mode":"sandbox_pod","profileId":"gvisor-small"}"#).unwrap();
/// assert_eq!(mode, ExecutionMode::sandbox_pod("gvisor-small".parse().unwrap()));
///
/// let err = serde_json::from_str::<ExecutionMode>(
///     r#"{"mode":"sandbox_pod","profileId":"gvisor-small","image":"evil:latest"}"#,
/// )
/// .unwrap_err();
/// assert!(err.to_string().starts_with(
///     "sandbox_pod references an operator-owned profile id; it cannot supply `image`"
/// ));
///
/// assert!(serde_json::from_str::<ExecutionMode>(r#"{"mode":"in_process"}"#).is_err());
/// assert!(
///     serde_json::from_str::<ExecutionMode>(r#"{"mode":"in_process","compatibilityOnly":false}"#)
///         .is_err()
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[schemars(
    description = "Where and how an adapter's runtime executes: sandbox_pod (an operator-owned profile), provider_managed, or compatibility-only in_process."
)]
#[serde(
    tag = "mode",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum ExecutionMode {
    /// In a sandbox worker pod built from an operator-owned profile.
    SandboxPod {
        /// The operator-owned profile that defines the pod.
        profile_id: OperatorProfileId,
    },
    /// On the provider's infrastructure, behind the control plane's remote client.
    ProviderManaged,
    /// Inside the engine's own process: compatibility only.
    InProcess {
        /// Always `true`: in-process execution is compatibility-only.
        compatibility_only: CompatibilityOnly,
    },
}

impl ExecutionMode {
    /// `sandbox_pod` with the operator profile `profile_id`.
    #[must_use]
    pub fn sandbox_pod(profile_id: OperatorProfileId) -> Self {
        Self::SandboxPod { profile_id }
    }

    /// `in_process`, compatibility-only.
    #[must_use]
    pub fn in_process() -> Self {
        Self::InProcess {
            compatibility_only: CompatibilityOnly,
        }
    }

    /// The wire name of the mode (`sandbox_pod`, `provider_managed`, `in_process`).
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::SandboxPod { .. } => "sandbox_pod",
            Self::ProviderManaged => "provider_managed",
            Self::InProcess { .. } => "in_process",
        }
    }

    /// The trust boundary the builder assumes for this mode: the first of
    /// [`ExecutionMode::permitted_trust_boundaries`].
    #[must_use]
    pub fn default_trust_boundary(&self) -> TrustBoundary {
        match self {
            Self::SandboxPod { .. } => TrustBoundary::Sandbox,
            Self::ProviderManaged => TrustBoundary::RemoteProvider,
            Self::InProcess { .. } => TrustBoundary::HostProcess,
        }
    }

    /// The trust boundaries an adapter running in this mode can honestly claim.
    ///
    /// `sandbox_pod` runs in a [`TrustBoundary::Sandbox`]; `provider_managed` behind a
    /// [`TrustBoundary::RemoteProvider`]; `in_process` in the [`TrustBoundary::HostProcess`] or,
    /// when it drives a local CLI, a [`TrustBoundary::LocalSubprocess`]. The first is the
    /// default the builder picks.
    #[must_use]
    pub fn permitted_trust_boundaries(&self) -> &'static [TrustBoundary] {
        match self {
            Self::SandboxPod { .. } => &[TrustBoundary::Sandbox],
            Self::ProviderManaged => &[TrustBoundary::RemoteProvider],
            Self::InProcess { .. } => &[TrustBoundary::HostProcess, TrustBoundary::LocalSubprocess],
        }
    }
}

impl fmt::Display for ExecutionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Fields of a Kubernetes Pod (or its parts) that a `sandbox_pod` descriptor may not supply,
/// compared case-insensitively and ignoring `_` and `-`.
const POD_FIELDS: &[&str] = &[
    "image",
    "images",
    "command",
    "args",
    "env",
    "serviceaccount",
    "serviceaccountname",
    "volumes",
    "volume",
    "volumemounts",
    "runtimeclass",
    "runtimeclassname",
    "networkpolicy",
    "networkpolicies",
    "podspec",
    "pod",
    "spec",
    "securitycontext",
];

fn is_pod_field(key: &str) -> bool {
    let normal: String = key
        .chars()
        .filter(|c| !matches!(c, '_' | '-'))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    POD_FIELDS.contains(&normal.as_str())
}

/// The fields of a `sandbox_pod` mode; refuses pod fields by name.
struct RawSandboxPod {
    profile_id: OperatorProfileId,
}

impl<'de> Deserialize<'de> for RawSandboxPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawSandboxPod;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sandbox_pod execution mode with a `profileId`")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut profile_id = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "profileId" {
                        if profile_id.is_some() {
                            return Err(de::Error::duplicate_field("profileId"));
                        }
                        profile_id = Some(map.next_value::<OperatorProfileId>()?);
                    } else if is_pod_field(&key) {
                        return Err(de::Error::custom(format_args!(
                            "sandbox_pod references an operator-owned profile id; it cannot \
                             supply `{}`: the operator's profile defines the pod",
                            truncate_for_echo(&key)
                        )));
                    } else {
                        return Err(de::Error::unknown_field(&key, &["profileId"]));
                    }
                }
                let profile_id = profile_id.ok_or_else(|| de::Error::missing_field("profileId"))?;
                Ok(RawSandboxPod { profile_id })
            }
        }
        d.deserialize_map(V)
    }
}

/// The (no) fields of a `provider_managed` mode.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProviderManaged {}

/// The fields of an `in_process` mode; `compatibilityOnly: true` is required.
struct RawInProcess;

impl<'de> Deserialize<'de> for RawInProcess {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawInProcess;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an in_process execution mode with `\"compatibilityOnly\": true`")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut seen = false;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "compatibilityOnly" {
                        if seen {
                            return Err(de::Error::duplicate_field("compatibilityOnly"));
                        }
                        map.next_value::<CompatibilityOnly>()?;
                        seen = true;
                    } else {
                        return Err(de::Error::unknown_field(&key, &["compatibilityOnly"]));
                    }
                }
                if seen {
                    Ok(RawInProcess)
                } else {
                    Err(de::Error::custom(COMPATIBILITY_ONLY_MESSAGE))
                }
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
enum RawExecutionMode {
    SandboxPod(RawSandboxPod),
    ProviderManaged(RawProviderManaged),
    InProcess(RawInProcess),
}

impl<'de> Deserialize<'de> for ExecutionMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match RawExecutionMode::deserialize(d)? {
            RawExecutionMode::SandboxPod(RawSandboxPod { profile_id }) => {
                Self::SandboxPod { profile_id }
            }
            RawExecutionMode::ProviderManaged(RawProviderManaged {}) => Self::ProviderManaged,
            RawExecutionMode::InProcess(RawInProcess) => Self::in_process(),
        })
    }
}

/// The outermost boundary that an adapter's agent loop and tools run inside: what a fault or
/// compromise of the adapter can reach.
///
/// It must agree with the [`ExecutionMode`] (see
/// [`ExecutionMode::permitted_trust_boundaries`]); [`HarnessDescriptor::validate`] checks it.
///
/// ```
/// use harness_core::manifest::TrustBoundary;
/// assert_eq!(serde_json::to_string(&TrustBoundary::LocalSubprocess).unwrap(), "\"local_subprocess\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(
    description = "The outermost boundary the adapter's agent loop and tools run inside; must fit the execution mode."
)]
pub enum TrustBoundary {
    /// Inside the engine's own process, with all of its privileges: adapter code is trusted as
    /// much as the engine.
    HostProcess,
    /// In a separate process on the engine's host (such as a CLI agent over stdio), with the
    /// privileges of the user it runs as, but not in the engine's memory.
    LocalSubprocess,
    /// In an isolating sandbox (a sandbox worker pod) that sees only scoped service facades,
    /// never the control plane's clients or credentials.
    Sandbox,
    /// On the provider's infrastructure: inputs leave the deployment, and the engine sees only
    /// the provider's API.
    RemoteProvider,
}

impl TrustBoundary {
    /// The wire name (`host_process`, ...).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::HostProcess => "host_process",
            Self::LocalSubprocess => "local_subprocess",
            Self::Sandbox => "sandbox",
            Self::RemoteProvider => "remote_provider",
        }
    }
}

impl fmt::Display for TrustBoundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------------------------
// Dependencies
// ---------------------------------------------------------------------------------------------

/// What kind of thing a [`Dependency`] is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[schemars(description = "What kind of thing a dependency is.")]
#[non_exhaustive]
pub enum DependencyKind {
    /// An executable on `PATH` (such as `claude` or `gemini`).
    Binary,
    /// An npm package.
    NpmPackage,
    /// A Python package.
    PythonPackage,
    /// A Rust crate.
    Crate,
    /// A network service (a provider API, an MCP server, a database).
    Service,
}

impl DependencyKind {
    /// The wire name (`npm_package`, ...).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Binary => "binary",
            Self::NpmPackage => "npm_package",
            Self::PythonPackage => "python_package",
            Self::Crate => "crate",
            Self::Service => "service",
        }
    }
}

impl fmt::Display for DependencyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something an adapter needs in order to run, which health checks verify.
///
/// `version` is a requirement in the dependency's own ecosystem syntax (`>=1.2, <2`, `^0.3`,
/// `*`). An optional dependency enables part of the adapter; its absence does not fail it.
///
/// ```
/// use harness_core::manifest::{Dependency, DependencyKind};
/// let dep = Dependency::new(DependencyKind::Binary, "claude", ">=1.0").optional();
/// assert_eq!(
///     serde_json::to_value(&dep).unwrap(),
///     serde_json::json!({"name": "claude", "kind": "binary", "version": ">=1.0", "optional": true})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(description = "Something an adapter needs in order to run.")]
pub struct Dependency {
    /// The name in its ecosystem (`@google/gemini-cli`, `claude`, `tokio`).
    name: String,
    /// What kind of dependency it is.
    kind: DependencyKind,
    /// A version requirement in the ecosystem's own syntax.
    version: String,
    /// Whether the adapter still works, with less, without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    optional: bool,
}

impl Dependency {
    /// A required dependency. Its name and version are checked when the descriptor is built.
    #[must_use]
    pub fn new(kind: DependencyKind, name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind,
            version: version.into(),
            optional: false,
        }
    }

    /// Marks the dependency optional.
    #[must_use]
    pub fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// The name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind.
    #[must_use]
    pub fn kind(&self) -> DependencyKind {
        self.kind
    }

    /// The version requirement.
    #[must_use]
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Whether it is optional.
    #[must_use]
    pub fn is_optional(&self) -> bool {
        self.optional
    }

    fn problem(&self) -> Option<&'static str> {
        if self.name.is_empty() || self.name.len() > 214 {
            Some("the name must be 1 to 214 characters")
        } else if self
            .name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            Some("the name must not contain whitespace or control characters")
        } else if self.version.trim().is_empty() || self.version.len() > 128 {
            Some("the version requirement must be 1 to 128 characters, such as `>=1.2` or `*`")
        } else if self.version.chars().any(char::is_control) {
            Some("the version requirement must not contain control characters")
        } else {
            None
        }
    }
}

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

/// One thing wrong with a [`HarnessDescriptor`].
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

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Checks a semantic-versioning-like `MAJOR.MINOR.PATCH[-pre][+build]` version.
fn check_implementation_version(s: &str) -> Result<(), &'static str> {
    fn is_ident_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-'
    }
    if s.len() > 128 {
        return Err("longer than 128 characters");
    }
    let (rest, build) = match s.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 {
        return Err("expected exactly three numeric components");
    }
    for part in parts {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err("MAJOR, MINOR and PATCH must be non-negative integers");
        }
        if part.len() > 1 && part.starts_with('0') {
            return Err("numeric components must not have leading zeros");
        }
    }
    if let Some(pre) = pre {
        for ident in pre.split('.') {
            if ident.is_empty() || !ident.chars().all(is_ident_char) {
                return Err("pre-release identifiers must be non-empty [0-9A-Za-z-]");
            }
            if ident.len() > 1
                && ident.starts_with('0')
                && ident.bytes().all(|b| b.is_ascii_digit())
            {
                return Err("numeric pre-release identifiers must not have leading zeros");
            }
        }
    }
    if let Some(build) = build {
        for ident in build.split('.') {
            if ident.is_empty() || !ident.chars().all(is_ident_char) {
                return Err("build identifiers must be non-empty [0-9A-Za-z-]");
            }
        }
    }
    Ok(())
}

fn valid_name(s: &str) -> bool {
    (1..=128).contains(&s.chars().count())
        && !s.trim().is_empty()
        && !s.chars().any(char::is_control)
}

fn valid_evidence_version(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'+' | b'-'))
}

/// Keywords that only annotate: a schema made of nothing else accepts any value.
const ANNOTATION_KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$anchor",
    "$comment",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Nesting of subschemas beyond which a schema is not analysed (and is reported as open).
const MAX_SCHEMA_DEPTH: usize = 64;
/// Longest chain of local `$ref`s followed.
const MAX_REF_HOPS: usize = 16;

/// Whether a schema accepts every value: `true`, or an object of annotations only.
fn accepts_anything(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(map) => map
            .keys()
            .all(|k| ANNOTATION_KEYWORDS.contains(&k.as_str())),
        _ => false,
    }
}

/// Follows a local `$ref` (`#`, `#/...`) from `schema`, up to [`MAX_REF_HOPS`] times.
fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> Option<&'a Value> {
    for _ in 0..MAX_REF_HOPS {
        let Some(Value::String(reference)) = schema.get("$ref") else {
            return Some(schema);
        };
        let pointer = reference.strip_prefix('#')?;
        schema = root.pointer(pointer)?;
    }
    None
}

fn has_type(map: &serde_json::Map<String, Value>, ty: &str) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == ty,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == ty),
        _ => false,
    }
}

/// An object schema: typed `object`, or with `properties` / `patternProperties`.
fn is_object_schema(map: &serde_json::Map<String, Value>) -> bool {
    has_type(map, "object")
        || map.contains_key("properties")
        || map.contains_key("patternProperties")
}

/// Closed by its own keywords: `additionalProperties: false`, `unevaluatedProperties: false`,
/// or a deliberate map (`additionalProperties` / `unevaluatedProperties` given a schema that
/// constrains the values), whose keys are data rather than option names.
fn closes_itself(map: &serde_json::Map<String, Value>) -> bool {
    ["additionalProperties", "unevaluatedProperties"]
        .iter()
        .any(|kw| match map.get(*kw) {
            Some(Value::Bool(b)) => !b,
            Some(v @ Value::Object(_)) => !accepts_anything(v),
            _ => false,
        })
}

/// Whether `schema` rejects every object with unknown fields: closed itself, closed by its
/// branches, or not accepting objects at all.
fn rejects_unknown_fields(root: &Value, schema: &Value, depth: usize) -> bool {
    if depth > MAX_REF_HOPS {
        return false;
    }
    let Some(schema) = resolve(root, schema) else {
        return false;
    };
    match schema {
        Value::Bool(b) => !b,
        Value::Object(map) => {
            closes_itself(map)
                || map.contains_key("const")
                || map.contains_key("enum")
                || (map.contains_key("type") && !has_type(map, "object"))
                || closed_by_branches(root, map, depth + 1)
        }
        _ => false,
    }
}

/// An object schema without closing keywords of its own is still closed when one `allOf`
/// branch, or every `anyOf` / `oneOf` branch, is closed, or its sibling `$ref` is.
fn closed_by_branches(root: &Value, map: &serde_json::Map<String, Value>, depth: usize) -> bool {
    let branches = |kw: &str| match map.get(kw) {
        Some(Value::Array(items)) if !items.is_empty() => Some(items),
        _ => None,
    };
    if let Some(items) = branches("allOf")
        && items.iter().any(|s| rejects_unknown_fields(root, s, depth))
    {
        return true;
    }
    if ["anyOf", "oneOf"].iter().any(|kw| {
        branches(kw)
            .is_some_and(|items| items.iter().all(|s| rejects_unknown_fields(root, s, depth)))
    }) {
        return true;
    }
    map.get("$ref").is_some_and(|target| {
        rejects_unknown_fields(root, &serde_json::json!({ "$ref": target }), depth)
    })
}

/// Whether the root schema describes only JSON objects (possibly through a local `$ref` or as a
/// union of object schemas, like a schemars-generated enum).
fn describes_objects(root: &Value, schema: &Value, depth: usize) -> bool {
    if depth > MAX_REF_HOPS {
        return false;
    }
    let Some(Value::Object(map)) = resolve(root, schema) else {
        return false;
    };
    if is_object_schema(map) {
        return true;
    }
    let branches = |kw: &str| match map.get(kw) {
        Some(Value::Array(items)) if !items.is_empty() => Some(items),
        _ => None,
    };
    if let Some(items) = branches("allOf")
        && items.iter().any(|s| describes_objects(root, s, depth + 1))
    {
        return true;
    }
    ["anyOf", "oneOf"].iter().any(|kw| {
        branches(kw)
            .is_some_and(|items| items.iter().all(|s| describes_objects(root, s, depth + 1)))
    })
}

fn push_pointer(pointer: &str, token: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + token.len() + 1);
    out.push_str(pointer);
    out.push('/');
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

struct Walk<'a> {
    root: &'a Value,
    open: Vec<String>,
}

impl Walk<'_> {
    /// Visits the subschema `node` at `pointer`. `covered` is true when an enclosing schema at
    /// the same instance location already rejects unknown fields (for the branches of
    /// `allOf`/`anyOf`/`oneOf`/`if`/`then`/`else` under a closed schema).
    fn visit(&mut self, node: &Value, pointer: &str, covered: bool, depth: usize) {
        let Value::Object(map) = node else {
            return;
        };
        if depth > MAX_SCHEMA_DEPTH {
            self.open.push(pointer.to_owned());
            return;
        }
        let closed_here = closes_itself(map);
        if is_object_schema(map)
            && !closed_here
            && !covered
            && !closed_by_branches(self.root, map, 0)
        {
            self.open.push(pointer.to_owned());
        }

        // Same instance location: a closed parent covers its branches.
        let cover = covered || closed_here;
        for kw in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(items)) = map.get(kw) {
                let base = push_pointer(pointer, kw);
                for (i, sub) in items.iter().enumerate() {
                    self.visit(sub, &push_pointer(&base, &i.to_string()), cover, depth + 1);
                }
            }
        }
        for kw in ["if", "then", "else"] {
            if let Some(sub) = map.get(kw) {
                self.visit(sub, &push_pointer(pointer, kw), cover, depth + 1);
            }
        }
        if let Some(Value::Object(subs)) = map.get("dependentSchemas") {
            let base = push_pointer(pointer, "dependentSchemas");
            for (name, sub) in subs {
                self.visit(sub, &push_pointer(&base, name), cover, depth + 1);
            }
        }

        // Other instance locations (or definitions): nothing covers them.
        for kw in ["properties", "patternProperties", "$defs", "definitions"] {
            if let Some(Value::Object(subs)) = map.get(kw) {
                let base = push_pointer(pointer, kw);
                for (name, sub) in subs {
                    self.visit(sub, &push_pointer(&base, name), false, depth + 1);
                }
            }
        }
        for kw in [
            "additionalProperties",
            "unevaluatedProperties",
            "items",
            "additionalItems",
            "unevaluatedItems",
            "contains",
            "propertyNames",
        ] {
            match map.get(kw) {
                Some(sub @ Value::Object(_)) => {
                    self.visit(sub, &push_pointer(pointer, kw), false, depth + 1);
                }
                Some(Value::Array(items)) if kw == "items" => {
                    let base = push_pointer(pointer, kw);
                    for (i, sub) in items.iter().enumerate() {
                        self.visit(sub, &push_pointer(&base, &i.to_string()), false, depth + 1);
                    }
                }
                _ => {}
            }
        }
        if let Some(Value::Array(items)) = map.get("prefixItems") {
            let base = push_pointer(pointer, "prefixItems");
            for (i, sub) in items.iter().enumerate() {
                self.visit(sub, &push_pointer(&base, &i.to_string()), false, depth + 1);
            }
        }
    }
}

/// The JSON pointers (RFC 6901; `""` is the root) of every object schema in `schema` that
/// would accept unknown fields.
///
/// An *object schema* is one typed `"object"` or with `properties` / `patternProperties`. It is
/// open unless one of these closes it:
///
/// - `"additionalProperties": false` or `"unevaluatedProperties": false`;
/// - a map declaration: `additionalProperties` (or `unevaluatedProperties`) given a schema
///   that constrains the values, such as schemars emits for a `HashMap<String, T>` field: its
///   keys are data, not option names;
/// - an enclosing schema at the same place that is closed (it covers its `allOf` / `anyOf` /
///   `oneOf` / `if` / `then` / `else` branches);
/// - its own branches: one closed `allOf` branch, every `anyOf` / `oneOf` branch closed, or a
///   closed sibling `$ref` (local references are followed).
///
/// The walk covers `properties`, `patternProperties`, `additionalProperties`, `items`,
/// `prefixItems`, `$defs` / `definitions`, `allOf` / `anyOf` / `oneOf`, and the other
/// applicators. A root of `true` or `{}` is reported too, since it accepts any object. A
/// free-form value *inside* the options (`{}`, as schemars emits for `serde_json::Value`) is not
/// an object schema and is not reported.
///
/// ```
/// use harness_core::manifest::open_object_schemas;
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": {
///         "model": { "type": "string" },
///         "retry": { "type": "object", "properties": { "max": { "type": "integer" } } }
///     },
///     "additionalProperties": false
/// });
/// assert_eq!(open_object_schemas(&schema), vec!["/properties/retry".to_owned()]);
/// ```
#[must_use]
pub fn open_object_schemas(schema: &Value) -> Vec<String> {
    if accepts_anything(schema) {
        return vec![String::new()];
    }
    let mut walk = Walk {
        root: schema,
        open: Vec::new(),
    };
    walk.visit(schema, "", false, 0);
    walk.open
}

fn check_options_schema(schema: &Value, errors: &mut Vec<ManifestError>) {
    // `offline()`: a reference outside the schema is an error, never a fetch, whatever
    // resolver features another crate enables on `jsonschema`.
    if let Err(e) = jsonschema::options().offline().build(schema) {
        errors.push(ManifestError::InvalidOptionsSchema {
            reason: truncate_for_echo(&e.to_string()),
        });
        return;
    }
    if !describes_objects(schema, schema, 0) {
        errors.push(ManifestError::OptionsSchemaNotObject);
        return;
    }
    let pointers = open_object_schemas(schema);
    if !pointers.is_empty() {
        errors.push(ManifestError::OpenOptionsSchema { pointers });
    }
}

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
/// Build one with [`HarnessDescriptor::builder`] or deserialize it (camelCase, unknown fields
/// rejected); both validate, so every `HarnessDescriptor` is valid. Building performs no I/O.
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
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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
    /// [`open_object_schemas`]), and the certification evidence version.
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
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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

// ---------------------------------------------------------------------------------------------
// Derived manifests and options: what `#[derive(Adapter)]` and `#[derive(AdapterOptions)]`
// (in `harness-macros`) implement
// ---------------------------------------------------------------------------------------------

/// Something that has a [`HarnessDescriptor`]: the one way to ask an adapter for its
/// descriptor, a supertrait of [`HarnessAdapter`](crate::adapter::HarnessAdapter) and
/// [`SimpleAdapter`](crate::adapter::SimpleAdapter), and what a
/// [`Registry`](crate::registry::Registry) needs.
///
/// `#[derive(Adapter)]` implements it; written by hand it is three lines. Implemented for
/// `HarnessDescriptor` itself and, through `Arc`, `Box` and `&`, for pointers to any
/// implementor, trait objects included (`Arc<dyn HarnessAdapter>`).
///
/// ```
/// use harness_core::manifest::{Describe, HarnessDescriptor};
///
/// #[derive(Debug)]
/// struct MyAdapter {
///     descriptor: HarnessDescriptor,
/// }
///
/// impl Describe for MyAdapter {
///     fn descriptor(&self) -> &HarnessDescriptor {
///         &self.descriptor
///     }
/// }
/// ```
pub trait Describe {
    /// The adapter's descriptor. Must return the same descriptor every time.
    fn descriptor(&self) -> &HarnessDescriptor;
}

impl Describe for HarnessDescriptor {
    fn descriptor(&self) -> &HarnessDescriptor {
        self
    }
}

impl<T: Describe + ?Sized> Describe for std::sync::Arc<T> {
    fn descriptor(&self) -> &HarnessDescriptor {
        (**self).descriptor()
    }
}

impl<T: Describe + ?Sized> Describe for Box<T> {
    fn descriptor(&self) -> &HarnessDescriptor {
        (**self).descriptor()
    }
}

impl<T: Describe + ?Sized> Describe for &T {
    fn descriptor(&self) -> &HarnessDescriptor {
        (**self).descriptor()
    }
}

/// An adapter type whose descriptor is known statically: what `#[derive(Adapter)]` implements
/// from its `#[adapter(...)]` attribute, with [`Describe`].
///
/// The derive checks the attribute at compile time (id pattern, contract versions, execution
/// mode, trust boundary, dependencies, capability keys and levels) and builds the descriptor
/// once, on the first call to [`Adapter::static_descriptor`], without I/O. The adapter's
/// [`Describe::descriptor`] returns it, and [`Adapter::parse_options`] parses its options.
/// (The trait and the derive share their name, as `serde::Serialize` does.)
///
/// What the two derives generate, written by hand:
///
/// ```
/// use std::sync::OnceLock;
/// use harness_core::manifest::{
///     Adapter, AdapterOptions, ClosedSchema, ContractVersion, Describe, ExecutionMode,
///     HarnessDescriptor,
/// };
/// use serde_json::json;
///
/// #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// struct EchoOptions {
///     prefix: Option<String>,
///     repeat: u8,
/// }
///
/// // `#[derive(AdapterOptions)]`, after checking `deny_unknown_fields` and the field types:
/// impl ClosedSchema for EchoOptions {}
/// impl AdapterOptions for EchoOptions {}
///
/// struct Echo;
///
/// // `#[derive(Adapter)]` with `#[adapter(id = "echo", contract_versions = [1],
/// // execution_mode = in_process(compatibility_only), options = EchoOptions)]`:
/// impl Adapter for Echo {
///     type Options = EchoOptions;
///     fn static_descriptor() -> &'static HarnessDescriptor {
///         static DESCRIPTOR: OnceLock<HarnessDescriptor> = OnceLock::new();
///         DESCRIPTOR.get_or_init(|| {
///             HarnessDescriptor::builder("echo".parse().unwrap(), "0.1.0")
///                 .contract_version(ContractVersion::V1)
///                 .execution_mode(ExecutionMode::in_process())
///                 .options_schema(EchoOptions::options_schema())
///                 .build()
///                 .unwrap()
///         })
///     }
/// }
///
/// impl Describe for Echo {
///     fn descriptor(&self) -> &HarnessDescriptor {
///         Self::static_descriptor()
///     }
/// }
///
/// assert_eq!(Echo.descriptor().id().as_str(), "echo");
/// let options = Echo::parse_options(&json!({"prefix": "> ", "repeat": 2})).unwrap();
/// assert_eq!((options.prefix.as_deref(), options.repeat), (Some("> "), 2));
///
/// let err = Echo::parse_options(&json!({"prefx": "> ", "repeat": "2"})).unwrap_err();
/// let pointers: Vec<&str> = err.violations.iter().map(|v| v.pointer.as_str()).collect();
/// assert_eq!(pointers, ["/prefx", "/repeat"]);
/// ```
pub trait Adapter {
    /// The adapter's options: what an execution's `options` deserialize into.
    type Options: AdapterOptions;

    /// The adapter's descriptor, built on first use (pure, no I/O) and shared by every
    /// instance (and every instantiation of a generic adapter type).
    ///
    /// # Panics
    ///
    /// If the descriptor is invalid, with a message naming every problem. `#[derive(Adapter)]`
    /// checks everything it declares at compile time; what it cannot see is the options
    /// type's schema when a field was marked `#[adapter_options(unchecked)]` or
    /// [`AdapterOptions`] was implemented by hand.
    fn static_descriptor() -> &'static HarnessDescriptor;

    /// Validates `options` (`null` counts as `{}`) against the options schema, listing every
    /// violation with its JSON pointer, then deserializes them.
    ///
    /// # Errors
    ///
    /// [`InvalidOptions`] with every violation.
    fn parse_options(options: &Value) -> Result<Self::Options, InvalidOptions> {
        Self::Options::from_options(options)
    }
}

/// An options type for an adapter: it deserializes from a JSON object whose JSON Schema
/// rejects unknown fields at every level.
///
/// Derive it with `#[derive(serde::Deserialize, schemars::JsonSchema, AdapterOptions)]` and
/// `#[serde(deny_unknown_fields)]`. The derive refuses, at compile time, a type that would
/// accept unknown fields (no `deny_unknown_fields`, a `#[serde(flatten)]` field, or a field
/// whose type is not [`ClosedSchema`]), and overrides the provided methods with versions that
/// generate the schema and compile its validator once.
///
/// Implementing it by hand (with [`ClosedSchema`]) is an assertion that the schema rejects
/// unknown fields; a descriptor built from a schema that does not is still refused.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an adapter options type",
    label = "this type does not implement `AdapterOptions`",
    note = "adapter options are a struct (or an enum of struct variants) deriving \
            `serde::Deserialize`, `schemars::JsonSchema` and `AdapterOptions`, with \
            `#[serde(deny_unknown_fields)]`"
)]
pub trait AdapterOptions: ClosedSchema + serde::de::DeserializeOwned + JsonSchema {
    /// The options JSON Schema (2020-12, for deserialization), as the descriptor publishes it.
    #[must_use]
    fn options_schema() -> Value {
        generate_options_schema::<Self>()
    }

    /// Validates `options` (`null` counts as `{}`) against [`AdapterOptions::options_schema`],
    /// listing every violation with its JSON pointer.
    ///
    /// # Errors
    ///
    /// [`InvalidOptions`] with every violation (one at the root if the schema itself is not a
    /// valid JSON Schema).
    fn validate_options(options: &Value) -> Result<(), InvalidOptions> {
        match OptionsValidator::new(&Self::options_schema()) {
            Ok(validator) => validator.validate(options),
            Err(problem) => Err(InvalidOptions::at_root(problem.to_string())),
        }
    }

    /// Validates `options` (`null` counts as `{}`), then deserializes them.
    ///
    /// # Errors
    ///
    /// [`InvalidOptions`] with every schema violation, or the deserialization error (at the
    /// root) when the schema accepts what the type's `Deserialize` refuses.
    fn from_options(options: &Value) -> Result<Self, InvalidOptions> {
        let empty = Value::Object(serde_json::Map::new());
        let options = if options.is_null() { &empty } else { options };
        Self::validate_options(options)?;
        Self::deserialize(options).map_err(|e| InvalidOptions::at_root(e.to_string()))
    }
}

/// A type whose JSON Schema rejects unknown fields at every level (or describes no object at
/// all), so that it may appear inside adapter options.
///
/// Implemented for the scalar types, `String`, `PathBuf`, and for `Option`, `Vec`,
/// `VecDeque`, arrays, sets, `Box`, `Arc`, tuples and string-keyed maps of such types;
/// `#[derive(AdapterOptions)]` implements it for options types and their nested structs and
/// enums. `serde_json::Value` does not implement it (it accepts anything): mark a deliberately
/// free-form field `#[adapter_options(unchecked)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` may accept unknown fields, so it cannot be part of adapter options",
    label = "not known to reject unknown fields",
    note = "derive `AdapterOptions` for it (with `#[serde(deny_unknown_fields)]`); for a \
            deliberately free-form field (such as `serde_json::Value`) or a foreign type whose \
            schema is closed, mark the field `#[adapter_options(unchecked)]`"
)]
pub trait ClosedSchema {}

macro_rules! closed_schema {
    ($($ty:ty),* $(,)?) => { $(impl ClosedSchema for $ty {})* };
}

closed_schema!(
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    str,
    String,
    std::path::PathBuf,
    std::num::NonZeroU8,
    std::num::NonZeroU16,
    std::num::NonZeroU32,
    std::num::NonZeroU64,
    std::num::NonZeroUsize,
    std::num::NonZeroI8,
    std::num::NonZeroI16,
    std::num::NonZeroI32,
    std::num::NonZeroI64,
    std::num::NonZeroIsize,
);

impl<T: ClosedSchema> ClosedSchema for Option<T> {}
impl<T: ClosedSchema> ClosedSchema for Vec<T> {}
impl<T: ClosedSchema> ClosedSchema for std::collections::VecDeque<T> {}
impl<T: ClosedSchema, const N: usize> ClosedSchema for [T; N] {}
impl<T: ClosedSchema> ClosedSchema for [T] {}
impl<T: ClosedSchema> ClosedSchema for std::collections::BTreeSet<T> {}
impl<T: ClosedSchema, S> ClosedSchema for std::collections::HashSet<T, S> {}
impl<K: ClosedSchema, V: ClosedSchema> ClosedSchema for std::collections::BTreeMap<K, V> {}
impl<K: ClosedSchema, V: ClosedSchema, S> ClosedSchema for std::collections::HashMap<K, V, S> {}
impl<T: ClosedSchema + ?Sized> ClosedSchema for Box<T> {}
impl<T: ClosedSchema + ?Sized> ClosedSchema for std::sync::Arc<T> {}
impl<A: ClosedSchema, B: ClosedSchema> ClosedSchema for (A, B) {}
impl<A: ClosedSchema, B: ClosedSchema, C: ClosedSchema> ClosedSchema for (A, B, C) {}
impl<A: ClosedSchema, B: ClosedSchema, C: ClosedSchema, D: ClosedSchema> ClosedSchema
    for (A, B, C, D)
{
}

/// One way in which adapter options do not match the options schema.
///
/// ```
/// use harness_core::manifest::OptionsViolation;
/// let v = OptionsViolation { pointer: "/retry/max".into(), message: "expected integer, found string".into() };
/// assert_eq!(v.to_string(), "at `/retry/max`: expected integer, found string");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OptionsViolation {
    /// Where, as a JSON pointer into the options (RFC 6901; `""` is the root). For an unknown
    /// or missing field, the pointer names the field itself.
    pub pointer: String,
    /// What is wrong. It never repeats the offending value, which may be a secret.
    pub message: String,
}

impl fmt::Display for OptionsViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "at the root: {}", self.message)
        } else {
            write!(f, "at `{}`: {}", self.pointer, self.message)
        }
    }
}

/// Adapter options were refused: every violation, each with its JSON pointer.
///
/// Converts into a `configuration` [`HarnessError`](crate::error::HarnessError) with code
/// `OPTIONS_INVALID`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid adapter options: {}",
    .violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
)]
pub struct InvalidOptions {
    /// Every violation found, ordered by pointer.
    pub violations: Vec<OptionsViolation>,
}

impl InvalidOptions {
    fn at_root(message: String) -> Self {
        Self {
            violations: vec![OptionsViolation {
                pointer: String::new(),
                message,
            }],
        }
    }
}

impl From<InvalidOptions> for crate::error::HarnessError {
    fn from(e: InvalidOptions) -> Self {
        Self::new(crate::error::ErrorCategory::Configuration, e.to_string())
            .with_code(crate::error::ErrorCode::OPTIONS_INVALID)
    }
}

/// An options schema compiled for validation: checks adapter options against it and reports
/// every violation with its JSON pointer. Compile it once and reuse it.
///
/// Unknown fields are reported one by one at their own pointer, with the fields the object
/// accepts; a missing field at the pointer it should have; messages never repeat the
/// offending value. For a `oneOf` / `anyOf` (an enum), the violations of the branch that
/// came closest are reported when one did.
///
/// ```
/// use harness_core::manifest::OptionsValidator;
/// use serde_json::json;
///
/// let validator = OptionsValidator::new(&json!({
///     "type": "object",
///     "properties": {
///         "model": {"type": "string"},
///         "retry": {
///             "type": "object",
///             "properties": {"max": {"type": "integer", "maximum": 10}},
///             "additionalProperties": false
///         }
///     },
///     "required": ["model"],
///     "additionalProperties": false
/// }))
/// .unwrap();
/// assert!(validator.validate(&json!({"model": "m"})).is_ok());
///
/// let err = validator
///     .validate(&json!({"retry": {"max": 99, "backoff": "x"}, "modle": "m"}))
///     .unwrap_err();
/// let found: Vec<(&str, &str)> = err
///     .violations
///     .iter()
///     .map(|v| (v.pointer.as_str(), v.message.as_str()))
///     .collect();
/// assert!(found.contains(&("/model", "missing required field `model`")));
/// assert!(found.contains(&("/modle", "unknown field `modle`: expected `model` or `retry`")));
/// assert!(found.contains(&("/retry/backoff", "unknown field `backoff`: expected `max`")));
/// assert!(found.contains(&("/retry/max", "value is greater than the maximum of 10")));
/// assert_eq!(found.len(), 4);
/// ```
pub struct OptionsValidator {
    schema: Value,
    validator: jsonschema::Validator,
}

impl fmt::Debug for OptionsValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OptionsValidator")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl OptionsValidator {
    /// Compiles `schema`. Pure: a `$ref` outside the schema is an error, never a fetch.
    ///
    /// # Errors
    ///
    /// [`ManifestError::InvalidOptionsSchema`] when `schema` is not a valid JSON Schema.
    pub fn new(schema: &Value) -> Result<Self, ManifestError> {
        let validator = jsonschema::options().offline().build(schema).map_err(|e| {
            ManifestError::InvalidOptionsSchema {
                reason: truncate_for_echo(&e.to_string()),
            }
        })?;
        Ok(Self {
            schema: schema.clone(),
            validator,
        })
    }

    /// The schema it validates against.
    #[must_use]
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Validates `options` (`null` counts as `{}`: absent options).
    ///
    /// # Errors
    ///
    /// [`InvalidOptions`] with every violation.
    pub fn validate(&self, options: &Value) -> Result<(), InvalidOptions> {
        let empty = Value::Object(serde_json::Map::new());
        let options = if options.is_null() { &empty } else { options };
        let mut violations = Vec::new();
        for error in self.validator.iter_errors(options) {
            self.collect(&error, &mut violations);
        }
        violations.sort_by(|a, b| a.pointer.cmp(&b.pointer));
        if violations.is_empty() {
            Ok(())
        } else {
            Err(InvalidOptions { violations })
        }
    }

    fn collect(&self, error: &jsonschema::ValidationError<'_>, out: &mut Vec<OptionsViolation>) {
        use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
        let at = error.instance_path().as_str();
        let mut push = |pointer: String, message: String| {
            let violation = OptionsViolation { pointer, message };
            if !out.contains(&violation) {
                out.push(violation);
            }
        };
        match error.kind() {
            Kind::AdditionalProperties { unexpected }
            | Kind::UnevaluatedProperties { unexpected } => {
                let known = self.known_fields(error.schema_path().as_str());
                for name in unexpected {
                    let message = match known.as_slice() {
                        [] => format!("unknown field `{name}`: no fields are accepted here"),
                        known => format!("unknown field `{name}`: expected {}", or_list(known)),
                    };
                    push(push_pointer(at, name), message);
                }
            }
            Kind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                push(
                    push_pointer(at, name),
                    format!("missing required field `{name}`"),
                );
            }
            Kind::Type { kind } => {
                let expected = match kind {
                    TypeKind::Single(t) => t.to_string(),
                    TypeKind::Multiple(set) => {
                        // `null` last: "expected integer or null" reads as an optional integer.
                        let mut types: Vec<String> = set.iter().map(|t| t.to_string()).collect();
                        types.sort_by_key(|t| t == "null");
                        types.join(" or ")
                    }
                };
                let found = match &**error.instance() {
                    Value::Null => "null",
                    Value::Bool(_) => "boolean",
                    Value::Number(n) if n.is_f64() => "number",
                    Value::Number(_) => "integer",
                    Value::String(_) => "string",
                    Value::Array(_) => "array",
                    Value::Object(_) => "object",
                };
                push(at.to_owned(), format!("expected {expected}, found {found}"));
            }
            Kind::OneOfNotValid { context } | Kind::AnyOf { context }
                if !context.is_empty()
                    && context.iter().flatten().all(|e| {
                        matches!(e.kind(), Kind::Constant { .. })
                            && e.instance_path().as_str() == at
                    }) =>
            {
                // A choice of constants (a unit-variant enum): name them.
                let expected: Vec<String> = context
                    .iter()
                    .flatten()
                    .filter_map(|e| match e.kind() {
                        Kind::Constant { expected_value } => Some(expected_value.to_string()),
                        _ => None,
                    })
                    .collect();
                push(at.to_owned(), format!("expected {}", expected.join(" or ")));
            }
            Kind::Enum { options } => {
                let expected: Vec<String> = options
                    .as_array()
                    .map(|o| o.iter().map(ToString::to_string).collect())
                    .unwrap_or_default();
                push(at.to_owned(), format!("expected {}", expected.join(" or ")));
            }
            Kind::OneOfNotValid { context } | Kind::AnyOf { context } => {
                // Branches for another type of value (`null` next to an object, as for an
                // `Option`) say nothing useful: leave them out, then report the branch that
                // came closest, when one did.
                let of_this_type = |branch: &&Vec<jsonschema::ValidationError<'static>>| {
                    !branch.iter().any(|e| {
                        matches!(e.kind(), Kind::Type { .. }) && e.instance_path().as_str() == at
                    })
                };
                let candidates: Vec<_> = context.iter().filter(of_this_type).collect();
                let candidates = if candidates.is_empty() {
                    context.iter().collect()
                } else {
                    candidates
                };
                let fewest = candidates.iter().map(|b| b.len()).min().unwrap_or(0);
                let closest: Vec<_> = candidates
                    .into_iter()
                    .filter(|b| b.len() == fewest)
                    .collect();
                if let [branch] = closest.as_slice()
                    && !branch.is_empty()
                {
                    for inner in *branch {
                        self.collect(inner, out);
                    }
                } else {
                    push(at.to_owned(), error.masked().to_string());
                }
            }
            _ => push(at.to_owned(), error.masked().to_string()),
        }
    }

    /// The `properties` of the object schema owning the keyword at `keyword_path`.
    /// The fields an object schema accepts, sorted: the order must not depend on whether
    /// some crate in the build turns on serde_json's `preserve_order` (feature unification).
    fn known_fields(&self, keyword_path: &str) -> Vec<String> {
        let parent = keyword_path
            .rsplit_once('/')
            .map_or("", |(parent, _)| parent);
        let mut fields: Vec<String> = self
            .schema
            .pointer(parent)
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        fields.sort_unstable();
        fields
    }
}

/// The options schema of `T`: JSON Schema 2020-12, for deserialization (as
/// [`HarnessDescriptorBuilder::options_schema_for`] generates it).
pub(crate) fn generate_options_schema<T: JsonSchema + ?Sized>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// `` `a`, `b` or `c` ``.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => format!("`{one}`"),
        [init @ .., last] => format!(
            "{} or `{last}`",
            init.iter()
                .map(|i| format!("`{i}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::SupportLevel;
    use rstest::rstest;
    use serde_json::json;
    use std::collections::BTreeMap;

    // ----- options types whose schemas schemars generates -----

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct ClosedOptions {
        model: String,
        max_turns: Option<u32>,
        retry: Option<ClosedRetry>,
        tools: Vec<ClosedRetry>,
        env: BTreeMap<String, String>,
        backend: ClosedBackend,
        free_form: Value,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct ClosedRetry {
        max: u32,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    #[serde(tag = "kind", deny_unknown_fields)]
    enum ClosedBackend {
        Local { path: String },
        Off,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct OpenOptions {
        model: String,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct ClosedOuterOpenInner {
        model: String,
        retry: OpenRetry,
    }

    #[allow(dead_code)]
    #[derive(Deserialize, JsonSchema)]
    struct OpenRetry {
        max: u32,
    }

    fn schema_of<T: JsonSchema>() -> Value {
        schemars::generate::SchemaSettings::draft2020_12()
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value()
    }

    fn id(s: &str) -> AdapterId {
        s.parse().unwrap()
    }

    fn v(n: u32) -> ContractVersion {
        ContractVersion::new(n).unwrap()
    }

    fn valid_builder() -> HarnessDescriptorBuilder {
        HarnessDescriptor::builder(id("scripted"), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
    }

    fn valid_json() -> Value {
        json!({
            "id": "scripted",
            "name": "Scripted",
            "contractVersions": [1],
            "implementationVersion": "0.1.0",
            "executionMode": {"mode": "in_process", "compatibilityOnly": true},
            "trustBoundary": "host_process",
            "optionsSchema": {"type": "object", "additionalProperties": false},
            "capabilities": {}
        })
    }

    // ----- contract version -----

    #[test]
    fn contract_version_wire_and_errors() {
        assert_eq!(serde_json::to_string(&[v(1), v(7)]).unwrap(), "[1,7]");
        assert_eq!(
            serde_json::from_str::<Vec<ContractVersion>>("[1,7]").unwrap(),
            [v(1), v(7)]
        );
        for (input, message) in [
            ("0", "invalid contract version 0: expected an integer >= 1"),
            (
                "-1",
                "invalid contract version -1: expected an integer >= 1",
            ),
            ("4294967296", "invalid contract version 4294967296"),
            ("\"1\"", "expected a contract version: an integer >= 1"),
            ("1.5", "expected a contract version: an integer >= 1"),
        ] {
            let err = serde_json::from_str::<ContractVersion>(input).unwrap_err();
            assert!(err.to_string().contains(message), "{input}: {err}");
        }
        assert_eq!(ContractVersion::new(0), None);
        assert_eq!(ContractVersion::V1.to_string(), "1");
    }

    #[test]
    fn highest_common_version() {
        assert_eq!(
            ContractVersion::highest_common(&[v(3), v(1), v(2)], &[v(1), v(2)]),
            Some(v(2))
        );
        assert_eq!(
            ContractVersion::highest_common(&[v(2), v(3)], &[v(1)]),
            None
        );
        assert_eq!(ContractVersion::highest_common(&[], &[v(1)]), None);
    }

    // ----- operator profile id -----

    #[rstest]
    #[case("gvisor-small", true)]
    #[case("kata.gpu_a100", true)]
    #[case("ab", true)]
    #[case("a", false)]
    #[case("Gvisor", false)]
    #[case("1profile", false)]
    #[case("-profile", false)]
    #[case("with space", false)]
    #[case("with/slash", false)]
    fn operator_profile_id_validation(#[case] input: &str, #[case] ok: bool) {
        assert_eq!(input.parse::<OperatorProfileId>().is_ok(), ok, "{input}");
    }

    #[test]
    fn operator_profile_id_length_and_message() {
        assert!(OperatorProfileId::is_valid(&format!("a{}", "b".repeat(63))));
        assert!(!OperatorProfileId::is_valid(&format!(
            "a{}",
            "b".repeat(64)
        )));
        let err = "Bad".parse::<OperatorProfileId>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid operator profile id `Bad`: expected a lowercase id matching ^[a-z][a-z0-9._-]{1,63}$"
        );
    }

    // ----- execution mode -----

    #[rstest]
    #[case(
        ExecutionMode::sandbox_pod("gvisor-small".parse().unwrap()),
        json!({"mode": "sandbox_pod", "profileId": "gvisor-small"})
    )]
    #[case(ExecutionMode::ProviderManaged, json!({"mode": "provider_managed"}))]
    #[case(ExecutionMode::in_process(), json!({"mode": "in_process", "compatibilityOnly": true}))]
    fn execution_mode_round_trips(#[case] mode: ExecutionMode, #[case] wire: Value) {
        assert_eq!(serde_json::to_value(&mode).unwrap(), wire);
        assert_eq!(serde_json::from_value::<ExecutionMode>(wire).unwrap(), mode);
    }

    #[rstest]
    #[case("image")]
    #[case("command")]
    #[case("args")]
    #[case("serviceAccount")]
    #[case("service_account")]
    #[case("serviceAccountName")]
    #[case("volumes")]
    #[case("runtimeClass")]
    #[case("runtimeClassName")]
    #[case("networkPolicy")]
    #[case("podSpec")]
    #[case("pod_spec")]
    fn sandbox_pod_refuses_pod_fields(#[case] field: &str) {
        let mut wire = json!({"mode": "sandbox_pod", "profileId": "gvisor-small"});
        wire[field] = json!("anything");
        let err = serde_json::from_value::<ExecutionMode>(wire).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "sandbox_pod references an operator-owned profile id; it cannot supply `{field}`: \
                 the operator's profile defines the pod"
            )
        );
    }

    #[test]
    fn sandbox_pod_refuses_a_pod_field_even_when_null_or_first() {
        let err = serde_json::from_str::<ExecutionMode>(
            r#"{"podSpec": null, "mode": "sandbox_pod", "profileId": "p1"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("cannot supply `podSpec`"), "{err}");
    }

    #[rstest]
    #[case(json!({"mode": "sandbox_pod", "profileId": "p1", "replicas": 2}), "unknown field `replicas`, expected `profileId`")]
    #[case(json!({"mode": "sandbox_pod"}), "missing field `profileId`")]
    #[case(json!({"mode": "sandbox_pod", "profileId": "Bad Id"}), "invalid operator profile id `Bad Id`")]
    #[case(json!({"mode": "sandbox_pod", "profile_id": "p1"}), "unknown field `profile_id`, expected `profileId`")]
    #[case(json!({"mode": "in_process"}), "in_process execution is compatibility-only and must say so: expected `\"compatibilityOnly\": true`")]
    #[case(json!({"mode": "in_process", "compatibilityOnly": false}), "in_process execution is compatibility-only and must say so")]
    #[case(json!({"mode": "in_process", "compatibilityOnly": "yes"}), "expected `true` (in_process execution is compatibility-only)")]
    #[case(json!({"mode": "in_process", "compatibilityOnly": true, "x": 1}), "unknown field `x`, expected `compatibilityOnly`")]
    #[case(json!({"mode": "provider_managed", "endpoint": "https://x"}), "unknown field `endpoint`")]
    #[case(json!({"mode": "pod"}), "unknown variant `pod`, expected one of `sandbox_pod`, `provider_managed`, `in_process`")]
    #[case(json!({"profileId": "p1"}), "missing field `mode`")]
    fn execution_mode_errors(#[case] wire: Value, #[case] message: &str) {
        let err = serde_json::from_value::<ExecutionMode>(wire).unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }

    #[test]
    fn compatibility_only_is_true_on_the_wire() {
        assert_eq!(serde_json::to_string(&CompatibilityOnly).unwrap(), "true");
        assert!(serde_json::from_str::<CompatibilityOnly>("true").is_ok());
        assert!(serde_json::from_str::<CompatibilityOnly>("false").is_err());
    }

    #[test]
    fn execution_mode_schema_accepts_only_the_three_shapes() {
        let schema = schema_of::<ExecutionMode>();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&json!({"mode": "sandbox_pod", "profileId": "p1"})));
        assert!(validator.is_valid(&json!({"mode": "in_process", "compatibilityOnly": true})));
        assert!(!validator.is_valid(&json!({"mode": "in_process", "compatibilityOnly": false})));
        assert!(
            !validator.is_valid(&json!({"mode": "sandbox_pod", "profileId": "p1", "image": "x"}))
        );
    }

    // ----- implementation version -----

    #[rstest]
    #[case("0.1.0", None)]
    #[case("1.4.0", None)]
    #[case("10.20.30", None)]
    #[case("2.0.0-rc.1", None)]
    #[case("1.0.0-alpha-beta.0.x-y", None)]
    #[case("1.0.0+build.5", None)]
    #[case("1.0.0-rc.1+build.5.sha-abc", None)]
    #[case("1.0", Some("expected exactly three numeric components"))]
    #[case("1.0.0.0", Some("expected exactly three numeric components"))]
    #[case("", Some("expected exactly three numeric components"))]
    #[case("1..0", Some("MAJOR, MINOR and PATCH must be non-negative integers"))]
    #[case("v1.0.0", Some("MAJOR, MINOR and PATCH must be non-negative integers"))]
    #[case("1.x.0", Some("MAJOR, MINOR and PATCH must be non-negative integers"))]
    #[case("01.0.0", Some("numeric components must not have leading zeros"))]
    #[case(
        "1.0.0-",
        Some("pre-release identifiers must be non-empty [0-9A-Za-z-]")
    )]
    #[case(
        "1.0.0-rc..1",
        Some("pre-release identifiers must be non-empty [0-9A-Za-z-]")
    )]
    #[case(
        "1.0.0-01",
        Some("numeric pre-release identifiers must not have leading zeros")
    )]
    #[case("1.0.0+", Some("build identifiers must be non-empty [0-9A-Za-z-]"))]
    #[case("1.0.0+a+b", Some("build identifiers must be non-empty [0-9A-Za-z-]"))]
    #[case(
        "1.0.0-é",
        Some("pre-release identifiers must be non-empty [0-9A-Za-z-]")
    )]
    fn implementation_version_format(#[case] input: &str, #[case] problem: Option<&str>) {
        assert_eq!(
            check_implementation_version(input).err(),
            problem,
            "{input}"
        );
    }

    #[test]
    fn schema_pattern_agrees_with_the_check() {
        let schema = serde_json::to_value(schemars::schema_for!(HarnessDescriptor)).unwrap();
        let pattern = schema["properties"]["implementationVersion"]["pattern"].clone();
        let validator =
            jsonschema::validator_for(&json!({"type": "string", "pattern": pattern})).unwrap();
        for input in [
            "0.1.0",
            "2.0.0-rc.1+b.5",
            "1.0",
            "01.0.0",
            "1.0.0-01",
            "1.0.0+",
        ] {
            assert_eq!(
                validator.is_valid(&json!(input)),
                check_implementation_version(input).is_ok(),
                "{input}"
            );
        }
    }

    // ----- options schema closedness -----

    #[test]
    fn schemars_schema_of_a_deny_unknown_fields_struct_is_closed() {
        let schema = schema_of::<ClosedOptions>();
        assert_eq!(open_object_schemas(&schema), Vec::<String>::new());
        assert!(
            HarnessDescriptor::builder(id("scripted"), "0.1.0")
                .contract_version(ContractVersion::V1)
                .execution_mode(ExecutionMode::in_process())
                .options_schema_for::<ClosedOptions>()
                .build()
                .is_ok()
        );
    }

    #[test]
    fn schemars_schema_of_a_plain_struct_is_open_at_the_root() {
        let schema = schema_of::<OpenOptions>();
        assert_eq!(open_object_schemas(&schema), vec![String::new()]);
        let err = valid_builder()
            .options_schema_for::<OpenOptions>()
            .build()
            .unwrap_err();
        assert_eq!(
            err.errors,
            vec![ManifestError::OpenOptionsSchema {
                pointers: vec![String::new()]
            }]
        );
        assert!(
            err.to_string().contains(
                "`optionsSchema` accepts unknown fields at the root: add \
                 `#[serde(deny_unknown_fields)]` to the options types"
            ),
            "{err}"
        );
    }

    #[test]
    fn schemars_schema_with_an_open_nested_type_names_its_definition() {
        let schema = schema_of::<ClosedOuterOpenInner>();
        assert_eq!(
            open_object_schemas(&schema),
            vec!["/$defs/OpenRetry".to_owned()]
        );
    }

    #[rstest]
    #[case::closed(json!({"type": "object", "additionalProperties": false}), &[])]
    #[case::unevaluated(json!({"type": "object", "unevaluatedProperties": false}), &[])]
    #[case::open_root(json!({"type": "object", "properties": {"a": {"type": "string"}}}), &[""])]
    #[case::true_root(json!(true), &[""])]
    #[case::empty_root(json!({}), &[""])]
    #[case::annotations_only(json!({"title": "Options", "$schema": "https://json-schema.org/draft/2020-12/schema"}), &[""])]
    #[case::additional_true(json!({"type": "object", "additionalProperties": true}), &[""])]
    #[case::additional_empty(json!({"type": "object", "additionalProperties": {}}), &[""])]
    #[case::typed_map(json!({"type": "object", "additionalProperties": {"type": "string"}}), &[])]
    #[case::properties_without_type(json!({"properties": {}}), &[""])]
    #[case::nested_property(
        json!({"type": "object", "additionalProperties": false,
               "properties": {"a/b~c": {"type": "object"}}}),
        &["/properties/a~1b~0c"]
    )]
    #[case::array_items(
        json!({"type": "object", "additionalProperties": false,
               "properties": {"list": {"type": "array", "items": {"type": "object"}}}}),
        &["/properties/list/items"]
    )]
    #[case::prefix_items(
        json!({"type": "object", "additionalProperties": false,
               "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "object"}]}}}),
        &["/properties/pair/prefixItems/1"]
    )]
    #[case::map_values(
        json!({"type": "object", "additionalProperties": false,
               "properties": {"env": {"type": "object", "additionalProperties": {"type": "object", "properties": {}}}}}),
        &["/properties/env/additionalProperties"]
    )]
    #[case::definitions(
        json!({"type": "object", "additionalProperties": false,
               "definitions": {"A": {"type": "object"}}, "$defs": {"B": {"type": "object", "additionalProperties": false}}}),
        &["/definitions/A"]
    )]
    #[case::all_of_covered_by_unevaluated(
        json!({"type": "object", "unevaluatedProperties": false,
               "allOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "string"}}}]}),
        &[]
    )]
    #[case::all_of_open(
        json!({"type": "object",
               "allOf": [{"properties": {"a": {"type": "string"}}}]}),
        &["", "/allOf/0"]
    )]
    #[case::one_of_closed_branches(
        json!({"type": "object",
               "oneOf": [{"type": "object", "additionalProperties": false},
                         {"$ref": "#/$defs/B"}],
               "$defs": {"B": {"type": "object", "additionalProperties": false}}}),
        &[]
    )]
    #[case::one_of_one_open_branch(
        json!({"oneOf": [{"type": "object", "additionalProperties": false},
                         {"type": "object", "properties": {"x": {"type": "string"}}}]}),
        &["/oneOf/1"]
    )]
    #[case::any_of_with_null(
        json!({"type": "object", "additionalProperties": false,
               "properties": {"retry": {"anyOf": [{"$ref": "#/$defs/R"}, {"type": "null"}]}},
               "$defs": {"R": {"type": "object"}}}),
        &["/$defs/R"]
    )]
    #[case::free_form_property_is_not_an_object_schema(
        json!({"type": "object", "additionalProperties": false, "properties": {"extra": {}, "also": true}}),
        &[]
    )]
    #[case::type_array_with_object(json!({"type": ["object", "null"]}), &[""])]
    fn open_object_schema_cases(#[case] schema: Value, #[case] expected: &[&str]) {
        assert_eq!(open_object_schemas(&schema), expected);
    }

    #[test]
    fn absurdly_deep_schemas_are_reported_not_overflowed() {
        let mut schema = json!({"type": "object", "additionalProperties": false});
        for _ in 0..200 {
            schema = json!({"type": "object", "additionalProperties": false, "properties": {"n": schema}});
        }
        let open = open_object_schemas(&schema);
        assert_eq!(open.len(), 1);
        assert!(open[0].starts_with("/properties/n/properties/n"));
    }

    #[test]
    fn self_referencing_refs_terminate() {
        let schema = json!({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}});
        assert!(!describes_objects(&schema, &schema, 0));
        let schema = json!({"type": "object", "allOf": [{"$ref": "#"}]});
        assert_eq!(open_object_schemas(&schema), vec![String::new()]);
    }

    // ----- descriptor: builder -----

    #[test]
    fn builder_defaults_and_accessors() {
        let d = valid_builder()
            .capability(CapabilityKey::StreamText, Capability::native())
            .build()
            .unwrap();
        assert_eq!(d.id().as_str(), "scripted");
        assert_eq!(d.name(), "scripted");
        assert_eq!(d.contract_versions(), [ContractVersion::V1]);
        assert_eq!(d.implementation_version(), "0.1.0");
        assert_eq!(d.execution_mode(), &ExecutionMode::in_process());
        assert_eq!(d.trust_boundary(), TrustBoundary::HostProcess);
        assert!(d.dependencies().is_empty());
        assert_eq!(
            d.options_schema(),
            &json!({"type": "object", "additionalProperties": false})
        );
        assert_eq!(
            d.capabilities().level(CapabilityKey::StreamText),
            SupportLevel::Native
        );
        assert_eq!(d.certification_evidence_version(), None);
        assert_eq!(d.highest_common_version(&[v(1), v(2)]), Some(v(1)));
        assert_eq!(d.validate(), Ok(()));
    }

    #[rstest]
    #[case(ExecutionMode::sandbox_pod("p1".parse().unwrap()), TrustBoundary::Sandbox)]
    #[case(ExecutionMode::ProviderManaged, TrustBoundary::RemoteProvider)]
    #[case(ExecutionMode::in_process(), TrustBoundary::HostProcess)]
    fn builder_derives_the_trust_boundary_from_the_mode(
        #[case] mode: ExecutionMode,
        #[case] boundary: TrustBoundary,
    ) {
        let d = valid_builder().execution_mode(mode).build().unwrap();
        assert_eq!(d.trust_boundary(), boundary);
    }

    #[test]
    fn full_descriptor_round_trips_through_json() {
        let d = HarnessDescriptor::builder(id("claude_code"), "2.0.0-rc.1+build.7")
            .name("Claude Code")
            .contract_versions([v(1), v(2)])
            .execution_mode(ExecutionMode::sandbox_pod("gvisor-small".parse().unwrap()))
            .trust_boundary(TrustBoundary::Sandbox)
            .dependency(Dependency::new(DependencyKind::Binary, "claude", ">=2.0"))
            .dependency(
                Dependency::new(DependencyKind::Service, "api.anthropic.com", "*").optional(),
            )
            .options_schema_for::<ClosedOptions>()
            .capability(CapabilityKey::StreamText, Capability::native())
            .capability(
                CapabilityKey::ToolMcp,
                Capability::degraded("stdio servers only"),
            )
            .certification_evidence_version("conformance-1.0.0+2026-09-02")
            .build()
            .unwrap();
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["id"], "claude_code");
        assert_eq!(json["contractVersions"], json!([1, 2]));
        assert_eq!(
            json["executionMode"],
            json!({"mode": "sandbox_pod", "profileId": "gvisor-small"})
        );
        assert_eq!(json["trustBoundary"], "sandbox");
        assert_eq!(
            json["dependencies"][1],
            json!({"name": "api.anthropic.com", "kind": "service", "version": "*", "optional": true})
        );
        assert_eq!(
            json["certificationEvidenceVersion"],
            "conformance-1.0.0+2026-09-02"
        );
        let back: HarnessDescriptor = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, d);
        // The generated schema of the descriptor accepts its own serialization.
        let schema = schema_of::<HarnessDescriptor>();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(
            validator.is_valid(&json),
            "{:?}",
            validator
                .iter_errors(&json)
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        );
        let mut extra = json;
        extra["image"] = json!("x");
        assert!(!validator.is_valid(&extra));
    }

    #[test]
    fn build_collects_every_problem() {
        let err = HarnessDescriptor::builder(id("scripted"), "1.0")
            .name("")
            .contract_versions([v(1), v(1), v(2), v(1)])
            .trust_boundary(TrustBoundary::Sandbox)
            .dependency(Dependency::new(DependencyKind::Binary, "", "1"))
            .dependency(Dependency::new(DependencyKind::NpmPackage, "x", "1"))
            .dependency(Dependency::new(DependencyKind::NpmPackage, "x", "2"))
            .dependency(Dependency::new(DependencyKind::NpmPackage, "x", "3"))
            .dependency(Dependency::new(DependencyKind::Crate, "x", " "))
            .options_schema(json!({"type": "string"}))
            .certification_evidence_version("has space")
            .build()
            .unwrap_err();
        assert_eq!(err.id.as_str(), "scripted");
        assert_eq!(
            err.errors,
            vec![
                ManifestError::Missing {
                    field: "executionMode",
                    method: "execution_mode"
                },
                ManifestError::InvalidName {
                    value: String::new()
                },
                ManifestError::DuplicateContractVersion { version: v(1) },
                ManifestError::InvalidImplementationVersion {
                    value: "1.0".into(),
                    reason: "expected exactly three numeric components"
                },
                ManifestError::InvalidDependency {
                    name: String::new(),
                    kind: DependencyKind::Binary,
                    problem: "the name must be 1 to 214 characters"
                },
                ManifestError::DuplicateDependency {
                    name: "x".into(),
                    kind: DependencyKind::NpmPackage
                },
                ManifestError::InvalidDependency {
                    name: "x".into(),
                    kind: DependencyKind::Crate,
                    problem: "the version requirement must be 1 to 128 characters, such as `>=1.2` or `*`"
                },
                ManifestError::OptionsSchemaNotObject,
                ManifestError::InvalidCertificationEvidenceVersion {
                    value: "has space".into()
                },
            ]
        );
    }

    #[rstest]
    #[case(
        HarnessDescriptor::builder(id("scripted"), "0.1.0").execution_mode(ExecutionMode::in_process()),
        "`contractVersions` is empty: declare every supported contract version, such as [1]"
    )]
    #[case(
        valid_builder().contract_versions([v(2), v(2)]),
        "contract version 2 is listed more than once in `contractVersions`: list each version once"
    )]
    #[case(
        valid_builder().trust_boundary(TrustBoundary::Sandbox),
        "`trustBoundary` `sandbox` does not fit execution mode `in_process`: expected `host_process` or `local_subprocess`"
    )]
    #[case(
        valid_builder().execution_mode(ExecutionMode::ProviderManaged).trust_boundary(TrustBoundary::HostProcess),
        "`trustBoundary` `host_process` does not fit execution mode `provider_managed`: expected `remote_provider`"
    )]
    #[case(
        valid_builder().execution_mode(ExecutionMode::sandbox_pod("p1".parse().unwrap())).trust_boundary(TrustBoundary::LocalSubprocess),
        "`trustBoundary` `local_subprocess` does not fit execution mode `sandbox_pod`: expected `sandbox`"
    )]
    #[case(
        HarnessDescriptor::builder(id("scripted"), "01.0.0").contract_version(ContractVersion::V1).execution_mode(ExecutionMode::in_process()),
        "`implementationVersion` `01.0.0` is invalid (numeric components must not have leading zeros): expected MAJOR.MINOR.PATCH[-pre][+build]"
    )]
    #[case(
        valid_builder().name("bad\nname"),
        "`name` `bad\nname` is invalid: expected 1 to 128 characters without control characters"
    )]
    #[case(
        valid_builder().dependency(Dependency::new(DependencyKind::Binary, "my tool", "1")),
        "dependency `my tool` (binary) is invalid: the name must not contain whitespace or control characters"
    )]
    #[case(
        valid_builder().options_schema(json!({"type": 12})),
        "`optionsSchema` is not a valid JSON Schema: "
    )]
    #[case(
        valid_builder().options_schema(json!({"$ref": "https://example.com/options.json"})),
        "`optionsSchema` is not a valid JSON Schema: "
    )]
    #[case(
        valid_builder().options_schema(json!({"type": "array"})),
        "`optionsSchema` must describe a JSON object"
    )]
    #[case(
        valid_builder().options_schema(json!({"type": "object", "additionalProperties": false, "properties": {"retry": {"type": "object"}}})),
        "`optionsSchema` accepts unknown fields at `/properties/retry`: add `#[serde(deny_unknown_fields)]`"
    )]
    #[case(
        valid_builder().certification_evidence_version(""),
        "`certificationEvidenceVersion` `` is invalid: expected 1 to 128 characters from [A-Za-z0-9._:+-]"
    )]
    fn build_refusals_name_the_field_and_the_fix(
        #[case] builder: HarnessDescriptorBuilder,
        #[case] message: &str,
    ) {
        let err = builder.build().unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }

    #[test]
    fn options_schema_root_may_be_a_ref_or_a_union_of_objects() {
        let by_ref = json!({"$ref": "#/$defs/O", "$defs": {"O": {"type": "object", "additionalProperties": false}}});
        assert!(valid_builder().options_schema(by_ref).build().is_ok());
        let union = json!({"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}}, "additionalProperties": false},
            {"type": "object", "properties": {"kind": {"const": "b"}}, "additionalProperties": false}
        ]});
        assert!(valid_builder().options_schema(union).build().is_ok());
        let enum_options = schema_of::<ClosedBackend>();
        assert!(valid_builder().options_schema(enum_options).build().is_ok());
    }

    // ----- descriptor: deserialization -----

    #[test]
    fn deserialization_accepts_the_minimal_manifest_and_defaults_optional_fields() {
        let d: HarnessDescriptor = serde_json::from_value(valid_json()).unwrap();
        assert!(d.dependencies().is_empty());
        assert!(d.capabilities().is_empty());
        assert_eq!(d.certification_evidence_version(), None);
        assert_eq!(serde_json::to_value(&d).unwrap(), valid_json());
    }

    #[rstest]
    #[case("extra", json!(1), "unknown field `extra`")]
    #[case("id", json!("Scripted"), "invalid adapter id `Scripted`: expected a lowercase id matching ^[a-z][a-z0-9_]{1,63}$")]
    #[case("id", json!("x"), "invalid adapter id `x`")]
    #[case("contractVersions", json!("1"), "invalid type: string \"1\", expected a sequence")]
    #[case("contractVersions", json!([0]), "invalid contract version 0")]
    #[case("contractVersions", json!([]), "`contractVersions` is empty")]
    #[case("implementationVersion", json!("latest"), "`implementationVersion` `latest` is invalid")]
    #[case("implementationVersion", json!(1), "invalid type: integer `1`, expected a string")]
    #[case("executionMode", json!({"mode": "sandbox_pod", "profileId": "p1", "image": "x"}), "it cannot supply `image`")]
    #[case("executionMode", json!({"mode": "in_process", "compatibilityOnly": false}), "compatibility-only")]
    #[case("trustBoundary", json!("sandbox"), "`trustBoundary` `sandbox` does not fit execution mode `in_process`")]
    #[case("trustBoundary", json!("kernel"), "unknown variant `kernel`")]
    #[case("capabilities", json!({"stream.txt": {"level": "native"}}), "did you mean `stream.text`?")]
    #[case("optionsSchema", json!({"type": "object"}), "`optionsSchema` accepts unknown fields at the root")]
    #[case("dependencies", json!([{"name": "claude", "kind": "binary"}]), "missing field `version`")]
    #[case("dependencies", json!([{"name": "claude", "kind": "apt", "version": "1"}]), "unknown variant `apt`")]
    fn deserialization_errors_name_the_problem(
        #[case] field: &str,
        #[case] value: Value,
        #[case] message: &str,
    ) {
        let mut wire = valid_json();
        wire[field] = value;
        let err = serde_json::from_value::<HarnessDescriptor>(wire).unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }

    #[test]
    fn deserialization_reports_every_validation_problem_with_the_id() {
        let mut wire = valid_json();
        wire["contractVersions"] = json!([]);
        wire["implementationVersion"] = json!("1");
        let err = serde_json::from_value::<HarnessDescriptor>(wire).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("invalid harness descriptor `scripted`: "),
            "{text}"
        );
        assert!(text.contains("`contractVersions` is empty"), "{text}");
        assert!(
            text.contains("`implementationVersion` `1` is invalid"),
            "{text}"
        );
    }

    #[test]
    fn missing_required_fields_are_named() {
        for field in [
            "id",
            "name",
            "contractVersions",
            "implementationVersion",
            "executionMode",
            "trustBoundary",
            "optionsSchema",
            "capabilities",
        ] {
            let mut wire = valid_json();
            wire.as_object_mut().unwrap().remove(field);
            let err = serde_json::from_value::<HarnessDescriptor>(wire).unwrap_err();
            assert_eq!(err.to_string(), format!("missing field `{field}`"));
        }
    }
}

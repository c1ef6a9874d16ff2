use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use crate::wire::UnknownFields;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::support::truncate_for_echo;
use crate::id::InvalidId;

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
/// [`ExecutionMode::permitted_trust_boundaries`]); [`HarnessDescriptor::validate`](super::HarnessDescriptor::validate) checks it.
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
#[serde(rename_all = "camelCase")]
#[schemars(description = "Something an adapter needs in order to run.")]
pub struct Dependency {
    /// The name in its ecosystem (`@google/gemini-cli`, `claude`, `tokio`).
    pub(super) name: String,
    /// What kind of dependency it is.
    pub(super) kind: DependencyKind,
    /// A version requirement in the ecosystem's own syntax.
    version: String,
    /// Whether the adapter still works, with less, without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    optional: bool,
    /// Fields a newer writer added that this version does not know, written back as read
    /// (see [`crate::wire`]).
    #[serde(flatten)]
    #[schemars(skip)]
    unknown: UnknownFields,
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
            unknown: UnknownFields::default(),
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

    pub(super) fn problem(&self) -> Option<&'static str> {
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

//! Capabilities: the v1 capability keys, support levels, what an adapter declares about each
//! key, and checking a caller's required capabilities against that declaration.
//!
//! An adapter declares a [`CapabilityReport`]: for each [`CapabilityKey`] it supports, a
//! [`Capability`] with a [`SupportLevel`], machine-readable constraints, a human explanation
//! and, once certified, a conformance [`EvidenceId`]. A key it does not declare is
//! `unsupported`. Before any provider work begins, the runtime checks the caller's
//! `requiredCapabilities` ([`Requirement`]s) with [`CapabilityReport::check`], which lists
//! every unmet requirement at once.
//!
//! ```
//! use harness_core::capability::{
//!     Capability, CapabilityKey, CapabilityReport, Requirement, SupportLevel,
//! };
//!
//! let report = CapabilityReport::new()
//!     .with(CapabilityKey::StreamText, Capability::native())
//!     .with(
//!         CapabilityKey::StreamUsage,
//!         Capability::degraded("usage is reported once, at the end of the turn")
//!             .with_constraint("granularity", "turn"),
//!     );
//!
//! // Requirements arrive on the wire as bare keys or as objects with a minimum level.
//! let required: Vec<Requirement> = serde_json::from_str(
//!     r#"["stream.text", {"capability": "stream.usage", "minimum": "emulated"}, "tool.mcp"]"#,
//! )
//! .unwrap();
//!
//! let unmet = report.check(&required).unwrap_err();
//! assert_eq!(unmet.len(), 2);
//! assert_eq!(unmet[0].capability, CapabilityKey::StreamUsage);
//! assert_eq!(unmet[0].actual, SupportLevel::Degraded);
//! assert_eq!(unmet[1].capability, CapabilityKey::ToolMcp);
//! assert_eq!(unmet[1].actual, SupportLevel::Unsupported);
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

use crate::wire::UnknownFields;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::id::InvalidId;

macro_rules! capability_keys {
    ($( $(#[$doc:meta])* $variant:ident => $wire:literal, )*) => {
        /// One of the capability keys of adapter contract v1, in the contract's order.
        ///
        /// On the wire (and in `Display` / `FromStr`) a key is its dotted name, such as
        /// `"stream.text"`. Parsing an unknown name fails with [`UnknownCapability`], which
        /// suggests the nearest valid key. The derived `Ord` is the contract's order, so a
        /// [`CapabilityReport`] lists its keys in that order.
        ///
        /// The enum is `#[non_exhaustive]`: a later contract version may add keys.
        ///
        /// ```
        /// use harness_core::capability::CapabilityKey;
        ///
        /// let key: CapabilityKey = "interrupt.tool_approval".parse().unwrap();
        /// assert_eq!(key, CapabilityKey::InterruptToolApproval);
        /// assert_eq!(key.to_string(), "interrupt.tool_approval");
        /// assert_eq!(CapabilityKey::ALL.len(), 38);
        ///
        /// let err = "stream.txt".parse::<CapabilityKey>().unwrap_err();
        /// assert_eq!(err.suggestion, CapabilityKey::StreamText);
        /// assert_eq!(
        ///     err.to_string(),
        ///     "unknown capability `stream.txt`; did you mean `stream.text`?"
        /// );
        /// ```
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[non_exhaustive]
        pub enum CapabilityKey {
            $( $(#[$doc])* $variant, )*
        }

        impl CapabilityKey {
            /// Every v1 key, in the contract's order.
            pub const ALL: [Self; capability_keys!(@count $($variant)*)] = [
                $( Self::$variant, )*
            ];

            /// The dotted wire name (`"stream.text"`).
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $wire, )*
                }
            }

            /// The key whose wire name is exactly `s`.
            fn from_wire(s: &str) -> Option<Self> {
                match s {
                    $( $wire => Some(Self::$variant), )*
                    _ => None,
                }
            }
        }
    };
    (@count $($variant:ident)*) => { 0 $( + capability_keys!(@one $variant) )* };
    (@one $variant:ident) => { 1 };
}

capability_keys! {
    /// `stream.text`: incremental assistant text.
    StreamText => "stream.text",
    /// `stream.reasoning`: incremental reasoning / thinking output.
    StreamReasoning => "stream.reasoning",
    /// `stream.usage`: token and cost usage reports.
    StreamUsage => "stream.usage",
    /// `invoke.non_streaming`: a single response without incremental events.
    InvokeNonStreaming => "invoke.non_streaming",
    /// `session.multi_turn`: conversation history across turns.
    SessionMultiTurn => "session.multi_turn",
    /// `session.cross_replica_resume`: resuming a session on another replica.
    SessionCrossReplicaResume => "session.cross_replica_resume",
    /// `session.clear`: deleting or resetting native session state.
    SessionClear => "session.clear",
    /// `thread.durable_commit`: committing the native state head durably.
    ThreadDurableCommit => "thread.durable_commit",
    /// `thread.eviction_restore`: restoring native state after eviction.
    ThreadEvictionRestore => "thread.eviction_restore",
    /// `interrupt.form_input`: pausing for validated form input.
    InterruptFormInput => "interrupt.form_input",
    /// `interrupt.tool_approval`: pausing for tool-call approval.
    InterruptToolApproval => "interrupt.tool_approval",
    /// `interrupt.multi_tool`: one approval covering several tool calls.
    InterruptMultiTool => "interrupt.multi_tool",
    /// `tool.mcp`: MCP tools.
    ToolMcp => "tool.mcp",
    /// `tool.builtin`: tools that run in the execution: the provider's own built-in tools,
    /// and, where the capability's constraint [`PORTABLE_TOOLS`] is `true`, the execution's
    /// portable tools (what the service hands the runtime).
    ToolBuiltin => "tool.builtin",
    /// `tool.caller_credentials`: tools acting with the caller's credentials.
    ToolCallerCredentials => "tool.caller_credentials",
    /// `tool.partial_availability`: running when some tools are unavailable.
    ToolPartialAvailability => "tool.partial_availability",
    /// `tool.cancellation`: cancelling an in-flight tool call.
    ToolCancellation => "tool.cancellation",
    /// `input.images`: image inputs.
    InputImages => "input.images",
    /// `input.documents`: document inputs.
    InputDocuments => "input.documents",
    /// `skills`: skill manifests.
    Skills => "skills",
    /// `subagents`: delegation to subagents.
    Subagents => "subagents",
    /// `subagents.mixed_harness`: subagents running on another harness.
    SubagentsMixedHarness => "subagents.mixed_harness",
    /// `middleware.portable`: the portable middleware policy.
    MiddlewarePortable => "middleware.portable",
    /// `memory.semantic`: semantic long-term memory.
    MemorySemantic => "memory.semantic",
    /// `memory.episodic_reference`: references to past episodes.
    MemoryEpisodicReference => "memory.episodic_reference",
    /// `memory.procedural`: procedural memory.
    MemoryProcedural => "memory.procedural",
    /// `memory.user_scope`: memory scoped to a user.
    MemoryUserScope => "memory.user_scope",
    /// `memory.shared_policy`: memory shared under a policy.
    MemorySharedPolicy => "memory.shared_policy",
    /// `observability.metrics`: metrics.
    ObservabilityMetrics => "observability.metrics",
    /// `observability.tracing`: tracing spans.
    ObservabilityTracing => "observability.tracing",
    /// `observability.trace_propagation`: propagating the caller's trace context.
    ObservabilityTracePropagation => "observability.trace_propagation",
    /// `observability.redaction`: redacting sensitive data from telemetry.
    ObservabilityRedaction => "observability.redaction",
    /// `runtime.cancel`: cancelling a run.
    RuntimeCancel => "runtime.cancel",
    /// `runtime.restart`: restarting provider clients and processes.
    RuntimeRestart => "runtime.restart",
    /// `runtime.bounded_cleanup`: cleanup within a deadline.
    RuntimeBoundedCleanup => "runtime.bounded_cleanup",
    /// `runtime.sandbox_isolation`: running inside an isolating sandbox.
    RuntimeSandboxIsolation => "runtime.sandbox_isolation",
    /// `runtime.lease_fencing`: fencing stale workers with leases.
    RuntimeLeaseFencing => "runtime.lease_fencing",
    /// `runtime.eviction_recovery`: recovering after the worker is evicted.
    RuntimeEvictionRecovery => "runtime.eviction_recovery",
}

/// Inputs longer than this are cut before the edit distance is computed and before they are
/// echoed in an error, so a hostile input costs little.
const MAX_ECHO: usize = 80;

fn truncate_for_echo(s: &str) -> String {
    if s.chars().count() > MAX_ECHO {
        let mut v: String = s.chars().take(MAX_ECHO - 3).collect();
        v.push_str("...");
        v
    } else {
        s.to_owned()
    }
}

/// Levenshtein distance between two short strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = substitution.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

impl CapabilityKey {
    /// The part of the wire name before the first dot (`runtime` for `runtime.cancel`; the
    /// whole name for `skills`).
    fn namespace(self) -> &'static str {
        let s = self.as_str();
        s.split_once('.').map_or(s, |(ns, _)| ns)
    }

    /// The valid key nearest to `s` by edit distance, compared case-insensitively.
    ///
    /// When `s` starts with a known namespace (`runtime.`, `tool.`, ...) only keys of that
    /// namespace are candidates, so `runtime.cancellation` suggests `runtime.cancel` rather
    /// than the textually closer `tool.cancellation`. Ties go to the earlier key in contract
    /// order.
    ///
    /// ```
    /// use harness_core::capability::CapabilityKey;
    /// assert_eq!(CapabilityKey::nearest("tool.mpc"), CapabilityKey::ToolMcp);
    /// assert_eq!(CapabilityKey::nearest("runtime_cancel"), CapabilityKey::RuntimeCancel);
    /// assert_eq!(CapabilityKey::nearest("runtime.cancellation"), CapabilityKey::RuntimeCancel);
    /// ```
    #[must_use]
    pub fn nearest(s: &str) -> Self {
        let probe: String = s.chars().take(MAX_ECHO).collect::<String>().to_lowercase();
        let namespace = probe
            .split_once('.')
            .map(|(ns, _)| ns)
            .filter(|ns| Self::ALL.iter().any(|k| k.namespace() == *ns));
        let mut best = (usize::MAX, Self::StreamText);
        for key in Self::ALL {
            if namespace.is_some_and(|ns| key.namespace() != ns) {
                continue;
            }
            let d = edit_distance(&probe, key.as_str());
            if d < best.0 {
                best = (d, key);
            }
        }
        best.1
    }
}

/// A capability key was not one of the v1 keys.
///
/// The message names the rejected key and the nearest valid one
/// (``unknown capability `stream.txt`; did you mean `stream.text`?``). Deserializing a
/// [`CapabilityKey`], a [`Requirement`] or a [`CapabilityReport`] fails with this message too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown capability `{given}`; did you mean `{suggestion}`?")]
pub struct UnknownCapability {
    /// The rejected input, truncated to 80 characters.
    pub given: String,
    /// The valid key nearest to the input by edit distance.
    pub suggestion: CapabilityKey,
}

impl FromStr for CapabilityKey {
    type Err = UnknownCapability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_wire(s).ok_or_else(|| UnknownCapability {
            given: truncate_for_echo(s),
            suggestion: Self::nearest(s),
        })
    }
}

impl TryFrom<&str> for CapabilityKey {
    type Error = UnknownCapability;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl fmt::Display for CapabilityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CapabilityKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

struct CapabilityKeyVisitor;

impl Visitor<'_> for CapabilityKeyVisitor {
    type Value = CapabilityKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a v1 capability key such as `stream.text`")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        v.parse().map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for CapabilityKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(CapabilityKeyVisitor)
    }
}

impl JsonSchema for CapabilityKey {
    fn schema_name() -> Cow<'static, str> {
        "CapabilityKey".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let keys: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
        json_schema!({
            "type": "string",
            "enum": keys,
            "description": "A capability key of adapter contract v1."
        })
    }
}

/// How well an adapter supports a capability.
///
/// The three *usable* levels are ordered `native > emulated > degraded`:
///
/// - `native`: the provider does it itself, with full fidelity;
/// - `emulated`: the adapter or runtime reproduces the behaviour with full portable
///   semantics, though not natively (e.g. usage computed by the adapter);
/// - `degraded`: the behaviour is delivered in some reduced form that the constraints and
///   explanation describe (e.g. usage only at the end of a turn).
///
/// The two *unusable* levels are kept apart because they call for different remedies:
///
/// - `unsupported`: this adapter cannot do it at all;
/// - `unavailable`: the adapter can, but not in this deployment or configuration right now
///   (a missing dependency, credential or setting).
///
/// Neither unusable level ever satisfies a requirement (see [`SupportLevel::satisfies`]).
///
/// ```
/// use harness_core::capability::SupportLevel;
/// assert!(SupportLevel::Native.satisfies(SupportLevel::Emulated));
/// assert!(!SupportLevel::Degraded.satisfies(SupportLevel::Emulated));
/// assert!(!SupportLevel::Unavailable.satisfies(SupportLevel::Degraded));
/// assert_eq!(serde_json::to_string(&SupportLevel::Emulated).unwrap(), "\"emulated\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(
    description = "How well an adapter supports a capability: native > emulated > degraded; unsupported and unavailable never satisfy a requirement."
)]
pub enum SupportLevel {
    /// The provider supports it natively, with full fidelity.
    Native,
    /// Reproduced by the adapter or runtime with full portable semantics.
    Emulated,
    /// Delivered in a reduced form described by the constraints and explanation.
    Degraded,
    /// This adapter cannot do it.
    Unsupported,
    /// The adapter could, but not in this deployment or configuration.
    Unavailable,
}

impl SupportLevel {
    /// Every level, best first.
    pub const ALL: [Self; 5] = [
        Self::Native,
        Self::Emulated,
        Self::Degraded,
        Self::Unsupported,
        Self::Unavailable,
    ];

    /// The wire name (`"native"`, ...).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Emulated => "emulated",
            Self::Degraded => "degraded",
            Self::Unsupported => "unsupported",
            Self::Unavailable => "unavailable",
        }
    }

    /// Whether the behaviour is delivered in some form (`native`, `emulated` or `degraded`).
    #[must_use]
    pub const fn is_usable(self) -> bool {
        matches!(self, Self::Native | Self::Emulated | Self::Degraded)
    }

    /// 3 for native, 2 for emulated, 1 for degraded, 0 for the unusable levels.
    const fn rank(self) -> u8 {
        match self {
            Self::Native => 3,
            Self::Emulated => 2,
            Self::Degraded => 1,
            Self::Unsupported | Self::Unavailable => 0,
        }
    }

    /// Whether a capability at this level meets a requirement of at least `minimum`.
    ///
    /// Usable levels are ordered `native > emulated > degraded`. `unsupported` and
    /// `unavailable` never satisfy anything, not even a `minimum` of `unsupported`: a
    /// requirement asks for the behaviour to be delivered, and they do not deliver it. (A
    /// [`Requirement`] cannot be built with an unusable minimum anyway.)
    ///
    /// ```
    /// use harness_core::capability::SupportLevel::*;
    /// assert!(Native.satisfies(Degraded));
    /// assert!(Emulated.satisfies(Emulated));
    /// assert!(!Emulated.satisfies(Native));
    /// assert!(!Unsupported.satisfies(Unsupported));
    /// ```
    #[must_use]
    pub const fn satisfies(self, minimum: Self) -> bool {
        self.is_usable() && self.rank() >= minimum.rank()
    }
}

impl fmt::Display for SupportLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The identifier of the conformance evidence that certifies a capability: 1 to 128
/// characters from `[A-Za-z0-9._:-]` (for example `conformance:v1:scripted:2026-09-02`).
///
/// ```
/// use harness_core::capability::EvidenceId;
/// let id: EvidenceId = "conformance:v1:scripted.7".parse().unwrap();
/// assert_eq!(id.as_str(), "conformance:v1:scripted.7");
/// assert!("has space".parse::<EvidenceId>().is_err());
/// assert!(serde_json::from_str::<EvidenceId>("\"\"").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EvidenceId(Box<str>);

const EVIDENCE_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";

impl EvidenceId {
    /// The identifier as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn is_valid(s: &str) -> bool {
        (1..=128).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    }

    fn invalid(s: &str) -> InvalidId {
        InvalidId {
            kind: "evidence id",
            value: truncate_for_echo(s),
            expected: "1 to 128 characters from [A-Za-z0-9._:-]",
        }
    }
}

impl FromStr for EvidenceId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if Self::is_valid(s) {
            Ok(Self(s.into()))
        } else {
            Err(Self::invalid(s))
        }
    }
}

impl TryFrom<String> for EvidenceId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if Self::is_valid(&s) {
            Ok(Self(s.into_boxed_str()))
        } else {
            Err(Self::invalid(&s))
        }
    }
}

crate::id::string_id_common!(EvidenceId, EVIDENCE_PATTERN, "A conformance evidence id.");

/// The constraint of `tool.builtin` saying that the adapter runs the execution's portable
/// tools ([`RuntimeContext::tools`](crate::adapter::RuntimeContext::tools)), not only the
/// provider's own: `"portableTools": true`. The service refuses a request that selects
/// tools for an adapter without it.
pub const PORTABLE_TOOLS: &str = "portableTools";

/// What an adapter declares about one capability: its level, machine-readable constraints, a
/// human explanation and, when certified, the conformance evidence.
///
/// Wire form (camelCase, unknown fields rejected, empty constraints and absent options
/// omitted):
///
/// ```
/// use harness_core::capability::{Capability, SupportLevel};
///
/// let cap = Capability::degraded("images are downscaled to 1024 px")
///     .with_constraint("maxImagePixels", 1024)
///     .with_evidence("conformance:v1:scripted".parse().unwrap());
/// assert_eq!(cap.level(), SupportLevel::Degraded);
/// assert_eq!(
///     serde_json::to_value(&cap).unwrap(),
///     serde_json::json!({
///         "level": "degraded",
///         "constraints": { "maxImagePixels": 1024 },
///         "explanation": "images are downscaled to 1024 px",
///         "evidence": "conformance:v1:scripted"
///     })
/// );
/// assert_eq!(
///     serde_json::to_value(Capability::native()).unwrap(),
///     serde_json::json!({ "level": "native" })
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "What an adapter declares about one capability: level, machine-readable constraints, explanation and conformance evidence."
)]
pub struct Capability {
    /// The support level.
    level: SupportLevel,
    /// Machine-readable constraints on the support.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    constraints: serde_json::Map<String, serde_json::Value>,
    /// A human explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    explanation: Option<String>,
    /// The conformance evidence, when certified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    evidence: Option<EvidenceId>,
    /// Fields a newer writer added that this version does not know, written back as read
    /// (see [`crate::wire`]).
    #[serde(flatten)]
    #[schemars(skip)]
    unknown: UnknownFields,
}

impl Capability {
    /// A capability at `level`, without constraints, explanation or evidence.
    #[must_use]
    pub fn new(level: SupportLevel) -> Self {
        Self {
            level,
            constraints: serde_json::Map::new(),
            explanation: None,
            evidence: None,
            unknown: UnknownFields::default(),
        }
    }

    /// Supported natively by the provider.
    #[must_use]
    pub fn native() -> Self {
        Self::new(SupportLevel::Native)
    }

    /// Reproduced by the adapter with full portable semantics.
    #[must_use]
    pub fn emulated() -> Self {
        Self::new(SupportLevel::Emulated)
    }

    /// Delivered in a reduced form; `explanation` says how (a caller deciding whether
    /// `degraded` is good enough needs to know).
    #[must_use]
    pub fn degraded(explanation: impl Into<String>) -> Self {
        Self::new(SupportLevel::Degraded).with_explanation(explanation)
    }

    /// Not supported by this adapter; `explanation` says why.
    #[must_use]
    pub fn unsupported(explanation: impl Into<String>) -> Self {
        Self::new(SupportLevel::Unsupported).with_explanation(explanation)
    }

    /// Supported by the adapter but not in this deployment; `explanation` says what is
    /// missing.
    #[must_use]
    pub fn unavailable(explanation: impl Into<String>) -> Self {
        Self::new(SupportLevel::Unavailable).with_explanation(explanation)
    }

    /// Adds (or replaces) a machine-readable constraint.
    #[must_use]
    pub fn with_constraint(
        mut self,
        key: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.constraints.insert(key.into(), value.into());
        self
    }

    /// Sets the human explanation.
    #[must_use]
    pub fn with_explanation(mut self, explanation: impl Into<String>) -> Self {
        self.explanation = Some(explanation.into());
        self
    }

    /// Records the conformance evidence certifying this capability.
    #[must_use]
    pub fn with_evidence(mut self, evidence: EvidenceId) -> Self {
        self.evidence = Some(evidence);
        self
    }

    /// Fields a newer writer added that this version does not know (kept, and written back
    /// when the capability is serialized again; see [`crate::wire`]).
    #[must_use]
    pub fn unknown_fields(&self) -> &UnknownFields {
        &self.unknown
    }

    /// The support level.
    #[must_use]
    pub fn level(&self) -> SupportLevel {
        self.level
    }

    /// The machine-readable constraints (empty when there are none).
    #[must_use]
    pub fn constraints(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.constraints
    }

    /// The human explanation.
    #[must_use]
    pub fn explanation(&self) -> Option<&str> {
        self.explanation.as_deref()
    }

    /// The conformance evidence, when certified.
    #[must_use]
    pub fn evidence(&self) -> Option<&EvidenceId> {
        self.evidence.as_ref()
    }
}

/// The `unsupported` capability reported for each undeclared key, built once per process so
/// that [`CapabilityReport::get`] never allocates.
static UNDECLARED: LazyLock<Vec<Capability>> = LazyLock::new(|| {
    CapabilityKey::ALL
        .iter()
        .map(|key| Capability::unsupported(format!("the adapter does not declare `{key}`")))
        .collect()
});

fn undeclared(key: CapabilityKey) -> &'static Capability {
    // `ALL` is in declaration order, so the discriminant is the index.
    let index = key as usize;
    &UNDECLARED[index]
}

/// The capabilities an adapter declares, keyed by [`CapabilityKey`] in contract order.
///
/// On the wire it is a JSON object keyed by the dotted capability key. A key that is not
/// declared reads as `unsupported` through [`CapabilityReport::get`] and
/// [`CapabilityReport::level`]; [`CapabilityReport::declared`] tells the two apart.
/// Deserialization rejects unknown keys (suggesting the nearest) and duplicate keys.
///
/// ```
/// use harness_core::capability::{Capability, CapabilityKey, CapabilityReport, SupportLevel};
///
/// let report: CapabilityReport = serde_json::from_str(
///     r#"{"stream.text": {"level": "native"}, "runtime.cancel": {"level": "emulated"}}"#,
/// )
/// .unwrap();
/// assert_eq!(report.level(CapabilityKey::StreamText), SupportLevel::Native);
/// assert_eq!(report.level(CapabilityKey::ToolMcp), SupportLevel::Unsupported);
/// assert!(report.declared(CapabilityKey::ToolMcp).is_none());
/// assert_eq!(
///     report.get(CapabilityKey::ToolMcp).explanation(),
///     Some("the adapter does not declare `tool.mcp`")
/// );
///
/// let err = serde_json::from_str::<CapabilityReport>(r#"{"stream.txt": {"level": "native"}}"#)
///     .unwrap_err();
/// assert!(err.to_string().contains("did you mean `stream.text`?"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapabilityReport {
    entries: BTreeMap<CapabilityKey, Capability>,
}

impl CapabilityReport {
    /// An empty report: every key is undeclared, hence `unsupported`.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares `key` with `capability`, returning the previous declaration.
    pub fn declare(&mut self, key: CapabilityKey, capability: Capability) -> Option<Capability> {
        self.entries.insert(key, capability)
    }

    /// Builder form of [`CapabilityReport::declare`].
    #[must_use]
    pub fn with(mut self, key: CapabilityKey, capability: Capability) -> Self {
        self.entries.insert(key, capability);
        self
    }

    /// The declared capability, or for an undeclared key an `unsupported` one whose
    /// explanation says it was not declared. Never allocates.
    #[must_use]
    pub fn get(&self, key: CapabilityKey) -> &Capability {
        self.entries.get(&key).unwrap_or_else(|| undeclared(key))
    }

    /// The declared capability, or `None` if the adapter did not declare `key`.
    #[must_use]
    pub fn declared(&self, key: CapabilityKey) -> Option<&Capability> {
        self.entries.get(&key)
    }

    /// The level of `key` (`unsupported` when undeclared).
    #[must_use]
    pub fn level(&self, key: CapabilityKey) -> SupportLevel {
        self.get(key).level
    }

    /// Whether the adapter runs the execution's portable tools: `tool.builtin` usable with
    /// the constraint [`PORTABLE_TOOLS`] `true`.
    ///
    /// ```
    /// use harness_core::capability::{Capability, CapabilityKey, CapabilityReport, PORTABLE_TOOLS};
    /// let agent_tools = CapabilityReport::new().with(CapabilityKey::ToolBuiltin, Capability::native());
    /// assert!(!agent_tools.runs_portable_tools());
    /// let portable = CapabilityReport::new().with(
    ///     CapabilityKey::ToolBuiltin,
    ///     Capability::native().with_constraint(PORTABLE_TOOLS, true),
    /// );
    /// assert!(portable.runs_portable_tools());
    /// ```
    #[must_use]
    pub fn runs_portable_tools(&self) -> bool {
        let builtin = self.get(CapabilityKey::ToolBuiltin);
        builtin.level.is_usable()
            && builtin.constraints.get(PORTABLE_TOOLS) == Some(&serde_json::Value::Bool(true))
    }

    /// The declared capabilities, in contract order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (CapabilityKey, &Capability)> + '_ {
        self.entries.iter().map(|(k, v)| (*k, v))
    }

    /// How many keys are declared.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is declared.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks `requirements` against this report.
    ///
    /// Returns every unmet requirement, in the order given (a requirement repeated verbatim
    /// is reported once), each with the key, the required minimum, the actual level and the
    /// adapter's explanation.
    ///
    /// # Errors
    ///
    /// The list of unmet requirements, when there is at least one.
    pub fn check(&self, requirements: &[Requirement]) -> Result<(), Vec<UnmetRequirement>> {
        let mut unmet: Vec<UnmetRequirement> = Vec::new();
        for req in requirements {
            let cap = self.get(req.capability);
            if cap.level.satisfies(req.minimum) {
                continue;
            }
            if unmet
                .iter()
                .any(|u| u.capability == req.capability && u.required == req.minimum)
            {
                continue;
            }
            unmet.push(UnmetRequirement {
                capability: req.capability,
                required: req.minimum,
                actual: cap.level,
                explanation: cap.explanation.clone(),
            });
        }
        if unmet.is_empty() { Ok(()) } else { Err(unmet) }
    }
}

impl<'a> IntoIterator for &'a CapabilityReport {
    type Item = (CapabilityKey, &'a Capability);
    type IntoIter = std::iter::Map<
        std::collections::btree_map::Iter<'a, CapabilityKey, Capability>,
        fn((&'a CapabilityKey, &'a Capability)) -> (CapabilityKey, &'a Capability),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (*k, v))
    }
}

impl FromIterator<(CapabilityKey, Capability)> for CapabilityReport {
    fn from_iter<I: IntoIterator<Item = (CapabilityKey, Capability)>>(iter: I) -> Self {
        Self {
            entries: iter.into_iter().collect(),
        }
    }
}

impl Extend<(CapabilityKey, Capability)> for CapabilityReport {
    fn extend<I: IntoIterator<Item = (CapabilityKey, Capability)>>(&mut self, iter: I) {
        self.entries.extend(iter);
    }
}

impl Serialize for CapabilityReport {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.entries.len()))?;
        for (key, cap) in &self.entries {
            map.serialize_entry(key, cap)?;
        }
        map.end()
    }
}

struct ReportVisitor;

impl<'de> Visitor<'de> for ReportVisitor {
    type Value = CapabilityReport;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object mapping capability keys (such as `stream.text`) to capabilities")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut entries = BTreeMap::new();
        while let Some(key) = map.next_key::<CapabilityKey>()? {
            let cap = map.next_value::<Capability>()?;
            if entries.insert(key, cap).is_some() {
                return Err(de::Error::custom(format_args!(
                    "capability `{key}` is declared twice; declare each key once"
                )));
            }
        }
        Ok(CapabilityReport { entries })
    }
}

impl<'de> Deserialize<'de> for CapabilityReport {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ReportVisitor)
    }
}

impl JsonSchema for CapabilityReport {
    fn schema_name() -> Cow<'static, str> {
        "CapabilityReport".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let capability = generator.subschema_for::<Capability>();
        let properties: serde_json::Map<String, serde_json::Value> = CapabilityKey::ALL
            .iter()
            .map(|k| (k.as_str().to_owned(), capability.clone().to_value()))
            .collect();
        json_schema!({
            "type": "object",
            "description": "Declared capabilities keyed by capability key; an undeclared key is unsupported.",
            "properties": properties,
            "additionalProperties": false
        })
    }
}

/// A capability a caller requires, with the minimum level it accepts.
///
/// Wire forms: `{"capability": "stream.text", "minimum": "emulated"}`, or with `minimum`
/// omitted, or a bare key `"stream.text"`; the last two mean a minimum of
/// [`Requirement::DEFAULT_MINIMUM`] (`degraded`). It always serializes as the object with
/// `minimum` spelled out. The minimum must be a usable level (`native`, `emulated`,
/// `degraded`): a requirement that `unsupported` would meet is not a requirement.
///
/// **Why the default is `degraded`:** a requirement most often means "the behaviour must be
/// delivered at all" (the run needs usage numbers, or needs tool approval to pause), and a
/// degraded capability delivers it, with constraints the caller can read. A caller that needs
/// full portable semantics asks for `emulated`; one that needs the provider's own
/// implementation asks for `native`.
///
/// ```
/// use harness_core::capability::{CapabilityKey, Requirement, SupportLevel};
///
/// let bare: Requirement = serde_json::from_str("\"stream.text\"").unwrap();
/// assert_eq!(bare, Requirement::new(CapabilityKey::StreamText));
/// assert_eq!(bare.minimum(), SupportLevel::Degraded);
///
/// let strict: Requirement =
///     serde_json::from_str(r#"{"capability":"stream.text","minimum":"native"}"#).unwrap();
/// assert_eq!(strict, Requirement::native(CapabilityKey::StreamText));
///
/// let err = serde_json::from_str::<Requirement>("\"stream.txt\"").unwrap_err();
/// assert!(err.to_string().contains("did you mean `stream.text`?"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Requirement {
    capability: CapabilityKey,
    minimum: SupportLevel,
}

/// A requirement was given a minimum that no capability can satisfy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "requirement on `{capability}` has minimum `{minimum}`, which nothing can satisfy: \
     expected `native`, `emulated` or `degraded`"
)]
pub struct InvalidRequirement {
    /// The capability the requirement named.
    pub capability: CapabilityKey,
    /// The rejected minimum (`unsupported` or `unavailable`).
    pub minimum: SupportLevel,
}

impl Requirement {
    /// The minimum a requirement has when none is given: `degraded`.
    pub const DEFAULT_MINIMUM: SupportLevel = SupportLevel::Degraded;

    /// Requires `capability` in any usable form (at least `degraded`).
    #[must_use]
    pub const fn new(capability: CapabilityKey) -> Self {
        Self {
            capability,
            minimum: Self::DEFAULT_MINIMUM,
        }
    }

    /// Requires `capability` at `emulated` or `native`.
    #[must_use]
    pub const fn emulated(capability: CapabilityKey) -> Self {
        Self {
            capability,
            minimum: SupportLevel::Emulated,
        }
    }

    /// Requires `capability` at `native`.
    #[must_use]
    pub const fn native(capability: CapabilityKey) -> Self {
        Self {
            capability,
            minimum: SupportLevel::Native,
        }
    }

    /// Requires `capability` at `minimum` or better.
    ///
    /// # Errors
    ///
    /// [`InvalidRequirement`] when `minimum` is `unsupported` or `unavailable`.
    pub const fn at_least(
        capability: CapabilityKey,
        minimum: SupportLevel,
    ) -> Result<Self, InvalidRequirement> {
        if minimum.is_usable() {
            Ok(Self {
                capability,
                minimum,
            })
        } else {
            Err(InvalidRequirement {
                capability,
                minimum,
            })
        }
    }

    /// The required capability.
    #[must_use]
    pub const fn capability(&self) -> CapabilityKey {
        self.capability
    }

    /// The minimum accepted level (always usable).
    #[must_use]
    pub const fn minimum(&self) -> SupportLevel {
        self.minimum
    }

    /// Whether a capability at `level` meets this requirement.
    #[must_use]
    pub const fn is_met_by(&self, level: SupportLevel) -> bool {
        level.satisfies(self.minimum)
    }
}

impl From<CapabilityKey> for Requirement {
    fn from(capability: CapabilityKey) -> Self {
        Self::new(capability)
    }
}

impl Serialize for Requirement {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Requirement", 2)?;
        st.serialize_field("capability", &self.capability)?;
        st.serialize_field("minimum", &self.minimum)?;
        st.end()
    }
}

const REQUIREMENT_FIELDS: &[&str] = &["capability", "minimum"];

struct RequirementVisitor;

impl<'de> Visitor<'de> for RequirementVisitor {
    type Value = Requirement;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a capability key such as \"stream.text\" or an object \
             {\"capability\": ..., \"minimum\": ...}",
        )
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        v.parse::<CapabilityKey>()
            .map(Requirement::new)
            .map_err(E::custom)
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut capability = None;
        let mut minimum = None;
        while let Some(field) = map.next_key::<Cow<'de, str>>()? {
            match &*field {
                "capability" => {
                    if capability.is_some() {
                        return Err(de::Error::duplicate_field("capability"));
                    }
                    capability = Some(map.next_value::<CapabilityKey>()?);
                }
                "minimum" => {
                    if minimum.is_some() {
                        return Err(de::Error::duplicate_field("minimum"));
                    }
                    minimum = Some(map.next_value::<SupportLevel>()?);
                }
                other => return Err(de::Error::unknown_field(other, REQUIREMENT_FIELDS)),
            }
        }
        let capability = capability.ok_or_else(|| de::Error::missing_field("capability"))?;
        Requirement::at_least(capability, minimum.unwrap_or(Requirement::DEFAULT_MINIMUM))
            .map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Requirement {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RequirementVisitor)
    }
}

impl JsonSchema for Requirement {
    fn schema_name() -> Cow<'static, str> {
        "Requirement".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let key = generator.subschema_for::<CapabilityKey>();
        json_schema!({
            "description": "A required capability: a bare key (minimum `degraded`) or an object with a minimum level.",
            "oneOf": [
                key,
                {
                    "type": "object",
                    "properties": {
                        "capability": key,
                        "minimum": {
                            "type": "string",
                            "enum": ["native", "emulated", "degraded"],
                            "default": "degraded"
                        }
                    },
                    "required": ["capability"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

/// One requirement the adapter does not meet, as found by [`CapabilityReport::check`].
///
/// ```
/// use harness_core::capability::{CapabilityKey, CapabilityReport, Requirement};
///
/// let unmet = CapabilityReport::new()
///     .check(&[Requirement::new(CapabilityKey::ToolMcp)])
///     .unwrap_err();
/// assert_eq!(
///     unmet[0].to_string(),
///     "required capability `tool.mcp` needs at least `degraded` but the adapter reports \
///      `unsupported`: the adapter does not declare `tool.mcp`"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "A required capability the adapter does not provide at the required level."
)]
pub struct UnmetRequirement {
    /// The required capability.
    pub capability: CapabilityKey,
    /// The minimum level the caller asked for.
    pub required: SupportLevel,
    /// The level the adapter reports.
    pub actual: SupportLevel,
    /// The adapter's explanation, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
}

impl fmt::Display for UnmetRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "required capability `{}` needs at least `{}` but the adapter reports `{}`",
            self.capability, self.required, self.actual
        )?;
        if let Some(explanation) = &self.explanation {
            write!(f, ": {explanation}")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnmetRequirement {}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[test]
    fn all_keys_are_the_contract_keys_in_order() {
        let expected = [
            "stream.text",
            "stream.reasoning",
            "stream.usage",
            "invoke.non_streaming",
            "session.multi_turn",
            "session.cross_replica_resume",
            "session.clear",
            "thread.durable_commit",
            "thread.eviction_restore",
            "interrupt.form_input",
            "interrupt.tool_approval",
            "interrupt.multi_tool",
            "tool.mcp",
            "tool.builtin",
            "tool.caller_credentials",
            "tool.partial_availability",
            "tool.cancellation",
            "input.images",
            "input.documents",
            "skills",
            "subagents",
            "subagents.mixed_harness",
            "middleware.portable",
            "memory.semantic",
            "memory.episodic_reference",
            "memory.procedural",
            "memory.user_scope",
            "memory.shared_policy",
            "observability.metrics",
            "observability.tracing",
            "observability.trace_propagation",
            "observability.redaction",
            "runtime.cancel",
            "runtime.restart",
            "runtime.bounded_cleanup",
            "runtime.sandbox_isolation",
            "runtime.lease_fencing",
            "runtime.eviction_recovery",
        ];
        let actual: Vec<&str> = CapabilityKey::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(actual, expected);
        // Ord follows contract order.
        assert!(CapabilityKey::ALL.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn every_key_round_trips_through_str_and_json() {
        for key in CapabilityKey::ALL {
            assert_eq!(key.as_str().parse::<CapabilityKey>(), Ok(key));
            let json = serde_json::to_string(&key).unwrap();
            assert_eq!(json, format!("\"{key}\""));
            assert_eq!(serde_json::from_str::<CapabilityKey>(&json).unwrap(), key);
            assert_eq!(undeclared(key).level(), SupportLevel::Unsupported);
            assert!(
                undeclared(key)
                    .explanation()
                    .unwrap()
                    .contains(key.as_str())
            );
        }
    }

    #[rstest]
    #[case("stream.txt", CapabilityKey::StreamText)]
    #[case("Stream.Text", CapabilityKey::StreamText)]
    #[case("stream_text", CapabilityKey::StreamText)]
    #[case("tool.mpc", CapabilityKey::ToolMcp)]
    #[case("skill", CapabilityKey::Skills)]
    #[case("subagent", CapabilityKey::Subagents)]
    #[case("runtime.cancellation", CapabilityKey::RuntimeCancel)]
    #[case("memory.semantics", CapabilityKey::MemorySemantic)]
    #[case("interrupt.tool_approvals", CapabilityKey::InterruptToolApproval)]
    #[case("skills.markdown", CapabilityKey::Skills)]
    #[case("STREAM.USAGE", CapabilityKey::StreamUsage)]
    #[case("", CapabilityKey::Skills)]
    fn unknown_key_suggests_the_nearest(#[case] given: &str, #[case] nearest: CapabilityKey) {
        let err = given.parse::<CapabilityKey>().unwrap_err();
        assert_eq!(err.given, given);
        assert_eq!(err.suggestion, nearest);
        assert_eq!(
            err.to_string(),
            format!("unknown capability `{given}`; did you mean `{nearest}`?")
        );
    }

    #[test]
    fn unknown_key_error_is_bounded_for_huge_input() {
        let huge = "x".repeat(10_000);
        let err = huge.parse::<CapabilityKey>().unwrap_err();
        assert_eq!(err.given.chars().count(), MAX_ECHO);
        assert!(err.given.ends_with("..."));
    }

    #[test]
    fn deserialization_uses_the_same_error_and_rejects_wrong_types() {
        let err = serde_json::from_str::<CapabilityKey>("\"tool.mpc\"").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown capability `tool.mpc`; did you mean `tool.mcp`?"),
            "{err}"
        );
        let err = serde_json::from_str::<CapabilityKey>("42").unwrap_err();
        assert!(
            err.to_string()
                .contains("expected a v1 capability key such as `stream.text`"),
            "{err}"
        );
    }

    #[test]
    fn key_schema_is_an_enum_of_the_38_strings() {
        let schema = schemars::schema_for!(CapabilityKey).to_value();
        let values = schema["enum"].as_array().unwrap();
        assert_eq!(values.len(), 38);
        assert_eq!(values[0], "stream.text");
        assert_eq!(values[37], "runtime.eviction_recovery");
        assert_eq!(schema["type"], "string");
    }

    #[rstest]
    #[case(SupportLevel::Native, SupportLevel::Native, true)]
    #[case(SupportLevel::Native, SupportLevel::Emulated, true)]
    #[case(SupportLevel::Native, SupportLevel::Degraded, true)]
    #[case(SupportLevel::Emulated, SupportLevel::Native, false)]
    #[case(SupportLevel::Emulated, SupportLevel::Emulated, true)]
    #[case(SupportLevel::Emulated, SupportLevel::Degraded, true)]
    #[case(SupportLevel::Degraded, SupportLevel::Native, false)]
    #[case(SupportLevel::Degraded, SupportLevel::Emulated, false)]
    #[case(SupportLevel::Degraded, SupportLevel::Degraded, true)]
    #[case(SupportLevel::Unsupported, SupportLevel::Degraded, false)]
    #[case(SupportLevel::Unsupported, SupportLevel::Unsupported, false)]
    #[case(SupportLevel::Unavailable, SupportLevel::Degraded, false)]
    #[case(SupportLevel::Unavailable, SupportLevel::Unavailable, false)]
    #[case(SupportLevel::Degraded, SupportLevel::Unsupported, true)]
    fn satisfies_table(
        #[case] level: SupportLevel,
        #[case] minimum: SupportLevel,
        #[case] expected: bool,
    ) {
        assert_eq!(level.satisfies(minimum), expected);
    }

    #[test]
    fn support_level_wire_names() {
        for level in SupportLevel::ALL {
            let json = serde_json::to_string(&level).unwrap();
            assert_eq!(json, format!("\"{}\"", level.as_str()));
            assert_eq!(serde_json::from_str::<SupportLevel>(&json).unwrap(), level);
        }
        let err = serde_json::from_str::<SupportLevel>("\"full\"").unwrap_err();
        assert!(err.to_string().contains("unknown variant `full`"), "{err}");
    }

    #[rstest]
    #[case("a", true)]
    #[case("conformance:v1:scripted.2026-09-02_1", true)]
    #[case("", false)]
    #[case("has space", false)]
    #[case("slash/not", false)]
    #[case("é", false)]
    fn evidence_id_validation(#[case] input: &str, #[case] ok: bool) {
        assert_eq!(input.parse::<EvidenceId>().is_ok(), ok);
        assert_eq!(EvidenceId::try_from(input.to_owned()).is_ok(), ok);
    }

    #[test]
    fn evidence_id_length_bounds_and_error() {
        assert!("a".repeat(128).parse::<EvidenceId>().is_ok());
        let err = "a".repeat(129).parse::<EvidenceId>().unwrap_err();
        assert_eq!(err.kind, "evidence id");
        let err = serde_json::from_str::<EvidenceId>("\"a b\"").unwrap_err();
        assert!(
            err.to_string()
                .contains("invalid evidence id `a b`: expected 1 to 128 characters"),
            "{err}"
        );
    }

    #[test]
    fn capability_round_trips_and_omits_empty_parts() {
        let cap = Capability::emulated()
            .with_constraint("maxTools", 16)
            .with_explanation("approval is emulated by the adapter")
            .with_evidence("ev-1".parse().unwrap());
        let json = serde_json::to_value(&cap).unwrap();
        assert_eq!(
            json,
            json!({
                "level": "emulated",
                "constraints": {"maxTools": 16},
                "explanation": "approval is emulated by the adapter",
                "evidence": "ev-1"
            })
        );
        assert_eq!(serde_json::from_value::<Capability>(json).unwrap(), cap);
        let unsupported = Capability::unsupported("no MCP client");
        assert_eq!(
            serde_json::to_value(&unsupported).unwrap(),
            json!({"level": "unsupported", "explanation": "no MCP client"})
        );
    }

    #[rstest]
    #[case(json!({"level": "full"}), "unknown variant `full`")]
    #[case(json!({"explanation": "x"}), "missing field `level`")]
    #[case(json!({"level": "native", "constraints": [1]}), "invalid type: sequence, expected a map")]
    #[case(json!({"level": "native", "evidence": "a b"}), "invalid evidence id `a b`")]
    fn capability_rejects_bad_input(#[case] input: serde_json::Value, #[case] message: &str) {
        let err = serde_json::from_value::<Capability>(input).unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }

    /// A capability is part of a descriptor, which crosses a version boundary: a newer
    /// writer's field is kept and written back (see `crate::wire`).
    #[test]
    fn a_newer_writers_capability_field_is_kept() {
        let newer =
            json!({"level": "native", "evidence": "conformance:v1:x", "verifiedAt": "2026-12-01"});
        let cap: Capability = serde_json::from_value(newer.clone()).unwrap();
        assert_eq!(cap.level(), SupportLevel::Native);
        assert_eq!(
            cap.unknown_fields().get("verifiedAt"),
            Some(&json!("2026-12-01"))
        );
        assert_eq!(serde_json::to_value(&cap).unwrap(), newer);
        assert!(Capability::native().unknown_fields().is_empty());
    }

    #[test]
    fn report_get_level_and_declared() {
        let report = CapabilityReport::new()
            .with(CapabilityKey::StreamText, Capability::native())
            .with(
                CapabilityKey::ToolMcp,
                Capability::unavailable("no MCP server configured"),
            );
        assert_eq!(report.len(), 2);
        assert!(!report.is_empty());
        assert_eq!(
            report.level(CapabilityKey::StreamText),
            SupportLevel::Native
        );
        assert_eq!(
            report.level(CapabilityKey::ToolMcp),
            SupportLevel::Unavailable
        );
        assert_eq!(
            report.level(CapabilityKey::Skills),
            SupportLevel::Unsupported
        );
        assert!(report.declared(CapabilityKey::Skills).is_none());
        // The undeclared answer is the same static value each time: no allocation per call.
        assert!(std::ptr::eq(
            report.get(CapabilityKey::Skills),
            report.get(CapabilityKey::Skills)
        ));
        let keys: Vec<_> = report.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, [CapabilityKey::StreamText, CapabilityKey::ToolMcp]);
        let keys: Vec<_> = (&report).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, [CapabilityKey::StreamText, CapabilityKey::ToolMcp]);
    }

    #[test]
    fn declare_replaces_and_returns_the_previous() {
        let mut report = CapabilityReport::new();
        assert!(
            report
                .declare(CapabilityKey::Skills, Capability::emulated())
                .is_none()
        );
        let prev = report
            .declare(CapabilityKey::Skills, Capability::native())
            .unwrap();
        assert_eq!(prev.level(), SupportLevel::Emulated);
        assert_eq!(report.level(CapabilityKey::Skills), SupportLevel::Native);
    }

    #[test]
    fn report_serializes_in_contract_order_and_round_trips() {
        // Declared out of order; serialized in contract order.
        let report: CapabilityReport = [
            (CapabilityKey::RuntimeCancel, Capability::native()),
            (CapabilityKey::StreamText, Capability::native()),
            (
                CapabilityKey::StreamUsage,
                Capability::degraded("end of turn only"),
            ),
        ]
        .into_iter()
        .collect();
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(
            text,
            r#"{"stream.text":{"level":"native"},"stream.usage":{"level":"degraded","explanation":"end of turn only"},"runtime.cancel":{"level":"native"}}"#
        );
        assert_eq!(
            serde_json::from_str::<CapabilityReport>(&text).unwrap(),
            report
        );
    }

    #[rstest]
    #[case(
        r#"{"stream.txt": {"level": "native"}}"#,
        "unknown capability `stream.txt`; did you mean `stream.text`?"
    )]
    #[case(
        r#"{"skills": {"level": "native"}, "skills": {"level": "degraded"}}"#,
        "capability `skills` is declared twice"
    )]
    #[case(r#"{"skills": {"level": "sometimes"}}"#, "unknown variant `sometimes`")]
    #[case(r#"["skills"]"#, "expected an object mapping capability keys")]
    fn report_rejects_bad_input(#[case] input: &str, #[case] message: &str) {
        let err = serde_json::from_str::<CapabilityReport>(input).unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }

    #[test]
    fn report_schema_lists_every_key_and_is_closed() {
        let schema = schemars::schema_for!(CapabilityReport).to_value();
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"].as_object().unwrap().len(), 38);
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&json!({"stream.text": {"level": "native"}})));
        assert!(!validator.is_valid(&json!({"stream.txt": {"level": "native"}})));
        // Keys are closed; a capability's own fields are open to a newer writer.
        assert!(validator.is_valid(&json!({"stream.text": {"level": "native", "x": 1}})));
    }

    #[rstest]
    #[case(json!("stream.text"), CapabilityKey::StreamText, SupportLevel::Degraded)]
    #[case(json!({"capability": "tool.mcp"}), CapabilityKey::ToolMcp, SupportLevel::Degraded)]
    #[case(json!({"capability": "tool.mcp", "minimum": "native"}), CapabilityKey::ToolMcp, SupportLevel::Native)]
    #[case(json!({"minimum": "emulated", "capability": "skills"}), CapabilityKey::Skills, SupportLevel::Emulated)]
    fn requirement_wire_forms(
        #[case] input: serde_json::Value,
        #[case] key: CapabilityKey,
        #[case] minimum: SupportLevel,
    ) {
        let req: Requirement = serde_json::from_value(input).unwrap();
        assert_eq!(req.capability(), key);
        assert_eq!(req.minimum(), minimum);
        let out = serde_json::to_value(req).unwrap();
        assert_eq!(
            out,
            json!({"capability": key.as_str(), "minimum": minimum.as_str()})
        );
        assert_eq!(serde_json::from_value::<Requirement>(out).unwrap(), req);
    }

    #[rstest]
    #[case(json!("stream.txt"), "unknown capability `stream.txt`; did you mean `stream.text`?")]
    #[case(
        json!({"capability": "tool.mpc", "minimum": "native"}),
        "unknown capability `tool.mpc`; did you mean `tool.mcp`?"
    )]
    #[case(json!({"capability": "tool.mcp", "minimun": "native"}), "unknown field `minimun`, expected `capability` or `minimum`")]
    #[case(json!({"minimum": "native"}), "missing field `capability`")]
    #[case(json!({"capability": "tool.mcp", "minimum": "best"}), "unknown variant `best`")]
    #[case(
        json!({"capability": "tool.mcp", "minimum": "unsupported"}),
        "requirement on `tool.mcp` has minimum `unsupported`, which nothing can satisfy"
    )]
    #[case(json!(7), "expected a capability key such as \"stream.text\" or an object")]
    fn requirement_errors_name_the_problem(
        #[case] input: serde_json::Value,
        #[case] message: &str,
    ) {
        let err = serde_json::from_value::<Requirement>(input).unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }

    #[test]
    fn requirement_errors_name_the_bad_key_inside_a_list() {
        let err =
            serde_json::from_str::<Vec<Requirement>>(r#"["stream.text", "subagent"]"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown capability `subagent`; did you mean `subagents`?"),
            "{err}"
        );
    }

    #[test]
    fn requirement_constructors() {
        assert_eq!(
            Requirement::at_least(CapabilityKey::Skills, SupportLevel::Emulated),
            Ok(Requirement::emulated(CapabilityKey::Skills))
        );
        let err =
            Requirement::at_least(CapabilityKey::Skills, SupportLevel::Unavailable).unwrap_err();
        assert_eq!(err.minimum, SupportLevel::Unavailable);
        assert_eq!(
            Requirement::from(CapabilityKey::Skills).minimum(),
            SupportLevel::Degraded
        );
        assert!(Requirement::native(CapabilityKey::Skills).is_met_by(SupportLevel::Native));
        assert!(!Requirement::native(CapabilityKey::Skills).is_met_by(SupportLevel::Emulated));
    }

    #[test]
    fn requirement_schema_accepts_both_forms() {
        let schema = schemars::schema_for!(Requirement).to_value();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&json!("stream.text")));
        assert!(validator.is_valid(&json!({"capability": "stream.text"})));
        assert!(validator.is_valid(&json!({"capability": "stream.text", "minimum": "native"})));
        assert!(
            !validator.is_valid(&json!({"capability": "stream.text", "minimum": "unsupported"}))
        );
        assert!(!validator.is_valid(&json!("stream.txt")));
        assert!(!validator.is_valid(&json!({"capability": "stream.text", "x": 1})));
    }

    #[test]
    fn check_lists_every_unmet_requirement_with_explanations() {
        let report = CapabilityReport::new()
            .with(CapabilityKey::StreamText, Capability::native())
            .with(
                CapabilityKey::StreamUsage,
                Capability::degraded("end of turn only"),
            )
            .with(
                CapabilityKey::ToolMcp,
                Capability::unavailable("no MCP server configured"),
            );
        assert_eq!(
            report.check(&[
                Requirement::native(CapabilityKey::StreamText),
                Requirement::new(CapabilityKey::StreamUsage),
            ]),
            Ok(())
        );
        let unmet = report
            .check(&[
                Requirement::new(CapabilityKey::StreamText),
                Requirement::emulated(CapabilityKey::StreamUsage),
                Requirement::new(CapabilityKey::ToolMcp),
                Requirement::new(CapabilityKey::Skills),
                Requirement::new(CapabilityKey::Skills),
            ])
            .unwrap_err();
        assert_eq!(
            unmet,
            vec![
                UnmetRequirement {
                    capability: CapabilityKey::StreamUsage,
                    required: SupportLevel::Emulated,
                    actual: SupportLevel::Degraded,
                    explanation: Some("end of turn only".into()),
                },
                UnmetRequirement {
                    capability: CapabilityKey::ToolMcp,
                    required: SupportLevel::Degraded,
                    actual: SupportLevel::Unavailable,
                    explanation: Some("no MCP server configured".into()),
                },
                UnmetRequirement {
                    capability: CapabilityKey::Skills,
                    required: SupportLevel::Degraded,
                    actual: SupportLevel::Unsupported,
                    explanation: Some("the adapter does not declare `skills`".into()),
                },
            ]
        );
        assert_eq!(
            unmet[1].to_string(),
            "required capability `tool.mcp` needs at least `degraded` but the adapter reports \
             `unavailable`: no MCP server configured"
        );
        let wire = serde_json::to_value(&unmet[0]).unwrap();
        assert_eq!(
            wire,
            json!({"capability": "stream.usage", "required": "emulated", "actual": "degraded",
                   "explanation": "end of turn only"})
        );
    }

    #[test]
    fn check_of_nothing_is_ok() {
        assert_eq!(CapabilityReport::new().check(&[]), Ok(()));
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics_and_suggestion_is_valid(s in ".{0,100}") {
            match s.parse::<CapabilityKey>() {
                Ok(key) => proptest::prop_assert_eq!(key.as_str(), s.as_str()),
                Err(err) => proptest::prop_assert!(CapabilityKey::ALL.contains(&err.suggestion)),
            }
        }
    }
}

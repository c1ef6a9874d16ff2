// The rules of adapter contract v1 that the derives check at compile time.
//
// `harness-macros` cannot depend on `harness-core` (the core crate's own tests may use these
// derives), so the capability keys, support levels, trust boundaries, dependency kinds and the
// identifier and version rules are duplicated here. The workspace test `tests/derive.rs`
// includes this file and asserts that every list and rule agrees with `harness-core`, so drift
// fails CI. The file is self-contained for that reason: no `use`, no `crate::` paths.
//
// Generated code also re-checks the identifiers with `harness-core`'s own `const fn`s, and
// building the descriptor validates everything again, so a drift can never produce an invalid
// descriptor, only a worse error message.

/// The v1 capability keys in the contract's order: (wire name, `CapabilityKey` variant).
pub(crate) const CAPABILITY_KEYS: [(&str, &str); 38] = [
    ("stream.text", "StreamText"),
    ("stream.reasoning", "StreamReasoning"),
    ("stream.usage", "StreamUsage"),
    ("invoke.non_streaming", "InvokeNonStreaming"),
    ("session.multi_turn", "SessionMultiTurn"),
    ("session.cross_replica_resume", "SessionCrossReplicaResume"),
    ("session.clear", "SessionClear"),
    ("thread.durable_commit", "ThreadDurableCommit"),
    ("thread.eviction_restore", "ThreadEvictionRestore"),
    ("interrupt.form_input", "InterruptFormInput"),
    ("interrupt.tool_approval", "InterruptToolApproval"),
    ("interrupt.multi_tool", "InterruptMultiTool"),
    ("tool.mcp", "ToolMcp"),
    ("tool.builtin", "ToolBuiltin"),
    ("tool.caller_credentials", "ToolCallerCredentials"),
    ("tool.partial_availability", "ToolPartialAvailability"),
    ("tool.cancellation", "ToolCancellation"),
    ("input.images", "InputImages"),
    ("input.documents", "InputDocuments"),
    ("skills", "Skills"),
    ("subagents", "Subagents"),
    ("subagents.mixed_harness", "SubagentsMixedHarness"),
    ("middleware.portable", "MiddlewarePortable"),
    ("memory.semantic", "MemorySemantic"),
    ("memory.episodic_reference", "MemoryEpisodicReference"),
    ("memory.procedural", "MemoryProcedural"),
    ("memory.user_scope", "MemoryUserScope"),
    ("memory.shared_policy", "MemorySharedPolicy"),
    ("observability.metrics", "ObservabilityMetrics"),
    ("observability.tracing", "ObservabilityTracing"),
    (
        "observability.trace_propagation",
        "ObservabilityTracePropagation",
    ),
    ("observability.redaction", "ObservabilityRedaction"),
    ("runtime.cancel", "RuntimeCancel"),
    ("runtime.restart", "RuntimeRestart"),
    ("runtime.bounded_cleanup", "RuntimeBoundedCleanup"),
    ("runtime.sandbox_isolation", "RuntimeSandboxIsolation"),
    ("runtime.lease_fencing", "RuntimeLeaseFencing"),
    ("runtime.eviction_recovery", "RuntimeEvictionRecovery"),
];

/// The support levels, best first: (wire name, `SupportLevel` variant).
pub(crate) const SUPPORT_LEVELS: [(&str, &str); 5] = [
    ("native", "Native"),
    ("emulated", "Emulated"),
    ("degraded", "Degraded"),
    ("unsupported", "Unsupported"),
    ("unavailable", "Unavailable"),
];

/// The levels whose declaration must explain itself (how it is reduced, or why it is missing).
pub(crate) const LEVELS_NEEDING_EXPLANATION: [&str; 3] = ["degraded", "unsupported", "unavailable"];

/// The trust boundaries: (wire name, `TrustBoundary` variant).
pub(crate) const TRUST_BOUNDARIES: [(&str, &str); 4] = [
    ("host_process", "HostProcess"),
    ("local_subprocess", "LocalSubprocess"),
    ("sandbox", "Sandbox"),
    ("remote_provider", "RemoteProvider"),
];

/// The execution modes and the trust boundaries each permits, the default first.
pub(crate) const EXECUTION_MODES: [(&str, &[&str]); 3] = [
    ("sandbox_pod", &["sandbox"]),
    ("provider_managed", &["remote_provider"]),
    ("in_process", &["host_process", "local_subprocess"]),
];

/// The dependency kinds: (wire name, `DependencyKind` variant).
pub(crate) const DEPENDENCY_KINDS: [(&str, &str); 5] = [
    ("binary", "Binary"),
    ("npm_package", "NpmPackage"),
    ("python_package", "PythonPackage"),
    ("crate", "Crate"),
    ("service", "Service"),
];

/// Fields of a Kubernetes Pod that a `sandbox_pod` execution mode may not supply, compared
/// lower-case without `_` and `-`.
pub(crate) const POD_FIELDS: [&str; 18] = [
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

/// Whether `key` names a Pod field (`image`, `service_account`, `runtimeClassName`, ...).
pub(crate) fn is_pod_field(key: &str) -> bool {
    let normal: String = key
        .chars()
        .filter(|c| !matches!(c, '_' | '-'))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    POD_FIELDS.contains(&normal.as_str())
}

/// `^[a-z][a-z0-9_]{1,63}$`, as `AdapterId::is_valid`.
pub(crate) fn is_adapter_id(s: &str) -> bool {
    let b = s.as_bytes();
    (2..=64).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// `^[a-z][a-z0-9._-]{1,63}$`, as `OperatorProfileId::is_valid`.
pub(crate) fn is_profile_id(s: &str) -> bool {
    let b = s.as_bytes();
    (2..=64).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[1..].iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'.')
        })
}

/// `^[A-Za-z0-9._:-]{1,128}$`, as `EvidenceId`.
pub(crate) fn is_evidence_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// 1 to 128 characters from `[A-Za-z0-9._:+-]`, as the descriptor's
/// `certificationEvidenceVersion`.
pub(crate) fn is_certification_evidence_version(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'+' | b'-'))
}

/// 1 to 128 characters, not blank, without control characters, as the descriptor's `name`.
pub(crate) fn is_display_name(s: &str) -> bool {
    (1..=128).contains(&s.chars().count())
        && !s.trim().is_empty()
        && !s.chars().any(char::is_control)
}

/// What is wrong with a dependency's name or version requirement, as `Dependency`'s check.
pub(crate) fn dependency_problem(name: &str, version: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 214 {
        Some("the name must be 1 to 214 characters")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("the name must not contain whitespace or control characters")
    } else if version.trim().is_empty() || version.len() > 128 {
        Some("the version requirement must be 1 to 128 characters, such as `>=1.2` or `*`")
    } else if version.chars().any(char::is_control) {
        Some("the version requirement must not contain control characters")
    } else {
        None
    }
}

/// Checks a `MAJOR.MINOR.PATCH[-pre][+build]` implementation version, as the descriptor does.
pub(crate) fn implementation_version_problem(s: &str) -> Option<&'static str> {
    fn is_ident_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-'
    }
    if s.len() > 128 {
        return Some("longer than 128 characters");
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
        return Some("expected exactly three numeric components");
    }
    for part in parts {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Some("MAJOR, MINOR and PATCH must be non-negative integers");
        }
        if part.len() > 1 && part.starts_with('0') {
            return Some("numeric components must not have leading zeros");
        }
    }
    for ident in pre.into_iter().flat_map(|pre| pre.split('.')) {
        if ident.is_empty() || !ident.chars().all(is_ident_char) {
            return Some("pre-release identifiers must be non-empty [0-9A-Za-z-]");
        }
        if ident.len() > 1 && ident.starts_with('0') && ident.bytes().all(|b| b.is_ascii_digit()) {
            return Some("numeric pre-release identifiers must not have leading zeros");
        }
    }
    for ident in build.into_iter().flat_map(|build| build.split('.')) {
        if ident.is_empty() || !ident.chars().all(is_ident_char) {
            return Some("build identifiers must be non-empty [0-9A-Za-z-]");
        }
    }
    None
}

/// Levenshtein distance between two short strings, by characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
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

/// The part of a capability key before the first dot (the whole key for `skills`).
fn namespace(key: &str) -> &str {
    key.split_once('.').map_or(key, |(ns, _)| ns)
}

/// The capability key nearest to `s`, as `CapabilityKey::nearest`: compared case-insensitively
/// on at most 80 characters; when `s` starts with a known namespace only that namespace's keys
/// are candidates; ties go to the earlier key in contract order.
pub(crate) fn nearest_capability(s: &str) -> &'static str {
    let probe: String = s.chars().take(80).collect::<String>().to_lowercase();
    let ns = probe
        .split_once('.')
        .map(|(ns, _)| ns)
        .filter(|ns| CAPABILITY_KEYS.iter().any(|(k, _)| namespace(k) == *ns));
    let mut best = (usize::MAX, CAPABILITY_KEYS[0].0);
    for (key, _) in CAPABILITY_KEYS {
        if ns.is_some_and(|ns| namespace(key) != ns) {
            continue;
        }
        let d = edit_distance(&probe, key);
        if d < best.0 {
            best = (d, key);
        }
    }
    best.1
}

/// The candidate nearest to `s`, if it is close enough to be a plausible typo (at most a third
/// of the longer string's characters differ, and at least one may).
pub(crate) fn did_you_mean<'a>(
    s: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let probe = s.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&probe, c), c))
        .filter(|(d, c)| *d <= (probe.chars().count().max(c.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

//! Request equivalence: the canonical form of a request, its [`Fingerprint`], and the
//! [`Equivalence`] policy that computes it.

use std::fmt;

use harness_core::service::ExecutionRequest;
use serde_json::{Map, Value};

/// The version of the canonical form, written into it as `fingerprintVersion`.
pub const FINGERPRINT_VERSION: u64 = 1;

/// FNV-1a 128 offset basis.
const FNV_OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
/// FNV-1a 128 prime: 2^88 + 2^8 + 0x3b.
const FNV_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

/// The 128-bit fingerprint of a request's [canonical form](canonical_form).
///
/// It is the 128-bit FNV-1a hash (offset basis
/// `0x6c62272e07bb014262b821756295c58d`, prime `2^88 + 2^8 + 0x3b`) of the canonical form's
/// bytes. It is stable across processes, platforms and versions of this crate (changing the
/// canonical form is a breaking change and bumps [`FINGERPRINT_VERSION`]), so a durable store
/// may keep it. It is **not** a security boundary: FNV is not collision resistant, but keys are
/// scoped by caller, so a caller able to forge a collision could only confuse its own records.
///
/// ```
/// use harness_core::service::ExecutionRequest;
/// use harness_layers::idempotency::Fingerprint;
///
/// let a = ExecutionRequest::new("fix the test").with_options(serde_json::json!({"x": 1, "y": 2}));
/// let b = ExecutionRequest::new("fix the test").with_options(serde_json::json!({"y": 2, "x": 1}));
/// assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b));
/// assert_ne!(Fingerprint::of(&a), Fingerprint::of(&ExecutionRequest::new("fix the build")));
/// // FNV-1a 128 of the empty input is its offset basis.
/// assert_eq!(Fingerprint::of_bytes(b"").to_string(), "6c62272e07bb014262b821756295c58d");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint(u128);

impl Fingerprint {
    /// The fingerprint of `request`'s canonical form.
    #[must_use]
    pub fn of(request: &ExecutionRequest) -> Self {
        Self::of_bytes(canonical_form(request).as_bytes())
    }

    /// The FNV-1a 128 hash of `bytes`: for custom [`Equivalence`] policies.
    #[must_use]
    pub fn of_bytes(bytes: &[u8]) -> Self {
        let mut hash = FNV_OFFSET;
        for &byte in bytes {
            hash ^= u128::from(byte);
            hash = hash.wrapping_mul(FNV_PRIME);
        }
        Self(hash)
    }

    /// A fingerprint from its numeric value (as a durable store would keep it).
    #[must_use]
    pub const fn from_u128(value: u128) -> Self {
        Self(value)
    }

    /// The numeric value.
    #[must_use]
    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// Decides which requests are equivalent: two requests under one key are equivalent when their
/// fingerprints are equal.
///
/// Implemented by [`CanonicalFingerprint`] (the default) and by every closure
/// `Fn(&ExecutionRequest) -> Fingerprint`. The trait is object safe. A policy is cloned with
/// the service; keep shared state in an `Arc`.
///
/// ```
/// use harness_core::service::ExecutionRequest;
/// use harness_layers::idempotency::{Equivalence, Fingerprint};
///
/// // Only the message counts.
/// let by_message = |r: &ExecutionRequest| Fingerprint::of_bytes(r.message.as_bytes());
/// let a = ExecutionRequest::new("hi").with_options(serde_json::json!({"a": 1}));
/// assert_eq!(by_message.fingerprint(&a), by_message.fingerprint(&ExecutionRequest::new("hi")));
/// ```
pub trait Equivalence {
    /// The fingerprint of `request`.
    fn fingerprint(&self, request: &ExecutionRequest) -> Fingerprint;
}

impl<F> Equivalence for F
where
    F: Fn(&ExecutionRequest) -> Fingerprint,
{
    fn fingerprint(&self, request: &ExecutionRequest) -> Fingerprint {
        self(request)
    }
}

/// The default [`Equivalence`]: [`Fingerprint::of`], the hash of the documented
/// [canonical form](canonical_form).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CanonicalFingerprint;

impl Equivalence for CanonicalFingerprint {
    fn fingerprint(&self, request: &ExecutionRequest) -> Fingerprint {
        Fingerprint::of(request)
    }
}

/// The canonical form of `request`: what its [`Fingerprint`] hashes.
///
/// Two requests are equivalent when their canonical forms are byte for byte equal. The form is
/// one line of JSON with these members (and nothing else):
///
/// | member                 | from                         | written as                              |
/// |------------------------|------------------------------|-----------------------------------------|
/// | `clientContext`        | [`client_context`]           | canonical JSON object                   |
/// | `conversationId`       | [`conversation_id`]          | string, or `null`                       |
/// | `files`                | [`files`]                    | array, in the request's order           |
/// | `fingerprintVersion`   | [`FINGERPRINT_VERSION`]      | integer                                 |
/// | `message`              | [`message`]                  | string                                  |
/// | `options`              | [`options`]                  | canonical JSON (`null` when absent)     |
/// | `requiredCapabilities` | [`required_capabilities`]    | a **set**: sorted, duplicates removed   |
///
/// Canonical JSON: object members sorted by the UTF-8 bytes of their names, no whitespace
/// anywhere, strings escaped minimally (`"` and `\` with a backslash; `\b \f \n \r \t`; other
/// control characters as `\u00xx` with lower-case hex; everything else, non-ASCII included, as
/// raw UTF-8), numbers exactly as `serde_json` writes them. So the order of object members
/// never matters, and `1` and `1.0` are different values (an adapter may see them differently).
///
/// Ordering decisions:
/// - **Required capabilities are a set.** Preflight checks each requirement on its own, so
///   their order and repetition cannot change what runs. Each requirement is written in its
///   object form (`{"capability":"stream.text","minimum":"degraded"}`), so the bare-key
///   spelling `"stream.text"` and the object with `minimum` omitted are the same requirement.
/// - **Files are a list.** The adapter receives them in this order (the first file is often
///   "the" file), so reordering them is a different request.
///
/// Left out, on purpose:
/// - **the idempotency key**: it names the record; it is not part of what is asked;
/// - **`trace_context`**: a retry is usually a new trace (or a new span of the same trace), and
///   must still find its original execution;
/// - **`deadline`**: a retry computes its deadline afresh from its own clock, so an honest
///   retry almost never carries the same one;
/// - **`delivery`**: whether the caller waits for the outcome or follows the stream is how
///   it takes the answer, not what it asks (a retry that waits finds the execution a
///   streamed request started);
/// - **`extensions`**: process-local policies added by layers (and the caller's identity, which
///   scopes the key instead), never part of the request's identity.
///
/// [`client_context`]: ExecutionRequest::client_context
/// [`conversation_id`]: ExecutionRequest::conversation_id
/// [`files`]: ExecutionRequest::files
/// [`message`]: ExecutionRequest::message
/// [`options`]: ExecutionRequest::options
/// [`required_capabilities`]: ExecutionRequest::required_capabilities
///
/// ```
/// use harness_core::capability::{CapabilityKey, Requirement};
/// use harness_core::service::ExecutionRequest;
/// use harness_layers::idempotency::canonical_form;
///
/// let request = ExecutionRequest::new("hi")
///     .with_options(serde_json::json!({"b": [1, 2], "a": null}))
///     .require(Requirement::native(CapabilityKey::StreamText));
/// assert_eq!(
///     canonical_form(&request),
///     r#"{"clientContext":{},"conversationId":null,"files":[],"fingerprintVersion":1,"message":"hi","options":{"a":null,"b":[1,2]},"requiredCapabilities":[{"capability":"stream.text","minimum":"native"}]}"#,
/// );
/// ```
#[must_use]
pub fn canonical_form(request: &ExecutionRequest) -> String {
    let mut out = String::with_capacity(128 + request.message.len());
    out.push_str("{\"clientContext\":");
    write_object(&mut out, &request.client_context);
    out.push_str(",\"conversationId\":");
    match &request.conversation_id {
        Some(id) => write_string(&mut out, id.as_str()),
        None => out.push_str("null"),
    }
    out.push_str(",\"files\":[");
    for (i, file) in request.files.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_serialized(&mut out, file);
    }
    out.push_str("],\"fingerprintVersion\":");
    out.push_str(&FINGERPRINT_VERSION.to_string());
    out.push_str(",\"message\":");
    write_string(&mut out, &request.message);
    out.push_str(",\"options\":");
    write_value(&mut out, &request.options);
    out.push_str(",\"requiredCapabilities\":[");
    let mut requirements: Vec<String> = request
        .required_capabilities
        .iter()
        .map(|requirement| {
            let mut s = String::new();
            write_serialized(&mut s, requirement);
            s
        })
        .collect();
    requirements.sort_unstable();
    requirements.dedup();
    out.push_str(&requirements.join(","));
    out.push_str("]}");
    out
}

/// Writes a serializable value in canonical JSON. The types written here (files,
/// requirements) are plain data whose serialization cannot fail; should it ever, the value is
/// written as `null` and the failure logged.
fn write_serialized<T: serde::Serialize>(out: &mut String, value: &T) {
    match serde_json::to_value(value) {
        Ok(value) => write_value(out, &value),
        Err(error) => {
            tracing::warn!(%error, "a request field could not be serialized for its fingerprint");
            out.push_str("null");
        }
    }
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>) {
    // Sorted here rather than relying on the map's own order: with serde_json's
    // `preserve_order` feature (which any crate in a build may turn on) maps keep insertion
    // order.
    let mut members: Vec<(&String, &Value)> = map.iter().collect();
    members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (i, (name, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, name);
        out.push(':');
        write_value(out, value);
    }
    out.push('}');
}

fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let b = u32::from(c) as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

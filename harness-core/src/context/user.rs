//! [`SafeUserContext`]: the principal's safe projection, and [`UserProjection`], the
//! operator's rule for making it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::error::{ErrorCategory, HarnessError};
use crate::id::CallerId;

/// Domain separation of the user id's hash: another use of the same key gives other bytes.
const DOMAIN: &[u8] = b"harness.user-id.v1\0";
/// The most attributes that pass for one principal.
const MAX_ATTRIBUTES: usize = 16;
/// The longest attribute value, in bytes.
const MAX_ATTRIBUTE_BYTES: usize = 256;

/// The secret key of the opaque user ids (at least 16 bytes), from the operator's
/// configuration (`[users] idKeyEnv` in `harness.toml`). Never printed.
#[derive(Clone)]
pub struct UserIdKey(Vec<u8>);

impl UserIdKey {
    /// A key of `secret`.
    ///
    /// # Errors
    /// `configuration` when it is shorter than 16 bytes.
    pub fn new(secret: impl AsRef<[u8]>) -> Result<Self, HarnessError> {
        let secret = secret.as_ref();
        if secret.len() < 16 {
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "the user id key is {} bytes: it needs at least 16 (a random string of \
                     32 characters, say)",
                    secret.len()
                ),
            ));
        }
        Ok(Self(secret.to_vec()))
    }
}

impl fmt::Debug for UserIdKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UserIdKey(<redacted>)")
    }
}

/// How the engine projects a request's principal for its adapter
/// ([`AdapterServiceBuilder::users`](crate::service::AdapterServiceBuilder::users)): the key
/// of the opaque ids, and the attributes the operator lets pass for each principal.
///
/// Decisions where the spec is silent:
///
/// - the id is `u-` and 32 hex digits: the first 128 bits of HMAC-SHA-256 of the principal
///   under the operator's [`UserIdKey`], stable across replicas and restarts that share the
///   key, and not computable from a principal's name without it. Without a key (the default)
///   it is the plain SHA-256 of the principal: still stable and still no credential, but
///   anyone who knows a principal's name can compute it, so configure a key where the ids
///   leave the deployment;
/// - attributes are what the operator wrote for the principal, never anything the request
///   or its credential carries (a principal here is a name; raw claims never reach the
///   engine); at most 16, names of letters, digits, `_`, `-` or `.`, values up to 256 bytes
///   without control characters;
/// - an execution without a principal (in-process use that names no
///   [`CallerId`]) has no user: [`TurnInput::user`](crate::adapter::TurnInput::user) is
///   `None`.
///
/// ```
/// use harness_core::context::{UserIdKey, UserProjection};
/// use harness_core::id::CallerId;
///
/// let alice: CallerId = "alice".parse()?;
/// let projection = UserProjection::keyed(UserIdKey::new("a-secret-of-32-characters-long!!")?)
///     .with_attributes(alice.clone(), [("team".to_owned(), "payments".to_owned())].into())?;
/// let user = projection.project(&alice);
/// assert!(user.id().starts_with("u-") && user.id().len() == 34);
/// assert!(!user.id().contains("alice"));
/// assert_eq!(user.attribute("team"), Some("payments"));
/// // Stable: the same principal, the same id; another principal, another id.
/// assert_eq!(projection.project(&alice).id(), user.id());
/// assert_ne!(projection.project(&"bob".parse()?).id(), user.id());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct UserProjection {
    key: Option<UserIdKey>,
    attributes: HashMap<CallerId, BTreeMap<String, String>>,
}

fn attribute_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

impl UserProjection {
    /// Unkeyed ids (see the type's docs), no attributes.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Ids keyed with `key`, no attributes.
    #[must_use]
    pub fn keyed(key: UserIdKey) -> Self {
        Self {
            key: Some(key),
            attributes: HashMap::new(),
        }
    }

    /// Lets `attributes` pass for `caller` (replacing what was set for it before).
    ///
    /// # Errors
    /// `configuration` when there are more than 16, a name is not letters, digits, `_`, `-`
    /// or `.` (1 to 64), or a value is over 256 bytes or holds a control character.
    pub fn with_attributes(
        mut self,
        caller: CallerId,
        attributes: BTreeMap<String, String>,
    ) -> Result<Self, HarnessError> {
        let invalid = |message: String| {
            HarnessError::new(
                ErrorCategory::Configuration,
                format!("the attributes of principal `{caller}`: {message}"),
            )
        };
        if attributes.len() > MAX_ATTRIBUTES {
            return Err(invalid(format!(
                "{} given, at most {MAX_ATTRIBUTES} pass",
                attributes.len()
            )));
        }
        for (name, value) in &attributes {
            if !attribute_name_ok(name) {
                return Err(invalid(format!(
                    "{name:?} is not an attribute name (1 to 64 letters, digits, `_`, `-` or `.`)"
                )));
            }
            if value.len() > MAX_ATTRIBUTE_BYTES || value.chars().any(char::is_control) {
                return Err(invalid(format!(
                    "the value of `{name}` must be at most {MAX_ATTRIBUTE_BYTES} bytes without \
                     control characters"
                )));
            }
        }
        self.attributes.insert(caller, attributes);
        Ok(self)
    }

    /// The safe projection of `caller`.
    #[must_use]
    pub fn project(&self, caller: &CallerId) -> SafeUserContext {
        let digest: [u8; 32] = match &self.key {
            Some(key) => {
                // A key of any length is accepted by HMAC; `UserIdKey::new` bounds it below.
                let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key.0)
                    .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()));
                mac.update(DOMAIN);
                mac.update(caller.as_str().as_bytes());
                mac.finalize().into_bytes().into()
            }
            None => {
                let mut hash = Sha256::new();
                hash.update(DOMAIN);
                hash.update(caller.as_str().as_bytes());
                hash.finalize().into()
            }
        };
        let mut id = String::with_capacity(34);
        id.push_str("u-");
        for b in &digest[..16] {
            use std::fmt::Write;
            let _ = write!(id, "{b:02x}");
        }
        SafeUserContext {
            id,
            attributes: self.attributes.get(caller).cloned().unwrap_or_default(),
        }
    }
}

/// The principal of an execution as its adapter may see it
/// ([`TurnInput::user`](crate::adapter::TurnInput::user)): an opaque, stable id and the
/// attributes the operator lets pass, so the adapter can attribute work (a provider's
/// `user` field, a per-user quota) without ever seeing a token, a claim or the principal's
/// name. Made by the engine with its [`UserProjection`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SafeUserContext {
    id: String,
    attributes: BTreeMap<String, String>,
}

impl SafeUserContext {
    /// A user of `id` with no attributes (for adapters' tests; the service projects its
    /// own).
    #[must_use]
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            attributes: BTreeMap::new(),
        }
    }

    /// The same user, with `attributes` (for adapters' tests and runtime hosts that relay
    /// the engine's projection).
    #[must_use]
    pub fn with_attributes(mut self, attributes: BTreeMap<String, String>) -> Self {
        self.attributes = attributes;
        self
    }

    /// The opaque, stable id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The attributes the operator lets pass.
    #[must_use]
    pub fn attributes(&self) -> &BTreeMap<String, String> {
        &self.attributes
    }

    /// One attribute.
    #[must_use]
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_depends_on_the_key_and_hides_the_principal() {
        let alice: CallerId = "alice".parse().unwrap();
        let a = UserProjection::keyed(UserIdKey::new("0123456789abcdef").unwrap()).project(&alice);
        let b = UserProjection::keyed(UserIdKey::new("0123456789abcdeF").unwrap()).project(&alice);
        let plain = UserProjection::new().project(&alice);
        assert_ne!(a.id(), b.id());
        assert_ne!(a.id(), plain.id());
        assert_eq!(plain.id(), UserProjection::new().project(&alice).id());
        assert!(a.id()[2..].chars().all(|c| c.is_ascii_hexdigit()));
        assert!(UserIdKey::new("short").is_err());
        assert_eq!(
            format!("{:?}", UserIdKey::new("0123456789abcdef").unwrap()),
            "UserIdKey(<redacted>)"
        );
    }

    #[test]
    fn attributes_are_bounded_and_per_principal() {
        let alice: CallerId = "alice".parse().unwrap();
        let p = UserProjection::new();
        assert!(
            p.clone()
                .with_attributes(alice.clone(), [("bad name".into(), "x".into())].into())
                .is_err()
        );
        assert!(
            p.clone()
                .with_attributes(alice.clone(), [("a".into(), "x\u{0}".into())].into())
                .is_err()
        );
        let many = (0..17).map(|i| (format!("a{i}"), String::new())).collect();
        assert!(p.clone().with_attributes(alice.clone(), many).is_err());
        let p = p
            .with_attributes(alice.clone(), [("team".into(), "x".into())].into())
            .unwrap();
        assert_eq!(p.project(&alice).attribute("team"), Some("x"));
        assert!(p.project(&"bob".parse().unwrap()).attributes().is_empty());
    }
}

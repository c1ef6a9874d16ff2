//! Who is calling: every request but health and metrics names a principal, and each
//! execution belongs to the principal that started it.
//!
//! [`BearerTokens`] is the built-in scheme: `Authorization: Bearer <token>`, the tokens known
//! only as SHA-256 digests (a configuration file or a leaked memory dump holds no usable
//! token). An application with its own scheme implements [`Authenticate`].

use std::collections::HashMap;
use std::fmt;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use futures_util::future::BoxFuture;
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::id::CallerId;
use sha2::{Digest, Sha256};

/// Decides who sent a request, from its headers.
///
/// ```
/// use axum::http::HeaderMap;
/// use harness_core::id::CallerId;
/// use harness_server::auth::Authenticate;
///
/// /// Trusts a header a gateway in front sets (and strips from what clients send).
/// struct Gateway;
/// impl Authenticate for Gateway {
///     fn authenticate<'a>(&'a self, headers: &'a HeaderMap)
///         -> futures_util::future::BoxFuture<'a, Result<CallerId, harness_core::error::HarnessError>> {
///         let caller = headers.get("x-authenticated-user")
///             .and_then(|v| v.to_str().ok())
///             .and_then(|v| v.parse::<CallerId>().ok())
///             .ok_or_else(harness_server::auth::unauthenticated);
///         Box::pin(async move { caller })
///     }
/// }
/// ```
pub trait Authenticate: Send + Sync + 'static {
    /// The principal of a request with `headers`.
    ///
    /// # Errors
    /// An `authentication` error (answered `401`) when the request names none that is valid.
    fn authenticate<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<CallerId, HarnessError>>;
}

/// The error of a request without a valid credential (`401`, `CREDENTIAL_INVALID`). Says
/// nothing about which tokens exist.
#[must_use]
pub fn unauthenticated() -> HarnessError {
    HarnessError::new(
        ErrorCategory::Authentication,
        "this request needs a valid credential: send `Authorization: Bearer <token>`",
    )
    .with_code(ErrorCode::CREDENTIAL_INVALID)
}

/// Bearer tokens, each naming a principal, kept as SHA-256 digests.
///
/// ```
/// use axum::http::{HeaderMap, HeaderValue};
/// use harness_server::auth::{Authenticate, BearerTokens};
///
/// let tokens = BearerTokens::new().with_token("alice", "s3cret-token-alice").unwrap();
/// let mut headers = HeaderMap::new();
/// headers.insert("authorization", HeaderValue::from_static("Bearer s3cret-token-alice"));
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert_eq!(tokens.authenticate(&headers).await.unwrap().as_str(), "alice");
/// headers.insert("authorization", HeaderValue::from_static("Bearer guess"));
/// assert!(tokens.authenticate(&headers).await.is_err());
/// # });
/// // The configuration may hold the digest instead of the token:
/// let digest = harness_server::auth::digest("s3cret-token-alice");
/// assert!(BearerTokens::new().with_digest("alice", &digest).is_ok());
/// ```
#[derive(Clone, Default)]
pub struct BearerTokens {
    by_digest: HashMap<[u8; 32], CallerId>,
}

impl fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerTokens")
            .field("tokens", &self.by_digest.len())
            .finish()
    }
}

/// The hex SHA-256 digest of `token`: what a configuration file stores.
#[must_use]
pub fn digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()).into())
}

fn hex(bytes: &[u8; 32]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn configuration(message: String) -> HarnessError {
    HarnessError::new(ErrorCategory::Configuration, message)
}

impl BearerTokens {
    /// No tokens: every request is refused.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Also accepts `token` for `principal`.
    ///
    /// # Errors
    /// When `principal` is not a valid [`CallerId`], the token is shorter than 16 bytes, or it
    /// is already given to a principal.
    pub fn with_token(self, principal: &str, token: &str) -> Result<Self, HarnessError> {
        if token.len() < 16 {
            return Err(configuration(format!(
                "the token of `{principal}` is {} bytes long: use at least 16",
                token.len()
            )));
        }
        self.insert(principal, Sha256::digest(token.as_bytes()).into())
    }

    /// Also accepts the token whose hex SHA-256 digest is `digest` for `principal`.
    ///
    /// # Errors
    /// When `principal` is not a valid [`CallerId`], `digest` is not 64 hex digits, or it is
    /// already given to a principal.
    pub fn with_digest(self, principal: &str, digest: &str) -> Result<Self, HarnessError> {
        let bytes = digest.as_bytes();
        let valid = bytes.len() == 64 && bytes.iter().all(u8::is_ascii_hexdigit);
        if !valid {
            return Err(configuration(format!(
                "the token digest of `{principal}` is not 64 hex digits (a SHA-256 digest)"
            )));
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let text = std::str::from_utf8(pair).unwrap_or("00");
            out[i] = u8::from_str_radix(text, 16).unwrap_or(0);
        }
        self.insert(principal, out)
    }

    fn insert(mut self, principal: &str, digest: [u8; 32]) -> Result<Self, HarnessError> {
        let caller: CallerId = principal
            .parse()
            .map_err(|e| configuration(format!("invalid principal: {e}")))?;
        if self.by_digest.contains_key(&digest) {
            return Err(configuration(format!(
                "the token of `{principal}` is given to another principal already"
            )));
        }
        self.by_digest.insert(digest, caller);
        Ok(self)
    }

    /// How many tokens are accepted.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

impl Authenticate for BearerTokens {
    fn authenticate<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> BoxFuture<'a, Result<CallerId, HarnessError>> {
        let caller = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            // Looked up by digest: the time taken says nothing of how close a guess was.
            .and_then(|token| {
                let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
                self.by_digest.get(&digest).cloned()
            })
            .ok_or_else(unauthenticated);
        Box::pin(async move { caller })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_hex_sha256() {
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn bad_configuration_is_refused_with_a_reason() {
        let short = BearerTokens::new().with_token("a", "short").unwrap_err();
        assert!(short.to_string().contains("at least 16"), "{short}");
        let bad = BearerTokens::new().with_digest("a", "xyz").unwrap_err();
        assert!(bad.to_string().contains("64 hex digits"), "{bad}");
        let twice = BearerTokens::new()
            .with_token("a", "0123456789abcdef")
            .unwrap()
            .with_token("b", "0123456789abcdef")
            .unwrap_err();
        assert!(twice.to_string().contains("another principal"), "{twice}");
        let principal = BearerTokens::new()
            .with_token("two words", "0123456789abcdef")
            .unwrap_err();
        assert!(
            principal.to_string().contains("invalid principal"),
            "{principal}"
        );
    }

    #[tokio::test]
    async fn the_digest_form_accepts_the_token() {
        let tokens = BearerTokens::new()
            .with_digest("bob", &digest("bob-token-0123456789"))
            .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            "bearer bob-token-0123456789".parse().unwrap(),
        );
        assert_eq!(tokens.authenticate(&headers).await.unwrap().as_str(), "bob");
        headers.insert(AUTHORIZATION, "Basic Ym9iOng=".parse().unwrap());
        assert!(tokens.authenticate(&headers).await.is_err());
        headers.remove(AUTHORIZATION);
        let err = tokens.authenticate(&headers).await.unwrap_err();
        assert_eq!(err.code(), &ErrorCode::CREDENTIAL_INVALID);
    }
}

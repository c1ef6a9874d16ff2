//! How the endpoint's failures are classified: HTTP statuses, error objects in a stream,
//! transport errors.
//!
//! | what | category | retryable |
//! |---|---|---|
//! | 400, 404, 409, 413, 422 | `configuration` | no |
//! | 401 | `authentication` | no |
//! | 403 | `authorization` | no |
//! | 408, a stream idle past its timeout | `timeout` | yes |
//! | 429 (`Retry-After` or `retry-after-ms` kept as the retry interval) | `throttled` | yes, except `insufficient_quota` |
//! | 5xx, a connection refused or reset, a stream cut short | `unavailable` | yes |
//! | any other status, a body that is not a stream, malformed events | `protocol` | no |
//!
//! The public message names the status and, bounded, the provider's own message (it passes
//! the redactor like every error); the provider's error code, when it is a short
//! identifier, is the error's provider code; the raw body goes to the diagnostic only.

use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use serde_json::Value;

/// How much of a provider's message reaches the public message.
const PUBLIC_MESSAGE_CHARS: usize = 300;
/// How much of an error body is kept for the diagnostic.
const DIAGNOSTIC_BYTES: usize = 2048;

pub(crate) fn protocol(message: impl Into<String>) -> HarnessError {
    HarnessError::new(ErrorCategory::Protocol, message.into())
}

/// A provider error object (`{"message", "type", "code"}`) seen inside a stream.
pub(crate) fn provider_error(error: &Value) -> HarnessError {
    let code = text(error, "code");
    let kind = text(error, "type");
    let category = match (code.as_deref(), kind.as_deref()) {
        (Some(c), _) if c.contains("rate_limit") => ErrorCategory::Throttled,
        (_, Some(t)) if t.contains("rate_limit") => ErrorCategory::Throttled,
        (_, Some("invalid_request_error")) => ErrorCategory::Configuration,
        (_, Some("authentication_error")) => ErrorCategory::Authentication,
        _ => ErrorCategory::Unavailable,
    };
    let message = text(error, "message").unwrap_or_else(|| "no message".to_owned());
    let err = HarnessError::new(
        category,
        format!(
            "the model endpoint reported an error in its stream: {}",
            bounded(&message)
        ),
    )
    .with_retryable(matches!(
        category,
        ErrorCategory::Throttled | ErrorCategory::Unavailable
    ))
    .with_diagnostic(truncate(&error.to_string(), DIAGNOSTIC_BYTES));
    with_provider_code(err, code.or(kind).as_deref())
}

/// A response whose status is not a success, with its headers and (bounded) body.
pub(crate) fn http_error(
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: &[u8],
) -> HarnessError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .filter(|e| e.is_object());
    let code = error
        .and_then(|e| text(e, "code"))
        .or_else(|| error.and_then(|e| text(e, "type")));
    let provider_message = error
        .and_then(|e| text(e, "message"))
        .or_else(|| error.and_then(Value::as_str).map(str::to_owned));
    let (category, retryable, what) = match status {
        400 | 404 | 409 | 413 | 422 => (ErrorCategory::Configuration, false, "refused the request"),
        401 => (
            ErrorCategory::Authentication,
            false,
            "refused the credentials",
        ),
        403 => (ErrorCategory::Authorization, false, "denied the request"),
        408 => (ErrorCategory::Timeout, true, "timed out"),
        429 => (
            ErrorCategory::Throttled,
            code.as_deref() != Some("insufficient_quota"),
            "is rate limiting",
        ),
        500..=599 => (ErrorCategory::Unavailable, true, "is unavailable"),
        _ => (
            ErrorCategory::Protocol,
            false,
            "answered with an unexpected status",
        ),
    };
    let mut message = format!("the model endpoint {what} (HTTP {status})");
    if let Some(provider) = &provider_message {
        message.push_str(": ");
        message.push_str(&bounded(provider));
    }
    let mut err = HarnessError::new(category, message)
        .with_retryable(retryable)
        .with_diagnostic(format!(
            "HTTP {status}: {}",
            truncate(&String::from_utf8_lossy(body), DIAGNOSTIC_BYTES)
        ));
    if let Some(after) = retry_after(headers) {
        err = err.with_retry_after(after);
    }
    with_provider_code(err, code.as_deref())
}

/// A transport error (connect, reset, timeout, body).
pub(crate) fn transport_error(error: &reqwest::Error) -> HarnessError {
    let (category, message) = if error.is_timeout() {
        (
            ErrorCategory::Timeout,
            "the model endpoint did not answer in time",
        )
    } else if error.is_connect() {
        (
            ErrorCategory::Unavailable,
            "could not connect to the model endpoint",
        )
    } else {
        (
            ErrorCategory::Unavailable,
            "the connection to the model endpoint failed",
        )
    };
    HarnessError::new(category, message)
        .with_retryable(true)
        .with_diagnostic(error.to_string())
}

/// The stream sent nothing for `idle`.
pub(crate) fn idle(idle: Duration) -> HarnessError {
    HarnessError::new(
        ErrorCategory::Timeout,
        format!(
            "the model endpoint sent nothing for {} ms",
            idle.as_millis()
        ),
    )
    .with_code(ErrorCode::TIMEOUT)
    .with_retryable(true)
}

/// `Retry-After` in seconds (an HTTP date is not read: servers of these APIs send seconds),
/// or OpenAI's `retry-after-ms`.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return (ms.is_finite() && ms >= 0.0)
            .then(|| Duration::from_secs_f64((ms / 1000.0).min(86_400.0)));
    }
    let seconds = header("retry-after").and_then(|v| v.parse::<f64>().ok())?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)))
}

fn with_provider_code(err: HarnessError, code: Option<&str>) -> HarnessError {
    match code {
        Some(code)
            if (1..=64).contains(&code.len())
                && code
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) =>
        {
            err.with_provider_code(code)
        }
        _ => err,
    }
}

fn text(value: &Value, field: &str) -> Option<String> {
    match value.get(field)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn bounded(s: &str) -> String {
    if s.chars().count() <= PUBLIC_MESSAGE_CHARS {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(PUBLIC_MESSAGE_CHARS).collect();
    out.push('…');
    out
}

fn truncate(s: &str, bytes: usize) -> String {
    if s.len() <= bytes {
        return s.to_owned();
    }
    let mut cut = bytes;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn statuses_map_to_categories() {
        let body = br#"{"error":{"message":"Rate limit reached","type":"rate_limit_error","code":"rate_limit_exceeded"}}"#;
        let err = http_error(429, &headers(&[("retry-after", "7")]), body);
        assert_eq!(err.category(), ErrorCategory::Throttled);
        assert!(err.retryable());
        assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(err.provider_code(), Some("rate_limit_exceeded"));
        assert!(err.message().contains("429") && err.message().contains("Rate limit reached"));

        let quota =
            br#"{"error":{"message":"You exceeded your quota","code":"insufficient_quota"}}"#;
        assert!(!http_error(429, &HeaderMap::new(), quota).retryable());
        let err = http_error(429, &headers(&[("retry-after-ms", "1500")]), b"");
        assert_eq!(err.retry_after(), Some(Duration::from_millis(1500)));

        for (status, category, retryable) in [
            (400, ErrorCategory::Configuration, false),
            (401, ErrorCategory::Authentication, false),
            (403, ErrorCategory::Authorization, false),
            (404, ErrorCategory::Configuration, false),
            (408, ErrorCategory::Timeout, true),
            (500, ErrorCategory::Unavailable, true),
            (503, ErrorCategory::Unavailable, true),
            (302, ErrorCategory::Protocol, false),
        ] {
            let err = http_error(status, &HeaderMap::new(), b"<html>nope</html>");
            assert_eq!(
                (err.category(), err.retryable()),
                (category, retryable),
                "{status}"
            );
            assert!(
                !err.message().contains("<html>"),
                "the raw body reached the message"
            );
            assert!(err.diagnostic().unwrap().contains("<html>"));
        }
    }

    #[test]
    fn provider_messages_are_bounded_and_codes_checked() {
        let long = format!(
            r#"{{"error":{{"message":"{}","code":"has spaces, not a code"}}}}"#,
            "m".repeat(5000)
        );
        let err = http_error(400, &HeaderMap::new(), long.as_bytes());
        assert!(err.message().len() < 400, "{}", err.message().len());
        assert_eq!(err.provider_code(), None);
        let huge = "x".repeat(100_000);
        let err = http_error(500, &HeaderMap::new(), huge.as_bytes());
        assert!(err.diagnostic().unwrap().len() < DIAGNOSTIC_BYTES + 32);
        let err = http_error(503, &headers(&[("retry-after", "-3")]), b"");
        assert_eq!(err.retry_after(), None);
    }
}

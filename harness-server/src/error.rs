//! Errors as the API answers them: the public projection as JSON, with an HTTP status chosen
//! by code, else by category.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError, PublicError};
use harness_layers::redaction::Redactor;

/// An error the API answers with: `{"error": <public error>}`, its status from
/// [`status_of`], `Retry-After` (whole seconds, rounded up) when a retry should wait. Only
/// the public projection leaves, with its message through the server's redactor: a
/// diagnostic never does.
#[derive(Debug)]
pub struct ApiError {
    error: HarnessError,
    redactor: Option<std::sync::Arc<Redactor>>,
}

impl ApiError {
    /// The answer for `error`.
    #[must_use]
    pub fn new(error: HarnessError) -> Self {
        Self {
            error,
            redactor: None,
        }
    }

    /// Passes the message through `redactor` before it leaves.
    #[must_use]
    pub(crate) fn redacted(mut self, redactor: &std::sync::Arc<Redactor>) -> Self {
        self.redactor = Some(std::sync::Arc::clone(redactor));
        self
    }

    /// `EXECUTION_NOT_FOUND`: also what another principal's execution answers.
    pub(crate) fn not_found(id: &str) -> Self {
        let shown: String = id.chars().take(128).collect();
        Self::new(
            HarnessError::new(
                ErrorCategory::Configuration,
                format!("no execution `{shown}`"),
            )
            .with_code(ErrorCode::EXECUTION_NOT_FOUND),
        )
    }

    /// `REQUEST_INVALID` with `message`.
    pub(crate) fn invalid(message: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Self::new(
            HarnessError::new(ErrorCategory::Configuration, message)
                .with_code(ErrorCode::REQUEST_INVALID),
        )
    }

    /// The error's public projection.
    #[must_use]
    pub fn public(&self) -> PublicError {
        let mut public = self.error.public();
        if let Some(redactor) = &self.redactor {
            public.message = redactor.redact_str(&public.message).into_owned();
            if let Some(code) = &public.provider_code {
                public.provider_code = Some(redactor.redact_str(code).into_owned());
            }
        }
        public
    }
}

impl From<HarnessError> for ApiError {
    fn from(error: HarnessError) -> Self {
        Self::new(error)
    }
}

/// The HTTP status of `error`: by its code where one means something to HTTP, else by its
/// category.
///
/// | code or category | status |
/// |---|---|
/// | `EXECUTION_NOT_FOUND`, `FILE_NOT_FOUND`, `SKILL_NOT_FOUND`, `ENDPOINT_NOT_FOUND`, `ADAPTER_NOT_FOUND`, `ACTION_NOT_FOUND` | 404 |
/// | `SKILL_BLOCKED` (the operator's block list) | 403 |
/// | `IDEMPOTENCY_CONFLICT`, `ACTION_ALREADY_RESOLVED`, `ACTION_REVISION_STALE`, `EXECUTION_TERMINAL` | 409 |
/// | `REQUEST_TOO_LARGE`, `FILE_TOO_LARGE`, `FILES_TOO_MANY` | 413 |
/// | `FILE_TYPE_MISMATCH`, `FILE_TYPE_UNSUPPORTED` (a file's content, at upload or start) | 415 |
/// | `ACTION_RESPONSE_INVALID`, `OPTIONS_INVALID`, `CAPABILITY_UNSUPPORTED`, `FILE_MODALITY_UNSUPPORTED`, `MODEL_NOT_ALLOWED`, `PROMPT_PARAMETER_INVALID` | 422 |
/// | other `configuration` | 400 |
/// | `authentication` | 401 |
/// | `authorization` | 403 |
/// | `throttled` | 429 |
/// | `capacity`, `unavailable`, `persistence` | 503 |
/// | `timeout` | 504 |
/// | `protocol` | 502 |
/// | `cancelled` | 409 |
/// | `internal` | 500 |
#[must_use]
pub fn status_of(error: &PublicError) -> StatusCode {
    let code = &error.code;
    let is = |c: ErrorCode| *code == c;
    if is(ErrorCode::EXECUTION_NOT_FOUND)
        || is(ErrorCode::FILE_NOT_FOUND)
        || is(ErrorCode::SKILL_NOT_FOUND)
        || is(ErrorCode::ENDPOINT_NOT_FOUND)
        || is(ErrorCode::ADAPTER_NOT_FOUND)
        || is(ErrorCode::ACTION_NOT_FOUND)
    {
        return StatusCode::NOT_FOUND;
    }
    if is(ErrorCode::SKILL_BLOCKED) {
        return StatusCode::FORBIDDEN;
    }
    if is(ErrorCode::IDEMPOTENCY_CONFLICT)
        || is(ErrorCode::ACTION_ALREADY_RESOLVED)
        || is(ErrorCode::ACTION_REVISION_STALE)
        || is(ErrorCode::EXECUTION_TERMINAL)
    {
        return StatusCode::CONFLICT;
    }
    if is(ErrorCode::REQUEST_TOO_LARGE)
        || is(ErrorCode::FILE_TOO_LARGE)
        || is(ErrorCode::FILES_TOO_MANY)
    {
        return StatusCode::PAYLOAD_TOO_LARGE;
    }
    if is(ErrorCode::FILE_TYPE_MISMATCH) || is(ErrorCode::FILE_TYPE_UNSUPPORTED) {
        return StatusCode::UNSUPPORTED_MEDIA_TYPE;
    }
    if is(ErrorCode::ACTION_RESPONSE_INVALID)
        || is(ErrorCode::FILE_MODALITY_UNSUPPORTED)
        || is(ErrorCode::OPTIONS_INVALID)
        || is(ErrorCode::CAPABILITY_UNSUPPORTED)
        || is(ErrorCode::MODEL_NOT_ALLOWED)
        || is(ErrorCode::PROMPT_PARAMETER_INVALID)
    {
        return StatusCode::UNPROCESSABLE_ENTITY;
    }
    match error.category {
        ErrorCategory::Configuration => StatusCode::BAD_REQUEST,
        ErrorCategory::Authentication => StatusCode::UNAUTHORIZED,
        ErrorCategory::Authorization => StatusCode::FORBIDDEN,
        ErrorCategory::Throttled => StatusCode::TOO_MANY_REQUESTS,
        ErrorCategory::Capacity | ErrorCategory::Unavailable | ErrorCategory::Persistence => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ErrorCategory::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCategory::Protocol => StatusCode::BAD_GATEWAY,
        ErrorCategory::Cancelled => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let public = self.public();
        let status = status_of(&public);
        let category = public.category;
        let retry_after_ms = public.retry_after_ms;
        let body =
            serde_json::to_vec(&crate::view::ErrorBody { error: public }).unwrap_or_default();
        let mut response =
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        let wait = match category {
            // Capacity frees up as executions end: a second is a fair first wait.
            ErrorCategory::Capacity => Some(retry_after_ms.unwrap_or(1000)),
            ErrorCategory::Throttled => retry_after_ms,
            _ => None,
        };
        if let Some(ms) = wait
            && let Ok(value) = HeaderValue::from_str(&ms.div_ceil(1000).max(1).to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"harness\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public(category: ErrorCategory, code: Option<ErrorCode>) -> PublicError {
        let mut e = HarnessError::new(category, "m");
        if let Some(code) = code {
            e = e.with_code(code);
        }
        e.public()
    }

    #[test]
    fn codes_pick_statuses_before_categories() {
        use ErrorCategory as C;
        let cases = [
            (C::Configuration, Some(ErrorCode::IDEMPOTENCY_CONFLICT), 409),
            (
                C::Configuration,
                Some(ErrorCode::ACTION_ALREADY_RESOLVED),
                409,
            ),
            (
                C::Configuration,
                Some(ErrorCode::ACTION_REVISION_STALE),
                409,
            ),
            (
                C::Configuration,
                Some(ErrorCode::ACTION_RESPONSE_INVALID),
                422,
            ),
            (C::Configuration, Some(ErrorCode::EXECUTION_NOT_FOUND), 404),
            (C::Configuration, Some(ErrorCode::FILE_NOT_FOUND), 404),
            (C::Configuration, Some(ErrorCode::SKILL_NOT_FOUND), 404),
            (C::Configuration, Some(ErrorCode::SKILL_BLOCKED), 403),
            (C::Configuration, Some(ErrorCode::FILE_TOO_LARGE), 413),
            (C::Configuration, Some(ErrorCode::FILES_TOO_MANY), 413),
            (C::Configuration, Some(ErrorCode::FILE_TYPE_MISMATCH), 415),
            (
                C::Configuration,
                Some(ErrorCode::FILE_TYPE_UNSUPPORTED),
                415,
            ),
            (
                C::Configuration,
                Some(ErrorCode::FILE_MODALITY_UNSUPPORTED),
                422,
            ),
            (C::Configuration, None, 400),
            (C::Authentication, None, 401),
            (C::Throttled, None, 429),
            (C::Capacity, Some(ErrorCode::CAPACITY_EXHAUSTED), 503),
            (C::Timeout, None, 504),
            (C::Internal, None, 500),
        ];
        for (category, code, status) in cases {
            assert_eq!(
                status_of(&public(category, code.clone())).as_u16(),
                status,
                "{category:?} {code:?}"
            );
        }
    }

    #[test]
    fn capacity_and_throttling_say_when_to_retry() {
        let capacity = ApiError::new(HarnessError::new(ErrorCategory::Capacity, "full"));
        let response = capacity.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let throttled = ApiError::new(
            HarnessError::new(ErrorCategory::Throttled, "slow down")
                .with_retry_after(std::time::Duration::from_millis(2500)),
        );
        assert_eq!(
            throttled.into_response().headers()[header::RETRY_AFTER],
            "3"
        );
        let other = ApiError::new(HarnessError::new(ErrorCategory::Internal, "x"));
        assert!(
            other
                .into_response()
                .headers()
                .get(header::RETRY_AFTER)
                .is_none()
        );
    }
}

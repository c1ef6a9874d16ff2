//! Preflight: refuse a request the adapter cannot serve, before any provider work.
//!
//! ```
//! use harness_core::capability::CapabilityKey;
//! use harness_core::error::ErrorCode;
//! use harness_core::service::{AdapterService, ExecutionRequest};
//! use harness_layers::preflight::PreflightLayer;
//! use harness_scripted::ScriptedAdapter;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let adapter = ScriptedAdapter::quickstart();
//! let preflight = PreflightLayer::for_adapter(&adapter).unwrap();
//! let service = ServiceBuilder::new().layer(preflight).service(AdapterService::new(adapter));
//!
//! let request = ExecutionRequest::new("hi").require(CapabilityKey::Skills);
//! let err = service.clone().oneshot(request).await.unwrap_err();
//! assert_eq!(err.code(), &ErrorCode::CAPABILITY_UNSUPPORTED);
//!
//! let request = ExecutionRequest::new("hi").with_options(serde_json::json!({"scrpit": {}}));
//! let err = service.oneshot(request).await.unwrap_err();
//! assert_eq!(err.code(), &ErrorCode::OPTIONS_INVALID);
//! assert!(err.message().contains("scrpit"));
//! # });
//! ```
//!
//! Four checks, all against the adapter's descriptor, in this order, each listing everything
//! wrong rather than the first problem:
//!
//! 1. **Options** are validated against the descriptor's options schema; every violation is
//!    listed with its JSON pointer (`OPTIONS_INVALID`). Submitted values are never echoed
//!    (options may hold secrets). Absent options are validated as `{}`.
//! 2. **Required capabilities** are checked against the descriptor's capability report: each
//!    unmet requirement is listed with the level required and the level offered, and the
//!    adapter's explanation (`CAPABILITY_UNSUPPORTED`). Requirements carry a minimum level
//!    only; capability *constraints* are reported for callers to read but not matched.
//! 3. **Continuity**: a request that names a conversation needs `session.multi_turn`
//!    (`CAPABILITY_UNSUPPORTED`).
//! 4. **Caller credentials**: a request carrying [`CallerCredentials`] needs
//!    `tool.caller_credentials` (`CAPABILITY_UNSUPPORTED`): an adapter that runs no
//!    provider's tools would drop them without a word.
//!
//! Every refusal is a `configuration` error, returned without calling the inner service, and
//! counted in `harness_preflight_rejections_total` by capability (`options` for options).
//!
//! These checks need no provider: the descriptor is the most the adapter can do. What one
//! configuration of it can do is the adapter's `evaluate`, which the service below calls for
//! every request (required capabilities or not; see `AdapterService::start`): a request the
//! descriptor allows but the configuration cannot serve (a conversation on an ACP agent
//! without `loadSession`) is refused there, still before any runtime is created.
//!
//! Neighbours: put it outside capacity and retry (a refusal should cost no permit and never
//! be retried) and inside idempotency (so a conflict is answered before this work). The
//! descriptor is fixed when the layer is built: build it from the same adapter the inner
//! service runs.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use harness_core::adapter::HarnessAdapter;
use harness_core::capability::{CapabilityKey, Requirement};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::manifest::{HarnessDescriptor, OptionsValidator};
use harness_core::service::{ExecutionHandle, ExecutionRequest};
use harness_core::tool::CallerCredentials;
use pin_project_lite::pin_project;

use crate::metrics::names;
use tower::{Layer, Service};

/// Configures [`Preflight`] for one adapter.
#[derive(Clone)]
pub struct PreflightLayer {
    checks: Arc<Checks>,
}

struct Checks {
    descriptor: HarnessDescriptor,
    options: OptionsValidator,
}

impl PreflightLayer {
    /// Preflight against `descriptor`.
    ///
    /// # Errors
    /// `configuration` when the options schema does not compile (a registered descriptor's
    /// always does).
    pub fn new(descriptor: HarnessDescriptor) -> Result<Self, HarnessError> {
        let options = OptionsValidator::new(descriptor.options_schema()).map_err(|e| {
            HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "the options schema of adapter `{}` does not compile",
                    descriptor.id()
                ),
            )
            .with_diagnostic(e.to_string())
        })?;
        Ok(Self {
            checks: Arc::new(Checks {
                descriptor,
                options,
            }),
        })
    }

    /// Preflight against `adapter`'s descriptor.
    ///
    /// # Errors
    /// As [`PreflightLayer::new`].
    pub fn for_adapter<A: HarnessAdapter>(adapter: &A) -> Result<Self, HarnessError> {
        Self::new(adapter.descriptor().clone())
    }
}

impl fmt::Debug for PreflightLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreflightLayer")
            .field("adapter", self.checks.descriptor.id())
            .finish()
    }
}

impl<S> Layer<S> for PreflightLayer {
    type Service = Preflight<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Preflight {
            inner,
            checks: Arc::clone(&self.checks),
        }
    }
}

/// Refuses requests the adapter cannot serve; see the [module docs](self).
#[derive(Clone)]
pub struct Preflight<S> {
    inner: S,
    checks: Arc<Checks>,
}

impl<S: fmt::Debug> fmt::Debug for Preflight<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Preflight")
            .field("inner", &self.inner)
            .field("adapter", self.checks.descriptor.id())
            .finish()
    }
}

impl<S> Preflight<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
    /// The inner service, by value.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl Checks {
    fn check(&self, request: &ExecutionRequest) -> Result<(), HarnessError> {
        let adapter = self.descriptor.id();
        if let Err(invalid) = self.options.validate(&request.options) {
            names::record_preflight_rejection(adapter.as_str(), names::CAPABILITY_OPTIONS);
            let list: Vec<String> = invalid.violations.iter().map(ToString::to_string).collect();
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "the options do not match adapter `{adapter}`'s options schema: {}",
                    list.join("; ")
                ),
            )
            .with_code(ErrorCode::OPTIONS_INVALID));
        }

        let report = self.descriptor.capabilities();
        if let Err(unmet) = report.check(&request.required_capabilities) {
            for u in &unmet {
                names::record_preflight_rejection(adapter.as_str(), u.capability.as_str());
            }
            let list: Vec<String> = unmet.iter().map(ToString::to_string).collect();
            return Err(HarnessError::new(
                ErrorCategory::Configuration,
                format!(
                    "adapter `{adapter}` does not support what the request requires: {}",
                    list.join("; ")
                ),
            )
            .with_code(ErrorCode::CAPABILITY_UNSUPPORTED));
        }

        if request.conversation_id.is_some() {
            let multi_turn = Requirement::from(CapabilityKey::SessionMultiTurn);
            if let Err(unmet) = report.check(std::slice::from_ref(&multi_turn)) {
                names::record_preflight_rejection(
                    adapter.as_str(),
                    CapabilityKey::SessionMultiTurn.as_str(),
                );
                let detail: Vec<String> = unmet.iter().map(ToString::to_string).collect();
                return Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    format!(
                        "the request continues a conversation, which needs `session.multi_turn`: {}; start a new execution without a conversation id instead",
                        detail.join("; ")
                    ),
                )
                .with_code(ErrorCode::CAPABILITY_UNSUPPORTED));
            }
        }
        if request
            .extensions
            .get::<CallerCredentials>()
            .is_some_and(|c| !c.is_empty())
        {
            let key = CapabilityKey::ToolCallerCredentials;
            if let Err(unmet) = report.check(&[Requirement::from(key)]) {
                names::record_preflight_rejection(adapter.as_str(), key.as_str());
                let detail: Vec<String> = unmet.iter().map(ToString::to_string).collect();
                return Err(HarnessError::new(
                    ErrorCategory::Configuration,
                    format!(
                        "the request carries caller credentials for tool providers, which \
                         needs `tool.caller_credentials`: {}; leave them out for this adapter",
                        detail.join("; ")
                    ),
                )
                .with_code(ErrorCode::CAPABILITY_UNSUPPORTED));
            }
        }
        Ok(())
    }
}

impl<S> Service<ExecutionRequest> for Preflight<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle>,
    S::Error: Into<HarnessError>,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        match self.checks.check(&request) {
            Ok(()) => ResponseFuture {
                kind: Kind::Inner {
                    future: self.inner.call(request),
                },
            },
            Err(error) => ResponseFuture {
                kind: Kind::Refused { error: Some(error) },
            },
        }
    }
}

pin_project! {
    /// The response future of [`Preflight`].
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = Projected]
    #[derive(Debug)]
    enum Kind<F> {
        Inner { #[pin] future: F },
        Refused { error: Option<HarnessError> },
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ExecutionHandle, E>>,
    E: Into<HarnessError>,
{
    type Output = Result<ExecutionHandle, HarnessError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            Projected::Inner { future } => future.poll(cx).map_err(Into::into),
            Projected::Refused { error } => Poll::Ready(Err(error.take().unwrap_or_else(|| {
                HarnessError::new(
                    ErrorCategory::Internal,
                    "preflight future polled after completion",
                )
            }))),
        }
    }
}

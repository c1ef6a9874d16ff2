//! How fixtures observe an adapter: through the service (the log) and at the runtime boundary.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use harness_core::adapter::{
    AdapterEvent, AgentConfig, BoxStream, EventResult, HarnessAdapter, HarnessRuntime, RunLimits,
    RuntimeContext, RuntimeInit, TurnInput,
};
use harness_core::capability::{CapabilityKey, Requirement};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{Event, EventPayload};
use harness_core::id::{Cursor, ExecutionId};
use harness_core::manifest::ContractVersion;
use harness_core::service::{
    AdapterService, ExecutionHandle, ExecutionRequest, Outcome, ServiceConfig,
};
use harness_layers::preflight::PreflightLayer;
use tower::{Layer, ServiceExt};

use crate::Bounds;
use crate::observe::Spy;

/// Runs a future, turning a panic into its message.
pub(crate) async fn caught<F: Future>(fut: F) -> Result<F::Output, String> {
    AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(|p| panic_text(&*p))
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Runs a runtime hook bounded by `bound`, naming it in the failure.
///
/// The call itself runs inside the panic guard too: a runtime may panic before it returns
/// its future.
pub(crate) async fn hook<F: Future>(
    what: &str,
    bound: Duration,
    call: impl FnOnce() -> F,
) -> Result<F::Output, String> {
    match tokio::time::timeout(bound, caught(async move { call().await })).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(panic)) => Err(format!("{what} panicked: {panic}")),
        Err(_) => Err(format!("{what} did not return within {bound:?}")),
    }
}

/// A runtime built directly (no service) from a request, with the turn to stream.
pub(crate) struct Direct {
    pub(crate) runtime: Box<dyn HarnessRuntime>,
    pub(crate) turn: TurnInput,
}

pub(crate) async fn direct<A: HarnessAdapter>(
    adapter: &A,
    request: &ExecutionRequest,
    bounds: Bounds,
) -> Result<Direct, String> {
    let execution_id = ExecutionId::generate();
    let cancellation = tokio_util::sync::CancellationToken::new();
    // An adapter that runs portable tools gets the suite's, as a service would give them.
    let tools = if adapter.descriptor().capabilities().runs_portable_tools() {
        let (set, _) = crate::tools::suite();
        set.resolve(None, &execution_id, None, &cancellation)
            .await
            .handles
    } else {
        Vec::new()
    };
    let context = RuntimeContext {
        middleware: harness_core::middleware::PortableMiddlewarePolicy::allow_all(),
        contract_version: ContractVersion::V1,
        adapter: adapter.descriptor().id().clone(),
        execution_id: execution_id.clone(),
        config: AgentConfig {
            options: request.options.clone(),
            model: None,
            conversation: request.conversation(),
        },
        binding: None,
        prompt: None,
        interrupt_policy: Default::default(),
        tools,
        limits: RunLimits::default(),
        thread_state: None,
        cancellation,
        delivery: harness_core::adapter::Delivery::default(),
        skills: harness_core::skill::SkillManifest::default(),
        telemetry: harness_core::telemetry::TelemetrySink::new(
            adapter.descriptor().id().clone(),
            execution_id.clone(),
            tracing::Span::current(),
        ),
    };
    let runtime = hook("create_runtime", bounds.grace, move || {
        adapter.create_runtime(context)
    })
    .await?
    .map_err(|e| format!("create_runtime failed: {}", e.message()))?;
    // Files as a service would hand them: validated, no workspace (inline ones only).
    let files = harness_core::file::validate(
        &request.files,
        &harness_core::id::CallerId::of(request),
        None,
        &harness_core::file::FileLimits::default(),
    )
    .await
    .map_err(|e| format!("files refused: {}", e.message()))?;
    let turn = TurnInput {
        execution_id,
        conversation_id: request.conversation_id.clone(),
        message: request.message.clone(),
        files,
        user: None,
        client_context: request.client_context.clone(),
        trace_context: request.trace_context.clone(),
        deadline: request.deadline,
        idempotency_key: request.idempotency_key.clone(),
    };
    Ok(Direct { runtime, turn })
}

impl Direct {
    /// Initializes the runtime (bounded by `grace`); fails with `initialize failed: …`.
    pub(crate) async fn initialize(&self, bounds: Bounds) -> Result<RuntimeInit, String> {
        hook("initialize", bounds.grace, || self.runtime.initialize())
            .await?
            .map_err(|e| format!("initialize failed: {}", e.message()))
    }

    /// Initializes the runtime, then drains the segment of its turn (bounded by `run`) and
    /// checks its protocol.
    pub(crate) async fn first_segment(&self, bounds: Bounds) -> Result<Segment, String> {
        self.initialize(bounds).await?;
        let seg = drain(|| self.runtime.stream(self.turn.clone()), bounds.run).await;
        seg.check_protocol()?;
        Ok(seg)
    }
}

/// The items of one runtime segment.
#[derive(Debug, Default)]
pub(crate) struct Segment {
    pub(crate) items: Vec<EventResult>,
    /// The stream ended (returned `None`).
    pub(crate) ended: bool,
    /// The stream panicked.
    pub(crate) panicked: Option<String>,
}

impl Segment {
    /// Checks "exactly one terminal item, and it is the last".
    pub(crate) fn check_protocol(&self) -> Result<(), String> {
        if let Some(p) = &self.panicked {
            return Err(format!("the runtime's stream panicked: {p}"));
        }
        if !self.ended {
            return Err("the runtime's stream did not end within the bound".to_owned());
        }
        let terminals: Vec<usize> = self
            .items
            .iter()
            .enumerate()
            .filter(|(_, i)| is_terminal_item(i))
            .map(|(n, _)| n)
            .collect();
        match terminals.as_slice() {
            [] => Err(
                "the runtime ended a segment without a terminal item (Completed, ActionRequest or Err)"
                    .to_owned(),
            ),
            [one] if *one + 1 == self.items.len() => Ok(()),
            [one] => Err(format!(
                "adapter emitted events after its terminal item: {} item(s) after item {}",
                self.items.len() - one - 1,
                one + 1
            )),
            many => Err(format!(
                "the runtime yielded {} terminal items in one segment (exactly one is allowed)",
                many.len()
            )),
        }
    }

    pub(crate) fn terminal(&self) -> Option<&EventResult> {
        self.items.iter().find(|i| is_terminal_item(i))
    }

    pub(crate) fn count(&self, f: impl Fn(&AdapterEvent) -> bool) -> usize {
        self.items
            .iter()
            .filter(|i| matches!(i, Ok(e) if f(e)))
            .count()
    }
}

pub(crate) fn is_terminal_item(item: &EventResult) -> bool {
    matches!(
        item,
        Err(_) | Ok(AdapterEvent::Completed(_) | AdapterEvent::Action(_))
    )
}

/// Opens a segment with `open` and drains it (up to a bound, and past its terminal item: a
/// correct runtime ends there). A panic while opening or polling is recorded.
pub(crate) async fn drain<'a>(
    open: impl FnOnce() -> BoxStream<'a, EventResult>,
    bound: Duration,
) -> Segment {
    let mut segment = Segment::default();
    let stream = match std::panic::catch_unwind(AssertUnwindSafe(open)) {
        Ok(stream) => stream,
        Err(p) => {
            segment.panicked = Some(panic_text(&*p));
            return segment;
        }
    };
    let mut stream = AssertUnwindSafe(stream).catch_unwind();
    let collect = async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(item) => {
                    segment.items.push(item);
                    if segment.items.len() > 10_000 {
                        return;
                    }
                }
                Err(p) => {
                    segment.panicked = Some(panic_text(&*p));
                    return;
                }
            }
        }
        segment.ended = true;
    };
    let _ = tokio::time::timeout(bound, collect).await;
    segment
}

/// The service the suite drives an adapter through.
pub(crate) fn service<A: HarnessAdapter>(adapter: A, bounds: Bounds) -> AdapterService<A> {
    builder(adapter, bounds).build()
}

/// The service builder with the suite's bounds, for fixtures that add runtime layers.
pub(crate) fn builder<A: HarnessAdapter>(
    adapter: A,
    bounds: Bounds,
) -> harness_core::service::AdapterServiceBuilder<A, tower::layer::util::Identity> {
    tooled(adapter, bounds).0
}

/// [`builder`], and what the suite's tools see: an adapter that runs the execution's
/// portable tools gets [the suite's](crate::tools) (`None` for another).
pub(crate) fn tooled<A: HarnessAdapter>(
    adapter: A,
    bounds: Bounds,
) -> (
    harness_core::service::AdapterServiceBuilder<A, tower::layer::util::Identity>,
    Option<Arc<crate::tools::Seen>>,
) {
    let portable = adapter.descriptor().capabilities().runs_portable_tools();
    let builder = AdapterService::builder(adapter).config(config(bounds));
    if portable {
        let (tools, seen) = crate::tools::suite();
        (builder.tools(tools), Some(seen))
    } else {
        (builder, None)
    }
}

pub(crate) fn config(bounds: Bounds) -> ServiceConfig {
    ServiceConfig {
        cancel_grace: bounds.grace,
        cleanup_deadline: bounds.grace,
        ..ServiceConfig::default()
    }
}

/// A finished execution as the suite observed it.
#[derive(Debug)]
pub(crate) struct Observed {
    pub(crate) events: Vec<Arc<Event>>,
    pub(crate) outcome: Outcome,
}

impl Observed {
    pub(crate) fn kinds(&self) -> Vec<&'static str> {
        self.events.iter().map(|e| e.kind().as_str()).collect()
    }

    pub(crate) fn count(&self, f: impl Fn(&EventPayload) -> bool) -> usize {
        self.events.iter().filter(|e| f(e.payload())).count()
    }

    /// The log rules: contiguous sequence from 1, one execution id, exactly one terminal
    /// event and it is the last; and no protocol failure (the service's verdict on the
    /// adapter's ordering).
    pub(crate) fn check_log(&self) -> Result<(), String> {
        for (n, e) in self.events.iter().enumerate() {
            let expected = n as u64 + 1;
            if e.seq().get() != expected {
                return Err(format!(
                    "sequence gap: event {n} has seq {} (expected {expected})",
                    e.seq()
                ));
            }
            if e.execution_id() != self.events[0].execution_id() {
                return Err(format!("event {expected} names another execution"));
            }
        }
        let terminals = self.count(|p| p.is_terminal());
        if terminals != 1 {
            return Err(format!(
                "{terminals} terminal events in the log (exactly one is required)"
            ));
        }
        if !self
            .events
            .last()
            .is_some_and(|e| e.payload().is_terminal())
        {
            return Err("the terminal event is not the last".to_owned());
        }
        if let Outcome::Failed(err) = &self.outcome
            && err.category() == ErrorCategory::Protocol
        {
            return Err(protocol_rule(err));
        }
        Ok(())
    }

    /// How the execution ended, for a failure reason: its state, and a failure's code and
    /// message.
    pub(crate) fn ended(&self) -> String {
        match &self.outcome {
            Outcome::Failed(e) => format!("Failed ({}: {})", e.code().as_str(), e.message()),
            other => format!("{:?}", other.state()),
        }
    }

    /// Whether any event, or the public projection of the failure, contains `needle`.
    pub(crate) fn leaks(&self, needle: &str) -> Option<String> {
        for e in &self.events {
            let json = serde_json::to_string(&**e).unwrap_or_default();
            if json.contains(needle) {
                return Some(format!("event {} ({})", e.seq(), e.kind().as_str()));
            }
        }
        if let Outcome::Failed(err) = &self.outcome
            && (err.message().contains(needle)
                || serde_json::to_string(&err.public())
                    .unwrap_or_default()
                    .contains(needle))
        {
            return Some("the public error".to_owned());
        }
        None
    }
}

/// Names the rule behind the service's protocol failure.
pub(crate) fn protocol_rule(err: &HarnessError) -> String {
    let msg = err.message();
    if msg.contains("after the end") {
        format!("adapter emitted events after its terminal item (service: {msg})")
    } else if msg.contains("without completing") {
        format!(
            "adapter ended a run segment without a terminal item, \
             a gap in the run lifecycle (service: {msg})"
        )
    } else {
        format!("adapter violated the event protocol (service: {msg})")
    }
}

/// An execution a fixture started: cancelled when dropped, so a fixture that returns early
/// (on a failure, past a bound) leaves nothing running. A running execution whose handles
/// are all dropped keeps running; cancelling an ended one changes nothing.
#[derive(Debug)]
pub(crate) struct Started(ExecutionHandle);

impl Started {
    pub(crate) fn new(handle: ExecutionHandle) -> Self {
        Self(handle)
    }
}

impl std::ops::Deref for Started {
    type Target = ExecutionHandle;

    fn deref(&self) -> &ExecutionHandle {
        &self.0
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.0.cancel(harness_core::event::CancelReason::new(
            "conformance: fixture over",
        ));
    }
}

/// The name of an outcome's state (`Succeeded`, `Cancelled`, ...), with the code of a
/// failure.
pub(crate) fn outcome_name(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Failed(e) => format!("Failed {}", e.code().as_str()),
        other => format!("{:?}", other.state()),
    }
}

/// Starts `request` through the service.
pub(crate) async fn start<A: HarnessAdapter>(
    service: &AdapterService<A>,
    request: ExecutionRequest,
) -> Result<Started, String> {
    service
        .start(request)
        .await
        .map(Started)
        .map_err(|e| e.message().to_owned())
}

/// Starts `request` through the service and waits (bounded) for it to end.
pub(crate) async fn run_to_end<A: HarnessAdapter>(
    service: &AdapterService<A>,
    request: ExecutionRequest,
    bounds: Bounds,
) -> Result<Observed, String> {
    let handle = start(service, request)
        .await
        .map_err(|e| format!("the service refused the request: {e}"))?;
    finish(&handle, bounds).await
}

/// Waits (bounded) for an execution to end; on the bound, cancels it and fails.
pub(crate) async fn finish(handle: &ExecutionHandle, bounds: Bounds) -> Result<Observed, String> {
    match tokio::time::timeout(bounds.run, handle.outcome()).await {
        Ok(outcome) => Ok(Observed {
            events: handle.log().snapshot(Cursor::START),
            outcome,
        }),
        Err(_) => {
            handle.cancel(harness_core::event::CancelReason::new("conformance bound"));
            Err(format!(
                "the execution did not end within {:?} (state {})",
                bounds.run,
                handle.state()
            ))
        }
    }
}

/// Waits (bounded) for the execution to open an action; returns it. When none comes, the
/// execution is cancelled: a running execution whose handles are dropped keeps running,
/// and the suite leaves nothing behind.
pub(crate) async fn wait_action(
    handle: &ExecutionHandle,
    bounds: Bounds,
) -> Result<harness_core::action::ActionRequest, String> {
    let mut events = handle.events(Cursor::START);
    let wait = async {
        while let Some(e) = events.next().await {
            match e.payload() {
                EventPayload::ActionRequested(a) => return Ok((**a).clone()),
                p if p.is_terminal() => {
                    return Err(format!(
                        "the run ended ({}) without opening an action",
                        e.kind().as_str()
                    ));
                }
                _ => {}
            }
        }
        Err("the event stream ended without an action".to_owned())
    };
    cancel_unless(handle, bounds.run, "no action was opened", wait).await
}

/// Waits for `wait`, bounded by `bound` (`{missed} within {bound:?}` past it); when it fails,
/// the execution is cancelled.
pub(crate) async fn cancel_unless<T>(
    handle: &ExecutionHandle,
    bound: Duration,
    missed: &str,
    wait: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let waited = tokio::time::timeout(bound, wait)
        .await
        .map_err(|_| format!("{missed} within {bound:?}"))
        .and_then(|r| r);
    if waited.is_err() {
        handle.cancel(harness_core::event::CancelReason::new("conformance bound"));
    }
    waited
}

/// Checks that preflight refuses a request requiring `unusable`, before any runtime exists,
/// within `grace` (the service asks `evaluate` again when the descriptor lets the request
/// through).
pub(crate) async fn check_refused<A: HarnessAdapter>(
    adapter: A,
    request: ExecutionRequest,
    unusable: &[CapabilityKey],
    grace: Duration,
) -> Result<(), String> {
    // Preflight refuses on the descriptor before any provider work (`evaluate` may start
    // an agent): when the descriptor itself rules some of the capabilities out, the refusal
    // must name those; when it declares them all, `evaluate` narrowed them, and the refusal
    // must name them all.
    let by_descriptor: Vec<CapabilityKey> = unusable
        .iter()
        .copied()
        .filter(|k| !adapter.descriptor().capabilities().level(*k).is_usable())
        .collect();
    let must_name = if by_descriptor.is_empty() {
        unusable.to_vec()
    } else {
        by_descriptor
    };
    // The spy counts the runtimes created (to prove "no provider work").
    let spy = Spy::default();
    let adapter = spy.wrap(adapter);
    let layer = PreflightLayer::for_adapter(&adapter)
        .map_err(|e| format!("preflight could not be built: {}", e.message()))?;
    let mut request = request;
    for key in unusable {
        request = request.require(Requirement::new(*key));
    }
    let service = layer.layer(AdapterService::new(adapter));
    let Ok(answer) = tokio::time::timeout(grace, service.oneshot(request)).await else {
        return Err(format!(
            "preflight did not answer within {grace:?} a request requiring {}",
            names(unusable)
        ));
    };
    match answer {
        Ok(handle) => {
            handle.cancel(harness_core::event::CancelReason::new("conformance"));
            Err(format!(
                "declared unsupported but preflight accepted a request requiring {}",
                names(unusable)
            ))
        }
        Err(e) if e.code() != &ErrorCode::CAPABILITY_UNSUPPORTED => Err(format!(
            "preflight refused with {} instead of CAPABILITY_UNSUPPORTED: {}",
            e.code().as_str(),
            e.message()
        )),
        Err(e) => {
            if let Some(missing) = must_name.iter().find(|k| !e.message().contains(k.as_str())) {
                return Err(format!(
                    "preflight's refusal does not name {}: {}",
                    missing.as_str(),
                    e.message()
                ));
            }
            let n = spy.count("create_runtime");
            if n > 0 {
                return Err(format!(
                    "preflight refused, but {n} runtime(s) were created first"
                ));
            }
            Ok(())
        }
    }
}

pub(crate) fn names(keys: &[CapabilityKey]) -> String {
    keys.iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

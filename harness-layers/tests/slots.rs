//! Layers of one's own at named places in `HarnessStack`: each slot sees what its docs say
//! (replays answered above idempotency, refusals above preflight, redacted items in the
//! runtime stack), layers nest in the order given, and the stack's getters and
//! `adapter_builder` keep what it holds.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use harness_core::capability::CapabilityKey;
use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::event::EventPayload;
use harness_core::limits::RunLimits;
use harness_core::service::{ExecutionHandle, ExecutionRequest, Outcome, Segment, ServiceConfig};
use harness_layers::inspect::{InspectLayer, Seen};
use harness_layers::stack::{AdmissionSlot, HarnessStack, RuntimeSlot};
use harness_scripted::{Script, ScriptedAdapter};
use tower::{Layer, Service, ServiceExt};

type Log = Arc<Mutex<Vec<String>>>;

/// Notes its name on each call, then calls the service it wraps.
#[derive(Clone)]
struct Note {
    name: &'static str,
    log: Log,
}

#[derive(Clone)]
struct Noted<S> {
    name: &'static str,
    log: Log,
    inner: S,
}

impl<S> Layer<S> for Note {
    type Service = Noted<S>;
    fn layer(&self, inner: S) -> Noted<S> {
        Noted {
            name: self.name,
            log: Arc::clone(&self.log),
            inner,
        }
    }
}

impl<S, R> Service<R> for Noted<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, request: R) -> S::Future {
        self.log.lock().unwrap().push(self.name.to_owned());
        self.inner.call(request)
    }
}

fn note(name: &'static str, log: &Log) -> Note {
    Note {
        name,
        log: Arc::clone(log),
    }
}

/// Refuses every request that reaches it.
#[derive(Clone)]
struct Refuse;

#[derive(Clone)]
struct Refusing;

impl<S> Layer<S> for Refuse {
    type Service = Refusing;
    fn layer(&self, _inner: S) -> Refusing {
        Refusing
    }
}

impl Service<ExecutionRequest> for Refusing {
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = Pin<Box<dyn Future<Output = Result<ExecutionHandle, HarnessError>> + Send>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _request: ExecutionRequest) -> Self::Future {
        Box::pin(async {
            Err(HarnessError::new(
                ErrorCategory::Throttled,
                "refused by the user's layer",
            ))
        })
    }
}

fn taken() -> Vec<String> {
    Vec::new()
}

#[tokio::test]
async fn admission_slots_nest_in_order_and_see_what_their_docs_say() {
    let adapter = ScriptedAdapter::new(Script::builder().text("hi").complete("ok").build());
    let log = Log::default();
    let stack = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .admission_layer(AdmissionSlot::BelowCapacity, note("below capacity", &log))
        .admission_layer(AdmissionSlot::BelowPreflight, note("below preflight", &log))
        .admission_layer(
            AdmissionSlot::BelowIdempotency,
            note("below idempotency", &log),
        )
        .admission_layer(AdmissionSlot::BelowMetrics, note("below metrics", &log))
        .admission_layer(AdmissionSlot::BelowTrace, note("below trace", &log))
        .admission_layer(AdmissionSlot::Outermost, note("outermost 1", &log))
        .admission_layer(AdmissionSlot::Outermost, note("outermost 2", &log));
    let service = stack.service(adapter);

    let key: harness_core::id::IdempotencyKey = "same-key".parse().unwrap();
    let first = service
        .clone()
        .oneshot(ExecutionRequest::new("go").with_idempotency_key(key.clone()))
        .await
        .unwrap();
    assert!(matches!(first.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(
        std::mem::replace(&mut *log.lock().unwrap(), taken()),
        [
            "outermost 1",
            "outermost 2",
            "below trace",
            "below metrics",
            "below idempotency",
            "below preflight",
            "below capacity"
        ],
        "outermost first, two at one slot in the order given"
    );

    // A replay is answered by idempotency: nothing below it is called.
    let replay = service
        .clone()
        .oneshot(ExecutionRequest::new("go").with_idempotency_key(key))
        .await
        .unwrap();
    assert!(replay.is_replay());
    assert_eq!(
        std::mem::replace(&mut *log.lock().unwrap(), taken()),
        ["outermost 1", "outermost 2", "below trace", "below metrics"]
    );

    // A request the adapter cannot take is refused by preflight: nothing below it is called.
    let refused = service
        .clone()
        .oneshot(ExecutionRequest::new("go").require(CapabilityKey::Skills))
        .await
        .unwrap_err();
    assert_eq!(
        refused.category(),
        ErrorCategory::Configuration,
        "{refused}"
    );
    assert_eq!(
        std::mem::replace(&mut *log.lock().unwrap(), taken()),
        [
            "outermost 1",
            "outermost 2",
            "below trace",
            "below metrics",
            "below idempotency"
        ]
    );
}

#[tokio::test]
async fn a_refusing_layer_below_preflight_sees_only_what_preflight_let_through() {
    let adapter = ScriptedAdapter::quickstart();
    let service = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .admission_layer(AdmissionSlot::BelowPreflight, Refuse)
        .service(adapter);
    // Preflight answers first for what it refuses.
    let err = service
        .clone()
        .oneshot(ExecutionRequest::new("go").require(CapabilityKey::Skills))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Configuration, "{err}");
    // The rest reaches the user's layer.
    let err = service
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Throttled, "{err}");
}

/// Waits a second before calling the service it wraps.
#[derive(Clone)]
struct Slow;

#[derive(Clone)]
struct Slowed<S>(S);

impl<S> Layer<S> for Slow {
    type Service = Slowed<S>;
    fn layer(&self, inner: S) -> Slowed<S> {
        Slowed(inner)
    }
}

impl<S> Service<ExecutionRequest> for Slowed<S>
where
    S: Service<ExecutionRequest, Response = ExecutionHandle, Error = HarnessError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = ExecutionHandle;
    type Error = HarnessError;
    type Future = Pin<Box<dyn Future<Output = Result<ExecutionHandle, HarnessError>> + Send>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), HarnessError>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, request: ExecutionRequest) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            inner.oneshot(request).await
        })
    }
}

#[tokio::test]
async fn tower_middleware_at_a_slot_is_classified() {
    let adapter = ScriptedAdapter::quickstart();
    // tower's timeout at the outermost slot over a slow layer at the innermost: its
    // `Elapsed` reaches the caller as a typed `timeout`.
    let service = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .admission_layer(AdmissionSlot::BelowCapacity, Slow)
        .admission_layer(
            AdmissionSlot::Outermost,
            tower::timeout::TimeoutLayer::new(Duration::from_millis(20)),
        )
        .service(adapter);
    let err = service
        .oneshot(ExecutionRequest::new("go"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::Timeout, "{err}");
}

#[tokio::test]
async fn runtime_slots_nest_in_order_and_see_only_redacted_items() {
    let secret = "sk-live-0123456789abcdefghij";
    let adapter = ScriptedAdapter::new(
        Script::builder()
            .text(format!("the key is {secret} ok"))
            .complete("ok")
            .build(),
    );
    let log = Log::default();
    let seen = Arc::new(Mutex::new(String::new()));
    let mirror = {
        let seen = Arc::clone(&seen);
        InspectLayer::new(move |_: &Segment| {
            let seen = Arc::clone(&seen);
            move |item: Seen<'_>| {
                if let Seen::Item(item) = item {
                    seen.lock().unwrap().push_str(&format!("{item:?}"));
                }
            }
        })
    };
    let service = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .runtime_layer(RuntimeSlot::BelowShutdown, note("below shutdown", &log))
        .runtime_layer(RuntimeSlot::BelowShutdown, mirror)
        .runtime_layer(RuntimeSlot::BelowTimeout, note("below timeout", &log))
        .runtime_layer(RuntimeSlot::BelowRetry, note("below retry", &log))
        .runtime_layer(RuntimeSlot::Outermost, note("outermost", &log))
        .service(adapter);
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(
        *log.lock().unwrap(),
        [
            "outermost",
            "below retry",
            "below timeout",
            "below shutdown"
        ]
    );
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains("the key is"), "{seen}");
    assert!(
        !seen.contains(secret),
        "the closest slot is above redaction: {seen}"
    );
    let text: String = execution
        .events(Default::default())
        .filter_map(|e| async move {
            match e.payload() {
                EventPayload::MessageDelta(d) => Some(d.text.clone()),
                _ => None,
            }
        })
        .collect::<Vec<_>>()
        .await
        .concat();
    assert!(
        text.contains("the key is") && !text.contains(secret),
        "{text}"
    );
}

#[tokio::test]
async fn the_stack_says_what_it_holds_and_a_hand_built_service_keeps_it() {
    let adapter = ScriptedAdapter::new(Script::builder().text("a").text("b").text("c").build());
    let limits = RunLimits::none().with_max_events(4).unwrap();
    let config = ServiceConfig::default();
    let stack = HarnessStack::defaults_for(&adapter)
        .unwrap()
        .limits(limits)
        .config(config);
    assert_eq!(stack.run_limits(), &limits);
    assert_eq!(stack.service_config(), &config);
    assert!(stack.tool_set().is_none());
    assert!(stack.file_workspace().is_none());
    assert_eq!(
        stack.input_file_limits(),
        &harness_core::file::FileLimits::default()
    );
    // Rebuilt by hand with one more layer, the run limits still hold: 4 events, no more.
    let log = Log::default();
    let inner = stack
        .adapter_builder(adapter)
        .layer(note("hand-built", &log))
        .build();
    let service = tower::Layer::layer(stack.admission(), inner);
    let execution = service.oneshot(ExecutionRequest::new("go")).await.unwrap();
    let Outcome::Failed(err) = execution.outcome().await else {
        panic!("the event limit should end the run");
    };
    assert!(err.to_string().contains("events"), "{err}");
    assert_eq!(*log.lock().unwrap(), ["hand-built"]);
}

//! Tools that run: handles under policy (approval, deadline, retries, cancellation, output
//! bound), tool sets and providers (selection, partial availability, caller credentials),
//! and the service handing them to runtimes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness_core::action::{ActionKind, ActionRequest, ApprovalRequest};
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, HarnessHealth, ResumeDecision, RunContext, Simple,
    SimpleAdapter,
};
use harness_core::capability::{CapabilityKey, CapabilityReport, SupportLevel};
use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use harness_core::event::{
    Content, EventPayload, RunSucceeded, ToolCall, ToolCallCompleted, ToolCallOutcome,
};
use harness_core::id::{Cursor, ExecutionId, ToolCallId};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
use harness_core::tool::{
    Approved, BoxFuture, CallerCredentials, Credential, FnTool, PortableTool, ProvidedTool,
    ToolAnnotations, ToolCallContext, ToolDescriptor, ToolHandle, ToolId, ToolOutcome, ToolPolicy,
    ToolProvider, ToolScope, ToolSet,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn id(s: &str) -> ToolId {
    s.parse().unwrap()
}

fn ctx() -> ToolCallContext {
    ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate())
}

fn failure_code(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Failure(f) => f.code().as_str().to_owned(),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Echo {
    text: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Sleep {
    ms: u64,
}

/// A tool that counts its calls and its dropped (cancelled) calls.
#[derive(Default)]
struct Counters {
    calls: AtomicUsize,
    dropped: AtomicUsize,
}

struct DropGuard(Arc<Counters>, bool);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn sleeper(counters: &Arc<Counters>) -> impl PortableTool + 'static {
    let counters = Arc::clone(counters);
    FnTool::new(id("demo.sleep"), "Sleeps.", move |s: Sleep, _| {
        let counters = Arc::clone(&counters);
        async move {
            counters.calls.fetch_add(1, Ordering::SeqCst);
            let mut guard = DropGuard(counters, false);
            tokio::time::sleep(Duration::from_millis(s.ms)).await;
            guard.1 = true;
            Ok::<_, String>(json!({"slept": s.ms}))
        }
    })
    .unwrap()
}

fn echo() -> impl PortableTool + 'static {
    FnTool::new(id("demo.echo"), "Echoes.", |e: Echo, _| async move {
        Ok::<_, String>(json!({"echo": e.text}))
    })
    .unwrap()
}

/// Fails retryably `fail` times, then succeeds.
struct Flaky {
    descriptor: ToolDescriptor,
    calls: Arc<AtomicUsize>,
    fail: usize,
}

impl PortableTool for Flaky {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }
    fn invoke(&self, _: Value, _: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if n < self.fail {
                ToolOutcome::Failure(
                    harness_core::tool::BoundedFailure::new("busy").with_retryable(true),
                )
            } else {
                ToolOutcome::Success(json!({"attempt": n + 1}))
            }
        })
    }
}

fn flaky(idempotent: bool, fail: usize) -> (Flaky, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let descriptor = ToolDescriptor::new(id("demo.flaky"), "Flaky.", json!({"type": "object"}))
        .unwrap()
        .with_annotations(ToolAnnotations::default().with_idempotent(idempotent));
    (
        Flaky {
            descriptor,
            calls: Arc::clone(&calls),
            fail,
        },
        calls,
    )
}

// ---------------------------------------------------------------------------------------------
// The handle under policy
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_deadline_stops_a_running_call_and_drops_its_future() {
    let counters = Arc::new(Counters::default());
    let handle = ToolHandle::new(Arc::new(sleeper(&counters)))
        .with_policy(ToolPolicy::new().deadline(Duration::from_millis(50)))
        .unwrap();
    let started = Instant::now();
    let outcome = handle.invoke(json!({"ms": 60_000}), ctx()).await;
    assert_eq!(failure_code(&outcome), "TOOL_DEADLINE_EXCEEDED");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the call was not cut"
    );
    assert_eq!(counters.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        counters.dropped.load(Ordering::SeqCst),
        1,
        "the tool's future was not dropped"
    );
    // Within the deadline, the call completes.
    let outcome = handle.invoke(json!({"ms": 1}), ctx()).await;
    assert_eq!(outcome, ToolOutcome::Success(json!({"slept": 1})));
}

#[tokio::test]
async fn cancelling_the_execution_stops_a_call_in_flight_and_refuses_later_ones() {
    let counters = Arc::new(Counters::default());
    let token = CancellationToken::new();
    let handle = ToolHandle::new(Arc::new(sleeper(&counters))).cancelled_by(token.clone());
    let call = tokio::spawn({
        let handle = handle.clone();
        async move { handle.invoke(json!({"ms": 60_000}), ctx()).await }
    });
    while counters.calls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    token.cancel();
    let outcome = call.await.unwrap();
    assert_eq!(failure_code(&outcome), "TOOL_CANCELLED");
    assert_eq!(counters.dropped.load(Ordering::SeqCst), 1);
    let later = handle.invoke(json!({"ms": 1}), ctx()).await;
    assert_eq!(failure_code(&later), "TOOL_CANCELLED");
    assert_eq!(
        counters.calls.load(Ordering::SeqCst),
        1,
        "a call after the cancel ran"
    );
}

#[tokio::test]
async fn retries_repeat_only_retryable_failures_of_idempotent_tools() {
    let (tool, calls) = flaky(true, 2);
    let handle = ToolHandle::new(Arc::new(tool))
        .with_policy(ToolPolicy::new().retries(3))
        .unwrap();
    assert_eq!(
        handle.invoke(json!({}), ctx()).await,
        ToolOutcome::Success(json!({"attempt": 3}))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // Out of retries: the last failure is the outcome.
    let (tool, calls) = flaky(true, 10);
    let handle = ToolHandle::new(Arc::new(tool))
        .with_policy(ToolPolicy::new().retries(1))
        .unwrap();
    assert_eq!(
        failure_code(&handle.invoke(json!({}), ctx()).await),
        "TOOL_FAILED"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // A tool that is not idempotent refuses a retrying policy, and is tried once.
    let (tool, calls) = flaky(false, 1);
    let tool: Arc<dyn PortableTool> = Arc::new(tool);
    let err = ToolHandle::new(Arc::clone(&tool))
        .with_policy(ToolPolicy::new().retries(1))
        .unwrap_err();
    assert!(err.to_string().contains("idempotent"), "{err}");
    let handle = ToolHandle::new(tool);
    assert_eq!(
        failure_code(&handle.invoke(json!({}), ctx()).await),
        "TOOL_FAILED"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_output_over_the_limit_fails_instead_of_reaching_the_adapter() {
    let big = FnTool::new(id("demo.big"), "Big.", |e: Echo, _| async move {
        Ok::<_, String>(e.text.repeat(1000))
    })
    .unwrap();
    let handle = ToolHandle::new(Arc::new(big))
        .with_policy(ToolPolicy::new().max_output_bytes(1001))
        .unwrap();
    let outcome = handle.invoke(json!({"text": "x"}), ctx()).await;
    assert_eq!(failure_code(&outcome), "TOOL_OUTPUT_TOO_LARGE");
    let ToolOutcome::Failure(f) = outcome else {
        unreachable!()
    };
    assert!(f.message().contains("1001"), "{}", f.message());
    // Exactly at the limit passes: 1,000 bytes of text and its two quotes.
    let handle = handle
        .with_policy(ToolPolicy::new().max_output_bytes(1002))
        .unwrap();
    assert!(
        handle
            .invoke(json!({"text": "x"}), ctx())
            .await
            .is_success()
    );
}

/// Answers the approval `request` with `decide`, validated as the service would.
fn decided(
    request: &ActionRequest,
    response: harness_core::action::ActionResponse,
) -> ResumeDecision {
    ResumeDecision::new(request.validate(response).expect("a valid answer"))
}

#[tokio::test]
async fn an_approval_policy_opens_an_action_and_runs_only_what_the_caller_approved() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = {
        let runs = Arc::clone(&runs);
        FnTool::new(id("files.write"), "Writes.", move |e: Echo, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(json!({"wrote": e.text})) }
        })
        .unwrap()
    };
    let handle = ToolHandle::new(Arc::new(counted))
        .with_policy(ToolPolicy::new().needs_approval())
        .unwrap();
    assert!(handle.requires_approval());
    let call = ctx();
    let ToolOutcome::Action(request) = handle.invoke(json!({"text": "a"}), call.clone()).await
    else {
        panic!("expected an action")
    };
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the tool ran before its approval"
    );
    let ActionKind::ToolApproval(approval) = &request.kind else {
        panic!("expected a tool approval")
    };
    assert_eq!(approval.calls()[0].tool(), "files.write");

    // Approved: runs with the proposed arguments.
    let decision = decided(&request, request.approve_all());
    let Ok(Approved::Run {
        invocation,
        arguments,
        edited,
    }) = handle.invoke_approved(&decision, call.clone())
    else {
        panic!("expected a run")
    };
    assert_eq!((arguments, edited), (json!({"text": "a"}), false));
    assert_eq!(
        invocation.await,
        ToolOutcome::Success(json!({"wrote": "a"}))
    );

    // Edited: runs with the caller's arguments, never the adapter's.
    let decision = decided(&request, request.edit(&call.call_id, json!({"text": "b"})));
    let Ok(Approved::Run {
        invocation, edited, ..
    }) = handle.invoke_approved(&decision, call.clone())
    else {
        panic!("expected a run")
    };
    assert!(edited);
    assert_eq!(
        invocation.await,
        ToolOutcome::Success(json!({"wrote": "b"}))
    );

    // Rejected and dismissed: nothing runs.
    let decision = decided(&request, request.reject(&call.call_id, "not now"));
    assert!(matches!(
        handle.invoke_approved(&decision, call.clone()),
        Ok(Approved::Rejected { reason: Some(r) }) if r == "not now"
    ));
    let decision = decided(&request, request.dismiss());
    assert!(matches!(
        handle.invoke_approved(&decision, call.clone()),
        Ok(Approved::Rejected { .. })
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // A decision about another call, or another tool's call, runs nothing.
    let decision = decided(&request, request.approve_all());
    assert!(handle.invoke_approved(&decision, ctx()).is_err());
    let other = ToolHandle::new(Arc::new(echo()));
    assert!(other.invoke_approved(&decision, call).is_err());
}

// ---------------------------------------------------------------------------------------------
// Tool sets and providers
// ---------------------------------------------------------------------------------------------

/// A provider offering `<name>.echo` and `<name>.whoami` (which returns the credential it was
/// given, as an echoing server would), or failing to list.
struct Server {
    name: &'static str,
    up: bool,
    listed: Arc<AtomicUsize>,
    foreign: bool,
}

impl Server {
    fn new(name: &'static str, up: bool) -> Self {
        Self {
            name,
            up,
            listed: Arc::default(),
            foreign: false,
        }
    }
}

struct Whoami {
    descriptor: ToolDescriptor,
    credential: Option<Credential>,
}

impl PortableTool for Whoami {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }
    fn invoke(&self, _: Value, _: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        let seen = self.credential.as_ref().map(|c| c.expose().to_owned());
        Box::pin(async move {
            match seen {
                Some(token) => ToolOutcome::Success(
                    json!({"token": token, "note": format!("you are {token}")}),
                ),
                None => ToolOutcome::failure("no token"),
            }
        })
    }
}

impl ToolProvider for Server {
    fn name(&self) -> &str {
        self.name
    }

    fn tools(&self, scope: ToolScope) -> BoxFuture<'_, Result<Vec<ProvidedTool>, HarnessError>> {
        self.listed.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if !self.up {
                return Err(HarnessError::new(
                    ErrorCategory::Unavailable,
                    format!("tool server `{}` refused the connection", self.name),
                )
                .with_diagnostic("connect ECONNREFUSED 127.0.0.1:9"));
            }
            let echo_id = id(&format!(
                "{}.echo",
                if self.foreign { "elsewhere" } else { self.name }
            ));
            let echo = FnTool::new(echo_id, "Echoes.", |e: Echo, _| async move {
                Ok::<_, String>(e.text)
            })
            .unwrap();
            let whoami = Whoami {
                descriptor: ToolDescriptor::new(
                    id(&format!("{}.whoami", self.name)),
                    match &scope.credential {
                        Some(c) => format!("Says who you are ({}).", c.expose()),
                        None => "Says who you are.".to_owned(),
                    },
                    json!({"type": "object"}),
                )
                .unwrap(),
                credential: scope.credential.clone(),
            };
            Ok(vec![
                ProvidedTool::new(Arc::new(echo), ToolPolicy::new()),
                ProvidedTool::new(Arc::new(whoami), ToolPolicy::new()),
            ])
        })
    }

    fn health(&self) -> BoxFuture<'_, HarnessHealth> {
        Box::pin(async move {
            if self.up {
                HarnessHealth::ready()
            } else {
                HarnessHealth::not_ready(format!("tool server `{}` is not reachable", self.name))
            }
        })
    }
}

/// A provider that keeps the default health.
struct Plain;

impl ToolProvider for Plain {
    fn name(&self) -> &str {
        "plain"
    }
    fn tools(&self, _: ToolScope) -> BoxFuture<'_, Result<Vec<ProvidedTool>, HarnessError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

fn ids(handles: &[ToolHandle]) -> Vec<&str> {
    handles.iter().map(|h| h.id().as_str()).collect()
}

#[tokio::test]
async fn a_set_refuses_clashes_and_checks_selections() {
    let set = ToolSet::new().tool(echo()).unwrap();
    assert!(
        set.clone().tool(echo()).is_err(),
        "a duplicate tool was taken"
    );
    let err = set
        .clone()
        .provider(Server::new("demo", true))
        .err()
        .unwrap();
    assert!(err.to_string().contains("clashes"), "{err}");
    assert!(set.clone().provider(Server::new("Bad", true)).is_err());
    let set = set.provider(Server::new("srv", true)).unwrap();

    set.check_selection(&[id("demo.echo"), id("srv"), id("srv.anything")])
        .unwrap();
    let err = set
        .check_selection(&[id("demo.nope"), id("other")])
        .unwrap_err();
    assert_eq!(*err.code(), ErrorCode::TOOL_NOT_FOUND);
    assert_eq!(err.category(), ErrorCategory::Configuration);
    for named in ["demo.nope", "other", "demo.echo", "srv"] {
        assert!(err.message().contains(named), "{}", err.message());
    }
}

#[tokio::test]
async fn one_provider_down_leaves_the_others_and_is_reported() {
    let set = ToolSet::new()
        .tool(echo())
        .unwrap()
        .provider(Server::new("up", true))
        .unwrap()
        .provider(Server::new("down", false))
        .unwrap();
    let token = CancellationToken::new();
    let resolved = set
        .resolve(None, &ExecutionId::generate(), None, &token)
        .await;
    assert_eq!(
        ids(&resolved.handles),
        ["demo.echo", "up.echo", "up.whoami"]
    );
    assert_eq!(resolved.unavailable.len(), 1);
    let down = &resolved.unavailable[0];
    assert_eq!(down.source, "down");
    assert_eq!(down.error.category, ErrorCategory::Unavailable);
    assert!(down.error.message.contains("refused"), "{:?}", down.error);
    // The diagnostic stays private.
    assert!(
        !serde_json::to_string(down)
            .unwrap()
            .contains("ECONNREFUSED")
    );
}

#[tokio::test]
async fn a_sets_health_is_its_providers_and_names_each_one_down() {
    assert!(ToolSet::new().tool(echo()).unwrap().health().await.ready);
    let up = ToolSet::new()
        .provider(Server::new("up", true))
        .unwrap()
        .provider(Plain)
        .unwrap();
    assert!(up.health().await.ready, "the default health is ready");
    let set = up
        .provider(Server::new("down", false))
        .unwrap()
        .provider(Server::new("gone", false))
        .unwrap();
    let health = set.health().await;
    assert!(!health.ready);
    assert_eq!(
        health.reason.as_deref(),
        Some("tool server `down` is not reachable; tool server `gone` is not reachable")
    );
    // Checking health lists no tools (nothing is started or connected).
    let probed = Server::new("counted", true);
    let listed = Arc::clone(&probed.listed);
    assert!(
        ToolSet::new()
            .provider(probed)
            .unwrap()
            .health()
            .await
            .ready
    );
    assert_eq!(listed.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_selection_asks_only_the_providers_it_names() {
    let down = Server::new("down", false);
    let listed = Arc::clone(&down.listed);
    let set = ToolSet::new()
        .tool(echo())
        .unwrap()
        .provider(Server::new("up", true))
        .unwrap()
        .provider(down)
        .unwrap();
    let token = CancellationToken::new();
    let selection = [id("up.echo"), id("up.missing"), id("demo.echo")];
    let resolved = set
        .resolve(Some(&selection), &ExecutionId::generate(), None, &token)
        .await;
    assert_eq!(ids(&resolved.handles), ["demo.echo", "up.echo"]);
    assert_eq!(
        listed.load(Ordering::SeqCst),
        0,
        "an unselected provider was asked"
    );
    assert_eq!(resolved.unavailable.len(), 1);
    assert_eq!(resolved.unavailable[0].tools, ["up.missing"]);
    assert_eq!(
        resolved.unavailable[0].error.code,
        ErrorCode::TOOL_NOT_FOUND
    );

    let none = set
        .resolve(Some(&[]), &ExecutionId::generate(), None, &token)
        .await;
    assert!(none.handles.is_empty() && none.unavailable.is_empty());
}

#[tokio::test]
async fn a_provider_offering_tools_outside_its_namespace_is_refused_for_those() {
    let mut server = Server::new("srv", true);
    server.foreign = true;
    let set = ToolSet::new().provider(server).unwrap();
    let token = CancellationToken::new();
    let resolved = set
        .resolve(None, &ExecutionId::generate(), None, &token)
        .await;
    assert_eq!(ids(&resolved.handles), ["srv.whoami"]);
    assert_eq!(resolved.unavailable[0].tools, ["elsewhere.echo"]);
}

#[tokio::test]
async fn a_caller_credential_reaches_only_its_provider_and_is_scrubbed_from_what_returns() {
    const TOKEN: &str = "caller-token-5f1d0c9e";
    let set = ToolSet::new()
        .provider(Server::new("mine", true))
        .unwrap()
        .provider(Server::new("theirs", true))
        .unwrap();
    let credentials = CallerCredentials::new().with("mine", Credential::new(TOKEN));
    let token = CancellationToken::new();
    let resolved = set
        .resolve(None, &ExecutionId::generate(), Some(&credentials), &token)
        .await;
    let handle = |name: &str| {
        resolved
            .handles
            .iter()
            .find(|h| h.id().as_str() == name)
            .unwrap()
    };
    let mine = handle("mine.whoami");
    // The provider used it (the call succeeded), but nothing the adapter sees holds it.
    let outcome = mine.invoke(json!({}), ctx()).await;
    let ToolOutcome::Success(output) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(output["token"], "[REDACTED:secret]");
    assert_eq!(output["note"], "you are [REDACTED:secret]");
    assert!(!mine.descriptor().description().contains(TOKEN));
    assert!(!format!("{:?}", resolved.handles).contains(TOKEN));
    // The other provider got none.
    let theirs = handle("theirs.whoami").invoke(json!({}), ctx()).await;
    assert_eq!(failure_code(&theirs), "TOOL_FAILED");
}

// ---------------------------------------------------------------------------------------------
// The service hands tools to runtimes
// ---------------------------------------------------------------------------------------------

/// Runs the calls listed in the request's client context (`calls: [{tool, arguments}]`)
/// through the execution's handles: those needing approval in one action, then on resume
/// as decided. Declares `tool.builtin` (or not).
struct Runner {
    descriptor: HarnessDescriptor,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Runner {
    fn new(builtin: bool) -> Self {
        let level = if builtin {
            SupportLevel::Native
        } else {
            SupportLevel::Unsupported
        };
        let descriptor = HarnessDescriptor::builder("runner".parse().unwrap(), "0.1.0")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .capabilities(
                CapabilityReport::new()
                    .with(
                        CapabilityKey::ToolBuiltin,
                        harness_core::capability::Capability::new(level)
                            .with_constraint(harness_core::capability::PORTABLE_TOOLS, true),
                    )
                    // It relays the approvals tools' policies ask for, several calls in one
                    // action: declarations bind, so it declares what it does.
                    .with(
                        CapabilityKey::InterruptToolApproval,
                        harness_core::capability::Capability::native(),
                    )
                    .with(
                        CapabilityKey::InterruptMultiTool,
                        harness_core::capability::Capability::native(),
                    ),
            )
            .build()
            .unwrap();
        Self {
            descriptor,
            seen: Arc::default(),
        }
    }
}

impl Describe for Runner {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

fn call_of(value: &Value, n: usize) -> (ToolCallId, String, Value) {
    (
        format!("call_{n}").parse().unwrap(),
        value["tool"].as_str().unwrap_or_default().to_owned(),
        value["arguments"].clone(),
    )
}

fn completed(call_id: ToolCallId, outcome: ToolOutcome) -> EventResult {
    let outcome = match outcome {
        ToolOutcome::Success(output) => ToolCallOutcome::Success { output },
        ToolOutcome::Failure(f) => ToolCallOutcome::Failure {
            message: f.message().to_owned(),
        },
        ToolOutcome::Action(_) => ToolCallOutcome::Failure {
            message: "nested action".to_owned(),
        },
    };
    Ok(AdapterEvent::Content(Content::ToolCallCompleted(
        ToolCallCompleted { call_id, outcome },
    )))
}

impl SimpleAdapter for Runner {
    fn stream(&self, run: RunContext) -> BoxStream<'static, EventResult> {
        *self.seen.lock().unwrap() = run
            .context
            .tools
            .iter()
            .map(|h| h.id().to_string())
            .collect();
        Box::pin(async_stream(run))
    }
}

fn async_stream(run: RunContext) -> impl futures_util::Stream<Item = EventResult> + Send {
    futures_util::stream::once(async move {
        let calls = run
            .turn
            .client_context
            .get("calls")
            .cloned()
            .unwrap_or_default();
        let calls = calls.as_array().cloned().unwrap_or_default();
        let handle = |name: &str| {
            run.context
                .tools
                .iter()
                .find(|h| h.id().as_str() == name)
                .cloned()
        };
        let mut out: Vec<EventResult> = Vec::new();
        let mut approvals = Vec::new();
        for (n, call) in calls.iter().enumerate() {
            let (call_id, tool, arguments) = call_of(call, n);
            let ctx = ToolCallContext::new(call_id.clone(), run.context.execution_id.clone());
            let Some(handle) = handle(&tool) else {
                out.push(completed(
                    call_id,
                    ToolOutcome::failure(format!("no tool {tool}")),
                ));
                continue;
            };
            match &run.resume {
                None => {
                    out.push(Ok(AdapterEvent::Content(Content::ToolCallStarted(
                        ToolCall {
                            call_id: call_id.clone(),
                            tool: tool.clone(),
                            arguments: arguments.clone(),
                        },
                    ))));
                    if handle.requires_approval() {
                        approvals.push(handle.approval_call(call_id, arguments).unwrap());
                    } else {
                        out.push(completed(call_id, handle.invoke(arguments, ctx).await));
                    }
                }
                Some(decision) if handle.requires_approval() => {
                    match handle.invoke_approved(decision, ctx) {
                        Ok(Approved::Run { invocation, .. }) => {
                            out.push(completed(call_id, invocation.await));
                        }
                        Ok(Approved::Rejected { reason }) => out.push(Ok(AdapterEvent::Content(
                            Content::ToolCallCompleted(ToolCallCompleted {
                                call_id,
                                outcome: ToolCallOutcome::Rejected { reason },
                            }),
                        ))),
                        Err(e) => out.push(Err(HarnessError::new(
                            ErrorCategory::Protocol,
                            e.to_string(),
                        ))),
                    }
                }
                Some(_) => {}
            }
        }
        if approvals.is_empty() {
            out.push(Ok(AdapterEvent::Completed(RunSucceeded::default())));
        } else {
            let request = ActionRequest::approval(ApprovalRequest::new(approvals).unwrap());
            out.push(Ok(AdapterEvent::Action(request)));
        }
        futures_util::stream::iter(out)
    })
    .flatten()
}

fn runner_service(
    builtin: bool,
    tools: ToolSet,
) -> (
    AdapterService<Simple<Runner>>,
    Arc<std::sync::Mutex<Vec<String>>>,
) {
    let runner = Runner::new(builtin);
    let seen = Arc::clone(&runner.seen);
    (
        AdapterService::builder(Simple::new(runner))
            .tools(tools)
            .build(),
        seen,
    )
}

fn request(calls: Value) -> ExecutionRequest {
    let mut request = ExecutionRequest::new("use the tools");
    request.client_context.insert("calls".to_owned(), calls);
    request
}

async fn payloads(execution: &harness_core::service::ExecutionHandle) -> Vec<EventPayload> {
    execution
        .events(Cursor::START)
        .map(|e| e.payload().clone())
        .collect()
        .await
}

#[tokio::test]
async fn runtimes_get_the_services_tools_and_the_log_reports_what_is_unavailable() {
    let tools = ToolSet::new()
        .tool(echo())
        .unwrap()
        .tool_with_policy(
            FnTool::new(id("files.delete"), "Deletes.", |e: Echo, _| async move {
                Ok::<_, String>(format!("deleted {}", e.text))
            })
            .unwrap(),
            ToolPolicy::new().needs_approval(),
        )
        .unwrap()
        .provider(Server::new("down", false))
        .unwrap();
    let (service, seen) = runner_service(true, tools);
    let execution = service
        .start(request(json!([
            {"tool": "demo.echo", "arguments": {"text": "hi"}},
            {"tool": "files.delete", "arguments": {"text": "notes.md"}},
        ])))
        .await
        .unwrap();
    // Pauses on the approval of the one call that needs it; the other already ran.
    let action = loop {
        if let Some(action) = execution.pending_actions().pop() {
            break action;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(*seen.lock().unwrap(), ["demo.echo", "files.delete"]);
    execution
        .respond(action.edit(&"call_1".parse().unwrap(), json!({"text": "draft.md"})))
        .await
        .unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    let log = payloads(&execution).await;
    let kinds: Vec<&str> = log.iter().map(|p| p.kind().as_str()).collect();
    assert_eq!(
        kinds,
        [
            "run.queued",
            "run.starting",
            "run.running",
            "tool.unavailable",
            "tool.call.started",
            "tool.call.completed",
            "tool.call.started",
            "action.requested",
            "run.awaiting_approval",
            "action.resolved",
            "run.running",
            "tool.call.completed",
            "run.succeeded"
        ]
    );
    let EventPayload::ToolUnavailable(down) = &log[3] else {
        unreachable!()
    };
    assert_eq!(down.source, "down");
    let outputs: Vec<&ToolCallOutcome> = log
        .iter()
        .filter_map(|p| match p {
            EventPayload::ToolCallCompleted(c) => Some(&c.outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        outputs,
        [
            &ToolCallOutcome::Success {
                output: json!({"echo": "hi"})
            },
            // The caller's edit is what ran.
            &ToolCallOutcome::Success {
                output: json!("deleted draft.md")
            },
        ]
    );
}

#[tokio::test]
async fn a_request_selects_tools_and_is_refused_for_unknown_ones_or_an_adapter_without_tools() {
    let tools = || {
        ToolSet::new()
            .tool(echo())
            .unwrap()
            .provider(Server::new("srv", true))
            .unwrap()
    };
    let (service, seen) = runner_service(true, tools());
    let execution = service
        .start(request(json!([])).with_tools([id("srv.whoami")]))
        .await
        .unwrap();
    assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
    assert_eq!(*seen.lock().unwrap(), ["srv.whoami"]);

    let err = service
        .start(request(json!([])).with_tools([id("demo.echo"), id("nope.tool")]))
        .await
        .unwrap_err();
    assert_eq!(*err.code(), ErrorCode::TOOL_NOT_FOUND);
    assert!(err.message().contains("nope.tool"), "{}", err.message());

    // An adapter that runs no portable tools refuses a request selecting some, and takes
    // one that selects none.
    let (service, _) = runner_service(false, tools());
    let err = service
        .start(request(json!([])).with_tools([id("demo.echo")]))
        .await
        .unwrap_err();
    assert_eq!(*err.code(), ErrorCode::CAPABILITY_UNSUPPORTED);
    assert!(err.message().contains("portableTools"), "{}", err.message());
    service.start(request(json!([]))).await.unwrap();

    // The selection is part of the wire request.
    let wire: ExecutionRequest =
        serde_json::from_value(json!({"message": "m", "tools": ["demo.echo", "srv"]})).unwrap();
    assert_eq!(wire.tools.unwrap().len(), 2);
    let bad =
        serde_json::from_value::<ExecutionRequest>(json!({"message": "m", "tools": ["Bad Id"]}));
    assert!(bad.unwrap_err().to_string().contains("tool id"));
}

#[tokio::test]
async fn cancelling_an_execution_stops_its_tool_call() {
    let counters = Arc::new(Counters::default());
    let (service, _) = runner_service(true, ToolSet::new().tool(sleeper(&counters)).unwrap());
    let execution = service
        .start(request(
            json!([{"tool": "demo.sleep", "arguments": {"ms": 60_000}}]),
        ))
        .await
        .unwrap();
    while counters.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    execution.cancel(harness_core::event::CancelReason::from_source(
        harness_core::event::CancelSource::Caller,
    ));
    assert!(matches!(execution.outcome().await, Outcome::Cancelled(_)));
    assert_eq!(
        counters.dropped.load(Ordering::SeqCst),
        1,
        "the call was not stopped"
    );
}

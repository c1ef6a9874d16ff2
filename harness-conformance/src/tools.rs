//! The suite's own tools, for adapters that run the execution's portable tools
//! ([`runs_portable_tools`](harness_core::capability::CapabilityReport::runs_portable_tools)):
//! real [`PortableTool`]s and [`ToolProvider`]s the suite offers every execution it starts on
//! such an adapter, and whose calls it counts, so that a tool fixture passes only when the
//! tool really ran (with the arguments the caller approved or edited), or really did not.
//!
//! An adapter's knobs make the model call them (a model-loop adapter's mock server scripted
//! to call [`ECHO`] with [`arguments`]`(ECHO)`, say); [`provider_name`] is the name the
//! model knows each tool by.
//!
//! | tool | arguments | what it does |
//! |---|---|---|
//! | [`ECHO`] | `{"text": "ping"}` | returns `{"echo": <text>}` |
//! | [`FAIL`] | `{}` | fails with [`FAIL_MESSAGE`] |
//! | [`GATED`] (its policy needs approval) | `{"path": "notes.txt"}` | returns `{"wrote": <path>}` |
//! | [`SLOW`] | `{"ms": 600000}` | sleeps that long (until cancelled) |
//! | [`UP_ECHO`], of the provider [`UP`] | `{"text": "ping"}` | returns `{"echo": <text>}` |
//! | the provider [`DOWN`] | | fails to list its tools: always unavailable |
//! | [`WHOAMI`], of the provider [`AUTH`] | `{}` | returns `{"token": <the caller's credential>}`, or fails without one |
//!
//! The providers stand for tool servers (MCP servers) inside the suite's process: what the
//! fixtures certify is how the adapter behaves when one is down or holds a caller's
//! credential; the MCP protocol itself is harness-mcp's, tested against real servers there.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use harness_core::error::{ErrorCategory, HarnessError};
use harness_core::tool::{
    BoundedFailure, BoxFuture, PortableTool, ProvidedTool, ProviderNameRule, ProviderToolNames,
    ToolCallContext, ToolDescriptor, ToolId, ToolOutcome, ToolPolicy, ToolProvider, ToolScope,
    ToolSet,
};
use serde_json::{Value, json};

/// Returns its text.
pub const ECHO: &str = "conformance.echo";
/// Always fails.
pub const FAIL: &str = "conformance.fail";
/// Needs the caller's approval; returns the path it was given.
pub const GATED: &str = "conformance.gated";
/// Sleeps until cancelled.
pub const SLOW: &str = "conformance.slow";
/// A tool provider that is up.
pub const UP: &str = "conformance_up";
/// The tool of [`UP`].
pub const UP_ECHO: &str = "conformance_up.echo";
/// A tool provider that is down.
pub const DOWN: &str = "conformance_down";
/// A tool provider that takes a caller's credential.
pub const AUTH: &str = "conformance_auth";
/// The tool of [`AUTH`].
pub const WHOAMI: &str = "conformance_auth.whoami";
/// What [`FAIL`] fails with.
pub const FAIL_MESSAGE: &str = "conformance: the tool failed as asked";
/// The path the suite edits a [`GATED`] call's arguments to.
pub const EDITED_PATH: &str = "edited-by-the-caller.txt";

/// The arguments the model is to call `tool` with.
#[must_use]
pub fn arguments(tool: &str) -> Value {
    match tool {
        ECHO | UP_ECHO => json!({"text": "ping"}),
        GATED => json!({"path": "notes.txt"}),
        SLOW => json!({"ms": 600_000}),
        _ => json!({}),
    }
}

/// The name a model knows `tool` by ([`ProviderNameRule::COMMON`]).
///
/// # Panics
/// When `tool` is not a valid tool id (the suite's constants are).
#[must_use]
pub fn provider_name(tool: &str) -> String {
    let id: ToolId = tool.parse().expect("a valid tool id");
    ProviderToolNames::new([&id], ProviderNameRule::COMMON)
        .to_provider(&id)
        .map(str::to_owned)
        .unwrap_or_else(|| tool.to_owned())
}

/// What the suite's tools saw, for one service.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) echo: AtomicUsize,
    pub(crate) fail: AtomicUsize,
    pub(crate) gated: Mutex<Vec<Value>>,
    pub(crate) slow_started: AtomicUsize,
    pub(crate) slow_dropped: AtomicUsize,
    pub(crate) up_echo: AtomicUsize,
    pub(crate) down_asked: AtomicUsize,
    /// The credential each listing of [`AUTH`] and [`UP`] was given (`None`: none).
    pub(crate) credentials: Mutex<Vec<(&'static str, Option<String>)>>,
    pub(crate) whoami: AtomicUsize,
}

impl Seen {
    pub(crate) fn gated(&self) -> Vec<Value> {
        self.gated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn credentials(&self) -> Vec<(&'static str, Option<String>)> {
        self.credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The suite's tool set, and what its tools see.
pub(crate) fn suite() -> (ToolSet, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let tool = |id: &str, schema: Value, seen: &Arc<Seen>, run: Run| -> Suite {
        Suite {
            descriptor: ToolDescriptor::new(
                id.parse().expect("a valid id"),
                format!("Conformance tool {id}."),
                schema,
            )
            .expect("a valid schema"),
            seen: Arc::clone(seen),
            run,
        }
    };
    let text = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"], "additionalProperties": false});
    let path = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false});
    let ms = json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"], "additionalProperties": false});
    let empty = json!({"type": "object", "additionalProperties": false});
    let set = ToolSet::new()
        .tool(tool(ECHO, text.clone(), &seen, Run::Echo))
        .and_then(|s| s.tool(tool(FAIL, empty.clone(), &seen, Run::Fail)))
        .and_then(|s| {
            s.tool_with_policy(
                tool(GATED, path, &seen, Run::Gated),
                ToolPolicy::new().needs_approval(),
            )
        })
        .and_then(|s| s.tool(tool(SLOW, ms, &seen, Run::Slow)))
        .and_then(|s| {
            s.provider(Server {
                name: UP,
                seen: Arc::clone(&seen),
                tool: tool(UP_ECHO, text, &seen, Run::UpEcho),
            })
        })
        .and_then(|s| {
            s.provider(Down {
                seen: Arc::clone(&seen),
            })
        })
        .and_then(|s| {
            s.provider(Server {
                name: AUTH,
                seen: Arc::clone(&seen),
                tool: tool(WHOAMI, empty, &seen, Run::Whoami(None)),
            })
        })
        .expect("the suite's tools fit together");
    (set, seen)
}

#[derive(Clone)]
enum Run {
    Echo,
    Fail,
    Gated,
    Slow,
    UpEcho,
    /// The credential the provider was listed with.
    Whoami(Option<String>),
}

#[derive(Clone)]
struct Suite {
    descriptor: ToolDescriptor,
    seen: Arc<Seen>,
    run: Run,
}

/// Counts a [`SLOW`] call that was dropped before it finished.
struct Dropped(Arc<Seen>, bool);

impl Drop for Dropped {
    fn drop(&mut self) {
        if !self.1 {
            self.0.slow_dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl PortableTool for Suite {
    fn descriptor(&self) -> &ToolDescriptor {
        &self.descriptor
    }

    fn invoke(&self, arguments: Value, _ctx: ToolCallContext) -> BoxFuture<'_, ToolOutcome> {
        let seen = Arc::clone(&self.seen);
        let run = self.run.clone();
        Box::pin(async move {
            match run {
                Run::Echo | Run::UpEcho => {
                    let counter = if matches!(run, Run::Echo) {
                        &seen.echo
                    } else {
                        &seen.up_echo
                    };
                    counter.fetch_add(1, Ordering::SeqCst);
                    ToolOutcome::Success(json!({"echo": arguments["text"]}))
                }
                Run::Fail => {
                    seen.fail.fetch_add(1, Ordering::SeqCst);
                    ToolOutcome::Failure(BoundedFailure::new(FAIL_MESSAGE))
                }
                Run::Gated => {
                    seen.gated
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(arguments.clone());
                    ToolOutcome::Success(json!({"wrote": arguments["path"]}))
                }
                Run::Slow => {
                    seen.slow_started.fetch_add(1, Ordering::SeqCst);
                    let mut guard = Dropped(Arc::clone(&seen), false);
                    let ms = arguments["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    guard.1 = true;
                    ToolOutcome::Success(json!({"slept": ms}))
                }
                Run::Whoami(credential) => {
                    seen.whoami.fetch_add(1, Ordering::SeqCst);
                    match credential {
                        Some(token) => ToolOutcome::Success(json!({"token": token})),
                        None => ToolOutcome::failure("no credential reached this tool"),
                    }
                }
            }
        })
    }
}

/// A provider that is up, offering one tool (given the caller's credential, if any).
struct Server {
    name: &'static str,
    seen: Arc<Seen>,
    tool: Suite,
}

impl ToolProvider for Server {
    fn name(&self) -> &str {
        self.name
    }

    fn tools(&self, scope: ToolScope) -> BoxFuture<'_, Result<Vec<ProvidedTool>, HarnessError>> {
        let credential = scope.credential.map(|c| c.expose().to_owned());
        self.seen
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((self.name, credential.clone()));
        let mut tool = self.tool.clone();
        if let Run::Whoami(_) = tool.run {
            tool.run = Run::Whoami(credential);
        }
        Box::pin(async move { Ok(vec![ProvidedTool::new(Arc::new(tool), ToolPolicy::new())]) })
    }
}

/// A provider that is down.
struct Down {
    seen: Arc<Seen>,
}

impl ToolProvider for Down {
    fn name(&self) -> &str {
        DOWN
    }

    fn tools(&self, _scope: ToolScope) -> BoxFuture<'_, Result<Vec<ProvidedTool>, HarnessError>> {
        self.seen.down_asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Err(HarnessError::new(
                ErrorCategory::Unavailable,
                "conformance: this tool server is down",
            )
            .with_retryable(true))
        })
    }
}

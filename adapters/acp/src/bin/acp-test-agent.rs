//! `acp-test-agent`: a scriptable Agent Client Protocol agent for testing ACP clients.
//!
//! It is not a product and not part of the `harness-acp` library (it does not use it): it is a
//! small agent written on the agent side of the `agent-client-protocol` crate (protocol v1,
//! stable API only) that behaves, or misbehaves, as its first argument says, so that a client's
//! tests can produce each protocol behaviour and each fault on demand. It speaks
//! newline-delimited JSON-RPC on stdin/stdout.
//!
//! ```text
//! acp-test-agent [MODE] [TAG...]
//! ```
//!
//! `MODE` defaults to `echo`. The `TAG`s are free: tests pass a unique marker so that the agent's
//! processes (and the child of `ignore-cancel`, which gets the same tags) can be found in
//! `/proc`; `crash` and `auth` append them to what they write on stderr.
//!
//! Every mode answers `initialize` with protocol version 1 (`bad-version`: 999) and
//! `agentCapabilities.loadSession` true in `echo` only, and `session/new` with a fresh session
//! id. `session/load` is served in `echo` only (elsewhere: `-32601` method not found).
//!
//! | mode | a `session/prompt` turn |
//! |---|---|
//! | `echo` | thought chunk `thinking`; message chunks `turn <n>: ` and `<prompt text>` (`n` = 1-based turn of the session, counting turns of earlier processes), or, for a prompt starting with `recall`, `recall: <the session's earlier prompts, joined by "; ">`, or, for a prompt starting with `hang-child`, only what mode `hang-child` does (nothing kept in the history); `usage_update` (`used` = prompt characters of the session so far, `size` = 100000); the turn is appended to the history file; `end_turn`, or, for a prompt starting with `fail`, the error `-32603` (the turn stays in the history). `promptCapabilities` `image` and `embeddedContext` (every mode but `no-load`): an image block is echoed as `[image <type> <first 12 base64 chars>]`, an embedded resource as `[resource <uri> <type> <"text" or first 12 base64 chars>]`, each on a line after the text |
//! | `no-load` | as `echo`, but `loadSession` is false and `session/load` is method not found; no `promptCapabilities` (images and embedded resources not taken) |
//! | `elicit` | an `elicitation/create` request in form mode (required string `name`, optional integer `age`) if the client advertised `elicitation.form`, else message `elicitation unsupported`, `end_turn`; accept → message `hello <name>`, `end_turn`; decline → message `declined`, `end_turn`; cancel → `cancelled` |
//! | `permission` | `tool_call` `call-1` (`write file`, kind `edit`, rawInput `{"path":"a.txt"}`), then `session/request_permission` with options `allow` (`allow_once`) and `reject` (`reject_once`); allow → `tool_call_update` completed, rawOutput `{"ok":true}`, message `done`, `end_turn`; reject → `tool_call_update` failed, message `rejected`, `end_turn`; cancelled outcome → `cancelled` |
//! | `hang` | message chunk `thinking forever`, then never ends the turn until `session/cancel`, which it answers with `cancelled` |
//! | `hang-child` | spawns a child (`acp-test-agent sleep TAG...`, same process group, ignoring `SIGTERM`, sleeping 300 s) as Claude Code's bridge does its model process; message chunk `child <pid>`, then as `hang` (answers `session/cancel` with `cancelled` at once); the agent itself exits on `SIGTERM` |
//! | `ignore-cancel` | ignores `SIGTERM` from the start; spawns a child (`acp-test-agent sleep TAG...`, same process group, ignoring `SIGTERM`, sleeping 300 s) that outlives it; message chunk `spawned a child`; never ends the turn, ignores `session/cancel` |
//! | `crash` | message chunk `about to crash`, then a secret-looking line on stderr (ending with `TAG... <prompt text>`), then exit status 3 mid-turn |
//! | `panic` | message chunk `about to panic`, then the agent panics mid-turn: a thread panics with the message `agent bug: <prompt text>` (the default hook prints it on stderr), the first frames of a forced stack backtrace follow on stderr, and the process aborts (`SIGABRT`, as a `panic = "abort"` build or a Node agent's uncaught exception ends): what a provider's panic looks like from outside its process |
//! | `slow-session` | answers `initialize` (so a capability probe succeeds), then never answers `session/new`: a start that is slow after the handshake |
//! | `malformed` | message chunk `about to babble`, then the line `this is not json` on stdout; never ends the turn |
//! | `bad-version` | answers `initialize` with protocol version 999 |
//! | `fs` | asks for `fs/read_text_file` of `<cwd>/inside.txt` and of `/etc/passwd`, `terminal/create`, `fs/write_text_file` of `<cwd>/new.txt` (`written`) and of `<cwd>/../escape.txt`; reports `inside:<content or error>;outside:…;terminal:…;write:…;escape:…` (`served` / `declined`) as message chunks; `end_turn` |
//! | `text` | message chunk `hello`; `end_turn` |
//! | `reasoning` | thought chunk `hmm`; `end_turn` |
//! | `tool`, `tool-error` | `tool_call` `t1` (`read`, kind `read`, rawInput `{"a":1}`), `tool_call_update` completed / failed with rawOutput `{"ok":true}` / `{"ok":false}`; `end_turn` |
//! | `approval` | `tool_call` `t1` (`write`, kind `edit`), `session/request_permission` with options `yes` (`allow_once`) / `no` (`reject_once`); on `yes` a completed `tool_call_update`; `end_turn` |
//! | `auth` | writes `diagnostic: TAG... <prompt text>` on stderr and fails the prompt with `-32000` (auth required) |
//! | `slow-init` | spawns a child (as `ignore-cancel` does) and never answers `initialize` |
//! | `approval-hang` | `tool_call` `t1` (kind `edit`, rawInput `{"call":"t1"}`), `session/request_permission` with options `yes` (`allow_once`) / `no` (`reject_once`); after the answer a `tool_call_update` completed (rawOutput `{"ok":true}`) / failed, message chunk `working`, then waits for `session/cancel` and answers `cancelled` (also on a cancelled outcome) |
//! | `approval-exit` | as `approval-hang`'s request for `t1`, then, 300 ms later, exits (status 0) without waiting for the answer |
//! | `sequential` | as `approval-hang`'s request for `t1`, then, once answered, the same for `t2`; message chunk `both asked`, `end_turn` (`cancelled` on a cancelled outcome) |
//! | `ask-after-cancel` | message chunk `waiting for a cancel`; after `session/cancel`, a permission request as `approval-hang`'s: a cancelled outcome → `cancelled`; a selected one → message chunk `not cancelled`, `end_turn` |
//! | `binary` | message chunk `about to send bytes`, then a line that is not UTF-8; never ends the turn |
//! | `trace` | message chunk with the `traceparent` of the prompt's `_meta` (or `no traceparent`); `end_turn` |
//! | `emit` | message chunk `emitting TAG... <prompt text>`; `end_turn` |
//! | `flood` | `tool_call` `t1`, a `session/request_permission` for it (options `yes` / `no`), then, without waiting for the answer, 100,000 message chunks `.`; then waits for the answer: `yes` → message `done`, `end_turn`; `no` → message `rejected`, `end_turn`; cancelled → `cancelled` |
//! | `flood-init` | sends 5,000 message chunks for the new session before answering `session/new`; a turn says `hello` |
//! | `detach` | at `initialize`, spawns a child (`acp-test-agent sleep TAG...`) in a process group of its own (outside the agent's, so a group kill does not reach it) that inherits the agent's stdout and stderr and holds them open; a turn says `detached` |
//! | `bad-shape` | message chunk `about to misshape`, then a `session/update` line (valid params) that also carries `"result": {}` (malformed JSON-RPC: a request and a response at once); message chunk `after`, `end_turn` |
//! | `bad-id` | message chunk `about to misshape`, then a `session/request_permission` line (valid params) whose `id` is `true` (malformed JSON-RPC); message chunk `after`, `end_turn` |
//! | `double-ask` | `tool_call`s `t1` and `t2` and a `session/request_permission` for each (options `yes` / `no`), sent back to back before either is answered; then waits for both answers: both selected → message `both answered`, `end_turn`; any cancelled outcome → `cancelled` |
//! | `orphan-crash` | spawns a child (`acp-test-agent sleep TAG...`, same process group) that inherits the agent's stdout and holds it open; message chunk `about to crash`; exit status 3 |
//! | `tool-content` | `tool_call` `t1` (`list`, kind `read`) already `completed`, with text content `listing` and no rawOutput; `end_turn` |
//! | `informational` | message chunk `hello`, then two raw `session/update` lines the schema refuses: a `usage_update` with `"used": null` (as `@zed-industries/claude-agent-acp` sends) and one of kind `future_update`; message chunk ` world`; `end_turn`, or, for a prompt containing `hang`, waits for `session/cancel` and answers `cancelled` |
//! | `reject-cancels` | as `approval`'s request for `t1` (options `yes` / `no`); `yes` → completed `tool_call_update`, `end_turn`; `no` → failed `tool_call_update` and the stop reason `cancelled` although nobody cancelled (as Codex does); a cancelled outcome → `cancelled` |
//! | `fail` | fails the prompt with `-32603` `Internal error`, `data` `{"details": <prompt text>}` (as Codex reports a model provider's failure) |
//! | `late-input` | `tool_call` `t1` titled `Terminal` (kind `execute`, empty rawInput), then a `tool_call_update` with title `touch created.txt` and rawInput `{"command":"touch created.txt"}` (as Claude Code announces a command), then `session/request_permission` for `t1` (options `yes` / `no`, no rawInput); `yes` → completed `tool_call_update`; `no` → failed; `end_turn` |
//! | `late-replay` | as `echo` (history, `loadSession`), but `session/load` answers first and replays the history 50 ms later (as Gemini CLI sends part of it after the answer), and a turn waits 200 ms (a model's latency) before it answers as `echo` |
//! | `modes` | `session/new` (and `session/load`, which it serves from history as `echo` does) answers with modes `auto` (current), `ask` and `yolo` and config options `model` (select: `m1` current, `m2`) and `fast` (boolean, false); serves `session/set_mode` and `session/set_config_option` (unknown ids: `-32602`); a turn says `mode=<mode> model=<model> fast=<fast>`, then, in mode `ask`, asks for `t1` as `approval` does (message `approved` / `rejected`), elsewhere runs `t1` without asking (a completed `tool_call`); `end_turn` |
//! | `flusher` | at `initialize`, spawns a child (`acp-test-agent flush TAG...`, same process group) that, like the model process of a real harness, writes its state only when told to stop; a turn says `flushing child`; the agent itself exits at once on `SIGTERM` |
//! | `mcp-reach` | negotiates `mcpCapabilities.http`; a turn POSTs an MCP `initialize` to each HTTP server its session got and says `reached: ` and `<name> <status code>` (or why none), `; `-separated; `end_turn` |
//! | `mcp` | negotiates `mcpCapabilities.http`; at `session/new`, starts a child (`acp-test-agent sleep TAG... <args...>`, same process group) for each stdio server, with its variables, as an agent starts them; a turn says `mcp: ` and the MCP servers its session got at `session/new`, `; `-separated: `<name> stdio <command> <args...> env <names>` or `<name> http <url> headers <names>`; `end_turn` |
//! | `escape` | a hostile agent, for sandbox tests: each whitespace-separated probe of the prompt is tried and reported as a message chunk `<probe> <result>\n`: `read:<path>` and `write:<path>` (`ok` / `denied (<kind>)`), `connect:<port>` on 127.0.0.1 (`ok` / `denied (<kind>)`), `procs` (how many processes `/proc` shows), `env` (the variables' names), `bomb` (forks `sh -c 'sleep 300'` until a fork fails), `hog` (allocates 16 MiB blocks until stopped), `forever`; with `bomb` or `forever`, the turn then waits for `session/cancel`, else `end_turn` |
//! | `skills` | lists the skill folders under `<cwd>/<prompt text>` (the prompt names a folder relative to the working directory, such as `.claude/skills`), by name: for each folder holding a `SKILL.md`, a message chunk `skill <name>\n<its SKILL.md>\n`, then `file <path>\n` for each other file of the folder (sorted); `no skills` when there is none; `end_turn` |
//! | `burst` | as many message chunks `x` as the prompt's number (at most 10,000,000), then `end_turn`: a throughput source |
//! | `sleep` | (not an agent) what `ignore-cancel` spawns: ignores `SIGTERM`, sleeps 300 s |
//! | `flush` | (not an agent) what `flusher` spawns: on `SIGTERM`, waits 300 ms, then writes `<cwd>/flushed.txt` and exits |
//!
//! Session history (`echo`, `no-load`, `late-replay`, `modes`) is kept in `<cwd>/.acp-test-agent/<sessionId>.json`,
//! `cwd` being the `cwd` of `session/new` (or `session/load`):
//!
//! ```json
//! {"sessionId": "s-…", "turns": [{"prompt": "hi", "answer": "turn 1: hi"}]}
//! ```
//!
//! `session/load` replays it (a `user_message_chunk` with each prompt, an `agent_message_chunk`
//! with each answer) before answering; an unknown session id is answered with `-32002`
//! (resource not found).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, CreateElicitationRequest,
    CreateTerminalRequest, ElicitationAction, ElicitationContentValue, ElicitationFormMode,
    ElicitationSchema, ElicitationSessionScope, EmbeddedResourceResource, Implementation,
    InitializeRequest, InitializeResponse, IntegerPropertySchema, LoadSessionRequest,
    LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest, NewSessionResponse,
    PermissionOption, PermissionOptionKind, PromptCapabilities, PromptRequest, PromptResponse,
    ReadTextFileRequest, RequestPermissionOutcome, RequestPermissionRequest, SessionConfigOption,
    SessionConfigOptionValue, SessionConfigSelectOption, SessionMode, SessionModeState,
    SessionNotification, SessionUpdate, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse, StopReason,
    TextContent, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind, UsageUpdate, WriteTextFileRequest,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, Error, ErrorCode, JsonRpcResponse, Lines};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::{Notify, mpsc, watch};

/// How the agent behaves; see the crate doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Echo,
    NoLoad,
    Elicit,
    Permission,
    Hang,
    HangChild,
    IgnoreCancel,
    Crash,
    Panic,
    SlowSession,
    Malformed,
    BadVersion,
    Fs,
    Text,
    Reasoning,
    Tool,
    ToolError,
    Approval,
    Auth,
    SlowInit,
    ApprovalHang,
    ApprovalExit,
    Sequential,
    AskAfterCancel,
    Binary,
    Trace,
    Emit,
    Flood,
    FloodInit,
    Detach,
    BadShape,
    BadId,
    DoubleAsk,
    OrphanCrash,
    ToolContent,
    Informational,
    RejectCancels,
    Fail,
    LateInput,
    LateReplay,
    Modes,
    Flusher,
    Mcp,
    McpReach,
    Escape,
    Skills,
    Burst,
    Sleep,
    Flush,
}

/// How many updates `flood` sends while its permission request is unanswered.
const FLOOD: usize = 100_000;
/// How many updates `flood-init` sends before answering `session/new`.
const FLOOD_INIT: usize = 5_000;

impl Mode {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "echo" => Self::Echo,
            "no-load" => Self::NoLoad,
            "elicit" => Self::Elicit,
            "permission" => Self::Permission,
            "hang" => Self::Hang,
            "hang-child" => Self::HangChild,
            "ignore-cancel" => Self::IgnoreCancel,
            "crash" => Self::Crash,
            "panic" => Self::Panic,
            "slow-session" => Self::SlowSession,
            "malformed" => Self::Malformed,
            "bad-version" => Self::BadVersion,
            "fs" => Self::Fs,
            "text" => Self::Text,
            "reasoning" => Self::Reasoning,
            "tool" => Self::Tool,
            "tool-error" => Self::ToolError,
            "approval" => Self::Approval,
            "auth" => Self::Auth,
            "slow-init" => Self::SlowInit,
            "approval-hang" => Self::ApprovalHang,
            "approval-exit" => Self::ApprovalExit,
            "sequential" => Self::Sequential,
            "ask-after-cancel" => Self::AskAfterCancel,
            "binary" => Self::Binary,
            "trace" => Self::Trace,
            "emit" => Self::Emit,
            "flood" => Self::Flood,
            "flood-init" => Self::FloodInit,
            "detach" => Self::Detach,
            "bad-shape" => Self::BadShape,
            "bad-id" => Self::BadId,
            "double-ask" => Self::DoubleAsk,
            "orphan-crash" => Self::OrphanCrash,
            "tool-content" => Self::ToolContent,
            "informational" => Self::Informational,
            "reject-cancels" => Self::RejectCancels,
            "fail" => Self::Fail,
            "late-input" => Self::LateInput,
            "late-replay" => Self::LateReplay,
            "modes" => Self::Modes,
            "flusher" => Self::Flusher,
            "mcp" => Self::Mcp,
            "mcp-reach" => Self::McpReach,
            "escape" => Self::Escape,
            "skills" => Self::Skills,
            "burst" => Self::Burst,
            "sleep" => Self::Sleep,
            "flush" => Self::Flush,
            _ => return None,
        })
    }

    /// Whether sessions keep a history file and can be loaded.
    fn keeps_history(self) -> bool {
        matches!(
            self,
            Self::Echo | Self::NoLoad | Self::LateReplay | Self::Modes
        )
    }

    /// Whether `session/load` is offered and served.
    fn loads(self) -> bool {
        matches!(self, Self::Echo | Self::LateReplay | Self::Modes)
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "echo".to_owned());
    let tags: Vec<String> = args.collect();
    let Some(mode) = Mode::parse(&name) else {
        eprintln!("acp-test-agent: unknown mode `{name}`");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("acp-test-agent: no runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async move {
        if matches!(mode, Mode::IgnoreCancel | Mode::Sleep) {
            // A registered listener replaces SIGTERM's default action (terminate) for the
            // whole process; it is never read, so polite stops are ignored.
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => std::mem::forget(signal),
                Err(err) => {
                    eprintln!("acp-test-agent: cannot ignore SIGTERM: {err}");
                    return 1;
                }
            }
        }
        if mode == Mode::Sleep {
            tokio::time::sleep(Duration::from_secs(300)).await;
            return 0;
        }
        if mode == Mode::Flush {
            return flush_when_stopped().await;
        }
        serve(mode, tags).await
    });
    // Exit now: the tokio stdin reader is a blocking read that dropping the runtime would
    // wait for.
    std::process::exit(code)
}

/// `flush`: waits for `SIGTERM`, then takes 300 ms to write `flushed.txt` in its directory.
async fn flush_when_stopped() -> i32 {
    let Ok(mut stop) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return 1;
    };
    stop.recv().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    match std::fs::write("flushed.txt", "flushed") {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// Serves one ACP connection on stdio until the client closes it.
async fn serve(mode: Mode, tags: Vec<String>) -> i32 {
    let out = Output::start();
    let agent = Arc::new(TestAgent {
        mode,
        tags,
        out: out.clone(),
        state: Mutex::default(),
    });
    let outgoing = futures_util::sink::unfold(out, async |out, line: String| {
        out.send(line)?;
        Ok::<_, std::io::Error>(out)
    });
    let incoming = futures_util::stream::unfold(
        tokio::io::BufReader::new(tokio::io::stdin()).lines(),
        async |mut lines| match lines.next_line().await {
            Ok(Some(line)) => Some((Ok(line), lines)),
            Ok(None) => None,
            Err(err) => Some((Err(err), lines)),
        },
    );
    let served = agent_client_protocol::Agent
        .v1()
        .name("acp-test-agent")
        .on_receive_request(
            {
                let agent = agent.clone();
                async move |request: InitializeRequest, responder, cx| {
                    agent.initialize(&request, responder, &cx)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let agent = agent.clone();
                async move |request: NewSessionRequest, responder, cx| {
                    agent.new_session(request, responder, &cx)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let agent = agent.clone();
                async move |request: LoadSessionRequest, responder, cx| {
                    agent.load_session(request, responder, &cx)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let agent = agent.clone();
                async move |request: PromptRequest, responder, cx: ConnectionTo<Client>| {
                    // The turn runs outside the dispatch loop: it waits for the client's
                    // answers (permission, elicitation, files) and for `session/cancel`.
                    let agent = agent.clone();
                    let turn_cx = cx.clone();
                    cx.spawn(async move { agent.prompt(request, responder, turn_cx).await })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let agent = agent.clone();
                async move |request: SetSessionModeRequest, responder, _cx| {
                    agent.set_mode(&request, responder)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let agent = agent.clone();
                async move |request: SetSessionConfigOptionRequest, responder, _cx| {
                    agent.set_config_option(&request, responder)
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            {
                let agent = agent.clone();
                async move |notification: CancelNotification, _cx| {
                    agent.cancel(&notification);
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Lines::new(Box::pin(outgoing), Box::pin(incoming)))
        .await;
    // What the connection queued last (answers sent just before the client closed stdin) is
    // written before the process exits.
    let _drained = tokio::time::timeout(Duration::from_secs(2), agent.out.drained()).await;
    match served {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("acp-test-agent: connection ended: {err:?}");
            1
        }
    }
}

/// Stdout, owned by one writer task: the connection's lines and the raw lines of `malformed`
/// go through it in order, and it counts the lines it has flushed.
#[derive(Debug, Clone)]
struct Output {
    lines: mpsc::UnboundedSender<Vec<u8>>,
    sent: Arc<AtomicU64>,
    flushed: watch::Receiver<u64>,
}

impl Output {
    fn start() -> Self {
        let (lines, mut queue) = mpsc::unbounded_channel::<Vec<u8>>();
        let (count, flushed) = watch::channel(0u64);
        tokio::spawn(async move {
            let mut stdout = tokio::io::stdout();
            while let Some(mut line) = queue.recv().await {
                line.push(b'\n');
                if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                    break;
                }
                count.send_modify(|n| *n += 1);
            }
        });
        Self {
            lines,
            sent: Arc::default(),
            flushed,
        }
    }

    fn send(&self, line: String) -> std::io::Result<()> {
        self.send_bytes(line.into_bytes())
    }

    /// Sends one line of raw bytes (not necessarily UTF-8).
    fn send_bytes(&self, line: Vec<u8>) -> std::io::Result<()> {
        self.lines
            .send(line)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout is closed"))?;
        self.sent.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// How many lines have been flushed so far.
    fn flushed(&self) -> u64 {
        *self.flushed.borrow()
    }

    /// Waits until more than `count` lines have been flushed (or stdout is gone).
    async fn flushed_past(&self, count: u64) {
        let mut flushed = self.flushed.clone();
        let _closed = flushed.wait_for(|n| *n > count).await;
    }

    /// Waits until every line sent so far has been flushed (or stdout is gone).
    async fn drained(&self) {
        let sent = self.sent.load(Ordering::SeqCst);
        let mut flushed = self.flushed.clone();
        let _closed = flushed.wait_for(|n| *n >= sent).await;
    }
}

#[derive(Debug)]
struct TestAgent {
    mode: Mode,
    tags: Vec<String>,
    out: Output,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether the client advertised form elicitation at `initialize`.
    elicitation_form: bool,
    sessions: HashMap<String, Session>,
    created: u64,
}

#[derive(Debug)]
struct Session {
    cwd: PathBuf,
    history: History,
    /// Notified by `session/cancel`; a fresh one per turn.
    cancel: Arc<Notify>,
    /// `modes`: the session's mode and configuration options.
    settings: Settings,
    /// `mcp`: the MCP servers `session/new` named, described.
    mcp: Vec<String>,
    /// `mcp-reach`: the HTTP MCP servers `session/new` named: name, URL.
    mcp_http: Vec<(String, String)>,
}

/// The on-disk history of a session (`<cwd>/.acp-test-agent/<sessionId>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct History {
    session_id: String,
    turns: Vec<Turn>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Turn {
    prompt: String,
    answer: String,
}

impl History {
    fn path(cwd: &Path, session_id: &str) -> PathBuf {
        cwd.join(".acp-test-agent")
            .join(format!("{session_id}.json"))
    }

    fn read(cwd: &Path, session_id: &str) -> Option<Self> {
        // Only ids this agent could have made name a file (no separators, no `..`).
        if session_id.is_empty()
            || !session_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return None;
        }
        let text = std::fs::read_to_string(Self::path(cwd, session_id)).ok()?;
        let history: Self = serde_json::from_str(&text).ok()?;
        (history.session_id == session_id).then_some(history)
    }

    fn write(&self, cwd: &Path) -> std::io::Result<()> {
        let path = Self::path(cwd, &self.session_id);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let temporary = path.with_extension("json.tmp");
        std::fs::write(&temporary, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(temporary, path)
    }

    fn prompt_chars(&self) -> usize {
        self.turns.iter().map(|t| t.prompt.chars().count()).sum()
    }
}

type Outcome = Result<(), Error>;

/// What `modes` offers and keeps per session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    mode: String,
    model: String,
    fast: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            mode: "auto".to_owned(),
            model: "m1".to_owned(),
            fast: false,
        }
    }
}

/// The modes and configuration options `modes` offers, with `settings` current.
fn offered(settings: &Settings) -> (SessionModeState, Vec<SessionConfigOption>) {
    let modes = SessionModeState::new(
        settings.mode.clone(),
        vec![
            SessionMode::new("auto", "Auto").description("runs tools without asking"),
            SessionMode::new("ask", "Ask").description("asks before running tools"),
            SessionMode::new("yolo", "Yolo"),
        ],
    );
    let options = vec![
        SessionConfigOption::select(
            "model",
            "Model",
            settings.model.clone(),
            vec![
                SessionConfigSelectOption::new("m1", "Model one"),
                SessionConfigSelectOption::new("m2", "Model two"),
            ],
        ),
        SessionConfigOption::boolean("fast", "Fast", settings.fast),
    ];
    (modes, options)
}

/// Replays `turns` of session `id`: a user message chunk and an agent message chunk each.
fn replay(cx: &ConnectionTo<Client>, id: &str, turns: &[Turn]) -> Outcome {
    for turn in turns {
        update(
            cx,
            id,
            SessionUpdate::UserMessageChunk(chunk(turn.prompt.clone())),
        )?;
        update(cx, id, message(turn.answer.clone()))?;
    }
    Ok(())
}

impl TestAgent {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn initialize(
        &self,
        request: &InitializeRequest,
        responder: Responder<InitializeResponse>,
        cx: &ConnectionTo<Client>,
    ) -> Outcome {
        self.lock().elicitation_form = request
            .client_capabilities
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some());
        if self.mode == Mode::Detach {
            self.spawn_detached()?;
        }
        if self.mode == Mode::Flusher {
            self.spawn_flusher()?;
        }
        if self.mode == Mode::SlowInit {
            // A slow start: a child in the process group (ignoring SIGTERM), and no answer
            // until the client gives up and kills the group.
            self.spawn_child()?;
            return cx.spawn(never_answer(responder));
        }
        let response = InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(
                AgentCapabilities::new()
                    .load_session(self.mode.loads())
                    // Images and embedded resources in every mode but `no-load` (`echo`
                    // describes them; the others read only the text).
                    .prompt_capabilities(
                        PromptCapabilities::new()
                            .image(self.mode != Mode::NoLoad)
                            .embedded_context(self.mode != Mode::NoLoad),
                    )
                    .mcp_capabilities(
                        McpCapabilities::new()
                            .http(matches!(self.mode, Mode::Mcp | Mode::McpReach)),
                    ),
            )
            .agent_info(Implementation::new(
                "acp-test-agent",
                env!("CARGO_PKG_VERSION"),
            ));
        if self.mode != Mode::BadVersion {
            return responder.respond(response);
        }
        // The crate's v1 agent does not send a response naming another version: write it raw,
        // and keep the responder (dropping it would answer the request a second time).
        let mut result = serde_json::to_value(&response).map_err(Error::into_internal_error)?;
        result["protocolVersion"] = json!(999);
        let line = json!({ "jsonrpc": "2.0", "id": responder.id(), "result": result });
        self.out
            .send(line.to_string())
            .map_err(Error::into_internal_error)?;
        cx.spawn(never_answer(responder))
    }

    fn new_session(
        &self,
        request: NewSessionRequest,
        responder: Responder<NewSessionResponse>,
        cx: &ConnectionTo<Client>,
    ) -> Outcome {
        if self.mode == Mode::SlowSession {
            return cx.spawn(never_answer(responder));
        }
        let mut state = self.lock();
        state.created += 1;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let id = format!("s-{:x}-{nanos:x}-{}", std::process::id(), state.created);
        let history = History {
            session_id: id.clone(),
            turns: Vec::new(),
        };
        if self.mode.keeps_history()
            && let Err(err) = history.write(&request.cwd)
        {
            return responder.respond_with_internal_error(format!("cannot keep history: {err}"));
        }
        let mcp = request.mcp_servers.iter().map(described).collect();
        if self.mode == Mode::Mcp {
            // As an agent starts the stdio MCP servers it is given: a child (a sleeper) with
            // the server's arguments and variables, for a test to look for in `/proc`.
            for server in &request.mcp_servers {
                if let McpServer::Stdio(stdio) = server {
                    self.sleeper()?
                        .args(&stdio.args)
                        .envs(stdio.env.iter().map(|e| (&e.name, &e.value)))
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .map_err(Error::into_internal_error)?;
                }
            }
        }
        state.sessions.insert(
            id.clone(),
            Session {
                cwd: request.cwd,
                history,
                cancel: Arc::default(),
                settings: Settings::default(),
                mcp,
                mcp_http: http_servers(&request.mcp_servers),
            },
        );
        drop(state);
        if self.mode == Mode::FloodInit {
            for _ in 0..FLOOD_INIT {
                update(cx, &id, message(".".to_owned()))?;
            }
        }
        let mut response = NewSessionResponse::new(id);
        if self.mode == Mode::Modes {
            let (modes, options) = offered(&Settings::default());
            response = response.modes(modes).config_options(options);
        }
        responder.respond(response)
    }

    fn load_session(
        &self,
        request: LoadSessionRequest,
        responder: Responder<LoadSessionResponse>,
        cx: &ConnectionTo<Client>,
    ) -> Outcome {
        if !self.mode.loads() {
            return responder.respond_with_error(Error::method_not_found());
        }
        let id = request.session_id.0.to_string();
        let Some(history) = History::read(&request.cwd, &id) else {
            return responder.respond_with_error(
                Error::new(ErrorCode::RESOURCE_NOT_FOUND, "session not found")
                    .data(json!({ "sessionId": id })),
            );
        };
        let turns = history.turns.clone();
        self.lock().sessions.insert(
            id.clone(),
            Session {
                cwd: request.cwd,
                history,
                cancel: Arc::default(),
                settings: Settings::default(),
                mcp: request.mcp_servers.iter().map(described).collect(),
                mcp_http: http_servers(&request.mcp_servers),
            },
        );
        if self.mode == Mode::LateReplay {
            responder.respond(LoadSessionResponse::new())?;
            let late = cx.clone();
            return cx.spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                replay(&late, &id, &turns)
            });
        }
        replay(cx, &id, &turns)?;
        let mut response = LoadSessionResponse::new();
        if self.mode == Mode::Modes {
            let (modes, options) = offered(&Settings::default());
            response = response.modes(modes).config_options(options);
        }
        responder.respond(response)
    }

    fn set_mode(
        &self,
        request: &SetSessionModeRequest,
        responder: Responder<SetSessionModeResponse>,
    ) -> Outcome {
        let mut state = self.lock();
        let known = ["auto", "ask", "yolo"].contains(&&*request.mode_id.0);
        match state.sessions.get_mut(&*request.session_id.0) {
            Some(session) if self.mode == Mode::Modes && known => {
                session.settings.mode = request.mode_id.0.to_string();
                drop(state);
                responder.respond(SetSessionModeResponse::new())
            }
            _ => {
                drop(state);
                responder.respond_with_error(Error::invalid_params())
            }
        }
    }

    fn set_config_option(
        &self,
        request: &SetSessionConfigOptionRequest,
        responder: Responder<SetSessionConfigOptionResponse>,
    ) -> Outcome {
        let mut state = self.lock();
        let Some(session) = state.sessions.get_mut(&*request.session_id.0) else {
            drop(state);
            return responder.respond_with_error(Error::invalid_params());
        };
        let settings = &mut session.settings;
        match (&*request.config_id.0, &request.value) {
            ("model", SessionConfigOptionValue::ValueId { value })
                if ["m1", "m2"].contains(&&*value.0) =>
            {
                settings.model = value.0.to_string();
            }
            ("fast", SessionConfigOptionValue::Boolean { value }) => settings.fast = *value,
            _ => {
                drop(state);
                return responder.respond_with_error(Error::invalid_params());
            }
        }
        let (_, options) = offered(settings);
        drop(state);
        responder.respond(SetSessionConfigOptionResponse::new(options))
    }

    fn cancel(&self, notification: &CancelNotification) {
        if matches!(self.mode, Mode::IgnoreCancel) {
            return;
        }
        if let Some(session) = self.lock().sessions.get(&*notification.session_id.0) {
            session.cancel.notify_one();
        }
    }

    async fn prompt(
        &self,
        request: PromptRequest,
        responder: Responder<PromptResponse>,
        cx: ConnectionTo<Client>,
    ) -> Outcome {
        let id = request.session_id.0.to_string();
        let cancel = {
            let mut state = self.lock();
            let Some(session) = state.sessions.get_mut(&id) else {
                drop(state);
                return responder.respond_with_error(
                    Error::new(ErrorCode::RESOURCE_NOT_FOUND, "session not found")
                        .data(json!({ "sessionId": id })),
                );
            };
            session.cancel = Arc::default();
            session.cancel.clone()
        };
        let text = request
            .prompt
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(text) => Some(text.text.clone()),
                ContentBlock::Image(image) => Some(format!(
                    "[image {} {}]",
                    image.mime_type,
                    image.data.chars().take(12).collect::<String>()
                )),
                ContentBlock::Resource(resource) => Some(match &resource.resource {
                    EmbeddedResourceResource::TextResourceContents(t) => format!(
                        "[resource {} {} {:?}]",
                        t.uri,
                        t.mime_type.as_deref().unwrap_or("-"),
                        t.text
                    ),
                    EmbeddedResourceResource::BlobResourceContents(b) => format!(
                        "[resource {} {} {}]",
                        b.uri,
                        b.mime_type.as_deref().unwrap_or("-"),
                        b.blob.chars().take(12).collect::<String>()
                    ),
                    _ => "[resource ?]".to_owned(),
                }),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let turn = TurnCx { cx: &cx, id: &id };
        match self.mode {
            Mode::Echo if text.starts_with("hang-child") => {
                let child = self.spawn_child_pid()?;
                catches_sigterm(child).await?;
                turn.say(&format!("child {child}"))?;
                cancel.notified().await;
                responder.respond(PromptResponse::new(StopReason::Cancelled))
            }
            Mode::Echo | Mode::NoLoad => self.echo(&turn, text, responder),
            Mode::IgnoreCancel => {
                self.spawn_child()?;
                turn.say("spawned a child")?;
                never_answer(responder).await
            }
            Mode::Crash => {
                let before = self.out.flushed();
                turn.say("about to crash")?;
                self.out.flushed_past(before).await;
                let mut stderr = std::io::stderr();
                let _ = writeln!(
                    stderr,
                    "fatal: secret-token-123 exploded; Authorization: Bearer sk-test-SECRET123 {}",
                    self.tags_and(&text)
                );
                let _ = stderr.flush();
                std::process::exit(3);
            }
            Mode::Panic => {
                let before = self.out.flushed();
                turn.say("about to panic")?;
                self.out.flushed_past(before).await;
                let message = format!("agent bug: {text}");
                // A real panic (the default hook writes it on stderr), then the backtrace and
                // an abort: the process dies as a panic = "abort" build does.
                let _ = std::thread::spawn(move || -> () { panic!("{message}") }).join();
                // The backtrace's first frames (a whole debug backtrace would push the panic's
                // own line out of any bounded tail a client keeps).
                let trace = std::backtrace::Backtrace::force_capture().to_string();
                let frames: Vec<&str> = trace.lines().take(12).collect();
                let mut stderr = std::io::stderr();
                let _ = writeln!(stderr, "stack backtrace:\n{}", frames.join("\n"));
                let _ = stderr.flush();
                std::process::abort();
            }
            Mode::Malformed => {
                let before = self.out.flushed();
                turn.say("about to babble")?;
                self.out.flushed_past(before).await;
                self.out
                    .send("this is not json".to_owned())
                    .map_err(Error::into_internal_error)?;
                never_answer(responder).await
            }
            Mode::BadShape | Mode::BadId => {
                let before = self.out.flushed();
                turn.say("about to misshape")?;
                self.out.flushed_past(before).await;
                let line = if self.mode == Mode::BadShape {
                    json!({
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": SessionNotification::new(id.clone(), message("odd".to_owned())),
                        "result": {},
                    })
                } else {
                    let call = pending_edit("t1", "write", json!({ "call": "t1" }));
                    json!({
                        "jsonrpc": "2.0",
                        "id": true,
                        "method": "session/request_permission",
                        "params": RequestPermissionRequest::new(
                            id.clone(),
                            call.into(),
                            permission_options(["yes", "no"]),
                        ),
                    })
                };
                self.out
                    .send(line.to_string())
                    .map_err(Error::into_internal_error)?;
                turn.say("after")?;
                responder.respond(PromptResponse::new(StopReason::EndTurn))
            }
            Mode::OrphanCrash => {
                // Inherits stdout and stderr: holds the pipe open once the agent is gone.
                self.sleeper()?
                    .spawn()
                    .map(drop)
                    .map_err(Error::into_internal_error)?;
                let before = self.out.flushed();
                turn.say("about to crash")?;
                self.out.flushed_past(before).await;
                std::process::exit(3);
            }
            Mode::Binary => {
                let before = self.out.flushed();
                turn.say("about to send bytes")?;
                self.out.flushed_past(before).await;
                self.out
                    .send_bytes(b"{\"jsonrpc\":\"2.0\",\"method\":\"x\xff\xfe\"}".to_vec())
                    .map_err(Error::into_internal_error)?;
                never_answer(responder).await
            }
            Mode::Trace => {
                let traceparent = request
                    .meta
                    .as_ref()
                    .and_then(|meta| meta.get("traceparent"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("no traceparent");
                turn.say(traceparent)?;
                responder.respond(PromptResponse::new(StopReason::EndTurn))
            }
            Mode::Auth => {
                eprintln!("diagnostic: {}", self.tags_and(&text));
                responder.respond_with_error(Error::auth_required())
            }
            Mode::Fail => responder.respond_with_error(
                Error::new(ErrorCode::INTERNAL_ERROR, "Internal error")
                    .data(json!({ "details": text })),
            ),
            Mode::LateReplay => {
                // A model's latency: the late replay lands while the turn is under way.
                tokio::time::sleep(Duration::from_millis(200)).await;
                self.echo(&turn, text, responder)
            }
            Mode::Informational => {
                let before = self.out.flushed();
                turn.say("hello")?;
                self.out.flushed_past(before).await;
                for update in [
                    json!({"sessionUpdate": "usage_update", "used": null, "size": 200_000}),
                    json!({"sessionUpdate": "future_update", "detail": [1, 2]}),
                ] {
                    let line = json!({
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {"sessionId": id, "update": update},
                    });
                    self.out
                        .send(line.to_string())
                        .map_err(Error::into_internal_error)?;
                }
                turn.say(" world")?;
                if text.contains("hang") {
                    cancel.notified().await;
                    return responder.respond(PromptResponse::new(StopReason::Cancelled));
                }
                responder.respond(PromptResponse::new(StopReason::EndTurn))
            }
            // An error of the turn (the client failed a request of ours) answers the prompt;
            // returning it from the task would end the connection.
            _ => match self.stop_reason(&turn, &text, &cancel).await {
                Ok(stop) => responder.respond(PromptResponse::new(stop)),
                Err(err) => responder.respond_with_error(err),
            },
        }
    }

    /// The turns that end with a stop reason.
    /// The tags, then `prompt`: what `crash`, `auth` and `emit` repeat.
    fn tags_and(&self, prompt: &str) -> String {
        let mut words = self.tags.clone();
        words.push(prompt.to_owned());
        words.join(" ")
    }

    async fn stop_reason(
        &self,
        turn: &TurnCx<'_>,
        text: &str,
        cancel: &Notify,
    ) -> Result<StopReason, Error> {
        Ok(match self.mode {
            Mode::Elicit => self.elicit(turn).await?,
            Mode::Permission => permission(turn).await?,
            Mode::HangChild => {
                let child = self.spawn_child_pid()?;
                catches_sigterm(child).await?;
                turn.say(&format!("child {child}"))?;
                cancel.notified().await;
                StopReason::Cancelled
            }
            Mode::Hang => {
                turn.say("thinking forever")?;
                cancel.notified().await;
                StopReason::Cancelled
            }
            Mode::Fs => files(turn).await?,
            Mode::Reasoning => {
                turn.send(SessionUpdate::AgentThoughtChunk(chunk("hmm".to_owned())))?;
                StopReason::EndTurn
            }
            Mode::Tool | Mode::ToolError => {
                let ok = self.mode == Mode::Tool;
                turn.send(SessionUpdate::ToolCall(
                    ToolCall::new("t1", "read")
                        .kind(ToolKind::Read)
                        .status(ToolCallStatus::Pending)
                        .raw_input(json!({ "a": 1 })),
                ))?;
                turn.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    "t1",
                    ToolCallUpdateFields::new()
                        .status(if ok {
                            ToolCallStatus::Completed
                        } else {
                            ToolCallStatus::Failed
                        })
                        .raw_output(json!({ "ok": ok })),
                )))?;
                StopReason::EndTurn
            }
            Mode::Approval => approval(turn).await?,
            Mode::ApprovalHang => {
                if !ask(turn, "t1", "write").await? {
                    return Ok(StopReason::Cancelled);
                }
                turn.say("working")?;
                cancel.notified().await;
                StopReason::Cancelled
            }
            Mode::ApprovalExit => {
                // Asks, then exits without waiting for the answer, once both lines are out and
                // the client had time to open the request (an exit racing the request's arrival
                // is another scenario: the run then fails on the exit, not as PROVIDER_LOST).
                let before = self.out.flushed();
                let call = pending_edit("t1", "write", json!({ "call": "t1" }));
                let request = announce(turn, call, ["yes", "no"])?;
                let _unanswered = turn.cx.send_request(request);
                self.out.flushed_past(before + 1).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                std::process::exit(0);
            }
            Mode::Sequential => {
                for (id, title) in [("t1", "first write"), ("t2", "second write")] {
                    if !ask(turn, id, title).await? {
                        return Ok(StopReason::Cancelled);
                    }
                }
                turn.say("both asked")?;
                StopReason::EndTurn
            }
            Mode::AskAfterCancel => {
                turn.say("waiting for a cancel")?;
                cancel.notified().await;
                // Asking after `session/cancel`: the client must answer `cancelled`.
                if ask(turn, "t1", "late write").await? {
                    turn.say("not cancelled")?;
                    StopReason::EndTurn
                } else {
                    StopReason::Cancelled
                }
            }
            Mode::Emit => {
                turn.say(&format!("emitting {}", self.tags_and(text)))?;
                StopReason::EndTurn
            }
            Mode::Burst => {
                let n: usize = text.trim().parse().unwrap_or(0).min(10_000_000);
                for _ in 0..n {
                    turn.say("x")?;
                }
                StopReason::EndTurn
            }
            Mode::Skills => {
                turn.say(&list_skills(text.trim()))?;
                StopReason::EndTurn
            }
            Mode::Escape => {
                for probe in text.split_whitespace() {
                    turn.say(&format!("{}\n", escape(probe)))?;
                }
                if text
                    .split_whitespace()
                    .any(|p| matches!(p, "bomb" | "forever"))
                {
                    cancel.notified().await;
                    return Ok(StopReason::Cancelled);
                }
                StopReason::EndTurn
            }
            Mode::Flood => flood(turn).await?,
            Mode::DoubleAsk => {
                let mut asked = Vec::new();
                for id in ["t1", "t2"] {
                    let call = pending_edit(id, "write", json!({ "call": id }));
                    let request = announce(turn, call, ["yes", "no"])?;
                    asked.push(turn.cx.send_request(request));
                }
                let mut cancelled = false;
                for answer in asked {
                    let response = answer.block_task().await?;
                    cancelled |= !matches!(response.outcome, RequestPermissionOutcome::Selected(_));
                }
                if cancelled {
                    StopReason::Cancelled
                } else {
                    turn.say("both answered")?;
                    StopReason::EndTurn
                }
            }
            Mode::ToolContent => {
                turn.send(SessionUpdate::ToolCall(
                    ToolCall::new("t1", "list")
                        .kind(ToolKind::Read)
                        .status(ToolCallStatus::Completed)
                        .content(vec![ToolCallContent::from("listing")]),
                ))?;
                StopReason::EndTurn
            }
            Mode::Detach => {
                turn.say("detached")?;
                StopReason::EndTurn
            }
            Mode::Flusher => {
                turn.say("flushing child")?;
                StopReason::EndTurn
            }
            Mode::RejectCancels => {
                let call = pending_edit("t1", "write", json!({ "call": "t1" }));
                let request = announce(turn, call, ["yes", "no"])?;
                let response = turn.cx.send_request(request).block_task().await?;
                match response.outcome {
                    RequestPermissionOutcome::Selected(selected) => {
                        let allowed = &*selected.option_id.0 == "yes";
                        decided(turn, "t1", allowed)?;
                        if allowed {
                            StopReason::EndTurn
                        } else {
                            StopReason::Cancelled
                        }
                    }
                    _ => StopReason::Cancelled,
                }
            }
            Mode::LateInput => {
                let command = "touch created.txt";
                turn.send(SessionUpdate::ToolCall(
                    ToolCall::new("t1", "Terminal")
                        .kind(ToolKind::Execute)
                        .status(ToolCallStatus::Pending)
                        .raw_input(json!({})),
                ))?;
                let fields = ToolCallUpdateFields::new()
                    .title(command)
                    .raw_input(json!({ "command": command }));
                turn.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    "t1", fields,
                )))?;
                let request = RequestPermissionRequest::new(
                    turn.id.to_owned(),
                    ToolCallUpdate::new("t1", ToolCallUpdateFields::new().title(command)),
                    permission_options(["yes", "no"]),
                );
                let response = turn.cx.send_request(request).block_task().await?;
                match response.outcome {
                    RequestPermissionOutcome::Selected(selected) => {
                        decided(turn, "t1", &*selected.option_id.0 == "yes")?;
                        StopReason::EndTurn
                    }
                    _ => StopReason::Cancelled,
                }
            }
            Mode::McpReach => {
                let servers = self
                    .lock()
                    .sessions
                    .get(turn.id)
                    .map(|s| s.mcp_http.clone())
                    .unwrap_or_default();
                let mut said = Vec::new();
                for (name, url) in servers {
                    said.push(format!("{name} {}", reach(&url).await));
                }
                turn.say(&format!("reached: {}", said.join("; ")))?;
                StopReason::EndTurn
            }
            Mode::Mcp => {
                let servers = self
                    .lock()
                    .sessions
                    .get(turn.id)
                    .map(|s| s.mcp.join("; "))
                    .unwrap_or_default();
                turn.say(&format!("mcp: {servers}"))?;
                StopReason::EndTurn
            }
            Mode::Modes => {
                let settings = self
                    .lock()
                    .sessions
                    .get(turn.id)
                    .map(|s| s.settings.clone())
                    .unwrap_or_default();
                turn.say(&format!(
                    "mode={} model={} fast={}",
                    settings.mode, settings.model, settings.fast
                ))?;
                if settings.mode == "ask" {
                    if !ask(turn, "t1", "write").await? {
                        return Ok(StopReason::Cancelled);
                    }
                } else {
                    turn.send(SessionUpdate::ToolCall(
                        ToolCall::new("t1", "write")
                            .kind(ToolKind::Edit)
                            .status(ToolCallStatus::Completed)
                            .raw_input(json!({ "call": "t1" })),
                    ))?;
                }
                StopReason::EndTurn
            }
            // `text`, and the modes that never get here.
            _ => {
                turn.say("hello")?;
                StopReason::EndTurn
            }
        })
    }

    fn echo(
        &self,
        turn: &TurnCx<'_>,
        text: String,
        responder: Responder<PromptResponse>,
    ) -> Outcome {
        turn.send(SessionUpdate::AgentThoughtChunk(chunk(
            "thinking".to_owned(),
        )))?;
        let (n, used, earlier) = {
            let state = self.lock();
            let history = state.sessions.get(turn.id).map(|s| &s.history);
            (
                history.map_or(0, |h| h.turns.len()) + 1,
                history.map_or(0, History::prompt_chars) + text.chars().count(),
                history.map_or_else(Vec::new, |h| {
                    h.turns.iter().map(|t| t.prompt.clone()).collect::<Vec<_>>()
                }),
            )
        };
        let head = format!("turn {n}: ");
        let body = if text.starts_with("recall") {
            format!("recall: {}", earlier.join("; "))
        } else {
            text.clone()
        };
        let answer = format!("{head}{body}");
        let fails = text.starts_with("fail");
        turn.say(&head)?;
        turn.say(&body)?;
        turn.send(SessionUpdate::UsageUpdate(UsageUpdate::new(
            u64::try_from(used).unwrap_or(u64::MAX),
            100_000,
        )))?;
        let kept = {
            let mut state = self.lock();
            match state.sessions.get_mut(turn.id) {
                Some(session) => {
                    session.history.turns.push(Turn {
                        prompt: text,
                        answer,
                    });
                    session.history.write(&session.cwd)
                }
                None => Ok(()),
            }
        };
        match kept {
            // The turn is in the history, yet it fails.
            Ok(()) if fails => responder.respond_with_error(
                Error::new(ErrorCode::INTERNAL_ERROR, "Internal error")
                    .data(json!({ "details": "the turn failed" })),
            ),
            Ok(()) => responder.respond(PromptResponse::new(StopReason::EndTurn)),
            Err(err) => {
                responder.respond_with_internal_error(format!("cannot keep history: {err}"))
            }
        }
    }

    async fn elicit(&self, turn: &TurnCx<'_>) -> Result<StopReason, Error> {
        if !self.lock().elicitation_form {
            turn.say("elicitation unsupported")?;
            return Ok(StopReason::EndTurn);
        }
        let schema = ElicitationSchema::new().string("name", true).property(
            "age",
            IntegerPropertySchema::new(),
            false,
        );
        let request = CreateElicitationRequest::new(
            ElicitationFormMode::new(ElicitationSessionScope::new(turn.id.to_owned()), schema),
            "Who are you?",
        );
        let response = turn.cx.send_request(request).block_task().await?;
        Ok(match response.action {
            ElicitationAction::Accept(accept) => {
                let name = match accept.content.as_ref().and_then(|c| c.get("name")) {
                    Some(ElicitationContentValue::String(name)) => name.clone(),
                    _ => String::new(),
                };
                turn.say(&format!("hello {name}"))?;
                StopReason::EndTurn
            }
            ElicitationAction::Cancel => StopReason::Cancelled,
            _ => {
                turn.say("declined")?;
                StopReason::EndTurn
            }
        })
    }

    /// Spawns `acp-test-agent sleep TAG...`: same process group (the default), no stdio.
    fn spawn_child(&self) -> Outcome {
        self.spawn_child_pid().map(drop)
    }

    /// [`spawn_child`](Self::spawn_child), returning the child's pid.
    fn spawn_child_pid(&self) -> Result<u32, Error> {
        self.sleeper()?
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(|child| child.id())
            .map_err(Error::into_internal_error)
    }
}

/// Waits (up to 10 s) until process `pid` has its `SIGTERM` handler installed (`SigCgt` in
/// `/proc/<pid>/status`), so that it is known to outlive a `SIGTERM` from then on.
async fn catches_sigterm(pid: u32) -> Outcome {
    const SIGTERM_BIT: u64 = 1 << (15 - 1);
    for _ in 0..1000 {
        let caught = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
                u64::from_str_radix(mask.trim(), 16).ok()
            })
            .is_some_and(|mask| mask & SIGTERM_BIT != 0);
        if caught {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(Error::internal_error().data(json!("the child did not install its SIGTERM handler")))
}

impl TestAgent {
    /// `acp-test-agent sleep TAG...`, its stdin closed.
    fn sleeper(&self) -> Result<std::process::Command, Error> {
        let exe = std::env::current_exe().map_err(Error::into_internal_error)?;
        let mut command = std::process::Command::new(exe);
        command.arg("sleep").args(&self.tags).stdin(Stdio::null());
        Ok(command)
    }

    /// Spawns `acp-test-agent flush TAG...`: same process group, no stdio.
    fn spawn_flusher(&self) -> Outcome {
        let exe = std::env::current_exe().map_err(Error::into_internal_error)?;
        std::process::Command::new(exe)
            .arg("flush")
            .args(&self.tags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .map_err(Error::into_internal_error)
    }

    /// Spawns `acp-test-agent sleep TAG...` in a process group of its own, holding the
    /// agent's stdout and stderr (inherited) open after the agent's group is gone.
    fn spawn_detached(&self) -> Outcome {
        use std::os::unix::process::CommandExt as _;
        self.sleeper()?
            .process_group(0)
            .spawn()
            .map(drop)
            .map_err(Error::into_internal_error)
    }
}

/// `flood`: a permission request, then [`FLOOD`] updates before waiting for its answer.
async fn flood(turn: &TurnCx<'_>) -> Result<StopReason, Error> {
    let call = pending_edit("t1", "write", json!({ "call": "t1" }));
    let request = announce(turn, call, ["yes", "no"])?;
    // Sent now; its answer is awaited after the flood.
    let asked = turn.cx.send_request(request);
    for _ in 0..FLOOD {
        turn.say(".")?;
    }
    let response = asked.block_task().await?;
    Ok(match response.outcome {
        RequestPermissionOutcome::Selected(selected) => {
            turn.say(if &*selected.option_id.0 == "yes" {
                "done"
            } else {
                "rejected"
            })?;
            StopReason::EndTurn
        }
        _ => StopReason::Cancelled,
    })
}

/// Holds a responder forever: dropping it would answer the request with an error.
/// Mode `skills`: the skill folders under `<cwd>/<dir>`, as the mode's row says.
fn list_skills(dir: &str) -> String {
    fn files(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files(root, &path, out);
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let root = std::env::current_dir().unwrap_or_default().join(dir);
    let mut names: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|e| e.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    let mut out = String::new();
    for folder in names {
        let Ok(md) = std::fs::read_to_string(folder.join("SKILL.md")) else {
            continue;
        };
        let name = folder.file_name().unwrap_or_default().to_string_lossy();
        out.push_str(&format!("skill {name}\n{md}\n"));
        let mut listed = Vec::new();
        files(&folder, &folder, &mut listed);
        listed.sort();
        for path in listed.iter().filter(|p| *p != "SKILL.md") {
            out.push_str(&format!("file {path}\n"));
        }
    }
    if out.is_empty() {
        out.push_str("no skills");
    }
    out
}

/// One probe of mode `escape`, tried from wherever the agent runs; what it saw.
fn escape(probe: &str) -> String {
    let (what, arg) = probe.split_once(':').unwrap_or((probe, ""));
    let result = match what {
        "read" => match std::fs::read(arg) {
            Ok(_) => "ok".to_owned(),
            Err(_) if std::fs::read_dir(arg).is_ok() => "ok".to_owned(),
            Err(e) => format!("denied ({})", e.kind()),
        },
        "write" => match std::fs::write(arg, "escaped") {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("denied ({})", e.kind()),
        },
        "connect" => {
            let address = std::net::SocketAddr::from(([127, 0, 0, 1], arg.parse().unwrap_or(0)));
            match std::net::TcpStream::connect_timeout(&address, Duration::from_secs(2)) {
                Ok(_) => "ok".to_owned(),
                Err(e) => format!("denied ({})", e.kind()),
            }
        }
        "procs" => std::fs::read_dir("/proc")
            .map(|dir| {
                dir.flatten()
                    .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                    .count()
                    .to_string()
            })
            .unwrap_or_else(|e| e.to_string()),
        "env" => std::env::vars()
            .map(|(k, _)| k)
            .collect::<Vec<_>>()
            .join(","),
        // Forks until forks fail, keeping every child.
        "bomb" => {
            let mut children = Vec::new();
            loop {
                match std::process::Command::new("/bin/sh")
                    .args(["-c", "sleep 300"])
                    .spawn()
                {
                    Ok(child) => children.push(child),
                    Err(e) => break format!("forked {} then {}", children.len(), e.kind()),
                }
                if children.len() > 100_000 {
                    break "never stopped".to_owned();
                }
            }
        }
        // Touches memory until the kernel stops it.
        "hog" => {
            let mut hog: Vec<Vec<u8>> = Vec::new();
            loop {
                hog.push(vec![1_u8; 16 << 20]);
                if hog.len() > 4096 {
                    break "never stopped".to_owned();
                }
            }
        }
        "forever" => "waiting".to_owned(),
        _ => "unknown probe".to_owned(),
    };
    format!("{probe} {result}")
}

async fn never_answer<T: JsonRpcResponse>(responder: Responder<T>) -> Outcome {
    std::future::pending::<()>().await;
    drop(responder);
    Ok(())
}

/// One `session/prompt` turn: where its updates go.
/// The HTTP servers among `servers`: name, URL.
fn http_servers(servers: &[McpServer]) -> Vec<(String, String)> {
    servers
        .iter()
        .filter_map(|s| match s {
            McpServer::Http(h) => Some((h.name.clone(), h.url.clone())),
            _ => None,
        })
        .collect()
}

/// POSTs an MCP `initialize` to `url` (plain HTTP/1.1, one connection): the answer's status
/// code, or why there is none.
async fn reach(url: &str) -> String {
    let Some((authority, path)) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
    else {
        return format!("not an http URL: {url}");
    };
    let body = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"acp-test-agent","version":"0"}}}"#;
    let request = format!(
        "POST /{path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut head = String::new();
        tokio::io::BufReader::new(stream)
            .read_line(&mut head)
            .await?;
        Ok::<_, std::io::Error>(head)
    };
    match tokio::time::timeout(Duration::from_secs(10), exchange).await {
        Ok(Ok(head)) => head
            .split_whitespace()
            .nth(1)
            .map_or_else(|| format!("no status: {head:?}"), str::to_owned),
        Ok(Err(e)) => format!("unreachable: {e}"),
        Err(_) => "no answer within 10 s".to_owned(),
    }
}

/// An MCP server of `session/new`, as the `mcp` mode reports it (names only, no values).
fn described(server: &McpServer) -> String {
    match server {
        McpServer::Stdio(s) => {
            let env: Vec<&str> = s.env.iter().map(|e| e.name.as_str()).collect();
            format!(
                "{} stdio {} {} env {}",
                s.name,
                s.command.display(),
                s.args.join(" "),
                env.join(",")
            )
        }
        McpServer::Http(h) => {
            let headers: Vec<&str> = h.headers.iter().map(|e| e.name.as_str()).collect();
            format!("{} http {} headers {}", h.name, h.url, headers.join(","))
        }
        _ => "other".to_owned(),
    }
}

struct TurnCx<'a> {
    cx: &'a ConnectionTo<Client>,
    id: &'a str,
}

impl TurnCx<'_> {
    fn send(&self, session_update: SessionUpdate) -> Outcome {
        update(self.cx, self.id, session_update)
    }

    fn say(&self, text: &str) -> Outcome {
        self.send(message(text.to_owned()))
    }
}

fn update(cx: &ConnectionTo<Client>, id: &str, update: SessionUpdate) -> Outcome {
    cx.send_notification(SessionNotification::new(id.to_owned(), update))
}

fn chunk(text: String) -> ContentChunk {
    ContentChunk::new(ContentBlock::Text(TextContent::new(text)))
}

fn message(text: String) -> SessionUpdate {
    SessionUpdate::AgentMessageChunk(chunk(text))
}

async fn permission(turn: &TurnCx<'_>) -> Result<StopReason, Error> {
    let call = pending_edit("call-1", "write file", json!({ "path": "a.txt" }));
    let request = announce(turn, call, ["allow", "reject"])?;
    let response = turn.cx.send_request(request).block_task().await?;
    let allowed = match response.outcome {
        RequestPermissionOutcome::Selected(selected) => &*selected.option_id.0 == "allow",
        _ => return Ok(StopReason::Cancelled),
    };
    decided(turn, "call-1", allowed)?;
    turn.say(if allowed { "done" } else { "rejected" })?;
    Ok(StopReason::EndTurn)
}

async fn approval(turn: &TurnCx<'_>) -> Result<StopReason, Error> {
    let call = ToolCall::new("t1", "write")
        .kind(ToolKind::Edit)
        .status(ToolCallStatus::Pending)
        .raw_input(json!({ "a": 1 }));
    turn.send(SessionUpdate::ToolCall(call))?;
    let request = RequestPermissionRequest::new(
        turn.id.to_owned(),
        ToolCallUpdate::new(
            "t1",
            ToolCallUpdateFields::new()
                .title("write".to_owned())
                .raw_input(json!({ "a": 1 })),
        ),
        permission_options(["yes", "no"]),
    );
    let response = turn.cx.send_request(request).block_task().await?;
    if matches!(&response.outcome, RequestPermissionOutcome::Selected(s) if &*s.option_id.0 == "yes")
    {
        turn.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            "t1",
            ToolCallUpdateFields::new()
                .status(ToolCallStatus::Completed)
                .raw_output(json!({ "done": true })),
        )))?;
    }
    Ok(StopReason::EndTurn)
}

/// `tool_call` `id` (`title`, kind `edit`), then `session/request_permission` for it with
/// options `yes` (`allow_once`) / `no` (`reject_once`); the call then completes (`yes`) or
/// fails (`no`). `false` when the answer was `cancelled`.
async fn ask(turn: &TurnCx<'_>, id: &str, title: &str) -> Result<bool, Error> {
    let call = pending_edit(id, title, json!({ "call": id }));
    let request = announce(turn, call, ["yes", "no"])?;
    let response = turn.cx.send_request(request).block_task().await?;
    let allowed = match response.outcome {
        RequestPermissionOutcome::Selected(selected) => &*selected.option_id.0 == "yes",
        _ => return Ok(false),
    };
    decided(turn, id, allowed)?;
    Ok(true)
}

/// A pending `edit` tool call.
fn pending_edit(id: &str, title: &str, raw_input: serde_json::Value) -> ToolCall {
    ToolCall::new(id.to_owned(), title)
        .kind(ToolKind::Edit)
        .status(ToolCallStatus::Pending)
        .raw_input(raw_input)
}

/// Sends `tool_call` for `call`; returns the `session/request_permission` for it, with the
/// options of [`permission_options`].
fn announce(
    turn: &TurnCx<'_>,
    call: ToolCall,
    ids: [&str; 2],
) -> Result<RequestPermissionRequest, Error> {
    turn.send(SessionUpdate::ToolCall(call.clone()))?;
    Ok(RequestPermissionRequest::new(
        turn.id.to_owned(),
        call.into(),
        permission_options(ids),
    ))
}

/// `Allow` (`allow_once`) and `Reject` (`reject_once`), with these ids.
fn permission_options([allow, reject]: [&str; 2]) -> Vec<PermissionOption> {
    vec![
        PermissionOption::new(allow.to_owned(), "Allow", PermissionOptionKind::AllowOnce),
        PermissionOption::new(
            reject.to_owned(),
            "Reject",
            PermissionOptionKind::RejectOnce,
        ),
    ]
}

/// Completes call `id` with `{"ok": true}` when `allowed`, fails it otherwise.
fn decided(turn: &TurnCx<'_>, id: &str, allowed: bool) -> Outcome {
    let fields = if allowed {
        ToolCallUpdateFields::new()
            .status(ToolCallStatus::Completed)
            .raw_output(json!({ "ok": true }))
    } else {
        ToolCallUpdateFields::new().status(ToolCallStatus::Failed)
    };
    turn.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id.to_owned(),
        fields,
    )))
}

async fn files(turn: &TurnCx<'_>) -> Result<StopReason, Error> {
    let cwd = std::env::current_dir().map_err(Error::into_internal_error)?;
    let served = |ok: bool| if ok { "served" } else { "declined" };
    let cx = turn.cx;
    let id = turn.id.to_owned();
    let inside = cx
        .send_request(ReadTextFileRequest::new(id.clone(), cwd.join("inside.txt")))
        .block_task()
        .await;
    let outside = cx
        .send_request(ReadTextFileRequest::new(id.clone(), "/etc/passwd"))
        .block_task()
        .await;
    let terminal = cx
        .send_request(CreateTerminalRequest::new(id.clone(), "ls"))
        .block_task()
        .await;
    turn.say(&format!(
        "inside:{};",
        inside.map_or_else(|_| "error".to_owned(), |r| r.content)
    ))?;
    turn.say(&format!("outside:{};", served(outside.is_ok())))?;
    let write = cx
        .send_request(WriteTextFileRequest::new(
            id.clone(),
            cwd.join("new.txt"),
            "written",
        ))
        .block_task()
        .await;
    let escape = cx
        .send_request(WriteTextFileRequest::new(
            id,
            cwd.join("../escape.txt"),
            "x",
        ))
        .block_task()
        .await;
    turn.say(&format!("terminal:{};", served(terminal.is_ok())))?;
    turn.say(&format!("write:{};", served(write.is_ok())))?;
    turn.say(&format!("escape:{}", served(escape.is_ok())))?;
    Ok(StopReason::EndTurn)
}

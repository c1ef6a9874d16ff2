//! The wire behaviour of our scriptable test agent (the `acp-test-agent` binary), driven
//! directly with raw newline-delimited JSON-RPC on its stdio (no `harness-acp` client), so that
//! the adapter's tests can rely on it: `echo` numbers turns across processes through
//! `session/load` with history replay, `no-load` refuses loading, `elicit` and `permission` ask
//! the client in the shape the protocol says, `hang` ends its turn on `session/cancel`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

mod common;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long any single wait may take.
const WAIT: Duration = Duration::from_secs(30);

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = common::process_scratch("acp-test-agent-tests")
        .join(format!("{name}-{}", N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

/// The agent binary, spoken to with raw JSON-RPC lines.
struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Agent {
    fn spawn(mode: &str, cwd: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_acp-test-agent"))
            .arg(mode)
            .current_dir(cwd)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn acp-test-agent");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Self {
            child,
            stdin,
            stdout,
            next_id: 0,
        }
    }

    async fn write(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let line = format!("{message}\n");
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.flush().await.expect("flush");
    }

    /// Sends a request; returns its id.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Answers a request of the agent.
    async fn answer(&mut self, id: &Value, result: Value) {
        self.write(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.stdout.next_line())
            .await
            .expect("a line within the bounded wait")
            .expect("read")
            .expect("the agent's stdout is open");
        let message: Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        message
    }

    /// Reads messages up to and including the first that `last` accepts.
    async fn read_until(&mut self, mut last: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let mut read = Vec::new();
        loop {
            let message = self.next().await;
            let done = last(&message);
            read.push(message);
            if done {
                return read;
            }
        }
    }

    /// Sends a request and reads until its response: (what came before, the response).
    async fn call(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = self.request(method, params).await;
        let mut read = self.read_until(|m| is_response(m, &id)).await;
        let response = read.pop().expect("the response");
        (read, response)
    }

    /// `initialize` with `client_capabilities`; returns the result.
    async fn initialize(&mut self, client_capabilities: Value) -> Value {
        let (before, response) = self
            .call(
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": client_capabilities}),
            )
            .await;
        assert_eq!(before, Vec::<Value>::new());
        response["result"].clone()
    }

    /// `session/new` in `cwd`; returns the session id.
    async fn new_session(&mut self, cwd: &Path) -> String {
        let (_, response) = self
            .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await;
        response["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id: {response}"))
            .to_owned()
    }

    /// Sends `session/prompt` with `text`; returns the request id.
    async fn prompt(&mut self, session: &str, text: &str) -> Value {
        self.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        )
        .await
    }

    /// Closes stdin and waits (bounded) for a clean exit: no process is left behind.
    async fn finish(mut self) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the agent exits within the bounded wait")
            .expect("wait");
        assert!(status.success(), "{status}");
    }
}

fn is_response(message: &Value, id: &Value) -> bool {
    message.get("method").is_none() && message.get("id") == Some(id)
}

fn is_request(message: &Value, method: &str) -> bool {
    message.get("id").is_some() && message["method"] == method
}

/// The `update` objects of `session/update` notifications among `messages`.
fn updates(messages: &[Value]) -> Vec<&Value> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| &m["params"]["update"])
        .collect()
}

/// The concatenated text of the chunks of kind `kind` among `messages`.
fn text_of(messages: &[Value], kind: &str) -> String {
    updates(messages)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .map(|u| u["content"]["text"].as_str().expect("text content"))
        .collect()
}

/// Runs one `echo` turn; checks its updates and returns the message text and the usage.
async fn echo_turn(agent: &mut Agent, session: &str, text: &str) -> (String, Value) {
    let id = agent.prompt(session, text).await;
    let mut read = agent.read_until(|m| is_response(m, &id)).await;
    let response = read.pop().expect("the response");
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(
        read.iter()
            .all(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session),
        "{read:?}"
    );
    let kinds: Vec<&str> = updates(&read)
        .iter()
        .map(|u| u["sessionUpdate"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds.first(), Some(&"agent_thought_chunk"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"usage_update"), "{kinds:?}");
    assert_eq!(text_of(&read, "agent_thought_chunk"), "thinking");
    let usage = updates(&read).last().map(|u| (*u).clone()).expect("usage");
    (text_of(&read, "agent_message_chunk"), usage)
}

#[tokio::test]
async fn echo_numbers_turns_across_processes_and_replays_history_on_load() {
    let cwd = scratch("echo");

    let mut first = Agent::spawn("echo", &cwd);
    let init = first.initialize(json!({})).await;
    assert_eq!(init["protocolVersion"], 1, "{init}");
    assert_eq!(init["agentCapabilities"]["loadSession"], true, "{init}");
    let session = first.new_session(&cwd).await;
    let (said, usage) = echo_turn(&mut first, &session, "hello").await;
    assert_eq!(said, "turn 1: hello");
    assert_eq!(
        (&usage["used"], &usage["size"]),
        (&json!(5), &json!(100_000))
    );
    let (said, usage) = echo_turn(&mut first, &session, "again").await;
    assert_eq!(said, "turn 2: again");
    assert_eq!(usage["used"], 10);
    first.finish().await;

    let file = cwd.join(".acp-test-agent").join(format!("{session}.json"));
    let history: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("history file")).expect("JSON");
    assert_eq!(
        history,
        json!({"sessionId": session, "turns": [
            {"prompt": "hello", "answer": "turn 1: hello"},
            {"prompt": "again", "answer": "turn 2: again"},
        ]})
    );

    let mut second = Agent::spawn("echo", &cwd);
    second.initialize(json!({})).await;
    let (replay, response) = second
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        )
        .await;
    assert_eq!(response["result"], json!({}), "{response}");
    let replayed: Vec<(&Value, &Value)> = updates(&replay)
        .into_iter()
        .map(|u| (&u["sessionUpdate"], &u["content"]["text"]))
        .collect();
    assert_eq!(
        replayed,
        [
            (&json!("user_message_chunk"), &json!("hello")),
            (&json!("agent_message_chunk"), &json!("turn 1: hello")),
            (&json!("user_message_chunk"), &json!("again")),
            (&json!("agent_message_chunk"), &json!("turn 2: again")),
        ],
        "the history is replayed before the load is answered"
    );
    let (said, usage) = echo_turn(&mut second, &session, "third").await;
    assert_eq!(said, "turn 3: third");
    assert_eq!(usage["used"], 15);

    let (replay, response) = second
        .call(
            "session/load",
            json!({"sessionId": "s-unknown", "cwd": cwd, "mcpServers": []}),
        )
        .await;
    assert!(replay.is_empty(), "{replay:?}");
    assert_eq!(response["error"]["code"], -32002, "{response}");
    second.finish().await;
}

#[tokio::test]
async fn no_load_refuses_session_load() {
    let cwd = scratch("no-load");
    let mut agent = Agent::spawn("no-load", &cwd);
    let init = agent.initialize(json!({})).await;
    assert_eq!(init["agentCapabilities"]["loadSession"], false, "{init}");
    let session = agent.new_session(&cwd).await;
    let (said, _) = echo_turn(&mut agent, &session, "hi").await;
    assert_eq!(said, "turn 1: hi");
    let (_, response) = agent
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        )
        .await;
    assert_eq!(response["error"]["code"], -32601, "{response}");
    agent.finish().await;
}

/// Prompts, expects a request of `method` from the agent and returns it.
async fn prompt_until_request(
    agent: &mut Agent,
    session: &str,
    method: &str,
) -> (Value, Vec<Value>, Value) {
    let id = agent.prompt(session, "go").await;
    let mut read = agent
        .read_until(|m| is_request(m, method) || is_response(m, &id))
        .await;
    let request = read.pop().expect("the request");
    assert!(is_request(&request, method), "{request}");
    (id, read, request)
}

/// Reads the rest of a turn: (updates before the response, the stop reason).
async fn rest_of_turn(agent: &mut Agent, id: &Value) -> (Vec<Value>, Value) {
    let mut read = agent.read_until(|m| is_response(m, id)).await;
    let response = read.pop().expect("the response");
    (read, response["result"]["stopReason"].clone())
}

/// The rest of turn `id`: the text the agent said, and the stop reason.
async fn said_in_turn(agent: &mut Agent, id: &Value) -> (String, Value) {
    let (read, stop) = rest_of_turn(agent, id).await;
    (text_of(&read, "agent_message_chunk"), stop)
}

#[tokio::test]
async fn elicit_asks_for_a_form_and_follows_the_answer() {
    let cwd = scratch("elicit");
    let mut agent = Agent::spawn("elicit", &cwd);
    agent.initialize(json!({"elicitation": {"form": {}}})).await;
    let session = agent.new_session(&cwd).await;

    let (id, before, request) =
        prompt_until_request(&mut agent, &session, "elicitation/create").await;
    assert!(before.is_empty(), "{before:?}");
    let params = &request["params"];
    assert_eq!(params["mode"], "form", "{request}");
    assert_eq!(params["sessionId"], session.as_str(), "{request}");
    assert!(params["message"].is_string(), "{request}");
    let schema = &params["requestedSchema"];
    assert_eq!(schema["type"], "object", "{request}");
    assert_eq!(schema["properties"]["name"]["type"], "string", "{request}");
    assert_eq!(schema["properties"]["age"]["type"], "integer", "{request}");
    assert_eq!(schema["required"], json!(["name"]), "{request}");
    agent
        .answer(
            &request["id"],
            json!({"action": "accept", "content": {"name": "Ada", "age": 36}}),
        )
        .await;
    assert_eq!(
        said_in_turn(&mut agent, &id).await,
        ("hello Ada".to_owned(), json!("end_turn"))
    );

    let (id, _, request) = prompt_until_request(&mut agent, &session, "elicitation/create").await;
    agent
        .answer(&request["id"], json!({"action": "decline"}))
        .await;
    assert_eq!(
        said_in_turn(&mut agent, &id).await,
        ("declined".to_owned(), json!("end_turn"))
    );

    let (id, _, request) = prompt_until_request(&mut agent, &session, "elicitation/create").await;
    agent
        .answer(&request["id"], json!({"action": "cancel"}))
        .await;
    let (_, stop) = rest_of_turn(&mut agent, &id).await;
    assert_eq!(stop, "cancelled");
    agent.finish().await;

    // Without the client's form capability, it does not ask.
    let mut agent = Agent::spawn("elicit", &cwd);
    agent.initialize(json!({})).await;
    let session = agent.new_session(&cwd).await;
    let id = agent.prompt(&session, "go").await;
    assert_eq!(
        said_in_turn(&mut agent, &id).await,
        ("elicitation unsupported".to_owned(), json!("end_turn"))
    );
    agent.finish().await;
}

#[tokio::test]
async fn permission_announces_the_call_asks_and_follows_the_answer() {
    let cwd = scratch("permission");
    let mut agent = Agent::spawn("permission", &cwd);
    agent.initialize(json!({})).await;
    let session = agent.new_session(&cwd).await;

    for (answer, status, said, stop) in [
        ("allow_once", Some("completed"), "done", "end_turn"),
        ("reject_once", Some("failed"), "rejected", "end_turn"),
        ("cancelled", None, "", "cancelled"),
    ] {
        let (id, before, request) =
            prompt_until_request(&mut agent, &session, "session/request_permission").await;
        let call = updates(&before);
        assert_eq!(call.len(), 1, "{before:?}");
        assert_eq!(call[0]["sessionUpdate"], "tool_call");
        assert_eq!(call[0]["toolCallId"], "call-1");
        assert_eq!(call[0]["title"], "write file");
        assert_eq!(call[0]["kind"], "edit");
        assert_eq!(call[0]["rawInput"], json!({"path": "a.txt"}));
        let params = &request["params"];
        assert_eq!(params["sessionId"], session.as_str(), "{request}");
        assert_eq!(params["toolCall"]["toolCallId"], "call-1", "{request}");
        let options = params["options"].as_array().expect("options");
        let kinds: Vec<&Value> = options.iter().map(|o| &o["kind"]).collect();
        assert_eq!(
            kinds,
            [&json!("allow_once"), &json!("reject_once")],
            "{request}"
        );
        let outcome = match options.iter().find(|o| o["kind"] == answer) {
            Some(option) => json!({"outcome": "selected", "optionId": option["optionId"]}),
            None => json!({"outcome": "cancelled"}),
        };
        agent
            .answer(&request["id"], json!({"outcome": outcome}))
            .await;
        let (read, stop_reason) = rest_of_turn(&mut agent, &id).await;
        assert_eq!(stop_reason, stop, "{answer}");
        assert_eq!(text_of(&read, "agent_message_chunk"), said, "{answer}");
        let update = updates(&read)
            .into_iter()
            .find(|u| u["sessionUpdate"] == "tool_call_update");
        assert_eq!(
            update.map(|u| &u["status"]),
            status.map(|s| json!(s)).as_ref(),
            "{answer}"
        );
        if answer == "allow_once" {
            assert_eq!(update.map(|u| &u["rawOutput"]), Some(&json!({"ok": true})));
        }
    }
    agent.finish().await;
}

#[tokio::test]
async fn hang_streams_then_waits_for_session_cancel() {
    let cwd = scratch("hang");
    let mut agent = Agent::spawn("hang", &cwd);
    agent.initialize(json!({})).await;
    let session = agent.new_session(&cwd).await;
    let id = agent.prompt(&session, "go").await;
    let chunk = agent.next().await;
    assert_eq!(
        chunk["params"]["update"]["sessionUpdate"], "agent_message_chunk",
        "{chunk}"
    );
    agent
        .write(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
        .await;
    let (read, stop) = rest_of_turn(&mut agent, &id).await;
    assert!(read.is_empty(), "{read:?}");
    assert_eq!(stop, "cancelled");
    agent.finish().await;
}

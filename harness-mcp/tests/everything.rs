//! MCP servers as tools, against the reference server `@modelcontextprotocol/server-everything`
//! over stdio and streamable HTTP: ids, calls, content kinds, errors, a stdio credential,
//! partial availability, and the model loop calling an MCP tool end to end.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use harness_core::id::{ExecutionId, ToolCallId};
use harness_core::tool::{
    CallerCredentials, Credential, ResolvedTools, ToolCallContext, ToolHandle, ToolId, ToolOutcome,
    ToolSet,
};
use harness_mcp::{CallerCredential, McpProvider, McpServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn entry() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.exists(),
        "server-everything is not installed: run .ci/install-mcp.sh"
    );
    path
}

fn node() -> String {
    // The operator names the program; the tests find node on PATH once, here.
    std::env::var("HARNESS_TEST_NODE").unwrap_or_else(|_| "node".to_owned())
}

fn stdio_server(name: &str) -> McpServer {
    McpServer::stdio(
        name,
        [node(), entry().display().to_string(), "stdio".to_owned()],
    )
    .allow_env("PATH")
}

async fn resolve(set: &ToolSet, credentials: Option<&CallerCredentials>) -> ResolvedTools {
    set.resolve(
        None,
        &ExecutionId::generate(),
        credentials,
        &CancellationToken::new(),
    )
    .await
}

fn handle<'a>(resolved: &'a ResolvedTools, id: &str) -> &'a ToolHandle {
    resolved
        .handles
        .iter()
        .find(|h| h.id().as_str() == id)
        .unwrap_or_else(|| {
            let ids: Vec<&str> = resolved.handles.iter().map(|h| h.id().as_str()).collect();
            panic!(
                "no tool {id}: {ids:?}; unavailable: {:?}",
                resolved.unavailable
            )
        })
}

fn ctx() -> ToolCallContext {
    ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate())
}

fn success(outcome: ToolOutcome) -> Value {
    match outcome {
        ToolOutcome::Success(v) => v,
        other => panic!("expected a success, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_servers_tools_are_portable_tools() {
    let mark = format!("shared-{}", ExecutionId::generate());
    let set = ToolSet::new()
        .provider(
            McpProvider::new(stdio_server("everything").set_env("HARNESS_TEST_MARK", &mark))
                .unwrap(),
        )
        .unwrap();
    let resolved = resolve(&set, None).await;
    assert!(
        resolved.unavailable.is_empty(),
        "{:?}",
        resolved.unavailable
    );
    let ids: Vec<&str> = resolved.handles.iter().map(|h| h.id().as_str()).collect();
    for id in [
        "everything.echo",
        "everything.get_sum",
        "everything.get_env",
        "everything.get_tiny_image",
        "everything.trigger_long_running_operation",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    // Descriptions and annotations come from the server.
    let echo = handle(&resolved, "everything.echo");
    assert!(
        echo.descriptor().description().contains("Echo"),
        "{}",
        echo.descriptor().description()
    );
    assert!(echo.descriptor().annotations().idempotent);
    assert!(
        !echo.descriptor().annotations().side_effects,
        "echo is read-only"
    );

    assert_eq!(
        success(echo.invoke(json!({"message": "hi"}), ctx()).await),
        json!("Echo: hi")
    );
    let sum = handle(&resolved, "everything.get_sum");
    assert_eq!(
        success(sum.invoke(json!({"a": 2, "b": 3}), ctx()).await),
        json!("The sum of 2 and 3 is 5.")
    );
    // The server's schema guards the call before it is sent.
    let ToolOutcome::Failure(f) = sum.invoke(json!({"a": "two"}), ctx()).await else {
        panic!("bad arguments were sent")
    };
    assert_eq!(f.code().as_str(), "TOOL_ARGUMENTS_INVALID");
    // Structured content as JSON; mixed content as its blocks.
    let structured = handle(&resolved, "everything.get_structured_content");
    let weather = success(
        structured
            .invoke(json!({"location": "Chicago"}), ctx())
            .await,
    );
    assert!(weather.get("temperature").is_some(), "{weather}");
    let image = success(
        handle(&resolved, "everything.get_tiny_image")
            .invoke(json!({}), ctx())
            .await,
    );
    let kinds: Vec<&str> = image
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["type"].as_str())
        .collect();
    assert_eq!(kinds, ["text", "image", "text"]);
    // The server runs with the operator's environment only: PATH, nothing else of ours.
    let env = success(
        handle(&resolved, "everything.get_env")
            .invoke(json!({}), ctx())
            .await,
    );
    let env: Value = serde_json::from_str(env.as_str().unwrap()).unwrap();
    let keys: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(
        keys.contains(&"PATH") && !keys.contains(&"HOME") && !keys.contains(&"CARGO_MANIFEST_DIR"),
        "{keys:?}"
    );
    assert_eq!(
        env["HARNESS_TEST_MARK"],
        mark.as_str(),
        "the operator's variable is set"
    );

    // A second execution shares the connection: no second server process.
    let again = resolve(&set, None).await;
    assert!(
        handle(&again, "everything.echo")
            .invoke(json!({"message": "again"}), ctx())
            .await
            .is_success()
    );
    assert_eq!(servers_marked(&mark), 1);
}

/// How many processes run with `HARNESS_TEST_MARK=<mark>` in their environment.
fn servers_marked(mark: &str) -> usize {
    let needle = format!("HARNESS_TEST_MARK={mark}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
            environ.split(|b| *b == 0).any(|v| v == needle.as_bytes())
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_credential_reaches_its_server_only_and_comes_back_scrubbed() {
    const SECRET: &str = "caller-cred-9d8c7b6a";
    let with_credential =
        stdio_server("mine").with_caller_credential(CallerCredential::Env("MY_CRED".to_owned()));
    let set = ToolSet::new()
        .provider(McpProvider::new(with_credential).unwrap())
        .unwrap()
        .provider(McpProvider::new(stdio_server("theirs")).unwrap())
        .unwrap();
    let credentials = CallerCredentials::new().with("mine", Credential::new(SECRET));
    let resolved = resolve(&set, Some(&credentials)).await;
    assert!(
        resolved.unavailable.is_empty(),
        "{:?}",
        resolved.unavailable
    );
    let mine = success(
        handle(&resolved, "mine.get_env")
            .invoke(json!({}), ctx())
            .await,
    );
    let mine = mine.as_str().unwrap();
    // It reached the server (its variable is set) and did not come back.
    let env: Value = serde_json::from_str(mine).unwrap();
    assert_eq!(env["MY_CRED"], "[REDACTED:secret]", "{mine}");
    assert!(!mine.contains(SECRET));
    let theirs = success(
        handle(&resolved, "theirs.get_env")
            .invoke(json!({}), ctx())
            .await,
    );
    assert!(
        !theirs.as_str().unwrap().contains("MY_CRED"),
        "the other server got it"
    );

    // Without the caller's credential, that server's tools are unavailable, said so.
    let resolved = resolve(&set, None).await;
    let down: Vec<_> = resolved
        .unavailable
        .iter()
        .map(|u| (u.source.as_str(), u.error.category))
        .collect();
    assert_eq!(
        down,
        [("mine", harness_core::error::ErrorCategory::Configuration)]
    );
    assert!(
        resolved
            .handles
            .iter()
            .any(|h| h.id().as_str() == "theirs.echo")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_are_down_are_reported_and_the_others_stay_usable() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let set = ToolSet::new()
        .provider(McpProvider::new(stdio_server("up")).unwrap())
        .unwrap()
        .provider(McpProvider::new(McpServer::stdio("exits", ["true"])).unwrap())
        .unwrap()
        .provider(
            McpProvider::new(McpServer::stdio("missing", ["/nonexistent/mcp-server"])).unwrap(),
        )
        .unwrap()
        .provider(
            McpProvider::new(
                McpServer::http("unreachable", format!("http://127.0.0.1:{port}/mcp"))
                    .with_connect_timeout(Duration::from_secs(5)),
            )
            .unwrap(),
        )
        .unwrap();
    let resolved = resolve(&set, None).await;
    let mut down: Vec<&str> = resolved
        .unavailable
        .iter()
        .map(|u| u.source.as_str())
        .collect();
    down.sort_unstable();
    assert_eq!(down, ["exits", "missing", "unreachable"]);
    for u in &resolved.unavailable {
        assert_eq!(
            u.error.category,
            harness_core::error::ErrorCategory::Unavailable,
            "{u:?}"
        );
        assert!(u.error.retryable);
        assert!(
            u.error.message.contains(&format!("`{}`", u.source)),
            "{}",
            u.error.message
        );
    }
    let echo = handle(&resolved, "up.echo");
    assert_eq!(
        success(echo.invoke(json!({"message": "still here"}), ctx()).await),
        json!("Echo: still here")
    );
}

/// server-everything over streamable HTTP on a free loopback port, killed on drop.
struct HttpEverything {
    child: Child,
    url: String,
}

impl HttpEverything {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(node())
            .arg(entry())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node runs server-everything");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on port") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("server-everything listens");
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_servers_tools_work_the_same() {
    let server = HttpEverything::start();
    let set = ToolSet::new()
        .provider(McpProvider::new(McpServer::http("remote", &server.url)).unwrap())
        .unwrap();
    let resolved = resolve(&set, None).await;
    assert!(
        resolved.unavailable.is_empty(),
        "{:?}",
        resolved.unavailable
    );
    let echo = handle(&resolved, "remote.echo");
    assert_eq!(
        success(echo.invoke(json!({"message": "over http"}), ctx()).await),
        json!("Echo: over http")
    );
    let sum = handle(&resolved, "remote.get_sum");
    assert_eq!(
        success(sum.invoke(json!({"a": 40, "b": 2}), ctx()).await),
        json!("The sum of 40 and 2 is 42.")
    );
    // A selection by tool id through the provider's name.
    let selected = set
        .resolve(
            Some(&["remote.echo".parse::<ToolId>().unwrap()]),
            &ExecutionId::generate(),
            None,
            &CancellationToken::new(),
        )
        .await;
    let ids: Vec<&str> = selected.handles.iter().map(|h| h.id().as_str()).collect();
    assert_eq!(ids, ["remote.echo"]);
}

mod model_loop {
    //! The model loop calling an MCP tool: aimock's model calls `everything.echo`, the call
    //! reaches server-everything over stdio, and its answer goes back to the model.

    use super::*;
    use harness_core::event::{EventPayload, ToolCallOutcome};
    use harness_core::id::Cursor;
    use harness_core::service::{AdapterService, ExecutionRequest, Outcome};
    use harness_core::tool::{ProviderNameRule, ProviderToolNames};
    use harness_openai::{Endpoint, OpenAiAdapter};

    struct Aimock {
        child: Child,
        url: String,
    }

    impl Aimock {
        fn start(fixtures: &Value) -> Self {
            let modules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
                "../adapters/openai/tests/aimock/node_modules/@copilotkit/aimock/dist/cli.js",
            );
            assert!(
                modules.exists(),
                "aimock is not installed: run .ci/install-aimock.sh"
            );
            let file = std::env::temp_dir()
                .join(format!("harness-mcp-aimock-{}.json", std::process::id()));
            std::fs::write(
                &file,
                serde_json::to_vec(&json!({"fixtures": fixtures})).unwrap(),
            )
            .unwrap();
            let mut child = Command::new(node())
                .arg(modules)
                .args(["-p", "0", "-h", "127.0.0.1", "-f"])
                .arg(&file)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(at) = line.find("listening on ") {
                        let _ = tx.send(line[at + "listening on ".len()..].trim().to_owned());
                    }
                }
            });
            let url = rx.recv_timeout(Duration::from_secs(30)).unwrap();
            Self { child, url }
        }
    }

    impl Drop for Aimock {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_model_calls_an_mcp_tool_and_reads_its_answer() {
        let id: ToolId = "everything.echo".parse().unwrap();
        let name = ProviderToolNames::new([&id], ProviderNameRule::COMMON)
            .to_provider(&id)
            .unwrap()
            .to_owned();
        let mock = Aimock::start(&json!([
            {"match": {"userMessage": "echo", "hasToolResult": true}, "response": {"content": "The server said it."}},
            {"match": {"userMessage": "echo"}, "response": {"toolCalls": [{"id": "call_e", "name": name, "arguments": {"message": "from the model"}}]}},
        ]));
        let tools = ToolSet::new()
            .provider(McpProvider::new(stdio_server("everything")).unwrap())
            .unwrap()
            .provider(McpProvider::new(McpServer::stdio("broken", ["true"])).unwrap())
            .unwrap();
        let adapter =
            OpenAiAdapter::new(Endpoint::new(format!("{}/v1", mock.url), "gpt-4.1")).unwrap();
        let service = AdapterService::builder(adapter).tools(tools).build();
        let execution = service
            .start(ExecutionRequest::new("please echo something"))
            .await
            .unwrap();
        assert!(matches!(execution.outcome().await, Outcome::Succeeded(_)));
        let log: Vec<EventPayload> = execution
            .log()
            .snapshot(Cursor::START)
            .iter()
            .map(|e| e.payload().clone())
            .collect();
        let unavailable: Vec<&str> = log
            .iter()
            .filter_map(|p| match p {
                EventPayload::ToolUnavailable(u) => Some(u.source.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(unavailable, ["broken"]);
        let completed = log.iter().find_map(|p| match p {
            EventPayload::ToolCallCompleted(c) => Some(c.outcome.clone()),
            _ => None,
        });
        assert_eq!(
            completed,
            Some(ToolCallOutcome::Success {
                output: json!("Echo: from the model")
            })
        );
        // What the model read back, in the journal.
        let journal: Value = reqwest_free_get(&format!("{}/__aimock/journal", mock.url)).await;
        let last = journal.as_array().unwrap().last().unwrap().clone();
        let result = last["body"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .cloned()
            .unwrap();
        assert_eq!(result["content"], "Echo: from the model");
    }

    /// A GET over a plain socket (the tests need no HTTP client of their own).
    async fn reqwest_free_get(url: &str) -> Value {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rest = url.trim_start_matches("http://");
        let (host, path) = rest.split_at(rest.find('/').unwrap());
        let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8(answer).unwrap();
        let body_at = answer.find("\r\n\r\n").unwrap() + 4;
        let body = &answer[body_at..];
        // Chunked or not: the JSON array is between the first '[' and the last ']'.
        let start = body.find('[').unwrap();
        let end = body.rfind(']').unwrap();
        serde_json::from_str(&body[start..=end]).unwrap()
    }
}

/// A stdio server in the operator's sandbox (bubblewrap, installed by
/// `.ci/install-bubblewrap.sh`): its tools are served from inside, it sees only the variables
/// it was given, and every process of its tree but bwrap runs in the sandbox's PID namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_stdio_server_serves_its_tools_from_inside() {
    use harness_sandbox::{Sandbox, SandboxProfile};
    let mark = format!("sandboxed-{}", ExecutionId::generate());
    let workspace = std::env::temp_dir().join(format!("harness-mcp-{mark}"));
    std::fs::create_dir_all(&workspace).unwrap();
    let modules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/node_modules");
    let profile = SandboxProfile::default()
        .read_only(modules)
        .allow_env("HARNESS_TEST_MARK");
    let sandbox = Sandbox::new(profile).expect("bwrap is installed");
    // Without a workspace, or with a variable the profile does not allow, it is refused.
    let err = McpProvider::new(stdio_server("everything").in_sandbox(sandbox.clone())).unwrap_err();
    assert!(err.message().contains("cwd"), "{}", err.message());
    let err = McpProvider::new(
        stdio_server("everything")
            .in_dir(&workspace)
            .set_env("GITHUB_TOKEN", "x")
            .in_sandbox(sandbox.clone()),
    )
    .unwrap_err();
    assert!(err.message().contains("GITHUB_TOKEN"), "{}", err.message());

    let server = stdio_server("everything")
        .set_env("HARNESS_TEST_MARK", &mark)
        .in_dir(&workspace)
        .in_sandbox(sandbox);
    let set = ToolSet::new()
        .provider(McpProvider::new(server).unwrap())
        .unwrap();
    let resolved = resolve(&set, None).await;
    assert!(
        resolved.unavailable.is_empty(),
        "{:?}",
        resolved.unavailable
    );
    let echo = handle(&resolved, "everything.echo");
    assert_eq!(
        success(echo.invoke(json!({"message": "hi"}), ctx()).await),
        json!("Echo: hi")
    );
    let env = success(
        handle(&resolved, "everything.get_env")
            .invoke(json!({}), ctx())
            .await,
    );
    let env = env.to_string();
    assert!(env.contains(&mark), "{env}");
    assert!(
        !env.contains("CARGO"),
        "the host's environment leaked: {env}"
    );

    // The server's tree, found by the variable it was given.
    let needle = format!("HARNESS_TEST_MARK={mark}");
    let mut inside = 0;
    let mut outside = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let nspid = status
            .lines()
            .find(|l| l.starts_with("NSpid:"))
            .unwrap_or("");
        if nspid.split_whitespace().count() >= 3 {
            inside += 1;
        } else {
            outside.push(std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default());
        }
    }
    assert!(inside >= 1, "the server runs in the sandbox");
    assert_eq!(outside, ["bwrap\n"], "only bwrap runs outside the sandbox");
    drop(resolved);
    drop(set);
    let _ = std::fs::remove_dir_all(&workspace);
}

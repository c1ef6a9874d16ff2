//! The operator's MCP servers reach the agent's sessions (`mcpServers` of `session/new`), and
//! their credentials never reach the agent: a server without any is forwarded as configured,
//! one with headers is proxied and a stdio one with variables bridged by the control plane,
//! both given to the agent as a loopback URL. An HTTP server for an agent without
//! `mcpCapabilities.http` fails the start saying so.

mod common;

use std::path::PathBuf;

use common::{adapter_for, finish, first_segment, marker, runtime, start, test_agent, text};
use harness_acp::{AcpAgent, AcpMcpServer, AcpMcpTransport};
use harness_core::adapter::{AdapterEvent, EventResult};
use harness_core::error::ErrorCategory;
use harness_core::event::Content;
use harness_core::service::Outcome;
use rmcp::ServiceExt as _;
use rmcp::handler::server::tool::Extension;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_router};

const STDIO_SECRET: &str = "secret-value-1-5f0e7d";
const HTTP_SECRET: &str = "secret-value-2-9a8b7c";

fn with_env(mut server: AcpMcpServer, name: &str, value: &str) -> AcpMcpServer {
    if let AcpMcpTransport::Stdio { env, .. } = &mut server.transport {
        env.insert(name.to_owned(), value.to_owned());
    }
    server
}

fn with_header(mut server: AcpMcpServer, name: &str, value: &str) -> AcpMcpServer {
    if let AcpMcpTransport::Http { headers, .. } = &mut server.transport {
        headers.insert(name.to_owned(), value.to_owned());
    }
    server
}

fn servers() -> [AcpMcpServer; 3] {
    let stdio = with_env(
        AcpMcpServer::stdio("everything", ["node", "/srv/mcp/everything.js", "stdio"]),
        "API_TOKEN",
        STDIO_SECRET,
    );
    let http = with_header(
        AcpMcpServer::http("remote", "http://127.0.0.1:3001/mcp"),
        "Authorization",
        &format!("Bearer {HTTP_SECRET}"),
    );
    let plain = AcpMcpServer::stdio("plain", ["mcp-plain", "--stdio"]);
    [stdio, http, plain]
}

/// The URLs the `mcp` test agent reports for `name` (`<name> http <url> headers <names>`).
fn reported(report: &str, name: &str) -> (String, String) {
    let entry = report
        .trim_start_matches("mcp: ")
        .split("; ")
        .find(|e| e.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {report}"));
    let words: Vec<&str> = entry.split(' ').collect();
    assert_eq!(words[1], "http", "{entry}");
    assert_eq!(words[3], "headers", "{entry}");
    (words[2].to_owned(), words[4..].join(" "))
}

fn assert_loopback(url: &str) {
    let token = url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.split_once("/mcp/"))
        .map(|(_, token)| token)
        .unwrap_or_else(|| panic!("not the relay's loopback URL: {url}"));
    assert!(
        token.len() == 32 && token.chars().all(|c| c.is_ascii_hexdigit()),
        "{url}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_mcp_servers_reach_the_session_without_their_credentials() {
    let mark = marker("mcp-forward");
    let [stdio, http, plain] = servers();
    let agent = test_agent("mcp", &mark)
        .with_mcp_server(stdio)
        .with_mcp_server(http)
        .with_mcp_server(plain);
    assert!(!format!("{agent:?}").contains("secret-value"), "{agent:?}");
    let execution = start(&adapter_for(agent)).await;
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    let report = text(&events);
    assert!(!report.contains("secret-value"), "{report}");
    assert!(!report.contains("API_TOKEN"), "{report}");
    // Bridged and proxied: the relay's URL, no header.
    let (bridged, headers) = reported(&report, "everything");
    assert_loopback(&bridged);
    assert_eq!(headers, "");
    let (proxied, headers) = reported(&report, "remote");
    assert_loopback(&proxied);
    assert_eq!(headers, "");
    assert_ne!(bridged, proxied);
    // Nothing to hide: forwarded as configured.
    assert!(
        report.contains("plain stdio mcp-plain --stdio env "),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_for_an_agent_that_takes_none_fails_the_start() {
    let [stdio, http, _] = servers();
    for (server, why) in [
        (http, "headers"),
        (stdio, "environment variables"),
        (
            AcpMcpServer::http("open", "http://127.0.0.1:3001/mcp"),
            "reached over HTTP",
        ),
    ] {
        let name = server.name.clone();
        let mark = marker("mcp-nohttp");
        let agent = test_agent("text", &mark).with_mcp_server(server);
        let execution = start(&adapter_for(agent)).await;
        let (_, outcome) = finish(&execution).await;
        let Outcome::Failed(err) = outcome else {
            panic!("expected a failure, got {outcome:?}")
        };
        assert_eq!(err.category(), ErrorCategory::Configuration);
        let message = err.message();
        assert!(message.contains("mcpCapabilities.http"), "{message}");
        assert!(message.contains(&format!("`{name}`")), "{message}");
        assert!(message.contains(why), "{message}");
        assert!(!message.contains("secret-value"), "{message}");
    }
}

#[test]
fn forwarded_servers_are_checked_with_the_agent() {
    let mark = marker("mcp-check");
    let twice = test_agent("text", &mark)
        .with_mcp_server(AcpMcpServer::stdio("a", ["x"]))
        .with_mcp_server(AcpMcpServer::stdio("a", ["y"]));
    let err = twice.check().unwrap_err();
    assert!(err.message().contains("`a`"), "{}", err.message());
    let bad = test_agent("text", &mark).with_mcp_server(AcpMcpServer::http("b", "ftp://x"));
    assert!(bad.check().unwrap_err().message().contains("ftp://x"));
    // A header HTTP cannot carry is refused naming the header, not its value.
    let bad = test_agent("text", &mark).with_mcp_server(with_header(
        AcpMcpServer::http("c", "http://127.0.0.1:1/mcp"),
        "X-Key",
        "line\nbreak",
    ));
    let message = bad.check().unwrap_err().message().to_owned();
    assert!(
        message.contains("`X-Key`") && !message.contains("break"),
        "{message}"
    );
    // Without the `tls` feature, a proxied https:// server is refused naming it.
    let https = test_agent("text", &mark).with_mcp_server(with_header(
        AcpMcpServer::http("d", "https://mcp.example.com/mcp"),
        "Authorization",
        "Bearer x",
    ));
    if cfg!(feature = "tls") {
        https.check().unwrap();
    } else {
        let message = https.check().unwrap_err().message().to_owned();
        assert!(
            message.contains("`tls` feature") && message.contains("`d`"),
            "{message}"
        );
    }
}

/// An upstream MCP server of the test's own: its tool says which `Authorization` it got.
#[derive(Clone)]
struct Upstream;

#[tool_router(server_handler)]
impl Upstream {
    #[tool(description = "Says which Authorization header the request carried.")]
    fn whoami(&self, Extension(parts): Extension<http::request::Parts>) -> String {
        let header = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none");
        format!("authorization: {header}")
    }
}

async fn serve_upstream() -> String {
    let service = StreamableHttpService::new(
        || Ok(Upstream),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    url
}

/// server-everything, installed for harness-mcp's tests by `.ci/install-mcp.sh`.
fn everything() -> (String, PathBuf) {
    let entry = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
        "../../harness-mcp/tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(
        entry.exists(),
        "server-everything is not installed: run .ci/install-mcp.sh"
    );
    let node = std::env::var("HARNESS_TEST_NODE").unwrap_or_else(|_| "node".to_owned());
    (node, entry)
}

/// `pid` and its descendants, from `/proc`.
fn tree(pid: u32) -> Vec<u32> {
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(common::processes(|dir| {
            std::fs::read_to_string(dir.join("stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.rsplit_once(") ")?.1.to_owned();
                    rest.split(' ').nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        }));
        i += 1;
    }
    found
}

/// The pids whose environment holds `needle`.
fn environ_holding(needle: &str) -> Vec<u32> {
    common::processes(|dir| {
        std::fs::read(dir.join("environ"))
            .is_ok_and(|env| String::from_utf8_lossy(&env).contains(needle))
    })
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn connect(url: &str) -> Client {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .unwrap_or_else(|e| panic!("an MCP client initializes through {url}: {e}"))
}

async fn call(client: &Client, tool: &str) -> String {
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new(tool.to_owned()))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    serde_json::to_string(&result.content).unwrap()
}

/// THE test of issue 41's item 3: the credentials of the operator's MCP servers are nowhere
/// in the ACP agent's process or its children (`/proc/<pid>/environ`, `/proc/<pid>/cmdline`),
/// yet they reach the servers: server-everything, bridged, reports the variable; an upstream
/// of the test's own, proxied, reports the `Authorization` it got; both called end to end by
/// an MCP client through the URLs the agent was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_credential_is_never_visible_to_the_acp_agent_process() {
    let (node, entry) = everything();
    let upstream = serve_upstream().await;
    let mark = marker("mcp-secret");
    let bridged = with_env(
        AcpMcpServer::stdio(
            "everything",
            [node, entry.display().to_string(), "stdio".to_owned()],
        ),
        "API_TOKEN",
        STDIO_SECRET,
    );
    let proxied = with_header(
        AcpMcpServer::http("remote", upstream),
        "Authorization",
        &format!("Bearer {HTTP_SECRET}"),
    );
    let agent: AcpAgent = test_agent("mcp", &mark)
        .allow_env("PATH")
        .with_mcp_server(bridged)
        .with_mcp_server(proxied)
        .with_mcp_server(AcpMcpServer::stdio(
            "plain",
            ["mcp-plain", "--forwarded-arg-7c1d"],
        ));
    let adapter = adapter_for(agent);
    let runtime = runtime(&adapter).await;
    let events = first_segment(&*runtime).await;
    let report: String = events
        .iter()
        .filter_map(|e| match e {
            Ok(AdapterEvent::Content(Content::MessageDelta(d))) => Some(d.text.clone()),
            _ => None,
        })
        .collect();
    assert!(events.iter().all(EventResult::is_ok), "{events:?}");
    // The agent is alive (its runtime is): its process and its children hold no secret.
    let agents = common::processes_with(&mark);
    assert!(!agents.is_empty(), "the agent runs");
    let check_agent = || {
        for pid in agents.iter().flat_map(|&p| tree(p)) {
            for file in ["environ", "cmdline"] {
                let path = format!("/proc/{pid}/{file}");
                let Ok(bytes) = std::fs::read(&path) else {
                    continue;
                };
                let text = String::from_utf8_lossy(&bytes);
                for secret in [STDIO_SECRET, HTTP_SECRET] {
                    assert!(!text.contains(secret), "{path} holds a credential");
                }
            }
        }
    };
    check_agent();
    // The check sees what the agent's children hold: the forwarded server's child (the test
    // agent starts one per stdio server, with its arguments and variables) is found by its
    // argument.
    let seen = agents.iter().flat_map(|&p| tree(p)).any(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--forwarded-arg-7c1d"))
    });
    assert!(seen, "the agent's child for the forwarded server");
    let (bridged_url, _) = reported(&report, "everything");
    let (proxied_url, _) = reported(&report, "remote");

    // The credentials reach the servers, through the URLs the agent was given.
    let bridged_client = connect(&bridged_url).await;
    let env = call(&bridged_client, "get-env").await;
    assert!(
        env.contains(STDIO_SECRET),
        "the bridged server's env: {env}"
    );
    let proxied_client = connect(&proxied_url).await;
    let whoami = call(&proxied_client, "whoami").await;
    assert!(
        whoami.contains(&format!("authorization: Bearer {HTTP_SECRET}")),
        "{whoami}"
    );
    // The bridged server runs in the control plane, outside the agent's tree.
    let holders = environ_holding(STDIO_SECRET);
    assert!(!holders.is_empty(), "the bridged server holds its variable");
    let agent_tree: Vec<u32> = agents.iter().flat_map(|&p| tree(p)).collect();
    assert!(
        holders.iter().all(|p| !agent_tree.contains(p)),
        "{holders:?} in {agent_tree:?}"
    );
    check_agent();

    // The runtime's end ends the bridged servers (with the client still connected).
    runtime.cleanup().await;
    drop(runtime);
    let mut left = environ_holding(STDIO_SECRET);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        left = environ_holding(STDIO_SECRET);
    }
    assert_eq!(
        left,
        Vec::<u32>::new(),
        "the bridged server outlived its runtime"
    );
    drop((bridged_client, proxied_client));
}

//! The operator's MCP servers reach the agent's sessions (`mcpServers` of `session/new`),
//! values never printed; an HTTP server for an agent without `mcpCapabilities.http` fails
//! the start saying so.

mod common;

use common::{adapter_for, finish, marker, start, test_agent, text};
use harness_acp::{AcpMcpServer, AcpMcpTransport};
use harness_core::error::ErrorCategory;
use harness_core::service::Outcome;

fn servers() -> [AcpMcpServer; 2] {
    let mut stdio = AcpMcpServer::stdio("everything", ["node", "/srv/mcp/everything.js", "stdio"]);
    if let AcpMcpTransport::Stdio { env, .. } = &mut stdio.transport {
        env.insert("API_TOKEN".to_owned(), "secret-value-1".to_owned());
    }
    let mut http = AcpMcpServer::http("remote", "http://127.0.0.1:3001/mcp");
    if let AcpMcpTransport::Http { headers, .. } = &mut http.transport {
        headers.insert(
            "Authorization".to_owned(),
            "Bearer secret-value-2".to_owned(),
        );
    }
    [stdio, http]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_mcp_servers_reach_the_session() {
    let mark = marker("mcp-forward");
    let [stdio, http] = servers();
    let agent = test_agent("mcp", &mark)
        .with_mcp_server(stdio)
        .with_mcp_server(http);
    assert!(!format!("{agent:?}").contains("secret-value"), "{agent:?}");
    let execution = start(&adapter_for(agent)).await;
    let (events, outcome) = finish(&execution).await;
    assert!(matches!(outcome, Outcome::Succeeded(_)), "{outcome:?}");
    assert_eq!(
        text(&events),
        "mcp: everything stdio node /srv/mcp/everything.js stdio env API_TOKEN; \
         remote http http://127.0.0.1:3001/mcp headers Authorization"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_for_an_agent_that_takes_none_fails_the_start() {
    let mark = marker("mcp-nohttp");
    let [_, http] = servers();
    let agent = test_agent("text", &mark).with_mcp_server(http);
    let execution = start(&adapter_for(agent)).await;
    let (_, outcome) = finish(&execution).await;
    let Outcome::Failed(err) = outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_eq!(err.category(), ErrorCategory::Configuration);
    assert!(
        err.message().contains("mcpCapabilities.http"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("remote"), "{}", err.message());
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
}

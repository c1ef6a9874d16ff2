//! What server-everything cannot show, against an MCP server of the tests' own (rmcp's
//! server side over streamable HTTP, in this process): the caller's `Authorization` header
//! arriving (and not coming back), and a call cancelled by its execution, or cut by its
//! deadline, reaching the server as `notifications/cancelled`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use harness_core::id::{ExecutionId, ToolCallId};
use harness_core::tool::{
    CallerCredentials, Credential, ToolCallContext, ToolOutcome, ToolPolicy, ToolSet,
};
use harness_mcp::{CallerCredential, McpProvider, McpServer};
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, schemars, tool, tool_router};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct TestServer {
    cancels: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SlowArgs {
    /// How long to sleep, in milliseconds.
    ms: u64,
}

#[tool_router(server_handler)]
impl TestServer {
    #[tool(description = "Says which Authorization header the request carried.")]
    fn whoami(&self, Extension(parts): Extension<http::request::Parts>) -> String {
        let header = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none");
        format!("authorization: {header}")
    }

    #[tool(description = "Sleeps; counts the cancels it sees.")]
    async fn slow(
        &self,
        Parameters(SlowArgs { ms }): Parameters<SlowArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(format!("slept {ms} ms")),
            () = ctx.ct.cancelled() => {
                self.cancels.fetch_add(1, Ordering::SeqCst);
                Err("cancelled".to_owned())
            }
        }
    }

    #[tool(description = "Fails, as a tool.")]
    fn broken(&self) -> Result<String, String> {
        Err("the broken tool broke".to_owned())
    }
}

struct Served {
    url: String,
    cancels: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve() -> Served {
    let cancels = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let server = TestServer {
        cancels: Arc::clone(&cancels),
        started: Arc::clone(&started),
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let shutdown = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
    });
    Served {
        url,
        cancels,
        started,
        stop,
    }
}

fn ctx() -> ToolCallContext {
    ToolCallContext::new(ToolCallId::generate(), ExecutionId::generate())
}

async fn wait_for(counter: &AtomicUsize, what: &str) {
    for _ in 0..1000 {
        if counter.load(Ordering::SeqCst) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what} did not happen within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_credential_is_sent_as_its_header_and_never_comes_back() {
    const TOKEN: &str = "tok-caller-0b1c2d3e";
    let served = serve().await;
    let server = McpServer::http("mine", &served.url)
        .with_caller_credential(CallerCredential::Header("Authorization".to_owned()));
    let set = ToolSet::new()
        .provider(McpProvider::new(server).unwrap())
        .unwrap();
    let credentials = CallerCredentials::new().with("mine", Credential::new(TOKEN));
    let resolved = set
        .resolve(
            None,
            &ExecutionId::generate(),
            Some(&credentials),
            &CancellationToken::new(),
        )
        .await;
    assert!(
        resolved.unavailable.is_empty(),
        "{:?}",
        resolved.unavailable
    );
    let whoami = resolved
        .handles
        .iter()
        .find(|h| h.id().as_str() == "mine.whoami")
        .unwrap();
    let outcome = whoami.invoke(json!({}), ctx()).await;
    assert_eq!(
        outcome,
        ToolOutcome::Success(Value::String(
            "authorization: Bearer [REDACTED:secret]".to_owned()
        ))
    );
    // A tool's own failure is a failure with its text.
    let broken = resolved
        .handles
        .iter()
        .find(|h| h.id().as_str() == "mine.broken")
        .unwrap();
    let ToolOutcome::Failure(f) = broken.invoke(json!({}), ctx()).await else {
        panic!("the broken tool succeeded")
    };
    assert_eq!(f.message(), "the broken tool broke");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_reaches_the_server_as_a_cancel() {
    let served = serve().await;
    let set = ToolSet::new()
        .provider(McpProvider::new(McpServer::http("srv", &served.url)).unwrap())
        .unwrap();
    let execution = CancellationToken::new();
    let resolved = set
        .resolve(None, &ExecutionId::generate(), None, &execution)
        .await;
    let slow = resolved
        .handles
        .iter()
        .find(|h| h.id().as_str() == "srv.slow")
        .unwrap()
        .clone();
    let call = tokio::spawn(async move { slow.invoke(json!({"ms": 600_000}), ctx()).await });
    wait_for(&served.started, "the call").await;
    execution.cancel();
    let outcome = call.await.unwrap();
    let ToolOutcome::Failure(f) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(f.code().as_str(), "TOOL_CANCELLED");
    wait_for(&served.cancels, "the server's cancel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_cuts_the_call_and_the_server_hears_of_it() {
    let served = serve().await;
    let server = McpServer::http("srv", &served.url).with_tool_policy(
        "slow",
        ToolPolicy::new().deadline(Duration::from_millis(300)),
    );
    let set = ToolSet::new()
        .provider(McpProvider::new(server).unwrap())
        .unwrap();
    let resolved = set
        .resolve(
            None,
            &ExecutionId::generate(),
            None,
            &CancellationToken::new(),
        )
        .await;
    let slow = resolved
        .handles
        .iter()
        .find(|h| h.id().as_str() == "srv.slow")
        .unwrap();
    assert_eq!(
        slow.policy().deadline_duration(),
        Some(Duration::from_millis(300))
    );
    let outcome = slow.invoke(json!({"ms": 600_000}), ctx()).await;
    let ToolOutcome::Failure(f) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(f.code().as_str(), "TOOL_DEADLINE_EXCEEDED");
    wait_for(&served.cancels, "the server's cancel").await;
    // Within its deadline, the same tool answers.
    assert_eq!(
        slow.invoke(json!({"ms": 1}), ctx()).await,
        ToolOutcome::Success(Value::String("slept 1 ms".to_owned()))
    );
}

//! The MCP relay: the operator's credentialed MCP servers, served to the agent by the control
//! plane on a loopback endpoint, so that the credential never reaches the agent's process.
//!
//! The adapter contract says "all calls flow through the handle; the adapter cannot receive the
//! underlying credential". An ACP agent is given its MCP servers in `session/new`, and it
//! reaches them itself: what it is given, it can read. So each server of
//! [`AcpAgent::mcp_servers`] goes to the agent one of three ways (which the `tool.mcp`
//! capability's constraints name per server):
//!
//! - **forwarded** as configured, when it carries nothing to hide: a stdio server without `env`,
//!   an HTTP server without `headers`;
//! - **proxied**, an HTTP server with `headers`: the relay forwards MCP's streamable HTTP
//!   (`POST`, `GET`, `DELETE`) to the server's URL with the headers added, streaming the answer
//!   back; the agent is given the relay's URL and no header;
//! - **bridged**, a stdio server with `env` (its variables are its credentials, and a child of
//!   the agent could be read through `/proc` by the agent): the control plane runs the
//!   program itself, one process per MCP session, and serves it to the agent as a
//!   streamable-HTTP server (sessions, framing and bounds: [`SESSIONS`], [`MESSAGE_LIMIT`],
//!   [`UNPROMPTED_LIMIT`], [`WRITE_TIMEOUT`]); the agent is given the relay's URL.
//!
//! Both need an agent that negotiates `mcpCapabilities.http`; one that does not is refused at
//! the start, naming the server and why.
//!
//! The relay is one HTTP/1 listener on `127.0.0.1`, on a port the system picks, per agent
//! process (per runtime): it lives while the runtime does, and its end kills every process
//! it started. Each server is served at `/mcp/<token>`, a random 128-bit token made per relay,
//! so no other local process can use a server it was not given; any other path is `404`. It
//! accepts at most [`CONNECTIONS`] connections at once, requests of at most [`BODY_LIMIT`]
//! bytes, and a request's head must arrive within [`HEAD_TIMEOUT`] (an idle connection is
//! closed then).
//!
//! A sandboxed agent ([`AcpAgent::in_sandbox`]) reaches the relay through a relay of its own
//! address into its sandbox, made for that launch only ([`harness_sandbox::Launch::relay`]);
//! a bridged server then runs in a sandbox of its own, of the agent's profile (so the agent
//! cannot read its `/proc` either), and its variables' names must be allowed by the profile.
//! An agent hosted by a worker ([`AcpAgent::hosted_by_worker`]) is given the relay's URLs in
//! its settings in place of the credentialed servers: the worker never sees a credential.

mod bridge;
mod proxy;

pub use bridge::{MESSAGE_LIMIT, SESSIONS, UNPROMPTED_LIMIT, WRITE_TIMEOUT};

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use harness_core::error::{ErrorCategory, ErrorCode, HarnessError};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use crate::options::{AcpAgent, AcpMcpServer, AcpMcpTransport};

/// Connections the relay serves at once; more wait to be accepted.
pub const CONNECTIONS: usize = 32;
/// The largest request body the relay takes (`413` beyond it).
pub const BODY_LIMIT: usize = 4 * 1024 * 1024;
/// How long a request's head may take to arrive; a connection idle between requests for as
/// long is closed too.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to a proxied server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A response body: whole, or streamed (a proxied server's SSE, a bridge's stream).
pub(crate) type Body = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Checks a server with headers: a URL the relay can proxy (an `https://` one needs the `tls`
/// feature), header names and values HTTP allows. The error names the server and the header,
/// never a value.
pub(crate) fn check_proxied(
    name: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<(), String> {
    proxy::check(name, url, headers).map(drop)
}

/// How one of the operator's MCP servers reaches the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// As configured: it carries no credential.
    Forwarded,
    /// Through the relay's reverse proxy, which adds its headers.
    Proxied,
    /// Run by the control plane and served by the relay over streamable HTTP.
    Bridged,
}

impl Way {
    /// The way `server` reaches the agent.
    pub(crate) fn of(server: &AcpMcpServer) -> Self {
        match &server.transport {
            AcpMcpTransport::Stdio { env, .. } if !env.is_empty() => Self::Bridged,
            AcpMcpTransport::Http { headers, .. } if !headers.is_empty() => Self::Proxied,
            _ => Self::Forwarded,
        }
    }

    /// Its name in the `tool.mcp` capability's constraints.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Proxied => "proxied",
            Self::Bridged => "bridged",
        }
    }
}

/// What a path of the relay serves.
#[derive(Debug)]
enum Route {
    Proxy(proxy::Upstream),
    Bridge(Arc<bridge::Bridge>),
}

#[derive(Debug)]
struct Shared {
    /// By token.
    routes: HashMap<String, (String, Route)>,
}

/// The relay of one agent process: see the [module](self). Dropping it stops serving and
/// kills every process it started.
#[derive(Debug)]
pub(crate) struct McpRelay {
    address: SocketAddr,
    /// Server name → its URL on the relay.
    urls: BTreeMap<String, String>,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for McpRelay {
    fn drop(&mut self) {
        // The accept loop owns the connections' tasks: aborting it ends them all.
        self.server.abort();
        for (_, route) in self.shared.routes.values() {
            if let Route::Bridge(bridge) = route {
                bridge.end_all();
            }
        }
    }
}

/// 128 random bits, as 32 hex digits.
pub(crate) fn random_token() -> Result<String, HarnessError> {
    let mut bytes = [0_u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        HarnessError::new(
            ErrorCategory::Internal,
            "the MCP relay could not make a random token",
        )
        .with_diagnostic(e.to_string())
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl McpRelay {
    /// Starts the relay for `agent`'s credentialed servers; `None` when it has none.
    ///
    /// # Errors
    /// `unavailable` when the loopback listener cannot be bound.
    pub(crate) async fn start(agent: &AcpAgent) -> Result<Option<Self>, HarnessError> {
        let relayed: Vec<&AcpMcpServer> = agent
            .mcp_servers
            .iter()
            .filter(|s| Way::of(s) != Way::Forwarded)
            .collect();
        if relayed.is_empty() {
            return Ok(None);
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| {
                HarnessError::new(
                    ErrorCategory::Unavailable,
                    "the MCP relay could not listen on the loopback interface",
                )
                .with_diagnostic(e.to_string())
            })?;
        let address = listener.local_addr().map_err(|e| {
            HarnessError::new(ErrorCategory::Unavailable, "the MCP relay has no address")
                .with_diagnostic(e.to_string())
        })?;
        let mut routes = HashMap::new();
        let mut urls = BTreeMap::new();
        for server in relayed {
            let token = random_token()?;
            let route = match &server.transport {
                AcpMcpTransport::Http { url, headers } => {
                    Route::Proxy(proxy::Upstream::new(&server.name, url, headers)?)
                }
                AcpMcpTransport::Stdio { command, env } => Route::Bridge(Arc::new(
                    bridge::Bridge::new(bridge::Program::for_agent(agent, command, env)?),
                )),
            };
            urls.insert(
                server.name.clone(),
                format!("http://{address}{}", path_of(&token)),
            );
            routes.insert(token, (server.name.clone(), route));
        }
        let shared = Arc::new(Shared { routes });
        let server = tokio::spawn(serve(listener, Arc::clone(&shared)));
        Ok(Some(Self {
            address,
            urls,
            shared,
            server,
        }))
    }

    /// The URL the agent is given for the server `name`.
    pub(crate) fn url(&self, name: &str) -> Option<&str> {
        self.urls.get(name).map(String::as_str)
    }

    /// The loopback endpoint a sandbox relays to reach it.
    pub(crate) fn endpoint(&self) -> harness_sandbox::Endpoint {
        harness_sandbox::Endpoint {
            ip: self.address.ip(),
            port: self.address.port(),
        }
    }
}

fn path_of(token: &str) -> String {
    format!("/mcp/{token}")
}

/// Accepts connections (at most [`CONNECTIONS`] at once) and serves each on a task of the
/// accept loop's own: aborting the loop ends them all.
async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        // Finished connections' tasks are collected as we go.
        while connections.try_join_next().is_some() {}
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = Arc::clone(&shared);
        connections.spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |request| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(handle(&shared, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let route = request
        .uri()
        .path()
        .strip_prefix("/mcp/")
        .and_then(|token| shared.routes.get(token));
    // The query string is not part of the path: a request with one is refused too.
    let Some((name, route)) = route.filter(|_| request.uri().query().is_none()) else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    match route {
        Route::Proxy(upstream) => upstream.forward(name, request).await,
        Route::Bridge(bridge) => bridge.serve(name, request).await,
    }
}

/// A whole body.
pub(crate) fn whole(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A plain-text answer.
pub(crate) fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(whole(format!("{text}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Reads a request's body, at most [`BODY_LIMIT`] bytes.
pub(crate) async fn read_body(body: Incoming) -> Result<Bytes, Response<Body>> {
    match http_body_util::Limited::new(body, BODY_LIMIT)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("a request body is at most {BODY_LIMIT} bytes"),
        )),
        Err(_) => Err(plain(StatusCode::BAD_REQUEST, "the request body was cut")),
    }
}

/// The operator's MCP servers for the agent, as ACP's `mcpServers`: forwarded ones as
/// configured, proxied and bridged ones as the relay's URL, without headers.
///
/// # Errors
/// `configuration` (`OPTIONS_INVALID`) when a server is to be reached over HTTP by an agent
/// that did not negotiate `mcpCapabilities.http`, naming the server and why.
pub(crate) fn servers_for_agent(
    agent: &AcpAgent,
    http: bool,
    relay: Option<&McpRelay>,
) -> Result<Vec<agent_client_protocol::v1::schema::McpServer>, HarnessError> {
    use agent_client_protocol::v1::schema::{
        EnvVariable, HttpHeader, McpServer, McpServerHttp, McpServerStdio,
    };
    agent
        .mcp_servers
        .iter()
        .map(|server| {
            let way = Way::of(server);
            if way != Way::Forwarded || server.is_http() {
                no_http(server, way, http)?;
            }
            match (&server.transport, way) {
                (AcpMcpTransport::Stdio { command, env }, Way::Forwarded) => Ok(McpServer::Stdio(
                    McpServerStdio::new(server.name.clone(), command[0].clone())
                        .args(command[1..].to_vec())
                        .env(
                            env.iter()
                                .map(|(k, v)| EnvVariable::new(k.clone(), v.clone()))
                                .collect(),
                        ),
                )),
                (AcpMcpTransport::Http { url, headers }, Way::Forwarded) => Ok(McpServer::Http(
                    McpServerHttp::new(server.name.clone(), url.clone()).headers(
                        headers
                            .iter()
                            .map(|(k, v)| HttpHeader::new(k.clone(), v.clone()))
                            .collect(),
                    ),
                )),
                _ => {
                    let url = relay.and_then(|r| r.url(&server.name)).ok_or_else(|| {
                        HarnessError::new(
                            ErrorCategory::Internal,
                            format!("the MCP relay does not serve MCP server `{}`", server.name),
                        )
                    })?;
                    Ok(McpServer::Http(McpServerHttp::new(
                        server.name.clone(),
                        url.to_owned(),
                    )))
                }
            }
        })
        .collect()
}

fn no_http(server: &AcpMcpServer, way: Way, http: bool) -> Result<(), HarnessError> {
    if http {
        return Ok(());
    }
    let why = match way {
        Way::Forwarded => format!(
            "MCP server `{}` is reached over HTTP, but the agent did not negotiate \
             mcpCapabilities.http: configure it as a stdio server, or use an agent that takes \
             HTTP servers",
            server.name
        ),
        Way::Proxied => format!(
            "MCP server `{}` has headers, which are credentials and stay with the control \
             plane: it is proxied to the agent over streamable HTTP on a loopback endpoint, \
             but the agent did not negotiate mcpCapabilities.http; use an agent that takes \
             HTTP servers, or give the server no headers",
            server.name
        ),
        Way::Bridged => format!(
            "MCP server `{}` has environment variables, which are credentials and stay with \
             the control plane: the control plane runs it and serves it to the agent over \
             streamable HTTP on a loopback endpoint, but the agent did not negotiate \
             mcpCapabilities.http; use an agent that takes HTTP servers, or give the server \
             no variables",
            server.name
        ),
    };
    Err(HarnessError::new(ErrorCategory::Configuration, why).with_code(ErrorCode::OPTIONS_INVALID))
}

/// `agent` as a worker is given it: each credentialed server replaced by the relay's URL,
/// without headers (the worker, inside the sandbox, never sees a credential).
pub(crate) fn for_worker(agent: &AcpAgent, relay: Option<&McpRelay>) -> AcpAgent {
    let mut inside = agent.clone();
    for server in &mut inside.mcp_servers {
        if Way::of(server) == Way::Forwarded {
            continue;
        }
        let url = relay
            .and_then(|r| r.url(&server.name))
            .unwrap_or_default()
            .to_owned();
        server.transport = AcpMcpTransport::Http {
            url,
            headers: BTreeMap::new(),
        };
    }
    inside
}

#[cfg(test)]
mod tests;

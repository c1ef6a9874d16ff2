//! [`McpProvider::health`](crate::McpProvider): whether a server could be started or
//! reached now, found out without starting, initializing or calling it.
//!
//! What happens when...
//!
//! - **the server runs over stdio**: its program is looked up the way starting it would
//!   ([`harness_core::program::resolve`]), in its working directory, on the `PATH` it would
//!   be started with: the one the operator sets (`setEnv`), else the server's own when the
//!   operator copies it (`env`), else none, and then the C library's default search path
//!   ([`DEFAULT_SEARCH_PATH`]), since the process starts with a cleared environment. A
//!   program not found or not executable, or a working directory gone, is not ready.
//! - **the server runs over streamable HTTP**: one `GET` of its URL, bounded by
//!   [`PROBE_TIMEOUT`] (or its connect timeout, if shorter), with no header of the
//!   operator's and no caller credential, following no redirect. Any HTTP answer (a `405`
//!   or `401` included) means reachable; a refused connection or no answer in time means
//!   not. A `GET` without a session id opens no MCP session.
//!
//! The reason a caller may read names the server and a short category
//! (`` MCP server `files`: its command is not found ``); the operator's log has the program,
//! working directory, URL and error.

use std::ffi::OsString;
use std::time::Duration;

use harness_core::adapter::HarnessHealth;

use crate::config::{McpServer, McpTransport};

/// The longest a probe of an HTTP server takes (connection and answer).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where `execvp` looks for a program when the environment has no `PATH` (glibc's
/// `_CS_PATH`; musl's default).
#[cfg(not(target_env = "musl"))]
pub(crate) const DEFAULT_SEARCH_PATH: &str = "/bin:/usr/bin";
/// Where `execvp` looks for a program when the environment has no `PATH` (glibc's
/// `_CS_PATH`; musl's default).
#[cfg(target_env = "musl")]
pub(crate) const DEFAULT_SEARCH_PATH: &str = "/usr/local/bin:/bin:/usr/bin";

/// The `PATH` a stdio server is started with (its environment is cleared, then the
/// variables the operator copies or sets are given it).
fn search_path(env: &[String], set_env: &std::collections::BTreeMap<String, String>) -> OsString {
    if let Some(path) = set_env.get("PATH") {
        return path.into();
    }
    if env.iter().any(|v| v == "PATH")
        && let Some(path) = std::env::var_os("PATH")
    {
        return path;
    }
    DEFAULT_SEARCH_PATH.into()
}

/// `server`'s health; see the [module docs](self).
pub(crate) async fn check(server: &McpServer) -> HarnessHealth {
    let name = &server.name;
    match &server.transport {
        McpTransport::Stdio {
            command,
            cwd,
            env,
            set_env,
        } => {
            let program = command.first().map(String::as_str).unwrap_or_default();
            let here;
            let cwd = match cwd {
                Some(cwd) => cwd.as_path(),
                None => {
                    here = std::env::current_dir().unwrap_or_default();
                    here.as_path()
                }
            };
            let sandbox = server
                .sandbox
                .as_ref()
                .map(|sandbox| sandbox.profile().check(cwd));
            if let Some(Err(why)) = sandbox {
                tracing::warn!(
                    server = %name,
                    reason = why.message(),
                    "an MCP server's sandbox cannot be made"
                );
                return HarnessHealth::not_ready(format!(
                    "MCP server `{name}`: its sandbox profile cannot be used"
                ));
            }
            match harness_core::program::resolve(program, cwd, &search_path(env, set_env)) {
                Ok(_) => HarnessHealth::ready(),
                Err(why) => {
                    tracing::warn!(
                        server = %name,
                        program,
                        cwd = %cwd.display(),
                        reason = why.category(),
                        "an MCP server cannot be started"
                    );
                    HarnessHealth::not_ready(format!("MCP server `{name}`: {why}"))
                }
            }
        }
        McpTransport::Http { url, .. } => {
            let timeout = PROBE_TIMEOUT.min(Duration::from_millis(server.connect_timeout_ms));
            match probe(url, timeout).await {
                Ok(()) => HarnessHealth::ready(),
                Err(category) => {
                    HarnessHealth::not_ready(format!("MCP server `{name}` {category}"))
                }
            }
        }
    }
}

/// Whether `url` answers HTTP within `timeout`; the reason category when not.
async fn probe(url: &str, timeout: Duration) -> Result<(), &'static str> {
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| {
            tracing::error!(error = %e, "no HTTP client for the MCP servers' health");
            "cannot be probed"
        })?;
    match http.get(url).send().await {
        Ok(_) => Ok(()),
        Err(e) => {
            let category = if e.is_timeout() {
                "does not answer in time"
            } else {
                "is not reachable"
            };
            tracing::warn!(url, error = %e, "an MCP server {category}");
            Err(category)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn the_path_searched_is_the_one_the_server_starts_with() {
        let mut set = BTreeMap::new();
        assert_eq!(search_path(&[], &set), OsString::from(DEFAULT_SEARCH_PATH));
        let copied = search_path(&["PATH".to_owned()], &set);
        assert_eq!(copied, std::env::var_os("PATH").unwrap_or_default());
        set.insert("PATH".to_owned(), "/opt/tools/bin".to_owned());
        assert_eq!(
            search_path(&["PATH".to_owned()], &set),
            OsString::from("/opt/tools/bin")
        );
    }

    #[tokio::test]
    async fn a_stdio_server_is_ready_when_its_program_can_be_started() {
        let ready = McpServer::stdio("files", ["sh", "-c", "exit 1"]);
        assert!(check(&ready).await.ready);
        let hidden = McpServer::stdio("files", ["sh"]).set_env("PATH", "/no/such/dir");
        let health = check(&hidden).await;
        assert_eq!(
            health.reason.as_deref(),
            Some("MCP server `files`: its command is not found")
        );
        let missing = McpServer::stdio("files", ["/opt/secret/no-such-mcp-server"]);
        let reason = check(&missing).await.reason.unwrap();
        assert_eq!(reason, "MCP server `files`: its command is not found");
        let not_a_program = McpServer::stdio("files", ["/tmp"]);
        let reason = check(&not_a_program).await.reason.unwrap();
        assert_eq!(
            reason,
            "MCP server `files`: its command is not an executable file"
        );
    }

    #[tokio::test]
    async fn an_http_server_is_ready_when_it_answers_at_all() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = dead.local_addr().unwrap().port();
        drop(dead);
        let server = McpServer::http("remote", format!("http://127.0.0.1:{port}/mcp"));
        let health = check(&server).await;
        assert_eq!(
            health.reason.as_deref(),
            Some("MCP server `remote` is not reachable")
        );
    }
}

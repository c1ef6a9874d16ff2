//! What the server tests share: a server on a free loopback port.

use std::sync::Arc;
use std::time::Duration;

use harness_core::store::{MemoryStore, ReplicaId};
use harness_layers::stack::HarnessStack;
use harness_scripted::ScriptedAdapter;
use harness_server::auth::BearerTokens;
use harness_server::{Instance, Server};

/// A server offering the scripted adapter (its bundled script) over `store` as `replica`,
/// accepting each `(principal, token)`; returns its base URL.
#[allow(dead_code)] // tests/console.rs uses serve_with only.
pub(crate) async fn serve(
    store: Arc<MemoryStore>,
    replica: &str,
    tokens: &[(&str, &str)],
) -> String {
    serve_with(store, replica, tokens).await.0
}

/// As [`serve`], and the server too (to mint console sign-in codes, say).
pub(crate) async fn serve_with(
    store: Arc<MemoryStore>,
    replica: &str,
    tokens: &[(&str, &str)],
) -> (String, Server) {
    let adapter = ScriptedAdapter::quickstart();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let tokens = tokens
        .iter()
        .fold(BearerTokens::new(), |t, (principal, token)| {
            t.with_token(principal, token).unwrap()
        });
    let server = Server::builder()
        .instance(Instance::new(
            &stack,
            adapter,
            store,
            ReplicaId::new(replica),
        ))
        .authenticate(tokens)
        .body_limit(64 * 1024)
        .keep_alive(Duration::from_millis(100))
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = server.router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, server)
}

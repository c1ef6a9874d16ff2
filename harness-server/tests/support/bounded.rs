//! A server for the socket layer's tests: the scripted adapter behind
//! [`harness_server::serve`] within the given limits.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use harness_core::store::{MemoryStore, ReplicaId};
use harness_layers::stack::HarnessStack;
use harness_scripted::ScriptedAdapter;
use harness_server::auth::BearerTokens;
use harness_server::{ConnectionLimits, Instance, Server};

/// A server with the scripted adapter within `limits`, accepting `token` as `alice`; SSE
/// keep-alive comments only after a minute, so a quiet stream sends nothing for longer than
/// every timeout. Its address.
pub(crate) async fn start(token: &str, limits: ConnectionLimits) -> SocketAddr {
    let adapter = ScriptedAdapter::quickstart();
    let stack = HarnessStack::defaults_for(&adapter).unwrap();
    let server = Server::builder()
        .instance(Instance::new(
            &stack,
            adapter,
            Arc::new(MemoryStore::new()),
            ReplicaId::new("r"),
        ))
        .authenticate(BearerTokens::new().with_token("alice", token).unwrap())
        .keep_alive(Duration::from_secs(60))
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(harness_server::serve(listener, server.router(), limits).into_future());
    address
}

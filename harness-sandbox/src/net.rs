//! The sandbox's only way out: for each allowed loopback endpoint, a listener inside the
//! sandbox's network namespace at the same address, relaying each connection to the host's
//! endpoint.
//!
//! The listener is made by the control plane, not by anything in the sandbox: a thread of the
//! control plane enters the sandbox's network namespace (`setns(2)`, which needs
//! `CAP_SYS_ADMIN`: the control plane runs as root), binds there, and ends; the socket stays in
//! that namespace and is served from the host side. Nothing of the control plane runs inside
//! the sandbox, and no other address is reachable from it.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::os::fd::AsFd as _;

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::profile::Endpoint;

/// Connections one forward relays at once; more wait to be accepted.
const CONNECTIONS: usize = 64;

/// Opens the forwards of `allow` inside the network namespace of process `pid` and serves
/// them until the returned tasks are aborted.
pub(crate) fn forward(pid: u32, allow: &[Endpoint]) -> Result<Vec<JoinHandle<()>>, String> {
    if allow.is_empty() {
        return Ok(Vec::new());
    }
    let listeners = bind_inside(pid, allow)?;
    let mut tasks = Vec::with_capacity(listeners.len());
    for (endpoint, listener) in allow.iter().zip(listeners) {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("{endpoint}: {e}"))?;
        let listener = TcpListener::from_std(listener).map_err(|e| format!("{endpoint}: {e}"))?;
        tasks.push(tokio::spawn(serve(listener, *endpoint)));
    }
    Ok(tasks)
}

/// Binds each endpoint's address in the namespace, on a thread of its own that ends there.
fn bind_inside(pid: u32, allow: &[Endpoint]) -> Result<Vec<StdListener>, String> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| format!("the sandbox's network namespace: {e}"))?;
    let allow = allow.to_vec();
    std::thread::spawn(move || {
        move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
            .map_err(|e| format!("entering the sandbox's network namespace: {e}"))?;
        allow
            .iter()
            .map(|endpoint| {
                let address = SocketAddr::new(endpoint.ip, endpoint.port);
                StdListener::bind(address).map_err(|e| format!("binding {endpoint}: {e}"))
            })
            .collect()
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_owned())?
}

async fn serve(listener: TcpListener, endpoint: Endpoint) {
    let slots = std::sync::Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let Ok(permit) = std::sync::Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Ok((mut inside, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let _permit = permit;
            let address = SocketAddr::new(endpoint.ip, endpoint.port);
            match TcpStream::connect(address).await {
                Ok(mut outside) => {
                    let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
                }
                Err(e) => {
                    tracing::debug!(%endpoint, error = %e, "a sandbox's allowed endpoint refused");
                }
            }
        });
    }
}

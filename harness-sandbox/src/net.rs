//! The sandbox's only ways out: for each allowed loopback endpoint, a listener inside the
//! sandbox's network namespace at the same address, relaying each connection to the host's
//! endpoint; and, for a profile with proxy targets, the HTTP proxy's listener
//! (see [`crate::proxy`]).
//!
//! The listener is made by the control plane, not by anything in the sandbox: a thread of the
//! control plane enters the sandbox's network namespace (`setns(2)`, which needs
//! `CAP_SYS_ADMIN`: the control plane runs as root), binds there, and ends; the socket stays in
//! that namespace and is served from the host side. Nothing of the control plane runs inside
//! the sandbox, and no other address is reachable from it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener as StdListener};
use std::os::fd::AsFd as _;
use std::sync::Arc;

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::profile::{Endpoint, NetworkPolicy, PROXY_PORT, ProxyTarget};

/// Connections one forward relays at once; more wait to be accepted.
const CONNECTIONS: usize = 64;

/// Opens the relays of the policy's loopback endpoints and of the launch's own (`extra`), and
/// the policy's HTTP proxy when it has targets, inside the network namespace of process
/// `pid`, and serves them until the returned tasks are aborted.
pub(crate) fn forward(
    pid: u32,
    network: &NetworkPolicy,
    extra: &[Endpoint],
) -> Result<Vec<JoinHandle<()>>, String> {
    let proxy = (!network.proxy.is_empty())
        .then(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), PROXY_PORT));
    let mut endpoints: Vec<Endpoint> = network.allow.clone();
    for endpoint in extra {
        if !endpoint.ip.is_loopback() {
            return Err(format!(
                "{endpoint}: only loopback endpoints can be relayed"
            ));
        }
        if !endpoints.contains(endpoint) {
            endpoints.push(*endpoint);
        }
    }
    let mut addresses: Vec<SocketAddr> = endpoints
        .iter()
        .map(|e| SocketAddr::new(e.ip, e.port))
        .collect();
    addresses.extend(proxy);
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    let mut listeners = bind_inside(pid, addresses)?.into_iter();
    let mut tasks = Vec::new();
    for endpoint in &endpoints {
        let listener = tokio_listener(listeners.next(), &endpoint.to_string())?;
        tasks.push(tokio::spawn(serve(listener, *endpoint)));
    }
    if proxy.is_some() {
        let listener = tokio_listener(listeners.next(), "the HTTP proxy")?;
        let targets: Arc<[ProxyTarget]> = network.proxy.clone().into();
        tasks.push(tokio::spawn(crate::proxy::serve(listener, targets)));
    }
    Ok(tasks)
}

fn tokio_listener(listener: Option<StdListener>, what: &str) -> Result<TcpListener, String> {
    let listener = listener.ok_or_else(|| format!("{what}: no listener"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("{what}: {e}"))?;
    TcpListener::from_std(listener).map_err(|e| format!("{what}: {e}"))
}

/// Binds each address in the namespace, on a thread of its own that ends there.
fn bind_inside(pid: u32, addresses: Vec<SocketAddr>) -> Result<Vec<StdListener>, String> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| format!("the sandbox's network namespace: {e}"))?;
    std::thread::spawn(move || {
        move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
            .map_err(|e| format!("entering the sandbox's network namespace: {e}"))?;
        addresses
            .iter()
            .map(|address| {
                StdListener::bind(address).map_err(|e| format!("binding {address}: {e}"))
            })
            .collect()
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_owned())?
}

async fn serve(listener: TcpListener, endpoint: Endpoint) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
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

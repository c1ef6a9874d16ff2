//! The sandbox's HTTP proxy: served by the control plane from a listener inside the sandbox's
//! network namespace, it lets through exactly the profile's [`ProxyTarget`]s.
//!
//! A connection carries one request head (at most [`HEAD_LIMIT`] bytes, within
//! [`HEAD_TIMEOUT`]): `CONNECT host:port` opens a tunnel (`200`, then bytes both ways), a
//! request in absolute form (`GET http://host[:port]/path`) is forwarded in origin form with
//! the rest of the connection to the same target. Anything else is answered and closed: a
//! target not allowed `403`, a malformed head `400`, an `https://` URL outside `CONNECT`
//! `400`. Each refusal is logged at warn with the target (never the rest of the request,
//! which may carry credentials).
//!
//! Once a connection reached a target, everything else it carries goes to that target: a
//! second request on it cannot name another host.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::profile::ProxyTarget;

/// The largest request head the proxy reads.
const HEAD_LIMIT: usize = 16 * 1024;
/// How long a client may take to send its head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the proxy may take to connect to a target.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait to be accepted.
const CONNECTIONS: usize = 64;

/// Serves the proxy on `listener` until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, targets: Arc<[ProxyTarget]>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let targets = Arc::clone(&targets);
        tokio::spawn(async move {
            let _permit = permit;
            let _ = connection(client, &targets).await;
        });
    }
}

/// What the head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    /// A tunnel to `host:port`.
    Connect { host: String, port: u16 },
    /// A plain HTTP request to `host:port`, to be sent as `head` (origin form).
    Forward {
        host: String,
        port: u16,
        head: Vec<u8>,
    },
}

async fn connection(mut client: TcpStream, targets: &[ProxyTarget]) -> std::io::Result<()> {
    let Ok(read) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await else {
        return answer(&mut client, 408, "the request head did not arrive in time").await;
    };
    let Some((head, rest)) = read? else {
        return answer(&mut client, 400, "the request head is too large or cut").await;
    };
    let ask = match parse(&head) {
        Ok(ask) => ask,
        Err(why) => return answer(&mut client, 400, why).await,
    };
    let (host, port) = match &ask {
        Ask::Connect { host, port } | Ask::Forward { host, port, .. } => (host.clone(), *port),
    };
    if !targets.iter().any(|t| t.admits(&host, port)) {
        tracing::warn!(
            target: "harness_sandbox::proxy",
            %host,
            port,
            "a sandboxed program asked for a target its profile does not allow: refused"
        );
        return answer(
            &mut client,
            403,
            "harness sandbox: this target is not in the profile's proxy allowlist",
        )
        .await;
    }
    let address = format!("{host}:{port}");
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&address)).await;
    let Ok(Ok(mut upstream)) = connect else {
        return answer(&mut client, 502, "the target could not be reached").await;
    };
    match ask {
        Ask::Connect { .. } => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await?;
        }
        Ask::Forward { head, .. } => upstream.write_all(&head).await?,
    }
    upstream.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Reads up to the end of the head: the head (with its blank line) and what followed it;
/// `None` when the head is larger than [`HEAD_LIMIT`] or the client stops sending first.
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0_u8; 2048];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + at + 4;
            let rest = buf.split_off(end);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > HEAD_LIMIT {
            return Ok(None);
        }
    }
}

/// The request the head makes.
fn parse(head: &[u8]) -> Result<Ask, &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not text")?;
    let (line, fields) = text.split_once("\r\n").ok_or("no request line")?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a request line is `METHOD TARGET VERSION`");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("only HTTP/1.x is proxied");
    }
    if method == "CONNECT" {
        let (host, port) = host_port(target, None)?;
        return Ok(Ask::Connect { host, port });
    }
    if !method.bytes().all(|b| b.is_ascii_uppercase()) || method.is_empty() {
        return Err("the method is not a token");
    }
    let Some(after) = target.strip_prefix("http://") else {
        return Err("a proxied request names an http:// URL (https goes through CONNECT)");
    };
    let (authority, path) = match after.find(['/', '?']) {
        Some(at) => after.split_at(at),
        None => (after, "/"),
    };
    if authority.contains('@') {
        return Err("credentials in the URL are not proxied");
    }
    let (host, port) = host_port(authority, Some(80))?;
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let mut forwarded = format!("{method} {path} {version}\r\n");
    for field in fields.split("\r\n").filter(|f| !f.is_empty()) {
        let name = field.split(':').next().unwrap_or("").trim();
        // Hop-by-hop fields meant for the proxy stay here.
        if name.eq_ignore_ascii_case("proxy-connection")
            || name.eq_ignore_ascii_case("proxy-authorization")
        {
            continue;
        }
        forwarded.push_str(field);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("\r\n");
    Ok(Ask::Forward {
        host,
        port,
        head: forwarded.into_bytes(),
    })
}

/// `host:port` (or `host` with the default port), IPv6 in brackets.
fn host_port(authority: &str, default: Option<u16>) -> Result<(String, u16), &'static str> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("an unclosed `[`")?;
        let port = match after.strip_prefix(':') {
            Some(port) => Some(port),
            None if after.is_empty() => None,
            None => return Err("garbage after `]`"),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| "the port is not a number")?,
        None => default.ok_or("CONNECT names `host:port`")?,
    };
    if host.is_empty() || port == 0 {
        return Err("an empty host or port 0");
    }
    Ok((host.to_ascii_lowercase(), port))
}

async fn answer(client: &mut TcpStream, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        _ => "Bad Gateway",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{why}\n",
        why.len() + 1
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_parsed_strictly() {
        assert_eq!(
            parse(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(Ask::Connect {
                host: "api.example.com".into(),
                port: 443
            })
        );
        let Ok(Ask::Forward { host, port, head }) = parse(
            b"GET http://Example.com/a?b HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: x\r\n\r\n",
        ) else {
            panic!("a forward");
        };
        assert_eq!((host.as_str(), port), ("example.com", 80));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\n\r\n"
        );
        assert_eq!(
            parse(b"GET http://[::1]:8080 HTTP/1.1\r\n\r\n").map(|a| match a {
                Ask::Forward { host, port, .. } => (host, port),
                Ask::Connect { .. } => unreachable!(),
            }),
            Ok(("::1".into(), 8080))
        );
        for bad in [
            &b"GET /relative HTTP/1.1\r\n\r\n"[..],
            b"GET https://example.com/ HTTP/1.1\r\n\r\n",
            b"CONNECT example.com HTTP/1.1\r\n\r\n",
            b"GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n",
            b"GET http://example.com/ HTTP/2\r\n\r\n",
            b"GET  http://example.com/ HTTP/1.1\r\n\r\n",
            b"\xff\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}

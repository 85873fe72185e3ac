//! The accept loop of the metrics and probe servers, bounded so that a client cannot hold the
//! operator's sockets or memory: a connection that does not send its headers in time is dropped
//! (slowloris), every connection serves one request and lives at most the request timeout (a
//! client that never reads its answer included), and connections beyond the limit are closed as
//! soon as they are accepted.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt as _;
use tracing::{debug, warn};

use crate::controller::error::Error;
use crate::settings::ServerLimits;

/// Listen on `addr` now, so that a taken port or a bad host fails start-up.
pub async fn bind(what: &'static str, addr: &str) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve {
            what,
            addr: addr.to_string(),
            source,
        })
}

/// Serve `router` on `listener` for ever, within `limits`.
pub async fn serve(
    what: &'static str,
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, typically: retrying at once would spin.
                warn!(server = what, error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Refused rather than queued: a queue would let stalled clients delay every scrape and
        // probe behind them; a refused scraper retries at its next interval.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(server = what, %peer, limit = limits.max_connections, "connection refused: too many open");
            drop(stream);
            continue;
        };
        tokio::spawn(connection(what, stream, router.clone(), limits, slot));
    }
}

/// One connection, one request; the slot is given back when it ends.
async fn connection(
    what: &'static str,
    stream: TcpStream,
    router: Router,
    limits: ServerLimits,
    _slot: OwnedSemaphorePermit,
) {
    let service = hyper::service::service_fn(move |req| router.clone().oneshot(req));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(limits.request_timeout, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(server = what, error = %e, "connection ended"),
        Err(_) => {
            debug!(server = what, timeout = ?limits.request_timeout, "connection closed: request timeout")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    const LIMITS: ServerLimits = ServerLimits {
        header_read_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_secs(2),
        max_connections: 2,
    };

    /// A server of `/ok` (answers at once) and `/slow` (answers after a minute).
    async fn start(limits: ServerLimits) -> std::net::SocketAddr {
        let listener = bind("test", "127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = Router::new().route("/ok", get(|| async { "ok" })).route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late"
            }),
        );
        tokio::spawn(serve("test", listener, router, limits));
        addr
    }

    /// What the server sends on `stream` until it closes it (empty when reset), and how long
    /// that took; panics when it keeps the connection open for 10 s.
    async fn until_closed(stream: &mut TcpStream) -> (String, Duration) {
        let start = Instant::now();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out));
        assert!(read.await.is_ok(), "the server kept the connection open");
        (String::from_utf8_lossy(&out).into_owned(), start.elapsed())
    }

    async fn get_path(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("send");
        until_closed(&mut s).await.0
    }

    #[tokio::test]
    async fn a_request_is_answered_and_the_connection_closed() {
        let addr = start(LIMITS).await;
        let answer = get_path(addr, "/ok").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
    }

    #[tokio::test]
    async fn a_client_that_stalls_in_its_headers_is_dropped() {
        let addr = start(LIMITS).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /ok HTTP/1.1\r\nHost:")
            .await
            .expect("send");
        let (_, took) = until_closed(&mut s).await;
        assert!(took < Duration::from_secs(1), "dropped after {took:?}");
    }

    #[tokio::test]
    async fn a_slow_answer_ends_at_the_request_timeout() {
        let addr = start(LIMITS).await;
        let start = Instant::now();
        let answer = get_path(addr, "/slow").await;
        assert!(!answer.contains("late"), "{answer}");
        let took = start.elapsed();
        assert!(
            took >= LIMITS.request_timeout && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn connections_over_the_limit_are_closed_and_slots_come_back() {
        let addr = start(LIMITS).await;
        let mut held = Vec::new();
        for _ in 0..LIMITS.max_connections {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .expect("send");
            held.push(s);
        }
        // Let the server take both slots before the next one comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut extra = TcpStream::connect(addr).await.expect("connect");
        let _ = extra
            .write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let (answer, took) = until_closed(&mut extra).await;
        assert!(
            answer.is_empty() && took < Duration::from_secs(1),
            "{answer:?} after {took:?}"
        );
        drop(held);
        // The slots come back once the server sees the held connections end.
        let mut answer = String::new();
        for _ in 0..50 {
            answer = get_path(addr, "/ok").await;
            if !answer.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    }
}

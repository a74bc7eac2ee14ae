//! A minimal HTTP/1.1 responder for a few read-only pages (no framework needed):
//! `GET /metrics` (Prometheus text), `GET /debug/timeline` (Chrome trace JSON of the
//! recorded timeline) and `GET /debug/utilization.svg` (per-stage utilization plot);
//! anything else gets 404.
//!
//! The endpoint shares the process's file descriptors with the gRPC server, so it
//! bounds what a client can hold:
//! - at most [`MAX_CONNECTIONS`] connections are served at once; a connection
//!   accepted beyond that gets a `503` without waiting and is closed at once (no
//!   queue, no task);
//! - the whole request head must arrive within [`READ_DEADLINE`] (a deadline for the
//!   request, not for each read, so a client dribbling a byte at a time is cut too)
//!   and within [`MAX_HEAD_BYTES`];
//! - the whole response must be written within [`WRITE_TIMEOUT`].

use std::{
    sync::{atomic::Ordering::Relaxed, Arc},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::Semaphore,
};
use tracing::debug;

use super::listener::{CloseReason, ListenerStats};
use crate::Engine;

/// Connections served at once; more are answered 503 and closed.
pub(super) const MAX_CONNECTIONS: usize = 64;
/// Time from accept to the end of the request head.
const READ_DEADLINE: Duration = Duration::from_secs(5);
/// Time to write the whole response.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head read; the rest (and any body) is ignored.
const MAX_HEAD_BYTES: usize = 8192;

/// A whole response with `Connection: close`.
fn response(status: &str, ctype: &str, extra_headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra_headers}Connection: close\r\n\r\n{body}",
        body.len()
    )
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Serves until the task is dropped. Accept errors (out of descriptors) are counted,
/// logged at error at most every few seconds, backed off and retried: the endpoint
/// never stops accepting on its own.
pub(super) async fn serve_metrics(
    listener: tokio::net::TcpListener,
    engine: Engine,
    stats: Arc<ListenerStats>,
    listeners: Arc<[Arc<ListenerStats>]>,
) {
    stats.up.store(true, Relaxed);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut last_log = None;
    let mut backoff = Duration::ZERO;
    let end_at = super::test_end_listener("metrics");
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = async { match end_at { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                stats.up.store(false, Relaxed);
                return;
            }
        };
        let (sock, peer) = match accepted {
            Ok(x) => {
                backoff = Duration::ZERO;
                x
            }
            Err(e) => {
                stats.accept_error(&e, &mut last_log);
                backoff = (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        stats.accepted.fetch_add(1, Relaxed);
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            // Full: answer without waiting (a fresh socket's send buffer is empty, so
            // this does not block) and close.
            debug!(peer = %peer, "metrics endpoint busy: connection refused");
            stats.count_closed(CloseReason::Refused);
            let busy = response("503 Service Unavailable", TEXT, "Retry-After: 1\r\n", "too many connections\n");
            let _ = sock.try_write(busy.as_bytes());
            drop(sock);
            continue;
        };
        let engine = engine.clone();
        let (stats, listeners) = (stats.clone(), listeners.clone());
        stats.open.fetch_add(1, Relaxed);
        tokio::spawn(async move {
            serve_one(sock, peer, engine, &listeners).await;
            stats.open.fetch_sub(1, Relaxed);
            drop(permit);
        });
    }
}

/// Reads the request head until the blank line, end of stream, or [`MAX_HEAD_BYTES`].
async fn read_head(sock: &mut TcpStream) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_HEAD_BYTES];
    let mut n = 0;
    while n < buf.len() {
        match sock.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                // Only the new bytes (and 3 before them) can complete the terminator.
                let from = n.saturating_sub(3);
                n += k;
                if buf[from..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        }
    }
    buf.truncate(n);
    buf
}

async fn serve_one(mut sock: TcpStream, peer: std::net::SocketAddr, engine: Engine, listeners: &[Arc<ListenerStats>]) {
    let head = match tokio::time::timeout(READ_DEADLINE, read_head(&mut sock)).await {
        Ok(h) => h,
        Err(_) => {
            debug!(peer = %peer, "metrics request head not received within the deadline");
            let msg = response("408 Request Timeout", TEXT, "", "request head not received in time\n");
            let _ = tokio::time::timeout(Duration::from_millis(100), sock.write_all(msg.as_bytes())).await;
            return;
        }
    };
    let head = String::from_utf8_lossy(&head);
    let first = head.lines().next().unwrap_or("");
    let path = first.strip_prefix("GET ").and_then(|r| r.split_whitespace().next()).unwrap_or("");
    let (status, ctype, body) = match path {
        "/metrics" => {
            let snap = engine.snapshot().await;
            // Rendering reads the GPU sampler's latest readings (never NVML itself).
            let mut text = tokio::task::spawn_blocking(move || crate::metrics::render(&snap))
                .await
                .unwrap_or_else(|e| format!("# metrics rendering failed: {e}\n"));
            text.push_str(&super::listener::render(listeners));
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text)
        }
        "/debug/timeline" | "/debug/utilization.svg"
            if !engine.timeline().is_enabled() && engine.timeline().spans().is_empty() =>
        {
            let msg = "the timeline is not recording: set [timeline] enabled = true, or call cuzk.ext.v1 SetTimeline\n";
            ("409 Conflict", TEXT, msg.to_string())
        }
        "/debug/timeline" => {
            let tl = engine.timeline().clone();
            let json = tokio::task::spawn_blocking(move || tl.chrome_trace()).await.unwrap_or_default();
            ("200 OK", "application/json", json)
        }
        "/debug/utilization.svg" => {
            let tl = engine.timeline().clone();
            let svg = tokio::task::spawn_blocking(move || cuzk_actors::timeline::utilization_svg(&tl.utilization(120)))
                .await
                .unwrap_or_default();
            ("200 OK", "image/svg+xml", svg)
        }
        _ => ("404 Not Found", TEXT, "not found; try /metrics, /debug/timeline, /debug/utilization.svg\n".to_string()),
    };
    let resp = response(status, ctype, "", &body);
    let write = async {
        sock.write_all(resp.as_bytes()).await?;
        sock.shutdown().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(peer = %peer, error = %e, "metrics client went away"),
        Err(_) => debug!(peer = %peer, "metrics response not taken within the write timeout"),
    }
}

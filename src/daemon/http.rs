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
//! - the whole response must be written within [`WRITE_TIMEOUT`];
//! - `/debug/*` pages are rendered one at a time (a second request meanwhile gets a
//!   `503` at once): a timeline holds up to `[timeline] max_events` spans, tens of MB
//!   of JSON, so at most one such copy exists; and with `auth_token_file` they need
//!   the same `Authorization: Bearer <token>` as gRPC (`/metrics` stays open, as
//!   Prometheus scrapes usually are; it carries no job data).

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

use super::{
    auth::Auth,
    listener::{CloseReason, ListenerStats},
    results::Results,
};
use crate::Engine;

/// Connections served at once; more are answered 503 and closed.
pub(super) const MAX_CONNECTIONS: usize = 64;
/// Time from accept to the end of the request head.
const READ_DEADLINE: Duration = Duration::from_secs(5);
/// Time to write the whole response.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head read; the rest (and any body) is ignored.
const MAX_HEAD_BYTES: usize = 8192;

/// A response's head with `Connection: close`, for a body of `len` bytes.
fn head(status: &str, ctype: &str, extra_headers: &str, len: usize) -> String {
    format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\n{extra_headers}Connection: close\r\n\r\n")
}

/// A whole (small) response.
fn response(status: &str, ctype: &str, extra_headers: &str, body: &str) -> String {
    head(status, ctype, extra_headers, body.len()) + body
}

/// What the endpoint serves with: the engine, the listeners' and results' figures,
/// the access check and the one-at-a-time slot for `/debug/*` pages.
#[derive(Clone)]
pub(super) struct Pages {
    pub engine: Engine,
    pub listeners: Arc<[Arc<ListenerStats>]>,
    pub intake: Arc<super::intake::Intake>,
    pub store: Option<Arc<Results>>,
    pub auth: Auth,
    pub debug_slot: Arc<Semaphore>,
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Serves until the task is dropped. Accept errors (out of descriptors) are counted,
/// logged at error at most every few seconds, backed off and retried: the endpoint
/// never stops accepting on its own.
pub(super) async fn serve_metrics(listener: tokio::net::TcpListener, stats: Arc<ListenerStats>, pages: Pages) {
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
        let (stats, pages) = (stats.clone(), pages.clone());
        stats.open.fetch_add(1, Relaxed);
        tokio::spawn(async move {
            serve_one(sock, peer, &pages).await;
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

/// The value of header `name` (case-insensitive) in a request head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

async fn serve_one(mut sock: TcpStream, peer: std::net::SocketAddr, pages: &Pages) {
    let head_bytes = match tokio::time::timeout(READ_DEADLINE, read_head(&mut sock)).await {
        Ok(h) => h,
        Err(_) => {
            debug!(peer = %peer, "metrics request head not received within the deadline");
            let msg = response("408 Request Timeout", TEXT, "", "request head not received in time\n");
            let _ = tokio::time::timeout(Duration::from_millis(100), sock.write_all(msg.as_bytes())).await;
            return;
        }
    };
    let req = String::from_utf8_lossy(&head_bytes);
    let first = req.lines().next().unwrap_or("");
    let path = first.strip_prefix("GET ").and_then(|r| r.split_whitespace().next()).unwrap_or("");
    let engine = &pages.engine;
    // `/debug/*` pages carry job ids and timings: behind the gRPC token.
    let denied = if path.starts_with("/debug/") { pages.auth.check(header(&req, "authorization")).err() } else { None };
    // Held until the response is written: one debug page in memory at a time.
    let mut _slot = None;
    let (status, ctype, extra, body) = match path {
        "/metrics" => {
            let snap = engine.snapshot().await;
            let store = pages.store.clone();
            // Rendering reads the GPU sampler's latest readings (never NVML itself);
            // the results directory's free space is a statvfs, off the runtime too.
            let mut text = tokio::task::spawn_blocking(move || {
                crate::metrics::render(&snap) + &super::results::render(store.as_deref())
            })
            .await
            .unwrap_or_else(|e| format!("# metrics rendering failed: {e}\n"));
            text.push_str(&super::listener::render(&pages.listeners));
            text.push_str(&pages.intake.render());
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", "", text)
        }
        _ if denied.is_some() => {
            ("401 Unauthorized", TEXT, "WWW-Authenticate: Bearer\r\n", format!("{}\n", denied.unwrap_or_default()))
        }
        "/debug/timeline" | "/debug/utilization.svg"
            if !engine.timeline().is_enabled() && engine.timeline().is_empty() =>
        {
            let msg = "the timeline is not recording: set [timeline] enabled = true, or call cuzk.ext.v1 SetTimeline\n";
            ("409 Conflict", TEXT, "", msg.to_string())
        }
        "/debug/timeline" | "/debug/utilization.svg" => match pages.debug_slot.clone().try_acquire_owned() {
            Err(_) => {
                let msg = "another /debug page is being rendered; retry shortly\n";
                ("503 Service Unavailable", TEXT, "Retry-After: 2\r\n", msg.to_string())
            }
            Ok(permit) => {
                _slot = Some(permit);
                let tl = engine.timeline().clone();
                if path == "/debug/timeline" {
                    let json = tokio::task::spawn_blocking(move || tl.chrome_trace()).await.unwrap_or_default();
                    ("200 OK", "application/json", "", json)
                } else {
                    let svg = tokio::task::spawn_blocking(move || {
                        cuzk_actors::timeline::utilization_svg(&tl.utilization(120))
                    })
                    .await
                    .unwrap_or_default();
                    ("200 OK", "image/svg+xml", "", svg)
                }
            }
        },
        _ => (
            "404 Not Found",
            TEXT,
            "",
            "not found; try /metrics, /debug/timeline, /debug/utilization.svg\n".to_string(),
        ),
    };
    // The head, then the body as it is (a timeline is not copied again).
    let head = head(status, ctype, extra, body.len());
    let write = async {
        sock.write_all(head.as_bytes()).await?;
        sock.write_all(body.as_bytes()).await?;
        sock.shutdown().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(peer = %peer, error = %e, "metrics client went away"),
        Err(_) => debug!(peer = %peer, "metrics response not taken within the write timeout"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n").as_bytes()).await.unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).await.unwrap();
        let text = String::from_utf8_lossy(&v).into_owned();
        (text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), text)
    }

    /// With a token, `/debug/*` needs it (as gRPC does) and `/metrics` does not; a
    /// debug page asked for while another is being rendered gets 503 at once (the
    /// test holds the one slot), and is served once the slot is free.
    #[test]
    fn debug_pages_need_the_token_and_render_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "debug-token-0123456789").unwrap();
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let cfg = crate::daemon::DaemonConfig { auth_token_file: token.display().to_string(), ..Default::default() };
        let auth = Auth::from_config(&cfg).unwrap();
        let mut ecfg = crate::EngineConfig::default();
        ecfg.backend.kind = cuzk_actors::config::BackendKind::Cpu;
        ecfg.timeline.enabled = true;
        let engine = Engine::start(ecfg).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let stats = ListenerStats::new("metrics", addr.to_string(), MAX_CONNECTIONS);
            let slot = Arc::new(Semaphore::new(1));
            let pages = Pages {
                engine: engine.clone(),
                listeners: Arc::new([stats.clone()]),
                intake: crate::daemon::intake::Intake::new(1),
                store: None,
                auth,
                debug_slot: slot.clone(),
            };
            tokio::spawn(serve_metrics(l, stats, pages));
            let good = Some("debug-token-0123456789");
            assert_eq!(get(addr, "/metrics", None).await.0, 200);
            for path in ["/debug/timeline", "/debug/utilization.svg"] {
                let (code, text) = get(addr, path, None).await;
                assert_eq!(code, 401, "{text}");
                assert!(text.contains("requires `authorization: Bearer"), "{text}");
                assert_eq!(get(addr, path, Some("debug-token-wrong-0000")).await.0, 401);
                let held = slot.clone().try_acquire_owned().unwrap();
                let (code, text) = get(addr, path, good).await;
                assert_eq!(code, 503, "{text}");
                assert!(text.contains("Retry-After"), "{text}");
                drop(held);
                let (code, text) = get(addr, path, good).await;
                assert_eq!(code, 200, "{text}");
            }
            let (_, text) = get(addr, "/debug/timeline", good).await;
            let body = text.split("\r\n\r\n").nth(1).unwrap();
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            assert!(v["traceEvents"].is_array(), "{body}");
        });
        engine.shutdown();
    }
}

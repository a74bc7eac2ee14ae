//! A minimal HTTP/1.1 responder for a few read-only pages (no framework needed):
//! `GET /metrics` (Prometheus text), `GET /debug/timeline` (Chrome trace JSON of the
//! recorded timeline) and `GET /debug/utilization.svg` (per-stage utilization plot);
//! anything else gets 404.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::debug;

use crate::Engine;

pub(super) async fn serve_metrics(listener: tokio::net::TcpListener, engine: Engine) {
    loop {
        let (mut sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                debug!(error = %e, "metrics accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut n = 0;
            // Read the request head (bounded); the body, if any, is ignored.
            while n < buf.len() {
                match tokio::time::timeout(std::time::Duration::from_secs(5), sock.read(&mut buf[n..])).await {
                    Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                    Ok(Ok(k)) => {
                        n += k;
                        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                }
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let first = head.lines().next().unwrap_or("");
            let path = first.strip_prefix("GET ").and_then(|r| r.split_whitespace().next()).unwrap_or("");
            let (status, ctype, body) = match path {
                "/metrics" => {
                    let snap = engine.snapshot().await;
                    // Rendering samples the GPUs (NVML blocks for ~40 ms per device).
                    let text = tokio::task::spawn_blocking(move || crate::metrics::render(&snap))
                        .await
                        .unwrap_or_else(|e| format!("# metrics rendering failed: {e}\n"));
                    ("200 OK", "text/plain; version=0.0.4; charset=utf-8", text)
                }
                "/debug/timeline" | "/debug/utilization.svg"
                    if !engine.timeline().is_enabled() && engine.timeline().spans().is_empty() =>
                {
                    let msg = "the timeline is not recording: set [timeline] enabled = true, or call cuzk.ext.v1 SetTimeline\n";
                    ("409 Conflict", "text/plain; charset=utf-8", msg.to_string())
                }
                "/debug/timeline" => {
                    let tl = engine.timeline().clone();
                    let json = tokio::task::spawn_blocking(move || tl.chrome_trace()).await.unwrap_or_default();
                    ("200 OK", "application/json", json)
                }
                "/debug/utilization.svg" => {
                    let tl = engine.timeline().clone();
                    let svg = tokio::task::spawn_blocking(move || {
                        cuzk_actors::timeline::utilization_svg(&tl.utilization(120))
                    })
                    .await
                    .unwrap_or_default();
                    ("200 OK", "image/svg+xml", svg)
                }
                _ => (
                    "404 Not Found",
                    "text/plain; charset=utf-8",
                    "not found; try /metrics, /debug/timeline, /debug/utilization.svg\n".to_string(),
                ),
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            if let Err(e) = sock.write_all(resp.as_bytes()).await {
                debug!(peer = %peer, error = %e, "metrics client went away");
            }
            let _ = sock.shutdown().await;
        });
    }
}

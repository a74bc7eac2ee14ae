//! The metrics HTTP endpoint bounds what a client can hold (src/daemon/http.rs): a
//! request head has a total deadline (a client dribbling bytes is cut), and
//! connections beyond the limit are refused at once instead of held, so the endpoint
//! (and the process's file descriptors, shared with gRPC) stay available.

mod common;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use common::cpu_daemon;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// `MAX_CONNECTIONS` in src/daemon/http.rs.
const LIMIT: usize = 64;
/// `READ_DEADLINE` in src/daemon/http.rs.
const READ_DEADLINE: Duration = Duration::from_secs(5);

/// One GET; the status code and the whole response.
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await?;
    let mut v = Vec::new();
    s.read_to_end(&mut v).await?;
    let text = String::from_utf8_lossy(&v).into_owned();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, text))
}

#[test]
fn slowloris_is_cut_at_the_request_deadline() {
    let d = cpu_daemon();
    let addr = d.metrics.unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (mut r, mut w) = TcpStream::connect(addr).await.unwrap().into_split();
        let t0 = Instant::now();
        let reader = tokio::spawn(async move {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v).await;
            (t0.elapsed(), String::from_utf8_lossy(&v).into_owned())
        });
        // A head that never ends, one byte every 2 s: each read is well within any
        // per-read timeout, but the request as a whole is not.
        let dribbler = tokio::spawn(async move {
            for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: y\r\n".iter().cycle() {
                if w.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        // Meanwhile a normal scrape is served.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (code, body) = tokio::time::timeout(Duration::from_secs(5), get(addr, "/metrics"))
            .await
            .expect("GET /metrics hung while a slow client was connected")
            .unwrap();
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("cuzk_uptime_seconds"), "{body}");
        let limit = READ_DEADLINE + Duration::from_secs(3);
        let (elapsed, answer) = tokio::time::timeout(limit, reader)
            .await
            .unwrap_or_else(|_| panic!("the slow client was still connected after {limit:?}"))
            .unwrap();
        dribbler.abort();
        assert!(elapsed >= READ_DEADLINE - Duration::from_millis(500), "cut too early: {elapsed:?}");
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
    });
    d.shutdown();
}

#[test]
fn idle_connections_beyond_the_limit_are_refused_at_once() {
    let d = cpu_daemon();
    let addr = d.metrics.unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let excess = 36;
        let mut idle = Vec::new();
        for _ in 0..LIMIT + excess {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Each idle connection: closed (with what it was sent) within 2 s, or still held.
        let t0 = Instant::now();
        let watchers: Vec<_> = idle
            .into_iter()
            .map(|mut s| {
                tokio::spawn(async move {
                    let mut v = Vec::new();
                    let closed = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut v)).await.is_ok();
                    (closed, String::from_utf8_lossy(&v).into_owned(), s)
                })
            })
            .collect();
        let mut held = Vec::new();
        let mut refused = 0;
        for w in watchers {
            let (closed, answer, s) = w.await.unwrap();
            if closed {
                refused += 1;
                assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 503"), "{answer}");
            } else {
                held.push(s);
            }
        }
        assert!(t0.elapsed() < READ_DEADLINE, "the watch outlasted the read deadline: {:?}", t0.elapsed());
        assert!(
            refused >= excess,
            "{refused} of {} idle connections were closed within 2 s; the server holds more than {LIMIT}",
            LIMIT + excess
        );
        assert!(!held.is_empty(), "no connection was served at all");
        // While full, a scrape is answered at once (503), not queued behind the idle ones.
        let t = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(1), get(addr, "/metrics"))
            .await
            .expect("a scrape hung while the endpoint was full");
        if let Ok((code, text)) = r {
            assert!(code == 503 || code == 200, "{text}");
        }
        assert!(t.elapsed() < Duration::from_secs(1));
        // The idle clients go away: their slots are free again at once.
        drop(held);
        let t = Instant::now();
        loop {
            match get(addr, "/metrics").await {
                Ok((200, body)) => {
                    assert!(body.contains("cuzk_uptime_seconds"), "{body}");
                    break;
                }
                other => assert!(
                    t.elapsed() < Duration::from_secs(2),
                    "no scrape served after the idle clients left: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    d.shutdown();
}

//! The daemon's own API (cuzk.ext.v1) on loopback, with synthetic jobs (no Filecoin
//! parameters needed): priority overtaking, per-job timings, pipeline state, the
//! timeline (gRPC and HTTP), bad requests; and `cuzk bench batch` against it.

mod common;

use std::time::Instant;

use common::small_config;
use cuzk::client::Conn;
use cuzk::daemon::{
    ext_proto::{
        engine_client::EngineClient, GetJobTimingsRequest, GetPipelineRequest, GetTimelineRequest, SetTimelineRequest,
        SubmitSyntheticRequest,
    },
    proto::{
        await_proof_response::Status as JobStatus, proving_engine_client::ProvingEngineClient, AwaitProofRequest,
        Priority,
    },
    Daemon, DaemonConfig, Listen,
};
use tonic::Code;

fn daemon(tweak: impl FnOnce(&mut cuzk::EngineConfig)) -> Daemon {
    let cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: "127.0.0.1:0".into(),
        shutdown_timeout_secs: 0,
        results_dir: "none".into(),
        allow_synthetic: true,
        ..Default::default()
    };
    let mut engine = small_config();
    tweak(&mut engine);
    Daemon::start(cfg, engine).unwrap()
}

fn url(d: &Daemon) -> String {
    let Listen::Tcp(addr) = d.listen else { panic!("tcp expected") };
    format!("http://{addr}")
}

async fn clients(d: &Daemon) -> (ProvingEngineClient<Conn>, EngineClient<Conn>) {
    let ch = cuzk::client::connect(&url(d)).await.unwrap();
    (cuzk::client::v1(ch.clone()), cuzk::client::ext(ch))
}

fn synthetic(log2: u32, seed: u64, priority: Priority) -> SubmitSyntheticRequest {
    SubmitSyntheticRequest { log2, public_inputs: 2, seed, priority: priority as i32, ..Default::default() }
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // One /debug page renders at a time, its slot held until the response is
    // written and closed, so a request sent right after the last one's end may be
    // told 503 + Retry-After: a client retries, as this one does.
    for _ in 0..50 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        if !body.starts_with("HTTP/1.1 503") {
            return body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{path}: 503 for 5 s");
}

#[test]
fn priority_overtakes_queued_partitions() {
    // One worker per stage, so that jobs queue at every stage.
    let d = daemon(|c| c.synthesize.max_concurrency = 1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (v1, mut ext) = clients(&d).await;
        // Parameters are generated on first use: warm them up outside the measurement.
        let id = ext.submit_synthetic(synthetic(12, 0, Priority::Normal)).await.unwrap().into_inner().job_id;
        let mut c = v1.clone();
        c.await_proof(AwaitProofRequest { job_id: id, timeout_ms: 0 }).await.unwrap();

        let low = 20;
        let mut ids = Vec::new();
        for i in 0..low {
            ids.push(ext.submit_synthetic(synthetic(12, 1 + i, Priority::Low)).await.unwrap().into_inner().job_id);
        }
        let urgent = ext.submit_synthetic(synthetic(12, 99, Priority::Critical)).await.unwrap().into_inner().job_id;
        ids.push(urgent.clone());
        let start = Instant::now();
        let mut waits = tokio::task::JoinSet::new();
        for id in ids {
            let mut c = v1.clone();
            waits.spawn(async move {
                let r = c.await_proof(AwaitProofRequest { job_id: id.clone(), timeout_ms: 0 }).await.unwrap();
                (id, r.into_inner().status, start.elapsed())
            });
        }
        let mut done = Vec::new();
        while let Some(r) = waits.join_next().await {
            done.push(r.unwrap());
        }
        assert!(done.iter().all(|(_, s, _)| *s == JobStatus::Completed as i32));
        done.sort_by_key(|(_, _, t)| *t);
        let rank = done.iter().position(|(id, _, _)| *id == urgent).unwrap() + 1;
        eprintln!("critical job finished {rank} of {}", done.len());
        // Submitted last: FIFO would finish it last (21st). It can only be behind the
        // partitions already running or sitting in FIFO mailboxes when it arrived.
        assert!(
            rank <= 12,
            "critical job finished {rank} of {}: it did not overtake the queued low-priority jobs",
            done.len()
        );
    });
    d.shutdown();
}

#[test]
fn timings_pipeline_timeline_and_bad_requests() {
    let d = daemon(|c| c.timeline.enabled = false);
    let metrics = d.metrics.unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (mut v1, mut ext) = clients(&d).await;
        // Not recording yet: the HTTP export says how to turn it on.
        let body = http_get(metrics, "/debug/timeline").await;
        assert!(body.starts_with("HTTP/1.1 409") && body.contains("SetTimeline"), "{body}");
        assert!(
            ext.set_timeline(SetTimelineRequest { enabled: true, clear: true }).await.unwrap().into_inner().enabled
        );

        let req = SubmitSyntheticRequest { partitions: 3, ..synthetic(10, 5, Priority::Normal) };
        let id = ext.submit_synthetic(req).await.unwrap().into_inner().job_id;
        let r = v1.await_proof(AwaitProofRequest { job_id: id.clone(), timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
        assert_eq!(r.proof.len(), 3 * 192);

        let t = ext.get_job_timings(GetJobTimingsRequest { job_id: id.clone() }).await.unwrap().into_inner();
        assert!(t.finished && t.total_seconds > 0.0);
        assert_eq!(t.stages.len(), 7);
        let synth = t.stages.iter().find(|s| s.stage == "synthesize").unwrap();
        assert!(synth.busy_seconds > 0.0);
        // Nothing waits for a staging buffer on the CPU backend: blocked time is its
        // own field, not a copy of busy time.
        assert!(t.stages.iter().all(|s| s.blocked_seconds == 0.0), "{:?}", t.stages);
        assert!(t.ops.iter().any(|o| o.op == "msm_h" && o.seconds > 0.0), "{:?}", t.ops);

        let p = ext.get_pipeline(GetPipelineRequest {}).await.unwrap().into_inner();
        assert_eq!(p.backend, "cpu");
        let prove = p.stages.iter().find(|s| s.stage == "prove_gpu").unwrap();
        assert_eq!(prove.completed, 3, "three partitions through ProveGpu");
        assert!(p.stages.iter().all(|s| s.blocked_seconds == 0.0), "{:?}", p.stages);
        assert!(p.budgets[0].capacity_bytes == 4 << 30 && p.budgets[0].peak_bytes > 0);
        assert!(!p.bottleneck.is_empty());

        // The timeline: one busy span per partition per stage, the job span, and the
        // backend operations inside ProveGpu.
        let tl = ext.get_timeline(GetTimelineRequest {}).await.unwrap().into_inner();
        let json: serde_json::Value = serde_json::from_str(&tl.chrome_trace_json).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let busy = |pid: u64| events.iter().filter(|e| e["cat"] == "busy" && e["pid"] == pid).count();
        let stage_pid = |s: cuzk::StageName| s.index() as u64 + 1;
        assert_eq!(busy(stage_pid(cuzk::StageName::Ingest)), 1, "ingest sees the job once");
        assert_eq!(busy(stage_pid(cuzk::StageName::Synthesize)), 3);
        assert_eq!(busy(stage_pid(cuzk::StageName::ProveGpu)), 3);
        assert!(events.iter().any(|e| e["cat"] == "op" && e["name"] == "msm_l"));
        assert_eq!(events.iter().filter(|e| e["cat"] == "job" && e["ph"] == "b").count(), 1);
        let body = http_get(metrics, "/debug/timeline").await;
        assert!(body.starts_with("HTTP/1.1 200") && body.contains("traceEvents"));
        let body = http_get(metrics, "/debug/utilization.svg").await;
        assert!(body.starts_with("HTTP/1.1 200") && body.contains("<polyline"), "{}", &body[..body.len().min(300)]);

        // Bad requests.
        let bad = [
            (synthetic(0, 0, Priority::Normal), "log2 or constraints"),
            (synthetic(27, 0, Priority::Normal), "above the daemon's limit"),
            (SubmitSyntheticRequest { a_density: 2.0, ..synthetic(8, 0, Priority::Normal) }, "density"),
            (SubmitSyntheticRequest { partitions: 65, ..synthetic(8, 0, Priority::Normal) }, "partitions"),
        ];
        for (req, want) in bad {
            let e = ext.submit_synthetic(req).await.unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
            assert!(e.message().contains(want), "`{}` should mention `{want}`", e.message());
        }
        let e = ext.get_job_timings(GetJobTimingsRequest { job_id: "nope".into() }).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
    });
    d.shutdown();
}

#[test]
fn bench_batch_client_against_the_daemon() {
    let d = daemon(|_| {});
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cuzk"))
        .args(["bench", "batch", "-t", "synthetic", "--log2", "10", "-c", "4", "-j", "2", "--addr", &url(&d)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().filter(|l| l.starts_with("proof ") && l.contains("192 bytes")).count(), 4, "{stdout}");
    assert!(stdout.contains("batch: 4/4 proofs ok") && stdout.contains("proofs/min"), "{stdout}");
    // Bad input is a clear error, not a crash.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cuzk"))
        .args(["bench", "batch", "-t", "porep", "--addr", &url(&d)])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--c1"));
    d.shutdown();
    // Nothing listening: the error names the address.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cuzk"))
        .args(["bench", "batch", "-t", "synthetic", "--addr", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("127.0.0.1:1"));
}

/// SubmitSynthetic makes the daemon generate parameters: off unless the config allows
/// it, and when on, the parameters it keeps are charged to the host budget.
#[test]
fn synthetic_jobs_are_off_by_default_and_charged_when_on() {
    let cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: String::new(),
        results_dir: "none".into(),
        ..Default::default()
    };
    let d = Daemon::start(cfg, small_config()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (_, mut ext) = clients(&d).await;
        let e = ext.submit_synthetic(synthetic(8, 0, Priority::Normal)).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("allow_synthetic"), "{}", e.message());
    });
    d.shutdown();

    let d = daemon(|_| {});
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (mut v1, mut ext) = clients(&d).await;
        assert_eq!(d.engine().host_budget().used, 0);
        let id = ext.submit_synthetic(synthetic(10, 0, Priority::Normal)).await.unwrap().into_inner().job_id;
        let r = v1.await_proof(AwaitProofRequest { job_id: id, timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.proof.len(), 192, "{}", r.error_message);
        let held = d.engine().host_budget().used;
        assert!(held > 0, "the kept synthetic parameters are charged to the host budget");
    });
    d.shutdown();
}

//! The daemon on loopback, through the cuzk.v1 gRPC API: a real 2KiB PoRep proof
//! verified with verify_seal; submit, await, cancel, status, metrics (gRPC and HTTP);
//! bad input answered with gRPC codes; shutdown with jobs in flight. Tests of the
//! daemon's own behavior (its results store) prove WinningPoSt where the kind does not
//! matter: ~1 s on the CPU against ~30 s for a 2KiB PoRep partition.

mod common;

use std::{sync::OnceLock, time::Duration};

use common::{
    porep::{ensure_params, fixture, param_cache, verify, work_dir},
    small_config,
};
use cuzk::daemon::{
    proto::{
        await_proof_response::Status as JobStatus, proving_engine_client::ProvingEngineClient, AwaitProofRequest,
        CancelProofRequest, EvictSrsRequest, GetMetricsRequest, GetStatusRequest, PreloadSrsRequest, ProofKind,
        ProveRequest, SubmitProofRequest,
    },
    Daemon, DaemonConfig, Listen,
};
use cuzk::filecoin::{self as fil, PostFixture, RegisteredPoStProof};
use tonic::{transport::Channel, Code};

/// A fresh results directory per daemon (tests run in parallel).
fn results_dir() -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cuzk-daemon-results/{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.display().to_string()
}

fn daemon(tweak: impl FnOnce(&mut DaemonConfig)) -> Daemon {
    let mut cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: "127.0.0.1:0".into(),
        shutdown_timeout_secs: 0,
        results_dir: results_dir(),
        ..Default::default()
    };
    tweak(&mut cfg);
    let mut engine = small_config();
    engine.ingest.param_cache = param_cache();
    Daemon::start(cfg, engine).unwrap()
}

async fn client(d: &Daemon) -> ProvingEngineClient<Channel> {
    let Listen::Tcp(addr) = d.listen else { panic!("tcp expected") };
    ProvingEngineClient::connect(format!("http://{addr}")).await.unwrap().max_decoding_message_size(64 << 20)
}

fn porep_request(f: &cuzk::filecoin::C1Fixture, vanilla: Vec<u8>) -> SubmitProofRequest {
    SubmitProofRequest {
        proof_kind: ProofKind::PorepSealCommit as i32,
        sector_size: 2048,
        registered_proof: 5, // StackedDrg2KiBV1_1
        vanilla_proof: vanilla,
        sector_number: f.sector_id,
        miner_id: f.miner_id,
        ..Default::default()
    }
}

const WINNING: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWinning2KiBV1;

/// One sealed 2KiB sector's WinningPoSt vanilla proofs, its parameters in the cache.
fn winning() -> &'static PostFixture {
    static F: OnceLock<PostFixture> = OnceLock::new();
    F.get_or_init(|| {
        ensure_params(&param_cache(), WINNING);
        fil::generate_post_vanilla(WINNING, 1, 3, &work_dir("daemon-winning")).unwrap()
    })
}

/// A WinningPoSt request as Curio sends it (filecoin-ffi numbering).
fn winning_request(w: &PostFixture, request_id: &str) -> SubmitProofRequest {
    SubmitProofRequest {
        request_id: request_id.into(),
        proof_kind: ProofKind::WinningPost as i32,
        registered_proof: 0, // abi.RegisteredPoStProof_StackedDrgWinning2KiBV1
        sector_size: 2048,
        vanilla_proofs: w.vanilla_proofs.clone(),
        miner_id: w.miner_id,
        randomness: w.randomness.to_vec(),
        ..Default::default()
    }
}

fn winning_verifies(w: &PostFixture, proof: &[u8]) -> bool {
    fil::verify_winning_post(WINNING, w.randomness, w.prover_id, &w.challenged, proof).unwrap()
}

/// Curio's wrapper through the daemon; the plain C1 JSON through it is
/// `submit_await_cancel_status_metrics`'s completed job.
#[test]
fn porep_proof_through_the_v1_api() {
    let f = fixture(11);
    let d = daemon(|_| {});
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(&d).await;
        // Curio sends the Lotus/Curio wrapper.
        let r = c
            .prove(ProveRequest { submit: Some(porep_request(&f, f.wrapper_json.clone())) })
            .await
            .unwrap()
            .into_inner()
            .result
            .unwrap();
        assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
        assert_eq!(r.proof.len(), 192);
        assert!(verify(&f, f.sector_id, &r.proof), "verify_seal rejected the daemon's proof");
        assert!(r.total_ms > 0 && r.synthesis_ms > 0);
    });
    d.shutdown();
}

fn parse_metrics(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse::<f64>().unwrap_or_else(|_| panic!("bad value in `{l}`")))
        })
        .collect()
}

#[test]
fn submit_await_cancel_status_metrics() {
    let f = fixture(12);
    let d = daemon(|_| {});
    let metrics_addr = d.metrics.unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(&d).await;
        let mut req = porep_request(&f, f.c1_json.clone());
        req.request_id = "req-1".into();
        let job = c.submit_proof(req.clone()).await.unwrap().into_inner().job_id;
        // Idempotent on request_id.
        assert_eq!(c.submit_proof(req).await.unwrap().into_inner().job_id, job);
        let r = c.await_proof(AwaitProofRequest { job_id: job.clone(), timeout_ms: 1 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Timeout as i32);
        assert!(c.cancel_proof(CancelProofRequest { job_id: job.clone() }).await.unwrap().into_inner().was_running);
        let r = c.await_proof(AwaitProofRequest { job_id: job.clone(), timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Cancelled as i32);
        // A request id whose job was cancelled is a retry: it gets a new job (cancelled
        // again here, so the counts below stay as they were).
        let mut retry = porep_request(&f, f.c1_json.clone());
        retry.request_id = "req-1".into();
        let job_b = c.submit_proof(retry).await.unwrap().into_inner().job_id;
        assert_ne!(job_b, job, "a cancelled request id is submitted again");
        c.cancel_proof(CancelProofRequest { job_id: job_b.clone() }).await.unwrap();
        let r = c.await_proof(AwaitProofRequest { job_id: job_b, timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Cancelled as i32);
        // Four submissions of one new request id racing each other make one job.
        let mut race = porep_request(&f, f.c1_json.clone());
        race.request_id = "req-race".into();
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (mut c, race) = (c.clone(), race.clone());
                tokio::spawn(async move { c.submit_proof(race).await.unwrap().into_inner().job_id })
            })
            .collect();
        let mut ids = Vec::new();
        for t in tasks {
            ids.push(t.await.unwrap());
        }
        assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
        c.cancel_proof(CancelProofRequest { job_id: ids[0].clone() }).await.unwrap();
        let r = c.await_proof(AwaitProofRequest { job_id: ids[0].clone(), timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Cancelled as i32);
        // Its partitions may still hold the parameters for a moment after it ended.
        while c.get_status(GetStatusRequest {}).await.unwrap().into_inner().loaded_srs.iter().any(|l| l.ref_count > 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A second job completes; status and metrics account for both.
        let job2 = c.submit_proof(porep_request(&f, f.c1_json.clone())).await.unwrap().into_inner().job_id;
        // While the job holds the parameters, evicting them is refused (their memory
        // is still in use); GetStatus answers during the job.
        let held = loop {
            let s = c.get_status(GetStatusRequest {}).await.unwrap().into_inner();
            if s.loaded_srs.first().is_some_and(|l| l.ref_count > 0) {
                break true;
            }
            if s.total_proofs_completed > 0 {
                break false; // finished before we looked; nothing to check
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if held {
            let e = c.evict_srs(EvictSrsRequest { circuit_id: "porep-2k".into() }).await.unwrap_err();
            assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
            assert!(e.message().contains("in use"), "{}", e.message());
        }
        let r = c.await_proof(AwaitProofRequest { job_id: job2, timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
        let s = c.get_status(GetStatusRequest {}).await.unwrap().into_inner();
        assert_eq!(s.total_proofs_completed, 1);
        // Per proof kind, as Curio's server names them.
        let kinds: Vec<&str> = s.queues.iter().map(|q| q.proof_kind.as_str()).collect();
        assert_eq!(kinds, ["porep-c2", "winning-post", "window-post", "snap-update"]);
        assert_eq!(s.loaded_srs.len(), 1);
        assert_eq!(s.loaded_srs[0].circuit_id, "porep-2k");
        // The CPU backend has no devices to report health for.
        assert!(s.devices.is_empty(), "{:?}", s.devices);
        // The parameters read, with their digest check: the test cache holds test
        // parameters generated under Filecoin's names.
        let params: Vec<_> = s.parameter_files.iter().filter(|p| p.path.ends_with(".params")).collect();
        assert!(!params.is_empty(), "{:?}", s.parameter_files);
        assert!(params.iter().all(|p| p.digest_status == "test"), "{:?}", s.parameter_files);
        let pre = c.preload_srs(PreloadSrsRequest { circuit_id: "porep-2k".into() }).await.unwrap().into_inner();
        assert!(pre.already_loaded);
        // Idle now: eviction returns the file's bytes to the budget.
        let ev = c.evict_srs(EvictSrsRequest { circuit_id: "porep-2k".into() }).await.unwrap().into_inner();
        assert!(ev.was_loaded && ev.freed_bytes > 0);
        assert!(c.get_status(GetStatusRequest {}).await.unwrap().into_inner().loaded_srs.is_empty());
        let pre = c.preload_srs(PreloadSrsRequest { circuit_id: "porep-2k".into() }).await.unwrap().into_inner();
        assert!(!pre.already_loaded, "loaded again after eviction");
        let text = c.get_metrics(GetMetricsRequest {}).await.unwrap().into_inner().prometheus_text;
        let m = parse_metrics(&text);
        // Four jobs: the racing submissions made one.
        assert_eq!(m["cuzk_jobs_submitted_total"], 4.0);
        assert_eq!(m["cuzk_jobs_succeeded_total"], 1.0);
        assert_eq!(m["cuzk_jobs_cancelled_total"], 3.0);
        assert!(m["cuzk_stage_busy_seconds_total{stage=\"synthesize\"}"] > 0.0);
        let q = |name: &str, stage: &str| m[&format!("cuzk_stage_{name}{{stage=\"{stage}\"}}")];
        assert!(q("queue_pushed_total", "synthesize") >= 1.0);
        assert_eq!(
            q("queue_pushed_total", "prove_gpu"),
            q("queue_popped_total", "prove_gpu") + q("queue_length", "prove_gpu")
        );
        assert!(q("reserved_bytes_total", "synthesize") > 0.0, "synthesis reserves host memory");
        assert!(m["cuzk_budget_capacity_bytes{budget=\"host\"}"] > 0.0);
        assert!(m["cuzk_budget_used_bytes{budget=\"host\"}"] > 0.0, "resident parameters are charged");
        assert!(m["cuzk_process_resident_memory_bytes"] > 0.0);
        assert_eq!(m["cuzk_backend_info{backend=\"cpu\"}"], 1.0);
        for stage in ["ingest", "synthesize", "prepare_msm", "stage_pcie", "prove_gpu", "assemble"] {
            assert!(m.contains_key(&format!("cuzk_stage_queue_length{{stage=\"{stage}\"}}")), "{stage}");
            // Nothing waits for staging buffers on the CPU backend.
            assert_eq!(q("blocked_seconds_total", stage), 0.0, "{stage}");
        }
        // The same over HTTP.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(metrics_addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(body.contains("cuzk_jobs_submitted_total 4"), "{body}");
    });
    d.shutdown();
}

#[test]
fn bad_requests_get_grpc_codes() {
    let f = fixture(13);
    let d = daemon(|c| c.max_message_bytes = cuzk::actors::ByteSize(150_000));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(&d).await;
        let good = porep_request(&f, f.c1_json.clone());
        let cases: Vec<(&str, SubmitProofRequest, Code, &str)> = vec![
            (
                "unspecified kind",
                SubmitProofRequest { proof_kind: 0, ..good.clone() },
                Code::InvalidArgument,
                "unspecified",
            ),
            (
                "unknown kind",
                SubmitProofRequest { proof_kind: 99, ..good.clone() },
                Code::InvalidArgument,
                "unknown proof_kind",
            ),
            (
                "snap deals with a C1 and no commitments",
                SubmitProofRequest { proof_kind: ProofKind::SnapDealsUpdate as i32, ..good.clone() },
                Code::InvalidArgument,
                "registered_proof 5 is not an update proof",
            ),
            (
                "winning post with a C1",
                SubmitProofRequest { proof_kind: ProofKind::WinningPost as i32, ..good.clone() },
                Code::InvalidArgument,
                "not a WinningPoSt proof",
            ),
            (
                "empty vanilla proof",
                SubmitProofRequest { vanilla_proof: vec![], ..good.clone() },
                Code::InvalidArgument,
                "empty",
            ),
            (
                "malformed C1",
                SubmitProofRequest { vanilla_proof: b"{\"registered_proof\": 12".to_vec(), ..good.clone() },
                Code::InvalidArgument,
                "not valid",
            ),
            (
                "oversized",
                SubmitProofRequest { vanilla_proof: vec![b' '; 160_000], ..good.clone() },
                Code::ResourceExhausted,
                "above the limit",
            ),
            (
                "request id too long",
                SubmitProofRequest { request_id: "r".repeat(300), ..good.clone() },
                Code::InvalidArgument,
                "request_id is 300 bytes",
            ),
            (
                "C1 of another miner",
                SubmitProofRequest { miner_id: f.miner_id + 1, ..good.clone() },
                Code::InvalidArgument,
                "replica_id",
            ),
        ];
        for (name, req, code, needle) in cases {
            let e = c.submit_proof(req).await.expect_err(name);
            assert_eq!(e.code(), code, "{name}: {e}");
            assert!(e.message().contains(needle), "{name}: `{}` lacks `{needle}`", e.message());
        }
        for id in ["nope", "../../etc/passwd", "0000000000000001-1"] {
            let e = c.await_proof(AwaitProofRequest { job_id: id.into(), timeout_ms: 0 }).await.unwrap_err();
            assert_eq!(e.code(), Code::NotFound, "{id}");
        }
        let e = c.preload_srs(PreloadSrsRequest { circuit_id: "wpost-3g".into() }).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("not a sector size"), "{}", e.message());
        let e = c.preload_srs(PreloadSrsRequest { circuit_id: "seal-32g".into() }).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        // Still serving after all that. For PoRep the C1 is authoritative: Curio's
        // cuzk-bench sends registered_proof 0 and a 32GiB sector size whatever the C1
        // is; the proof is the C1's.
        let bench = SubmitProofRequest { registered_proof: 0, sector_size: 32 << 30, ..good };
        let r = c.prove(ProveRequest { submit: Some(bench) }).await.unwrap().into_inner().result.unwrap();
        assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
        assert!(verify(&f, f.sector_id, &r.proof));
    });
    d.shutdown();
}

/// The ingest limit applies to gRPC submissions too (the smaller of the two wins),
/// before anything is parsed.
#[test]
fn ingest_limit_applies_to_grpc() {
    let f = fixture(13);
    let mut engine = small_config();
    engine.ingest.param_cache = param_cache();
    engine.ingest.max_input_bytes = cuzk::actors::ByteSize(1000);
    let cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: String::new(),
        results_dir: "none".into(),
        ..Default::default()
    };
    let d = Daemon::start(cfg, engine).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(&d).await;
        let e = c.submit_proof(porep_request(&f, f.c1_json.clone())).await.unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("limit of 1000"), "{}", e.message());
    });
    d.shutdown();
}

/// With `auth_token_file`, a call without the token (or with another) is refused;
/// a token file other users can read, or a short secret, stops the start.
#[test]
fn token_guards_every_call() {
    use std::os::unix::fs::PermissionsExt;
    let token = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuzk-test-token");
    std::fs::write(&token, "s3cret-s3cret-s3cret\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = DaemonConfig { auth_token_file: token.display().to_string(), ..Default::default() };
    let e = Daemon::start(cfg, small_config()).err().unwrap().to_string();
    assert!(e.contains("mode is 0644") && e.contains("chmod 600"), "{e}");
    common::owner_only(&token);
    let d = daemon(|c| c.auth_token_file = token.display().to_string());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(&d).await;
        let e = c.get_status(GetStatusRequest {}).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        let with = |t: &str| {
            let mut r = tonic::Request::new(GetStatusRequest {});
            r.metadata_mut().insert("authorization", format!("Bearer {t}").parse().unwrap());
            r
        };
        assert_eq!(c.get_status(with("wrong-wrong-wrong")).await.unwrap_err().code(), Code::Unauthenticated);
        c.get_status(with("s3cret-s3cret-s3cret")).await.unwrap();
    });
    d.shutdown();
    std::fs::write(&token, "short").unwrap();
    let cfg = DaemonConfig { auth_token_file: token.display().to_string(), ..Default::default() };
    let e = Daemon::start(cfg, small_config()).err().unwrap().to_string();
    assert!(e.contains("at least 16 characters"), "{e}");
}

/// A finished job's result outlives the daemon: after a restart AwaitProof serves it,
/// its request id still names it (and only for the same inputs), an interrupted job
/// is reported as such and resubmitted as a new job, and job ids never repeat.
/// Results outlive the daemon: a finished job (a WinningPoSt) is answered from the
/// store after a restart, its request id keeps naming it, and one interrupted by the
/// shutdown (a PoRep, still in synthesis when the daemon stops) is stored as such
/// and proved again as a new job when retried.
#[test]
fn results_survive_a_restart() {
    let (w, f) = (winning(), fixture(15));
    let dir = results_dir();
    let d = daemon(|c| c.results_dir = dir.clone());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (job, proof) = rt.block_on(async {
        let mut c = client(&d).await;
        let req = winning_request(w, "winning-15");
        let r = c.prove(ProveRequest { submit: Some(req) }).await.unwrap().into_inner().result.unwrap();
        assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
        // One more, interrupted by the shutdown below.
        let mut req = porep_request(&f, f.wrapper_json.clone());
        req.request_id = "sector-15-again".into();
        c.submit_proof(req).await.unwrap();
        (r.job_id, r.proof)
    });
    d.shutdown();
    // Finished jobs leave memory at once: what the daemon knows of them is the store.
    let d = daemon(|c| {
        c.results_dir = dir.clone();
        c.job_retention_secs = 0;
    });
    rt.block_on(async {
        let mut c = client(&d).await;
        let r = c.await_proof(AwaitProofRequest { job_id: job.clone(), timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!((r.status, &r.proof), (JobStatus::Completed as i32, &proof));
        assert!(winning_verifies(w, &r.proof));
        let mut req = winning_request(w, "winning-15");
        assert_eq!(c.submit_proof(req.clone()).await.unwrap().into_inner().job_id, job, "same request, same job");
        let same = req.clone();
        req.sector_number += 1;
        let e = c.submit_proof(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains(&job), "{}", e.message());
        // The same id with other inputs (new randomness) is refused, never answered
        // with the old proof.
        let mut other = same.clone();
        other.randomness[0] ^= 1;
        let e = c.submit_proof(other).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("other inputs") && e.message().contains(&job), "{}", e.message());
        // The interrupted one: stored as such, and a retry is a new job.
        let mut again = porep_request(&f, f.wrapper_json.clone());
        again.request_id = "sector-15-again".into();
        let new = c.submit_proof(again).await.unwrap().into_inner().job_id;
        assert_ne!(new.split('-').next(), job.split('-').next(), "a new epoch after the restart");
        let r = c.await_proof(AwaitProofRequest { job_id: new, timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
        assert!(verify(&f, f.sector_id, &r.proof));
        // That job has left memory; a retry of the stored one is still answered from
        // the store, not proved again.
        let _ = c.get_status(GetStatusRequest {}).await.unwrap();
        assert_eq!(c.submit_proof(same).await.unwrap().into_inner().job_id, job, "a retry after jobs left memory");
    });
    d.shutdown();
    let stored: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(Result::ok).collect();
    let interrupted = stored
        .iter()
        .filter(|e| {
            std::fs::read_to_string(e.path())
                .unwrap()
                .contains(&format!("\"status\":{}", JobStatus::Interrupted as i32))
        })
        .count();
    assert_eq!((stored.len(), interrupted), (3, 1), "two completed, one interrupted");
}

/// A result that cannot be stored (its temporary file is /dev/full: a full disk)
/// is not silent: GetStatus, both metrics endpoints and the log say so, no partial
/// file is left, and the proof, which is valid, still reaches the client.
#[test]
fn a_full_disk_is_visible_and_the_proof_still_returned() {
    let w = winning();
    let dir = results_dir();
    let d = daemon(|c| c.results_dir = dir.clone());
    let metrics_addr = d.metrics.unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(&d).await;
        // The same WinningPoSt under two request ids: two jobs.
        let prove = |c: &mut ProvingEngineClient<Channel>, id: &str| {
            let req = winning_request(w, id);
            let mut c = c.clone();
            async move { c.prove(ProveRequest { submit: Some(req) }).await.unwrap().into_inner().result.unwrap() }
        };
        let first = prove(&mut c, "disk-1").await;
        assert_eq!(first.status, JobStatus::Completed as i32, "{}", first.error_message);
        let store = c.get_status(GetStatusRequest {}).await.unwrap().into_inner().results_store.unwrap();
        assert!(store.healthy && store.write_failures_total == 0 && store.stored_total == 1, "{store:?}");
        assert_eq!(store.dir, dir);
        // Job ids are <epoch>-<sequence in hex>: the next one is known.
        let (epoch, seq) = first.job_id.split_once('-').unwrap();
        let next = format!("{epoch}-{:x}", u64::from_str_radix(seq, 16).unwrap() + 1);
        let tmp = std::path::Path::new(&dir).join(format!("{next}.json.tmp"));
        std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
        let second = prove(&mut c, "disk-2").await;
        assert_eq!(second.job_id, next);
        assert_eq!(second.status, JobStatus::Completed as i32, "{}", second.error_message);
        assert!(winning_verifies(w, &second.proof), "the proof is returned and valid");
        assert!(std::fs::symlink_metadata(&tmp).is_err(), "no temporary file is left");
        assert!(!std::path::Path::new(&dir).join(format!("{next}.json")).exists());
        let store = c.get_status(GetStatusRequest {}).await.unwrap().into_inner().results_store.unwrap();
        assert!(!store.healthy && store.write_failures_total == 1 && store.stored_total == 1, "{store:?}");
        assert!(store.last_error.contains("No space left") && store.last_failure_unix > 0, "{store:?}");
        assert!(store.free_bytes > 0, "{store:?}");
        let text = c.get_metrics(GetMetricsRequest {}).await.unwrap().into_inner().prometheus_text;
        let m = parse_metrics(&text);
        assert_eq!(m.get("cuzk_results_store_healthy"), Some(&0.0), "{text}");
        assert_eq!(m.get("cuzk_results_write_failures_total"), Some(&1.0));
        assert!(m.get("cuzk_results_dir_free_bytes").is_some_and(|b| *b > 0.0));
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(metrics_addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.contains("cuzk_results_write_failures_total 1\n"), "{body}");
    });
    d.shutdown();
}

#[test]
fn shutdown_gives_every_job_a_terminal_result() {
    let f = fixture(14);
    let d = daemon(|_| {});
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results = rt.block_on(async {
        let c = client(&d).await;
        let calls: Vec<_> = (0..3)
            .map(|i| {
                let mut c = c.clone();
                let mut req = porep_request(&f, f.c1_json.clone());
                req.request_id = format!("stop-{i}");
                tokio::spawn(async move { c.prove(ProveRequest { submit: Some(req) }).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stopper = std::thread::spawn(move || d.shutdown());
        let mut out = Vec::new();
        for call in calls {
            out.push(call.await.unwrap());
        }
        stopper.join().unwrap();
        out
    });
    for r in results {
        let r = r.expect("the call itself completes").into_inner().result.unwrap();
        let ok = r.status == JobStatus::Completed as i32
            || (r.status == JobStatus::Interrupted as i32 && r.error_message.contains("interrupted"));
        assert!(ok, "status {} `{}`", r.status, r.error_message);
    }
}

/// Decoded requests waiting for a full intake are bounded (`[daemon]
/// max_waiting_inputs`): with the device stuck in its first call, PoRep requests fill
/// the pipeline until one waits in the daemon, and the next is refused at once with
/// an error naming the limit; a PoSt request is not refused by it (it has places of
/// its own: it fails on its own empty input instead). Once the device call returns,
/// every accepted job completes and nothing waits.
#[test]
fn waiting_inputs_are_bounded() {
    use cuzk::{actors::services::SelectedBackend, gpu::fake::HangingBackend, Engine};
    let f = fixture(15);
    let cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: String::new(),
        shutdown_timeout_secs: 0,
        results_dir: "none".into(),
        max_waiting_inputs: 1,
        ..Default::default()
    };
    let mut ecfg = small_config();
    ecfg.ingest.param_cache = param_cache();
    // A short pipeline: it is full after a few jobs.
    ecfg.ingest.mailbox_capacity = 1;
    ecfg.ingest.queue_capacity = 1;
    ecfg.synthesize.mailbox_capacity = 1;
    ecfg.synthesize.queue_capacity = 1;
    ecfg.synthesize.max_concurrency = 1;
    ecfg.prepare_msm.mailbox_capacity = 1;
    ecfg.prepare_msm.queue_capacity = 1;
    ecfg.stage_pcie.mailbox_capacity = 1;
    ecfg.stage_pcie.queue_capacity = 1;
    ecfg.prove_gpu.mailbox_capacity = 1;
    ecfg.prove_gpu.queue_capacity = 1;
    let max_input = ecfg.ingest.max_input_bytes.0;
    // Its first device call blocks until released (never taken for hung).
    let backend = HangingBackend::new(Duration::from_secs(3600), 0);
    let selected = SelectedBackend { backend: backend.clone(), devices: 1, on_device: true, pinned_bytes: 0 };
    let d = Daemon::start_with_engine(cfg, Engine::start_with_backend(ecfg, selected).unwrap(), max_input).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = client(&d).await;
        let waiting = |c: ProvingEngineClient<Channel>| async move {
            let text = c.clone().get_metrics(GetMetricsRequest {}).await.unwrap().into_inner().prometheus_text;
            parse_metrics(&text)["cuzk_daemon_inputs_waiting{class=\"bulk\"}"]
        };
        // One at a time: each is taken by the engine, or waits, or (while another
        // waits) is refused; the pipeline stops moving once it is full, so one
        // waiter stays and the next request is refused.
        let mut pending = Vec::new();
        let refused = loop {
            assert!(pending.len() < 200, "no request was ever refused");
            let mut cc = c.clone();
            let mut req = porep_request(&f, f.c1_json.clone());
            req.request_id = format!("wait-{}", pending.len());
            let call = tokio::spawn(async move { cc.submit_proof(req).await });
            while !call.is_finished() && waiting(c.clone()).await < 1.0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if call.is_finished() {
                match call.await.unwrap() {
                    Ok(r) => pending.push(tokio::spawn(async move { Ok(r) })),
                    Err(e) if e.code() == Code::ResourceExhausted => break e,
                    Err(e) => panic!("{e:?}"),
                }
            } else {
                pending.push(call);
            }
        };
        assert!(refused.message().contains("max_waiting_inputs = 1"), "{refused:?}");
        assert!(refused.message().contains("PORE"), "names the request's kind: {refused:?}");
        assert!(waiting(c.clone()).await <= 1.0);
        // PoSt has places of its own: not refused, it reaches its own checks.
        let post =
            SubmitProofRequest { proof_kind: ProofKind::WinningPost as i32, registered_proof: 3, ..Default::default() };
        let e = c.clone().submit_proof(post).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        let text = c.clone().get_metrics(GetMetricsRequest {}).await.unwrap().into_inner().prometheus_text;
        let m = parse_metrics(&text);
        assert!(m["cuzk_daemon_inputs_refused_total{class=\"bulk\"}"] >= 1.0, "{text}");
        assert_eq!(m["cuzk_daemon_inputs_refused_total{class=\"deadline\"}"], 0.0, "{text}");
        assert_eq!(m["cuzk_daemon_inputs_waiting_max"], 1.0);

        // The device call returns: every request taken completes.
        backend.release();
        let mut jobs = 0;
        for call in pending {
            let job_id = match call.await.unwrap() {
                Ok(r) => r.into_inner().job_id,
                // Refused while another waited: fine, and named.
                Err(e) if e.code() == Code::ResourceExhausted => continue,
                Err(e) => panic!("{e:?}"),
            };
            let r = c.clone().await_proof(AwaitProofRequest { job_id, timeout_ms: 0 }).await.unwrap().into_inner();
            assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
            assert!(verify(&f, f.sector_id, &r.proof));
            jobs += 1;
        }
        assert!(jobs >= 1);
        assert_eq!(waiting(c.clone()).await, 0.0, "nothing waits once the engine took them");
    });
    d.shutdown();
}

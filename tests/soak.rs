//! Soak: hundreds of jobs of mixed sizes with random faults (panics and errors in
//! every stage, slow stages cancelled mid-flight, malformed C1 inputs, unsatisfied
//! circuits) through one engine, then a daemon whose clients drop their AwaitProof
//! calls. Every job ends in exactly one terminal state, no reservation or tracker
//! entry leaks, a valid job still proves afterwards, and RSS is flat across the
//! second half. `CUZK_SOAK_JOBS` scales it (default 240; the GPU host runs more).
//! A third run holds the daemon to its promises with results storage on (idle
//! connections held, retried and reused request ids, cancels, a full disk, a device
//! call that hangs) and RSS flat across rounds of clients.

mod common;

use std::time::{Duration, Instant};

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use common::*;
use cuzk::{
    actors::{Fault, FaultKind},
    daemon::{
        ext_proto::SubmitSyntheticRequest,
        proto::{await_proof_response::Status as JobStatus, AwaitProofRequest, SubmitProofRequest},
        Daemon, DaemonConfig, Listen,
    },
    Engine, JobError, JobSpec, StageName, SyntheticCircuit,
};
use rand::{Rng, SeedableRng};

#[derive(Clone)]
struct Unsatisfied;
impl Circuit<Scalar> for Unsatisfied {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let x = cs.alloc(|| "x", || Ok(Scalar::from(3)))?;
        let y = cs.alloc_input(|| "y", || Ok(Scalar::from(10)))?;
        cs.enforce(|| "x*x = y", |lc| lc + x, |lc| lc + x, |lc| lc + y);
        Ok(())
    }
}

/// What a job was made to do, and so how it must end.
#[derive(Debug, Clone, Copy)]
enum Plan {
    Good,
    Fails(StageName),
    Cancelled,
    Malformed,
    Unsatisfied,
}

fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

#[test]
fn soak_mixed_jobs_with_faults() {
    let jobs: usize = std::env::var("CUZK_SOAK_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(240);
    let engine = Engine::start(small_config()).unwrap();
    let sizes = [spec(64, 1, 1.0, 1.0), spec(256, 2, 1.0, 0.5), spec(1024, 1, 0.5, 0.2)];
    let srs: Vec<_> = sizes.iter().map(|s| params(*s)).collect();
    let unsat_srs = params_for(Unsatisfied, 5);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let (mut mid_rss, mut ended) = (0, 0);
    const BATCH: usize = 24;
    for batch in 0..jobs.div_ceil(BATCH) {
        let mut handles = Vec::new();
        for i in 0..BATCH.min(jobs - batch * BATCH) {
            let k = rng.gen_range(0..sizes.len());
            let n = rng.gen_range(1..=3u64);
            let seed = (batch * BATCH + i) as u64;
            let circuits = (0..n).map(|p| SyntheticCircuit::new(sizes[k], seed * 8 + p).unwrap()).collect::<Vec<_>>();
            let job = JobSpec::circuits(srs[k].clone(), circuits);
            let stage = StageName::ALL[rng.gen_range(0..StageName::ALL.len())];
            let (plan, job) = match rng.gen_range(0..10) {
                0 => (Plan::Fails(stage), job.with_fault(Fault { stage, partition: None, kind: FaultKind::Panic })),
                1 => (Plan::Fails(stage), job.with_fault(Fault { stage, partition: Some(0), kind: FaultKind::Error })),
                2 => {
                    let slow = FaultKind::Delay(Duration::from_millis(300));
                    (
                        Plan::Cancelled,
                        job.with_fault(Fault { stage: StageName::Synthesize, partition: None, kind: slow }),
                    )
                }
                3 => {
                    let junk: Vec<u8> = (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect();
                    (Plan::Malformed, JobSpec::porep_c1(junk, [1; 32], seed))
                }
                4 => (Plan::Unsatisfied, JobSpec::circuits(unsat_srs.clone(), vec![Unsatisfied])),
                _ => (Plan::Good, job),
            };
            handles.push((plan, engine.submit_blocking(job).unwrap()));
        }
        // Cancel the slow ones while they are in flight.
        std::thread::sleep(Duration::from_millis(20));
        for (plan, h) in &handles {
            if matches!(plan, Plan::Cancelled) {
                h.canceller().cancel_blocking();
            }
        }
        for (plan, h) in handles {
            let id = h.id();
            let r = h.wait_blocking();
            ended += 1;
            match (plan, &r) {
                (Plan::Good, Ok(o)) => assert!(!o.proofs.is_empty()),
                (Plan::Fails(s), Err(e)) => assert_eq!(e.stage(), Some(s), "job {id}: {e}"),
                (Plan::Cancelled, Err(JobError::Cancelled)) => {}
                (Plan::Malformed, Err(e)) => assert_eq!(e.stage(), Some(StageName::Ingest), "job {id}: {e}"),
                (Plan::Unsatisfied, Err(e)) => assert_eq!(e.stage(), Some(StageName::Verify), "job {id}: {e}"),
                (plan, r) => panic!("job {id} planned {plan:?} ended {:?}", r.as_ref().map(|o| o.proofs.len())),
            }
        }
        if batch == jobs.div_ceil(BATCH) / 2 {
            mid_rss = rss();
        }
    }
    let snap = engine.snapshot_blocking();
    let j = &snap.jobs;
    assert_eq!(j.in_flight, 0, "tracker entries leaked: {j:?}");
    assert_eq!(j.submitted as usize, ended);
    assert_eq!(j.succeeded + j.failed + j.cancelled, j.submitted, "every job ended exactly once: {j:?}");
    let t = Instant::now();
    while engine.host_budget().used != 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "reservations leaked: {:?}", engine.host_budget());
        std::thread::sleep(Duration::from_millis(10));
    }
    for s in engine.stage_snapshots() {
        assert_eq!((s.queue_len, s.in_flight), (0, 0), "{} still holds work", s.stage);
    }
    let ok =
        engine.submit_blocking(JobSpec::circuits(srs[0].clone(), vec![SyntheticCircuit::new(sizes[0], 1).unwrap()]));
    assert_eq!(ok.unwrap().wait_blocking().unwrap().proofs.len(), 1);
    let end_rss = rss();
    assert!(
        end_rss <= mid_rss + mid_rss / 4 + (64 << 20),
        "RSS grew across the second half: {} MiB → {} MiB",
        mid_rss >> 20,
        end_rss >> 20
    );
    engine.shutdown();
}

/// Clients that give up on AwaitProof (timeouts, dropped connections) and malformed
/// submissions leave the daemon serving: every job is still there to await.
#[test]
fn soak_daemon_with_dropped_clients() {
    let cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: String::new(),
        results_dir: "none".into(),
        allow_synthetic: true,
        ..Default::default()
    };
    let d = Daemon::start(cfg, small_config()).unwrap();
    let Listen::Tcp(addr) = d.listen else { panic!("tcp expected") };
    let url = format!("http://{addr}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut ids = Vec::new();
        for i in 0..40u64 {
            // A fresh connection per job, dropped while its AwaitProof is pending.
            let ch = cuzk::client::connect(&url).await.unwrap();
            let (mut v1, mut ext) = (cuzk::client::v1(ch.clone()), cuzk::client::ext(ch));
            let req = SubmitSyntheticRequest { log2: 8, public_inputs: 1, seed: i, ..Default::default() };
            let id = ext.submit_synthetic(req).await.unwrap().into_inner().job_id;
            let pending = v1.await_proof(AwaitProofRequest { job_id: id.clone(), timeout_ms: 0 });
            let _ = tokio::time::timeout(Duration::from_millis(2), pending).await;
            drop((v1, ext));
            if i % 5 == 0 {
                let ch = cuzk::client::connect(&url).await.unwrap();
                let bad = SubmitProofRequest {
                    proof_kind: 1,
                    registered_proof: 5,
                    vanilla_proof: format!("{{\"truncated\": {i}").into_bytes(),
                    ..Default::default()
                };
                let e = cuzk::client::v1(ch).submit_proof(bad).await.unwrap_err();
                assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
            }
            ids.push(id);
        }
        let mut v1 = cuzk::client::v1(cuzk::client::connect(&url).await.unwrap());
        for id in ids {
            let r = v1.await_proof(AwaitProofRequest { job_id: id.clone(), timeout_ms: 0 }).await.unwrap().into_inner();
            assert_eq!(r.status, JobStatus::Completed as i32, "{id}: {}", r.error_message);
            assert_eq!(r.proof.len(), 192);
        }
    });
    let jobs = d.engine().snapshot_blocking().jobs;
    assert_eq!((jobs.in_flight, jobs.succeeded), (0, 40), "{jobs:?}");
    d.shutdown();
}

/// The daemon's promises under mixed traffic with results storage on, on a backend
/// whose second device call hangs. The second job's partition hangs: the device
/// watch retires the device and the job fails naming it, while the stuck thread
/// keeps its memory; everything after proves on what is left. Then four rounds of
/// clients submitting at once over fresh connections while 64 idle connections are
/// held, some AwaitProof calls dropped, some jobs cancelled; in the first round a
/// request id retried by three clients at once (one job, one proof), in every round
/// again after its proof (the same job) and reused with other inputs (refused), and
/// a full disk: a 4 MiB tmpfs made for the test, filled during the third round
/// and given room again for the fourth, where the process may mount (root, as in
/// CI); elsewhere five jobs' temporary files are `/dev/full` (ENOSPC on write).
/// Afterwards every accepted job has exactly one terminal result (the same on every
/// AwaitProof), nothing stays in flight, no reservation is left once the stuck call
/// returns, each failed write is counted with no temporary file left, the rest are
/// stored and the store is healthy again, and RSS grew by at most 32 MiB from the end of the second round to the
/// end of the fourth.
#[test]
fn soak_daemon_promises_with_results_storage() {
    use common::porep::{fixture, param_cache, verify};
    use cuzk::{
        actors::services::SelectedBackend,
        daemon::proto::ProofKind,
        gpu::{fake::HangingBackend, DeviceHealth},
    };
    const ROUNDS: u64 = 4;
    let dir =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("soak-results/{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The full disk: a 4 MiB filesystem made for the test where this process may
    // mount one (root, as in CI), else `/dev/full` behind five results' temporary files.
    let small_fs = SmallFs::mount(&dir, 4 << 20);
    eprintln!("full disk: {}", if small_fs.is_some() { "a 4 MiB tmpfs, filled for round 3" } else { "/dev/full" });
    let cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: String::new(),
        results_dir: dir.display().to_string(),
        allow_synthetic: true,
        shutdown_timeout_secs: 0,
        ..Default::default()
    };
    let mut ecfg = small_config();
    ecfg.ingest.param_cache = param_cache();
    let max_input = ecfg.ingest.max_input_bytes.0;
    // Found hung after 200 ms (a daemon's [backend] device_timeout_secs).
    // Its second device call hangs: the first job shows what stays charged once no
    // job runs (the synthetic parameters the daemon keeps).
    let backend = HangingBackend::new(Duration::from_millis(200), 1);
    let selected = SelectedBackend { backend: backend.clone(), devices: 1, on_device: true, pinned_bytes: 0 };
    let d = Daemon::start_with_engine(cfg, Engine::start_with_backend(ecfg, selected).unwrap(), max_input).unwrap();
    let Listen::Tcp(addr) = d.listen else { panic!("tcp expected") };
    let url = format!("http://{addr}");
    let f = fixture(21);
    let porep = |c1: &Vec<u8>| SubmitProofRequest {
        proof_kind: ProofKind::PorepSealCommit as i32,
        sector_size: 2048,
        registered_proof: 5,
        vanilla_proof: c1.clone(),
        sector_number: f.sector_id,
        miner_id: f.miner_id,
        request_id: "soak-sector-21".into(),
        ..Default::default()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut rss_after_2, mut accepted, mut kept) = (0, 0, 0);
    rt.block_on(async {
        let idle: Vec<_> = idle_connections(addr, 64).await;
        let mut ext = cuzk::client::ext(cuzk::client::connect(&url).await.unwrap());
        let mut v1 = cuzk::client::v1(cuzk::client::connect(&url).await.unwrap());
        let ok = ext.submit_synthetic(synth(999)).await.unwrap().into_inner().job_id;
        let r = v1.await_proof(AwaitProofRequest { job_id: ok, timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
        accepted += 1;
        let t = Instant::now();
        while d.engine().snapshot().await.jobs.in_flight > 0
            || d.engine().stage_snapshots().iter().any(|s| s.in_flight > 0)
        {
            assert!(t.elapsed() < Duration::from_secs(30));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        kept = d.engine().host_budget().used;
        // The job whose device call hangs: it fails, naming the device.
        let first = ext.submit_synthetic(synth(1000)).await.unwrap().into_inner().job_id;
        let r = v1.await_proof(AwaitProofRequest { job_id: first.clone(), timeout_ms: 0 }).await.unwrap().into_inner();
        assert_eq!(r.status, JobStatus::Failed as i32, "{r:?}");
        assert!(r.error_message.contains("device 0 hung"), "{}", r.error_message);
        assert!(backend.hung().is_some());
        accepted += 1;
        // Ids are <epoch>-<sequence>: five later jobs' results meet a full disk.
        let (epoch, seq) = first.split_once('-').unwrap();
        let seq = u64::from_str_radix(seq, 16).unwrap();
        let mut failures = 0;
        if small_fs.is_none() {
            let full: Vec<String> = (1..=5).map(|k| format!("{epoch}-{:x}", seq + 4 * k)).collect();
            for id in &full {
                std::os::unix::fs::symlink("/dev/full", dir.join(format!("{id}.json.tmp"))).unwrap();
            }
            failures = 5;
        }
        let mut porep_id = String::new();
        for round in 1..=ROUNDS {
            if round == 3 && small_fs.is_some() {
                // Every result written so far is on disk; then the disk is full.
                settled(&url, accepted).await;
                fill(&dir.join("filler"));
            }
            let clients = client_round(&url, round);
            if round == 1 {
                // The same request id from three clients at once: one job.
                let retries: Vec<_> = (0..3)
                    .map(|_| {
                        let (url, req) = (url.clone(), porep(&f.c1_json));
                        tokio::spawn(async move {
                            let mut v1 = cuzk::client::v1(cuzk::client::connect(&url).await.unwrap());
                            v1.submit_proof(req).await.unwrap().into_inner().job_id
                        })
                    })
                    .collect();
                let mut porep_ids = Vec::new();
                for r in retries {
                    porep_ids.push(r.await.unwrap());
                }
                assert!(porep_ids.iter().all(|i| *i == porep_ids[0]), "{porep_ids:?}");
                porep_id = porep_ids[0].clone();
                accepted += 1;
                let r = v1.await_proof(AwaitProofRequest { job_id: porep_id.clone(), timeout_ms: 0 }).await.unwrap();
                let r = r.into_inner();
                assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
                assert!(verify(&f, f.sector_id, &r.proof));
            }
            let ids = clients.await;
            accepted += ids.len();
            // Retried after its proof: the same job; reused with other inputs: refused.
            assert_eq!(v1.submit_proof(porep(&f.c1_json)).await.unwrap().into_inner().job_id, porep_id);
            let e = v1.submit_proof(porep(&f.wrapper_json)).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
            // Every job: one terminal result, the same when asked again.
            let mut cancelled = 0;
            for id in &ids {
                let ask = AwaitProofRequest { job_id: id.clone(), timeout_ms: 0 };
                let a = v1.await_proof(ask.clone()).await.unwrap().into_inner();
                let b = v1.await_proof(ask).await.unwrap().into_inner();
                assert_eq!(a, b, "{id}");
                match JobStatus::try_from(a.status) {
                    Ok(JobStatus::Completed) => assert_eq!(a.proof.len(), 192, "{id}"),
                    Ok(JobStatus::Cancelled) => cancelled += 1,
                    s => panic!("round {round} {id}: {s:?} {}", a.error_message),
                }
            }
            assert!(cancelled <= 3, "only the three cancelled jobs may end cancelled");
            if round == 2 {
                rss_after_2 = rss();
            }
            if round == 3 && small_fs.is_some() {
                // Every result of round 3 met the full disk; with room again, round 4's are stored.
                let store = settled(&url, accepted).await;
                assert!(!store.healthy, "{store:?}");
                failures = ids.len();
                assert_eq!(store.write_failures_total as usize, failures, "{store:?}");
                std::fs::remove_file(dir.join("filler")).unwrap();
            }
        }
        let store = settled(&url, accepted).await;
        assert_eq!(store.write_failures_total as usize, failures, "{store:?}");
        assert_eq!(store.stored_total as usize, accepted - failures, "{store:?}");
        assert!(store.healthy, "{store:?}");
        drop(idle);
    });
    let end_rss = rss();
    eprintln!("daemon soak RSS: {} MiB after round 2, {} MiB after round {ROUNDS}", rss_after_2 >> 20, end_rss >> 20);
    assert!(end_rss <= rss_after_2 + (32 << 20), "RSS grew: {} → {} MiB", rss_after_2 >> 20, end_rss >> 20);
    let e = d.engine();
    let jobs = e.snapshot_blocking().jobs;
    assert_eq!(jobs.in_flight, 0, "{jobs:?}");
    assert_eq!(jobs.submitted as usize, accepted, "{jobs:?}");
    assert_eq!(jobs.submitted, jobs.succeeded + jobs.failed + jobs.cancelled, "{jobs:?}");
    assert_eq!(jobs.failed, 1, "only the job whose device call hung fails: {jobs:?}");
    assert_eq!(e.snapshot_blocking().devices[0].health, DeviceHealth::Retired);
    let prove = e.stage_snapshots().into_iter().find(|s| s.stage == StageName::ProveGpu).unwrap();
    assert_eq!(prove.abandoned, 1);
    // The stuck call still holds its partition's memory; once it returns, only the
    // kept parameters (synthetic, and the PoRep file in the parameter cache) and
    // the PoRep circuit's recording are.
    let params: u64 = e.params().resident().iter().map(|r| r.1).sum::<u64>() + e.recordings().bytes();
    assert!(e.host_budget().used > kept + params, "{:?}", e.host_budget());
    backend.release();
    let t = Instant::now();
    while e.host_budget().used != kept + params || e.stage_snapshots().iter().any(|s| s.queue_len + s.in_flight > 0) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "reservations leaked: {:?}, kept parameters and recordings {kept} + {params}",
            e.host_budget()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    d.shutdown();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".json"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    drop(small_fs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tmpfs of `bytes` mounted on a directory, unmounted when dropped; `None` where
/// this process may not mount.
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(dir: &std::path::Path, bytes: u64) -> Option<SmallFs> {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "cuzk-soak"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status();
        status.is_ok_and(|s| s.success()).then(|| SmallFs(dir.to_path_buf()))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes `path` until its filesystem has no room left (ENOSPC).
fn fill(path: &std::path::Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    loop {
        if let Err(e) = f.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(28), "ENOSPC expected: {e}");
            return;
        }
    }
}

/// The results store once every accepted job's result write has been tried.
async fn settled(url: &str, accepted: usize) -> cuzk::daemon::proto::ResultsStore {
    use cuzk::daemon::proto::GetStatusRequest;
    let mut v1 = cuzk::client::v1(cuzk::client::connect(url).await.unwrap());
    let t = Instant::now();
    loop {
        let s = v1.get_status(GetStatusRequest {}).await.unwrap().into_inner().results_store.unwrap();
        if (s.stored_total + s.write_failures_total) as usize >= accepted {
            return s;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "results not written: {s:?}, {accepted} accepted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn synth(seed: u64) -> SubmitSyntheticRequest {
    SubmitSyntheticRequest { log2: 8, public_inputs: 1, seed, ..Default::default() }
}

/// Six clients, five synthetic jobs each over fresh connections: each drops its
/// second job's AwaitProof and the even ones cancel their fourth job. Resolves to
/// the ids accepted.
fn client_round(url: &str, round: u64) -> impl std::future::Future<Output = Vec<String>> {
    use cuzk::daemon::proto::CancelProofRequest;
    let clients: Vec<_> = (0..6u64)
        .map(|c| {
            let url = url.to_string();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                for j in 0..5u64 {
                    let ch = cuzk::client::connect(&url).await.unwrap();
                    let (mut v1, mut ext) = (cuzk::client::v1(ch.clone()), cuzk::client::ext(ch));
                    let id = ext.submit_synthetic(synth(round * 1000 + c * 100 + j)).await.unwrap().into_inner().job_id;
                    match j {
                        1 => {
                            let pending = v1.await_proof(AwaitProofRequest { job_id: id.clone(), timeout_ms: 0 });
                            let _ = tokio::time::timeout(Duration::from_millis(5), pending).await;
                        }
                        3 if c % 2 == 0 => {
                            v1.cancel_proof(CancelProofRequest { job_id: id.clone() }).await.unwrap();
                        }
                        _ => {}
                    }
                    mine.push(id);
                }
                mine
            })
        })
        .collect();
    async move {
        let mut ids = Vec::new();
        for c in clients {
            ids.extend(c.await.unwrap());
        }
        ids
    }
}

/// `n` TCP connections that connect and send nothing.
async fn idle_connections(addr: std::net::SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    v
}

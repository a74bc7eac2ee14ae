//! Soak: hundreds of jobs of mixed sizes with random faults (panics and errors in
//! every stage, slow stages cancelled mid-flight, malformed C1 inputs, unsatisfied
//! circuits) through one engine, then a daemon whose clients drop their AwaitProof
//! calls. Every job ends in exactly one terminal state, no reservation or tracker
//! entry leaks, a valid job still proves afterwards, and RSS is flat across the
//! second half. `CUZK_SOAK_JOBS` scales it (default 240; the GPU host runs more).

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

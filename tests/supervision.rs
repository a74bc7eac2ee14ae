//! A panic (or error) in any stage fails only that job, with an error naming the
//! stage; the stage actor is restarted; other jobs finish; no memory leaks.
//! Every job ends in exactly one terminal state.

mod common;

use common::*;
use cuzk::{
    actors::{Fault, FaultKind, StageError},
    Engine, JobError, JobSpec, StageName, SyntheticCircuit,
};

fn job(srs: &std::sync::Arc<cuzk::ProvingKey>, spec: cuzk::SyntheticSpec, seed: u64) -> JobSpec {
    JobSpec::circuits(srs.clone(), (0..2).map(|i| SyntheticCircuit::new(spec, seed + i).unwrap()).collect())
}

#[test]
fn panic_in_each_stage_fails_only_its_job() {
    let mut cfg = small_config();
    cfg.verify.enabled = true;
    let engine = Engine::start(cfg).unwrap();
    let spec = spec(256, 2, 1.0, 0.5);
    let srs = params(spec);
    for (n, stage) in StageName::ALL.into_iter().enumerate() {
        for kind in [FaultKind::Panic, FaultKind::Error] {
            let seed = 10 * n as u64;
            let before = job(&srs, spec, seed);
            // Ingest sees the whole job as partition 0; later stages see partitions 0 and 1.
            let partition = Some(if stage == StageName::Ingest { 0 } else { 1 });
            let faulty = job(&srs, spec, seed + 2).with_fault(Fault { stage, partition, kind });
            let after = job(&srs, spec, seed + 4);
            let (h1, h2, h3) = (
                engine.submit_blocking(before).unwrap(),
                engine.submit_blocking(faulty).unwrap(),
                engine.submit_blocking(after).unwrap(),
            );
            let err = h2.wait_blocking().unwrap_err();
            match (&err, kind) {
                (JobError::Stage { stage: s, error: StageError::Panicked(m), .. }, FaultKind::Panic) => {
                    assert_eq!(*s, stage);
                    assert!(m.contains("fault injected"), "{m}");
                }
                (JobError::Stage { stage: s, error: StageError::Failed(_), .. }, FaultKind::Error) => {
                    assert_eq!(*s, stage)
                }
                (e, _) => panic!("{stage} {kind:?}: unexpected {e:?}"),
            }
            assert!(err.to_string().contains(&format!("stage {stage}")), "{err}");
            for h in [h1, h3] {
                let out = h.wait_blocking().unwrap_or_else(|e| panic!("{stage}: innocent job failed: {e}"));
                assert_eq!(out.proofs.len(), 2);
            }
        }
        let snap = engine.stage_snapshots().into_iter().find(|s| s.stage == stage).unwrap();
        assert_eq!(snap.panics, 1, "{stage}");
        // The restart happens after the failed job is reported; give it a moment.
        let t = std::time::Instant::now();
        while engine.stage_snapshots().into_iter().find(|s| s.stage == stage).unwrap().restarts == 0 {
            assert!(t.elapsed().as_secs() < 10, "{stage} actor was never restarted");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let snap = engine.snapshot_blocking();
    let total = snap.jobs.submitted;
    assert_eq!(snap.jobs.succeeded + snap.jobs.failed + snap.jobs.cancelled, total, "{:?}", snap.jobs);
    assert_eq!(snap.jobs.failed, 2 * StageName::ALL.len() as u64);
    assert_eq!(snap.jobs.in_flight, 0);
    // The engine still proves after all that.
    let out = engine.submit_blocking(job(&srs, spec, 999)).unwrap().wait_blocking().unwrap();
    assert_eq!(out.proofs.len(), 2);
    let t = std::time::Instant::now();
    while engine.host_budget().used != 0 {
        assert!(t.elapsed().as_secs() < 10, "reservations leaked: {:?}", engine.host_budget());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    engine.shutdown();
}

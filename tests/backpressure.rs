//! A slow downstream stage stops upstream intake: with 120 jobs submitted against a
//! ProveGpu stage slowed down on purpose, every stage's queue and in-flight count
//! stay within their bounds, the intake refuses work (`try_submit` → Busy), and
//! every job still completes with a verifying proof.

mod common;

use std::{
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use common::*;
use cuzk::{
    actors::{Fault, FaultKind},
    Engine, JobSpec, StageName, SubmitError, SyntheticCircuit,
};

#[test]
fn slow_downstream_stops_intake() {
    let mut cfg = small_config();
    cfg.ingest.queue_capacity = 2;
    cfg.ingest.mailbox_capacity = 1;
    cfg.synthesize.queue_capacity = 2;
    cfg.synthesize.max_concurrency = 2;
    cfg.prepare_msm.queue_capacity = 1;
    cfg.stage_pcie.queue_capacity = 1;
    cfg.prove_gpu.queue_capacity = 1;
    let engine = Engine::start(cfg.clone()).unwrap();
    let spec = spec(64, 1, 1.0, 1.0);
    let srs = params(spec);
    const JOBS: usize = 120;
    let slow = Fault { stage: StageName::ProveGpu, partition: None, kind: FaultKind::Delay(Duration::from_millis(15)) };

    let accepted = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicBool::new(false));

    // Sampler: bounds hold at every moment.
    let sampler = {
        let (engine, finished) = (engine.clone(), finished.clone());
        std::thread::spawn(move || {
            let mut max_outstanding = 0;
            let mut samples = 0;
            while !finished.load(Ordering::SeqCst) {
                for s in engine.stage_snapshots() {
                    assert!(
                        s.queue_len <= s.queue_capacity as u64,
                        "{}: queue {} > {}",
                        s.stage,
                        s.queue_len,
                        s.queue_capacity
                    );
                    assert!(s.in_flight <= s.workers as u64, "{}: in flight {} > {}", s.stage, s.in_flight, s.workers);
                }
                // Jobs registered and not finished (includes the one a blocked submit holds).
                let outstanding = engine.snapshot_blocking().jobs.in_flight as usize;
                max_outstanding = max_outstanding.max(outstanding);
                samples += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (max_outstanding, samples)
        })
    };

    // Submitter: blocking submits; each returns only once the intake accepted the job.
    let submitter = {
        let (engine, srs, accepted) = (engine.clone(), srs.clone(), accepted.clone());
        std::thread::spawn(move || {
            (0..JOBS)
                .map(|i| {
                    let c = SyntheticCircuit::new(spec, i as u64).unwrap();
                    let inputs = c.public_inputs();
                    let h = engine
                        .submit_blocking(JobSpec::circuits(srs.clone(), vec![c]).with_seed(i as u64).with_fault(slow))
                        .unwrap();
                    accepted.fetch_add(1, Ordering::SeqCst);
                    (h, inputs)
                })
                .collect::<Vec<_>>()
        })
    };

    // While the pipeline is saturated, a non-blocking submit is refused.
    std::thread::sleep(Duration::from_millis(300));
    let mut busy = false;
    for _ in 0..50 {
        match engine.try_submit(JobSpec::circuits(srs.clone(), vec![SyntheticCircuit::new(spec, 0).unwrap()])) {
            Err(SubmitError::Busy) => {
                busy = true;
                break;
            }
            Ok(h) => {
                h.canceller().cancel_blocking();
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(busy, "intake never reported Busy while downstream was slow");
    assert!(
        accepted.load(Ordering::SeqCst) < JOBS / 2,
        "intake did not stop: {} accepted",
        accepted.load(Ordering::SeqCst)
    );

    let handles = submitter.join().unwrap();
    for (h, inputs) in handles {
        let out = h.wait_blocking().unwrap();
        assert!(verifies(&srs, &out.proofs[0], &inputs));
    }
    finished.store(true, Ordering::SeqCst);
    let (max_outstanding, samples) = sampler.join().unwrap();
    assert!(samples > 10);

    // Everything that can hold a job between submit and completion, summed: per
    // stage its queue, one item the actor holds while waiting for room, its mailbox
    // (plus one parked message per sender: the upstream workers), and its workers.
    let snaps = engine.stage_snapshots();
    let get = |name: StageName| snaps.iter().find(|s| s.stage == name).unwrap();
    let mailbox = |name: StageName| match name {
        StageName::Ingest => cfg.ingest.mailbox_capacity,
        StageName::Synthesize => cfg.synthesize.mailbox_capacity,
        StageName::PrepareMsm => cfg.prepare_msm.mailbox_capacity,
        StageName::StagePcie => cfg.stage_pcie.mailbox_capacity,
        StageName::ProveGpu => cfg.prove_gpu.mailbox_capacity,
        StageName::Assemble => cfg.assemble.mailbox_capacity,
        StageName::Verify => cfg.verify.mailbox_capacity,
    };
    let order = [
        StageName::Ingest,
        StageName::Synthesize,
        StageName::PrepareMsm,
        StageName::StagePcie,
        StageName::ProveGpu,
        StageName::Assemble,
    ];
    // (queue, mailbox, workers, upstream senders) per stage.
    let limits: Vec<_> = order
        .iter()
        .enumerate()
        .map(|(i, &st)| {
            let senders = if i == 0 { 1 } else { get(order[i - 1]).workers };
            (get(st).queue_capacity, mailbox(st), get(st).workers, senders)
        })
        .collect();
    let bound: usize = limits.iter().map(|(q, mb, w, senders)| q + 1 + mb + senders + w).sum::<usize>() + 1;
    assert!(max_outstanding <= bound, "{max_outstanding} jobs inside the pipeline, bound {bound}");
    let snap = engine.snapshot_blocking();
    assert_eq!(snap.jobs.succeeded as usize, JOBS);
    engine.shutdown();
}

//! Host-memory budget: accounted usage never exceeds the budget; synthesis
//! concurrency is what the budget admits; an oversized partition fails at once.

mod common;

use std::time::{Duration, Instant};

use common::*;
use cuzk::{
    actors::{synthesize::partition_bytes, ByteSize, MemoryLimit},
    Engine, JobError, JobSpec, StageName, SyntheticCircuit,
};

#[test]
fn peak_never_exceeds_budget_over_64_jobs() {
    let spec = spec(512, 2, 1.0, 1.0);
    let srs = params(spec);
    let per = partition_bytes(&srs, true);
    let mut cfg = small_config();
    cfg.synthesize.max_concurrency = 32;
    cfg.synthesize.queue_capacity = 8;
    // Room for three partitions at a time, not four.
    let budget = per * 3 + per / 2;
    cfg.budget.host_memory = MemoryLimit::Bytes(ByteSize(budget));
    let engine = Engine::start(cfg).unwrap();

    let submitter = {
        let (engine, srs) = (engine.clone(), srs.clone());
        std::thread::spawn(move || {
            (0..64u64)
                .map(|i| {
                    let c = SyntheticCircuit::new(spec, i).unwrap();
                    let inputs = c.public_inputs();
                    (engine.submit_blocking(JobSpec::circuits(srs.clone(), vec![c]).with_seed(i)).unwrap(), inputs)
                })
                .collect::<Vec<_>>()
        })
    };
    for (h, inputs) in submitter.join().unwrap() {
        let out = h.wait_blocking().unwrap();
        assert!(verifies(&srs, &out.proofs[0], &inputs));
    }
    let b = engine.host_budget();
    assert!(b.peak <= budget, "peak {} > budget {budget}", b.peak);
    assert!(b.peak > 2 * per, "budget never admitted concurrency: peak {}", b.peak);
    assert!(b.waits > 0, "the budget never made synthesis wait");
    assert_eq!(b.used, 0, "reservations leaked");
    let synth = engine.stage_snapshots().into_iter().find(|s| s.stage == StageName::Synthesize).unwrap();
    assert_eq!(synth.workers, 32);
    assert!(synth.in_flight_peak <= 3, "synthesis ran {} at once; the budget admits 3", synth.in_flight_peak);
    engine.shutdown();
}

#[test]
fn oversized_partition_fails_at_once_and_others_finish() {
    let big = spec(1 << 12, 1, 1.0, 1.0);
    let small = spec(64, 1, 1.0, 1.0);
    let (big_srs, small_srs) = (params(big), params(small));
    let mut cfg = small_config();
    let budget = partition_bytes(&big_srs, true) / 2;
    assert!(budget > partition_bytes(&small_srs, true) * 2);
    cfg.budget.host_memory = MemoryLimit::Bytes(ByteSize(budget));
    let engine = Engine::start(cfg).unwrap();

    let ok1 = engine
        .submit_blocking(JobSpec::circuits(small_srs.clone(), vec![SyntheticCircuit::new(small, 1).unwrap()]))
        .unwrap();
    let t = Instant::now();
    let bad = engine.submit_blocking(JobSpec::circuits(big_srs, vec![SyntheticCircuit::new(big, 1).unwrap()])).unwrap();
    let ok2 =
        engine.submit_blocking(JobSpec::circuits(small_srs, vec![SyntheticCircuit::new(small, 2).unwrap()])).unwrap();
    let err = bad.wait_blocking().unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(20), "oversized job did not fail at once");
    match &err {
        JobError::Stage { stage: StageName::Synthesize, .. } => {}
        e => panic!("wrong error {e:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("whole host budget"), "{msg}");
    ok1.wait_blocking().unwrap();
    ok2.wait_blocking().unwrap();
    assert_eq!(engine.host_budget().used, 0);
    engine.shutdown();
}

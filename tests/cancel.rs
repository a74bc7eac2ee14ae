//! Cancellation of queued and in-flight jobs: the result is `Cancelled`, the
//! reservations come back, other jobs finish.

mod common;

use std::time::{Duration, Instant};

use common::*;
use cuzk::{
    actors::{Fault, FaultKind},
    Engine, JobError, JobSpec, StageName, SyntheticCircuit,
};

fn wait_budget_free(engine: &Engine) {
    let t = Instant::now();
    while engine.host_budget().used != 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "reservations not returned: {:?}", engine.host_budget());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cancel_in_flight_and_queued() {
    let engine = Engine::start(small_config()).unwrap();
    let spec = spec(256, 1, 1.0, 1.0);
    let srs = params(spec);
    let slow =
        Fault { stage: StageName::ProveGpu, partition: None, kind: FaultKind::Delay(Duration::from_millis(300)) };
    let circuits =
        |seed: u64, n: u64| (0..n).map(|i| SyntheticCircuit::new(spec, seed + i).unwrap()).collect::<Vec<_>>();

    // In flight: 4 partitions, each slow in ProveGpu; cancel once synthesis reserved memory.
    let inflight = engine.submit_blocking(JobSpec::circuits(srs.clone(), circuits(0, 4)).with_fault(slow)).unwrap();
    // Queued behind it.
    let queued = engine.submit_blocking(JobSpec::circuits(srs.clone(), circuits(10, 4)).with_fault(slow)).unwrap();
    let innocent = engine.submit_blocking(JobSpec::circuits(srs.clone(), circuits(20, 2))).unwrap();
    let t = Instant::now();
    while engine.host_budget().used == 0 {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(5));
    }
    let (c1, c2) = (inflight.canceller(), queued.canceller());
    c2.cancel_blocking();
    c1.cancel_blocking();
    assert!(matches!(inflight.wait_blocking(), Err(JobError::Cancelled)));
    assert!(matches!(queued.wait_blocking(), Err(JobError::Cancelled)));
    assert_eq!(innocent.wait_blocking().unwrap().proofs.len(), 2);
    wait_budget_free(&engine);
    // Cancelling a finished job changes nothing.
    let done = engine.submit_blocking(JobSpec::circuits(srs.clone(), circuits(30, 1))).unwrap();
    let c = done.canceller();
    done.wait_blocking().unwrap();
    c.cancel_blocking();
    let snap = engine.snapshot_blocking();
    assert_eq!((snap.jobs.cancelled, snap.jobs.succeeded, snap.jobs.in_flight), (2, 2, 0));
    engine.shutdown();
}

#[test]
fn shutdown_ends_every_job() {
    let engine = Engine::start(small_config()).unwrap();
    let spec = spec(256, 1, 1.0, 1.0);
    let srs = params(spec);
    let slow =
        Fault { stage: StageName::Synthesize, partition: None, kind: FaultKind::Delay(Duration::from_millis(200)) };
    let handles: Vec<_> = (0..4)
        .map(|i| {
            engine
                .submit_blocking(
                    JobSpec::circuits(srs.clone(), vec![SyntheticCircuit::new(spec, i).unwrap()]).with_fault(slow),
                )
                .unwrap()
        })
        .collect();
    engine.shutdown();
    for h in handles {
        // Each job has exactly one terminal result: a proof if it made it, else Shutdown.
        match h.wait_blocking() {
            Ok(o) => assert_eq!(o.proofs.len(), 1),
            Err(JobError::Shutdown) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(matches!(
        engine.submit_blocking(JobSpec::circuits(srs, vec![SyntheticCircuit::new(spec, 9).unwrap()])),
        Err(cuzk::SubmitError::NotRunning)
    ));
}

/// A `submit` future polled once and dropped after the tracker has handled its
/// Register but before the answer was awaited (a caller cancelled at that instant)
/// withdraws the job: nothing stays counted in flight.
#[test]
fn submit_dropped_while_registering_leaks_nothing() {
    let engine = Engine::start(small_config()).unwrap();
    let spec = spec(64, 1, 1.0, 1.0);
    let srs = params(spec);
    use std::future::Future;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut pending = 0;
    for seed in 0..20 {
        let job = JobSpec::circuits(srs.clone(), vec![SyntheticCircuit::new(spec, seed).unwrap()]);
        let mut fut = Box::pin(engine.submit(job));
        if fut.as_mut().poll(&mut cx).is_pending() {
            pending += 1;
        }
        // The tracker handles Register meanwhile (the future is alive, so actix
        // delivers it); only then is the future dropped.
        std::thread::sleep(Duration::from_millis(20));
        drop(fut);
    }
    assert!(pending > 0, "every submit finished on its first poll: nothing was tested");
    let t = Instant::now();
    loop {
        let jobs = engine.snapshot_blocking().jobs;
        if jobs.in_flight == 0 && jobs.submitted > 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "dropped submits left jobs in flight: {jobs:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    engine.shutdown();
}

/// A caller that gives up on `submit` while backpressure holds it (a timeout, a gRPC
/// client that disconnects) withdraws the job: nothing stays counted in flight, and
/// the engine still proves afterwards.
#[test]
fn submit_dropped_under_backpressure_leaks_nothing() {
    let mut cfg = small_config();
    cfg.ingest.queue_capacity = 1;
    cfg.ingest.mailbox_capacity = 1;
    cfg.synthesize.queue_capacity = 1;
    cfg.synthesize.max_concurrency = 1;
    let engine = Engine::start(cfg).unwrap();
    let spec = spec(64, 1, 1.0, 1.0);
    let srs = params(spec);
    let slow =
        Fault { stage: StageName::Synthesize, partition: None, kind: FaultKind::Delay(Duration::from_millis(1500)) };
    let job = |seed: u64| JobSpec::circuits(srs.clone(), vec![SyntheticCircuit::new(spec, seed).unwrap()]);
    // Fill the intake until it has refused for a while (stages pull from it meanwhile).
    let mut blockers = Vec::new();
    let mut refused = 0;
    while refused < 5 && blockers.len() < 50 {
        match engine.try_submit(job(blockers.len() as u64).with_fault(slow)) {
            Ok(h) => blockers.push(h),
            Err(_) => {
                refused += 1;
                std::thread::sleep(Duration::from_millis(40));
            }
        }
    }
    assert!(blockers.len() < 50, "the intake never filled");
    // Several callers block in submit and give up.
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let gave_up = rt.block_on(async {
        let tries: Vec<_> = (0..4)
            .map(|i| {
                let (engine, spec) = (engine.clone(), job(100 + i));
                tokio::spawn(async move {
                    tokio::time::timeout(Duration::from_millis(100), engine.submit(spec)).await.is_err()
                })
            })
            .collect();
        let mut n = 0;
        for t in tries {
            n += usize::from(t.await.unwrap());
        }
        n
    });
    assert!(gave_up > 0, "no submit was held by backpressure");
    for h in blockers {
        h.canceller().cancel_blocking();
        let _ = h.wait_blocking();
    }
    let t = Instant::now();
    loop {
        let jobs = engine.snapshot_blocking().jobs;
        if jobs.in_flight == 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "abandoned submits left jobs in flight: {jobs:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let proof = engine.submit_blocking(job(1000)).unwrap().wait_blocking().unwrap();
    assert_eq!(proof.proofs.len(), 1);
    wait_budget_free(&engine);
    engine.shutdown();
}

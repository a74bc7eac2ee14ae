//! A device call that never returns: the device watchdog finds it, the backend
//! retires the device, the stage gives the partition up (its job fails naming the
//! hung device) and goes on, later jobs prove on what is left, and shutdown returns
//! although the stuck thread never does. The stuck partition's memory stays
//! reserved while its thread holds it, and comes back if the call ever returns.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bellperson::groth16::{prepare_verifying_key, verify_proof};
use cuzk_actors::{services::SelectedBackend, Config, Engine, JobSpec, StageName};
use cuzk_gpu::{fake::HangingBackend, DeviceHealth};
use cuzk_synth::{SyntheticCircuit, SyntheticSpec};
use rand::SeedableRng;

/// Polls `f` until it holds (a generous bound turns a hang into a failure).
fn eventually(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(120), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_hung_device_call_fails_its_partition_and_the_engine_goes_on() {
    let spec = SyntheticSpec { constraints: 400, public_inputs: 2, a_density: 0.7, b_density: 0.3 };
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
    let srs = Arc::new(cuzk_srs::generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap());

    // The first execution hangs; the device is found hung after 200 ms.
    let backend = HangingBackend::new(Duration::from_millis(200), 0);
    let selected = SelectedBackend { backend: backend.clone(), devices: 1, on_device: true, pinned_bytes: 0 };
    let engine = Engine::start_with_backend(Config::default(), selected).unwrap();
    let circuits = |seed: u64| (0..2).map(|i| SyntheticCircuit::new(spec, seed + i).unwrap()).collect::<Vec<_>>();

    // The first job's first execution hangs: the job fails, naming the stage and
    // the hung device, instead of waiting forever.
    let first = engine.submit_blocking(JobSpec::circuits(srs.clone(), circuits(10))).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || drop(tx.send(first.wait_blocking())));
    let err =
        rx.recv_timeout(Duration::from_secs(120)).expect("the job never ended: the stuck call held it").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("device 0 hung") && msg.contains("device_timeout_secs"), "{msg}");
    assert!(msg.contains("prove_gpu") || msg.contains("ProveGpu"), "the stage is named: {msg}");
    let prove = |e: &Engine| e.stage_snapshots().into_iter().find(|s| s.stage == StageName::ProveGpu).unwrap();
    assert_eq!(prove(&engine).abandoned, 1);
    let snap = engine.snapshot_blocking();
    assert_eq!(snap.devices[0].health, DeviceHealth::Retired);
    assert!(snap.devices[0].retired_reason.as_deref().unwrap().contains("hung"));
    assert!(cuzk_gpu::no_device_left(&snap.devices));

    // Later jobs prove (on the "CPU") and verify; nothing waits on the stuck thread.
    let pvk = prepare_verifying_key(&srs.vk);
    for seed in [20, 30] {
        let out =
            engine.submit_blocking(JobSpec::circuits(srs.clone(), circuits(seed))).unwrap().wait_blocking().unwrap();
        for (i, c) in circuits(seed).into_iter().enumerate() {
            assert!(verify_proof(&pvk, &out.proofs[i], &c.public_inputs()).unwrap(), "job {seed} partition {i}");
        }
    }
    let jobs = engine.snapshot_blocking().jobs;
    assert_eq!((jobs.in_flight, jobs.failed, jobs.succeeded), (0, 1, 2));
    assert_eq!(prove(&engine).abandoned, 1, "one partition given up, no more");

    // The stuck partition still holds its memory; shutdown does not wait for it.
    let held = engine.host_budget().used;
    assert!(held > 0, "the stuck partition's reservation is kept while its thread holds it");
    engine.shutdown();

    // If the call ever returns, its result is dropped and the memory comes back.
    backend.release();
    eventually("the stuck partition's reservation returned", || engine.host_budget().used == 0);
}

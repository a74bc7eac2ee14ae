//! On a GPU host: the CUDA backend's proofs are byte-identical to the CPU backend's
//! and to bellperson's prover for the same r, s, and verify. Sizes: synthetic
//! circuits 2^10..2^16 with real parameters (always) plus `CUZK_GPU_TEST_BIG_LOG2`
//! (e.g. "20,22"); and a 2KiB PoRep C1, whose GPU proof must equal the CPU backend's
//! and pass filecoin-proofs' `verify_seal`. Skips cleanly where there is no GPU.

mod common;

// The kernel-level CPU/CUDA equivalence test of cuzk-gpu, compiled into this binary
// too so that one test binary carries every GPU check to the GPU host.
#[path = "../gpu/tests/cuda_vs_cpu.rs"]
mod kernels;

use common::*;
use cuzk::{actors::config::BackendKind, prove_circuits, Engine, JobSpec, SyntheticCircuit};

/// The engine on the GPU backend. The tests here are ignored by default (they need a
/// GPU) and fail, naming the reason, when run on a host without one.
fn gpu_engine() -> Option<Engine> {
    let mut cfg = small_config();
    cfg.backend.kind = BackendKind::Gpu;
    Some(Engine::start(cfg).unwrap_or_else(|e| panic!("no usable GPU: {e}")))
}

fn cpu_engine() -> Engine {
    let mut cfg = small_config();
    cfg.backend.kind = BackendKind::Cpu;
    Engine::start(cfg).unwrap()
}

/// Jobs of three small partitions each, by seed, and the check of a GPU job's
/// proofs: the CPU backend's bytes, and they verify.
struct Stream {
    spec: cuzk::SyntheticSpec,
    srs: std::sync::Arc<cuzk::ProvingKey>,
}

impl Stream {
    fn new() -> Self {
        let spec = spec(1 << 12, 2, 1.0, 0.5);
        Stream { spec, srs: params(spec) }
    }

    fn circuits(&self, seed: u64) -> Vec<SyntheticCircuit> {
        (0..3).map(|i| SyntheticCircuit::new(self.spec, seed + i).unwrap()).collect()
    }

    fn job(&self, seed: u64) -> JobSpec {
        JobSpec::circuits(self.srs.clone(), self.circuits(seed)).with_randomness(randomness(3, seed))
    }

    fn check(&self, cpu: &Engine, seed: u64, out: cuzk::JobOutput) {
        let want = prove_circuits(cpu, self.srs.clone(), self.circuits(seed), Some(randomness(3, seed))).unwrap();
        for (i, c) in self.circuits(seed).into_iter().enumerate() {
            assert_eq!(bytes(&out.proofs[i]), bytes(&want.proofs[i]), "job {seed} partition {i}: GPU vs CPU backend");
            assert!(verifies(&self.srs, &out.proofs[i], &c.public_inputs()), "job {seed} partition {i}");
        }
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn gpu_proofs_match_cpu_and_bellperson() {
    let Some(gpu) = gpu_engine() else { return };
    assert_eq!(gpu.backend(), "cuda");
    let cpu = cpu_engine();
    let mut cases = vec![
        (1 << 10, 2, 1.0, 1.0),
        (1000, 0, 1.0, 1.0),
        (3001, 1, 0.1, 0.05),
        (1 << 12, 40, 0.5, 0.0),
        (700, 300, 0.0, 1.0),
        ((1 << 14) + 5, 3, 1.0, 1.0),
        ((1 << 16) - 7, 2, 0.3, 0.6),
    ];
    if let Ok(big) = std::env::var("CUZK_GPU_TEST_BIG_LOG2") {
        for k in big.split(',').filter(|s| !s.is_empty()) {
            cases.push((1usize << k.trim().parse::<u32>().unwrap(), 2, 1.0, 1.0));
        }
    }
    for (n, p, a, b) in cases {
        let spec = spec(n, p, a, b);
        let t = std::time::Instant::now();
        let srs = params(spec);
        let gen = t.elapsed();
        let circuits: Vec<_> = (0..2).map(|i| SyntheticCircuit::new(spec, 50 + i).unwrap()).collect();
        let rs = randomness(2, n as u64);
        let t = std::time::Instant::now();
        let g = prove_circuits(&gpu, srs.clone(), circuits.clone(), Some(rs.clone())).unwrap();
        let gpu_time = t.elapsed();
        let c = prove_circuits(&cpu, srs.clone(), circuits.clone(), Some(rs.clone())).unwrap();
        for (i, circuit) in circuits.into_iter().enumerate() {
            let public = circuit.public_inputs();
            assert_eq!(bytes(&g.proofs[i]), bytes(&c.proofs[i]), "{spec:?} partition {i}: GPU vs CPU backend");
            if n <= 1 << 16 {
                let want = reference(circuit, &srs, rs[i].0, rs[i].1);
                assert_eq!(bytes(&g.proofs[i]), bytes(&want), "{spec:?} partition {i}: GPU vs bellperson");
            }
            assert!(verifies(&srs, &g.proofs[i], &public), "{spec:?} partition {i}");
        }
        eprintln!("ok {spec:?}: params {gen:?}, 2 GPU proofs {gpu_time:?}, ops {:?}", g.timings.ops);
    }
    gpu.shutdown();
    cpu.shutdown();
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn gpu_porep_2kib_matches_cpu_and_verifies() {
    // Probe first: without a GPU this test must not spend a minute generating params.
    let Some(probe) = gpu_engine() else { return };
    probe.shutdown();
    let dir = common::porep::param_cache();
    let f = common::porep::fixture(21);
    let start = |kind, bit_split, abc_on_device| {
        let mut cfg = small_config();
        cfg.backend.kind = kind;
        cfg.backend.abc_on_device = abc_on_device;
        cfg.prepare_msm.bit_split = bit_split;
        cfg.ingest.param_cache = dir.clone();
        Engine::start(cfg).unwrap()
    };
    let (gpu, split, cpu) = (
        start(BackendKind::Gpu, false, false),
        start(BackendKind::Gpu, true, false),
        start(BackendKind::Cpu, false, false),
    );
    let job = || JobSpec::porep_c1(f.wrapper_json.clone(), f.prover_id, f.sector_id).with_seed(5);
    let t = std::time::Instant::now();
    let g = gpu.submit_blocking(job()).unwrap().wait_blocking().unwrap().proof_bytes();
    let gpu_time = t.elapsed();
    let out = split.submit_blocking(job()).unwrap().wait_blocking().unwrap();
    assert!(out.timings.ops.iter().any(|(n, _)| *n == "bit_split"), "the PoRep witness takes the bit split");
    let s = out.proof_bytes();
    // The engine's second proof uses the recorded circuit: a, b, c are written
    // straight into pinned memory lent by the backend.
    let again = split.submit_blocking(job()).unwrap().wait_blocking().unwrap();
    assert!(
        again.timings.ops.iter().any(|(n, _)| *n == "synth_native"),
        "second proof is pre-compiled, its witness native"
    );
    assert!(split.pinned().unwrap().lent >= 1, "a/b/c lent from the pinned pool: {:?}", split.pinned());
    assert_eq!(again.proof_bytes(), s, "pre-compiled into pinned memory: same proof bytes");
    let c = cpu.submit_blocking(job()).unwrap().wait_blocking().unwrap().proof_bytes();
    assert_eq!(g.len(), 192 * usize::from(common::porep::PROOF.partitions()));
    assert_eq!(g, c, "2KiB PoRep: GPU vs CPU backend proof bytes");
    assert_eq!(s, c, "2KiB PoRep: GPU with the bit split vs CPU backend (every scalar) proof bytes");
    assert!(common::porep::verify(&f, f.sector_id, &g), "verify_seal rejected the GPU proof");
    eprintln!("ok porep 2KiB: GPU job {gpu_time:?}");
    // a, b, c evaluated on the device from the recorded matrices (the default): the
    // second job's partition uploads no a, b, c; same bytes.
    let dev = start(BackendKind::Gpu, true, true);
    let first = dev.submit_blocking(job()).unwrap().wait_blocking().unwrap();
    let second = dev.submit_blocking(job()).unwrap().wait_blocking().unwrap();
    let ops: Vec<_> = second.timings.ops.iter().map(|(n, _)| *n).collect();
    assert!(ops.contains(&"abc_device"), "a, b, c evaluated on the device: {ops:?}");
    assert!(!ops.contains(&"abc_host"), "not on the host: {ops:?}");
    assert_eq!(first.proof_bytes(), c, "2KiB PoRep: recorded on the GPU engine vs CPU backend proof bytes");
    assert_eq!(second.proof_bytes(), c, "2KiB PoRep: a, b, c on the device vs CPU backend proof bytes");
    eprintln!("ok porep 2KiB: a, b, c on the device, ops {:?}", second.timings.ops);
    for e in [gpu, split, cpu, dev] {
        e.shutdown();
    }
}

/// Non-interactive PoRep on the GPU: 13 partitions proved on the device, aggregated,
/// accepted by `verify_seal` (byte identity with the CPU backend is the 2KiB test
/// above: the partitions are the same circuits).
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn gpu_ni_porep_2kib_aggregates_and_verifies() {
    let Some(gpu) = gpu_engine() else { return };
    gpu.shutdown();
    let proof = cuzk::filecoin::RegisteredSealProof::StackedDrg2KiBV1_2_Feat_NonInteractivePoRep;
    let dir = common::porep::param_cache();
    common::porep::ensure_ipp_srs(&dir);
    let f = common::porep::fixture_for(proof, 43);
    let mut cfg = small_config();
    cfg.backend.kind = BackendKind::Gpu;
    cfg.ingest.param_cache = dir;
    let gpu = Engine::start(cfg).unwrap();
    let t = std::time::Instant::now();
    let out = gpu
        .submit_blocking(JobSpec::porep_c1(f.wrapper_json.clone(), f.prover_id, f.sector_id).with_seed(6))
        .unwrap()
        .wait_blocking()
        .unwrap();
    let took = t.elapsed();
    assert_eq!(out.proofs.len(), 13);
    let bytes = out.proof_bytes();
    assert!(common::porep::verify(&f, f.sector_id, &bytes), "verify_seal rejected the GPU NI-PoRep proof");
    // The first partition records the circuit; the others leave a, b, c to the device.
    assert!(out.timings.ops.iter().any(|(n, _)| *n == "abc_device"), "a, b, c on the device: {:?}", out.timings.ops);
    eprintln!("ok NI-PoRep 2KiB on the GPU: 13 partitions + aggregation in {took:?}; {:?}", out.timings.ops);
    gpu.shutdown();
}

/// A device call that never returns (partition 1 of the second of three jobs;
/// simulated, `FaultKind::DeviceHang`, with `device_timeout_secs = 2`): the device
/// is found hung and retired, that job fails naming it, the others' proofs are the
/// CPU backend's and verify (on another device, or the CPU when it was the only
/// one), the stage counts one partition given up, and shutdown returns although the
/// stuck call has not.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn gpu_hung_device_is_retired_and_the_other_jobs_complete() {
    use cuzk::{
        actors::{Fault, FaultKind},
        gpu::DeviceHealth,
        StageName,
    };
    let mut cfg = small_config();
    cfg.backend.kind = BackendKind::Gpu;
    cfg.backend.device_timeout_secs = 2;
    let gpu = Engine::start(cfg).unwrap_or_else(|e| panic!("no usable GPU: {e}"));
    let cpu = cpu_engine();
    let stream = Stream::new();
    let (job, check) = (|seed| stream.job(seed), |seed, out| stream.check(&cpu, seed, out));
    check(100, gpu.submit_blocking(job(100)).unwrap().wait_blocking().unwrap());
    let fault = Fault { stage: StageName::ProveGpu, partition: Some(1), kind: FaultKind::DeviceHang };
    let hung = gpu.submit_blocking(job(200).with_fault(fault)).unwrap();
    let other = gpu.submit_blocking(job(300)).unwrap();
    let err = hung.wait_blocking().expect_err("the hung partition's job fails").to_string();
    assert!(err.contains("hung") && err.contains("device_timeout_secs"), "{err}");
    check(300, other.wait_blocking().unwrap_or_else(|e| panic!("job 300 failed: {e}")));
    let snap = gpu.snapshot_blocking();
    eprintln!("devices after the hang: {:?}", snap.devices);
    let retired: Vec<_> = snap.devices.iter().filter(|d| d.health == DeviceHealth::Retired).collect();
    assert_eq!(retired.len(), 1, "{:?}", snap.devices);
    assert!(retired[0].retired_reason.as_deref().unwrap_or_default().contains("hung"));
    let prove = snap.stages.iter().find(|s| s.stage == StageName::ProveGpu).unwrap();
    assert_eq!(prove.abandoned, 1);
    assert!(cuzk::metrics::render(&snap).contains("cuzk_stage_abandoned_total{stage=\"prove_gpu\"} 1"));
    check(400, gpu.submit_blocking(job(400)).unwrap().wait_blocking().unwrap());
    let t = std::time::Instant::now();
    gpu.shutdown();
    eprintln!("shutdown with a stuck call took {:?}", t.elapsed());
    cpu.shutdown();
}

/// A sticky CUDA error in the middle of a stream (partition 1 of the second of three
/// jobs; simulated, `FaultKind::DeviceError`): the device is retired, the partition
/// runs again elsewhere (another device, or the CPU when it was the only one), every
/// job's proofs are the CPU backend's and verify, the device's health shows in the
/// snapshot and the metrics, and a later job succeeds.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn gpu_sticky_error_retires_the_device_and_jobs_complete() {
    use cuzk::{
        actors::{Fault, FaultKind},
        gpu::{no_device_left, DeviceHealth},
        StageName,
    };
    let Some(gpu) = gpu_engine() else { return };
    let cpu = cpu_engine();
    let stream = Stream::new();
    let (job, check) = (|seed| stream.job(seed), |seed, out| stream.check(&cpu, seed, out));
    let fault = Fault { stage: StageName::ProveGpu, partition: Some(1), kind: FaultKind::DeviceError };
    let handles = [
        (100, gpu.submit_blocking(job(100)).unwrap()),
        (200, gpu.submit_blocking(job(200).with_fault(fault)).unwrap()),
        (300, gpu.submit_blocking(job(300)).unwrap()),
    ];
    for (seed, h) in handles {
        check(seed, h.wait_blocking().unwrap_or_else(|e| panic!("job {seed} failed: {e}")));
    }
    let snap = gpu.snapshot_blocking();
    eprintln!("devices after the fault: {:?}", snap.devices);
    let retired: Vec<_> = snap.devices.iter().filter(|d| d.health == DeviceHealth::Retired).collect();
    assert_eq!(retired.len(), 1, "{:?}", snap.devices);
    assert_eq!(retired[0].partitions_moved, 1);
    assert_eq!(no_device_left(&snap.devices), snap.devices.len() == 1, "{:?}", snap.devices);
    let text = cuzk::metrics::render(&snap);
    let series = format!("cuzk_device_healthy{{device=\"{}\"}} 0", retired[0].device);
    assert!(text.contains(&series), "{series} not in the metrics");

    check(400, gpu.submit_blocking(job(400)).unwrap().wait_blocking().unwrap());
    assert_eq!(gpu.snapshot_blocking().devices.iter().filter(|d| d.health == DeviceHealth::Retired).count(), 1);
    gpu.shutdown();
    cpu.shutdown();
}

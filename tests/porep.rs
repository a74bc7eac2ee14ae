//! Filecoin PoRep commit phase 2 end to end on the CPU backend: a 2KiB sector's C1
//! output (both formats) → cuzk → proof bytes that filecoin-proofs' `verify_seal`
//! accepts; the partition circuit's size matches filecoin-proofs'; bad C1 inputs get
//! clear errors while other jobs finish.

mod common;

use std::path::PathBuf;

use bellperson::{util_cs::bench_cs::BenchCS, Circuit};
use common::*;
use cuzk::{
    filecoin::{self as fil, C1Fixture, RegisteredSealProof},
    Engine, EngineConfig, JobError, JobSpec, StageName, SyntheticCircuit,
};
use serde_json::Value;

use common::porep::{ensure_ipp_srs, ensure_params, fixture, fixture_for, param_cache, verify, PROOF};

fn engine(dir: PathBuf) -> Engine {
    let mut cfg: EngineConfig = small_config();
    cfg.ingest.param_cache = dir;
    cfg.verify.enabled = true;
    Engine::start(cfg).unwrap()
}

/// A C1 output proves and verifies; the Lotus/Curio wrapper around it parses to the
/// same C1 output, so it proves the same bytes (the wrapper's proof itself is verified
/// through the daemon in daemon.rs).
#[test]
fn c1_json_and_wrapper_prove_and_verify() {
    let dir = param_cache();
    let f = fixture(1);
    let parsed = |b: &[u8]| serde_json::to_vec(&fil::parse_c1(b, usize::MAX).unwrap().output).unwrap();
    assert_eq!(parsed(&f.c1_json), parsed(&f.wrapper_json), "the wrapper carries the same C1 output");
    let engine = engine(dir);
    let a =
        engine.submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id).with_seed(9)).unwrap();
    let a = a.wait_blocking().unwrap();
    let pa = a.proof_bytes();
    assert_eq!(pa.len(), 192 * usize::from(PROOF.partitions()));
    assert!(verify(&f, f.sector_id, &pa), "verify_seal rejected the proof from c1.json");
    assert!(!verify(&f, f.sector_id + 1, &pa), "a proof must not verify for another sector");
    // The witness is mostly bits: PrepareMsm split the MSM scalars by value, and the
    // same proof comes out with every scalar converted instead.
    assert!(a.timings.ops.iter().any(|(n, _)| *n == "bit_split"), "the PoRep witness takes the bit split");
    // The circuit was recorded (blank) while the parameters loaded: no partition of
    // the engine's first job records it, it computes only its witness.
    let ops: Vec<_> = a.timings.ops.iter().map(|(n, _)| *n).collect();
    assert!(ops.contains(&"synth_native") && !ops.contains(&"synth_record"), "{ops:?}");
    engine.shutdown();
    let dense = engine_with(|c| {
        c.ingest.param_cache = param_cache();
        c.prepare_msm.bit_split = false;
    });
    let d = dense.submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id).with_seed(9)).unwrap();
    let d = d.wait_blocking().unwrap();
    assert!(d.timings.ops.iter().any(|(n, _)| *n == "to_canonical"), "bit_split = false converts every scalar");
    assert_eq!(d.proof_bytes(), pa, "the bit split changes no proof byte");
    dense.shutdown();
}

/// A backend that leaves a, b, c to itself (as the CUDA backend does on the
/// device) but runs on the CPU: deferred partitions are evaluated on the host.
struct DeferringCpu;

impl cuzk::gpu::Backend for DeferringCpu {
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn upload(&self, host: cuzk::gpu::HostPartition) -> Result<cuzk::gpu::UploadedPartition, cuzk::gpu::GpuError> {
        cuzk::gpu::cpu::CpuBackend.upload(host)
    }
    fn execute(
        &self,
        uploaded: cuzk::gpu::UploadedPartition,
        srs: &cuzk::ProvingKey,
        with_b_g2: bool,
    ) -> Result<cuzk::gpu::MsmResults, cuzk::gpu::GpuError> {
        cuzk::gpu::Backend::execute(&cuzk::gpu::cpu::CpuBackend, uploaded, srs, with_b_g2)
    }
    fn abc_on_device(&self) -> bool {
        true
    }
}

/// With a backend that evaluates a, b, c itself, synthesis of a recorded circuit
/// computes only the witness (`Evals::Deferred`), and the proof is byte for byte the
/// one of the host's a, b, c: the first job records the circuit (a, b, c on the
/// host; not beside the parameters' load, which would leave no job to compare),
/// the second leaves them to the backend.
#[test]
fn a_b_c_left_to_the_backend_give_the_same_proof() {
    let dir = param_cache();
    let f = fixture(1);
    let mut cfg: EngineConfig = small_config();
    cfg.ingest.param_cache = dir;
    cfg.verify.enabled = true;
    cfg.synthesize.record_beside_load = false;
    let selected = cuzk::actors::services::SelectedBackend {
        backend: std::sync::Arc::new(DeferringCpu),
        devices: 1,
        on_device: false,
        pinned_bytes: 0,
    };
    let engine = Engine::start_with_backend(cfg, selected).unwrap();
    let run = || {
        engine
            .submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id).with_seed(9))
            .unwrap()
            .wait_blocking()
            .unwrap()
    };
    let (first, second) = (run(), run());
    let ops = |o: &cuzk::JobOutput| o.timings.ops.iter().map(|(n, _)| *n).collect::<Vec<_>>();
    assert!(ops(&first).contains(&"synth_record") && !ops(&first).contains(&"abc_host"), "{:?}", ops(&first));
    assert!(
        ops(&second).contains(&"abc_host"),
        "the second job's a, b, c were left to the backend: {:?}",
        ops(&second)
    );
    assert!(verify(&f, f.sector_id, &second.proof_bytes()), "verify_seal rejected the proof of deferred a, b, c");
    assert_eq!(first.proof_bytes(), second.proof_bytes(), "same C1, same randomness: same bytes");
    engine.shutdown();
}

/// Our synthesis of every partition of `f` against bellperson's BenchCS count of
/// filecoin-proofs' circuit.
fn check_circuit_size(f: &C1Fixture, want: (usize, usize)) -> cuzk::synth::CircuitShape {
    let c1 = fil::parse_c1(&f.c1_json, usize::MAX).unwrap();
    let proof = c1.registered_proof();
    let shapes: Vec<_> =
        fil::partition_circuits(c1).unwrap().into_iter().map(|p| p.synthesize().unwrap().shape()).collect();
    let mut bench = BenchCS::<blstrs::Scalar>::new();
    fil::blank_circuit(proof).unwrap().synthesize(&mut bench).unwrap();
    eprintln!(
        "{proof:?}: {:?}; BenchCS: {} constraints, {} inputs",
        shapes[0],
        bench.num_constraints(),
        bench.num_inputs()
    );
    assert_eq!((bench.num_constraints(), bench.num_inputs()), want, "{proof:?} circuit size (bellperson BenchCS)");
    // What timing parameters are made from: the blank circuit's shape, no witness.
    let blank = cuzk::synth::shape_of(fil::blank_circuit(proof).unwrap()).unwrap();
    assert_eq!(blank, shapes[0], "{proof:?}: shape_of(blank circuit) differs from a real partition's synthesis");
    for s in &shapes {
        // BenchCS counts ONE among the inputs, as we do; the prover adds an
        // `input * 0 = 0` constraint per input.
        assert_eq!(s.inputs, bench.num_inputs());
        assert_eq!(s.constraints, bench.num_constraints() + s.inputs);
    }
    shapes[0]
}

#[test]
fn partition_circuit_size_8mib() {
    let _ = param_cache();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuzk-porep/c1-8mib");
    let f = fil::generate_c1(RegisteredSealProof::StackedDrg8MiBV1_1, 5, &dir).unwrap();
    check_circuit_size(&f, (3_844_929, 40));
}

#[test]
fn partition_circuit_matches_filecoin_proofs() {
    let f = fixture(2);
    let ours = check_circuit_size(&f, (2_687_921, 40));
    // The parameters made for the blank circuit fit the proving circuit.
    let key =
        cuzk::ProvingKey::load(fil::parameter_files(&param_cache(), PROOF).unwrap().0, Default::default()).unwrap();
    key.check_shape(&ours).unwrap();
}

/// Pre-compiled synthesis (record one partition's R1CS, then compute only
/// witnesses) gives the same assignments as plain synthesis: for other partitions of
/// the same sector (other challenges) and for another sector's interactive circuit,
/// which shares the parameters and so the structure.
#[test]
fn precompiled_synthesis_equals_plain() {
    use cuzk::synth::SynthMode;
    let ni = fixture_for(RegisteredSealProof::StackedDrg2KiBV1_2_Feat_NonInteractivePoRep, 41);
    let circuits = |f: &C1Fixture| fil::partition_circuits(fil::parse_c1(&f.c1_json, usize::MAX).unwrap()).unwrap();
    let mut parts = circuits(&ni);
    let (recorded, pre) = parts.remove(0).synthesize_with(SynthMode::Record).unwrap();
    let pre = pre.expect("a 2KiB partition is recorded");
    assert_eq!(recorded, circuits(&ni).remove(0).synthesize().unwrap(), "recording does not change the result");
    let (plain, other) = (circuits(&ni).remove(11), parts.remove(10));
    let plain = plain.synthesize().unwrap();
    let (fast, none) = other.synthesize_with(SynthMode::Precompiled(&pre)).unwrap();
    assert!(none.is_none());
    assert_ne!(plain.aux, recorded.aux, "another partition has another witness");
    assert!(fast == plain, "partition 11: pre-compiled and plain assignments differ");
    let interactive = fixture(2);
    let plain = circuits(&interactive).remove(0).synthesize().unwrap();
    let (fast, _) = circuits(&interactive).remove(0).synthesize_with(SynthMode::Precompiled(&pre)).unwrap();
    assert!(fast == plain, "interactive sector: pre-compiled and plain assignments differ");
}

fn edit(json: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(json).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

fn wrapper(inner: &[u8], size: u64) -> Vec<u8> {
    use base64::Engine as _;
    serde_json::to_vec(&serde_json::json!({
        "SectorNum": 1, "Phase1Out": base64::engine::general_purpose::STANDARD.encode(inner), "SectorSize": size
    }))
    .unwrap()
}

#[test]
fn bad_c1_inputs_fail_alone() {
    let dir = param_cache();
    let f = fixture(3);
    let j = &f.c1_json;
    let zero = |key: &'static str| edit(j, |v| v[key] = serde_json::json!(vec![0u8; 32]));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", j[..j.len() / 2].to_vec(), "EOF while parsing"),
        ("wrong shape", br#"{"hello": "world"}"#.to_vec(), "not valid SealCommitPhase1Output JSON"),
        ("empty", b"  ".to_vec(), "C1 input is empty"),
        (
            "base64 garbage",
            br#"{"SectorNum":1,"Phase1Out":"@@not base64@@","SectorSize":2048}"#.to_vec(),
            "Phase1Out is not valid base64",
        ),
        ("wrong SectorSize", wrapper(j, 8 << 20), "wrapper says SectorSize 8388608"),
        (
            "unknown registered proof",
            edit(j, |v| v["registered_proof"] = "StackedDrg3KiBV1_1".into()),
            "unknown variant `StackedDrg3KiBV1_1`",
        ),
        ("zero comm_r", zero("comm_r"), "all-zero comm_r"),
        ("zero comm_d", zero("comm_d"), "all-zero comm_d"),
        ("zero seed", zero("seed"), "all-zero seed"),
        (
            "fewer partitions",
            edit(j, |v| v["vanilla_proofs"]["StackedDrg2KiBV1"] = serde_json::json!([])),
            "vanilla proofs for 0 partitions; the proof type has 1",
        ),
        (
            "more partitions",
            edit(j, |v| {
                let p = v["vanilla_proofs"]["StackedDrg2KiBV1"][0].clone();
                v["vanilla_proofs"]["StackedDrg2KiBV1"].as_array_mut().unwrap().push(p);
            }),
            "vanilla proofs for 2 partitions; the proof type has 1",
        ),
    ];
    let engine = engine(dir.clone());
    let good_spec = spec(300, 2, 1.0, 1.0);
    let good_srs = params(good_spec);
    for (name, bytes, want) in cases {
        let bad = engine.submit_blocking(JobSpec::porep_c1(bytes, f.prover_id, f.sector_id)).unwrap();
        let good = engine
            .submit_blocking(JobSpec::circuits(good_srs.clone(), vec![SyntheticCircuit::new(good_spec, 1).unwrap()]))
            .unwrap();
        let e = bad.wait_blocking().unwrap_err();
        assert_eq!(e.stage(), Some(StageName::Ingest), "{name}: {e}");
        assert!(e.to_string().contains(want), "{name}: `{e}` does not say `{want}`");
        good.wait_blocking().unwrap_or_else(|e| panic!("{name}: the innocent job failed: {e}"));
    }
    engine.shutdown();

    // Parameters missing: the error names the file it expected.
    let empty = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuzk-porep/no-params");
    std::fs::create_dir_all(&empty).unwrap();
    let engine2 = engine_with(|c| c.ingest.param_cache = empty.clone());
    let e = engine2
        .submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id))
        .unwrap()
        .wait_blocking()
        .unwrap_err();
    let (expected, _) = fil::parameter_files(&empty, PROOF).unwrap();
    assert!(e.to_string().contains(&expected.display().to_string()), "{e}");
    engine2.shutdown();

    // Oversized input: refused before parsing.
    let engine3 = engine_with(|c| {
        c.ingest.param_cache = dir.clone();
        c.ingest.max_input_bytes = cuzk::actors::ByteSize(1000);
    });
    let e = engine3
        .submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id))
        .unwrap()
        .wait_blocking()
        .unwrap_err();
    assert!(
        matches!(e, JobError::Stage { stage: StageName::Ingest, .. })
            && e.to_string().contains("above the limit of 1000 bytes"),
        "{e}"
    );
    engine3.shutdown();
}

fn engine_with(f: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut cfg = small_config();
    f(&mut cfg);
    Engine::start(cfg).unwrap()
}

#[test]
fn preloaded_parameters_are_charged_to_the_host_budget() {
    let dir = param_cache();
    let (params, _) = fil::parameter_files(&dir, PROOF).unwrap();
    let size = std::fs::metadata(&params).unwrap().len();
    let engine = engine_with(|c| {
        c.ingest.param_cache = dir.clone();
        c.ingest.preload = vec![PROOF];
    });
    let t = std::time::Instant::now();
    while engine.host_budget().used < size {
        assert!(t.elapsed().as_secs() < 120, "parameters were not preloaded: {:?}", engine.host_budget());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A job now finds them resident: after it, the budget holds them and the circuit
    // recording made beside their load (kept with them), nothing else.
    let f = fixture(4);
    let out = engine.submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id)).unwrap();
    assert!(verify(&f, f.sector_id, &out.wait_blocking().unwrap().proof_bytes()));
    let recorded = engine.snapshot_blocking().precompiled_bytes;
    assert!(recorded > 0, "the partition's circuit was recorded");
    assert_eq!(
        engine.host_budget().used,
        size + recorded,
        "only the resident parameters and their recording remain charged"
    );
    engine.shutdown();
}

/// API v1.2's synthetic PoRep: C1 from synthetic challenges (filecoin-proofs'
/// generate_synth_proofs), proved by cuzk, accepted by verify_seal.
#[test]
fn synthetic_porep_2kib_proves_and_verifies() {
    let proof = RegisteredSealProof::StackedDrg2KiBV1_1_Feat_SyntheticPoRep;
    let dir = param_cache();
    ensure_params(&dir, proof);
    let f = fixture_for(proof, 31);
    let engine = engine(dir);
    let out = engine
        .submit_blocking(JobSpec::porep_c1(f.wrapper_json.clone(), f.prover_id, f.sector_id))
        .unwrap()
        .wait_blocking()
        .unwrap();
    let bytes = out.proof_bytes();
    assert_eq!(bytes.len(), 192 * usize::from(proof.partitions()));
    assert!(verify(&f, f.sector_id, &bytes), "verify_seal rejected the synthetic-PoRep proof");
    engine.shutdown();
}

/// API v1.2's non-interactive PoRep: 13 partition proofs (same parameter file as
/// v1.1), aggregated with SnarkPack into the proof `seal_commit_phase2` returns, which
/// `verify_seal` accepts; without the inner-product SRS the job fails in Ingest,
/// naming the file. (13 CPU partitions: the slowest test, ~10 min on 2 cores.)
#[test]
fn non_interactive_porep_2kib_aggregates_and_verifies() {
    let proof = RegisteredSealProof::StackedDrg2KiBV1_2_Feat_NonInteractivePoRep;
    let dir = param_cache();
    assert_eq!(
        fil::parameter_files(&dir, proof).unwrap(),
        fil::parameter_files(&dir, PROOF).unwrap(),
        "NI-PoRep reuses the interactive parameters"
    );
    ensure_ipp_srs(&dir);
    let f = fixture_for(proof, 41);
    let e1 = engine(dir.clone());
    let out = e1
        .submit_blocking(JobSpec::porep_c1(f.wrapper_json.clone(), f.prover_id, f.sector_id))
        .unwrap()
        .wait_blocking()
        .unwrap();
    assert_eq!(out.proofs.len(), usize::from(proof.partitions()));
    assert_eq!(out.proofs.len(), 13);
    let bytes = out.proof_bytes();
    assert_eq!(Some(&bytes), out.aggregate.as_ref(), "the job's proof is the aggregate");
    assert!(verify(&f, f.sector_id, &bytes), "verify_seal rejected the aggregated NI-PoRep proof");
    assert!(!verify(&f, f.sector_id + 1, &bytes), "an aggregate must not verify for another sector");
    assert!(out.timings.ops.iter().any(|(n, _)| *n == "aggregate"), "aggregation is timed");
    let ops: Vec<_> = out.timings.ops.iter().map(|(n, _)| *n).collect();
    assert!(
        !ops.contains(&"synth_record") && ops.contains(&"synth_native"),
        "the circuit recorded beside the parameters' load, every partition computes its witness natively: {ops:?}"
    );
    let held = e1.snapshot_blocking().precompiled_bytes;
    assert!(held > 100 << 20, "the 2KiB recording is kept with its parameters: {held} bytes");
    e1.shutdown();

    // Parameters present, inner-product SRS missing.
    let no_srs = dir.join("no-ipp-srs");
    std::fs::create_dir_all(&no_srs).unwrap();
    let ((p, v), (p2, v2)) =
        (fil::parameter_files(&dir, PROOF).unwrap(), fil::parameter_files(&no_srs, PROOF).unwrap());
    for (from, to) in [(p, p2), (v, v2)] {
        // A hard link, not a copy: the parameter file is large and CI's disk is not.
        if !to.exists() && std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(from, to).unwrap();
        }
    }
    let engine = engine(no_srs);
    let e = engine
        .submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id))
        .unwrap()
        .wait_blocking()
        .unwrap_err();
    assert_eq!(e.stage(), Some(StageName::Ingest), "refused before any partition is proved: {e}");
    let e = e.to_string();
    assert!(e.contains(fil::IPP_SRS_FILE) && e.contains("srs gen"), "{e}");
    assert_eq!(engine.snapshot_blocking().jobs.failed, 1);
    engine.shutdown();
}

/// Well-formed C1 outputs with wrong values never yield a proof. A C1 of another
/// sector or miner, or with a wrong comm_d, is refused at Ingest (its replica id is
/// not the job's); a wrong comm_r makes the circuit unsatisfiable, and with the
/// default config Verify refuses the partition.
#[test]
fn wrong_values_never_yield_a_proof_by_default() {
    let dir = param_cache();
    let f = fixture(4);
    let engine = engine_with(|c| c.ingest.param_cache = dir.clone());
    let flip = |mut c: [u8; 32]| {
        c[0] ^= 1;
        c
    };
    let wrong_d = edit(&f.c1_json, |v| v["comm_d"] = serde_json::json!(flip(f.comm_d)));
    let wrong_r = edit(&f.c1_json, |v| v["comm_r"] = serde_json::json!(flip(f.comm_r)));
    for (name, job, stage, want) in [
        ("wrong comm_d", JobSpec::porep_c1(wrong_d, f.prover_id, f.sector_id), StageName::Ingest, "replica_id"),
        (
            "wrong prover id",
            JobSpec::porep_c1(f.c1_json.clone(), flip(f.prover_id), f.sector_id),
            StageName::Ingest,
            "replica_id",
        ),
        (
            "wrong sector number",
            JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id + 1),
            StageName::Ingest,
            "replica_id",
        ),
        ("wrong comm_r", JobSpec::porep_c1(wrong_r, f.prover_id, f.sector_id), StageName::Verify, "does not verify"),
    ] {
        let e = engine.submit_blocking(job).unwrap().wait_blocking().unwrap_err();
        assert_eq!(e.stage(), Some(stage), "{name}: {e}");
        assert!(e.to_string().contains(want), "{name}: {e}");
    }
    let ok = engine.submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id)).unwrap();
    assert!(verify(&f, f.sector_id, &ok.wait_blocking().unwrap().proof_bytes()));
    engine.shutdown();
}

/// A shape-only C1 (`cuzk gen-c1 --shape-only`) is proved like a real one, but its
/// proof never verifies: with verification on (the default) the job fails at Verify;
/// with it off a proof comes back and `verify_seal` rejects it.
#[test]
fn shape_only_c1_proofs_never_verify() {
    let dir = param_cache();
    let f = fil::shape_only_fixture(PROOF, 5).unwrap();
    let engine = engine_with(|c| c.ingest.param_cache = dir.clone());
    let job = JobSpec::porep_c1(f.wrapper_json.clone(), f.prover_id, f.sector_id);
    let e = engine.submit_blocking(job).unwrap().wait_blocking().unwrap_err();
    assert_eq!(e.stage(), Some(StageName::Verify), "{e}");
    assert!(e.to_string().contains("does not verify"), "{e}");
    engine.shutdown();

    let engine = engine_with(|c| {
        c.ingest.param_cache = dir.clone();
        c.verify.enabled = false;
    });
    let out = engine.submit_blocking(JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id)).unwrap();
    let proof = out.wait_blocking().unwrap().proof_bytes();
    assert_eq!(proof.len(), 192);
    assert!(!verify(&f, f.sector_id, &proof));
    engine.shutdown();
}

/// The full-size benchmark's recipe at 2KiB: a shape-only C1 proved against timing
/// parameters generated in memory from the blank circuit's shape (no file in the
/// cache). Synthesize checks every size against them, so a wrong length would fail the
/// job; the proofs come out and never verify. The circuit is recorded as the
/// parameters are inserted, not by a partition.
#[test]
fn timing_parameters_in_memory_prove_and_never_verify() {
    let _ = param_cache();
    let f = fil::shape_only_fixture(PROOF, 6).unwrap();
    let shape = cuzk::synth::shape_of(fil::blank_circuit(PROOF).unwrap()).unwrap();
    let key = std::sync::Arc::new(cuzk::srs::generate_timing(&shape, 3));
    let empty = tempfile::tempdir().unwrap();
    for verify_stage in [true, false] {
        let engine = engine_with(|c| {
            c.ingest.param_cache = empty.path().to_path_buf();
            c.verify.enabled = verify_stage;
        });
        engine.params().insert(PROOF, key.clone()).unwrap();
        let job = JobSpec::porep_c1(f.c1_json.clone(), f.prover_id, f.sector_id);
        let r = engine.submit_blocking(job).unwrap().wait_blocking();
        if verify_stage {
            let e = r.unwrap_err();
            assert_eq!(e.stage(), Some(StageName::Verify), "{e}");
        } else {
            let out = r.unwrap();
            let proof = out.proof_bytes();
            assert_eq!(proof.len(), 192 * usize::from(PROOF.partitions()));
            assert!(!verify(&f, f.sector_id, &proof), "a proof from timing parameters must never verify");
            // The recording was made (or read) as the parameters were inserted, and
            // the partitions waited for it: none recorded.
            let ops: Vec<_> = out.timings.ops.iter().map(|(n, _)| *n).collect();
            assert!(ops.contains(&"synth_native") && !ops.contains(&"synth_record"), "{ops:?}");
        }
        engine.shutdown();
    }
}

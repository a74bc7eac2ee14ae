//! Bad input gets a clear error naming the problem, and the pipeline keeps serving.

mod common;

use std::io::Write;

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use common::*;
use cuzk::{
    config::Config, Engine, JobError, JobSpec, LoadOptions, ProvingKey, StageName, SubmitError, SyntheticCircuit,
};
use ff::Field;

fn write_params(k: &ProvingKey) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.params");
    k.write(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (dir, path, bytes)
}

fn load_err(path: &std::path::Path, bytes: &[u8]) -> String {
    std::fs::File::create(path).unwrap().write_all(bytes).unwrap();
    ProvingKey::load(path, LoadOptions::default()).unwrap_err().to_string()
}

#[test]
fn malformed_parameter_files() {
    let spec = spec(100, 2, 1.0, 1.0);
    let k = params(spec);
    let (_d, path, good) = write_params(&k);
    // Round trip first.
    let back = ProvingKey::load(&path, LoadOptions { subgroup_checks: true }).unwrap();
    assert_eq!(back.vk, k.vk);
    assert_eq!((back.h.len(), back.l.len(), back.b_g2.len()), (k.h.len(), k.l.len(), k.b_g2.len()));

    let vk_len = 96 * 3 + 192 * 3 + 4 + 96 * k.vk.ic.len();
    let e = load_err(&path, &[]);
    assert!(e.contains("truncated") && e.contains("vk.alpha_g1"), "{e}");
    let e = load_err(&path, &good[..vk_len + 4 + 96 * 3 + 10]);
    assert!(e.contains("truncated") && e.contains("section `h`"), "{e}");
    let e = load_err(&path, &good[..good.len() - 1]);
    assert!(e.contains("truncated") && e.contains("b_g2"), "{e}");
    let mut extra = good.clone();
    extra.extend_from_slice(b"junk");
    let e = load_err(&path, &extra);
    assert!(e.contains("4 unexpected bytes"), "{e}");
    // Corrupt the first L point's x coordinate.
    let l_start = vk_len + 4 + 96 * k.h.len() + 4;
    let mut bad = good.clone();
    bad[l_start + 20] ^= 0x55;
    let e = load_err(&path, &bad);
    assert!(e.contains("invalid point #0 in section `l`"), "{e}");
    // A length field claiming far more points than the file holds.
    let mut lie = good.clone();
    lie[vk_len..vk_len + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    let e = load_err(&path, &lie);
    assert!(e.contains("truncated") && e.contains("section `h`"), "{e}");
    let e = ProvingKey::load("/nonexistent/x.params", LoadOptions::default()).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/x.params"), "{e}");
}

struct Failing;
impl Circuit<Scalar> for Failing {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        cs.alloc(|| "x", || Err(SynthesisError::AssignmentMissing))?;
        Ok(())
    }
}

struct Panicking;
impl Circuit<Scalar> for Panicking {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, _: &mut CS) -> Result<(), SynthesisError> {
        panic!("circuit bug");
    }
}

/// `x * x = y` with a wrong `y`: synthesizes fine, but the proof cannot verify.
#[derive(Clone)]
struct Unsatisfied(bool);
impl Circuit<Scalar> for Unsatisfied {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let x = cs.alloc(|| "x", || Ok(Scalar::from(3)))?;
        let y = cs.alloc_input(|| "y", || Ok(if self.0 { Scalar::from(9) } else { Scalar::from(10) }))?;
        cs.enforce(|| "sq", |lc| lc + x, |lc| lc + x, |lc| lc + y);
        Ok(())
    }
}

#[test]
fn bad_jobs_fail_alone() {
    let mut cfg = small_config();
    cfg.verify.enabled = true;
    let engine = Engine::start(cfg).unwrap();
    let a = spec(300, 2, 1.0, 1.0);
    let b = spec(600, 2, 1.0, 1.0);
    let (srs_a, srs_b) = (params(a), params(b));
    let good = |seed| JobSpec::circuits(srs_a.clone(), vec![SyntheticCircuit::new(a, seed).unwrap()]);

    // Parameters for another circuit.
    let h =
        engine.submit_blocking(JobSpec::circuits(srs_b.clone(), vec![SyntheticCircuit::new(a, 1).unwrap()])).unwrap();
    let ok = engine.submit_blocking(good(1)).unwrap();
    let e = h.wait_blocking().unwrap_err();
    assert_eq!(e.stage(), Some(StageName::Synthesize));
    assert!(e.to_string().contains("parameters do not match the circuit"), "{e}");
    ok.wait_blocking().unwrap();

    // A circuit whose synthesis fails, one that panics, one that is unsatisfied.
    let h1 = engine.submit_blocking(JobSpec::circuits(srs_a.clone(), vec![Failing])).unwrap();
    let h2 = engine.submit_blocking(JobSpec::circuits(srs_a.clone(), vec![Panicking])).unwrap();
    let x_srs = params_for(Unsatisfied(true), 5);
    let h3 = engine.submit_blocking(JobSpec::circuits(x_srs.clone(), vec![Unsatisfied(false)])).unwrap();
    let h4 = engine.submit_blocking(JobSpec::circuits(x_srs.clone(), vec![Unsatisfied(true)])).unwrap();
    let ok = engine.submit_blocking(good(2)).unwrap();
    let e = h1.wait_blocking().unwrap_err().to_string();
    assert!(e.contains("stage synthesize") && e.contains("circuit synthesis failed"), "{e}");
    let e = h2.wait_blocking().unwrap_err().to_string();
    assert!(e.contains("stage synthesize") && e.contains("panicked: circuit bug"), "{e}");
    let e = h3.wait_blocking().unwrap_err();
    assert_eq!(e.stage(), Some(StageName::Verify), "{e}");
    assert!(e.to_string().contains("does not verify"), "{e}");
    h4.wait_blocking().unwrap();
    ok.wait_blocking().unwrap();

    // Invalid job specs are refused at submission.
    let empty: Vec<SyntheticCircuit> = vec![];
    assert!(matches!(engine.submit_blocking(JobSpec::circuits(srs_a.clone(), empty)), Err(SubmitError::Invalid(_))));
    let rs = vec![(Scalar::ONE, Scalar::ONE); 3];
    match engine.submit_blocking(good(3).with_randomness(rs)) {
        Err(SubmitError::Invalid(m)) => assert!(m.contains("3 (r, s) pairs given for 1 partitions"), "{m}"),
        _ => panic!("mismatched randomness accepted"),
    }
    engine.submit_blocking(good(4)).unwrap().wait_blocking().unwrap();
    engine.shutdown();
}

#[test]
fn invalid_configs() {
    for (text, needle) in [
        ("[synthesize]\nmax_concurrency = 2\nbogus = 1\n", "unknown field `bogus`"),
        ("[budget]\nhost_memory = -4\n", "must not be negative"),
        ("[budget]\nhost_memory = \"12 parsecs\"\n", "unknown size unit"),
        ("[prove_gpu]\nworkers_per_device = 0\n", "prove_gpu.workers_per_device must be at least 1"),
        ("[backend]\ndevice_buffers = 0\n", "backend.device_buffers must be at least 1"),
        ("[backend]\nkind = \"tpu\"\n", "unknown variant `tpu`"),
        ("[gpus]\n", "unknown section [gpus]"),
    ] {
        let e = Config::parse(text, "cfg.toml").unwrap_err().to_string();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
    let mut cfg = small_config();
    cfg.backend.kind = cuzk::actors::config::BackendKind::Gpu;
    let e = Engine::start(cfg).err().map(|e| e.to_string()).unwrap_or_default();
    // Without a usable GPU, "gpu" refuses to start with a reason (on a GPU host it starts).
    if !e.is_empty() {
        assert!(e.contains("gpu"), "{e}");
    }
    let _ = JobError::Cancelled;
}

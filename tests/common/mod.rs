//! Shared test helpers: cached random parameters, reference proofs, engines.
#![allow(dead_code)]

pub mod porep;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use bellperson::{
    groth16::{create_proof, prepare_verifying_key, verify_proof, Parameters, Proof},
    Circuit,
};
use blstrs::{Bls12, Scalar};
use cuzk::{EngineConfig, ProvingKey, SyntheticCircuit, SyntheticSpec};
use ff::Field;
use rand::SeedableRng;

/// Random parameters for a synthetic spec, generated once per test process.
pub fn params(spec: SyntheticSpec) -> Arc<ProvingKey> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<ProvingKey>>>> = OnceLock::new();
    let key = format!("{spec:?}");
    let cache = CACHE.get_or_init(Default::default);
    if let Some(k) = cache.lock().unwrap().get(&key) {
        return k.clone();
    }
    let k = params_for(SyntheticCircuit::new(spec, 0).unwrap(), 7);
    cache.lock().unwrap().insert(key, k.clone());
    k
}

/// Random parameters for any circuit (bellperson's generator, seeded).
pub fn params_for<C: Circuit<Scalar>>(c: C, seed: u64) -> Arc<ProvingKey> {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    Arc::new(cuzk::srs::generate_random(c, &mut rng).unwrap())
}

pub fn spec(constraints: usize, public_inputs: usize, a: f64, b: f64) -> SyntheticSpec {
    SyntheticSpec { constraints, public_inputs, a_density: a, b_density: b }
}

pub fn randomness(n: usize, seed: u64) -> Vec<(Scalar, Scalar)> {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    (0..n).map(|_| (Scalar::random(&mut rng), Scalar::random(&mut rng))).collect()
}

/// bellperson's native prover with the same r, s.
pub fn reference<C: Circuit<Scalar> + Send>(c: C, srs: &ProvingKey, r: Scalar, s: Scalar) -> Proof<Bls12> {
    let params: Parameters<Bls12> = srs.into();
    create_proof(c, &params, r, s).unwrap()
}

pub fn verifies(srs: &ProvingKey, proof: &Proof<Bls12>, inputs: &[Scalar]) -> bool {
    verify_proof(&prepare_verifying_key(&srs.vk), proof, inputs).unwrap()
}

pub fn bytes(p: &Proof<Bls12>) -> Vec<u8> {
    let mut v = Vec::new();
    p.write(&mut v).unwrap();
    v
}

/// A config with small buffers and a fixed host budget, for tests.
pub fn small_config() -> EngineConfig {
    let mut c = EngineConfig::default();
    c.budget.host_memory = cuzk::actors::MemoryLimit::Bytes(cuzk::actors::ByteSize(4 << 30));
    c.synthesize.max_concurrency = 2;
    // Tests that count recorded partitions must not find a recording another test
    // saved in the shared parameter cache.
    c.synthesize.save_recordings = false;
    c
}

/// A daemon on the CPU backend with ephemeral ports, no results directory and no
/// shutdown grace: for tests of the daemon's HTTP side.
pub fn cpu_daemon() -> cuzk::daemon::Daemon {
    let mut engine = small_config();
    engine.backend.kind = cuzk::actors::config::BackendKind::Cpu;
    daemon_with(engine)
}

/// A daemon over `engine` with ephemeral ports, no results directory and no
/// shutdown grace.
pub fn daemon_with(engine: EngineConfig) -> cuzk::daemon::Daemon {
    let cfg = cuzk::daemon::DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: "127.0.0.1:0".into(),
        shutdown_timeout_secs: 0,
        results_dir: "none".into(),
        ..Default::default()
    };
    cuzk::daemon::Daemon::start(cfg, engine).unwrap()
}

/// Makes `path` readable by its owner only (as the daemon requires of a token file).
pub fn owner_only(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

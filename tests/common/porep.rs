//! PoRep fixtures shared by tests: 2KiB test parameters (generated once, kept under the
//! target dir) and C1 outputs.
#![allow(dead_code)]

use std::{
    path::PathBuf,
    sync::{Mutex, OnceLock},
};

use cuzk::filecoin::{self as fil, C1Fixture, RegisteredSealProof};

pub const PROOF: RegisteredSealProof = RegisteredSealProof::StackedDrg2KiBV1_1;

/// Where fixtures live: `CUZK_TEST_TMPDIR` (test binaries copied to a GPU host run
/// away from their build tree), else Cargo's per-target temp dir.
fn tmp_root() -> PathBuf {
    std::env::var_os("CUZK_TEST_TMPDIR").map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from)
}

/// Test parameters for 2KiB, generated once, and the environment filecoin-proofs
/// reads (set before any of its calls).
pub fn param_cache() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = tmp_root().join("cuzk-porep");
        let dir = base.join("params-2kib-seed1");
        std::fs::create_dir_all(&dir).unwrap();
        std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &dir);
        std::env::set_var("FIL_PROOFS_PARENT_CACHE", base.join("parents"));
        ensure_params(&dir, PROOF);
        dir
    })
    .clone()
}

/// Generates `proof`'s test parameters in `dir` unless they are there. Test binaries
/// run one after another, so one generates and the others reuse; the .vk is renamed
/// into place last, marking the pair complete.
pub fn ensure_params(dir: &std::path::Path, proof: impl Into<fil::CircuitId>) {
    let proof = proof.into();
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let (params, vk) = fil::parameter_files(dir, proof).unwrap();
    if !params.exists() || !vk.exists() {
        use rand::SeedableRng;
        let t = std::time::Instant::now();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let key = cuzk::srs::generate_random(fil::blank_circuit_of(proof).unwrap(), &mut rng).unwrap();
        key.write(&params).unwrap();
        let tmp = vk.with_extension("vk.tmp");
        key.vk.write(std::fs::File::create(&tmp).unwrap()).unwrap();
        std::fs::rename(&tmp, &vk).unwrap();
        eprintln!("generated {proof} test parameters in {:?}", t.elapsed());
    }
    // Under Filecoin's names: marked as test parameters for the digest check (files
    // generated before marks existed are marked here too; this directory is tests').
    for f in [&params, &vk] {
        fil::digest::mark_generated(f).unwrap();
    }
}

/// A fake inner-product SRS (non-interactive PoRep aggregation) in `dir` unless one
/// is there; written to a temporary name and renamed into place.
pub fn ensure_ipp_srs(dir: &std::path::Path) {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = fil::ipp_srs_file(dir);
    if !path.exists() {
        fil::write_fake_ipp_srs(&path, 128, 1).unwrap();
    }
    fil::digest::mark_generated(&path).unwrap();
}

/// A sealed 2KiB sector's C1 output; deterministic per seed (miner f0<1000+seed>).
pub fn fixture(seed: u64) -> C1Fixture {
    fixture_for(PROOF, seed)
}

/// As [`fixture`], for another registered proof of a small sector.
pub fn fixture_for(proof: RegisteredSealProof, seed: u64) -> C1Fixture {
    let _ = param_cache();
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap();
    let dir = tmp_root().join(format!("cuzk-porep/c1-{seed}-{}", std::process::id()));
    let f = fil::generate_c1(proof, seed, &dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    f
}

/// A fresh work directory for filecoin-proofs fixtures.
pub fn work_dir(name: &str) -> PathBuf {
    let dir = tmp_root().join(format!("cuzk-porep/{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub fn verify(f: &C1Fixture, sector_id: u64, proof: &[u8]) -> bool {
    fil::verify_seal(f.registered_proof, f.comm_r, f.comm_d, f.prover_id, sector_id, f.ticket, f.seed, proof).unwrap()
}

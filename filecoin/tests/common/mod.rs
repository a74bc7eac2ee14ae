//! Sealed 2KiB C1 outputs for the tests of this crate: made once per test binary with
//! filecoin-proofs (commit phase 1 needs no Groth16 parameters).
#![allow(dead_code)]

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Mutex, OnceLock},
};

use cuzk_filecoin::{generate_c1, RegisteredSealProof};

/// The C1 output JSON (filecoin-proofs-api `SealCommitPhase1Output`) of a 2KiB sector
/// sealed for `proof`; deterministic per `seed`.
pub fn c1_json(proof: RegisteredSealProof, seed: u64) -> Vec<u8> {
    /// C1 JSON by (proof number, seed).
    type Made = Mutex<HashMap<(u64, u64), Vec<u8>>>;
    static MADE: OnceLock<Made> = OnceLock::new();
    let made = MADE.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuzk-filecoin-c1");
        // Read by filecoin-proofs once, on its first call: set before any.
        std::env::set_var("FIL_PROOFS_PARENT_CACHE", base.join("parents"));
        Mutex::new(HashMap::new())
    });
    let mut made = made.lock().unwrap_or_else(|e| e.into_inner());
    let key = (cuzk_filecoin::proof_number(proof), seed);
    made.entry(key)
        .or_insert_with(|| {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
                "cuzk-filecoin-c1/seal-{}-{}-{seed}",
                std::process::id(),
                key.0
            ));
            let f = generate_c1(proof, seed, &dir).expect("sealing a 2KiB test sector");
            let _ = std::fs::remove_dir_all(&dir);
            f.c1_json
        })
        .clone()
}

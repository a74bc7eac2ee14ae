//! Test inputs made with filecoin-proofs itself: a small sector sealed through commit
//! phase 1, and everything needed to verify the proof made from it.

use std::path::Path;

use base64::Engine as _;

use crate::{prover_id_from_actor, PorepError, RegisteredSealProof};

/// What [`generate_c1`] produced: the C1 output in both formats and everything
/// needed to verify the proof made from it.
pub struct C1Fixture {
    pub registered_proof: RegisteredSealProof,
    /// The miner's actor id; `prover_id` is derived from it as Lotus does.
    pub miner_id: u64,
    pub prover_id: [u8; 32],
    pub sector_id: u64,
    pub ticket: [u8; 32],
    pub seed: [u8; 32],
    pub comm_r: [u8; 32],
    pub comm_d: [u8; 32],
    /// filecoin-proofs-api `SealCommitPhase1Output` JSON.
    pub c1_json: Vec<u8>,
    /// The Lotus/Curio wrapper around it.
    pub wrapper_json: Vec<u8>,
}

/// Seals random data with filecoin-proofs (pre-commit 1 and 2, commit 1) in
/// `work_dir` and returns the C1 output. Deterministic for a given `seed`. Meant for
/// small sectors (2KiB, 8MiB) in tests and benchmarks.
///
/// # Errors
/// [`PorepError::Circuit`] with filecoin-proofs' message.
pub fn generate_c1(proof: RegisteredSealProof, seed: u64, work_dir: &Path) -> Result<C1Fixture, PorepError> {
    use filecoin_proofs_api::{seal, PaddedBytesAmount, SectorId, UnpaddedBytesAmount};
    use rand_core::{RngCore, SeedableRng};
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let io = |e: std::io::Error| PorepError::Circuit(format!("{}: {e}", work_dir.display()));
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    let mut bytes32 = || {
        let mut b = [0u8; 32];
        rng.fill_bytes(&mut b);
        b[31] &= 0x3f; // a valid field element, as Lotus produces
        b
    };
    let (ticket, seed_c) = (bytes32(), bytes32());
    // The miner f0<1000 + seed>, so that a daemon given its miner id derives the same
    // prover id (LEB128) as the sealing did.
    let miner_id = 1000 + seed;
    let prover_id = prover_id_from_actor(miner_id);
    let sector_id = 1000 + seed % 1000;
    let sector_size = u64::from(proof.sector_size());
    let unpadded = UnpaddedBytesAmount::from(PaddedBytesAmount(sector_size));
    let mut data = vec![0u8; u64::from(unpadded) as usize];
    rand_chacha::ChaCha20Rng::seed_from_u64(seed ^ 0x5eed).fill_bytes(&mut data);

    std::fs::create_dir_all(work_dir).map_err(io)?;
    let cache = work_dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).map_err(io)?;
    let staged = work_dir.join("staged");
    let sealed = work_dir.join("sealed");
    let mut staged_file =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&staged).map_err(io)?;
    let (piece, _) = seal::write_and_preprocess(proof, &data[..], &mut staged_file, unpadded).map_err(err)?;
    drop(staged_file);
    std::fs::File::create(&sealed).map_err(io)?;
    let pieces = [piece];
    let sid = SectorId::from(sector_id);
    let pc1 =
        seal::seal_pre_commit_phase1(proof, &cache, &staged, &sealed, prover_id, sid, ticket, &pieces).map_err(err)?;
    let pc2 = seal::seal_pre_commit_phase2(pc1, &cache, &sealed).map_err(err)?;
    if proof.feature_enabled(storage_proofs_core::api_version::ApiFeature::SyntheticPoRep) {
        // Synthetic PoRep (API v1.2): the synthetic challenges' proofs are generated
        // after pre-commit; commit phase 1 then selects its challenges from them.
        seal::generate_synth_proofs(&cache, &sealed, prover_id, sid, ticket, pc2.clone(), &pieces).map_err(err)?;
    }
    let c1 = seal::seal_commit_phase1(&cache, &sealed, prover_id, sid, ticket, seed_c, pc2, &pieces).map_err(err)?;
    fixture(c1, miner_id, sector_id)
}

/// The fixture of C1 output `c1`, sealed for `miner_id` and `sector_id`.
pub(crate) fn fixture(
    c1: filecoin_proofs_api::seal::SealCommitPhase1Output,
    miner_id: u64,
    sector_id: u64,
) -> Result<C1Fixture, PorepError> {
    let c1_json = serde_json::to_vec(&c1).map_err(|e| PorepError::Circuit(e.to_string()))?;
    let wrapper_json = serde_json::to_vec(&serde_json::json!({
        "SectorNum": sector_id,
        "Phase1Out": base64::engine::general_purpose::STANDARD.encode(&c1_json),
        "SectorSize": u64::from(c1.registered_proof.sector_size()),
    }))
    .map_err(|e| PorepError::Circuit(e.to_string()))?;
    Ok(C1Fixture {
        registered_proof: c1.registered_proof,
        miner_id,
        prover_id: prover_id_from_actor(miner_id),
        sector_id,
        ticket: c1.ticket,
        seed: c1.seed,
        comm_r: c1.comm_r,
        comm_d: c1.comm_d,
        c1_json,
        wrapper_json,
    })
}

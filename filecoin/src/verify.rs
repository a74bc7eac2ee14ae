//! Verification with filecoin-proofs' own verifiers, as the chain checks a proof.

use std::sync::OnceLock;

use crate::{CircuitId, DigestChecker, PorepError, RegisteredSealProof};

/// Checks the verifying key filecoin-proofs is about to read for `circuit` (in
/// `FIL_PROOFS_PARAMETER_CACHE`, else /var/tmp/filecoin-proof-parameters) against
/// Filecoin's published digest: hashed once per process, remembered beside it. A
/// missing file is left to filecoin-proofs to report.
fn check_vk(circuit: impl Into<CircuitId>) -> Result<(), PorepError> {
    static VK: OnceLock<DigestChecker> = OnceLock::new();
    let (_, vk) = crate::parameter_files(&crate::default_parameter_cache(), circuit)?;
    if vk.exists() {
        VK.get_or_init(|| DigestChecker::filecoin(true)).check(&vk)?;
    }
    Ok(())
}

/// Checks a PoRep proof (partition proofs back to back) with filecoin-proofs'
/// `verify_seal`, which reads the verifying key from `FIL_PROOFS_PARAMETER_CACHE`.
///
/// # Errors
/// filecoin-proofs' error (for example a missing `.vk` file); a `.vk` whose digest
/// is not Filecoin's published one.
#[allow(clippy::too_many_arguments)]
pub fn verify_seal(
    proof: RegisteredSealProof,
    comm_r: [u8; 32],
    comm_d: [u8; 32],
    prover_id: [u8; 32],
    sector_id: u64,
    ticket: [u8; 32],
    seed: [u8; 32],
    proof_bytes: &[u8],
) -> Result<bool, PorepError> {
    check_vk(proof)?;
    filecoin_proofs_api::seal::verify_seal(
        proof,
        comm_r,
        comm_d,
        prover_id,
        filecoin_proofs_api::SectorId::from(sector_id),
        ticket,
        seed,
        proof_bytes,
    )
    .map_err(|e| PorepError::Circuit(format!("{e:#}")))
}

/// Checks a WinningPoSt with filecoin-proofs' `verify_winning_post`: `sectors` are
/// the challenged sectors as (sector id, comm_r).
///
/// # Errors
/// filecoin-proofs' error; a `.vk` whose digest is not Filecoin's published one.
pub fn verify_winning_post(
    proof: crate::RegisteredPoStProof,
    randomness: [u8; 32],
    prover_id: [u8; 32],
    sectors: &[(u64, [u8; 32])],
    proof_bytes: &[u8],
) -> Result<bool, PorepError> {
    check_vk(proof)?;
    let replicas = public_replicas(proof, sectors);
    filecoin_proofs_api::post::verify_winning_post(&randomness, proof_bytes, &replicas, prover_id)
        .map_err(|e| PorepError::Circuit(format!("{e:#}")))
}

/// Checks a whole WindowPoSt (every partition's proof back to back) with
/// filecoin-proofs' `verify_window_post`.
///
/// # Errors
/// filecoin-proofs' error; a `.vk` whose digest is not Filecoin's published one.
pub fn verify_window_post(
    proof: crate::RegisteredPoStProof,
    randomness: [u8; 32],
    prover_id: [u8; 32],
    sectors: &[(u64, [u8; 32])],
    proof_bytes: &[u8],
) -> Result<bool, PorepError> {
    check_vk(proof)?;
    let replicas = public_replicas(proof, sectors);
    filecoin_proofs_api::post::verify_window_post(&randomness, &[(proof, proof_bytes)], &replicas, prover_id)
        .map_err(|e| PorepError::Circuit(format!("{e:#}")))
}

fn public_replicas(
    proof: crate::RegisteredPoStProof,
    sectors: &[(u64, [u8; 32])],
) -> std::collections::BTreeMap<filecoin_proofs_api::SectorId, filecoin_proofs_api::PublicReplicaInfo> {
    sectors
        .iter()
        .map(|&(id, comm_r)| {
            (filecoin_proofs_api::SectorId::from(id), filecoin_proofs_api::PublicReplicaInfo::new(proof, comm_r))
        })
        .collect()
}

/// Checks a SnapDeals update proof (partition proofs back to back) with
/// filecoin-proofs' `verify_empty_sector_update_proof`.
///
/// # Errors
/// filecoin-proofs' error; a `.vk` whose digest is not Filecoin's published one.
pub fn verify_empty_sector_update(
    proof: crate::RegisteredUpdateProof,
    proof_bytes: &[u8],
    comm_r_old: [u8; 32],
    comm_r_new: [u8; 32],
    comm_d_new: [u8; 32],
) -> Result<bool, PorepError> {
    check_vk(proof)?;
    filecoin_proofs_api::update::verify_empty_sector_update_proof(
        proof,
        proof_bytes,
        comm_r_old,
        comm_r_new,
        comm_d_new,
    )
    .map_err(|e| PorepError::Circuit(format!("{e:#}")))
}

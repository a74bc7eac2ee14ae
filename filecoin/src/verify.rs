//! Verification with filecoin-proofs' own verifiers, as the chain checks a proof.

use crate::{PorepError, RegisteredSealProof};

/// Checks a PoRep proof (partition proofs back to back) with filecoin-proofs'
/// `verify_seal`, which reads the verifying key from `FIL_PROOFS_PARAMETER_CACHE`.
///
/// # Errors
/// filecoin-proofs' error (for example a missing `.vk` file).
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

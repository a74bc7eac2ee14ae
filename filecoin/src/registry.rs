//! Registered proofs and ids as filecoin-ffi, Lotus and Curio number and derive them.

pub use filecoin_proofs_api::RegisteredSealProof;

/// Whether `proof` is a non-interactive PoRep type (`*_V1_2_Feat_NonInteractivePoRep`).
pub fn is_non_interactive(proof: RegisteredSealProof) -> bool {
    proof.feature_enabled(storage_proofs_core::api_version::ApiFeature::NonInteractivePoRep)
}

/// A Filecoin miner's actor id as the 32-byte prover id, the way Lotus/Curio derive
/// it: unsigned LEB128 of the id, zero-padded.
pub fn prover_id_from_actor(actor_id: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    let (mut v, mut i) = (actor_id, 0);
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        out[i] = if v == 0 { byte } else { byte | 0x80 };
        i += 1;
        if v == 0 {
            return out;
        }
    }
}

/// filecoin-ffi's numbering (`abi.RegisteredSealProof`): 0-4 v1, 5-9 v1.1, 10-14 v1.1
/// synthetic PoRep, 15-19 v1.2 non-interactive, each in the order 2KiB, 8MiB, 512MiB,
/// 32GiB, 64GiB.
const SEAL_PROOFS: [RegisteredSealProof; 20] = {
    use RegisteredSealProof::*;
    [
        StackedDrg2KiBV1,
        StackedDrg8MiBV1,
        StackedDrg512MiBV1,
        StackedDrg32GiBV1,
        StackedDrg64GiBV1,
        StackedDrg2KiBV1_1,
        StackedDrg8MiBV1_1,
        StackedDrg512MiBV1_1,
        StackedDrg32GiBV1_1,
        StackedDrg64GiBV1_1,
        StackedDrg2KiBV1_1_Feat_SyntheticPoRep,
        StackedDrg8MiBV1_1_Feat_SyntheticPoRep,
        StackedDrg512MiBV1_1_Feat_SyntheticPoRep,
        StackedDrg32GiBV1_1_Feat_SyntheticPoRep,
        StackedDrg64GiBV1_1_Feat_SyntheticPoRep,
        StackedDrg2KiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg8MiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg512MiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg32GiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg64GiBV1_2_Feat_NonInteractivePoRep,
    ]
};

/// The registered seal proof with filecoin-ffi's numeric id.
pub fn proof_from_number(n: u64) -> Option<RegisteredSealProof> {
    SEAL_PROOFS.get(usize::try_from(n).ok()?).copied()
}

/// filecoin-ffi's numeric id of a registered seal proof (inverse of [`proof_from_number`]).
pub fn proof_number(p: RegisteredSealProof) -> u64 {
    SEAL_PROOFS.iter().position(|&q| q == p).map_or(u64::MAX, |i| i as u64)
}

/// Parses a sector size as operators write it ("2KiB", "32GiB", or bytes) into the
/// latest interactive registered proof for that size (API v1.1).
///
/// # Errors
/// When the size is not a Filecoin sector size.
pub fn proof_for_sector_size(s: &str) -> Result<RegisteredSealProof, String> {
    use RegisteredSealProof::*;
    Ok(match s.trim().to_ascii_lowercase().as_str() {
        "2kib" | "2048" => StackedDrg2KiBV1_1,
        "8mib" | "8388608" => StackedDrg8MiBV1_1,
        "512mib" | "536870912" => StackedDrg512MiBV1_1,
        "32gib" | "34359738368" => StackedDrg32GiBV1_1,
        "64gib" | "68719476736" => StackedDrg64GiBV1_1,
        _ => return Err(format!("`{s}` is not a Filecoin sector size (2KiB, 8MiB, 512MiB, 32GiB, 64GiB)")),
    })
}

pub use filecoin_proofs_api::{RegisteredPoStProof, RegisteredUpdateProof};

/// The v1.1 interactive seal proof of the `i`th sector size (2KiB, 8MiB, 512MiB,
/// 32GiB, 64GiB).
pub(crate) fn seal_proof_v1_1(i: usize) -> RegisteredSealProof {
    SEAL_PROOFS[5 + i]
}

/// filecoin-ffi's numbering (`abi.RegisteredPoStProof`): 0-4 WinningPoSt v1, 5-9
/// WindowPoSt v1, 10-14 WindowPoSt v1.1 (filecoin-proofs' `V1_2`, the grindability
/// fix), each in the order 2KiB, 8MiB, 512MiB, 32GiB, 64GiB.
const POST_PROOFS: [RegisteredPoStProof; 15] = {
    use RegisteredPoStProof::*;
    [
        StackedDrgWinning2KiBV1,
        StackedDrgWinning8MiBV1,
        StackedDrgWinning512MiBV1,
        StackedDrgWinning32GiBV1,
        StackedDrgWinning64GiBV1,
        StackedDrgWindow2KiBV1,
        StackedDrgWindow8MiBV1,
        StackedDrgWindow512MiBV1,
        StackedDrgWindow32GiBV1,
        StackedDrgWindow64GiBV1,
        StackedDrgWindow2KiBV1_2,
        StackedDrgWindow8MiBV1_2,
        StackedDrgWindow512MiBV1_2,
        StackedDrgWindow32GiBV1_2,
        StackedDrgWindow64GiBV1_2,
    ]
};

/// The registered PoSt proof with filecoin-ffi's numeric id.
pub fn post_from_number(n: u64) -> Option<RegisteredPoStProof> {
    POST_PROOFS.get(usize::try_from(n).ok()?).copied()
}

/// filecoin-ffi's numeric id of a registered PoSt proof.
pub fn post_number(p: RegisteredPoStProof) -> u64 {
    POST_PROOFS.iter().position(|&q| q == p).map_or(u64::MAX, |i| i as u64)
}

/// filecoin-ffi's numbering (`abi.RegisteredUpdateProof`): 0-4 in the order 2KiB,
/// 8MiB, 512MiB, 32GiB, 64GiB.
const UPDATE_PROOFS: [RegisteredUpdateProof; 5] = {
    use RegisteredUpdateProof::*;
    [StackedDrg2KiBV1, StackedDrg8MiBV1, StackedDrg512MiBV1, StackedDrg32GiBV1, StackedDrg64GiBV1]
};

/// The registered update proof with filecoin-ffi's numeric id.
pub fn update_from_number(n: u64) -> Option<RegisteredUpdateProof> {
    UPDATE_PROOFS.get(usize::try_from(n).ok()?).copied()
}

/// filecoin-ffi's numeric id of a registered update proof.
pub fn update_number(p: RegisteredUpdateProof) -> u64 {
    UPDATE_PROOFS.iter().position(|&q| q == p).map_or(u64::MAX, |i| i as u64)
}

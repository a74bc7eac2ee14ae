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

/// A sector sealed with filecoin-proofs (pre-commit 1 and 2) in a work directory.
pub struct SealedSector {
    pub registered_proof: RegisteredSealProof,
    pub miner_id: u64,
    pub prover_id: [u8; 32],
    pub sector_id: u64,
    pub ticket: [u8; 32],
    pub comm_r: [u8; 32],
    pub comm_d: [u8; 32],
    /// The sector's cache directory (its trees, `p_aux`).
    pub cache: std::path::PathBuf,
    /// The sealed replica.
    pub sealed: std::path::PathBuf,
    pub(crate) pieces: Vec<filecoin_proofs_api::PieceInfo>,
    pub(crate) pc2: filecoin_proofs_api::seal::SealPreCommitPhase2Output,
    /// The seed's second 32 random bytes (the interactive seed of commit phase 1).
    pub(crate) seed_c: [u8; 32],
}

/// Seals a sector of `proof` with filecoin-proofs in `work_dir` (random data, or
/// zeros for a committed-capacity sector a SnapDeals update can fill). Deterministic
/// for a given `seed`. Meant for small sectors (2KiB, 8MiB) in tests.
///
/// # Errors
/// [`PorepError::Circuit`] with filecoin-proofs' message.
pub fn seal_sector(
    proof: RegisteredSealProof,
    seed: u64,
    work_dir: &Path,
    zeros: bool,
) -> Result<SealedSector, PorepError> {
    // The miner f0<1000 + seed>, so that a daemon given its miner id derives the same
    // prover id (LEB128) as the sealing did.
    seal_sector_for(proof, seed, 1000 + seed, 1000 + seed % 1000, work_dir, zeros)
}

/// [`seal_sector`] for a given miner and sector number (several sectors of one
/// miner, for WindowPoSt).
///
/// # Errors
/// As [`seal_sector`].
pub fn seal_sector_for(
    proof: RegisteredSealProof,
    seed: u64,
    miner_id: u64,
    sector_id: u64,
    work_dir: &Path,
    zeros: bool,
) -> Result<SealedSector, PorepError> {
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
    let prover_id = prover_id_from_actor(miner_id);
    let sector_size = u64::from(proof.sector_size());
    let unpadded = UnpaddedBytesAmount::from(PaddedBytesAmount(sector_size));
    let mut data = vec![0u8; u64::from(unpadded) as usize];
    if !zeros {
        rand_chacha::ChaCha20Rng::seed_from_u64(seed ^ 0x5eed).fill_bytes(&mut data);
    }

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
    let pieces = vec![piece];
    let sid = SectorId::from(sector_id);
    let pc1 =
        seal::seal_pre_commit_phase1(proof, &cache, &staged, &sealed, prover_id, sid, ticket, &pieces).map_err(err)?;
    let pc2 = seal::seal_pre_commit_phase2(pc1, &cache, &sealed).map_err(err)?;
    Ok(SealedSector {
        registered_proof: proof,
        miner_id,
        prover_id,
        sector_id,
        ticket,
        comm_r: pc2.comm_r,
        comm_d: pc2.comm_d,
        cache,
        sealed,
        pieces,
        pc2,
        seed_c,
    })
}

/// Seals random data with filecoin-proofs (pre-commit 1 and 2, commit 1) in
/// `work_dir` and returns the C1 output. Deterministic for a given `seed`. Meant for
/// small sectors (2KiB, 8MiB) in tests and benchmarks.
///
/// # Errors
/// [`PorepError::Circuit`] with filecoin-proofs' message.
pub fn generate_c1(proof: RegisteredSealProof, seed: u64, work_dir: &Path) -> Result<C1Fixture, PorepError> {
    use filecoin_proofs_api::{seal, SectorId};
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let s = seal_sector(proof, seed, work_dir, false)?;
    let sid = SectorId::from(s.sector_id);
    if proof.feature_enabled(storage_proofs_core::api_version::ApiFeature::SyntheticPoRep) {
        // Synthetic PoRep (API v1.2): the synthetic challenges' proofs are generated
        // after pre-commit; commit phase 1 then selects its challenges from them.
        seal::generate_synth_proofs(&s.cache, &s.sealed, s.prover_id, sid, s.ticket, s.pc2.clone(), &s.pieces)
            .map_err(err)?;
    }
    let c1 = seal::seal_commit_phase1(&s.cache, &s.sealed, s.prover_id, sid, s.ticket, s.seed_c, s.pc2, &s.pieces)
        .map_err(err)?;
    fixture(c1, s.miner_id, s.sector_id)
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

/// Vanilla PoSt proofs made with filecoin-proofs from sealed test sectors, and what
/// verifying the SNARK needs.
pub struct PostFixture {
    pub proof: crate::RegisteredPoStProof,
    pub miner_id: u64,
    pub prover_id: [u8; 32],
    /// The chain's randomness, already a field element (top bits cleared).
    pub randomness: [u8; 32],
    /// Every sealed sector: (sector number, comm_r).
    pub sectors: Vec<(u64, [u8; 32])>,
    /// WinningPoSt: the challenged sector's (sector number, comm_r).
    pub challenged: Vec<(u64, [u8; 32])>,
    /// One `generate_single_vanilla_proof` result per proved sector, in order.
    pub vanilla_proofs: Vec<Vec<u8>>,
    /// WindowPoSt: the vanilla proofs of each partition (what Curio sends with each
    /// partition index).
    pub partitions: Vec<Vec<Vec<u8>>>,
}

/// Seals `sectors` sectors of one miner and makes their vanilla PoSt proofs for
/// `proof` (WinningPoSt: the one sector the randomness challenges; WindowPoSt:
/// every sector). Deterministic for a given `seed`.
///
/// # Errors
/// [`PorepError::Circuit`] with filecoin-proofs' message.
pub fn generate_post_vanilla(
    proof: crate::RegisteredPoStProof,
    sectors: usize,
    seed: u64,
    work_dir: &Path,
) -> Result<PostFixture, PorepError> {
    use filecoin_proofs_api::{post, PrivateReplicaInfo, SectorId};
    use rand_core::{RngCore, SeedableRng};
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let size = u64::from(proof.sector_size());
    let seal_proof = crate::proof_for_sector_size(&size.to_string()).map_err(PorepError::Circuit)?;
    let miner_id = 1000 + seed;
    let prover_id = prover_id_from_actor(miner_id);
    let sealed = (0..sectors)
        .map(|i| {
            seal_sector_for(
                seal_proof,
                seed * 1000 + i as u64,
                miner_id,
                1 + i as u64,
                &work_dir.join(format!("s{i}")),
                false,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut randomness = [0u8; 32];
    rand_chacha::ChaCha20Rng::seed_from_u64(seed ^ 0x9057).fill_bytes(&mut randomness);
    randomness[31] &= 0x3f;
    let all: Vec<(u64, [u8; 32])> = sealed.iter().map(|s| (s.sector_id, s.comm_r)).collect();
    let proved: Vec<&SealedSector> = if crate::post::is_winning(proof) {
        let idx = post::generate_winning_post_sector_challenge(proof, &randomness, sealed.len() as u64, prover_id)
            .map_err(err)?;
        idx.iter().map(|&i| &sealed[i as usize]).collect()
    } else {
        sealed.iter().collect()
    };
    let ids: Vec<SectorId> = proved.iter().map(|s| SectorId::from(s.sector_id)).collect();
    let challenges = post::generate_fallback_sector_challenges(proof, &randomness, &ids, prover_id).map_err(err)?;
    let vanilla_proofs = proved
        .iter()
        .map(|s| {
            let id = SectorId::from(s.sector_id);
            let replica = PrivateReplicaInfo::new(proof, s.comm_r, s.cache.clone(), s.sealed.clone());
            post::generate_single_vanilla_proof(proof, id, &replica, &challenges[&id]).map_err(err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let per = proof.sector_count().max(1);
    let partitions = vanilla_proofs.chunks(per).map(<[_]>::to_vec).collect();
    Ok(PostFixture {
        proof,
        miner_id,
        prover_id,
        randomness,
        sectors: all,
        challenged: proved.iter().map(|s| (s.sector_id, s.comm_r)).collect(),
        vanilla_proofs,
        partitions,
    })
}

/// A SnapDeals update made with filecoin-proofs: a committed-capacity sector filled
/// with new data, its vanilla partition proofs and commitments.
pub struct UpdateFixture {
    pub proof: crate::RegisteredUpdateProof,
    pub miner_id: u64,
    pub sector_id: u64,
    /// One `generate_partition_proofs` result per update partition.
    pub vanilla_proofs: Vec<Vec<u8>>,
    pub comm_r_old: [u8; 32],
    pub comm_r_new: [u8; 32],
    pub comm_d_new: [u8; 32],
}

/// Seals a committed-capacity sector, encodes random data into it and makes the
/// update's vanilla partition proofs. Deterministic for a given `seed`.
///
/// # Errors
/// [`PorepError::Circuit`] with filecoin-proofs' message.
pub fn generate_update_vanilla(
    proof: crate::RegisteredUpdateProof,
    seed: u64,
    work_dir: &Path,
) -> Result<UpdateFixture, PorepError> {
    use filecoin_proofs_api::{seal, update, PaddedBytesAmount, UnpaddedBytesAmount};
    use rand_core::{RngCore, SeedableRng};
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let io = |e: std::io::Error| PorepError::Circuit(format!("{}: {e}", work_dir.display()));
    let size = u64::from(proof.sector_size());
    let seal_proof = crate::proof_for_sector_size(&size.to_string()).map_err(PorepError::Circuit)?;
    let key = seal_sector(seal_proof, seed, &work_dir.join("key"), true)?;
    let unpadded = UnpaddedBytesAmount::from(PaddedBytesAmount(size));
    let mut data = vec![0u8; u64::from(unpadded) as usize];
    rand_chacha::ChaCha20Rng::seed_from_u64(seed ^ 0x54a9).fill_bytes(&mut data);
    let staged = work_dir.join("new-staged");
    let mut f =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&staged).map_err(io)?;
    let (piece, _) = seal::write_and_preprocess(seal_proof, &data[..], &mut f, unpadded).map_err(err)?;
    drop(f);
    let new_replica = work_dir.join("new-sealed");
    let new_cache = work_dir.join("new-cache");
    let _ = std::fs::remove_dir_all(&new_cache);
    std::fs::create_dir_all(&new_cache).map_err(io)?;
    // filecoin-proofs writes the new replica in place: same size as the sector key.
    std::fs::File::create(&new_replica).and_then(|f| f.set_len(size)).map_err(io)?;
    let enc = update::empty_sector_update_encode_into(
        proof,
        &new_replica,
        &new_cache,
        &key.sealed,
        &key.cache,
        &staged,
        &[piece],
    )
    .map_err(err)?;
    let parts = update::generate_partition_proofs(
        proof,
        key.comm_r,
        enc.comm_r_new,
        enc.comm_d_new,
        &key.sealed,
        &key.cache,
        &new_replica,
        &new_cache,
    )
    .map_err(err)?;
    Ok(UpdateFixture {
        proof,
        miner_id: key.miner_id,
        sector_id: key.sector_id,
        vanilla_proofs: parts.into_iter().map(|p| p.0).collect(),
        comm_r_old: key.comm_r,
        comm_r_new: enc.comm_r_new,
        comm_d_new: enc.comm_d_new,
    })
}

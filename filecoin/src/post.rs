//! Proofs of spacetime from the vanilla proofs a scheduler sends: WinningPoSt
//! (`generate_winning_post_with_vanilla`), one WindowPoSt partition
//! (`generate_single_window_post_with_vanilla`, what Curio sends per request) and the
//! whole multi-partition WindowPoSt (`generate_window_post_with_vanilla`).
//!
//! Each vanilla proof is the bincode of a `FallbackPoStSectorProof` for one sector, as
//! filecoin-proofs-api's `generate_single_vanilla_proof` returns it. The circuits are
//! built exactly as filecoin-proofs builds them (same public inputs, same partition
//! split, the vanilla proofs checked the same way first), so the proofs' bytes are
//! what filecoin-proofs returns.

use filecoin_hashers::{HashFunction, Hasher};
use filecoin_proofs::{
    as_safe_commitment, parameters::winning_post_setup_params, partition_vanilla_proofs,
    single_partition_vanilla_proofs, FallbackPoStSectorProof, MerkleTreeTrait, PoStConfig, PoStType, SectorShapeBase,
    SectorShapeSub8, SectorShapeTop2,
};
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_post::fallback::{self, FallbackPoSt, FallbackPoStCompound};

use crate::{native::NativePost, partition::Partition, VanillaError};

pub use filecoin_proofs_api::RegisteredPoStProof;

/// A PoSt to prove: what `generate_winning_post_with_vanilla` /
/// `generate_(single_)window_post_with_vanilla` take.
#[derive(Clone, Debug)]
pub struct PostRequest {
    pub proof: RegisteredPoStProof,
    /// The challenge seed (32 bytes, a field element: the chain's randomness with
    /// its top two bits cleared, as Lotus and Curio pass it).
    pub randomness: [u8; 32],
    pub prover_id: [u8; 32],
    /// One `FallbackPoStSectorProof` (bincode) per sector.
    pub vanilla_proofs: Vec<Vec<u8>>,
    /// WindowPoSt: prove only this partition of the deadline, from the vanilla
    /// proofs of its sectors (`generate_single_window_post_with_vanilla`); `None`:
    /// every partition (`generate_window_post_with_vanilla`). Ignored for
    /// WinningPoSt, which has one partition.
    pub partition: Option<usize>,
}

/// Whether `proof` is a WinningPoSt type.
pub fn is_winning(proof: RegisteredPoStProof) -> bool {
    proof.typ() == filecoin_proofs_api::PoStType::Winning
}

/// The PoSt's kind as metrics and logs name it.
pub fn post_kind(proof: RegisteredPoStProof) -> &'static str {
    if is_winning(proof) {
        "winning_post"
    } else {
        "window_post"
    }
}

/// One circuit per partition of `req`, in partition order, after the vanilla
/// proofs are decoded and checked against the challenges (as filecoin-proofs does
/// before it proves).
///
/// # Errors
/// [`VanillaError`] naming the problem: wrong count, an undecodable proof, a proof
/// of another sector shape, or vanilla proofs that do not verify.
pub fn post_circuits(req: PostRequest) -> Result<Vec<Partition>, VanillaError> {
    match u64::from(req.proof.sector_size()) {
        2048 | 8_388_608 | 536_870_912 => circuits::<SectorShapeBase>(req),
        34_359_738_368 => circuits::<SectorShapeSub8>(req),
        68_719_476_736 => circuits::<SectorShapeTop2>(req),
        s => Err(VanillaError::Invalid { kind: post_kind(req.proof), msg: format!("unknown sector size {s}") }),
    }
}

/// Decodes the vanilla proofs (bincode `FallbackPoStSectorProof<Tree>`).
pub(crate) fn decode_sector_proofs<Tree: MerkleTreeTrait>(
    kind: &'static str,
    proof: RegisteredPoStProof,
    bytes: &[Vec<u8>],
) -> Result<Vec<FallbackPoStSectorProof<Tree>>, VanillaError> {
    bytes
        .iter()
        .enumerate()
        .map(|(index, b)| {
            let p: FallbackPoStSectorProof<Tree> = crate::vanilla::decode(b).map_err(|msg| VanillaError::Decode {
                kind,
                index,
                len: b.len(),
                what: "FallbackPoStSectorProof",
                proof: format!("{proof:?}"),
                msg,
            })?;
            Ok(p)
        })
        .collect()
}

/// Each sector's vanilla proof has one Merkle inclusion proof per challenge, each
/// with the path of the sector shape's tree R: filecoin-proofs indexes them before
/// it checks them (a panic on an empty list, a short path or an out-of-range
/// position), so another shape is refused here, named.
fn check_shape<Tree: 'static + MerkleTreeTrait>(
    config: &PoStConfig,
    vanilla: &[FallbackPoStSectorProof<Tree>],
) -> Result<(), String> {
    let nodes = usize::try_from(u64::from(config.sector_size) / 32).unwrap_or(usize::MAX);
    let tree = crate::c1::TreeShape::of::<Tree::Arity, Tree::SubTreeArity, Tree::TopTreeArity>(nodes);
    for (i, v) in vanilla.iter().enumerate() {
        // One sector's proof, as `generate_single_vanilla_proof` makes it: with none,
        // filecoin-proofs' WindowPoSt padding indexes an empty list (a panic found by
        // the `vanilla_post` fuzz target); with several, the partition is misshapen.
        let n = v.vanilla_proof.sectors.len();
        if n != 1 {
            return Err(format!(
                "vanilla proof {i} (sector {}): {n} sector proofs inside; want 1 (one vanilla proof per sector)",
                v.sector_id
            ));
        }
        let domains =
            v.vanilla_proof.sectors.iter().flat_map(|sp| [("comm_c", &sp.comm_c), ("comm_r_last", &sp.comm_r_last)]);
        for (name, d) in std::iter::once(("comm_r", &v.comm_r)).chain(domains) {
            if !crate::vanilla::is_field_element(d.as_ref()) {
                return Err(format!("vanilla proof {i} (sector {}): its {name} is not a field element", v.sector_id));
            }
        }
        for sp in &v.vanilla_proof.sectors {
            let got = sp.inclusion_proofs.len();
            if got != config.challenge_count {
                return Err(format!(
                    "vanilla proof {i} (sector {}): {got} inclusion proofs; want {} (one per challenge)",
                    v.sector_id, config.challenge_count
                ));
            }
            for (c, p) in sp.inclusion_proofs.iter().enumerate() {
                crate::c1::path_shape(p, &tree)
                    .map_err(|e| format!("vanilla proof {i} (sector {}), challenge {c}: {e}", v.sector_id))?;
            }
        }
    }
    Ok(())
}

fn circuits<Tree: 'static + MerkleTreeTrait>(req: PostRequest) -> Result<Vec<Partition>, VanillaError> {
    let kind = post_kind(req.proof);
    let invalid = |msg: String| VanillaError::Invalid { kind, msg };
    let circuit_err = |e: anyhow::Error| invalid(format!("{e:#}"));
    if req.vanilla_proofs.is_empty() {
        return Err(VanillaError::Count { kind, got: 0, want: "at least one (one per sector)".into() });
    }
    let config: PoStConfig = req.proof.as_v1_config();
    let winning = config.typ == PoStType::Winning;
    if winning && req.vanilla_proofs.len() != config.sector_count {
        return Err(VanillaError::Count {
            kind,
            got: req.vanilla_proofs.len(),
            want: format!("{} (WinningPoSt proves {} challenged sector)", config.sector_count, config.sector_count),
        });
    }
    if !winning && req.partition.is_some() && req.vanilla_proofs.len() > config.sector_count {
        return Err(VanillaError::Count {
            kind,
            got: req.vanilla_proofs.len(),
            want: format!(
                "at most {} for one WindowPoSt partition of {:?} (its sectors only)",
                config.sector_count, req.proof
            ),
        });
    }
    let vanilla = decode_sector_proofs::<Tree>(kind, req.proof, &req.vanilla_proofs)?;
    check_shape::<Tree>(&config, &vanilla).map_err(invalid)?;
    let randomness: <Tree::Hasher as Hasher>::Domain =
        as_safe_commitment(&req.randomness, "randomness").map_err(circuit_err)?;
    let prover_id: <Tree::Hasher as Hasher>::Domain =
        as_safe_commitment(&req.prover_id, "prover_id").map_err(circuit_err)?;
    let sectors: Vec<_> =
        vanilla.iter().map(|v| fallback::PublicSector { id: v.sector_id, comm_r: v.comm_r }).collect();
    // filecoin-proofs' vanilla check takes comm_r_last from the Merkle paths, the
    // circuit from the proof's own field: check that field here, or a corrupted one
    // is found only when the SNARK fails to verify.
    for v in &vanilla {
        for sp in &v.vanilla_proof.sectors {
            if <Tree::Hasher as Hasher>::Function::hash2(&sp.comm_c, &sp.comm_r_last) != v.comm_r {
                return Err(invalid(format!(
                    "sector {}: comm_r is not H(comm_c, comm_r_last) of its vanilla proof (corrupted, or of another \
                     sector)",
                    v.sector_id
                )));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = vanilla.iter().find(|v| !seen.insert(v.sector_id)) {
        return Err(invalid(format!("sector {} has more than one vanilla proof", dup.sector_id)));
    }

    let (vanilla_params, partitions) = if winning {
        (winning_post_setup_params(&config).map_err(circuit_err)?, None)
    } else {
        let n = vanilla.len().div_ceil(config.sector_count);
        let params = filecoin_proofs::parameters::window_post_setup_params(&config);
        (params, (req.partition.is_none() && n > 1).then_some(n))
    };
    let setup = compound_proof::SetupParams { vanilla_params, partitions, priority: config.priority };
    let pub_params: compound_proof::PublicParams<'_, FallbackPoSt<'_, Tree>> =
        FallbackPoStCompound::setup(&setup).map_err(circuit_err)?;
    let vp = pub_params.vanilla_params;

    // (public inputs, one vanilla proof per partition), as filecoin-proofs forms them.
    let (pub_inputs, partition_proofs) = match (winning, req.partition) {
        (false, Some(k)) => {
            let pub_inputs = fallback::PublicInputs { randomness, prover_id, sectors, k: Some(k) };
            let p = single_partition_vanilla_proofs(&config, &vp, &pub_inputs, &vanilla).map_err(circuit_err)?;
            (pub_inputs, vec![p])
        }
        _ => {
            let pub_inputs = fallback::PublicInputs { randomness, prover_id, sectors, k: None };
            let n = partitions.unwrap_or(1);
            let p = partition_vanilla_proofs(&config, &vp, &pub_inputs, n, &vanilla).map_err(circuit_err)?;
            (pub_inputs, p)
        }
    };
    partition_proofs
        .into_iter()
        .enumerate()
        .map(|(k, proof)| {
            let circuit = <FallbackPoStCompound<Tree> as CompoundProof<_, _>>::circuit(
                &pub_inputs,
                Default::default(),
                &proof,
                &vp,
                Some(k),
            )
            .map_err(circuit_err)?;
            let native = NativePost::<Tree>::new(&circuit, &proof)?;
            Ok(Partition::with_native(circuit, move |cs| native.generate(cs)))
        })
        .collect()
}

/// filecoin-proofs' public parameters of a PoSt type (what its blank circuit and
/// its parameter file are made for).
pub(crate) fn post_public_params<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredPoStProof,
) -> anyhow::Result<fallback::PublicParams> {
    let config = proof.as_v1_config();
    match config.typ {
        PoStType::Winning => filecoin_proofs::parameters::winning_post_public_params::<Tree>(&config),
        PoStType::Window => filecoin_proofs::parameters::window_post_public_params::<Tree>(&config),
    }
}

/// The blank circuit of a PoSt type for sector shape `Tree`.
pub(crate) fn blank<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredPoStProof,
) -> anyhow::Result<fallback::FallbackPoStCircuit<Tree>> {
    let pp = post_public_params::<Tree>(proof)?;
    Ok(<FallbackPoStCompound<Tree> as CompoundProof<_, _>>::blank_circuit(&pp))
}

//! SnapDeals (empty-sector update) proofs from the vanilla partition proofs and the
//! old/new commitments: what `generate_empty_sector_update_proof_with_vanilla` does,
//! one circuit per update partition, built exactly as filecoin-proofs builds them.
//!
//! Each vanilla proof is the bincode of a `PartitionProof` for one update partition,
//! as filecoin-proofs-api's `generate_partition_proofs` returns them.

use filecoin_hashers::{Domain, Hasher};
use filecoin_proofs::{
    DefaultPieceDomain, MerkleTreeTrait, SectorShapeBase, SectorShapeSub8, SectorShapeTop2, SectorUpdateConfig,
    TreeRHasher,
};
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_update::{
    EmptySectorUpdateCircuit, EmptySectorUpdateCompound, PartitionProof, PublicInputs, PublicParams, SetupParams,
};

use crate::{partition::Partition, VanillaError};

pub use filecoin_proofs_api::RegisteredUpdateProof;

const KIND: &str = "snap_deals";

/// A SnapDeals update proof to make.
#[derive(Clone, Debug)]
pub struct UpdateRequest {
    pub proof: RegisteredUpdateProof,
    /// One `PartitionProof` (bincode) per update partition, in partition order.
    pub vanilla_proofs: Vec<Vec<u8>>,
    pub comm_r_old: [u8; 32],
    pub comm_r_new: [u8; 32],
    pub comm_d_new: [u8; 32],
}

/// Update partitions of a sector size (16 at 32GiB and 64GiB).
pub fn update_partitions(proof: RegisteredUpdateProof) -> usize {
    usize::from(SectorUpdateConfig::from_porep_config(&proof.as_v1_config()).update_partitions)
}

/// One circuit per update partition, after the vanilla proofs are decoded and
/// checked against the commitments.
///
/// # Errors
/// [`VanillaError`] naming the problem: wrong count, an undecodable proof, a
/// commitment that is not a field element, or vanilla proofs that do not verify
/// against the commitments.
pub fn update_circuits(req: UpdateRequest) -> Result<Vec<Partition>, VanillaError> {
    match u64::from(req.proof.sector_size()) {
        2048 | 8_388_608 | 536_870_912 => circuits::<SectorShapeBase>(req),
        34_359_738_368 => circuits::<SectorShapeSub8>(req),
        68_719_476_736 => circuits::<SectorShapeTop2>(req),
        s => Err(VanillaError::Invalid { kind: KIND, msg: format!("unknown sector size {s}") }),
    }
}

/// Each challenge's Merkle proofs have the paths of trees R (old and new: the
/// sector shape's) and D (binary): storage-proofs-update indexes them before it
/// checks them (a panic on a short path or an out-of-range position), so another
/// shape is refused here, named.
fn check_shape<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    config: &SectorUpdateConfig,
    proofs: &[PartitionProof<Tree>],
) -> Result<(), String> {
    use crate::c1::{path_shape, TreeShape};
    let nodes = config.nodes_count;
    let tree_r = TreeShape::of::<Tree::Arity, Tree::SubTreeArity, Tree::TopTreeArity>(nodes);
    let tree_d = TreeShape::of::<typenum::U2, typenum::U0, typenum::U0>(nodes);
    for (k, p) in proofs.iter().enumerate() {
        if !crate::vanilla::is_field_element(p.comm_c.as_ref()) {
            return Err(format!("vanilla proof {k}: its comm_c is not a field element"));
        }
        if let Some(i) = p.apex_leafs.iter().position(|d| !crate::vanilla::is_field_element(d.as_ref())) {
            return Err(format!("vanilla proof {k}: apex leaf {i} is not a field element"));
        }
        for (c, cp) in p.challenge_proofs.iter().enumerate() {
            let at = |which: &str, e: String| format!("vanilla proof {k}, challenge {c}, {which}: {e}");
            path_shape(&cp.proof_r_old, &tree_r).map_err(|e| at("proof_r_old (tree R old)", e))?;
            path_shape(&cp.proof_d_new, &tree_d).map_err(|e| at("proof_d_new (tree D new)", e))?;
            path_shape(&cp.proof_r_new, &tree_r).map_err(|e| at("proof_r_new (tree R new)", e))?;
        }
    }
    Ok(())
}

fn circuits<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    req: UpdateRequest,
) -> Result<Vec<Partition>, VanillaError> {
    let invalid = |msg: String| VanillaError::Invalid { kind: KIND, msg };
    let config = SectorUpdateConfig::from_porep_config(&req.proof.as_v1_config());
    let partitions = usize::from(config.update_partitions);
    if req.vanilla_proofs.len() != partitions {
        return Err(VanillaError::Count {
            kind: KIND,
            got: req.vanilla_proofs.len(),
            want: format!("{partitions} (one per update partition of {:?})", req.proof),
        });
    }
    let proofs = req
        .vanilla_proofs
        .iter()
        .enumerate()
        .map(|(index, b)| {
            crate::vanilla::decode::<PartitionProof<Tree>>(b).map_err(|msg| VanillaError::Decode {
                kind: KIND,
                index,
                len: b.len(),
                what: "PartitionProof",
                proof: format!("{:?}", req.proof),
                msg,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_shape::<Tree>(&config, &proofs).map_err(invalid)?;
    // `try_from_bytes` takes any 32 bytes: the range is checked here.
    let in_range = |name: &'static str, b: &[u8; 32]| {
        if crate::vanilla::is_field_element(b) {
            Ok(())
        } else {
            Err(invalid(format!("{name} is not a field element (at or above the BLS12-381 scalar modulus)")))
        }
    };
    in_range("comm_r_old", &req.comm_r_old)?;
    in_range("comm_r_new", &req.comm_r_new)?;
    in_range("comm_d_new", &req.comm_d_new)?;
    let field = |name: &'static str, b: &[u8; 32]| {
        <TreeRHasher as Hasher>::Domain::try_from_bytes(b)
            .map_err(|e| invalid(format!("{name} is not a field element: {e:#}")))
    };
    let comm_r_old = field("comm_r_old", &req.comm_r_old)?;
    let comm_r_new = field("comm_r_new", &req.comm_r_new)?;
    let comm_d_new = DefaultPieceDomain::try_from_bytes(&req.comm_d_new)
        .map_err(|e| invalid(format!("comm_d_new is not a field element: {e:#}")))?;
    let valid = filecoin_proofs::verify_partition_proofs::<Tree>(
        config,
        &proofs,
        req.comm_r_old,
        req.comm_r_new,
        req.comm_d_new,
    )
    .map_err(|e| invalid(format!("checking the vanilla partition proofs: {e:#}")))?;
    if !valid {
        return Err(invalid(
            "the vanilla partition proofs do not verify against comm_r_old, comm_r_new and comm_d_new \
             (corrupted, or for another sector or update)"
                .into(),
        ));
    }
    let pub_inputs = PublicInputs { k: partitions, comm_r_old, comm_d_new, comm_r_new, h: config.h };
    let setup = compound_proof::SetupParams {
        vanilla_params: SetupParams { sector_bytes: u64::from(config.sector_size) },
        partitions: Some(partitions),
        priority: false,
    };
    let pub_params = EmptySectorUpdateCompound::<Tree>::setup(&setup).map_err(|e| invalid(format!("{e:#}")))?;
    proofs
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let circuit = <EmptySectorUpdateCompound<Tree> as CompoundProof<_, _>>::circuit(
                &pub_inputs,
                (),
                p,
                &pub_params.vanilla_params,
                Some(k),
            )
            .map_err(|e| invalid(format!("{e:#}")))?;
            // The circuit has no Clone: the native generator gets its own copy.
            let native = <EmptySectorUpdateCompound<Tree> as CompoundProof<_, _>>::circuit(
                &pub_inputs,
                (),
                p,
                &pub_params.vanilla_params,
                Some(k),
            )
            .map_err(|e| invalid(format!("{e:#}")))?;
            Ok(Partition::with_native(circuit, move |cs| crate::native::generate_update(native, cs)))
        })
        .collect()
}

/// The update circuit's public parameters for `proof`'s sector size.
pub(crate) fn public_params(proof: RegisteredUpdateProof) -> PublicParams {
    PublicParams::from_sector_size(u64::from(proof.sector_size()))
}

/// The blank circuit of an update proof type for sector shape `Tree`.
pub(crate) fn blank<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    proof: RegisteredUpdateProof,
) -> EmptySectorUpdateCircuit<Tree> {
    <EmptySectorUpdateCompound<Tree> as CompoundProof<_, _>>::blank_circuit(&public_params(proof))
}

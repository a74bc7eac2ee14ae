//! Shape-only C1 outputs (test and benchmark inputs only): a C1 of exactly the
//! structure a real one of the registered proof has — partitions, challenges per
//! partition, Merkle paths of the real depths and arities, 6 DRG and 8 expansion
//! parent columns of every layer, one labeling proof per layer and 37 parents each —
//! with fabricated values. Its circuits are the real circuits at their real size and
//! density (random field elements, as real hashes are), so synthesis and proving are
//! measured at full size without sealing a 32GiB or 64GiB sector first. **Proofs made
//! from it never verify**: the values are not a sealed replica's.
//!
//! The replica id is derived from the prover id, sector number, ticket and comm_d as
//! a real one is, so the input passes Ingest's checks and fails only at Verify.

use filecoin_hashers::{Domain, Hasher};
use filecoin_proofs::{DefaultPieceHasher, MerkleTreeTrait, SectorShapeBase, SectorShapeSub8, SectorShapeTop2};
use filecoin_proofs_api::seal::{SealCommitPhase1Output, VanillaSealProof};
use rand_core::{RngCore, SeedableRng};
use storage_proofs_core::merkle::MerkleProof;
use storage_proofs_porep::stacked::{
    self, Column, ColumnProof, EncodingProof, LabelingProof, ReplicaColumnProof, TOTAL_PARENTS,
};

use crate::{c1::Expected, c1::TreeShape, PorepError, RegisteredSealProof};

type Rng = rand_chacha::ChaCha20Rng;
type TreeHasher = filecoin_proofs::DefaultTreeHasher;
type TreeDomain = <TreeHasher as Hasher>::Domain;

/// The roots every challenge's paths end in.
struct Roots {
    comm_d: <DefaultPieceHasher as Hasher>::Domain,
    comm_c: TreeDomain,
    comm_r_last: TreeDomain,
}

/// A shape-only C1 output for `proof`, bound to `prover_id` and `sector_id`;
/// deterministic per `seed`. See the module docs: its proofs never verify.
///
/// # Errors
/// [`PorepError::Unsupported`] for a sector size filecoin-proofs has no circuit for;
/// [`PorepError::Circuit`] when its public parameters cannot be set up.
pub fn shape_only_c1(
    proof: RegisteredSealProof,
    prover_id: [u8; 32],
    sector_id: u64,
    seed: u64,
) -> Result<SealCommitPhase1Output, PorepError> {
    let mut rng = Rng::seed_from_u64(seed);
    // Canonical field elements, as commitments and tickets are.
    let bytes32 = |rng: &mut Rng| {
        let d = <<filecoin_proofs::DefaultTreeHasher as Hasher>::Domain as Domain>::random(rng);
        let mut b = [0u8; 32];
        b.copy_from_slice(&d.into_bytes());
        b
    };
    let (comm_d, ticket, seed_c) = (bytes32(&mut rng), bytes32(&mut rng), bytes32(&mut rng));
    // The sector's tree roots: every challenge's paths end in them, as filecoin's
    // circuit builder requires; comm_r is made from comm_c and comm_r_last as a real
    // one is.
    let roots = Roots {
        comm_d: <DefaultPieceHasher as Hasher>::Domain::try_from_bytes(&comm_d)
            .map_err(|e| PorepError::Circuit(format!("{e:#}")))?,
        comm_c: Domain::random(&mut rng),
        comm_r_last: Domain::random(&mut rng),
    };
    let comm_r = <<TreeHasher as Hasher>::Function as filecoin_hashers::HashFunction<_>>::hash2(
        &roots.comm_c,
        &roots.comm_r_last,
    );
    let mut comm_r_bytes = [0u8; 32];
    comm_r_bytes.copy_from_slice(&comm_r.into_bytes());
    let partitions = usize::from(proof.partitions());
    use VanillaSealProof::*;
    let r = (&roots, &mut rng);
    let vanilla_proofs = match u64::from(proof.sector_size()) {
        2048 => StackedDrg2KiBV1(proofs::<SectorShapeBase>(proof, partitions, r)?),
        8_388_608 => StackedDrg8MiBV1(proofs::<SectorShapeBase>(proof, partitions, r)?),
        536_870_912 => StackedDrg512MiBV1(proofs::<SectorShapeBase>(proof, partitions, r)?),
        34_359_738_368 => StackedDrg32GiBV1(proofs::<SectorShapeSub8>(proof, partitions, r)?),
        68_719_476_736 => StackedDrg64GiBV1(proofs::<SectorShapeTop2>(proof, partitions, r)?),
        _ => return Err(PorepError::Unsupported(proof, "unknown sector size")),
    };
    let comm_d_domain = roots.comm_d;
    let porep_id = proof.as_v1_config().porep_id;
    let replica_id = storage_proofs_porep::stacked::generate_replica_id::<filecoin_proofs::DefaultTreeHasher, _>(
        &prover_id,
        sector_id,
        &ticket,
        comm_d_domain,
        &porep_id,
    );
    Ok(SealCommitPhase1Output {
        registered_proof: proof,
        vanilla_proofs,
        comm_r: comm_r_bytes,
        comm_d,
        replica_id,
        seed: seed_c,
        ticket,
    })
}

/// [`shape_only_c1`] as a fixture, for the miner and sector [`crate::generate_c1`]
/// would use for `seed` (miner f0<1000 + seed>, sector 1000 + seed mod 1000).
///
/// # Errors
/// As [`shape_only_c1`].
pub fn shape_only_fixture(proof: RegisteredSealProof, seed: u64) -> Result<crate::C1Fixture, PorepError> {
    let (miner_id, sector_id) = (1000 + seed, 1000 + seed % 1000);
    let c1 = shape_only_c1(proof, crate::prover_id_from_actor(miner_id), sector_id, seed)?;
    crate::fixture::fixture(c1, miner_id, sector_id)
}

fn proofs<Tree: 'static + MerkleTreeTrait<Hasher = TreeHasher>>(
    proof: RegisteredSealProof,
    partitions: usize,
    (roots, rng): (&Roots, &mut Rng),
) -> Result<Vec<Vec<stacked::Proof<Tree, DefaultPieceHasher>>>, PorepError> {
    let want = Expected::of::<Tree>(proof)?;
    let nodes = 1u64 << want.tree_d.arities.len();
    Ok((0..partitions)
        .map(|_| (0..want.challenges).map(|_| challenge::<Tree>(&want, nodes, roots, rng)).collect())
        .collect())
}

fn challenge<Tree: 'static + MerkleTreeTrait<Hasher = TreeHasher>>(
    want: &Expected,
    nodes: u64,
    roots: &Roots,
    rng: &mut Rng,
) -> stacked::Proof<Tree, DefaultPieceHasher> {
    let column = |rng: &mut Rng| {
        let rows = (0..want.layers).map(|_| Domain::random(rng)).collect();
        let index = u32::try_from(rng.next_u64() % nodes).unwrap_or(0);
        let column = Column::<Tree::Hasher>::new(index, rows).expect("Column::new does not fail");
        ColumnProof::from_column(column, merkle_proof::<Tree::Hasher, _, _, _>(&want.tree_rc, roots.comm_c, rng))
            .expect("ColumnProof::from_column does not fail")
    };
    let node = rng.next_u64() % nodes;
    let parents = |rng: &mut Rng| (0..TOTAL_PARENTS).map(|_| Domain::random(rng)).collect::<Vec<_>>();
    let layers = u32::try_from(want.layers).unwrap_or(u32::MAX);
    stacked::Proof {
        comm_d_proofs: merkle_proof::<DefaultPieceHasher, _, _, _>(&want.tree_d, roots.comm_d, rng),
        comm_r_last_proof: merkle_proof::<Tree::Hasher, _, _, _>(&want.tree_rc, roots.comm_r_last, rng),
        replica_column_proofs: ReplicaColumnProof {
            c_x: column(rng),
            drg_parents: (0..want.drg_parents).map(|_| column(rng)).collect(),
            exp_parents: (0..want.exp_parents).map(|_| column(rng)).collect(),
        },
        labeling_proofs: (1..=layers).map(|layer| LabelingProof::new(layer, node, parents(rng))).collect(),
        encoding_proof: EncodingProof::new(layers, node, parents(rng)),
    }
}

/// A Merkle proof ending in `root` with `tree`'s levels (random leaf, siblings and
/// positions), in the form (single, sub or top tree) its arities give.
fn merkle_proof<H: Hasher, A, B, C>(tree: &TreeShape, root: H::Domain, rng: &mut Rng) -> MerkleProof<H, A, B, C>
where
    A: 'static + filecoin_hashers::PoseidonArity,
    B: 'static + filecoin_hashers::PoseidonArity,
    C: 'static + filecoin_hashers::PoseidonArity,
{
    let path = tree
        .arities
        .iter()
        .map(|&arity| {
            let hashes = (0..arity - 1).map(|_| Domain::random(rng)).collect();
            (hashes, (rng.next_u64() % arity as u64) as usize)
        })
        .collect();
    MerkleProof::from_parts(Domain::random(rng), root, path)
}

//! The native witness generators of Filecoin's circuits.
//!
//! Each walks a circuit's `synthesize` step for step on a [`WitnessCs`]: the same
//! allocations in the same order, with SHA-256, Poseidon, the Merkle paths and the
//! bit decompositions computed by `cuzk_synth::native` (values only, no
//! `LinearCombination`) and the cheap gadgets that remain (Merkle `insert`, input
//! packing, `AllocatedNum` arithmetic, encoding) called as the circuit calls them.
//!
//! - [`NativePorep`]: storage-proofs-porep's `StackedCircuit::synthesize` and its
//!   per-challenge `Proof::synthesize`. The labels (20 SHA-256 compressions per layer
//!   per challenge) and tree D's path are most of a partition. The circuit's own
//!   per-challenge type is private to storage-proofs-porep, so the generator takes
//!   its inputs from the vanilla proofs as `StackedCompound::circuit` does; two of
//!   the fields it needs (a column proof's inclusion path and a labelling proof's
//!   node) are crate-private there and are read through the vanilla proof's serde
//!   form (bincode, in memory), their published wire format.
//! - [`NativePost`]: storage-proofs-post's `FallbackPoStCircuit` (WinningPoSt and
//!   WindowPoSt): per sector comm_r's Poseidon and one tree R path per challenge.
//! - [`generate_update`]: storage-proofs-update's `EmptySectorUpdateCircuit`
//!   (SnapDeals), its crate-private gadgets ported.
//!
//! `tests/native.rs` checks that the inputs, aux values and constraint count equal
//! the circuits', over several sectors and every partition.

mod poseidon;

use std::marker::PhantomData;

use bellperson::{
    gadgets::{
        boolean::{AllocatedBit, Boolean},
        multipack,
        num::AllocatedNum,
    },
    SynthesisError,
};
use blstrs::Scalar as Fr;
use cuzk_synth::{
    native::{self, Bit},
    WitnessCs,
};
use ff::{Field, PrimeField, PrimeFieldBits};
use filecoin_hashers::{Hasher, PoseidonArity, POSEIDON_CONSTANTS_11, POSEIDON_CONSTANTS_2};
use filecoin_proofs::{DefaultPieceHasher, DefaultTreeHasher, MerkleTreeTrait};
use serde::Deserialize;
use storage_proofs_core::{
    gadgets::{constraint, encode::encode, insertion, uint64::UInt64},
    merkle::{MerkleProof, MerkleProofTrait},
};
use storage_proofs_porep::stacked;
use storage_proofs_update::constants as update_constants;
use typenum::{Unsigned, U2};

use crate::{PorepError, VanillaError};

type TreeProof<Tree> = MerkleProof<
    <Tree as MerkleTreeTrait>::Hasher,
    <Tree as MerkleTreeTrait>::Arity,
    <Tree as MerkleTreeTrait>::SubTreeArity,
    <Tree as MerkleTreeTrait>::TopTreeArity,
>;
/// A Merkle path as `MerkleProofTrait::as_options` gives it: per level the siblings
/// and the node's index among them (base levels, then the sub- and top-tree's).
type PathOptions = Vec<(Vec<Option<Fr>>, Option<usize>)>;
type Domain = <DefaultTreeHasher as Hasher>::Domain;

/// `stacked::ColumnProof`'s serde form.
#[derive(Deserialize)]
struct ColumnProofWire<P> {
    column: ColumnWire,
    inclusion_proof: P,
}

/// `stacked::Column`'s serde form.
#[derive(Deserialize)]
struct ColumnWire {
    _index: u32,
    rows: Vec<Domain>,
    _h: PhantomData<()>,
}

/// `stacked::ReplicaColumnProof`'s serde form.
#[derive(Deserialize)]
struct ReplicaColumnProofWire<P> {
    c_x: ColumnProofWire<P>,
    drg_parents: Vec<ColumnProofWire<P>>,
    exp_parents: Vec<ColumnProofWire<P>>,
}

/// `stacked::LabelingProof`'s serde form.
#[derive(Deserialize)]
struct LabelingProofWire {
    _parents: Vec<Domain>,
    _layer_index: u32,
    node: u64,
}

/// A parent's column: its value at every layer and its path in tree C.
struct Column {
    rows: Vec<Fr>,
    path: PathOptions,
}

/// One challenge's part of the circuit (storage-proofs-porep's circuit `Proof`).
struct Challenge {
    /// Tree D's path as `MerkleProofTrait::as_options` gives it: per level the
    /// sibling and the node's index among the two.
    comm_d_path: PathOptions,
    data_leaf: Fr,
    challenge: u64,
    comm_r_last_path: PathOptions,
    comm_c_path: PathOptions,
    drg_parents: Vec<Column>,
    exp_parents: Vec<Column>,
}

/// One PoRep partition's witness, generated natively (see the module docs).
pub(crate) struct NativePorep<Tree: MerkleTreeTrait> {
    replica_id: Fr,
    comm_d: Fr,
    comm_r: Fr,
    comm_r_last: Fr,
    comm_c: Fr,
    challenges: Vec<Challenge>,
    /// The tree shape of the Poseidon paths (`fn` keeps the generator `Send`).
    _tree: PhantomData<fn() -> Tree>,
}

fn wire<T: serde::Serialize, W: serde::de::DeserializeOwned>(value: &T) -> Result<W, PorepError> {
    let bytes = bincode::serialize(value).map_err(|e| PorepError::Circuit(format!("native witness inputs: {e}")))?;
    bincode::deserialize(&bytes).map_err(|e| PorepError::Circuit(format!("native witness inputs: {e}")))
}

fn column<Tree: MerkleTreeTrait<Hasher = DefaultTreeHasher>>(c: ColumnProofWire<TreeProof<Tree>>) -> Column {
    Column { rows: c.column.rows.into_iter().map(Into::into).collect(), path: c.inclusion_proof.as_options() }
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = DefaultTreeHasher>> NativePorep<Tree> {
    /// The generator of partition `vanilla`'s circuit, from the inputs
    /// `StackedCompound::circuit` builds that circuit from.
    pub(crate) fn new(
        public: &stacked::PublicInputs<Domain, <DefaultPieceHasher as Hasher>::Domain>,
        vanilla: &[stacked::Proof<Tree, DefaultPieceHasher>],
    ) -> Result<Self, PorepError> {
        let first = vanilla.first().ok_or_else(|| PorepError::Circuit("a partition without challenges".into()))?;
        let (comm_r_last, comm_c) = (first.comm_r_last(), first.comm_c());
        if vanilla.iter().any(|p| p.comm_r_last() != comm_r_last || p.comm_c() != comm_c) {
            return Err(PorepError::Circuit("inconsistent comm_r_last or comm_c across challenges".into()));
        }
        let tau = public.tau.as_ref().ok_or_else(|| PorepError::Circuit("no comm_d/comm_r".into()))?;
        let challenges = vanilla
            .iter()
            .map(|p| {
                let columns: ReplicaColumnProofWire<TreeProof<Tree>> = wire(&p.replica_column_proofs)?;
                let label: LabelingProofWire =
                    wire(p.labeling_proofs.first().ok_or_else(|| PorepError::Circuit("no labelling proofs".into()))?)?;
                Ok(Challenge {
                    comm_d_path: p.comm_d_proofs.as_options(),
                    data_leaf: p.comm_d_proofs.leaf().into(),
                    challenge: label.node,
                    comm_r_last_path: p.comm_r_last_proof.as_options(),
                    comm_c_path: columns.c_x.inclusion_proof.as_options(),
                    drg_parents: columns.drg_parents.into_iter().map(column::<Tree>).collect(),
                    exp_parents: columns.exp_parents.into_iter().map(column::<Tree>).collect(),
                })
            })
            .collect::<Result<_, PorepError>>()?;
        Ok(NativePorep {
            replica_id: public.replica_id.into(),
            comm_d: tau.comm_d.into(),
            comm_r: tau.comm_r.into(),
            comm_r_last: comm_r_last.into(),
            comm_c: comm_c.into(),
            challenges,
            _tree: PhantomData,
        })
    }

    /// `StackedCircuit::synthesize`.
    pub(crate) fn generate(self, cs: &mut WitnessCs) -> Result<(), SynthesisError> {
        let replica_id = AllocatedNum::alloc(&mut *cs, || Ok(self.replica_id))?;
        replica_id.inputize(&mut *cs)?;
        let replica_id_bits = bits_be_per_byte(cs, self.replica_id);
        let comm_d = AllocatedNum::alloc(&mut *cs, || Ok(self.comm_d))?;
        comm_d.inputize(&mut *cs)?;
        let comm_r = AllocatedNum::alloc(&mut *cs, || Ok(self.comm_r))?;
        comm_r.inputize(&mut *cs)?;
        let comm_r_last = AllocatedNum::alloc(&mut *cs, || Ok(self.comm_r_last))?;
        let comm_c = AllocatedNum::alloc(&mut *cs, || Ok(self.comm_c))?;
        // PoseidonFunction::hash2_circuit.
        let hash = poseidon::poseidon_hash(cs, &[self.comm_c, self.comm_r_last], U2::PARAMETERS())?;
        constraint::equal(cs, || "comm_r = H(comm_c || comm_r_last)", &comm_r, &hash);
        for challenge in self.challenges {
            challenge.generate::<Tree>(cs, &comm_d, &comm_c, &comm_r_last, &replica_id_bits)?;
        }
        Ok(())
    }
}

impl Challenge {
    /// storage-proofs-porep's circuit `Proof::synthesize`.
    fn generate<Tree: MerkleTreeTrait>(
        self,
        cs: &mut WitnessCs,
        comm_d: &AllocatedNum<Fr>,
        comm_c: &AllocatedNum<Fr>,
        comm_r_last: &AllocatedNum<Fr>,
        replica_id: &[Bit],
    ) -> Result<(), SynthesisError> {
        let data_leaf = AllocatedNum::alloc(&mut *cs, || Ok(self.data_leaf))?;
        sha256_inclusion(cs, self.comm_d_path, comm_d, &data_leaf)?;

        let layers = self.drg_parents.first().map_or(0, |c| c.rows.len());
        let mut columns = |parents: Vec<Column>| -> Result<Vec<Vec<AllocatedNum<Fr>>>, SynthesisError> {
            parents
                .into_iter()
                .map(|p| {
                    assert_eq!(p.rows.len(), layers, "every column has a row per layer");
                    let col = p
                        .rows
                        .iter()
                        .map(|v| AllocatedNum::alloc(&mut *cs, || Ok(*v)))
                        .collect::<Result<Vec<_>, _>>()?;
                    let hash = hash_column(cs, &col)?;
                    poseidon_inclusion::<Tree>(cs, p.path, comm_c, &hash)?;
                    Ok(col)
                })
                .collect()
        };
        let drg = columns(self.drg_parents)?;
        let exp = columns(self.exp_parents)?;

        let challenge = UInt64::alloc(&mut *cs, Some(self.challenge))?;
        challenge.pack_into_input(&mut *cs)?;
        let challenge_bits = bits(&challenge.to_bits_be())?;

        let mut labels = Vec::with_capacity(layers);
        for layer in 1..=layers {
            let mut parents: Vec<Vec<Bit>> = Vec::with_capacity(14);
            for col in &drg {
                parents.push(bits_be_per_byte(cs, value(&col[layer - 1])?));
            }
            if layer > 1 {
                for col in &exp {
                    parents.push(bits_be_per_byte(cs, value(&col[layer - 2])?));
                }
            }
            labels.push(create_label(cs, replica_id, &parents, layer as u32, &challenge_bits)?);
        }

        let key = labels.last().ok_or(SynthesisError::Unsatisfiable)?;
        let encoded = encode(&mut *cs, key, &data_leaf)?;
        poseidon_inclusion::<Tree>(cs, self.comm_r_last_path, comm_r_last, &encoded)?;
        let column_hash = hash_column(cs, &labels)?;
        poseidon_inclusion::<Tree>(cs, self.comm_c_path, comm_c, &column_hash)
    }
}

/// One PoSt partition's witness, generated natively: storage-proofs-post's
/// `FallbackPoStCircuit::synthesize` (the non-extensible path, as on a
/// `WitnessCs`), every Poseidon native.
pub(crate) struct NativePost<Tree: MerkleTreeTrait> {
    sectors: Vec<PostSector>,
    _tree: PhantomData<fn() -> Tree>,
}

struct PostSector {
    comm_r: Fr,
    comm_c: Fr,
    comm_r_last: Fr,
    /// Per challenge: the leaf and its path in tree R.
    challenges: Vec<(Fr, PathOptions)>,
}

impl<Tree: 'static + MerkleTreeTrait> NativePost<Tree> {
    /// The generator of `circuit`, the circuit `FallbackPoStCompound::circuit` made
    /// from `vanilla` (whose Merkle paths the circuit keeps in a private form).
    pub(crate) fn new(
        circuit: &storage_proofs_post::fallback::FallbackPoStCircuit<Tree>,
        vanilla: &storage_proofs_post::fallback::Proof<Tree::Proof>,
    ) -> Result<Self, VanillaError> {
        let missing = || VanillaError::Invalid { kind: "post", msg: "a sector without its values".into() };
        if circuit.sectors.len() != vanilla.sectors.len() {
            return Err(VanillaError::Invalid { kind: "post", msg: "sector counts differ".into() });
        }
        let sectors = circuit
            .sectors
            .iter()
            .zip(&vanilla.sectors)
            .map(|(s, v)| {
                let leafs = s.leafs.iter().map(|l| l.ok_or_else(missing)).collect::<Result<Vec<_>, _>>()?;
                Ok(PostSector {
                    comm_r: s.comm_r.ok_or_else(missing)?,
                    comm_c: s.comm_c.ok_or_else(missing)?,
                    comm_r_last: s.comm_r_last.ok_or_else(missing)?,
                    challenges: leafs.into_iter().zip(v.as_options()).collect(),
                })
            })
            .collect::<Result<_, VanillaError>>()?;
        Ok(NativePost { sectors, _tree: PhantomData })
    }

    /// `FallbackPoStCircuit::synthesize_default`: per sector `Sector::synthesize`.
    pub(crate) fn generate(self, cs: &mut WitnessCs) -> Result<(), SynthesisError> {
        for s in self.sectors {
            let comm_r_last = AllocatedNum::alloc(&mut *cs, || Ok(s.comm_r_last))?;
            AllocatedNum::alloc(&mut *cs, || Ok(s.comm_c))?;
            let comm_r = AllocatedNum::alloc(&mut *cs, || Ok(s.comm_r))?;
            comm_r.inputize(&mut *cs)?;
            let hash = poseidon::poseidon_hash(cs, &[s.comm_c, s.comm_r_last], U2::PARAMETERS())?;
            constraint::equal(cs, || "comm_r = H(comm_c || comm_r_last)", &comm_r, &hash);
            for (leaf, path) in s.challenges {
                // PoRCircuit with `Root::Val(leaf)`: the leaf allocated first.
                let leaf = AllocatedNum::alloc(&mut *cs, || Ok(leaf))?;
                poseidon_inclusion::<Tree>(cs, path, &comm_r_last, &leaf)?;
            }
        }
        Ok(())
    }
}

/// A SnapDeals partition's witness, generated natively: storage-proofs-update's
/// `EmptySectorUpdateCircuit::synthesize` step for step, with the three Merkle
/// paths per challenge (`por_no_challenge_input`: tree R old and new, Poseidon;
/// tree D new to its apex leaf, SHA-256) and the Poseidon hashes of comm_r, phi and
/// rho native; storage-proofs-update's own gadgets (`apex_por`,
/// `gen_challenge_bits`, `get_challenge_high_bits`, `label_r_new`; crate-private
/// there) ported below, `select` called as the circuit calls it.
pub(crate) fn generate_update<TreeR: 'static + MerkleTreeTrait<Hasher = update_constants::TreeRHasher>>(
    circuit: storage_proofs_update::EmptySectorUpdateCircuit<TreeR>,
    cs: &mut WitnessCs,
) -> Result<(), SynthesisError> {
    use storage_proofs_update::{circuit::PrivateInputs, circuit::PublicInputs, PublicParams};
    use update_constants::{hs, validate_tree_r_shape, POSEIDON_CONSTANTS_GEN_RANDOMNESS};
    let storage_proofs_update::EmptySectorUpdateCircuit {
        pub_params:
            PublicParams {
                sector_nodes,
                challenge_count,
                challenge_bit_len,
                partition_bit_len,
                apex_leaf_count,
                apex_leaf_bit_len,
                ..
            },
        pub_inputs: PublicInputs { k_and_h_select, comm_r_old, comm_d_new, comm_r_new },
        priv_inputs: PrivateInputs { comm_c, root_r_old, root_r_new, apex_leafs, challenge_proofs },
    } = circuit;
    validate_tree_r_shape::<TreeR>(sector_nodes);
    let hs = hs(sector_nodes);
    let h_select_bit_len = hs.len();
    let partition_path = challenge_proofs[0].path_d_new[challenge_bit_len - partition_bit_len..].to_vec();
    assert_eq!(apex_leafs.len(), apex_leaf_count);
    assert_eq!(challenge_proofs.len(), challenge_count);

    let k_and_h_select = AllocatedNum::alloc(&mut *cs, || k_and_h_select.ok_or(SynthesisError::AssignmentMissing))?;
    k_and_h_select.inputize(&mut *cs)?;
    let select_bits = {
        let v = value(&k_and_h_select)?;
        let bits: Vec<bool> = v.to_le_bits().into_iter().take(partition_bit_len + h_select_bit_len).collect();
        let bits = bits.into_iter().map(|b| AllocatedBit::alloc(&mut *cs, Some(b))).collect::<Result<Vec<_>, _>>()?;
        // "k_and_h_select binary decomp"
        cs.count_constraint();
        bits
    };
    let partition_bits = select_bits[..partition_bit_len].to_vec();
    let h_select_bits = select_bits[partition_bit_len..].to_vec();
    let partition =
        multipack::pack_bits(&mut *cs, &partition_bits.iter().cloned().map(Boolean::from).collect::<Vec<_>>())?;
    let comm_r_old = AllocatedNum::alloc(&mut *cs, || comm_r_old.ok_or(SynthesisError::AssignmentMissing))?;
    comm_r_old.inputize(&mut *cs)?;
    let comm_d_new = AllocatedNum::alloc(&mut *cs, || comm_d_new.ok_or(SynthesisError::AssignmentMissing))?;
    comm_d_new.inputize(&mut *cs)?;
    let comm_r_new = AllocatedNum::alloc(&mut *cs, || comm_r_new.ok_or(SynthesisError::AssignmentMissing))?;
    comm_r_new.inputize(&mut *cs)?;
    let phi =
        poseidon::poseidon_hash(cs, &[value(&comm_d_new)?, value(&comm_r_old)?], &POSEIDON_CONSTANTS_GEN_RANDOMNESS)?;
    let comm_c = AllocatedNum::alloc(&mut *cs, || comm_c.ok_or(SynthesisError::AssignmentMissing))?;
    let root_r_old = AllocatedNum::alloc(&mut *cs, || root_r_old.ok_or(SynthesisError::AssignmentMissing))?;
    let root_r_new = AllocatedNum::alloc(&mut *cs, || root_r_new.ok_or(SynthesisError::AssignmentMissing))?;
    let apex_leafs = apex_leafs
        .iter()
        .map(|l| AllocatedNum::alloc(&mut *cs, || l.ok_or(SynthesisError::AssignmentMissing)))
        .collect::<Result<Vec<_>, _>>()?;
    let partition_path = partition_path
        .iter()
        .map(|s| AllocatedNum::alloc(&mut *cs, || s[0].ok_or(SynthesisError::AssignmentMissing)).map(|n| vec![n]))
        .collect::<Result<Vec<_>, _>>()?;
    // comm_r_old and comm_r_new = H(comm_c, root): each hash and its equality.
    poseidon::poseidon_hash(cs, &[value(&comm_c)?, value(&root_r_old)?], U2::PARAMETERS())?;
    cs.count_constraint();
    poseidon::poseidon_hash(cs, &[value(&comm_c)?, value(&root_r_new)?], U2::PARAMETERS())?;
    cs.count_constraint();
    apex_por(cs, &apex_leafs, &partition_bits, partition_path, &comm_d_new)?;
    let generated =
        gen_challenge_bits(cs, &comm_r_new, &partition, challenge_count, challenge_bit_len - partition_bit_len)?;
    for (c_index, c_bits) in generated.into_iter().enumerate() {
        let c_bits: Vec<AllocatedBit> = c_bits.iter().chain(partition_bits.iter()).cloned().collect();
        let c_high = challenge_high_bits(cs, &c_bits, &h_select_bits, &hs)?;
        let rho = poseidon::poseidon_hash(cs, &[value(&phi)?, value(&c_high)?], &POSEIDON_CONSTANTS_GEN_RANDOMNESS)?;
        let proof = &challenge_proofs[c_index];
        let leaf_r_old = AllocatedNum::alloc(&mut *cs, || proof.leaf_r_old.ok_or(SynthesisError::AssignmentMissing))?;
        let leaf_d_new = AllocatedNum::alloc(&mut *cs, || proof.leaf_d_new.ok_or(SynthesisError::AssignmentMissing))?;
        // label_r_new = label_r_old + label_d_new * rho
        let d_rho = leaf_d_new.mul(&mut *cs, &rho)?;
        let leaf_r_new = AllocatedNum::alloc(&mut *cs, || Ok(value(&leaf_r_old)? + value(&d_rho)?))?;
        cs.count_constraint();
        let path_r_old = alloc_path(cs, &proof.path_r_old)?;
        poseidon_por_no_challenge::<TreeR>(cs, &c_bits, &leaf_r_old, path_r_old, &root_r_old)?;
        let path_r_new = alloc_path(cs, &proof.path_r_new)?;
        poseidon_por_no_challenge::<TreeR>(cs, &c_bits, &leaf_r_new, path_r_new, &root_r_new)?;
        let start = challenge_bit_len - partition_bit_len - apex_leaf_bit_len;
        let apex_bits: Vec<Boolean> =
            c_bits[start..start + apex_leaf_bit_len].iter().cloned().map(Into::into).collect();
        let apex_leaf = insertion::select(&mut *cs, &apex_leafs, &apex_bits)?;
        let to_apex = start;
        let path_to_apex = proof
            .path_d_new
            .iter()
            .take(to_apex)
            .map(|s| AllocatedNum::alloc(&mut *cs, || s[0].ok_or(SynthesisError::AssignmentMissing)).map(|n| vec![n]))
            .collect::<Result<Vec<_>, _>>()?;
        sha256_por_no_challenge(cs, &c_bits[..to_apex], &leaf_d_new, path_to_apex, &apex_leaf)?;
    }
    Ok(())
}

/// A path's siblings allocated row by row, as the update circuit allocates them.
fn alloc_path(cs: &mut WitnessCs, path: &[Vec<Option<Fr>>]) -> Result<Vec<Vec<AllocatedNum<Fr>>>, SynthesisError> {
    path.iter()
        .map(|row| {
            row.iter().map(|s| AllocatedNum::alloc(&mut *cs, || s.ok_or(SynthesisError::AssignmentMissing))).collect()
        })
        .collect()
}

// storage-proofs-update's gadgets (crate-private there), witness only.

/// `apex_por`: the apex tree over the apex leaves (SHA-256 pairs), then its root's
/// path to comm_d_new along the partition bits.
fn apex_por(
    cs: &mut WitnessCs,
    leafs: &[AllocatedNum<Fr>],
    partition_bits: &[AllocatedBit],
    partition_path: Vec<Vec<AllocatedNum<Fr>>>,
    comm_d: &AllocatedNum<Fr>,
) -> Result<(), SynthesisError> {
    let mut row = leafs.to_vec();
    for _ in 0..leafs.len().trailing_zeros() {
        row = row.chunks(2).map(|pair| sha256_of_nodes(cs, pair)).collect::<Result<_, _>>()?;
    }
    sha256_por_no_challenge(cs, partition_bits, &row[0], partition_path, comm_d)
}

/// `gen_challenge_bits`: per digest its index, its Poseidon and its 255 bits, cut
/// into challenges.
fn gen_challenge_bits(
    cs: &mut WitnessCs,
    comm_r_new: &AllocatedNum<Fr>,
    partition: &AllocatedNum<Fr>,
    challenges: usize,
    bits_per_challenge: usize,
) -> Result<Vec<Vec<AllocatedBit>>, SynthesisError> {
    use storage_proofs_update::constants::POSEIDON_CONSTANTS_GEN_RANDOMNESS;
    let per_digest = Fr::CAPACITY as usize / bits_per_challenge;
    let digests = challenges.div_ceil(per_digest) as u64;
    let mut out = Vec::with_capacity(challenges);
    for j in 0..digests {
        let index = AllocatedNum::alloc(&mut *cs, || Ok(value(partition)? * Fr::from(digests) + Fr::from(j)))?;
        cs.count_constraint();
        let digest =
            poseidon::poseidon_hash(cs, &[value(comm_r_new)?, value(&index)?], &POSEIDON_CONSTANTS_GEN_RANDOMNESS)?;
        // allocated_num_to_allocated_bits: the bits as `AllocatedBit`s (the circuit
        // uses them as variables), the decomposition's constraint.
        let v = value(&digest)?;
        let bits = v
            .to_le_bits()
            .into_iter()
            .take(Fr::NUM_BITS as usize)
            .map(|b| AllocatedBit::alloc(&mut *cs, Some(b)))
            .collect::<Result<Vec<_>, _>>()?;
        cs.count_constraint();
        let take = if j == digests - 1 { challenges - out.len() } else { per_digest };
        out.extend(bits.chunks(bits_per_challenge).take(take).map(<[AllocatedBit]>::to_vec));
    }
    Ok(out)
}

/// `get_challenge_high_bits`: the challenge's high bits for each candidate h, the
/// one `h_select` picks summed in.
fn challenge_high_bits(
    cs: &mut WitnessCs,
    c_bits: &[AllocatedBit],
    h_select_bits: &[AllocatedBit],
    hs: &[usize],
) -> Result<AllocatedNum<Fr>, SynthesisError> {
    assert_eq!(h_select_bits.len(), hs.len());
    let n = c_bits.len();
    let c_bits: Vec<Boolean> = c_bits.iter().cloned().map(Into::into).collect();
    let mut sum = Fr::ZERO;
    for (h, select) in hs.iter().zip(h_select_bits) {
        let high = multipack::pack_bits(&mut *cs, &c_bits[n - h..])?;
        let picked =
            if select.get_value().ok_or(SynthesisError::AssignmentMissing)? { value(&high)? } else { Fr::ZERO };
        AllocatedNum::alloc(&mut *cs, || Ok(picked))?;
        cs.count_constraint();
        sum += picked;
    }
    let selected = AllocatedNum::alloc(&mut *cs, || Ok(sum))?;
    cs.count_constraint();
    Ok(selected)
}

/// storage-proofs-core's `por_no_challenge_input` for a Poseidon tree of `Tree`'s
/// shape: per level `insert` and the Poseidon native, then the root's equality.
fn poseidon_por_no_challenge<Tree: MerkleTreeTrait>(
    cs: &mut WitnessCs,
    challenge_bits: &[AllocatedBit],
    leaf: &AllocatedNum<Fr>,
    path: Vec<Vec<AllocatedNum<Fr>>>,
    root: &AllocatedNum<Fr>,
) -> Result<(), SynthesisError> {
    let (sub, top) = (Tree::SubTreeArity::to_usize(), Tree::TopTreeArity::to_usize());
    let base_len = path.len() - if top > 0 { 2 } else { usize::from(sub > 0) };
    let mut bits = challenge_bits.iter().cloned().map(Boolean::from);
    let mut levels = path.into_iter();
    let mut cur = leaf.clone();
    let mut level = |cs: &mut WitnessCs, cur: &AllocatedNum<Fr>, arity: usize| -> Result<Vec<Fr>, SynthesisError> {
        let siblings = levels.next().ok_or(SynthesisError::Unsatisfiable)?;
        let index: Vec<Boolean> = (0..arity.trailing_zeros())
            .map(|_| bits.next().ok_or(SynthesisError::Unsatisfiable))
            .collect::<Result<_, _>>()?;
        insertion::insert(cs, cur, &index, &siblings)?.iter().map(value).collect()
    };
    for _ in 0..base_len {
        let pre = level(cs, &cur, Tree::Arity::to_usize())?;
        cur = poseidon::poseidon_hash(cs, &pre, Tree::Arity::PARAMETERS())?;
    }
    if sub > 0 {
        let pre = level(cs, &cur, sub)?;
        cur = poseidon::poseidon_hash(cs, &pre, Tree::SubTreeArity::PARAMETERS())?;
    }
    if top > 0 {
        let pre = level(cs, &cur, top)?;
        cur = poseidon::poseidon_hash(cs, &pre, Tree::TopTreeArity::PARAMETERS())?;
    }
    // "calculated root == provided root": counted, not checked (no constraint system
    // is; a wrong witness yields a proof that the Verify stage refuses).
    let _ = (cur, root);
    cs.count_constraint();
    Ok(())
}

/// `por_no_challenge_input` for a binary SHA-256 tree (SnapDeals' tree D).
fn sha256_por_no_challenge(
    cs: &mut WitnessCs,
    challenge_bits: &[AllocatedBit],
    leaf: &AllocatedNum<Fr>,
    path: Vec<Vec<AllocatedNum<Fr>>>,
    root: &AllocatedNum<Fr>,
) -> Result<(), SynthesisError> {
    assert_eq!(challenge_bits.len(), path.len(), "one index bit per level of a binary tree");
    let mut cur = leaf.clone();
    for (bit, siblings) in challenge_bits.iter().zip(path) {
        let inserted = insertion::insert(cs, &cur, &[Boolean::from(bit.clone())], &siblings)?;
        cur = sha256_of_nodes(cs, &inserted)?;
    }
    let _ = (cur, root);
    cs.count_constraint();
    Ok(())
}

/// `Sha256Function::hash_multi_leaf_circuit`: each node's bits (the bytes' bits
/// reversed), SHA-256, the digest's bits packed (native).
fn sha256_of_nodes(cs: &mut WitnessCs, nodes: &[AllocatedNum<Fr>]) -> Result<AllocatedNum<Fr>, SynthesisError> {
    let mut preimage = Vec::with_capacity(256 * nodes.len());
    for node in nodes {
        preimage.extend(bits_be_per_byte(cs, value(node)?));
    }
    let digest = native::sha256(cs, &preimage);
    native::pack_bits(cs, &reverse_per_byte(&digest))
}

fn bits(booleans: &[Boolean]) -> Result<Vec<Bit>, SynthesisError> {
    booleans.iter().map(Bit::of).collect()
}

fn value(num: &AllocatedNum<Fr>) -> Result<Fr, SynthesisError> {
    num.get_value().ok_or(SynthesisError::AssignmentMissing)
}

/// `reverse_bit_numbering(num.to_bits_le(cs))`: the 255 bits allocated, a constant
/// zero appended, the bits of each byte reversed (what the circuits hash).
fn bits_be_per_byte(cs: &mut WitnessCs, v: Fr) -> Vec<Bit> {
    let mut le = native::to_bits_le(cs, v);
    le.push(Bit::Const(false));
    reverse_per_byte(&le)
}

fn reverse_per_byte(bits: &[Bit]) -> Vec<Bit> {
    debug_assert!(bits.len().is_multiple_of(8));
    bits.chunks(8).flat_map(|byte| byte.iter().rev().copied()).collect()
}

/// `enforce_inclusion` in tree D (binary, SHA-256): storage-proofs-core's
/// `PoRCircuit::synthesize` for `MerkleTreeWrapper<Sha256Hasher, _, U2, U0, U0>`
/// with a private root, and `Sha256Function::hash_multi_leaf_circuit`, the SHA-256
/// and the bit decompositions native.
fn sha256_inclusion(
    cs: &mut WitnessCs,
    path: Vec<(Vec<Option<Fr>>, Option<usize>)>,
    root: &AllocatedNum<Fr>,
    leaf: &AllocatedNum<Fr>,
) -> Result<(), SynthesisError> {
    let mut cur = leaf.clone();
    let mut path_bits = Vec::with_capacity(path.len());
    for (hashes, index) in path {
        let index = index.ok_or(SynthesisError::AssignmentMissing)?;
        let bit = Boolean::from(AllocatedBit::alloc(&mut *cs, Some(index & 1 == 1))?);
        path_bits.push(bit.clone());
        let siblings = hashes
            .iter()
            .map(|h| AllocatedNum::alloc(&mut *cs, || h.ok_or(SynthesisError::AssignmentMissing)))
            .collect::<Result<Vec<_>, _>>()?;
        let inserted = insertion::insert(cs, &cur, &[bit], &siblings)?;
        cur = sha256_of_nodes(cs, &inserted)?;
    }
    multipack::pack_into_inputs(&mut *cs, &path_bits)?;
    constraint::equal(cs, || "enforce root is correct", &cur, root);
    Ok(())
}

/// `create_label_circuit` with the parents expanded as `Proof::synthesize` expands
/// them (to 37: the 14 of a later layer twice and its first 9, or the 6 of layer 1
/// six times and its first once), the SHA-256 native.
fn create_label(
    cs: &mut WitnessCs,
    replica_id: &[Bit],
    parents: &[Vec<Bit>],
    layer: u32,
    node_be: &[Bit],
) -> Result<AllocatedNum<Fr>, SynthesisError> {
    const TOTAL_PARENTS: usize = 37;
    let expanded: Vec<&Vec<Bit>> = if layer > 1 {
        parents.iter().chain(parents).chain(&parents[..9]).collect()
    } else {
        parents.iter().cycle().take(parents.len() * 6).chain(&parents[..1]).collect()
    };
    assert_eq!(expanded.len(), TOTAL_PARENTS, "a label hashes 37 parents");
    let mut preimage = Vec::with_capacity((2 + TOTAL_PARENTS) * 256);
    preimage.extend_from_slice(replica_id);
    preimage.resize(256, Bit::Const(false));
    preimage.extend((0..32).rev().map(|i| Bit::Const((layer >> i) & 1 == 1)));
    preimage.extend_from_slice(node_be);
    preimage.resize(512, Bit::Const(false));
    for parent in expanded {
        preimage.extend_from_slice(parent);
        let padded = preimage.len().next_multiple_of(256);
        preimage.resize(padded, Bit::Const(false));
    }
    let digest = native::sha256(cs, &preimage);
    // reverse_bit_numbering: the bits of each byte reversed.
    let digest: Vec<Bit> = digest.chunks(8).flat_map(|byte| byte.iter().rev().copied()).collect();
    native::pack_bits(cs, &digest)
}

/// storage-proofs-porep's `hash_single_column`, the Poseidon native.
fn hash_column(cs: &mut WitnessCs, column: &[AllocatedNum<Fr>]) -> Result<AllocatedNum<Fr>, SynthesisError> {
    let values = column.iter().map(value).collect::<Result<Vec<_>, _>>()?;
    match column.len() {
        2 => poseidon::poseidon_hash(cs, &values, &POSEIDON_CONSTANTS_2),
        11 => poseidon::poseidon_hash(cs, &values, &POSEIDON_CONSTANTS_11),
        n => panic!("no PoRep has {n} layers"),
    }
}

/// `enforce_inclusion` in a Poseidon tree of `Tree`'s shape: storage-proofs-core's
/// `PoRCircuit::synthesize` with a private root (the base path, then the sub- and
/// top-tree's levels; each level's index bits, siblings, `insert`, and
/// `PoseidonFunction::hash_multi_leaf_circuit` of the arity, native).
fn poseidon_inclusion<Tree: MerkleTreeTrait>(
    cs: &mut WitnessCs,
    mut path: PathOptions,
    root: &AllocatedNum<Fr>,
    leaf: &AllocatedNum<Fr>,
) -> Result<(), SynthesisError> {
    let has_sub = Tree::SubTreeArity::to_usize() > 0;
    let has_top = Tree::TopTreeArity::to_usize() > 0;
    let split = path.len() - usize::from(has_sub) - usize::from(has_top);
    let upper = path.split_off(split);
    let mut bits = Vec::new();
    let mut cur = leaf.clone();
    cur = sub_path::<Tree::Arity>(cs, path, cur, &mut bits)?;
    let mut upper = upper.into_iter();
    if has_sub {
        cur = sub_path::<Tree::SubTreeArity>(cs, upper.next().into_iter().collect(), cur, &mut bits)?;
    }
    if has_top {
        cur = sub_path::<Tree::TopTreeArity>(cs, upper.next().into_iter().collect(), cur, &mut bits)?;
    }
    multipack::pack_into_inputs(&mut *cs, &bits)?;
    constraint::equal(cs, || "enforce root is correct", &cur, root);
    Ok(())
}

/// storage-proofs-core's `SubPath::synthesize` for Poseidon of `A`'s arity.
fn sub_path<A: 'static + PoseidonArity>(
    cs: &mut WitnessCs,
    levels: PathOptions,
    mut cur: AllocatedNum<Fr>,
    path_bits: &mut Vec<Boolean>,
) -> Result<AllocatedNum<Fr>, SynthesisError> {
    let arity = A::to_usize();
    let index_bits = arity.trailing_zeros() as usize;
    for (hashes, index) in levels {
        let index = index.ok_or(SynthesisError::AssignmentMissing)?;
        let bits = (0..index_bits)
            .map(|i| AllocatedBit::alloc(&mut *cs, Some((index >> i) & 1 == 1)).map(Boolean::from))
            .collect::<Result<Vec<_>, _>>()?;
        path_bits.extend_from_slice(&bits);
        let siblings = hashes
            .iter()
            .map(|h| AllocatedNum::alloc(&mut *cs, || h.ok_or(SynthesisError::AssignmentMissing)))
            .collect::<Result<Vec<_>, _>>()?;
        let inserted = insertion::insert(cs, &cur, &bits, &siblings)?;
        let values = inserted.iter().map(value).collect::<Result<Vec<_>, _>>()?;
        cur = poseidon::poseidon_hash(cs, &values, A::PARAMETERS())?;
    }
    Ok(cur)
}

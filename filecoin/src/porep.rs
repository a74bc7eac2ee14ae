//! PoRep circuits: one per partition of a parsed C1 output, ready to synthesize, and
//! the blank circuit a proof type's parameters are made for.

use filecoin_hashers::{Domain, Hasher};
use filecoin_proofs::{
    as_safe_commitment, parameters::setup_params, DefaultPieceDomain, DefaultPieceHasher, MerkleTreeTrait,
    SectorShapeBase, SectorShapeSub8, SectorShapeTop2,
};
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_porep::stacked::{self, generate_replica_id, StackedCompound, StackedDrg};

use crate::{native::NativePorep, partition::Partition, ParsedC1, PorepError, RegisteredSealProof};

/// One PoRep partition, ready to synthesize.
pub type PorepPartition = Partition;

fn circuits<Tree: 'static + MerkleTreeTrait<Hasher = filecoin_proofs::DefaultTreeHasher>>(
    c1: ParsedC1,
) -> Result<Vec<PorepPartition>, PorepError> {
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let proof = c1.output.registered_proof;
    let o = c1.output;
    let vanilla: Vec<Vec<_>> = o.vanilla_proofs.try_into().map_err(|_| PorepError::WrongShape { proof })?;
    let comm_r = as_safe_commitment::<<Tree::Hasher as Hasher>::Domain, _>(&o.comm_r, "comm_r").map_err(err)?;
    let comm_d = DefaultPieceDomain::try_from_bytes(&o.comm_d).map_err(err)?;
    let public_inputs = stacked::PublicInputs::<<Tree::Hasher as Hasher>::Domain, DefaultPieceDomain> {
        replica_id: o.replica_id,
        tau: Some(stacked::Tau { comm_d, comm_r }),
        k: None,
        seed: Some(o.seed),
    };
    let params = vanilla_params::<Tree>(proof)?;
    vanilla
        .iter()
        .enumerate()
        .map(|(k, v)| {
            let circuit = StackedCompound::<Tree, DefaultPieceHasher>::circuit(&public_inputs, (), v, &params, Some(k))
                .map_err(err)?;
            let native = NativePorep::<Tree>::new(&public_inputs, v)?;
            Ok(Partition::with_native(circuit, move |cs| native.generate(cs)))
        })
        .collect()
}

/// Checks that the C1's replica id is the one filecoin-proofs derives from the job's
/// prover id and sector number and the C1's ticket and comm_d. The circuit takes the
/// replica id from the C1, so without this check a C1 of another sector (or with a
/// wrong comm_d or ticket) yields a proof that verifies against its own inputs but
/// not for the sector it is returned for.
///
/// # Errors
/// [`PorepError::ReplicaId`] on a mismatch; setup errors.
pub fn check_replica_id(c1: &ParsedC1, prover_id: &[u8; 32], sector_id: u64) -> Result<(), PorepError> {
    let o = &c1.output;
    let comm_d = DefaultPieceDomain::try_from_bytes(&o.comm_d).map_err(|e| PorepError::Circuit(format!("{e:#}")))?;
    let porep_id = o.registered_proof.as_v1_config().porep_id;
    let want = generate_replica_id::<filecoin_proofs::DefaultTreeHasher, _>(
        prover_id, sector_id, &o.ticket, comm_d, &porep_id,
    );
    if want != o.replica_id {
        let hex: String = prover_id.iter().map(|b| format!("{b:02x}")).collect();
        return Err(PorepError::ReplicaId { prover_id: hex, sector_id });
    }
    Ok(())
}

/// One circuit per partition, in partition order.
///
/// # Errors
/// [`PorepError::WrongShape`] when the vanilla proofs do not match the proof type,
/// [`PorepError::Circuit`] when filecoin-proofs refuses them.
pub fn partition_circuits(c1: ParsedC1) -> Result<Vec<PorepPartition>, PorepError> {
    match u64::from(c1.output.registered_proof.sector_size()) {
        2048 | 8_388_608 | 536_870_912 => circuits::<SectorShapeBase>(c1),
        34_359_738_368 => circuits::<SectorShapeSub8>(c1),
        68_719_476_736 => circuits::<SectorShapeTop2>(c1),
        _ => Err(PorepError::Unsupported(c1.output.registered_proof, "unknown sector size")),
    }
}

/// The blank (witness-free) circuit of a proof type: what its parameters are made for.
pub enum BlankPorep {
    Base(stacked::StackedCircuit<SectorShapeBase, DefaultPieceHasher>),
    Sub8(stacked::StackedCircuit<SectorShapeSub8, DefaultPieceHasher>),
    Top2(stacked::StackedCircuit<SectorShapeTop2, DefaultPieceHasher>),
}

impl bellperson::Circuit<blstrs::Scalar> for BlankPorep {
    fn synthesize<CS: bellperson::ConstraintSystem<blstrs::Scalar>>(
        self,
        cs: &mut CS,
    ) -> Result<(), bellperson::SynthesisError> {
        match self {
            BlankPorep::Base(c) => c.synthesize(cs),
            BlankPorep::Sub8(c) => c.synthesize(cs),
            BlankPorep::Top2(c) => c.synthesize(cs),
        }
    }
}

/// filecoin-proofs' public parameters of `proof`'s stacked DRG for sector shape `Tree`:
/// what both the partition circuits and the blank circuit are built from, and what
/// [`crate::parse_c1`] checks the vanilla proofs' shape against.
pub(crate) fn vanilla_params<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredSealProof,
) -> Result<stacked::PublicParams<Tree>, PorepError> {
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let config = proof.as_v1_config();
    let setup = compound_proof::SetupParams {
        vanilla_params: setup_params(&config).map_err(err)?,
        partitions: Some(usize::from(config.partitions)),
        priority: false,
    };
    let pp = <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
        StackedDrg<'_, Tree, DefaultPieceHasher>,
        _,
    >>::setup(&setup)
    .map_err(err)?;
    Ok(pp.vanilla_params)
}

fn blank<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredSealProof,
) -> Result<stacked::StackedCircuit<Tree, DefaultPieceHasher>, PorepError> {
    let params = vanilla_params::<Tree>(proof)?;
    Ok(<StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<_, _>>::blank_circuit(&params))
}

/// The blank circuit of `proof`.
///
/// # Errors
/// [`PorepError::Unsupported`] for an unknown sector size; setup errors.
pub fn blank_circuit(proof: RegisteredSealProof) -> Result<BlankPorep, PorepError> {
    Ok(match u64::from(proof.sector_size()) {
        2048 | 8_388_608 | 536_870_912 => BlankPorep::Base(blank(proof)?),
        34_359_738_368 => BlankPorep::Sub8(blank(proof)?),
        68_719_476_736 => BlankPorep::Top2(blank(proof)?),
        _ => return Err(PorepError::Unsupported(proof, "unknown sector size")),
    })
}

/// [`blank_circuit`] recorded (what `cuzk_synth::record_blank` makes of it) with
/// two challenges recorded, checked alike and copied to the others
/// (`cuzk_synth::record_blank_replicated`):
/// every challenge proof of a blank PoRep circuit is the same gadgets over the
/// partition's shared commitments. The first-ever proof's critical path at 32GiB
/// was recording all of them on one thread (74–84 s). The tests compare this with
/// the sequential recording at every size CI can record.
///
/// # Errors
/// As [`blank_circuit`]; a synthesis error of the blank circuit.
pub fn record_blank_porep(
    proof: RegisteredSealProof,
    hint: cuzk_synth::RecordHint,
) -> Result<Option<cuzk_synth::Precompiled>, PorepError> {
    match u64::from(proof.sector_size()) {
        2048 | 8_388_608 | 536_870_912 => record_replicated::<SectorShapeBase>(proof, hint),
        34_359_738_368 => record_replicated::<SectorShapeSub8>(proof, hint),
        68_719_476_736 => record_replicated::<SectorShapeTop2>(proof, hint),
        _ => Err(PorepError::Unsupported(proof, "unknown sector size")),
    }
}

fn record_replicated<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredSealProof,
    hint: cuzk_synth::RecordHint,
) -> Result<Option<cuzk_synth::Precompiled>, PorepError> {
    let params = vanilla_params::<Tree>(proof)?;
    let copies = params.challenges.num_challenges_per_partition();
    // The same circuit with n challenges (the challenge kind does not change a
    // challenge proof's gadgets, only how challenges are drawn).
    let with = |n| {
        let mut p = params.clone();
        p.challenges = stacked::Challenges::new_interactive(n);
        <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<_, _>>::blank_circuit(&p)
    };
    cuzk_synth::record_blank_replicated(with, copies, hint)
        .map_err(|e| PorepError::Circuit(format!("recording the blank circuit: {e}")))
}

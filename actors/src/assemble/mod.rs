//! Assemble: the proof's three points from the MSM results and the randomness.

mod config;

pub use config::AssembleConfig;

use bellperson::groth16::{Proof, VerifyingKey};
use blstrs::{Bls12, G1Projective, G2Projective, Scalar};
use cuzk_gpu::MsmResults;
use group::{prime::PrimeCurveAffine, Curve};

use crate::{
    ground::{PartitionProof, ProvedPartition, StageError, StageName},
    runtime::{Stage, WorkItem},
};

/// The Assemble stage.
pub struct Assemble;

/// Groth16 assembly, as bellperson's prover does it:
/// `A = alpha + sum_A + r*delta`, `B = beta + sum_B2 + s*delta`,
/// `C = H + L + s*sum_A + r*sum_B1 + r*s*delta + s*alpha + r*beta`.
///
/// # Errors
/// When delta is the point at infinity (a subverted parameter set; bellperson
/// refuses it too) or B_G2 is missing.
pub fn assemble(vk: &VerifyingKey<Bls12>, msm: &MsmResults, r: Scalar, s: Scalar) -> Result<Proof<Bls12>, StageError> {
    if bool::from(vk.delta_g1.is_identity() | vk.delta_g2.is_identity()) {
        return Err(StageError::msg("verifying key has delta at infinity (subverted parameters?)"));
    }
    let b_g2 = msm.b_g2.ok_or_else(|| StageError::msg("B_G2 MSM result missing"))?;
    let delta_g1 = G1Projective::from(vk.delta_g1);
    let a = delta_g1 * r + vk.alpha_g1 + msm.a;
    let b = G2Projective::from(vk.delta_g2) * s + vk.beta_g2 + b_g2;
    let c = msm.h + msm.l + msm.a * s + msm.b_g1 * r + delta_g1 * (r * s) + vk.alpha_g1 * s + vk.beta_g1 * r;
    Ok(Proof { a: a.to_affine(), b: b.to_affine(), c: c.to_affine() })
}

impl Stage for Assemble {
    type In = ProvedPartition;
    type Out = PartitionProof;
    const NAME: StageName = StageName::Assemble;

    fn process(&self, item: WorkItem<ProvedPartition>) -> Result<Vec<WorkItem<PartitionProof>>, StageError> {
        let (p, base) = item.take();
        let (r, s) = base.job.randomness(base.partition);
        let proof = assemble(&base.job.srs().vk, &p.msm, r, s)?;
        Ok(vec![base.with(PartitionProof { proof, public_inputs: p.public_inputs })])
    }
}

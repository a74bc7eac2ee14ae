//! The payloads that travel between stages, in pipeline order: what each stage
//! emits and the next one takes. They move by ownership inside `WorkItem`s; large
//! buffers (a/b/c, assignments, scalars) are never copied between stages.

use bellperson::groth16::Proof;
use blstrs::{Bls12, G2Projective, Scalar};
use cuzk_gpu::{HostPartition, MsmResults, UploadedPartition};

use crate::ground::job::BoxedCircuit;

/// Synthesize's output: a partition's a/b/c, input/aux assignments and densities.
pub use cuzk_synth::Assignment;

/// Ingest → Synthesize: one partition's circuit, ready for synthesis.
pub struct PartitionCircuit(pub BoxedCircuit);

/// PrepareMsm → StagePcie: a partition ready for the accelerator.
#[derive(Debug)]
pub struct PreparedPartition {
    pub host: HostPartition,
    /// The B_G2 MSM, when PrepareMsm computed it on the CPU.
    pub b_g2: Option<G2Projective>,
    /// Public inputs (without `ONE`), for optional verification.
    pub public_inputs: Vec<Scalar>,
}

/// StagePcie → ProveGpu: a partition whose buffers are where the backend's kernels
/// read them.
#[derive(Debug)]
pub struct UploadedWork {
    pub uploaded: UploadedPartition,
    pub b_g2: Option<G2Projective>,
    pub public_inputs: Vec<Scalar>,
}

/// ProveGpu → Assemble: the MSM results of one partition.
#[derive(Debug)]
pub struct ProvedPartition {
    /// `b_g2` is always set here (by PrepareMsm or by the backend).
    pub msm: MsmResults,
    pub public_inputs: Vec<Scalar>,
}

/// Assemble → (Verify →) JobTracker: one partition's finished proof.
#[derive(Clone, Debug)]
pub struct PartitionProof {
    pub proof: Proof<Bls12>,
    /// Public inputs (without `ONE`) the proof verifies against.
    pub public_inputs: Vec<Scalar>,
}

use bellperson::groth16::Proof;
use blstrs::{Bls12, Scalar};

/// One partition's finished proof.
#[derive(Clone, Debug)]
pub struct PartitionProof {
    pub proof: Proof<Bls12>,
    /// Public inputs (without `ONE`) the proof verifies against.
    pub public_inputs: Vec<Scalar>,
}

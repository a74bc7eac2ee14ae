use blstrs::{G2Projective, Scalar};
use cuzk_gpu::HostPartition;

/// A partition ready for the accelerator.
#[derive(Debug)]
pub struct PreparedPartition {
    pub host: HostPartition,
    /// The B_G2 MSM, when PrepareMsm computed it on the CPU.
    pub b_g2: Option<G2Projective>,
    /// Public inputs (without `ONE`), for optional verification.
    pub public_inputs: Vec<Scalar>,
}

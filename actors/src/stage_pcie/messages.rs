use blstrs::{G2Projective, Scalar};
use cuzk_gpu::StagedPartition;

/// A partition whose buffers are where the backend's kernels read them.
#[derive(Debug)]
pub struct StagedWork {
    pub staged: StagedPartition,
    pub b_g2: Option<G2Projective>,
    pub public_inputs: Vec<Scalar>,
}

use blstrs::Scalar;
use cuzk_gpu::MsmResults;

/// The MSM results of one partition.
#[derive(Debug)]
pub struct ProvedPartition {
    /// `b_g2` is always set here (by PrepareMsm or by the backend).
    pub msm: MsmResults,
    pub public_inputs: Vec<Scalar>,
}

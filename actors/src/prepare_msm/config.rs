use serde::Deserialize;

/// Where the B_G2 MSM runs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BG2Placement {
    /// On the GPU when the backend is a GPU, else in PrepareMsm on the CPU.
    #[default]
    Auto,
    /// In PrepareMsm, on the CPU, concurrently with the backend's G1 MSMs.
    Cpu,
    /// In ProveGpu, on the backend.
    Backend,
}

use crate::runtime::StageLimits;

/// `[prepare_msm]`: CPU preparation of MSM inputs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PrepareMsmConfig {
    pub mailbox_capacity: usize,
    pub queue_capacity: usize,
    pub workers: usize,
    /// Where the B_G2 MSM runs: "auto" (GPU backend: on the GPU; CPU backend: here,
    /// beside ProveGpu's G1 MSMs), "cpu" (here) or "backend" (in ProveGpu).
    pub b_g2: BG2Placement,
}

impl Default for PrepareMsmConfig {
    fn default() -> Self {
        PrepareMsmConfig { mailbox_capacity: 4, queue_capacity: 2, workers: 1, b_g2: BG2Placement::Auto }
    }
}

impl PrepareMsmConfig {
    pub(crate) fn limits(&self) -> StageLimits {
        StageLimits {
            mailbox_capacity: self.mailbox_capacity,
            queue_capacity: self.queue_capacity,
            workers: self.workers,
        }
    }
}

use serde::Deserialize;

use crate::runtime::StageLimits;

/// `[prepare_msm]`: CPU preparation of MSM inputs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PrepareMsmConfig {
    pub mailbox_capacity: usize,
    pub queue_capacity: usize,
    pub workers: usize,
    /// Compute the B_G2 MSM here on the CPU (true) or leave it to the ProveGpu
    /// backend (false).
    pub b_g2_on_cpu: bool,
}

impl Default for PrepareMsmConfig {
    fn default() -> Self {
        PrepareMsmConfig { mailbox_capacity: 4, queue_capacity: 2, workers: 1, b_g2_on_cpu: true }
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

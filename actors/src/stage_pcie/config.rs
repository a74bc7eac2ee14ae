use serde::Deserialize;

use crate::runtime::StageLimits;

/// `[stage_pcie]`: moves prepared buffers to the accelerator.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StagePcieConfig {
    pub mailbox_capacity: usize,
    pub queue_capacity: usize,
    pub workers: usize,
}

impl Default for StagePcieConfig {
    fn default() -> Self {
        StagePcieConfig { mailbox_capacity: 2, queue_capacity: 2, workers: 1 }
    }
}

impl StagePcieConfig {
    pub(crate) fn limits(&self) -> StageLimits {
        StageLimits {
            mailbox_capacity: self.mailbox_capacity,
            queue_capacity: self.queue_capacity,
            workers: self.workers,
        }
    }
}

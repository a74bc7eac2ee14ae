use serde::Deserialize;

use crate::runtime::StageLimits;

/// `[assemble]`: proof assembly from MSM results, r and s.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AssembleConfig {
    pub mailbox_capacity: usize,
    pub queue_capacity: usize,
    pub workers: usize,
}

impl Default for AssembleConfig {
    fn default() -> Self {
        AssembleConfig { mailbox_capacity: 8, queue_capacity: 8, workers: 1 }
    }
}

impl AssembleConfig {
    pub(crate) fn limits(&self) -> StageLimits {
        StageLimits {
            mailbox_capacity: self.mailbox_capacity,
            queue_capacity: self.queue_capacity,
            workers: self.workers,
        }
    }
}

use serde::Deserialize;

use crate::runtime::StageLimits;

/// `[prove_gpu]`: NTT + MSMs on the backend.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProveGpuConfig {
    pub mailbox_capacity: usize,
    pub queue_capacity: usize,
    /// Partitions executed at once per GPU (the CPU backend counts as one device).
    pub workers_per_device: usize,
}

impl Default for ProveGpuConfig {
    fn default() -> Self {
        ProveGpuConfig { mailbox_capacity: 2, queue_capacity: 2, workers_per_device: 1 }
    }
}

impl ProveGpuConfig {
    pub(crate) fn limits(&self, devices: usize) -> StageLimits {
        StageLimits {
            mailbox_capacity: self.mailbox_capacity,
            queue_capacity: self.queue_capacity,
            workers: self.workers_per_device * devices.max(1),
        }
    }
}

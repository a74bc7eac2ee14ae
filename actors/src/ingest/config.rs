use serde::Deserialize;

use crate::runtime::StageLimits;

/// `[ingest]`: turns a submitted job into per-partition work items.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// Jobs waiting in the actor's mailbox once the queue is full.
    pub mailbox_capacity: usize,
    /// Jobs accepted but not yet split into partitions.
    pub queue_capacity: usize,
    /// Jobs parsed at once.
    pub workers: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig { mailbox_capacity: 4, queue_capacity: 16, workers: 1 }
    }
}

impl IngestConfig {
    pub(crate) fn limits(&self) -> StageLimits {
        StageLimits {
            mailbox_capacity: self.mailbox_capacity,
            queue_capacity: self.queue_capacity,
            workers: self.workers,
        }
    }
}

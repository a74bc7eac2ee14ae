use serde::Deserialize;

use crate::runtime::StageLimits;

/// `[verify]`: self-verification of every partition proof, on by default (as
/// filecoin-proofs' `seal_commit_phase2` verifies before it returns).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VerifyConfig {
    /// Insert the Verify stage after Assemble.
    pub enabled: bool,
    pub mailbox_capacity: usize,
    pub queue_capacity: usize,
    pub workers: usize,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig { enabled: true, mailbox_capacity: 8, queue_capacity: 8, workers: 1 }
    }
}

impl VerifyConfig {
    pub(crate) fn limits(&self) -> StageLimits {
        StageLimits {
            mailbox_capacity: self.mailbox_capacity,
            queue_capacity: self.queue_capacity,
            workers: self.workers,
        }
    }
}

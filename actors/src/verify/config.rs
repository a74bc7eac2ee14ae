use serde::Deserialize;

use crate::runtime::StageLimits;

/// `[verify]`: optional self-verification of every partition proof.
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
        VerifyConfig { enabled: false, mailbox_capacity: 8, queue_capacity: 8, workers: 1 }
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

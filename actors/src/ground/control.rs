//! Control messages between the runtime, the wiring and the job tracker (payloads
//! are in `payload.rs`). The tracker handles them; the runtime reaches it only
//! through a `Recipient<PartitionFailed>`, so it knows no tracker type.

use actix::Message;

use crate::ground::{error::StageError, job::JobId, job::StageName};

/// Stage worker → JobTracker: a partition failed in a stage (error or panic). The
/// first failure of a job decides its result.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PartitionFailed {
    pub job: JobId,
    pub partition: u32,
    pub stage: StageName,
    pub error: StageError,
}

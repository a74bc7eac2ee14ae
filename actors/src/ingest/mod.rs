//! Ingest: the first stage. Splits a job into one work item per partition; each
//! partition then flows through the pipeline on its own.

mod config;
mod messages;

pub use config::IngestConfig;
pub use messages::PartitionCircuit;

use crate::{
    error::StageError,
    job::{JobInput, StageName},
    runtime::{Stage, WorkItem},
};

/// The Ingest stage.
pub struct Ingest;

impl Stage for Ingest {
    type In = JobInput;
    type Out = PartitionCircuit;
    const NAME: StageName = StageName::Ingest;

    fn process(&self, item: WorkItem<JobInput>) -> Result<Vec<WorkItem<PartitionCircuit>>, StageError> {
        let (input, base) = item.take();
        match input {
            JobInput::Circuits(circuits) => {
                if circuits.len() != base.job.partitions {
                    return Err(StageError::msg(format!(
                        "job declares {} partitions but carries {} circuits",
                        base.job.partitions,
                        circuits.len()
                    )));
                }
                Ok(circuits
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let mut w = WorkItem::new(base.job.clone(), i as u32, PartitionCircuit(c));
                        w.trace = base.trace.clone();
                        w
                    })
                    .collect())
            }
        }
    }
}

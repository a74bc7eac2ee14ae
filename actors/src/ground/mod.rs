//! The ground: plain vocabulary every other module of the crate speaks, importing
//! nothing of the crate above it.
//!
//! - `units`: byte sizes and memory limits;
//! - `job`: jobs, their ids, specs, contexts, timings and stage names;
//! - `error`: stage, job, submission, engine and budget errors;
//! - `payload`: what travels between stages, in pipeline order;
//! - `control`: the control message the runtime sends the tracker;
//! - `services`: the traits through which stages reach shared services.

pub mod control;
pub mod error;
pub mod job;
pub mod payload;
pub mod services;
pub mod units;

pub use control::PartitionFailed;
pub use error::{BudgetError, EngineError, JobError, StageError, SubmitError};
pub use job::{
    Aggregation, BoxedCircuit, CancelToken, ErasedCircuit, Fault, FaultKind, JobContext, JobId, JobInput, JobOutput,
    JobSpec, JobTimings, PorepC1, PorepInput, PreparedProof, StageName, StageTiming,
};
pub use payload::{Assignment, PartitionCircuit, PartitionProof, PreparedPartition, ProvedPartition, UploadedWork};
pub use services::{ParameterSource, Plan, RecordingStore};
pub use units::{ByteSize, MemoryLimit};

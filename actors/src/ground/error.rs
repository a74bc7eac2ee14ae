use std::sync::Arc;

use thiserror::Error;

use crate::ground::{job::StageName, units::ByteSize};

/// Why a stage could not process a partition. Carried to the job's result.
#[derive(Debug, Clone, Error)]
pub enum StageError {
    /// The stage's own logic failed (bad input, size mismatch, backend error).
    #[error("{0}")]
    Failed(Arc<dyn std::error::Error + Send + Sync>),
    /// The stage's code panicked; the actor was restarted.
    #[error("panicked: {0}")]
    Panicked(String),
    /// A memory budget refused the reservation.
    #[error("{0}")]
    Budget(#[from] BudgetError),
    /// The next stage is gone (engine shutting down).
    #[error("downstream stage unavailable: {0}")]
    Disconnected(String),
}

impl StageError {
    /// Wraps any error.
    pub fn failed(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        StageError::Failed(Arc::new(e))
    }

    /// An error from a message.
    pub fn msg(m: impl Into<String>) -> Self {
        #[derive(Debug, Error)]
        #[error("{0}")]
        struct Msg(String);
        StageError::Failed(Arc::new(Msg(m.into())))
    }
}

/// The terminal error of a job.
#[derive(Debug, Clone, Error)]
pub enum JobError {
    /// A stage failed on one of the job's partitions.
    #[error("stage {stage} failed on partition {partition}: {error}")]
    Stage { stage: StageName, partition: u32, error: StageError },
    /// Every partition was proved but aggregating them (non-interactive PoRep) failed.
    #[error("aggregating the partition proofs failed: {0}")]
    Aggregate(StageError),
    /// The job was cancelled before it finished.
    #[error("job cancelled")]
    Cancelled,
    /// The engine shut down before the job finished.
    #[error("engine shut down before the job finished")]
    Shutdown,
}

impl JobError {
    /// The stage that failed, if a stage did.
    pub fn stage(&self) -> Option<StageName> {
        match self {
            JobError::Stage { stage, .. } => Some(*stage),
            _ => None,
        }
    }
}

/// Why a job could not be submitted.
#[derive(Debug, Error)]
pub enum SubmitError {
    /// The job spec itself is invalid.
    #[error("invalid job: {0}")]
    Invalid(String),
    /// `try_submit` only: the intake is full (backpressure); retry later.
    #[error("pipeline intake is full")]
    Busy,
    /// The engine is not running.
    #[error("engine is not running")]
    NotRunning,
}

/// Engine start-up errors.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("backend unavailable: {0}")]
    Backend(String),
    #[error("engine failed to start: {0}")]
    Start(String),
}

/// A reservation refused.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum BudgetError {
    /// More than the whole budget: it could never be granted, so it fails at once
    /// instead of waiting forever.
    #[error("needs {requested} of {budget} memory but the whole {budget} budget is {capacity}; raise budget.{budget}_memory or use smaller partitions")]
    ExceedsCapacity { budget: &'static str, requested: ByteSize, capacity: ByteSize },
    /// More than bulk work may hold beside the deadline reserve.
    #[error("needs {requested} of {budget} memory but bulk work may hold {limit} of the {budget} budget (the rest, {reserve}, is budget.deadline_reserve, kept for WinningPoSt and WindowPoSt); raise budget.{budget}_memory or lower budget.deadline_reserve")]
    ExceedsBulkLimit { budget: &'static str, requested: ByteSize, limit: ByteSize, reserve: ByteSize },
    /// The budget's owner is gone (engine shutting down).
    #[error("{0} budget is closed")]
    Closed(&'static str),
}

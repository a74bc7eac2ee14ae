//! cuzk-actors: the proving pipeline as a topology of actix actors.
//!
//! Use it to run proofs through stages that each own their workers, their bounded
//! queue and their metrics: Ingest → Synthesize → PrepareMsm → StagePcie → ProveGpu →
//! Assemble (→ Verify, optional). The [`Engine`] starts the topology on its own
//! threads and is the entry point for embedding: submit a [`JobSpec`], await or
//! cancel its [`JobHandle`], read [`EngineSnapshot`] metrics.
//!
//! How it holds together:
//! - Every stage is a [`runtime::StageActor`]: an actix actor with an explicit mailbox
//!   capacity in front of a bounded priority queue, drained by a fixed number of
//!   worker tasks (the stage's credits). A full queue stops the actor from reading
//!   its mailbox, which stops the upstream workers' `send().await`: backpressure
//!   reaches the submitter without any unbounded buffer.
//! - Host memory is a [`budget::Ledger`] owned by the [`budget::BudgetActor`]: a stage
//!   reserves before it allocates; the [`budget::Reservation`] travels with the
//!   partition and returns its bytes when dropped (completion, error, panic, cancel).
//! - A panic inside a stage fails only the partition's job (the error names the
//!   stage), and the actor is restarted by its actix `Supervisor`.
//! - The [`tracker::JobTracker`] gives every job exactly one terminal result.
//!
//! The topology is declared in one place: [`topology`].

pub mod budget;
pub mod config;
pub mod engine;
mod error;
mod job;
pub mod metrics;
pub mod runtime;
pub mod timeline;
pub mod topology;
pub mod tracker;

pub mod assemble;
pub mod ingest;
pub mod prepare_msm;
pub mod prove_gpu;
pub mod stage_pcie;
pub mod synthesize;
pub mod verify;

pub use config::{ByteSize, Config, MemoryLimit};
pub use engine::{Engine, EngineSnapshot, JobHandle};
pub use error::{EngineError, JobError, StageError, SubmitError};
pub use job::{Fault, FaultKind, JobId, JobOutput, JobSpec, JobTimings, PorepC1, PorepInput, StageName, StageTiming};
pub use metrics::StageSnapshot;

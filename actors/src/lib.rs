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

#![deny(unsafe_code)]

// Read bottom-up; each layer imports only the layers above it in this list.
//
// 1. The ground: plain vocabulary (units, jobs, errors, payloads, control
//    messages, the service traits stages are handed).
pub mod ground;
// 2. Instruments and the budget: per-stage counters, the span recorder, the
//    host-memory ledger and the actor that owns it.
pub mod budget;
pub mod metrics;
pub mod timeline;
// 3. The stage runtime: how any stage runs (mailbox, queue, workers, supervision).
pub mod runtime;
// 4. The stages, siblings: each imports the ground, the runtime and its own config.
pub mod assemble;
pub mod ingest;
pub mod prepare_msm;
pub mod prove_gpu;
pub mod stage_pcie;
pub mod synthesize;
pub mod verify;
// 5. Services (parameter cache, recording cache, backend choice) and the job
//    tracker.
pub mod services;
pub mod tracker;
// 6. The wiring, and only here: configuration assembled from the sections, the
//    topology, the engine.
pub mod config;
pub mod engine;
pub mod sizing;
pub mod topology;

pub use config::Config;
pub use engine::{Engine, EngineSnapshot, JobHandle};
pub use ground::{
    ByteSize, EngineError, Fault, FaultKind, JobError, JobId, JobOutput, JobSpec, JobTimings, MemoryLimit, PorepC1,
    PorepInput, PreparedProof, StageError, StageName, StageTiming, SubmitError,
};
pub use metrics::StageSnapshot;

/// docs/adding-a-stage.md, compiled so that its worked example stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/adding-a-stage.md")]
pub struct AddingAStage;

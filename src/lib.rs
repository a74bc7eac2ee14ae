//! cuzk: a pipelined Groth16 proving engine for Filecoin (BLS12-381).
//!
//! Embed it when you have circuits (any `bellperson::Circuit<blstrs::Scalar>`) and
//! their parameters and want proofs out of a pipeline that bounds its memory and
//! keeps every stage busy. The pipeline is an actor topology (see
//! [`cuzk_actors`]); this crate adds the binary's configuration, logging, the
//! benchmark report and a one-call entry point:
//!
//! ```no_run
//! use std::sync::Arc;
//! use cuzk::{prove_circuits, Engine, EngineConfig, ProvingKey, SyntheticCircuit, SyntheticSpec};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let spec = SyntheticSpec::pow2(10);
//! let mut rng = rand::thread_rng();
//! // Parameters: generated here; usually `ProvingKey::load(path, Default::default())`.
//! let params = Arc::new(cuzk::srs::generate_random(SyntheticCircuit::new(spec, 0)?, &mut rng)?);
//! let engine = Engine::start(EngineConfig::default())?;
//! let circuits = vec![SyntheticCircuit::new(spec, 1)?, SyntheticCircuit::new(spec, 2)?];
//! let out = prove_circuits(&engine, params, circuits, None)?;
//! assert_eq!(out.proofs.len(), 2); // bellperson::groth16::Proof<Bls12>, plus out.timings
//! engine.shutdown();
//! # Ok(()) }
//! ```
//!
//! The gRPC daemon, its client, the generated gRPC types they share and the
//! Prometheus metrics (modules `daemon`, `client`, `proto`, `metrics`) need the crate
//! feature `daemon`, on by default; with `default-features = false` the library
//! builds without tonic, clap or indicatif.

#![deny(unsafe_code)]

pub mod bench;
#[cfg(feature = "daemon")]
pub mod client;
pub mod config;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
mod errors;
pub mod logging;
#[cfg(feature = "daemon")]
pub mod metrics;
#[cfg(feature = "daemon")]
pub mod proto;

use std::sync::Arc;

use blstrs::Scalar;

pub use cuzk_actors as actors;
pub use cuzk_actors::{
    Config as EngineConfig, Engine, EngineError, EngineSnapshot, JobError, JobHandle, JobId, JobOutput, JobSpec,
    JobTimings, StageName, SubmitError,
};
pub use cuzk_filecoin as filecoin;
pub use cuzk_gpu as gpu;
pub use cuzk_srs::{self as srs, LoadOptions, ProvingKey};
pub use cuzk_synth::{self as synth, SyntheticCircuit, SyntheticSpec};

/// Errors of [`prove_circuits`].
#[derive(Debug, thiserror::Error)]
pub enum ProveError {
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Job(#[from] JobError),
}

/// Proves `circuits` (one partition each) with `params` through `engine`'s pipeline
/// and returns the proofs in order, with per-stage timings.
///
/// `randomness` gives `(r, s)` per circuit for reproducible proofs (the same bytes
/// as `bellperson::groth16::create_proof` with those r, s); `None` draws them from
/// the operating system.
///
/// # Errors
/// [`ProveError::Submit`] for an invalid request, [`ProveError::Job`] when a stage
/// fails (the error names the stage and partition).
pub fn prove_circuits<C>(
    engine: &Engine,
    params: Arc<ProvingKey>,
    circuits: Vec<C>,
    randomness: Option<Vec<(Scalar, Scalar)>>,
) -> Result<JobOutput, ProveError>
where
    C: bellperson::Circuit<Scalar> + Send + 'static,
{
    let mut spec = JobSpec::circuits(params, circuits);
    if let Some(rs) = randomness {
        spec = spec.with_randomness(rs);
    }
    Ok(engine.submit_blocking(spec)?.wait_blocking()?)
}

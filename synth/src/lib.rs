//! cuzk-synth: turns circuits into Groth16 witness assignments.
//!
//! Use it when you need what the Synthesize stage produces: the evaluations of the
//! A, B and C linear combinations at every constraint (`a`, `b`, `c`), the input and
//! auxiliary assignments, and the density bitmaps that say which variables appear in
//! the A and B queries. The semantics are bellperson's prover, exactly: one `ONE`
//! input is allocated first and an `input * 0 = 0` constraint is appended for every
//! input, so assignments made here prove against parameters made by bellperson.
//!
//! It also holds [`SyntheticCircuit`], a family of circuits of any size, public-input
//! count and A/B density whose witness costs a few field operations per constraint,
//! for tests and benchmarks that want the MSM/NTT work to dominate.
//!
//! It knows no Filecoin circuit (those are in cuzk-filecoin, above it), no actor and
//! no GPU.

#![deny(unsafe_code)]

mod assignment;
mod density;
mod error;
pub mod native;
mod precompiled;
mod recording;
mod shape_of;
mod synthetic;

pub use assignment::{synthesize, Assignment, ProvingAssignment};
pub use cuzk_core::{CircuitShape, EvalAlloc, EvalBuffer, Evals};
pub use density::Density;
pub use error::SynthError;
pub use precompiled::{
    record_blank, record_blank_replicated, synthesize_deferred, synthesize_in, synthesize_native,
    synthesize_precompiled, synthesize_precompiled_into, synthesize_recording, witness_only, Precompiled, RecordHint,
    SynthMode, WitnessCs,
};
pub use shape_of::{shape_and_nonzeros, shape_of};
pub use synthetic::{SyntheticCircuit, SyntheticSpec};

/// The scalar field every circuit here is over (BLS12-381's Fr).
pub use blstrs::Scalar;

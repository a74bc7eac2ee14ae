//! cuzk-core: the few types that synthesis, parameters and the proving backends all
//! speak, so that none of those crates has to import another.
//!
//! - [`CircuitShape`]: the sizes of a synthesized circuit, which parameters are checked
//!   against and backends allocate for.
//! - [`Evals`]: a partition's a, b, c evaluations, on the heap or in an [`EvalBuffer`]
//!   that a backend lends through an [`EvalAlloc`] (the CUDA backend lends pinned
//!   memory, so synthesis writes a/b/c where the upload reads them), or left to the
//!   backend ([`Evals::Deferred`]: the CUDA backend evaluates them on the device
//!   from a [`Recorded`] circuit's matrices).
//! - [`root_constraint_system!`]: bellperson's `ConstraintSystem` for cuzk's
//!   constraint systems (synthesis, recording, witness, parameter generation) from
//!   the three operations in which they differ.
//!
//! It depends on blstrs alone (the macro names bellperson by path in its callers).

#![deny(unsafe_code)]

mod cs;
mod evals;
mod shape;

pub use evals::{CsrView, Deferred, EvalAlloc, EvalBuffer, Evals, R1csEntry, R1csView, Recorded};
pub use shape::CircuitShape;

/// The scalar field every circuit here is over (BLS12-381's Fr).
pub use blstrs::Scalar;

//! cuzk-srs: Groth16 parameters (the structured reference string) for BLS12-381.
//!
//! Use it to read and write parameter files in bellperson's format (the format of
//! Filecoin's `.params` files), to hold decoded parameters in memory ([`ProvingKey`]),
//! to generate random parameters for tests and benchmarks, and TEST-ONLY timing
//! parameters of a circuit's exact shape (`generate_timing`; proofs never verify).
//!
//! Reading memory-maps the file and decodes the points on all cores; a file that is
//! truncated, holds a point off the curve or at infinity, or has trailing bytes is
//! refused with an error that names the section and the offset.
//!
//! It depends on cuzk-core alone among cuzk's crates: no synthesis, no Filecoin, no
//! actors.

#![deny(unsafe_code)]

mod error;
mod file;
mod generate;
mod key;
mod timing;

pub use error::SrsError;
pub use file::{KeyHeader, LoadOptions};
pub use generate::{generate_bellperson, generate_random};
pub use key::ProvingKey;
pub use timing::{generate_timing, timing_g1, timing_msm_dlog, TimingVector};

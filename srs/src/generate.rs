//! Random (toxic-waste) parameters for tests and benchmarks.

use bellperson::Circuit;
use blstrs::Bls12;
use blstrs::Scalar;
use rand_core::RngCore;

use crate::{ProvingKey, SrsError};

/// Generates random parameters for `circuit` with bellperson's generator.
///
/// The toxic waste comes from `rng`; never use such parameters in production.
///
/// # Errors
/// [`SrsError::Generate`] when the circuit cannot be synthesized or has an
/// unconstrained variable.
pub fn generate_random<C: Circuit<Scalar>, R: RngCore>(circuit: C, rng: &mut R) -> Result<ProvingKey, SrsError> {
    bellperson::groth16::generate_random_parameters::<Bls12, _, _>(circuit, rng)
        .map(ProvingKey::from)
        .map_err(|e| SrsError::Generate(e.to_string()))
}

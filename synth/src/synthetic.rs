//! Synthetic circuits: any number of constraints, public inputs and A/B density, with
//! a witness that costs one multiplication per constraint.
//!
//! Constraint `i` (1-based) defines a fresh aux variable `v_i`:
//!
//! ```text
//! (da_i * v_{i-1} + k_i * ONE + [inputs assigned to i]) * (db_i * v_{i-1} + m_i * ONE) = v_i
//! ```
//!
//! where `da_i`, `db_i` are 0/1 chosen so that a fraction `a_density` / `b_density` of
//! constraints use the previous variable, and `k_i`, `m_i` are fixed non-zero
//! constants. The structure (and so the parameters) depends only on the
//! [`SyntheticSpec`]; the witness depends on a seed.

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use ff::Field;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::SynthError;

/// Seed of the structural constants; changing it changes every parameter file.
const STRUCTURE_SEED: [u8; 32] = *b"cuzk synthetic circuit structure";

/// The shape of a synthetic circuit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticSpec {
    /// Total constraints as the prover counts them, including the `input * 0 = 0`
    /// constraint bellperson adds per input (public inputs + the `ONE` input).
    pub constraints: usize,
    /// Public inputs (not counting `ONE`).
    pub public_inputs: usize,
    /// Fraction (0..=1) of constraints whose A side uses the previous variable.
    pub a_density: f64,
    /// Fraction (0..=1) of constraints whose B side uses the previous variable.
    pub b_density: f64,
}

impl SyntheticSpec {
    /// `2^log2` constraints, 2 public inputs, fully dense A and B.
    pub fn pow2(log2: u32) -> Self {
        SyntheticSpec { constraints: 1usize << log2, public_inputs: 2, a_density: 1.0, b_density: 1.0 }
    }

    /// Number of body constraints (those defining aux variables).
    pub fn body(&self) -> usize {
        self.constraints - self.public_inputs - 1
    }

    /// Checks the spec can be built.
    ///
    /// # Errors
    /// [`SynthError::InvalidSpec`] naming the offending field.
    pub fn validate(&self) -> Result<(), SynthError> {
        if self.constraints < self.public_inputs + 2 {
            return Err(SynthError::InvalidSpec(format!(
                "constraints = {} is too small: {} public inputs need at least {} \
                 (one per input, one for ONE, one body constraint)",
                self.constraints,
                self.public_inputs,
                self.public_inputs + 2
            )));
        }
        for (name, v) in [("a_density", self.a_density), ("b_density", self.b_density)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(SynthError::InvalidSpec(format!("{name} = {v} is not in 0..=1")));
            }
        }
        Ok(())
    }
}

/// A synthetic circuit instance: a spec plus a witness seed.
#[derive(Clone, Debug)]
pub struct SyntheticCircuit {
    pub spec: SyntheticSpec,
    pub seed: u64,
}

impl SyntheticCircuit {
    /// A circuit of `spec` whose witness is derived from `seed`.
    ///
    /// # Errors
    /// [`SynthError::InvalidSpec`] if the spec cannot be built.
    pub fn new(spec: SyntheticSpec, seed: u64) -> Result<Self, SynthError> {
        spec.validate()?;
        Ok(SyntheticCircuit { spec, seed })
    }

    /// The public inputs (excluding `ONE`) this instance's proof verifies against.
    pub fn public_inputs(&self) -> Vec<Scalar> {
        let mut rng = self.witness_rng();
        let _v0 = Scalar::random(&mut rng);
        (0..self.spec.public_inputs).map(|_| Scalar::random(&mut rng)).collect()
    }

    fn witness_rng(&self) -> ChaCha20Rng {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.seed.to_le_bytes());
        seed[8..16].copy_from_slice(b"witness!");
        ChaCha20Rng::from_seed(seed)
    }
}

/// Fraction threshold for a u32 draw.
fn chosen(draw: u32, density: f64) -> bool {
    (draw as f64) < density * (u32::MAX as f64 + 1.0)
}

fn nonzero(rng: &mut ChaCha20Rng) -> Scalar {
    Scalar::from(rng.next_u64() | 1)
}

impl Circuit<Scalar> for SyntheticCircuit {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let spec = self.spec;
        if spec.validate().is_err() {
            return Err(SynthesisError::Unsatisfiable);
        }
        let mut wrng = self.witness_rng();
        let mut srng = ChaCha20Rng::from_seed(STRUCTURE_SEED);

        let v0 = Scalar::random(&mut wrng);
        let mut inputs = Vec::with_capacity(spec.public_inputs);
        for j in 0..spec.public_inputs {
            let val = Scalar::random(&mut wrng);
            let var = cs.alloc_input(|| format!("input {j}"), || Ok(val))?;
            inputs.push((var, val));
        }
        let body = spec.body();
        let mut prev_val = v0;
        let mut prev = cs.alloc(|| "v0", || Ok(v0))?;
        for i in 1..=body {
            let k = nonzero(&mut srng);
            let m = nonzero(&mut srng);
            let draws = srng.next_u64();
            // v0 must appear in some query (an unconstrained variable has no L point).
            let da = i == 1 || chosen(draws as u32, spec.a_density);
            let db = chosen((draws >> 32) as u32, spec.b_density);

            let mut a_val = k;
            let mut b_val = m;
            if da {
                a_val += prev_val;
            }
            if db {
                b_val += prev_val;
            }
            // Public input j goes into the A side of body constraint (j % body) + 1.
            let mut extra = Vec::new();
            let mut j = i - 1;
            while j < inputs.len() {
                a_val += inputs[j].1;
                extra.push(inputs[j].0);
                j += body;
            }
            let v_val = a_val * b_val;
            let v = cs.alloc(|| "v", || Ok(v_val))?;
            cs.enforce(
                || "step",
                |mut lc| {
                    if da {
                        lc = lc + prev;
                    }
                    lc = lc + (k, CS::one());
                    for var in &extra {
                        lc = lc + *var;
                    }
                    lc
                },
                |mut lc| {
                    if db {
                        lc = lc + prev;
                    }
                    lc + (m, CS::one())
                },
                |lc| lc + v,
            );
            prev = v;
            prev_val = v_val;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthesize;

    #[test]
    fn sizes_and_density() {
        for (n, p, da, db) in [(1000, 0, 1.0, 1.0), (1537, 5, 0.5, 0.1), (64, 60, 0.0, 0.0), (3, 1, 1.0, 0.0)] {
            let spec = SyntheticSpec { constraints: n, public_inputs: p, a_density: da, b_density: db };
            let a = synthesize(SyntheticCircuit::new(spec, 7).unwrap()).unwrap();
            let shape = a.shape();
            assert_eq!(shape.constraints, n);
            assert_eq!(shape.inputs, p + 1);
            assert_eq!(shape.aux, spec.body() + 1);
            let body = spec.body() as f64;
            let a_frac = a.a_aux_density.count() as f64 / body;
            assert!((a_frac - da).abs() < 0.1 || body < 10.0, "{a_frac} vs {da}");
            // The witness satisfies every constraint.
            let [ea, eb, ec] = a.abc.abc();
            for i in 0..n {
                assert_eq!(ea[i] * eb[i], ec[i], "constraint {i}");
            }
        }
    }

    #[test]
    fn invalid_specs() {
        let bad = SyntheticSpec { constraints: 3, public_inputs: 2, a_density: 1.0, b_density: 1.0 };
        assert!(SyntheticCircuit::new(bad, 0).unwrap_err().to_string().contains("too small"));
        let bad = SyntheticSpec { a_density: 1.5, ..SyntheticSpec::pow2(4) };
        assert!(SyntheticCircuit::new(bad, 0).unwrap_err().to_string().contains("a_density"));
    }
}

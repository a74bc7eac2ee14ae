//! The sizes of a circuit without its witness: a constraint system that counts
//! variables and constraints and tracks the A/B query densities, nothing else. It is
//! what parameters of a circuit's exact shape need (timing parameters for a 32GiB
//! PoRep partition: 130M constraints, where a full recording would take ~25 GiB).

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;

use cuzk_core::CircuitShape;

use crate::{Density, SynthError};

/// Counts and densities only (one bit per variable per query).
#[derive(Default)]
struct ShapeCs {
    inputs: usize,
    constraints: usize,
    /// Non-zero entries of A and B (what a recording's matrices will hold).
    nonzeros: [usize; 2],
    b_input: Density,
    a_aux: Density,
    b_aux: Density,
}

/// Marks the variables of `lc` with a non-zero coefficient; returns how many it has.
fn mark(lc: &LinearCombination<Scalar>, mut input: Option<&mut Density>, aux: &mut Density) -> usize {
    let mut n = 0;
    for (&i, c) in lc.iter_inputs() {
        if !c.is_zero_vartime() {
            n += 1;
            if let Some(d) = input.as_deref_mut() {
                d.set(i);
            }
        }
    }
    for (&i, c) in lc.iter_aux() {
        if !c.is_zero_vartime() {
            n += 1;
            aux.set(i);
        }
    }
    n
}

impl ShapeCs {
    fn new_root() -> Self {
        Self::default()
    }

    #[inline]
    fn push_aux(&mut self, _: impl FnOnce() -> Result<Scalar, SynthesisError>) -> Result<Variable, SynthesisError> {
        self.a_aux.push();
        self.b_aux.push();
        Ok(Variable::new_unchecked(Index::Aux(self.a_aux.len() - 1)))
    }

    #[inline]
    fn push_input(&mut self, _: impl FnOnce() -> Result<Scalar, SynthesisError>) -> Result<Variable, SynthesisError> {
        self.inputs += 1;
        self.b_input.push();
        Ok(Variable::new_unchecked(Index::Input(self.inputs - 1)))
    }

    #[inline]
    fn push_constraint(
        &mut self,
        a: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        b: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        _c: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    ) {
        // Inputs are always fully dense in A (the `input * 0 = 0` constraints), and
        // C has no query of its own (its LC is not even built): only A's aux and B's
        // inputs and aux are tracked.
        self.nonzeros[0] += mark(&a(LinearCombination::zero()), None, &mut self.a_aux);
        self.nonzeros[1] += mark(&b(LinearCombination::zero()), Some(&mut self.b_input), &mut self.b_aux);
        self.constraints += 1;
    }
}

cuzk_core::root_constraint_system!(ShapeCs);

/// The [`CircuitShape`] `circuit` synthesizes to, with bellperson's prover semantics
/// (a `ONE` input first, an `input * 0 = 0` constraint per input), without computing
/// any witness value: a blank circuit (no values) works. Equal to
/// `synthesize(circuit).shape()` for a circuit that has values.
///
/// # Errors
/// [`SynthError::Circuit`] when the circuit's `synthesize` fails.
pub fn shape_of<C: Circuit<Scalar>>(circuit: C) -> Result<CircuitShape, SynthError> {
    shape_and_nonzeros(circuit).map(|(shape, _)| shape)
}

/// [`shape_of`], and the non-zero entries of A and B: what the circuit's
/// recording holds in the matrices a device keeps to evaluate a, b, c.
///
/// # Errors
/// As [`shape_of`].
pub fn shape_and_nonzeros<C: Circuit<Scalar>>(circuit: C) -> Result<(CircuitShape, [usize; 2]), SynthError> {
    let mut cs = ShapeCs::new_root();
    cs.alloc_input(|| "one", || Ok(Scalar::ONE))?;
    circuit.synthesize(&mut cs)?;
    for i in 0..cs.inputs {
        cs.enforce(|| "", |lc| lc + Variable::new_unchecked(Index::Input(i)), |lc| lc, |lc| lc);
    }
    let shape = CircuitShape {
        constraints: cs.constraints,
        inputs: cs.inputs,
        aux: cs.a_aux.len(),
        a_query: cs.inputs + cs.a_aux.count(),
        b_query: cs.b_input.count() + cs.b_aux.count(),
    };
    Ok((shape, cs.nonzeros))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{synthesize, SyntheticCircuit, SyntheticSpec};

    #[test]
    fn same_shape_as_synthesis() {
        for (constraints, public_inputs, a_density, b_density) in
            [(300, 3, 0.5, 0.2), (4096, 1, 1.0, 0.1), (64, 0, 0.3, 1.0)]
        {
            let spec = SyntheticSpec { constraints, public_inputs, a_density, b_density };
            let want = synthesize(SyntheticCircuit::new(spec, 7).unwrap()).unwrap().shape();
            assert_eq!(shape_of(SyntheticCircuit::new(spec, 7).unwrap()).unwrap(), want, "{spec:?}");
            let (_, pre) = crate::synthesize_recording(SyntheticCircuit::new(spec, 7).unwrap()).unwrap();
            let [a, b, _] = pre.unwrap().nonzeros_per_matrix();
            let (shape, nonzeros) = shape_and_nonzeros(SyntheticCircuit::new(spec, 7).unwrap()).unwrap();
            assert_eq!((shape, nonzeros), (want, [a, b]), "{spec:?}: the recording's A and B");
        }
    }
}

//! The proving constraint system: evaluates every constraint's A, B and C linear
//! combinations on the witness and tracks query densities, as bellperson's prover does.

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;

use cuzk_core::{CircuitShape, Evals};

use crate::{Density, SynthError};

/// Everything the later stages need from one synthesized circuit.
///
/// Invariants (the same as bellperson's `ProvingAssignment` after synthesis):
/// `a`, `b`, `c` have one entry per constraint, including the `input * 0 = 0`
/// constraints appended for every input; `input[0]` is `ONE`; densities have one bit
/// per input (`b_input_density`) or aux variable (`a_aux_density`, `b_aux_density`).
/// Inputs are always fully dense in the A query, so there is no `a_input_density`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assignment {
    /// a, b, c: on the heap, or in a buffer a backend lent ([`Evals`]).
    pub abc: Evals,
    pub input: Vec<Scalar>,
    pub aux: Vec<Scalar>,
    pub a_aux_density: Density,
    pub b_input_density: Density,
    pub b_aux_density: Density,
}

impl Assignment {
    /// Sizes of this assignment.
    pub fn shape(&self) -> CircuitShape {
        CircuitShape {
            constraints: self.abc.len(),
            inputs: self.input.len(),
            aux: self.aux.len(),
            a_query: self.input.len() + self.a_aux_density.count(),
            b_query: self.b_input_density.count() + self.b_aux_density.count(),
        }
    }

    /// Heap bytes held by this assignment.
    pub fn heap_bytes(&self) -> usize {
        let s = std::mem::size_of::<Scalar>();
        self.abc.heap_bytes()
            + (self.input.capacity() + self.aux.capacity()) * s
            + self.a_aux_density.heap_bytes()
            + self.b_input_density.heap_bytes()
            + self.b_aux_density.heap_bytes()
    }
}

/// Synthesizes `circuit` into an [`Assignment`] with bellperson's prover semantics.
///
/// # Errors
/// [`SynthError::Circuit`] when the circuit's `synthesize` fails (for example a
/// missing witness value).
pub fn synthesize<C: Circuit<Scalar>>(circuit: C) -> Result<Assignment, SynthError> {
    let mut cs = ProvingAssignment::new();
    cs.alloc_input(|| "one", || Ok(Scalar::ONE))?;
    circuit.synthesize(&mut cs)?;
    // `input * 0 = 0` for every input: makes the IC query fully dense and the inputs
    // linearly independent (bellperson and its parameter generator both add these).
    for i in 0..cs.s.input.len() {
        cs.enforce(|| "", |lc| lc + Variable::new_unchecked(Index::Input(i)), |lc| lc, |lc| lc);
    }
    Ok(cs.into_inner())
}

/// A [`ConstraintSystem`] that records the witness; see [`synthesize`].
///
/// Public so that callers with their own synthesis driver (for example a circuit
/// split into parts synthesized in parallel and joined with `extend`) can use it.
#[derive(Debug, Default)]
pub struct ProvingAssignment {
    a: Vec<Scalar>,
    b: Vec<Scalar>,
    c: Vec<Scalar>,
    /// Everything else (its `abc` stays empty until [`ProvingAssignment::into_inner`]).
    s: Assignment,
}

impl ProvingAssignment {
    /// Takes the finished assignment.
    pub fn into_inner(self) -> Assignment {
        Assignment { abc: Evals::heap(self.a, self.b, self.c), ..self.s }
    }

    /// Goes on from `s` (a, b, c on the heap), as if it had synthesized it.
    pub(crate) fn resume(s: Assignment) -> Self {
        let [a, b, c] = s.abc.abc().map(<[Scalar]>::to_vec);
        ProvingAssignment { a, b, c, s: Assignment { abc: Evals::default(), ..s } }
    }

    /// Inputs allocated so far, `ONE` included.
    pub fn inputs(&self) -> usize {
        self.s.input.len()
    }
}

/// Evaluates `lc`, marking variables with a non-zero coefficient in the densities given.
#[inline]
fn eval(
    lc: &LinearCombination<Scalar>,
    mut input_density: Option<&mut Density>,
    mut aux_density: Option<&mut Density>,
    input: &[Scalar],
    aux: &[Scalar],
) -> Scalar {
    let mut acc = Scalar::ZERO;
    for (&i, coeff) in lc.iter_inputs() {
        if coeff.is_zero_vartime() {
            continue;
        }
        acc += if *coeff == Scalar::ONE { input[i] } else { input[i] * coeff };
        if let Some(d) = input_density.as_deref_mut() {
            d.set(i);
        }
    }
    for (&i, coeff) in lc.iter_aux() {
        if coeff.is_zero_vartime() {
            continue;
        }
        acc += if *coeff == Scalar::ONE { aux[i] } else { aux[i] * coeff };
        if let Some(d) = aux_density.as_deref_mut() {
            d.set(i);
        }
    }
    acc
}

impl ProvingAssignment {
    fn new_root() -> Self {
        Self::default()
    }

    #[inline]
    pub(crate) fn push_aux(
        &mut self,
        f: impl FnOnce() -> Result<Scalar, SynthesisError>,
    ) -> Result<Variable, SynthesisError> {
        let s = &mut self.s;
        s.aux.push(f()?);
        s.a_aux_density.push();
        s.b_aux_density.push();
        Ok(Variable::new_unchecked(Index::Aux(s.aux.len() - 1)))
    }

    #[inline]
    pub(crate) fn push_input(
        &mut self,
        f: impl FnOnce() -> Result<Scalar, SynthesisError>,
    ) -> Result<Variable, SynthesisError> {
        let s = &mut self.s;
        s.input.push(f()?);
        s.b_input_density.push();
        Ok(Variable::new_unchecked(Index::Input(s.input.len() - 1)))
    }

    #[inline]
    pub(crate) fn push_constraint(
        &mut self,
        a: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        b: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        c: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    ) {
        let s = &mut self.s;
        let a = a(LinearCombination::zero());
        let b = b(LinearCombination::zero());
        let c = c(LinearCombination::zero());
        // Inputs are fully dense in A (every input has an `input * 0 = 0` constraint),
        // so only aux density is tracked there. C has no query of its own.
        let av = eval(&a, None, Some(&mut s.a_aux_density), &s.input, &s.aux);
        let bv = eval(&b, Some(&mut s.b_input_density), Some(&mut s.b_aux_density), &s.input, &s.aux);
        let cv = eval(&c, None, None, &s.input, &s.aux);
        self.a.push(av);
        self.b.push(bv);
        self.c.push(cv);
    }
}

cuzk_core::root_constraint_system!(ProvingAssignment, {
    fn is_extensible() -> bool {
        true
    }

    fn extend(&mut self, other: &Self) {
        let (s, o) = (&mut self.s, &other.s);
        s.a_aux_density.extend(&o.a_aux_density, false);
        s.b_input_density.extend(&o.b_input_density, true);
        s.b_aux_density.extend(&o.b_aux_density, false);
        self.a.extend_from_slice(&other.a);
        self.b.extend_from_slice(&other.b);
        self.c.extend_from_slice(&other.c);
        // The sub-assignment's first input is its own temporary `ONE`.
        s.input.extend_from_slice(&o.input[1..]);
        s.aux.extend_from_slice(&o.aux);
    }
});

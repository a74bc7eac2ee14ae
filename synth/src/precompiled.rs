//! Pre-compiled synthesis: record a circuit's R1CS once, then synthesize later
//! instances by computing only the witness and multiplying the recorded matrices by it.
//!
//! Why: bellperson-style synthesis builds three `LinearCombination`s (heap vectors)
//! for every constraint and evaluates them on the spot. For PoRep partitions that is
//! most of the CPU time of a proof, and it is the same work every time: a Groth16
//! proving key fixes the constraint matrices, so every circuit proved with one key
//! has the same A, B, C and the same densities, and only the witness changes.
//! [`synthesize_recording`] runs the circuit once the usual way and keeps the
//! matrices (sparse rows, coefficients deduplicated into a table);
//! [`synthesize_precompiled`] runs later circuits through a constraint system whose
//! `enforce` does nothing (the constraint closures never run) and computes `a`, `b`,
//! `c` as sparse matrix-vector products. The result is the same
//! [`Assignment`], field element for field element (the tests compare them).

use std::{collections::HashMap, hash::BuildHasherDefault, mem::MaybeUninit};

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;

use crate::{
    assignment::ProvingAssignment, synthesize, Assignment, CircuitShape, Density, EvalAlloc, Evals, SynthError,
};

/// One non-zero matrix entry: a variable (inputs tagged by the low bit) and an
/// index into the coefficient table (0 is `ONE`, which needs no multiplication).
/// cuzk-core's type, laid out as a device reads it.
pub(crate) type Entry = cuzk_core::R1csEntry;

#[inline]
fn entry(index: Index, coeff: u32) -> Option<Entry> {
    let var = match index {
        Index::Input(i) => u32::try_from(i).ok()?.checked_mul(2)?,
        Index::Aux(i) => u32::try_from(i).ok()?.checked_mul(2)? | 1,
    };
    Some(Entry { var, coeff })
}

/// Coefficient-table slots with a cheaper evaluation than a multiplication.
const ONE: u32 = 0;
const MINUS_ONE: u32 = 1;
const TWO: u32 = 2;

/// One constraint matrix in compressed-row form.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Matrix {
    /// `row_end[i]` is one past row `i`'s last entry.
    pub(crate) row_end: Vec<u32>,
    pub(crate) entries: Vec<Entry>,
}

impl Matrix {
    fn heap_bytes(&self) -> usize {
        self.row_end.capacity() * 4 + self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// Rows `rows` times the witness, written into `out` (one value per row; every
    /// slot is written, none read: see [`Slot`]).
    fn eval_rows(&self, rows: std::ops::Range<usize>, coeffs: &[Scalar], w: [&[Scalar]; 2], out: &mut [impl Slot]) {
        debug_assert_eq!(rows.len(), out.len());
        let mut start = if rows.start == 0 { 0 } else { self.row_end[rows.start - 1] as usize };
        for (row, o) in rows.zip(out.iter_mut()) {
            let end = self.row_end[row] as usize;
            o.set(self.row_value(start..end, coeffs, w));
            start = end;
        }
    }

    #[inline(always)]
    fn row_value(&self, entries: std::ops::Range<usize>, coeffs: &[Scalar], w: [&[Scalar]; 2]) -> Scalar {
        let mut acc = Scalar::ZERO;
        for e in &self.entries[entries] {
            let v = &w[(e.var & 1) as usize][(e.var >> 1) as usize];
            // Most coefficients are 1, -1 or 2 and most witness values are bits
            // (SHA-256 gadgets): only the rest need a field multiplication.
            match e.coeff {
                ONE => acc += v,
                MINUS_ONE => acc -= v,
                TWO => acc += v.double(),
                k if *v == Scalar::ZERO => debug_assert!(k > TWO),
                k if *v == Scalar::ONE => acc += &coeffs[k as usize],
                k => acc += *v * coeffs[k as usize],
            }
        }
        acc
    }
}

/// A circuit's recorded R1CS: what [`synthesize_precompiled`] needs besides the
/// witness. Made by [`synthesize_recording`].
#[derive(Clone, Debug, PartialEq)]
pub struct Precompiled {
    pub(crate) inputs: usize,
    pub(crate) aux: usize,
    pub(crate) a: Matrix,
    pub(crate) b: Matrix,
    pub(crate) c: Matrix,
    /// Distinct non-zero coefficients; slots [`ONE`], [`MINUS_ONE`], [`TWO`] first.
    pub(crate) coeffs: Vec<Scalar>,
    pub(crate) a_aux_density: Density,
    pub(crate) b_input_density: Density,
    pub(crate) b_aux_density: Density,
}

impl Precompiled {
    /// Constraints, including one per input.
    pub fn constraints(&self) -> usize {
        self.a.row_end.len()
    }

    /// Non-zero entries of A, B and C together.
    pub fn nonzeros(&self) -> usize {
        self.a.entries.len() + self.b.entries.len() + self.c.entries.len()
    }

    /// Non-zero entries of A, B and C each.
    pub fn nonzeros_per_matrix(&self) -> [usize; 3] {
        [self.a.entries.len(), self.b.entries.len(), self.c.entries.len()]
    }

    /// Distinct coefficients (`ONE` included).
    pub fn distinct_coefficients(&self) -> usize {
        self.coeffs.len()
    }

    /// The sizes of the recorded circuit: what [`Assignment::shape`] gives for every
    /// circuit synthesized with this recording, so what its parameters must match
    /// (checked before a recording is kept or saved, and when one is loaded).
    pub fn shape(&self) -> CircuitShape {
        CircuitShape {
            constraints: self.constraints(),
            inputs: self.inputs,
            aux: self.aux,
            a_query: self.inputs + self.a_aux_density.count(),
            b_query: self.b_input_density.count() + self.b_aux_density.count(),
        }
    }

    /// Heap bytes held (what a cache keeping it should charge).
    pub fn heap_bytes(&self) -> usize {
        self.a.heap_bytes()
            + self.b.heap_bytes()
            + self.c.heap_bytes()
            + self.coeffs.capacity() * 32
            + self.a_aux_density.heap_bytes()
            + self.b_input_density.heap_bytes()
            + self.b_aux_density.heap_bytes()
    }
}

/// What a backend that evaluates a, b, c itself reads ([`Evals::Deferred`]).
impl cuzk_core::Recorded for Precompiled {
    fn rows(&self) -> usize {
        self.constraints()
    }

    fn view(&self) -> cuzk_core::R1csView<'_> {
        fn csr(m: &Matrix) -> cuzk_core::CsrView<'_> {
            cuzk_core::CsrView { row_end: &m.row_end, entries: &m.entries }
        }
        cuzk_core::R1csView {
            inputs: self.inputs,
            aux: self.aux,
            a: csr(&self.a),
            b: csr(&self.b),
            coeffs: &self.coeffs,
        }
    }

    fn evaluate(&self, input: &[Scalar], aux: &[Scalar]) -> [Vec<Scalar>; 3] {
        let n = self.constraints();
        product_vecs(self, [input, aux], n, product_threads(n))
    }
}

/// What a recording will hold, known before the circuit runs (from its parameters:
/// inputs are `vk.ic`, aux variables the L points, constraints at most the domain).
/// The recorder reserves its vectors once instead of growing them by doubling:
/// at 32GiB the growth (every doubling a fresh copy, its pages zeroed first) was
/// about two fifths of a recording. Only a hint: a circuit that differs still
/// records correctly, and a reservation the system refuses is skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHint {
    pub inputs: usize,
    pub aux: usize,
    /// An upper bound on the constraints (the parameters' domain size).
    pub max_constraints: usize,
}

/// A coefficient in Montgomery form, as the recorder's table looks it up.
#[derive(Clone, Copy, PartialEq, Eq)]
struct CoeffKey([u64; 4]);

impl std::hash::Hash for CoeffKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // A field element's limbs are already spread: one word is hash enough
        // (SipHash over 32 bytes was a visible share of a recording).
        state.write_u64(self.0[0] ^ self.0[3].rotate_left(32));
    }
}

/// Passes [`CoeffKey`]'s one word through, mixed.
#[derive(Default)]
struct LimbHasher(u64);

impl std::hash::Hasher for LimbHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Records a circuit's matrices and keeps its values, evaluating nothing: a, b, c
/// and the densities are computed from the recording afterwards ([`finish`]), the
/// products on several threads. Why: the recording is the first-ever proof's
/// critical path (minutes at 32GiB), and evaluating every linear combination on the
/// circuit's one thread while growing a, b, c beside the matrices was most of it.
struct Recorder {
    input: Vec<Scalar>,
    aux: Vec<Scalar>,
    a: Matrix,
    b: Matrix,
    c: Matrix,
    coeffs: Vec<Scalar>,
    coeff_index: HashMap<CoeffKey, u32, BuildHasherDefault<LimbHasher>>,
    /// [`ONE`], [`MINUS_ONE`] and [`TWO`] in Montgomery form.
    special: [[u64; 4]; 3],
    /// Set when an index or count does not fit the compact encoding.
    too_large: bool,
    /// Entries a matrix may hold (the encoding's row ends are u32).
    max_entries: usize,
    hint: RecordHint,
    /// The row after which the matrices' entries are reserved for the rest, from
    /// their density so far (`usize::MAX`: done, or no hint).
    estimate_at: usize,
    /// Once the circuit outgrew the encoding: the rows recorded so far evaluated
    /// and dropped, the rest synthesized the plain way (no recording, a valid
    /// assignment).
    plain: Option<ProvingAssignment>,
    /// Recording a blank circuit ([`record_blank`]): no value closure runs, the
    /// variables are only counted (inputs, aux), and a circuit that outgrows the
    /// encoding is not recorded at all.
    blank: Option<(usize, usize)>,
}

impl Recorder {
    fn coeff(&mut self, c: &Scalar) -> u32 {
        // Compared and hashed in their Montgomery form: no conversion, no
        // constant-time comparison (coefficients are public), once per term.
        let key = blst::blst_fr::from(*c).l;
        if key == self.special[0] {
            return ONE;
        } else if key == self.special[1] {
            return MINUS_ONE;
        } else if key == self.special[2] {
            return TWO;
        }
        let Ok(next) = u32::try_from(self.coeffs.len()) else {
            self.too_large = true;
            return ONE;
        };
        *self.coeff_index.entry(CoeffKey(key)).or_insert_with(|| {
            self.coeffs.push(*c);
            next
        })
    }

    fn record(&mut self, lc: &LinearCombination<Scalar>, which: usize) {
        let terms =
            lc.iter_inputs().map(|(&i, c)| (Index::Input(i), c)).chain(lc.iter_aux().map(|(&i, c)| (Index::Aux(i), c)));
        for (index, c) in terms {
            if c.is_zero_vartime() {
                continue;
            }
            let coeff = self.coeff(c);
            let m = match which {
                0 => &mut self.a,
                1 => &mut self.b,
                _ => &mut self.c,
            };
            // Straight into the matrix: no row buffer per linear combination. An
            // entry that does not fit discards the whole recording.
            match entry(index, coeff) {
                Some(e) => m.entries.push(e),
                None => self.too_large = true,
            }
        }
        let m = match which {
            0 => &mut self.a,
            1 => &mut self.b,
            _ => &mut self.c,
        };
        match u32::try_from(m.entries.len()) {
            Ok(end) if m.entries.len() <= self.max_entries => m.row_end.push(end),
            _ => self.too_large = true,
        }
    }

    /// The recording and the assignment of what was synthesized so far: the
    /// densities marked from the matrices, a, b, c their products with the values
    /// (left empty without `products`).
    fn finish(&mut self, products: bool) -> (Assignment, Precompiled) {
        let take = |m: &mut Matrix| {
            let mut m = std::mem::take(m);
            m.row_end.shrink_to_fit();
            m.entries.shrink_to_fit();
            m
        };
        let (inputs, aux) = self.counts();
        let (mut a_aux_density, mut b_input_density, mut b_aux_density) =
            (Density::zeros(aux), Density::zeros(inputs), Density::zeros(aux));
        let (a, b, c) = (take(&mut self.a), take(&mut self.b), take(&mut self.c));
        // Inputs are fully dense in A (the `input * 0 = 0` rows), so only A's aux
        // density is tracked; C has no query of its own.
        mark_density(&a, None, Some(&mut a_aux_density));
        mark_density(&b, Some(&mut b_input_density), Some(&mut b_aux_density));
        let pre = Precompiled {
            inputs,
            aux,
            a,
            b,
            c,
            coeffs: std::mem::take(&mut self.coeffs),
            a_aux_density,
            b_input_density,
            b_aux_density,
        };
        let n = if products { pre.constraints() } else { 0 };
        let [a, b, c] = product_vecs(&pre, [&self.input, &self.aux], n, product_threads(n));
        let assignment = Assignment {
            abc: Evals::heap(a, b, c),
            input: std::mem::take(&mut self.input),
            aux: std::mem::take(&mut self.aux),
            a_aux_density: pre.a_aux_density.clone(),
            b_input_density: pre.b_input_density.clone(),
            b_aux_density: pre.b_aux_density.clone(),
        };
        (assignment, pre)
    }
}

impl Recorder {
    fn new_root() -> Self {
        Recorder {
            input: Vec::new(),
            aux: Vec::new(),
            a: Matrix::default(),
            b: Matrix::default(),
            c: Matrix::default(),
            coeffs: vec![Scalar::ONE, -Scalar::ONE, Scalar::ONE.double()],
            coeff_index: HashMap::default(),
            special: [Scalar::ONE, -Scalar::ONE, Scalar::ONE.double()].map(|c| blst::blst_fr::from(c).l),
            too_large: false,
            max_entries: u32::MAX as usize,
            hint: RecordHint::default(),
            estimate_at: usize::MAX,
            plain: None,
            blank: None,
        }
    }

    /// Reserves what `hint` says the recording will hold (nothing without one).
    fn reserve(&mut self, hint: RecordHint) {
        self.hint = hint;
        if hint.max_constraints == 0 {
            return;
        }
        // Failures are ignored: growth takes over where the system refuses.
        let _ = self.input.try_reserve_exact(hint.inputs);
        let _ = self.aux.try_reserve_exact(hint.aux);
        for m in [&mut self.a, &mut self.b, &mut self.c] {
            let _ = m.row_end.try_reserve_exact(hint.max_constraints);
        }
        // The entries per row are unknown until part of the circuit has run.
        self.estimate_at = (hint.max_constraints / 16).max(1 << 12);
    }

    /// Once `estimate_at` rows are recorded: each matrix's entries for the rest,
    /// at its density so far plus an eighth (a shrink to the final length stays
    /// in place while it is over half the reservation).
    fn reserve_entries(&mut self) {
        self.estimate_at = usize::MAX;
        let rows = self.a.row_end.len().max(1);
        let left = self.hint.max_constraints.saturating_sub(rows);
        for m in [&mut self.a, &mut self.b, &mut self.c] {
            let per_row = m.entries.len() as f64 / rows as f64;
            let more = (per_row * 1.125 * left as f64) as usize;
            let _ = m.entries.try_reserve_exact(more);
        }
    }

    #[inline]
    fn push_aux(&mut self, f: impl FnOnce() -> Result<Scalar, SynthesisError>) -> Result<Variable, SynthesisError> {
        if let Some((_, aux)) = &mut self.blank {
            *aux += 1;
            return Ok(Variable::new_unchecked(Index::Aux(*aux - 1)));
        }
        if let Some(p) = &mut self.plain {
            return p.push_aux(f);
        }
        self.aux.push(f()?);
        Ok(Variable::new_unchecked(Index::Aux(self.aux.len() - 1)))
    }

    #[inline]
    fn push_input(&mut self, f: impl FnOnce() -> Result<Scalar, SynthesisError>) -> Result<Variable, SynthesisError> {
        if let Some((inputs, _)) = &mut self.blank {
            *inputs += 1;
            return Ok(Variable::new_unchecked(Index::Input(*inputs - 1)));
        }
        if let Some(p) = &mut self.plain {
            return p.push_input(f);
        }
        self.input.push(f()?);
        Ok(Variable::new_unchecked(Index::Input(self.input.len() - 1)))
    }

    /// Inputs and aux variables allocated so far.
    fn counts(&self) -> (usize, usize) {
        self.blank.unwrap_or((self.input.len(), self.aux.len()))
    }

    #[inline]
    fn push_constraint(
        &mut self,
        a: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        b: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        c: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    ) {
        if let Some(p) = &mut self.plain {
            return p.push_constraint(a, b, c);
        }
        if self.too_large {
            // A blank recording that outgrew the encoding: nothing more to record.
            return;
        }
        let (a, b, c) = (a(LinearCombination::zero()), b(LinearCombination::zero()), c(LinearCombination::zero()));
        if self.a.row_end.len() == self.estimate_at {
            self.reserve_entries();
        }
        let before = [&self.a, &self.b, &self.c].map(|m| (m.row_end.len(), m.entries.len()));
        self.record(&a, 0);
        self.record(&b, 1);
        self.record(&c, 2);
        if self.too_large && self.blank.is_some() {
            // No values to go on with the plain way: this is not recorded.
            for m in [&mut self.a, &mut self.b, &mut self.c] {
                *m = Matrix::default();
            }
        } else if self.too_large {
            // This constraint did not fit: the rows before it are complete; they are
            // evaluated, and it and the rest go the plain way.
            for (m, (rows, entries)) in [&mut self.a, &mut self.b, &mut self.c].into_iter().zip(before) {
                m.row_end.truncate(rows);
                m.entries.truncate(entries);
            }
            let mut p = ProvingAssignment::resume(self.finish(true).0);
            p.push_constraint(|_| a, |_| b, |_| c);
            self.plain = Some(p);
        }
    }
}

/// The variables of `m` with a non-zero coefficient, as [`ProvingAssignment`]'s
/// evaluation marks them (a recorded entry's coefficient is never zero): inputs
/// into `input` when given, aux into `aux` when given.
fn mark_density(m: &Matrix, mut input: Option<&mut Density>, mut aux: Option<&mut Density>) {
    for e in &m.entries {
        let d = if e.var & 1 == 1 { aux.as_deref_mut() } else { input.as_deref_mut() };
        if let Some(d) = d {
            d.set((e.var >> 1) as usize);
        }
    }
}

cuzk_core::root_constraint_system!(Recorder);

/// Computes the witness only: allocations run their value closures, `enforce` does
/// nothing but count. Not extensible, like [`Recorder`], so a circuit that
/// synthesizes parts separately when it can takes the same path in both and
/// allocates in the same order. Native witness generators (`crate::native`) write
/// into it directly beside the gadgets that still run on it.
pub struct WitnessCs {
    pub(crate) input: Vec<Scalar>,
    pub(crate) aux: Vec<Scalar>,
    /// `enforce` calls (and the constraints native gadgets stand for): checked
    /// against the recording's constraint count.
    pub(crate) constraints: usize,
}

impl WitnessCs {
    fn new_root() -> Self {
        WitnessCs { input: Vec::new(), aux: Vec::new(), constraints: 0 }
    }

    fn with_capacity(pre: &Precompiled) -> Self {
        WitnessCs { input: Vec::with_capacity(pre.inputs), aux: Vec::with_capacity(pre.aux), constraints: 0 }
    }

    /// Auxiliary variables allocated so far.
    pub fn aux_len(&self) -> usize {
        self.aux.len()
    }

    /// The inputs, the aux values and the constraints counted so far (for
    /// comparing a native generator with the gadgets it stands for).
    pub fn witness(&self) -> (&[Scalar], &[Scalar], usize) {
        (&self.input, &self.aux, self.constraints)
    }

    /// Counts one constraint a native generator stands for (its terms are in the
    /// recording; only the count is checked against it).
    #[inline]
    pub fn count_constraint(&mut self) {
        self.constraints += 1;
    }

    #[inline]
    fn push_aux(&mut self, f: impl FnOnce() -> Result<Scalar, SynthesisError>) -> Result<Variable, SynthesisError> {
        self.aux.push(f()?);
        Ok(Variable::new_unchecked(Index::Aux(self.aux.len() - 1)))
    }

    #[inline]
    fn push_input(&mut self, f: impl FnOnce() -> Result<Scalar, SynthesisError>) -> Result<Variable, SynthesisError> {
        self.input.push(f()?);
        Ok(Variable::new_unchecked(Index::Input(self.input.len() - 1)))
    }

    #[inline]
    fn push_constraint(
        &mut self,
        _: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        _: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        _: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    ) {
        self.constraints += 1;
    }
}

cuzk_core::root_constraint_system!(WitnessCs);

/// Synthesizes `circuit` as [`crate::synthesize`] does and also records its R1CS:
/// the same assignment, its a, b, c and densities computed from the recording once
/// the circuit has run (see [`Recorder`]). The recording is `None` when the circuit
/// is too large for the compact encoding (more than 2^31 variables or 2^32 entries
/// in a matrix); the assignment is valid either way.
///
/// # Errors
/// [`SynthError::Circuit`] when the circuit's `synthesize` fails.
pub fn synthesize_recording<C: Circuit<Scalar>>(circuit: C) -> Result<(Assignment, Option<Precompiled>), SynthError> {
    record_limited(circuit, u32::MAX as usize, true, RecordHint::default())
}

/// [`synthesize_recording`] with at most `max_entries` entries per matrix (tests
/// reach the too-large path with a small one), a, b, c left empty without
/// `products` (where the circuit was recorded), its vectors reserved from `hint`.
fn record_limited<C: Circuit<Scalar>>(
    circuit: C,
    max_entries: usize,
    products: bool,
    hint: RecordHint,
) -> Result<(Assignment, Option<Precompiled>), SynthError> {
    let mut cs = Recorder::new();
    cs.max_entries = max_entries;
    cs.reserve(hint);
    cs.alloc_input(|| "one", || Ok(Scalar::ONE))?;
    circuit.synthesize(&mut cs)?;
    let inputs = cs.plain.as_ref().map_or(cs.input.len(), ProvingAssignment::inputs);
    for i in 0..inputs {
        cs.enforce(|| "", |lc| lc + Variable::new_unchecked(Index::Input(i)), |lc| lc, |lc| lc);
    }
    Ok(match cs.plain.take() {
        Some(p) => (p.into_inner(), None),
        None => {
            let (assignment, pre) = cs.finish(products);
            (assignment, Some(pre))
        }
    })
}

/// Records the structure of `circuit` without its values: no allocation's value
/// closure runs (as bellperson's parameter generation synthesizes), so a blank
/// circuit (`cuzk_filecoin::blank_circuit_of`) records what any of its instances
/// would: a Groth16 circuit's structure never depends on its witness. This is what
/// lets the first-ever recording run while the parameters are still loading,
/// before any job's partition reaches synthesis. `None` when the circuit is too
/// large for the compact encoding.
///
/// # Errors
/// [`SynthError::Circuit`] when the circuit's `synthesize` fails.
pub fn record_blank<C: Circuit<Scalar>>(circuit: C, hint: RecordHint) -> Result<Option<Precompiled>, SynthError> {
    record_blank_limited(circuit, hint, u32::MAX as usize)
}

fn record_blank_limited<C: Circuit<Scalar>>(
    circuit: C,
    hint: RecordHint,
    max_entries: usize,
) -> Result<Option<Precompiled>, SynthError> {
    Ok(close_blank(record_raw(circuit, hint, max_entries)?))
}

/// A blank recording of `circuit` (the `ONE` input first, no value closure run),
/// without the input rows `record_blank` closes it with.
fn record_raw<C: Circuit<Scalar>>(circuit: C, hint: RecordHint, max_entries: usize) -> Result<Recorder, SynthError> {
    let mut cs = Recorder::new();
    cs.max_entries = max_entries;
    cs.blank = Some((0, 0));
    // Only the matrices are reserved: there are no values to hold.
    cs.reserve(RecordHint { inputs: 0, aux: 0, ..hint });
    cs.alloc_input(|| "one", || Ok(Scalar::ONE))?;
    circuit.synthesize(&mut cs)?;
    Ok(cs)
}

/// Closes a blank recording: one `input * 0 = 0` row per input, as bellperson's
/// prover adds them; `None` when it outgrew the encoding.
fn close_blank(mut cs: Recorder) -> Option<Precompiled> {
    let (inputs, _) = cs.counts();
    for i in 0..inputs {
        cs.enforce(|| "", |lc| lc + Variable::new_unchecked(Index::Input(i)), |lc| lc, |lc| lc);
    }
    (!cs.too_large).then(|| cs.finish(false).1)
}

/// [`record_blank`] of a circuit made of a prologue and `copies` parts of one
/// structure that refer only to the prologue's variables and their own (a PoRep
/// partition: its commitments, then one proof per challenge, each the same gadgets
/// over the same shared variables). `with(n)` is that circuit with `n` parts. The
/// circuit with two parts is recorded and checked: it must begin with the one with
/// none, and its second part must be its first with the part's own variables moved
/// by one part's count. That part is then copied `copies - 2` more times, each copy
/// moved as far again. The result is what [`record_blank`] makes of the whole
/// circuit (the callers' tests compare them at every size they can hold); a circuit
/// that fails the check is [`SynthError::StructureMismatch`], never a wrong
/// recording. What a 32GiB partition's first-ever recording took on one thread
/// (74–84 s) becomes two challenges' (seconds) and a copy.
///
/// # Errors
/// A synthesis error; parts that are not copies of each other.
pub fn record_blank_replicated<C: Circuit<Scalar>>(
    with: impl Fn(usize) -> C,
    copies: usize,
    hint: RecordHint,
) -> Result<Option<Precompiled>, SynthError> {
    let mismatch = |what: &str| Err(SynthError::StructureMismatch(format!("parts recorded apart: {what}")));
    let p = record_raw(with(0), RecordHint::default(), u32::MAX as usize)?;
    if copies == 0 {
        return Ok(close_blank(p));
    }
    let mut r = record_raw(with(copies.min(2)), hint, u32::MAX as usize)?;
    if r.too_large {
        return Ok(None);
    }
    let ((pi, pa), p_rows) = (p.counts(), p.a.row_end.len());
    let ((ri, ra), r_rows) = (r.counts(), r.a.row_end.len());
    let n = copies.min(2);
    let begins_with_prologue = [(&p.a, &r.a), (&p.b, &r.b), (&p.c, &r.c)].into_iter().all(|(pm, rm)| {
        rm.row_end.len() >= p_rows
            && rm.row_end[..p_rows] == pm.row_end[..]
            && rm.entries.get(..pm.entries.len()) == Some(&pm.entries[..])
    }) && r.coeffs.get(..p.coeffs.len()) == Some(&p.coeffs[..]);
    if !begins_with_prologue || ri < pi || ra < pa {
        return mismatch("the circuit with parts does not begin with the circuit without");
    }
    if (r_rows - p_rows) % n != 0 || (ri - pi) % n != 0 || (ra - pa) % n != 0 {
        return mismatch("the second part is not the first moved by one part (counts differ)");
    }
    drop(p);
    let (di, da, rows) = ((ri - pi) / n, (ra - pa) / n, (r_rows - p_rows) / n);
    let (inputs, aux) = (pi + copies * di, pa + copies * da);
    // Every index and count must fit the encoding (u32 row ends, var = 2 * index + 1).
    if 2 * inputs.max(aux) + 1 > u32::MAX as usize {
        return Ok(None);
    }
    // Part k's own variables sit k parts after the first's; the prologue's stay.
    let shift = |e: &Entry, k: usize| {
        let (index, is_aux) = ((e.var >> 1) as usize, e.var & 1 == 1);
        let index = match is_aux {
            true if index >= pa => index + k * da,
            false if index >= pi => index + k * di,
            _ => index,
        };
        Entry { var: (index as u32) << 1 | u32::from(is_aux), coeff: e.coeff }
    };
    for m in [&mut r.a, &mut r.b, &mut r.c] {
        let first = if p_rows == 0 { 0 } else { m.row_end[p_rows - 1] as usize };
        let second = m.row_end[p_rows + rows - 1] as usize;
        let part: Vec<Entry> = m.entries[first..second].to_vec();
        let ends: Vec<usize> = m.row_end[p_rows..p_rows + rows].iter().map(|&e| e as usize - first).collect();
        let len = part.len();
        if n == 2 {
            // The second part recorded is the first moved by one part.
            let same = m.entries.len() == second + len
                && m.entries[second..].iter().zip(&part).all(|(got, e)| *got == shift(e, 1))
                && m.row_end[p_rows + rows..].iter().zip(&ends).all(|(&got, &end)| got as usize == second + end);
            if !same {
                return mismatch("the second part is not the first moved by one part");
            }
        }
        let more = copies - n;
        if m.entries.len() + more * len > r.max_entries.min(u32::MAX as usize) {
            return Ok(None);
        }
        // The whole recording reserved once (the input rows included, one A entry
        // each): growing by doubling would copy gigabytes at 32GiB.
        let _ = m.entries.try_reserve_exact(more * len + inputs);
        let _ = m.row_end.try_reserve_exact(more * rows + inputs);
        // One thread: a plain copy with an add, seconds for 32GiB's 722M entries.
        for k in n..copies {
            let base = m.entries.len();
            m.entries.extend(part.iter().map(|e| shift(e, k)));
            m.row_end.extend(ends.iter().map(|&end| (base + end) as u32));
        }
    }
    r.blank = Some((inputs, aux));
    Ok(close_blank(r))
}

/// How to synthesize a circuit (see [`crate::synthesize_precompiled`]).
pub enum SynthMode<'a> {
    /// The plain way ([`crate::synthesize`]).
    Plain,
    /// The plain way, also recording the circuit's structure.
    Record,
    /// As `Record`, the recording's vectors reserved from what its parameters say
    /// it will hold.
    RecordSized(RecordHint),
    /// As `RecordSized`, a, b, c left empty (for timing the recording apart: a
    /// 32GiB partition's recording fits where its a, b, c besides it would not).
    RecordOnly(RecordHint),
    /// Witness only, with the recorded structure of the same circuit.
    Precompiled(&'a Precompiled),
    /// As `Precompiled`, writing a, b, c into a buffer from the allocator when it
    /// lends one (the GPU backend's pinned host memory).
    PrecompiledInto(&'a Precompiled, &'a dyn EvalAlloc),
    /// As `PrecompiledInto`, the witness always from the circuit's own `synthesize`
    /// even where a native generator exists (`synthesize.native = false`, and the
    /// reference the differential tests compare the native generators with).
    PrecompiledGeneric(&'a Precompiled, Option<&'a dyn EvalAlloc>),
    /// Witness only, a, b, c left to the backend ([`Evals::Deferred`]: the CUDA
    /// backend evaluates them on the device from the recording). `native`: the
    /// partition's native generator where it has one.
    Deferred { pre: &'a std::sync::Arc<Precompiled>, native: bool },
    /// The witness alone, with no recording: the assignment's `input` and `aux`,
    /// with a, b, c and the densities empty. For comparing a native generator with
    /// the circuit where recording it does not fit in memory (a 32GiB partition),
    /// and for timing the witness apart. `native`: the partition's native generator
    /// where it has one.
    WitnessOnly { native: bool },
}

impl SynthMode<'_> {
    /// The recording and the allocator of the pre-compiled modes.
    pub fn precompiled(&self) -> Option<(&Precompiled, Option<&dyn EvalAlloc>)> {
        match *self {
            SynthMode::Plain
            | SynthMode::Record
            | SynthMode::RecordSized(_)
            | SynthMode::RecordOnly(_)
            | SynthMode::WitnessOnly { .. } => None,
            SynthMode::Precompiled(pre) => Some((pre, None)),
            SynthMode::PrecompiledInto(pre, alloc) => Some((pre, Some(alloc))),
            SynthMode::PrecompiledGeneric(pre, alloc) => Some((pre, alloc)),
            SynthMode::Deferred { pre, .. } => Some((pre, None)),
        }
    }
}

/// Synthesizes `circuit` in `mode`; the recording is returned for
/// [`SynthMode::Record`] (`None` if the circuit was too large to record).
///
/// # Errors
/// The circuit's synthesis error, or a structure mismatch in
/// [`SynthMode::Precompiled`].
pub fn synthesize_in<C: Circuit<Scalar>>(
    circuit: C,
    mode: SynthMode<'_>,
) -> Result<(Assignment, Option<Precompiled>), SynthError> {
    match mode {
        SynthMode::Plain => synthesize(circuit).map(|a| (a, None)),
        SynthMode::Record => synthesize_recording(circuit),
        SynthMode::RecordSized(hint) => record_limited(circuit, u32::MAX as usize, true, hint),
        SynthMode::RecordOnly(hint) => record_limited(circuit, u32::MAX as usize, false, hint),
        SynthMode::Precompiled(pre) => synthesize_precompiled(circuit, pre).map(|a| (a, None)),
        SynthMode::PrecompiledInto(pre, alloc) => {
            synthesize_precompiled_into(circuit, pre, Some(alloc)).map(|a| (a, None))
        }
        SynthMode::PrecompiledGeneric(pre, alloc) => {
            synthesize_precompiled_into(circuit, pre, alloc).map(|a| (a, None))
        }
        SynthMode::WitnessOnly { .. } => witness_only(|cs| circuit.synthesize(cs)).map(|a| (a, None)),
        SynthMode::Deferred { pre, .. } => synthesize_deferred(|cs| circuit.synthesize(cs), pre).map(|a| (a, None)),
    }
}

/// Synthesizes `circuit` with `pre`, the recording of a circuit with the same
/// structure: runs only the witness computation, then `a`, `b`, `c` = A·w, B·w, C·w.
///
/// # Errors
/// [`SynthError::Circuit`] when the circuit's `synthesize` fails;
/// [`SynthError::StructureMismatch`] when it allocates a different number of inputs
/// or aux variables than the recorded circuit (it is not the same circuit).
pub fn synthesize_precompiled<C: Circuit<Scalar>>(circuit: C, pre: &Precompiled) -> Result<Assignment, SynthError> {
    synthesize_precompiled_into(circuit, pre, None)
}

/// [`synthesize_precompiled`], writing a, b, c into a buffer lent by `alloc` when it
/// has one (else on the heap).
///
/// # Errors
/// As [`synthesize_precompiled`].
pub fn synthesize_precompiled_into<C: Circuit<Scalar>>(
    circuit: C,
    pre: &Precompiled,
    alloc: Option<&dyn EvalAlloc>,
) -> Result<Assignment, SynthError> {
    synthesize_native(|cs| circuit.synthesize(cs), pre, alloc)
}

/// [`SynthMode::WitnessOnly`]: `generate`'s input and aux assignment, a, b, c and
/// the densities empty.
///
/// # Errors
/// The generator's synthesis error.
pub fn witness_only<G>(generate: G) -> Result<Assignment, SynthError>
where
    G: FnOnce(&mut WitnessCs) -> Result<(), SynthesisError>,
{
    let mut cs = WitnessCs::new_root();
    cs.alloc_input(|| "one", || Ok(Scalar::ONE))?;
    generate(&mut cs)?;
    Ok(Assignment {
        abc: Evals::heap(Vec::new(), Vec::new(), Vec::new()),
        input: cs.input,
        aux: cs.aux,
        a_aux_density: Density::default(),
        b_input_density: Density::default(),
        b_aux_density: Density::default(),
    })
}

/// Synthesizes with `pre` as [`synthesize_precompiled_into`] does, the witness
/// computed by `generate` instead of a circuit's `synthesize`: a native generator
/// (see [`crate::native`]) that allocates exactly what the recorded circuit does.
/// The ONE input is allocated before `generate` runs, and the counts of inputs, aux
/// variables and constraints are checked against the recording after.
///
/// # Errors
/// As [`synthesize_precompiled`].
pub fn synthesize_native<G>(
    generate: G,
    pre: &Precompiled,
    alloc: Option<&dyn EvalAlloc>,
) -> Result<Assignment, SynthError>
where
    G: FnOnce(&mut WitnessCs) -> Result<(), SynthesisError>,
{
    let cs = recorded_witness(generate, pre)?;
    let n = pre.constraints();
    let w = [cs.input.as_slice(), cs.aux.as_slice()];
    let threads = product_threads(n);
    let abc = match alloc.and_then(|al| al.alloc(n)).filter(|b| b.len() == n) {
        Some(mut buf) => {
            products(pre, w, buf.abc_mut(), threads);
            Evals::Lent(buf)
        }
        None => {
            let [a, b, c] = product_vecs(pre, w, n, threads);
            Evals::heap(a, b, c)
        }
    };
    Ok(Assignment {
        abc,
        input: cs.input,
        aux: cs.aux,
        a_aux_density: pre.a_aux_density.clone(),
        b_input_density: pre.b_input_density.clone(),
        b_aux_density: pre.b_aux_density.clone(),
    })
}

/// The witness of a circuit recorded as `pre`, its sizes checked against it.
fn recorded_witness<G>(generate: G, pre: &Precompiled) -> Result<WitnessCs, SynthError>
where
    G: FnOnce(&mut WitnessCs) -> Result<(), SynthesisError>,
{
    let mut cs = WitnessCs::with_capacity(pre);
    cs.alloc_input(|| "one", || Ok(Scalar::ONE))?;
    generate(&mut cs)?;
    // The recording also holds one `input * 0 = 0` row per input.
    let constraints = cs.constraints + cs.input.len();
    if cs.input.len() != pre.inputs || cs.aux.len() != pre.aux || constraints != pre.constraints() {
        return Err(SynthError::StructureMismatch(format!(
            "the circuit has {} inputs, {} aux variables and {} constraints; the recorded one has {}, {} and {}",
            cs.input.len(),
            cs.aux.len(),
            constraints,
            pre.inputs,
            pre.aux,
            pre.constraints()
        )));
    }
    Ok(cs)
}

/// [`SynthMode::Deferred`]: the witness by `generate` (checked against `pre` as
/// [`synthesize_native`] does), a, b, c left to the backend with the recording.
///
/// # Errors
/// As [`synthesize_precompiled`].
pub fn synthesize_deferred<G>(generate: G, pre: &std::sync::Arc<Precompiled>) -> Result<Assignment, SynthError>
where
    G: FnOnce(&mut WitnessCs) -> Result<(), SynthesisError>,
{
    let cs = recorded_witness(generate, pre)?;
    let rec: std::sync::Arc<dyn cuzk_core::Recorded> = pre.clone();
    Ok(Assignment {
        abc: Evals::Deferred(cuzk_core::Deferred { rec, input: cs.input.clone() }),
        input: cs.input,
        aux: cs.aux,
        a_aux_density: pre.a_aux_density.clone(),
        b_input_density: pre.b_input_density.clone(),
        b_aux_density: pre.b_aux_density.clone(),
    })
}

/// Where a product is written: a lent buffer's initialized scalars, or a fresh heap
/// vector's spare capacity, which is never zero-filled first (on the heap path that
/// fill was a tenth of a partition).
trait Slot {
    fn set(&mut self, v: Scalar);
}

impl Slot for Scalar {
    #[inline(always)]
    fn set(&mut self, v: Scalar) {
        *self = v;
    }
}

impl Slot for MaybeUninit<Scalar> {
    #[inline(always)]
    fn set(&mut self, v: Scalar) {
        self.write(v);
    }
}

/// a, b, c of `pre` times `w` (`n` rows) in three fresh vectors, never zero-filled:
/// [`products`] writes every row of every one.
#[allow(unsafe_code)]
fn product_vecs(pre: &Precompiled, w: [&[Scalar]; 2], n: usize, threads: usize) -> [Vec<Scalar>; 3] {
    let mut v: [Vec<Scalar>; 3] = std::array::from_fn(|_| Vec::with_capacity(n));
    let [a, b, c] = &mut v;
    products(
        pre,
        w,
        [&mut a.spare_capacity_mut()[..n], &mut b.spare_capacity_mut()[..n], &mut c.spare_capacity_mut()[..n]],
        threads,
    );
    for x in &mut v {
        // SAFETY: `products` wrote the first `n` slots of each (every row of its
        // output slices, on every path).
        unsafe { x.set_len(n) };
    }
    v
}

/// Rows per thread below which the sparse products stay on the calling thread.
/// A 2KiB–512MiB PoRep partition (2.7–4.4M rows) is below it: a stream keeps every
/// core busy with partitions already. A 32GiB one (130M rows) is far above it, and
/// only one or two fit in memory at once, so without splitting it most cores idle
/// while its 722M non-zeros are multiplied.
const ROWS_PER_THREAD: usize = 1 << 22;

/// Threads for the products of an `n`-row partition: one per [`ROWS_PER_THREAD`]
/// rows, at most one per core.
fn product_threads(n: usize) -> usize {
    match n / ROWS_PER_THREAD {
        // Most partitions: no need to ask the system for its core count.
        0 | 1 => 1,
        t => t.min(std::thread::available_parallelism().map_or(1, |c| c.get())),
    }
}

/// a, b, c = A·w, B·w, C·w into `outs` (`n` slots each, all written), on `threads`
/// threads, each taking a contiguous range of rows of all three matrices. Scoped OS
/// threads rather than a pool: they inherit the calling worker's priority (the
/// urgent lane's partitions stay ahead of bulk ones) and a partition that splits
/// never queues behind another stage's pool work.
fn products(pre: &Precompiled, w: [&[Scalar]; 2], outs: [&mut [impl Slot + Send]; 3], threads: usize) {
    let n = outs[0].len();
    // Every slot is written only if the three have one length (`product_vecs`
    // relies on it).
    assert!(outs.iter().all(|o| o.len() == n), "a, b, c outputs differ in length");
    let mats = [&pre.a, &pre.b, &pre.c];
    if threads <= 1 || n < 2 {
        for (m, out) in mats.into_iter().zip(outs) {
            m.eval_rows(0..n, &pre.coeffs, w, out);
        }
        return;
    }
    let chunk = n.div_ceil(threads);
    let coeffs = pre.coeffs.as_slice();
    let [a, b, c] = outs;
    std::thread::scope(|s| {
        let parts = a.chunks_mut(chunk).zip(b.chunks_mut(chunk)).zip(c.chunks_mut(chunk));
        for (k, ((a, b), c)) in parts.enumerate() {
            let rows = k * chunk..k * chunk + a.len();
            s.spawn(move || {
                for (m, out) in mats.into_iter().zip([a, b, c]) {
                    m.eval_rows(rows.clone(), coeffs, w, out);
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SyntheticCircuit, SyntheticSpec};

    /// Bits and field values under every coefficient class (1, -1, 2, others), the
    /// shapes `eval_rows` special-cases, in long and short rows. The witness depends
    /// on `seed`.
    struct BitsCircuit {
        seed: u64,
    }

    impl Circuit<Scalar> for BitsCircuit {
        fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
            let x = cs.alloc_input(|| "x", || Ok(Scalar::from(self.seed + 3)))?;
            let bits: Vec<Variable> = (0..300u64)
                .map(|i| {
                    let bit = !(i * 7 + self.seed).is_multiple_of(5);
                    cs.alloc(|| format!("b{i}"), || Ok(if bit { Scalar::ONE } else { Scalar::ZERO }))
                })
                .collect::<Result<_, _>>()?;
            let vals: Vec<Variable> = (0..20u64)
                .map(|i| cs.alloc(|| format!("v{i}"), || Ok(Scalar::from(1000 + i * self.seed))))
                .collect::<Result<_, _>>()?;
            let five = Scalar::from(5u64);
            for (r, chunk) in bits.chunks(150).enumerate() {
                // >64 ones with +1, and the same with -1 (both past the table).
                let plus = chunk.iter().fold(LinearCombination::zero(), |lc, b| lc + *b);
                let minus = chunk.iter().fold(LinearCombination::zero(), |lc, b| lc - *b);
                let mixed =
                    chunk[..40].iter().enumerate().fold(LinearCombination::zero() + x, |lc, (i, b)| match i % 4 {
                        0 => lc + *b,
                        1 => lc - *b,
                        2 => lc + (Scalar::from(2u64), *b),
                        _ => lc + (five, *b),
                    });
                let values = vals
                    .iter()
                    .fold(LinearCombination::zero(), |lc, v| lc + (five, *v) - *v + (Scalar::from(2u64), *v));
                cs.enforce(|| format!("r{r}a"), |_| plus, |_| mixed.clone(), |_| minus);
                let c = values.clone();
                cs.enforce(|| format!("r{r}b"), |_| values, |_| mixed, |_| c);
            }
            Ok(())
        }
    }

    #[test]
    fn bits_and_coefficient_classes_evaluate_as_plain_synthesis() {
        let (first, pre) = synthesize_recording(BitsCircuit { seed: 1 }).unwrap();
        assert_eq!(first, synthesize(BitsCircuit { seed: 1 }).unwrap());
        let pre = pre.expect("recorded");
        for seed in [2, 3, 4] {
            let plain = synthesize(BitsCircuit { seed }).unwrap();
            let fast = synthesize_precompiled(BitsCircuit { seed }, &pre).unwrap();
            assert_eq!(fast, plain, "seed {seed}");
        }
    }

    #[test]
    fn a_circuit_that_outgrows_the_encoding_is_synthesized_plainly_and_not_recorded() {
        let spec = SyntheticSpec { constraints: 5_000, public_inputs: 3, a_density: 0.6, b_density: 0.3 };
        // Matrices that overflow at the first constraint and later on.
        for max in [0, 1, 4_000, 8_000] {
            let (a, pre) =
                record_limited(SyntheticCircuit::new(spec, 7).unwrap(), max, true, RecordHint::default()).unwrap();
            assert!(pre.is_none(), "max {max}: not recorded");
            assert_eq!(a, synthesize(SyntheticCircuit::new(spec, 7).unwrap()).unwrap(), "max {max}");
        }
        for max in [10, 200] {
            let (a, pre) = record_limited(BitsCircuit { seed: 3 }, max, true, RecordHint::default()).unwrap();
            assert!(pre.is_none());
            assert_eq!(a, synthesize(BitsCircuit { seed: 3 }).unwrap(), "max {max}");
        }
        let (a, pre) =
            record_limited(SyntheticCircuit::new(spec, 7).unwrap(), usize::MAX, true, RecordHint::default()).unwrap();
        assert!(pre.is_some(), "within the limit: recorded");
        assert_eq!(a, synthesize(SyntheticCircuit::new(spec, 7).unwrap()).unwrap());
    }

    #[test]
    fn a_recording_sized_from_a_hint_right_or_wrong_is_the_same() {
        let spec = SyntheticSpec { constraints: 70_000, public_inputs: 4, a_density: 0.8, b_density: 0.3 };
        let (plain, pre) = synthesize_recording(SyntheticCircuit::new(spec, 2).unwrap()).unwrap();
        let pre = pre.unwrap();
        let exact = RecordHint { inputs: pre.inputs, aux: pre.aux, max_constraints: 1 << 17 };
        for hint in [
            exact,
            RecordHint { inputs: 1, aux: 10, max_constraints: 5_000 },
            RecordHint { max_constraints: 1 << 24, ..exact },
        ] {
            let (a, p) = synthesize_in(SyntheticCircuit::new(spec, 2).unwrap(), SynthMode::RecordSized(hint)).unwrap();
            assert_eq!(a, plain, "{hint:?}");
            assert_eq!(p.as_ref(), Some(&pre), "{hint:?}");
        }
    }

    /// x_i * x_i = y_i and y_i + 3 x_i = z_i over a public input: values only when
    /// `values` is there (a blank circuit's closures fail, as Filecoin's do).
    struct Squares {
        values: Option<Vec<u64>>,
        n: usize,
    }

    impl Circuit<Scalar> for Squares {
        fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
            let v = |i: usize| -> Result<Scalar, SynthesisError> {
                self.values.as_ref().map(|v| Scalar::from(v[i])).ok_or(SynthesisError::AssignmentMissing)
            };
            let p = cs.alloc_input(|| "p", || v(0))?;
            for i in 0..self.n {
                let x = cs.alloc(|| "x", || v(i))?;
                let y = cs.alloc(|| "y", || v(i).map(|x| x.square()))?;
                let z = cs.alloc(|| "z", || v(i).map(|x| x.square() + Scalar::from(3) * x))?;
                cs.enforce(|| "sq", |lc| lc + x, |lc| lc + x, |lc| lc + y);
                cs.enforce(|| "lin", |lc| lc + y + (Scalar::from(3), x), |lc| lc + CS::one() + p, |lc| lc + z + z);
            }
            Ok(())
        }
    }

    /// A prologue (an input, two aux variables, a product) and `parts` parts, each
    /// allocating an input and aux variables of its own, using the prologue's, a
    /// coefficient first seen in the first part and a part-local constraint; the
    /// values are absent, as in a blank circuit.
    struct Parts {
        parts: usize,
        /// A prologue that is not the one `parts == 0` records (for the mismatch).
        other_prologue: bool,
        /// A second part unlike the first.
        uneven: bool,
    }

    impl Circuit<Scalar> for Parts {
        fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
            let none = || Err(SynthesisError::AssignmentMissing);
            let x = cs.alloc_input(|| "x", none)?;
            let y = cs.alloc(|| "y", none)?;
            let z = cs.alloc(|| "z", none)?;
            let out = if self.other_prologue { y } else { z };
            cs.enforce(|| "x*y=z", |lc| lc + x, |lc| lc + y, |lc| lc + out);
            let seven = Scalar::from(7u64);
            for k in 0..self.parts {
                let c = cs.alloc_input(|| format!("c{k}"), none)?;
                let u = cs.alloc(|| "u", none)?;
                let v = cs.alloc(|| "v", none)?;
                cs.enforce(|| "u", |lc| lc + u + (seven, z), |lc| lc + CS::one() + y, |lc| lc + v);
                cs.enforce(|| "v", |lc| lc + v - x, |lc| lc + (Scalar::from(2u64), c), |lc| lc + u + u);
                if self.uneven && k == 1 {
                    cs.enforce(|| "w", |lc| lc + u, |lc| lc + u, |lc| lc + v);
                }
            }
            Ok(())
        }
    }

    /// One part recorded and copied is the sequential recording of every part: the
    /// copies' inputs and aux variables move by a part each, the prologue's stay,
    /// and the coefficient table keeps its order. A prologue that differs is refused.
    #[test]
    fn a_part_copied_records_what_every_part_does() {
        let parts = |n, other| Parts { parts: n, other_prologue: other, uneven: false };
        for n in [0, 1, 2, 5] {
            let want = record_blank(parts(n, false), RecordHint::default()).unwrap().unwrap();
            let got = record_blank_replicated(|k| parts(k, false), n, RecordHint::default()).unwrap();
            assert_eq!(got.as_ref(), Some(&want), "{n} parts");
            assert_eq!(want.shape().inputs, 2 + n, "the ONE input, x and a c per part");
        }
        // A prologue that differs with parts, and parts that differ: refused.
        let e = record_blank_replicated(|k| parts(k, k > 0), 3, RecordHint::default()).unwrap_err();
        assert!(e.to_string().contains("does not begin with"), "{e}");
        let e = record_blank_replicated(
            |k| Parts { parts: k, other_prologue: false, uneven: true },
            3,
            RecordHint::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not the first moved"), "{e}");
    }

    #[test]
    fn a_blank_circuit_records_what_its_instances_do() {
        let values: Vec<u64> = (0..300).map(|i| 7 * i + 1).collect();
        let (_, want) = synthesize_recording(Squares { values: Some(values), n: 300 }).unwrap();
        let want = want.unwrap();
        for hint in [RecordHint::default(), RecordHint { inputs: 2, aux: 900, max_constraints: 1 << 10 }] {
            let blank = record_blank(Squares { values: None, n: 300 }, hint).unwrap();
            assert_eq!(blank.as_ref(), Some(&want), "{hint:?}");
        }
        // The closures are never called: the same recording from a circuit with values.
        let spec = SyntheticSpec { constraints: 20_000, public_inputs: 5, a_density: 0.3, b_density: 0.1 };
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(spec, 1).unwrap()).unwrap();
        let blank = record_blank(SyntheticCircuit::new(spec, 9).unwrap(), RecordHint::default()).unwrap();
        assert_eq!(blank, pre);
        // Witness-only synthesis against it gives the plain assignment.
        let plain = synthesize(SyntheticCircuit::new(spec, 4).unwrap()).unwrap();
        let fast = synthesize_precompiled(SyntheticCircuit::new(spec, 4).unwrap(), &blank.unwrap()).unwrap();
        assert_eq!(fast, plain);
        // Too large for the encoding, at the first row or later: not recorded.
        for max in [0, 10, 400] {
            let pre = record_blank_limited(Squares { values: None, n: 300 }, RecordHint::default(), max).unwrap();
            assert!(pre.is_none(), "max {max}");
        }
    }

    #[test]
    fn split_products_equal_one_thread() {
        let spec = SyntheticSpec { constraints: 10_007, public_inputs: 3, a_density: 0.7, b_density: 0.2 };
        let (plain, pre) = synthesize_recording(SyntheticCircuit::new(spec, 5).unwrap()).unwrap();
        let pre = pre.unwrap();
        let w = [plain.input.as_slice(), plain.aux.as_slice()];
        let n = pre.constraints();
        for threads in [1, 2, 3, 7, 64] {
            let v = product_vecs(&pre, w, n, threads);
            assert_eq!(v, plain.abc.abc().map(<[Scalar]>::to_vec), "{threads} threads");
            let mut lent: [Vec<Scalar>; 3] = std::array::from_fn(|_| vec![Scalar::ZERO; n]);
            let [a, b, c] = &mut lent;
            products(&pre, w, [a.as_mut_slice(), b.as_mut_slice(), c.as_mut_slice()], threads);
            assert_eq!(lent, v, "{threads} threads, into initialized slots");
        }
        assert_eq!(product_threads(100), 1);
        assert!(product_threads(130_278_541) > 1 || std::thread::available_parallelism().unwrap().get() == 1);
    }

    #[test]
    fn precompiled_equals_plain_synthesis() {
        for spec in [
            SyntheticSpec { constraints: 3, public_inputs: 0, a_density: 1.0, b_density: 1.0 },
            SyntheticSpec { constraints: 20_000, public_inputs: 5, a_density: 0.3, b_density: 0.1 },
            SyntheticSpec { constraints: 1 << 14, public_inputs: 2, a_density: 1.0, b_density: 1.0 },
        ] {
            let (first, pre) = synthesize_recording(SyntheticCircuit::new(spec, 1).unwrap()).unwrap();
            let pre = pre.expect("small circuits are recorded");
            assert_eq!(first, synthesize(SyntheticCircuit::new(spec, 1).unwrap()).unwrap());
            assert_eq!(pre.constraints(), spec.constraints);
            assert_eq!(pre.shape(), first.shape(), "{spec:?}: the recording's sizes are its circuits'");
            let (only, pre_only) =
                synthesize_in(SyntheticCircuit::new(spec, 1).unwrap(), SynthMode::RecordOnly(RecordHint::default()))
                    .unwrap();
            assert_eq!(pre_only.as_ref(), Some(&pre), "{spec:?}: the same recording without a, b, c");
            assert!(only.abc.is_empty() && only.aux == first.aux && only.input == first.input);
            for seed in [2, 3] {
                let plain = synthesize(SyntheticCircuit::new(spec, seed).unwrap()).unwrap();
                let fast = synthesize_precompiled(SyntheticCircuit::new(spec, seed).unwrap(), &pre).unwrap();
                assert_eq!(fast, plain, "{spec:?} seed {seed}");
                assert_ne!(fast.aux, first.aux, "the witness depends on the seed");
            }
        }
    }

    #[test]
    fn another_circuit_is_refused_by_name() {
        let small = SyntheticSpec { constraints: 100, public_inputs: 1, a_density: 1.0, b_density: 1.0 };
        let big = SyntheticSpec { constraints: 200, ..small };
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(small, 1).unwrap()).unwrap();
        let err = synthesize_precompiled(SyntheticCircuit::new(big, 1).unwrap(), &pre.unwrap()).unwrap_err();
        assert!(matches!(err, SynthError::StructureMismatch(_)), "{err}");
        assert!(err.to_string().contains("aux variables"), "{err}");
    }
}

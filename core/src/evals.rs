//! Where a partition's a, b, c evaluations live: heap vectors, or a buffer that a
//! backend lends (the CUDA backend's pinned host memory), so that synthesis writes
//! them where the upload reads them and nothing copies them in between.

use std::{any::Any, sync::Arc};

use blstrs::Scalar;

/// One non-zero entry of a recorded constraint matrix: a variable (`var >> 1`
/// indexes the inputs when `var & 1` is 0, the aux variables when it is 1) and an
/// index into the coefficient table (0 is ONE, 1 is −ONE, 2 is TWO). The layout a
/// device reads (`#[repr(C)]`: two `u32`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct R1csEntry {
    pub var: u32,
    pub coeff: u32,
}

/// One recorded matrix in compressed-row form: `row_end[i]` is one past row `i`'s
/// last entry.
#[derive(Clone, Copy, Debug)]
pub struct CsrView<'a> {
    pub row_end: &'a [u32],
    pub entries: &'a [R1csEntry],
}

/// The A and B matrices of a recorded circuit and their coefficient table
/// (Montgomery form, as blstrs holds a `Scalar`), as a backend uploads them. C is
/// not needed: for a satisfied witness c = a∘b, row by row.
#[derive(Clone, Copy, Debug)]
pub struct R1csView<'a> {
    pub inputs: usize,
    pub aux: usize,
    pub a: CsrView<'a>,
    pub b: CsrView<'a>,
    pub coeffs: &'a [Scalar],
}

/// A circuit's recorded R1CS (cuzk-synth's `Precompiled`), for backends that
/// evaluate a, b, c themselves ([`Evals::Deferred`]).
pub trait Recorded: Send + Sync + std::fmt::Debug {
    /// Rows (= constraints, one per input included).
    fn rows(&self) -> usize;
    /// The matrices a device evaluates.
    fn view(&self) -> R1csView<'_>;
    /// a, b, c = A·w, B·w, C·w on the host, for a backend that cannot evaluate
    /// them where it runs (no room on the device, the CPU after a failover).
    fn evaluate(&self, input: &[Scalar], aux: &[Scalar]) -> [Vec<Scalar>; 3];
}

/// a, b, c left to the backend: it evaluates them from the recording and the
/// witness (the aux values are the L MSM's scalars; the inputs are here).
#[derive(Clone, Debug)]
pub struct Deferred {
    pub rec: Arc<dyn Recorded>,
    /// The input assignment (`ONE` first), Montgomery form.
    pub input: Vec<Scalar>,
}

/// A lent buffer holding a, b, c back to back, `len` scalars each.
pub trait EvalBuffer: Send + std::fmt::Debug {
    /// Scalars per array.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// a, b, c.
    fn abc(&self) -> [&[Scalar]; 3];
    fn abc_mut(&mut self) -> [&mut [Scalar]; 3];
    /// The buffer as its own type, for the backend that lent it.
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

/// Lends [`EvalBuffer`]s: `None` when it cannot (its memory bound is reached), and
/// the caller uses heap vectors instead.
pub trait EvalAlloc: Send + Sync {
    fn alloc(&self, len: usize) -> Option<Box<dyn EvalBuffer>>;
}

/// a, b, c of one partition.
#[derive(Debug)]
pub enum Evals {
    Heap {
        a: Vec<Scalar>,
        b: Vec<Scalar>,
        c: Vec<Scalar>,
    },
    Lent(Box<dyn EvalBuffer>),
    /// Not computed on the host: the backend evaluates them (the CUDA backend, on
    /// the device, from the recording resident there).
    Deferred(Deferred),
}

impl Default for Evals {
    fn default() -> Self {
        Evals::Heap { a: Vec::new(), b: Vec::new(), c: Vec::new() }
    }
}

impl Evals {
    /// Heap vectors; they must have equal lengths.
    pub fn heap(a: Vec<Scalar>, b: Vec<Scalar>, c: Vec<Scalar>) -> Evals {
        Evals::Heap { a, b, c }
    }

    /// Evaluations per array (= constraints). For heap vectors, a's length.
    pub fn len(&self) -> usize {
        match self {
            Evals::Heap { a, .. } => a.len(),
            Evals::Lent(b) => b.len(),
            Evals::Deferred(d) => d.rec.rows(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// a, b, c (empty when [`Evals::Deferred`]).
    pub fn abc(&self) -> [&[Scalar]; 3] {
        match self {
            Evals::Heap { a, b, c } => [a, b, c],
            Evals::Lent(buf) => buf.abc(),
            Evals::Deferred(_) => [&[], &[], &[]],
        }
    }

    /// The recording and inputs when a, b, c are left to the backend.
    pub fn deferred(&self) -> Option<&Deferred> {
        match self {
            Evals::Deferred(d) => Some(d),
            _ => None,
        }
    }

    /// a, b, c as heap vectors (copied out of a lent buffer; empty when deferred).
    pub fn into_vecs(self) -> [Vec<Scalar>; 3] {
        match self {
            Evals::Heap { a, b, c } => [a, b, c],
            Evals::Lent(buf) => buf.abc().map(<[Scalar]>::to_vec),
            Evals::Deferred(_) => [Vec::new(), Vec::new(), Vec::new()],
        }
    }

    /// Heap bytes held (a lent buffer counts against its lender's bound instead).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Evals::Heap { a, b, c } => (a.capacity() + b.capacity() + c.capacity()) * std::mem::size_of::<Scalar>(),
            Evals::Lent(_) => 0,
            Evals::Deferred(d) => d.input.capacity() * std::mem::size_of::<Scalar>(),
        }
    }
}

/// A clone is on the heap (a deferred one stays deferred, sharing the recording).
impl Clone for Evals {
    fn clone(&self) -> Self {
        if let Evals::Deferred(d) = self {
            return Evals::Deferred(d.clone());
        }
        let [a, b, c] = self.abc().map(<[Scalar]>::to_vec);
        Evals::Heap { a, b, c }
    }
}

/// Equal when the values are, wherever they live; deferred ones when they share
/// the recording and the inputs.
impl PartialEq for Evals {
    fn eq(&self, other: &Self) -> bool {
        match (self.deferred(), other.deferred()) {
            (None, None) => self.abc() == other.abc(),
            (Some(x), Some(y)) => Arc::ptr_eq(&x.rec, &y.rec) && x.input == y.input,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Lent(Vec<Scalar>, usize);

    impl EvalBuffer for Lent {
        fn len(&self) -> usize {
            self.1
        }
        fn abc(&self) -> [&[Scalar]; 3] {
            let (a, rest) = self.0.split_at(self.1);
            let (b, c) = rest.split_at(self.1);
            [a, b, c]
        }
        fn abc_mut(&mut self) -> [&mut [Scalar]; 3] {
            let (a, rest) = self.0.split_at_mut(self.1);
            let (b, c) = rest.split_at_mut(self.1);
            [a, b, c]
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
        fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
            self
        }
    }

    #[test]
    fn lent_and_heap_compare_by_value() {
        let v: Vec<Scalar> = (0..6u64).map(Scalar::from).collect();
        let lent = Evals::Lent(Box::new(Lent(v.clone(), 2)));
        let heap = Evals::heap(v[0..2].to_vec(), v[2..4].to_vec(), v[4..6].to_vec());
        assert_eq!(lent, heap);
        assert_eq!(lent.len(), 2);
        assert!(matches!(lent.clone(), Evals::Heap { .. }));
        assert_eq!(lent.into_vecs(), heap.into_vecs());
    }
}

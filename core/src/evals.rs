//! Where a partition's a, b, c evaluations live: heap vectors, or a buffer that a
//! backend lends (the CUDA backend's pinned host memory), so that synthesis writes
//! them where the upload reads them and nothing copies them in between.

use std::any::Any;

use blstrs::Scalar;

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
    Heap { a: Vec<Scalar>, b: Vec<Scalar>, c: Vec<Scalar> },
    Lent(Box<dyn EvalBuffer>),
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
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// a, b, c.
    pub fn abc(&self) -> [&[Scalar]; 3] {
        match self {
            Evals::Heap { a, b, c } => [a, b, c],
            Evals::Lent(buf) => buf.abc(),
        }
    }

    /// a, b, c as heap vectors (copied out of a lent buffer).
    pub fn into_vecs(self) -> [Vec<Scalar>; 3] {
        match self {
            Evals::Heap { a, b, c } => [a, b, c],
            Evals::Lent(buf) => buf.abc().map(<[Scalar]>::to_vec),
        }
    }

    /// Heap bytes held (a lent buffer counts against its lender's bound instead).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Evals::Heap { a, b, c } => (a.capacity() + b.capacity() + c.capacity()) * std::mem::size_of::<Scalar>(),
            Evals::Lent(_) => 0,
        }
    }
}

/// A clone is always on the heap.
impl Clone for Evals {
    fn clone(&self) -> Self {
        let [a, b, c] = self.abc().map(<[Scalar]>::to_vec);
        Evals::Heap { a, b, c }
    }
}

/// Equal when the values are, wherever they live.
impl PartialEq for Evals {
    fn eq(&self, other: &Self) -> bool {
        self.abc() == other.abc()
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

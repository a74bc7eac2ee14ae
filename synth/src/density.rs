/// A bitmap over variables: bit `i` is set when variable `i` appears (with a non-zero
/// coefficient) in the query the bitmap belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Density {
    words: Vec<u64>,
    len: usize,
    total: usize,
}

impl Density {
    /// An empty bitmap.
    pub fn new() -> Self {
        Self::default()
    }

    /// `len` variables, none present.
    pub fn zeros(len: usize) -> Self {
        Density { words: vec![0; len.div_ceil(64)], len, total: 0 }
    }

    /// Appends one variable, not (yet) present.
    pub fn push(&mut self) {
        if self.len.is_multiple_of(64) {
            self.words.push(0);
        }
        self.len += 1;
    }

    /// Marks variable `i` present.
    ///
    /// # Panics
    /// If `i` is out of range (a circuit referencing a variable it did not allocate).
    pub fn set(&mut self, i: usize) {
        assert!(i < self.len, "variable {i} out of range ({})", self.len);
        let (w, b) = (i / 64, i % 64);
        let mask = 1u64 << b;
        if self.words[w] & mask == 0 {
            self.words[w] |= mask;
            self.total += 1;
        }
    }

    /// Whether variable `i` is present.
    pub fn get(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] & (1u64 << (i % 64)) != 0
    }

    /// Number of variables tracked.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no variables are tracked.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of variables present.
    pub fn count(&self) -> usize {
        self.total
    }

    /// Appends `other`. For an input density (`is_input`), `other`'s first bit is the
    /// sub-assignment's own `ONE` input: it is merged into ours instead of appended,
    /// as bellperson's `DensityTracker::extend` does.
    pub fn extend(&mut self, other: &Density, is_input: bool) {
        if other.len == 0 {
            return;
        }
        if self.len == 0 {
            *self = other.clone();
            return;
        }
        let mut start = 0;
        if is_input {
            if other.get(0) {
                self.set(0);
            }
            start = 1;
        }
        for i in start..other.len {
            self.push();
            if other.get(i) {
                let last = self.len - 1;
                self.set(last);
            }
        }
    }

    /// Heap bytes used by the bitmap.
    pub fn heap_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// The bitmap's words (64 variables each, least significant bit first).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// A bitmap of `len` variables from its words; `None` when the words do not
    /// hold exactly `len` bits (none set past the end).
    pub fn from_words(words: Vec<u64>, len: usize) -> Option<Density> {
        if words.len() != len.div_ceil(64) {
            return None;
        }
        if !len.is_multiple_of(64) && words.last().is_some_and(|w| w >> (len % 64) != 0) {
            return None;
        }
        let total = words.iter().map(|w| w.count_ones() as usize).sum();
        Some(Density { words, len, total })
    }

    /// Copies the elements of `values` whose bit is set, in order.
    ///
    /// `values.len()` must equal [`Density::len`].
    pub fn compact<T: Copy>(&self, values: &[T]) -> Vec<T> {
        let mut out = Vec::with_capacity(self.total);
        out.extend(self.select(values).copied());
        out
    }

    /// [`Density::select`] in parts of `words_per_part` words (64 variables each),
    /// for scanning in parallel: each part with the number of elements selected before
    /// it.
    ///
    /// `values.len()` must equal [`Density::len`].
    pub fn select_parts<'a, T>(
        &'a self,
        values: &'a [T],
        words_per_part: usize,
    ) -> Vec<(usize, impl Iterator<Item = &'a T> + 'a)> {
        debug_assert_eq!(values.len(), self.len);
        let step = words_per_part.max(1);
        let mut before = 0;
        (0..self.words.len())
            .step_by(step)
            .map(|w0| {
                let w1 = (w0 + step).min(self.words.len());
                let part = (before, self.select_words(values, w0..w1));
                before += self.words[w0..w1].iter().map(|w| w.count_ones() as usize).sum::<usize>();
                part
            })
            .collect()
    }

    /// The elements of `values` whose bit is set, in order, without copying them.
    ///
    /// `values.len()` must equal [`Density::len`].
    pub fn select<'a, T>(&'a self, values: &'a [T]) -> impl Iterator<Item = &'a T> + 'a {
        debug_assert_eq!(values.len(), self.len);
        self.select_words(values, 0..self.words.len())
    }

    /// The selected elements among the variables of `words`.
    fn select_words<'a, T>(
        &'a self,
        values: &'a [T],
        words: std::ops::Range<usize>,
    ) -> impl Iterator<Item = &'a T> + 'a {
        let first = words.start;
        self.words[words].iter().enumerate().map(move |(w, word)| (first + w, word)).flat_map(move |(w, word)| {
            let mut bits = *word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    &values[w * 64 + b]
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_count_compact() {
        let mut d = Density::new();
        for _ in 0..130 {
            d.push();
        }
        for i in [0, 5, 63, 64, 129, 5] {
            d.set(i);
        }
        assert_eq!(d.count(), 5);
        let vals: Vec<usize> = (0..130).collect();
        assert_eq!(d.compact(&vals), vec![0, 5, 63, 64, 129]);
        let mut e = Density::new();
        e.push();
        e.extend(&d, true);
        assert_eq!(e.len(), 130);
        assert_eq!(e.count(), 5);
        assert!(e.get(5) && e.get(0) && !e.get(1));
    }

    #[test]
    fn parts_select_what_select_does() {
        let mut d = Density::new();
        for i in 0..1000 {
            d.push();
            if i % 3 == 0 || i % 64 == 5 {
                d.set(i);
            }
        }
        let vals: Vec<usize> = (0..1000).collect();
        let all: Vec<usize> = d.select(&vals).copied().collect();
        for per in [1, 2, 5, 16, 100] {
            let parts = d.select_parts(&vals, per);
            let mut joined = Vec::new();
            for (before, it) in parts {
                assert_eq!(before, joined.len(), "{per} words a part");
                joined.extend(it.copied());
            }
            assert_eq!(joined, all, "{per} words a part");
        }
    }
}

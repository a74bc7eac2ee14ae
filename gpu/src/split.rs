//! MSM scalars as PrepareMsm hands them to a backend: every scalar in canonical form,
//! or, for a witness that is mostly bits, split by value.
//!
//! A PoRep witness is mostly bits: of a 2KiB partition's 2.69M aux values, 1.38M are
//! 0 and 1.27M are 1; only 44k are anything else. A Pippenger MSM still sorts every
//! scalar through every window. Split by value, each of the L, A, B MSMs becomes the
//! sum of the points behind the ones (a batch addition over an index list), plus an
//! MSM of the rest over their points; zeros drop out. The same group elements, so the
//! same proof bytes. The split is made from the Montgomery values PrepareMsm receives
//! (0 and 1 are compared limb by limb), so only the rest is ever converted.

use blstrs::Scalar;
use ff::Field;

use crate::ScalarBytes;

/// One MSM's scalars, lined up one to one with its points.
#[derive(Clone, Debug, PartialEq)]
pub enum MsmScalars {
    /// Every scalar, canonical little-endian.
    Dense(Vec<ScalarBytes>),
    /// Split by value; see [`SplitScalars`].
    Split(SplitScalars),
}

impl Default for MsmScalars {
    fn default() -> Self {
        MsmScalars::Dense(Vec::new())
    }
}

/// One MSM's scalars by value: the indices of the ones, and the indices and values
/// of the scalars that are neither 0 nor 1. Every other scalar is 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SplitScalars {
    /// Number of scalars (= points).
    pub len: usize,
    pub ones: Vec<u32>,
    pub rest_idx: Vec<u32>,
    pub rest: Vec<ScalarBytes>,
}

/// Whether the L, A and B split lists fit a device staging buffer of domain
/// 2^`lg`: each vector's rest at most 2^lg / 8 (the gather buffer), all the lists
/// together at most 3 · 2^lg entries (the CUDA backend's device split).
pub fn lists_fit(lg: u32, v: [&SplitScalars; 3]) -> bool {
    let cap = (1usize << lg) / 8;
    let total: usize = v.iter().map(|s| s.ones.len() + s.rest.len()).sum();
    v.iter().all(|s| s.rest.len() <= cap) && total <= 3 << lg
}

impl MsmScalars {
    /// Number of scalars (= points of the MSM).
    pub fn len(&self) -> usize {
        match self {
            MsmScalars::Dense(v) => v.len(),
            MsmScalars::Split(s) => s.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> u64 {
        match self {
            MsmScalars::Dense(v) => v.capacity() as u64 * 32,
            MsmScalars::Split(s) => {
                (s.ones.capacity() + s.rest_idx.capacity()) as u64 * 4 + s.rest.capacity() as u64 * 32
            }
        }
    }

    /// The split form, if this is one.
    pub fn as_split(&self) -> Option<&SplitScalars> {
        match self {
            MsmScalars::Split(s) => Some(s),
            MsmScalars::Dense(_) => None,
        }
    }

    /// Every scalar, canonical: borrowed when dense, rebuilt from the lists when split
    /// (for the paths that need them all: streamed parameters on the GPU).
    pub fn dense(&self) -> std::borrow::Cow<'_, [ScalarBytes]> {
        match self {
            MsmScalars::Dense(v) => std::borrow::Cow::Borrowed(v),
            MsmScalars::Split(s) => std::borrow::Cow::Owned(s.to_dense()),
        }
    }
}

const ONE: ScalarBytes = {
    let mut b = [0u8; 32];
    b[0] = 1;
    b
};

impl SplitScalars {
    /// Splits `values` (Montgomery form, `len` of them) when it pays and fits: at
    /// most `len / 8` and `domain / 8` of them neither 0 nor 1 (the GPU gathers the
    /// rest's points into a buffer of `domain / 8`), indices within u32. `None`
    /// otherwise, after reading at most the first such values past the bound (random
    /// scalars, as in synthetic circuits, give up early).
    pub fn from_values<'a>(
        values: impl Iterator<Item = &'a Scalar> + Send + 'a,
        len: usize,
        domain: usize,
    ) -> Option<SplitScalars> {
        Self::from_parts(vec![(0, Box::new(values))], len, domain)
    }

    /// [`SplitScalars::from_values`] over `parts` scanned in parallel: each part is
    /// the index of its first scalar and an iterator over its values, in order; the
    /// parts follow each other and cover the `len` scalars without gaps. A 32GiB
    /// partition's L or A vector is 130M scalars: one thread scanned it in 1.7–1.9 s,
    /// while the partition held its host reservation.
    pub fn from_parts<'a>(
        parts: Vec<(usize, Box<dyn Iterator<Item = &'a Scalar> + Send + 'a>)>,
        len: usize,
        domain: usize,
    ) -> Option<SplitScalars> {
        use rayon::prelude::*;
        use std::sync::atomic::{AtomicBool, Ordering};
        if len > u32::MAX as usize {
            return None;
        }
        let cap = (len / 8).min(domain / 8);
        // Set when one part alone has more than the bound: the whole gives up.
        let over = AtomicBool::new(false);
        let scanned: Vec<Option<(usize, usize, SplitScalars)>> = parts
            .into_par_iter()
            .map(|(start, values)| {
                let mut s = SplitScalars::default();
                let mut n = start;
                for v in values {
                    if *v == Scalar::ONE {
                        s.ones.push(n as u32);
                    } else if *v != Scalar::ZERO {
                        if s.rest.len() == cap || over.load(Ordering::Relaxed) {
                            over.store(true, Ordering::Relaxed);
                            return None;
                        }
                        s.rest_idx.push(n as u32);
                        s.rest.push(v.to_bytes_le());
                    }
                    n += 1;
                }
                Some((start, n, s))
            })
            .collect();
        let parts: Vec<_> = scanned.into_iter().collect::<Option<_>>()?;
        if parts.iter().map(|(_, _, s)| s.rest.len()).sum::<usize>() > cap {
            return None;
        }
        let ones: usize = parts.iter().map(|(_, _, s)| s.ones.len()).sum();
        // The first part's lists are extended in place (a single part: not copied).
        let (mut out, mut next) = (SplitScalars::default(), 0);
        for (start, end, s) in parts {
            assert_eq!(start, next, "split: parts must follow each other (a part starts at {start}, expected {next})");
            next = end;
            if start == 0 {
                out = s;
                out.ones.reserve_exact(ones - out.ones.len());
            } else {
                out.ones.extend(s.ones);
                out.rest_idx.extend(s.rest_idx);
                out.rest.extend(s.rest);
            }
        }
        assert_eq!(next, len, "split: the parts gave {next} values for {len} points");
        out.len = len;
        Some(out)
    }

    /// Whether the lists describe `len` scalars: every index below `len`, one value
    /// per rest index. `from_values` always makes such lists; backends check lists
    /// from elsewhere before any index reaches device memory.
    pub fn is_valid(&self) -> bool {
        self.rest.len() == self.rest_idx.len()
            && self.len <= u32::MAX as usize + 1
            && self.ones.iter().chain(&self.rest_idx).all(|&i| (i as usize) < self.len)
    }

    /// Every scalar, canonical.
    pub fn to_dense(&self) -> Vec<ScalarBytes> {
        let mut v = vec![[0u8; 32]; self.len];
        for &i in &self.ones {
            v[i as usize] = ONE;
        }
        for (&i, r) in self.rest_idx.iter().zip(&self.rest) {
            v[i as usize] = *r;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_scanned_in_parallel_equal_one_scan() {
        let r = Scalar::from(7u64);
        // Mostly bits, one in 20 neither: splits.
        let v: Vec<Scalar> = (0..10_000u64)
            .map(|i| match i % 20 {
                0 => r + Scalar::from(i),
                1..=9 => Scalar::ZERO,
                _ => Scalar::ONE,
            })
            .collect();
        let whole = SplitScalars::from_values(v.iter(), v.len(), 1 << 14).unwrap();
        for chunk in [1, 7, 64, 999, 10_000] {
            let parts = v
                .chunks(chunk)
                .enumerate()
                .map(|(i, c)| (i * chunk, Box::new(c.iter()) as Box<dyn Iterator<Item = &Scalar> + Send>))
                .collect();
            assert_eq!(SplitScalars::from_parts(parts, v.len(), 1 << 14).as_ref(), Some(&whole), "chunks of {chunk}");
        }
        // Over the bound in total though no part is alone: gives up, as one scan does.
        let dense: Vec<Scalar> = (0..1000u64).map(|i| r + Scalar::from(i)).collect();
        assert!(SplitScalars::from_values(dense.iter(), 1000, 1 << 14).is_none());
        let parts = dense
            .chunks(100)
            .enumerate()
            .map(|(i, c)| (i * 100, Box::new(c.iter()) as Box<dyn Iterator<Item = &Scalar> + Send>))
            .collect();
        assert!(SplitScalars::from_parts(parts, 1000, 1 << 14).is_none());
    }

    #[test]
    fn ones_and_rest_by_index_zeros_dropped() {
        let r = Scalar::from(7u64);
        let mut v = vec![Scalar::ZERO; 64];
        v[3] = Scalar::ONE;
        v[5] = r;
        v[9] = Scalar::ONE;
        let s = SplitScalars::from_values(v.iter(), 64, 64).expect("1 of 64 is rest: split");
        assert_eq!(s.ones, vec![3, 9]);
        assert_eq!((s.rest_idx.clone(), s.rest.clone()), (vec![5], vec![r.to_bytes_le()]));
        let want: Vec<ScalarBytes> = v.iter().map(|x| x.to_bytes_le()).collect();
        assert_eq!(s.to_dense(), want, "the lists rebuild every scalar");
        assert!(s.is_valid());
        let mut bad = s.clone();
        bad.ones.push(64);
        assert!(!bad.is_valid(), "an index past the points");
        assert_eq!(MsmScalars::Split(s).dense().into_owned(), want);
        // Mostly random: not worth it.
        let v: Vec<Scalar> = (0..64u64).map(|i| Scalar::from(i + 2)).collect();
        assert!(SplitScalars::from_values(v.iter(), 64, 64).is_none());
        // Fits the points but not the device's gather buffer (domain / 8).
        let mut v = vec![Scalar::ZERO; 64];
        v[0] = r;
        v[1] = r;
        assert!(SplitScalars::from_values(v.iter(), 64, 64).is_some());
        assert!(SplitScalars::from_values(v.iter(), 64, 8).is_none());
    }
}

//! The bit split of a partition's MSM scalars (CUDA backend, resident parameters).
//!
//! A PoRep witness is mostly bits: of a 2KiB partition's 2.69M aux values, 1.38M are
//! 0 and 1.27M are 1; only 44k are anything else. sppark's MSM still sorts every
//! scalar through every window. Split by value, each of the L, A, B MSMs becomes the
//! sum of the points behind the ones (sppark's batch addition over an index list),
//! plus an MSM of the rest over their points gathered on the device; zeros drop
//! out. The same group elements, so the same proof bytes.

use std::time::{Duration, Instant};

use crate::{HostPartition, ScalarBytes};

/// One MSM's scalars by value.
#[derive(Debug, Default)]
pub(crate) struct Lists {
    /// Indices of the scalars equal to 1.
    pub ones: Vec<u32>,
    /// Indices and values of the scalars neither 0 nor 1.
    pub rest_idx: Vec<u32>,
    pub rest: Vec<ScalarBytes>,
}

/// L, A and B split (B's lists serve B_G1 and B_G2), and the time it took.
#[derive(Debug)]
pub(crate) struct Split {
    pub lists: [Lists; 3],
    pub took: Duration,
}

const ONE: ScalarBytes = {
    let mut b = [0u8; 32];
    b[0] = 1;
    b
};

/// Splits only when it pays and fits: every vector's rest at most 1/8 of it and of
/// the domain (the device gathers the rest points into a buffer of that size), all
/// index lists within the workspace's 3 x 2^lg entries.
fn lists(scalars: &[ScalarBytes], domain: usize) -> Option<Lists> {
    let cap = (scalars.len() / 8).min(domain / 8);
    if scalars.len() >= 1 << 31 {
        return None;
    }
    let mut l = Lists::default();
    for (i, v) in scalars.iter().enumerate() {
        if *v == ONE {
            l.ones.push(i as u32);
        } else if *v != [0u8; 32] {
            if l.rest.len() == cap {
                return None;
            }
            l.rest_idx.push(i as u32);
            l.rest.push(*v);
        }
    }
    Some(l)
}

/// The split of `p`'s MSM scalars, or `None` when it does not pay or fit (random
/// scalars, as in synthetic circuits, stay on the plain MSMs).
pub(crate) fn split(p: &HostPartition) -> Option<Split> {
    let t = Instant::now();
    let domain = 1usize << p.domain_log2;
    let lists = [lists(&p.l_scalars, domain)?, lists(&p.a_scalars, domain)?, lists(&p.b_scalars, domain)?];
    let total: usize = lists.iter().map(|l| l.ones.len() + l.rest.len()).sum();
    (total <= 3 * domain).then(|| Split { lists, took: t.elapsed() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use blstrs::Scalar;
    use ff::Field;

    fn host(v: &[Scalar]) -> HostPartition {
        let b: Vec<ScalarBytes> = v.iter().map(|s| s.to_bytes_le()).collect();
        HostPartition { domain_log2: 6, l_scalars: b.clone(), a_scalars: b.clone(), b_scalars: b, ..Default::default() }
    }

    #[test]
    fn ones_and_rest_by_index_zeros_dropped() {
        let r = Scalar::from(7u64);
        let mut v = vec![Scalar::ZERO; 64];
        v[3] = Scalar::ONE;
        v[5] = r;
        v[9] = Scalar::ONE;
        let s = split(&host(&v)).expect("1 of 64 is rest: split");
        for l in &s.lists {
            assert_eq!(l.ones, vec![3, 9]);
            assert_eq!((l.rest_idx.clone(), l.rest.clone()), (vec![5], vec![r.to_bytes_le()]));
        }
        // Mostly random: not worth it.
        let v: Vec<Scalar> = (0..64u64).map(|i| Scalar::from(i + 2)).collect();
        assert!(split(&host(&v)).is_none());
    }
}

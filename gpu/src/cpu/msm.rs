use blst::MultiPoint;
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective};
use group::Group;
use rayon::prelude::*;

use crate::{ffi, MsmScalars, ScalarBytes, SplitScalars};

/// Ones summed per batch-addition call: large enough to amortize the inversion,
/// small enough to spread over every core.
const SUM_CHUNK: usize = 1 << 15;

/// `sum scalars[i] * points[i]` in G1 for dense or split scalars.
pub fn msm_g1_scalars(points: &[G1Affine], scalars: &MsmScalars) -> G1Projective {
    match scalars {
        MsmScalars::Dense(v) => msm_g1(points, v),
        MsmScalars::Split(s) => msm_g1_split(points, s),
    }
}

/// `sum scalars[i] * points[i]` in G2 for dense or split scalars.
pub fn msm_g2_scalars(points: &[G2Affine], scalars: &MsmScalars) -> G2Projective {
    match scalars {
        MsmScalars::Dense(v) => msm_g2(points, v),
        MsmScalars::Split(s) => msm_g2_split(points, s),
    }
}

/// The sum of the points behind the ones plus the MSM of the rest over their points.
///
/// # Panics
/// If an index is out of range of `points`.
pub fn msm_g1_split(points: &[G1Affine], s: &SplitScalars) -> G1Projective {
    let (ones, rest) = rayon::join(
        || s.ones.par_chunks(SUM_CHUNK).map(|c| ffi::g1_sum(points, c)).reduce(G1Projective::identity, |a, b| a + b),
        || {
            let pts: Vec<G1Affine> = s.rest_idx.iter().map(|&i| points[i as usize]).collect();
            msm_g1(&pts, &s.rest)
        },
    );
    ones + rest
}

/// [`msm_g1_split`] in G2.
pub fn msm_g2_split(points: &[G2Affine], s: &SplitScalars) -> G2Projective {
    let (ones, rest) = rayon::join(
        || s.ones.par_chunks(SUM_CHUNK).map(|c| ffi::g2_sum(points, c)).reduce(G2Projective::identity, |a, b| a + b),
        || {
            let pts: Vec<G2Affine> = s.rest_idx.iter().map(|&i| points[i as usize]).collect();
            msm_g2(&pts, &s.rest)
        },
    );
    ones + rest
}

/// `sum scalars[i] * points[i]` in G1 with blst's multi-threaded Pippenger.
///
/// The slices must have equal lengths (checked by the caller; extra scalars are a
/// caller bug and trip a debug assertion).
pub fn msm_g1(points: &[G1Affine], scalars: &[ScalarBytes]) -> G1Projective {
    debug_assert_eq!(points.len(), scalars.len());
    let n = points.len().min(scalars.len());
    if n == 0 {
        return G1Projective::identity();
    }
    let res = ffi::g1_affines(&points[..n]).mult(scalars[..n].as_flattened(), 255);
    ffi::g1_projective(res)
}

/// `sum scalars[i] * points[i]` in G2 with blst's multi-threaded Pippenger.
pub fn msm_g2(points: &[G2Affine], scalars: &[ScalarBytes]) -> G2Projective {
    debug_assert_eq!(points.len(), scalars.len());
    let n = points.len().min(scalars.len());
    if n == 0 {
        return G2Projective::identity();
    }
    let res = ffi::g2_affines(&points[..n]).mult(scalars[..n].as_flattened(), 255);
    ffi::g2_projective(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use blstrs::Scalar;
    use ff::Field;
    use group::Curve;
    use rand::SeedableRng;

    #[test]
    fn matches_naive() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for n in [0usize, 1, 2, 31, 33, 300] {
            let p1: Vec<G1Affine> = (0..n).map(|_| G1Projective::random(&mut rng).to_affine()).collect();
            let p2: Vec<G2Affine> = (0..n).map(|_| G2Projective::random(&mut rng).to_affine()).collect();
            let s: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
            let sb: Vec<ScalarBytes> = s.iter().map(|s| s.to_bytes_le()).collect();
            let n1 = p1.iter().zip(&s).fold(G1Projective::identity(), |acc, (p, s)| acc + p * s);
            let n2 = p2.iter().zip(&s).fold(G2Projective::identity(), |acc, (p, s)| acc + p * s);
            assert_eq!(msm_g1(&p1, &sb), n1, "g1 n={n}");
            assert_eq!(msm_g2(&p2, &sb), n2, "g2 n={n}");
        }
    }

    /// Split scalars (ones, zeros, a few others; repeated points and a point at
    /// infinity, which the batch addition must handle) give the dense result.
    #[test]
    fn split_matches_dense() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        for n in [0usize, 1, 9, 100, 70_000] {
            let mut p1: Vec<G1Affine> = (0..n).map(|_| G1Projective::random(&mut rng).to_affine()).collect();
            let mut p2: Vec<G2Affine> = (0..n.min(300)).map(|_| G2Projective::random(&mut rng).to_affine()).collect();
            if n > 3 {
                p1[1] = p1[0];
                p1[2] = G1Projective::identity().to_affine();
                p2[1] = p2[0];
                p2[2] = G2Projective::identity().to_affine();
            }
            let s: Vec<Scalar> = (0..n)
                .map(|i| match i % 17 {
                    16 => Scalar::random(&mut rng),
                    0..=7 => Scalar::ONE,
                    _ => Scalar::ZERO,
                })
                .collect();
            let split = SplitScalars::from_values(s.iter(), n, n.next_power_of_two()).expect("1 in 17 is rest");
            let dense: Vec<ScalarBytes> = s.iter().map(|s| s.to_bytes_le()).collect();
            let m = MsmScalars::Split(split);
            assert_eq!(msm_g1_scalars(&p1, &m), msm_g1(&p1, &dense), "g1 n={n}");
            if n <= 300 {
                assert_eq!(msm_g2_scalars(&p2, &m), msm_g2(&p2, &dense), "g2 n={n}");
            }
        }
    }
}

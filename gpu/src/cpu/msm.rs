use blst::MultiPoint;
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective};
use group::Group;

use crate::{ffi, ScalarBytes};

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
}

//! Timing parameters: TEST-ONLY parameters with the exact vector lengths of a
//! circuit's real ones and points from no toxic waste, so that a full-size circuit
//! (a 32GiB PoRep partition: 130M constraints, ~47 GiB of points) can be proved and
//! timed without days of parameter generation. Every proof made with them is
//! invalid: nothing checks against their verifying key, which is random points.
//!
//! Points are chains of additions in the subgroup: each chunk of 16384 starts at a
//! pseudo-random multiple `s·G` (`s` below 2^128, from the seed) and adds `G` to
//! each next one, in projective coordinates, then the chunk is normalized in one
//! batch. About one mixed addition per point, on all cores: minutes at 32GiB instead
//! of the hours fixed-base multiplications would take. Points within a chunk are
//! distinct and chunks start at unrelated multiples, so MSMs see no repeated points.

use std::{ops::AddAssign, sync::Arc};

use bellperson::groth16::VerifyingKey;
use blstrs::{Bls12, G1Projective, G2Projective, Scalar};
use cuzk_core::CircuitShape;
use ff::PrimeField;
use group::{prime::PrimeCurveAffine, Curve, Group};
use rayon::prelude::*;

use crate::ProvingKey;

/// Points per chain.
const CHUNK: usize = 1 << 14;

/// splitmix64: a well-mixed 64-bit value from `x`.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A scalar in [2^127, 2^128) derived from (seed, vector, chunk).
fn start_scalar(seed: u64, vector: u64, chunk: u64) -> Scalar {
    let lo = splitmix(seed ^ splitmix(vector.wrapping_mul(0x1000_0000_01b3) ^ splitmix(chunk)));
    let hi = splitmix(lo ^ 0x5851_f42d_4c95_7f2d);
    Scalar::from_u128((u128::from(hi) << 64 | u128::from(lo)) | 1 << 127)
}

/// `n` points: chains of additions (see the module docs).
fn chain<P>(n: usize, seed: u64, vector: u64) -> Vec<P::AffineRepr>
where
    P: Curve + Group<Scalar = Scalar> + for<'a> AddAssign<&'a P::AffineRepr> + Send + Sync,
    P::AffineRepr: PrimeCurveAffine + Default + Copy + Send + Sync,
{
    let g = P::generator().to_affine();
    let mut out = vec![P::AffineRepr::default(); n];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(k, o)| {
        let mut p = P::generator() * start_scalar(seed, vector, k as u64);
        let mut proj = Vec::with_capacity(o.len());
        for _ in 0..o.len() {
            proj.push(p);
            p.add_assign(&g);
        }
        P::batch_normalize(&proj, o);
    });
    out
}

/// TEST-ONLY timing parameters for a circuit of `shape` (see the module docs):
/// `check_shape(shape)` passes, proofs never verify. Deterministic in `seed`.
pub fn generate_timing(shape: &CircuitShape, seed: u64) -> ProvingKey {
    let m = 1usize << shape.domain_log2();
    let g1 = |v: u64| G1Projective::generator() * start_scalar(seed, v, u64::MAX);
    let g2 = |v: u64| G2Projective::generator() * start_scalar(seed, v, u64::MAX);
    let vk = VerifyingKey::<Bls12> {
        alpha_g1: g1(100).to_affine(),
        beta_g1: g1(101).to_affine(),
        beta_g2: g2(102).to_affine(),
        gamma_g2: g2(103).to_affine(),
        delta_g1: g1(104).to_affine(),
        delta_g2: g2(105).to_affine(),
        ic: chain::<G1Projective>(shape.inputs, seed, 0),
    };
    ProvingKey {
        vk,
        h: Arc::new(chain::<G1Projective>(m - 1, seed, 1)),
        l: Arc::new(chain::<G1Projective>(shape.aux, seed, 2)),
        a: Arc::new(chain::<G1Projective>(shape.a_query, seed, 3)),
        b_g1: Arc::new(chain::<G1Projective>(shape.b_query, seed, 4)),
        b_g2: Arc::new(chain::<G2Projective>(shape.b_query, seed, 5)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blstrs::{G1Affine, G2Affine};

    #[test]
    fn exact_lengths_and_chains_of_additions() {
        let shape = CircuitShape { constraints: 40_000, inputs: 5, aux: 39_000, a_query: 30_000, b_query: 4_000 };
        let k = generate_timing(&shape, 9);
        k.check_shape(&shape).unwrap();
        assert_eq!(k.domain_size(), 1 << 16);
        // Within a chunk each point is the previous plus G; chunks start apart.
        for v in [&k.h, &k.l, &k.a] {
            for i in [1, 2, CHUNK - 1, CHUNK + 1] {
                assert_eq!(G1Projective::from(v[i]), G1Projective::from(v[i - 1]) + G1Affine::generator());
            }
            assert_ne!(G1Projective::from(v[CHUNK]), G1Projective::from(v[CHUNK - 1]) + G1Affine::generator());
            assert!(v.iter().all(|p| !bool::from(p.is_identity()) && bool::from(p.is_torsion_free())));
        }
        assert_eq!(G2Projective::from(k.b_g2[1]), G2Projective::from(k.b_g2[0]) + G2Affine::generator());
        assert_ne!(k.h[0], k.l[0], "vectors start at unrelated multiples");
        assert_eq!(generate_timing(&shape, 9).l[CHUNK + 7], k.l[CHUNK + 7], "deterministic in the seed");
        assert_ne!(generate_timing(&shape, 10).l[0], k.l[0]);
    }
}

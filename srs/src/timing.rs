//! Timing parameters: TEST-ONLY parameters with the exact vector lengths of a
//! circuit's real ones and points from no toxic waste, so that a full-size circuit
//! (a 32GiB PoRep partition: 130M constraints, ~47 GiB of points) can be proved and
//! timed without days of parameter generation. Every proof made with them is
//! invalid: nothing checks against their verifying key, which is random points.
//!
//! Points are chains of additions in the subgroup: each chunk of 16384 starts at a
//! pseudo-random multiple `s·G` (`s` below 2^128, from the seed) and adds `G` to
//! each next one, in projective coordinates, then the chunk is normalized with one
//! shared inversion. About one mixed addition and seven multiplications per point,
//! on all cores, instead of the ~32 additions of a fixed-base multiplication. Points
//! within a chunk are distinct and chunks start at unrelated multiples, so MSMs see
//! no repeated points.

use std::{ops::AddAssign, sync::Arc};

use bellperson::groth16::VerifyingKey;
use blstrs::{Bls12, Fp, Fp2, G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use cuzk_core::CircuitShape;
use ff::{Field, PrimeField};
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

/// A projective point in Jacobian coordinates (blst's: x = X/Z², y = Y/Z³), so a
/// chunk can be normalized with one shared inversion: group's default
/// `batch_normalize`, which blstrs keeps, inverts once per point (~4 µs each, 8×
/// the cost of the chain itself).
trait Jacobian: Curve + Group<Scalar = Scalar> + for<'a> AddAssign<&'a Self::AffineRepr> + Send + Sync {
    type F: Field;
    fn xyz(&self) -> (Self::F, Self::F, Self::F);
    fn affine(x: Self::F, y: Self::F) -> Self::AffineRepr;
}

macro_rules! jacobian {
    ($proj:ty, $aff:ty, $f:ty) => {
        impl Jacobian for $proj {
            type F = $f;
            fn xyz(&self) -> ($f, $f, $f) {
                (self.x(), self.y(), self.z())
            }
            fn affine(x: $f, y: $f) -> $aff {
                <$aff>::from_raw_unchecked(x, y, false)
            }
        }
    };
}

jacobian!(G1Projective, G1Affine, Fp);
jacobian!(G2Projective, G2Affine, Fp2);

/// `out[i] = proj[i]` in affine coordinates, with one field inversion for the whole
/// slice (Montgomery's trick). No point may be the identity (Z = 0).
fn normalize<P: Jacobian>(proj: &[P], out: &mut [P::AffineRepr]) {
    let mut prefix = Vec::with_capacity(proj.len());
    let mut acc = P::F::ONE;
    for p in proj {
        prefix.push(acc);
        acc *= p.xyz().2;
    }
    let mut inv = acc.invert().expect("no point of a chain is the identity");
    for ((p, before), o) in proj.iter().zip(prefix).zip(out.iter_mut()).rev() {
        let (x, y, z) = p.xyz();
        let zi = inv * before;
        inv *= z;
        let zi2 = zi.square();
        *o = P::affine(x * zi2, y * zi2 * zi);
    }
}

/// `n` points: chains of additions (see the module docs).
fn chain<P>(n: usize, seed: u64, vector: u64) -> Vec<P::AffineRepr>
where
    P: Jacobian,
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
        normalize(&proj, o);
    });
    out
}

/// A vector of [`generate_timing`]'s parameters: the tag its chains are seeded with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingVector {
    Ic = 0,
    H = 1,
    L = 2,
    A = 3,
    BG1 = 4,
    BG2 = 5,
}

/// The discrete logarithm, to the base of the group's generator, of
/// `Σ scalars[i] · P[i]` over vector `v` of `generate_timing(_, seed)`: point `i` is
/// `(start(i / CHUNK) + i % CHUNK) · G`. O(n) field operations, so a test can check
/// an MSM of any size (2^27 points, where the CPU MSM takes minutes) exactly.
pub fn timing_msm_dlog(seed: u64, v: TimingVector, scalars: &[Scalar]) -> Scalar {
    scalars
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(k, c)| {
            // Σ s_j (start + j) = start · Σ s_j + Σ j · s_j.
            let (mut sum, mut weighted, mut j) = (Scalar::ZERO, Scalar::ZERO, Scalar::ZERO);
            for s in c {
                sum += s;
                weighted += *s * j;
                j += Scalar::ONE;
            }
            start_scalar(seed, v as u64, k as u64) * sum + weighted
        })
        .reduce(|| Scalar::ZERO, |a, b| a + b)
}

/// The first `n` G1 points of vector `v` of `generate_timing(_, seed)` (for
/// `cuzk bench kernels`: MSM inputs whose results [`timing_msm_dlog`] checks).
/// `v` must be a G1 vector (not [`TimingVector::BG2`]).
pub fn timing_g1(n: usize, seed: u64, v: TimingVector) -> Vec<G1Affine> {
    assert_ne!(v, TimingVector::BG2, "B_G2 is a G2 vector");
    chain::<G1Projective>(n, seed, v as u64)
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
        ic: chain::<G1Projective>(shape.inputs, seed, TimingVector::Ic as u64),
    };
    ProvingKey {
        vk,
        h: Arc::new(chain::<G1Projective>(m - 1, seed, TimingVector::H as u64)),
        l: Arc::new(chain::<G1Projective>(shape.aux, seed, TimingVector::L as u64)),
        a: Arc::new(chain::<G1Projective>(shape.a_query, seed, TimingVector::A as u64)),
        b_g1: Arc::new(chain::<G1Projective>(shape.b_query, seed, TimingVector::BG1 as u64)),
        b_g2: Arc::new(chain::<G2Projective>(shape.b_query, seed, TimingVector::BG2 as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_lengths_and_chains_of_additions() {
        let shape = CircuitShape { constraints: 40_000, inputs: 5, aux: 39_000, a_query: 30_000, b_query: 4_000 };
        let k = generate_timing(&shape, 9);
        k.check_shape(&shape).unwrap();
        assert_eq!(k.domain_size(), 1 << 16);
        assert_eq!(ProvingKey::bytes_for_shape(&shape), k.heap_bytes(), "sizing before the key exists");
        // Within a chunk each point is the previous plus G; chunks start apart.
        for v in [&k.h, &k.l, &k.a] {
            for i in [1, 2, CHUNK - 1, CHUNK + 1] {
                assert_eq!(G1Projective::from(v[i]), G1Projective::from(v[i - 1]) + G1Affine::generator());
            }
            assert_ne!(G1Projective::from(v[CHUNK]), G1Projective::from(v[CHUNK - 1]) + G1Affine::generator());
            assert!(v.iter().all(|p| !bool::from(p.is_identity())
                && bool::from(p.is_on_curve())
                && bool::from(p.is_torsion_free())));
        }
        assert_eq!(G2Projective::from(k.b_g2[1]), G2Projective::from(k.b_g2[0]) + G2Affine::generator());
        assert!(k.b_g2.iter().all(|p| bool::from(p.is_on_curve()) && bool::from(p.is_torsion_free())));
        let first = G1Projective::generator() * start_scalar(9, 2, 0);
        assert_eq!(G1Projective::from(k.l[0]), first, "a chain starts at its seeded multiple");
        assert_ne!(k.h[0], k.l[0], "vectors start at unrelated multiples");
        assert_eq!(generate_timing(&shape, 9).l[CHUNK + 7], k.l[CHUNK + 7], "deterministic in the seed");
        assert_eq!(timing_g1(CHUNK + 9, 9, TimingVector::L)[..], k.l[..CHUNK + 9], "a vector's first points alone");
        assert_ne!(generate_timing(&shape, 10).l[0], k.l[0]);
    }

    #[test]
    fn msm_discrete_logs_match_the_msms() {
        let shape = CircuitShape { constraints: CHUNK + 9, inputs: 2, aux: CHUNK + 5, a_query: CHUNK + 3, b_query: 9 };
        let k = generate_timing(&shape, 4);
        let s: Vec<Scalar> =
            (0..CHUNK + 5).map(|i| Scalar::from((i * i + 7) as u64) - Scalar::from(3 * i as u64)).collect();
        let g1 = |p: &[G1Affine], s: &[Scalar]| {
            p.iter().zip(s).map(|(p, s)| G1Projective::from(p) * s).sum::<G1Projective>()
        };
        for (v, p) in [
            (TimingVector::L, &k.l[..]),
            (TimingVector::A, &k.a[..]),
            (TimingVector::H, &k.h[..]),
            (TimingVector::BG1, &k.b_g1[..]),
        ] {
            let s = &s[..p.len().min(s.len())];
            assert_eq!(g1(p, s), G1Projective::generator() * timing_msm_dlog(4, v, s), "{v:?}");
        }
        let bg2: G2Projective = k.b_g2.iter().zip(&s).map(|(p, s)| G2Projective::from(p) * s).sum();
        assert_eq!(bg2, G2Projective::generator() * timing_msm_dlog(4, TimingVector::BG2, &s[..9]));
        assert_ne!(g1(&k.l, &s), G1Projective::generator() * timing_msm_dlog(5, TimingVector::L, &s), "another seed");
    }
}

//! Radix-2 NTT over BLS12-381's scalar field and the H polynomial of Groth16.

use blstrs::Scalar;
use ff::{Field, PrimeField};
use rayon::prelude::*;

use crate::GpuError;

/// Below this many elements per task, splitting work across threads costs more than
/// it saves.
const MIN_PAR: usize = 1 << 10;

/// `base^start, base^(start+1), ...` written into `out`, in parallel chunks.
fn fill_powers(out: &mut [Scalar], base: Scalar, scale: Scalar) {
    out.par_chunks_mut(MIN_PAR).enumerate().for_each(|(i, chunk)| {
        let mut cur = scale * base.pow_vartime([(i * MIN_PAR) as u64]);
        for v in chunk {
            *v = cur;
            cur *= base;
        }
    });
}

/// Multiplies `v[i]` by `scale * base^i`.
fn mul_powers(v: &mut [Scalar], base: Scalar, scale: Scalar) {
    v.par_chunks_mut(MIN_PAR).enumerate().for_each(|(i, chunk)| {
        let mut cur = scale * base.pow_vartime([(i * MIN_PAR) as u64]);
        for x in chunk {
            *x *= cur;
            cur *= base;
        }
    });
}

fn bit_reverse(v: &mut [Scalar]) {
    let n = v.len();
    let log_n = n.trailing_zeros();
    if log_n == 0 {
        return;
    }
    for i in 0..n {
        let j = i.reverse_bits() >> (usize::BITS - log_n);
        if i < j {
            v.swap(i, j);
        }
    }
}

/// The primitive `2^log_n`-th root of unity.
///
/// # Errors
/// [`GpuError::DomainTooLarge`] above 2^32.
pub fn omega(log_n: u32) -> Result<Scalar, GpuError> {
    if log_n > Scalar::S {
        return Err(GpuError::DomainTooLarge(log_n));
    }
    let mut w = Scalar::ROOT_OF_UNITY;
    for _ in log_n..Scalar::S {
        w = w.square();
    }
    Ok(w)
}

/// In place: `v[i] <- sum_j v[j] * w^(i*j)`, natural order in and out.
/// `v.len()` must be a power of two and `w` a root of unity of that order.
pub fn ntt(v: &mut [Scalar], w: Scalar) {
    let n = v.len();
    assert!(n.is_power_of_two(), "NTT length {n} is not a power of two");
    if n == 1 {
        return;
    }
    bit_reverse(v);
    let mut tw = vec![Scalar::ZERO; n / 2];
    fill_powers(&mut tw, w, Scalar::ONE);
    let mut len = 2;
    while len <= n {
        let half = len / 2;
        let stride = n / len;
        let tw = &tw;
        let butterflies = move |lo: &mut [Scalar], hi: &mut [Scalar], j0: usize| {
            for (j, (x, y)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
                let t = *y * tw[(j0 + j) * stride];
                *y = *x - t;
                *x += t;
            }
        };
        if n / len >= rayon::current_num_threads() * 4 || half < MIN_PAR {
            // Many small blocks: one task per group of blocks.
            v.par_chunks_mut(len.max(MIN_PAR)).for_each(|group| {
                for block in group.chunks_mut(len) {
                    let (lo, hi) = block.split_at_mut(half);
                    butterflies(lo, hi, 0);
                }
            });
        } else {
            // Few large blocks: split each block's butterflies across threads.
            for block in v.chunks_mut(len) {
                let (lo, hi) = block.split_at_mut(half);
                lo.par_chunks_mut(MIN_PAR)
                    .zip(hi.par_chunks_mut(MIN_PAR))
                    .enumerate()
                    .for_each(|(k, (l, h))| butterflies(l, h, k * MIN_PAR));
            }
        }
        len <<= 1;
    }
}

/// Groth16's quotient polynomial: given the evaluations `a`, `b`, `c` of the A, B, C
/// polynomials on the domain of size `m = 2^log_m`, returns the `m - 1` coefficients
/// of `H = (A*B - C) / Z`, computed on the coset `g * <w>` with `g` the field's
/// multiplicative generator (the coset bellperson uses).
///
/// # Errors
/// [`GpuError::Shape`] if the inputs are longer than the domain or of unequal
/// length; [`GpuError::DomainTooLarge`].
pub fn compute_h(
    mut a: Vec<Scalar>,
    mut b: Vec<Scalar>,
    mut c: Vec<Scalar>,
    log_m: u32,
) -> Result<Vec<Scalar>, GpuError> {
    let m = 1usize << log_m;
    if a.len() > m || a.len() != b.len() || a.len() != c.len() {
        return Err(GpuError::Shape {
            op: "compute_h",
            detail: format!("a/b/c lengths {}/{}/{} for domain {m}", a.len(), b.len(), c.len()),
        });
    }
    let w = omega(log_m)?;
    let w_inv = w.invert().unwrap();
    let g = Scalar::MULTIPLICATIVE_GENERATOR;
    let g_inv = g.invert().unwrap();
    let m_inv = Scalar::from(m as u64).invert().unwrap();
    for v in [&mut a, &mut b, &mut c] {
        v.resize(m, Scalar::ZERO);
        // Coefficients, then evaluations on the coset: v(g * w^i).
        ntt(v, w_inv);
        mul_powers(v, g, m_inv);
        ntt(v, w);
    }
    // Z(x) = x^m - 1 is the constant g^m - 1 on the coset.
    let z_inv = (g.pow_vartime([m as u64]) - Scalar::ONE).invert().unwrap();
    a.par_iter_mut().zip(b.par_iter()).zip(c.par_iter()).for_each(|((a, b), c)| {
        *a = (*a * b - c) * z_inv;
    });
    drop(b);
    drop(c);
    ntt(&mut a, w_inv);
    mul_powers(&mut a, g_inv, m_inv);
    a.truncate(m - 1);
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn naive(v: &[Scalar], w: Scalar) -> Vec<Scalar> {
        let n = v.len();
        (0..n)
            .map(|i| {
                let wi = w.pow_vartime([i as u64]);
                let mut acc = Scalar::ZERO;
                let mut x = Scalar::ONE;
                for vj in v {
                    acc += *vj * x;
                    x *= wi;
                }
                acc
            })
            .collect()
    }

    #[test]
    fn ntt_matches_naive_and_inverts() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for log in [0u32, 1, 2, 5, 8] {
            let n = 1usize << log;
            let v: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
            let w = omega(log).unwrap();
            let mut f = v.clone();
            ntt(&mut f, w);
            assert_eq!(f, naive(&v, w), "log {log}");
            ntt(&mut f, w.invert().unwrap());
            let n_inv = Scalar::from(n as u64).invert().unwrap();
            f.iter_mut().for_each(|x| *x *= n_inv);
            assert_eq!(f, v);
        }
        // Large enough to take the parallel paths.
        let n = 1usize << 14;
        let v: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        let w = omega(14).unwrap();
        let mut f = v.clone();
        ntt(&mut f, w);
        ntt(&mut f, w.invert().unwrap());
        let n_inv = Scalar::from(n as u64).invert().unwrap();
        f.iter_mut().for_each(|x| *x *= n_inv);
        assert_eq!(f, v);
    }

    /// At 2^17 both parallel paths run (many small blocks, a group a task; few large
    /// blocks, split across tasks): entries against the sum that defines them.
    #[test]
    fn large_ntt_matches_its_definition() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let log = 17;
        let n = 1usize << log;
        let v: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        let w = omega(log).unwrap();
        let mut f = v.clone();
        ntt(&mut f, w);
        for i in [0, 1, 2, 4097, n / 2 + 3, n - 1] {
            let wi = w.pow_vartime([i as u64]);
            let (mut acc, mut x) = (Scalar::ZERO, Scalar::ONE);
            for vj in &v {
                acc += *vj * x;
                x *= wi;
            }
            assert_eq!(f[i], acc, "entry {i}");
        }
    }

    #[test]
    fn h_times_z_is_ab_minus_c() {
        // Choose polynomials A, B of degree < m/2 so A*B - C is divisible by Z when C
        // is the evaluation of A*B on the domain; then check H * Z == A*B - C at a point.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let log_m = 6;
        let m = 1usize << log_m;
        let w = omega(log_m).unwrap();
        let n = m - 3; // not a power of two: padded evaluations are zero
        let a: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        let b: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        let c: Vec<Scalar> = a.iter().zip(&b).map(|(x, y)| *x * y).collect();
        let h = compute_h(a.clone(), b.clone(), c.clone(), log_m).unwrap();
        assert_eq!(h.len(), m - 1);
        // Interpolate A, B, C to coefficients and evaluate at a random x.
        let interp = |mut v: Vec<Scalar>| {
            v.resize(m, Scalar::ZERO);
            ntt(&mut v, w.invert().unwrap());
            let m_inv = Scalar::from(m as u64).invert().unwrap();
            v.iter_mut().for_each(|x| *x *= m_inv);
            v
        };
        let eval = |coeffs: &[Scalar], x: Scalar| coeffs.iter().rev().fold(Scalar::ZERO, |acc, c| acc * x + c);
        let x = Scalar::random(&mut rng);
        let (ca, cb, cc) = (interp(a), interp(b), interp(c));
        let lhs = eval(&h, x) * (x.pow_vartime([m as u64]) - Scalar::ONE);
        let rhs = eval(&ca, x) * eval(&cb, x) - eval(&cc, x);
        assert_eq!(lhs, rhs);
    }
}

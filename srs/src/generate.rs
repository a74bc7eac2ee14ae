//! Random (toxic-waste) parameters for tests and benchmarks. Never for production.
//!
//! [`generate_random`] is cuzk's generator. It produces parameters with exactly
//! bellperson's layout and semantics (`generate_parameters`), but evaluates the
//! QAP at tau directly in the scalar field (Lagrange coefficients by one batch
//! inversion) and does every group exponentiation as a fixed-base multiplication
//! with precomputed 8-bit window tables (32 mixed additions, no doublings), in
//! parallel, followed by batch normalization. [`generate_bellperson`] calls
//! bellperson's own generator, for comparison.

use bellperson::{
    groth16::VerifyingKey, Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable,
};
use blstrs::{Bls12, G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::{Field, PrimeField};
use group::{prime::PrimeCurveAffine, Curve, Group};
use rand_core::RngCore;
use rayon::prelude::*;
use std::{ops::AddAssign, sync::Arc};

use crate::{ProvingKey, SrsError};

/// Generates random parameters for `circuit` with bellperson's own generator
/// (`generate_random_parameters`): slow, for comparison.
///
/// # Errors
/// [`SrsError::Generate`] when the circuit cannot be synthesized or has an
/// unconstrained variable.
pub fn generate_bellperson<C: Circuit<Scalar>, R: RngCore>(circuit: C, rng: &mut R) -> Result<ProvingKey, SrsError> {
    bellperson::groth16::generate_random_parameters::<Bls12, _, _>(circuit, rng)
        .map(ProvingKey::from)
        .map_err(|e| SrsError::Generate(e.to_string()))
}

/// One non-zero coefficient of the R1CS matrices: (variable, constraint, coefficient).
/// Variables are inputs `0..n_inputs` then aux `n_inputs..`.
type Entry = (u32, u32, Scalar);

/// Records the constraint matrices instead of a witness.
#[derive(Default)]
struct Shape {
    inputs: usize,
    aux_vars: usize,
    constraints: usize,
    // Aux indices are recorded raw and offset by `inputs` at the end.
    a: Vec<(bool, u32, u32, Scalar)>,
    b: Vec<(bool, u32, u32, Scalar)>,
    c: Vec<(bool, u32, u32, Scalar)>,
}

fn record(dst: &mut Vec<(bool, u32, u32, Scalar)>, lc: &LinearCombination<Scalar>, row: u32) {
    for (i, coeff) in lc.iter_inputs() {
        if !coeff.is_zero_vartime() {
            dst.push((true, *i as u32, row, *coeff));
        }
    }
    for (i, coeff) in lc.iter_aux() {
        if !coeff.is_zero_vartime() {
            dst.push((false, *i as u32, row, *coeff));
        }
    }
}

impl Shape {
    fn new_root() -> Self {
        Self::default()
    }

    #[inline]
    fn push_aux(&mut self, _: impl FnOnce() -> Result<Scalar, SynthesisError>) -> Result<Variable, SynthesisError> {
        self.aux_vars += 1;
        Ok(Variable::new_unchecked(Index::Aux(self.aux_vars - 1)))
    }

    #[inline]
    fn push_input(&mut self, _: impl FnOnce() -> Result<Scalar, SynthesisError>) -> Result<Variable, SynthesisError> {
        self.inputs += 1;
        Ok(Variable::new_unchecked(Index::Input(self.inputs - 1)))
    }

    #[inline]
    fn push_constraint(
        &mut self,
        a: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        b: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        c: impl FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    ) {
        let row = self.constraints as u32;
        record(&mut self.a, &a(LinearCombination::zero()), row);
        record(&mut self.b, &b(LinearCombination::zero()), row);
        record(&mut self.c, &c(LinearCombination::zero()), row);
        self.constraints += 1;
    }
}

cuzk_core::root_constraint_system!(Shape);

/// `sum_j coeff * lagrange[constraint]` per variable.
fn evaluate(entries: &[(bool, u32, u32, Scalar)], inputs: usize, vars: usize, lagrange: &[Scalar]) -> Vec<Scalar> {
    let flat: Vec<Entry> =
        entries.iter().map(|&(is_input, i, row, c)| (if is_input { i } else { i + inputs as u32 }, row, c)).collect();
    let mut out = vec![Scalar::ZERO; vars];
    for (var, row, coeff) in flat {
        out[var as usize] += lagrange[row as usize] * coeff;
    }
    out
}

/// Fixed-base multiplication with signed windows of `c` bits: `table[w][k - 1] =
/// k * 2^(c*w) * base` for k in 1..=2^(c-1), so a multiplication is one mixed
/// addition per window (about 256/c) and no doubling. `c` grows with the number of
/// multiplications to amortize the table (16 bits: 17 additions per multiplication).
struct FixedBase<A> {
    c: usize,
    windows: usize,
    table: Vec<A>,
}

/// Window width minimizing `windows * (count + 2^(c-1))` additions, at most 16 bits.
fn window_bits(count: usize) -> usize {
    (4..=16).min_by_key(|&c| (255usize.div_ceil(c) + 1) * (count + (1 << (c - 1)))).unwrap_or(8)
}

/// Signed base-2^c digits of `s`, each in [-2^(c-1), 2^(c-1)).
fn signed_digits(s: &Scalar, c: usize, out: &mut [i64]) {
    let bytes = s.to_repr();
    let limbs: [u64; 4] = std::array::from_fn(|i| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap()));
    let bit = |i: usize| if i < 256 { (limbs[i / 64] >> (i % 64)) & 1 } else { 0 };
    let mut carry = 0i64;
    for (w, d) in out.iter_mut().enumerate() {
        let mut v = 0i64;
        for j in (0..c).rev() {
            v = (v << 1) | bit(w * c + j) as i64;
        }
        v += carry;
        if v >= 1 << (c - 1) {
            v -= 1 << c;
            carry = 1;
        } else {
            carry = 0;
        }
        *d = v;
    }
}

/// Affine points as coordinates, for batched affine additions.
trait AffinePoint: Copy + Send + Sync {
    type F: Field;
    type Proj: Group + Curve<AffineRepr = Self> + for<'a> AddAssign<&'a Self> + From<Self> + Send;
    fn xy(&self) -> Option<(Self::F, Self::F)>;
    fn from_xy(x: Self::F, y: Self::F) -> Self;
    fn zero() -> Self;
    fn negate(&self) -> Self;
}

macro_rules! affine_point {
    ($aff:ty, $proj:ty, $f:ty) => {
        impl AffinePoint for $aff {
            type F = $f;
            type Proj = $proj;
            fn xy(&self) -> Option<($f, $f)> {
                (!bool::from(self.is_identity())).then(|| (self.x(), self.y()))
            }
            fn from_xy(x: $f, y: $f) -> Self {
                <$aff>::from_raw_unchecked(x, y, false)
            }
            fn zero() -> Self {
                <$aff>::identity()
            }
            fn negate(&self) -> Self {
                -*self
            }
        }
    };
}

affine_point!(G1Affine, G1Projective, blstrs::Fp);
affine_point!(G2Affine, G2Projective, blstrs::Fp2);

/// In place: every element replaced by its inverse (none may be zero).
fn batch_invert<F: Field>(v: &mut [F], scratch: &mut Vec<F>) {
    scratch.clear();
    let mut prod = F::ONE;
    for x in v.iter() {
        scratch.push(prod);
        prod *= *x;
    }
    let mut inv = prod.invert().unwrap();
    for (x, before) in v.iter_mut().zip(scratch.iter()).rev() {
        let xi = inv * *before;
        inv *= *x;
        *x = xi;
    }
}

impl<A: AffinePoint> FixedBase<A> {
    fn new(base: A::Proj, count: usize) -> Self {
        let c = window_bits(count);
        let windows = 255usize.div_ceil(c) + 1;
        let half = 1usize << (c - 1);
        let mut bases = Vec::with_capacity(windows);
        let mut b = base;
        for _ in 0..windows {
            bases.push(b);
            for _ in 0..c {
                b = b.double();
            }
        }
        let mut table = vec![A::zero(); windows * half];
        table.par_chunks_mut(half).zip(bases.par_iter()).for_each(|(t, bw)| Self::multiples(*bw, t));
        FixedBase { c, windows, table }
    }

    /// `t[k] = (k + 1) * b`, level by level: entries `2^l + 1 ..= 2^(l+1)` are the
    /// first `2^l` entries plus `2^l * b`, added in one batch of affine additions.
    fn multiples(b: A::Proj, t: &mut [A]) {
        let n = t.len();
        t[0] = b.to_affine();
        let mut q = b; // 2^l * b
        let (mut dx, mut scratch) = (Vec::new(), Vec::new());
        let mut len = 1;
        while len < n {
            let qa = q.to_affine();
            let (qx, qy) = qa.xy().expect("multiples of a generator are not the identity");
            // Entry len-1 is q itself: q + q is a doubling, done projectively below.
            let m = len.min(n - len);
            let pairs = m.min(len - 1);
            dx.clear();
            dx.extend(t[..pairs].iter().map(|p| qx - p.xy().expect("not identity").0));
            batch_invert(&mut dx, &mut scratch);
            for j in 0..pairs {
                let (ax, ay) = t[j].xy().expect("not identity");
                let l = (qy - ay) * dx[j];
                let x3 = l.square() - ax - qx;
                let y3 = l * (ax - x3) - ay;
                t[len + j] = A::from_xy(x3, y3);
            }
            q = q.double();
            if m == len {
                t[2 * len - 1] = q.to_affine();
            }
            len *= 2;
        }
    }

    /// The table entry for digit `d` of window `w` (`d != 0`).
    fn entry(&self, w: usize, d: i64) -> A {
        let half = 1usize << (self.c - 1);
        let p = self.table[w * half + d.unsigned_abs() as usize - 1];
        if d < 0 {
            p.negate()
        } else {
            p
        }
    }

    /// `s * base` for a batch of scalars: every window adds one table entry to each
    /// accumulator, in affine coordinates, with one field inversion shared by the
    /// whole batch (about 6 multiplications per addition instead of 11).
    fn mul_batch(&self, scalars: &[Scalar], out: &mut [A]) {
        let k = scalars.len();
        let mut digits = vec![0i64; k * self.windows];
        for (s, d) in scalars.iter().zip(digits.chunks_mut(self.windows)) {
            signed_digits(s, self.c, d);
        }
        let mut acc: Vec<Option<(A::F, A::F)>> = vec![None; k];
        let (mut lanes, mut dx, mut scratch) = (Vec::with_capacity(k), Vec::with_capacity(k), Vec::with_capacity(k));
        for w in 0..self.windows {
            lanes.clear();
            dx.clear();
            for i in 0..k {
                let d = digits[i * self.windows + w];
                if d == 0 {
                    continue;
                }
                let p = self.entry(w, d);
                let (px, py) = p.xy().expect("table entries are never the identity");
                match acc[i] {
                    None => acc[i] = Some((px, py)),
                    Some((ax, ay)) if ax == px => {
                        // Doubling or cancellation: rare; do it projectively.
                        let mut r = A::Proj::from(A::from_xy(ax, ay));
                        r.add_assign(&p);
                        acc[i] = r.to_affine().xy();
                    }
                    Some((ax, _)) => {
                        lanes.push((i, px, py));
                        dx.push(px - ax);
                    }
                }
            }
            batch_invert(&mut dx, &mut scratch);
            for (&(i, px, py), inv) in lanes.iter().zip(&dx) {
                let (ax, ay) = acc[i].expect("lane has an accumulator");
                let l = (py - ay) * inv;
                let x3 = l.square() - ax - px;
                let y3 = l * (ax - x3) - ay;
                acc[i] = Some((x3, y3));
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = a.map_or(A::zero(), |(x, y)| A::from_xy(x, y));
        }
    }

    /// `s * base` for every scalar, in parallel; zero scalars give the identity.
    fn mul_all(&self, scalars: &[Scalar]) -> Vec<A> {
        let mut out = vec![A::zero(); scalars.len()];
        out.par_chunks_mut(1024).zip(scalars.par_chunks(1024)).for_each(|(o, s)| self.mul_batch(s, o));
        out
    }
}

/// Generates random parameters for `circuit` (see the module docs).
///
/// # Errors
/// [`SrsError::Generate`] when synthesis fails, the domain is too large, or a
/// variable is unconstrained (it would have no L point).
pub fn generate_random<C: Circuit<Scalar>, R: RngCore>(circuit: C, rng: &mut R) -> Result<ProvingKey, SrsError> {
    let gen = |e: &dyn std::fmt::Display| SrsError::Generate(e.to_string());
    let mut cs = Shape::default();
    cs.alloc_input(|| "one", || Ok(Scalar::ONE)).map_err(|e| gen(&e))?;
    circuit.synthesize(&mut cs).map_err(|e| gen(&e))?;
    for i in 0..cs.inputs {
        cs.enforce(|| "", |lc| lc + Variable::new_unchecked(Index::Input(i)), |lc| lc, |lc| lc);
    }
    let (inputs, vars) = (cs.inputs, cs.inputs + cs.aux_vars);
    let m = cs.constraints.next_power_of_two();
    let log_m = m.trailing_zeros();
    if log_m > Scalar::S {
        return Err(gen(&format!("{} constraints need a domain above 2^{}", cs.constraints, Scalar::S)));
    }

    // Toxic waste, in bellperson's order.
    let (alpha, beta, gamma, delta, tau) = (
        Scalar::random(&mut *rng),
        Scalar::random(&mut *rng),
        Scalar::random(&mut *rng),
        Scalar::random(&mut *rng),
        Scalar::random(&mut *rng),
    );
    let gamma_inv = Option::<Scalar>::from(gamma.invert()).ok_or_else(|| gen(&"gamma is zero"))?;
    let delta_inv = Option::<Scalar>::from(delta.invert()).ok_or_else(|| gen(&"delta is zero"))?;

    // Lagrange basis of the size-m domain at tau: L_j(tau) = (tau^m - 1)/m * w^j / (tau - w^j).
    let mut w = Scalar::ROOT_OF_UNITY;
    for _ in log_m..Scalar::S {
        w = w.square();
    }
    let powers = |base: Scalar, n: usize| -> Vec<Scalar> {
        let mut v = vec![Scalar::ZERO; n];
        v.par_chunks_mut(4096).enumerate().for_each(|(k, c)| {
            let mut x = base.pow_vartime([(k * 4096) as u64]);
            for e in c {
                *e = x;
                x *= base;
            }
        });
        v
    };
    let w_pows = powers(w, m);
    let z_tau = tau.pow_vartime([m as u64]) - Scalar::ONE;
    let scale = z_tau * Scalar::from(m as u64).invert().unwrap();
    let mut denom: Vec<Scalar> = w_pows.par_iter().map(|wj| tau - wj).collect();
    denom.par_chunks_mut(4096).for_each(|c| {
        // Batch inversion per chunk (tau is random: no denominator is zero in practice).
        let mut acc = Vec::with_capacity(c.len());
        let mut prod = Scalar::ONE;
        for x in c.iter() {
            acc.push(prod);
            prod *= x;
        }
        let mut inv = prod.invert().unwrap();
        for (x, before) in c.iter_mut().zip(acc).rev() {
            let xi = inv * before;
            inv *= *x;
            *x = xi;
        }
    });
    let lagrange: Vec<Scalar> = denom.par_iter().zip(&w_pows).map(|(d, wj)| scale * wj * d).collect();

    let (u, (v, wv)) = rayon::join(
        || evaluate(&cs.a, inputs, vars, &lagrange),
        || rayon::join(|| evaluate(&cs.b, inputs, vars, &lagrange), || evaluate(&cs.c, inputs, vars, &lagrange)),
    );
    drop(cs);

    // H: tau^i * Z(tau) / delta for i < m - 1.
    let zd = z_tau * delta_inv;
    let h_s: Vec<Scalar> = powers(tau, m - 1).into_par_iter().map(|t| t * zd).collect();
    // IC (inputs) and L (aux): (beta*u + alpha*v + w) / gamma or delta.
    let ext = |i: usize, inv: &Scalar| (beta * u[i] + alpha * v[i] + wv[i]) * inv;
    let ic_s: Vec<Scalar> = (0..inputs).into_par_iter().map(|i| ext(i, &gamma_inv)).collect();
    let l_s: Vec<Scalar> = (inputs..vars).into_par_iter().map(|i| ext(i, &delta_inv)).collect();
    if let Some(i) = l_s.iter().position(|s| s.is_zero_vartime()) {
        return Err(gen(&format!("aux variable {i} is unconstrained (it appears in no constraint)")));
    }
    // A and B queries drop zero evaluations (variables absent from the query), as
    // bellperson's generator drops the resulting points at infinity.
    let nonzero = |x: &Vec<Scalar>| -> Vec<Scalar> { x.iter().copied().filter(|s| !s.is_zero_vartime()).collect() };
    let (a_s, b_s) = (nonzero(&u), nonzero(&v));
    let g1 = FixedBase::<G1Affine>::new(G1Projective::generator(), h_s.len() + l_s.len() + a_s.len() + b_s.len());
    let g2 = FixedBase::<G2Affine>::new(G2Projective::generator(), b_s.len());

    let vk = VerifyingKey::<Bls12> {
        alpha_g1: (G1Projective::generator() * alpha).to_affine(),
        beta_g1: (G1Projective::generator() * beta).to_affine(),
        beta_g2: (G2Projective::generator() * beta).to_affine(),
        gamma_g2: (G2Projective::generator() * gamma).to_affine(),
        delta_g1: (G1Projective::generator() * delta).to_affine(),
        delta_g2: (G2Projective::generator() * delta).to_affine(),
        ic: g1.mul_all(&ic_s),
    };
    Ok(ProvingKey {
        vk,
        h: Arc::new(g1.mul_all(&h_s)),
        l: Arc::new(g1.mul_all(&l_s)),
        a: Arc::new(g1.mul_all(&a_s)),
        b_g1: Arc::new(g1.mul_all(&b_s)),
        b_g2: Arc::new(g2.mul_all(&b_s)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuzk_synth::{SyntheticCircuit, SyntheticSpec};
    use rand_core::SeedableRng;

    #[test]
    fn fixed_base_matches_scalar_mul() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        for count in [1, 3, 1000, 1 << 20] {
            let t = FixedBase::<G1Affine>::new(G1Projective::generator(), count);
            let s: Vec<Scalar> = (0..2000)
                .map(|_| Scalar::random(&mut rng))
                .chain([Scalar::ZERO, Scalar::ONE, -Scalar::ONE, Scalar::from(2), Scalar::from(1 << 20)])
                .collect();
            let got = t.mul_all(&s);
            for (p, s) in got.iter().zip(&s) {
                assert_eq!(G1Projective::from(*p), G1Projective::generator() * s, "c = {}", t.c);
            }
        }
        let t2 = FixedBase::<G2Affine>::new(G2Projective::generator(), 5000);
        let s = [-Scalar::ONE, Scalar::random(&mut rng), Scalar::ZERO];
        for (p, s) in t2.mul_all(&s).iter().zip(&s) {
            assert_eq!(G2Projective::from(*p), G2Projective::generator() * s);
        }
    }

    #[test]
    fn same_shape_as_bellperson() {
        let spec = SyntheticSpec { constraints: 300, public_inputs: 3, a_density: 0.5, b_density: 0.2 };
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        let ours = generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap();
        let theirs = generate_bellperson(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap();
        assert_eq!(ours.vk.ic.len(), theirs.vk.ic.len());
        for (x, y) in [
            (ours.h.len(), theirs.h.len()),
            (ours.l.len(), theirs.l.len()),
            (ours.a.len(), theirs.a.len()),
            (ours.b_g1.len(), theirs.b_g1.len()),
            (ours.b_g2.len(), theirs.b_g2.len()),
        ] {
            assert_eq!(x, y);
        }
    }
}

//! The CPU backend: the reference implementation of every kernel.

mod msm;
mod ntt;

use std::time::Instant;

use cuzk_srs::ProvingKey;
use rayon::prelude::*;

pub use msm::{msm_g1, msm_g1_scalars, msm_g1_split, msm_g2, msm_g2_scalars, msm_g2_split};
pub(crate) use ntt::omega;
pub use ntt::{compute_h, ntt};

use crate::{Backend, Evals, GpuError, HostPartition, MsmResults, MsmScalars, UploadedPartition};

/// Runs the NTT and MSMs on the CPU (all cores, through rayon and blst's pool).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn upload(&self, host: HostPartition) -> Result<UploadedPartition, GpuError> {
        // Nothing to copy: the kernels read host memory.
        Ok(UploadedPartition { staged: None, backend: self.name(), host, pinned: None, urgent: false })
    }

    fn execute(&self, uploaded: UploadedPartition, srs: &ProvingKey, with_b_g2: bool) -> Result<MsmResults, GpuError> {
        if uploaded.backend != self.name() {
            return Err(GpuError::WrongBackend { uploaded: uploaded.backend, executing: self.name() });
        }
        let mut p = uploaded.host;
        check_shapes(&p, srs)?;
        let mut timings = Vec::with_capacity(6);
        if p.abc.deferred().is_some() {
            let t = Instant::now();
            let abc = host_evals(std::mem::take(&mut p.abc), &p.l_scalars)?;
            p.abc = abc;
            timings.push(("abc_host", t.elapsed()));
        }
        let t = Instant::now();
        let [a, b, c] = p.abc.into_vecs();
        let h = compute_h(a, b, c, p.domain_log2)?;
        let h_bytes: Vec<_> = h.par_iter().map(|s| s.to_bytes_le()).collect();
        drop(h);
        timings.push(("ntt_h", t.elapsed()));

        let t = Instant::now();
        let h = msm_g1(&srs.h, &h_bytes);
        drop(h_bytes);
        timings.push(("msm_h", t.elapsed()));
        let t = Instant::now();
        let l = msm_g1_scalars(&srs.l, &p.l_scalars);
        timings.push(("msm_l", t.elapsed()));
        let t = Instant::now();
        let a = msm_g1_scalars(&srs.a, &p.a_scalars);
        timings.push(("msm_a", t.elapsed()));
        let t = Instant::now();
        let b_g1 = msm_g1_scalars(&srs.b_g1, &p.b_scalars);
        timings.push(("msm_b_g1", t.elapsed()));
        let b_g2 = with_b_g2.then(|| {
            let t = Instant::now();
            let r = msm_g2_scalars(&srs.b_g2, &p.b_scalars);
            timings.push(("msm_b_g2", t.elapsed()));
            r
        });
        let split = [&p.l_scalars, &p.a_scalars, &p.b_scalars].iter().all(|s| s.as_split().is_some());
        Ok(MsmResults { h, l, a, b_g1, b_g2, split, timings })
    }
}

/// The checks every backend makes before touching memory.
///
/// # Errors
/// [`GpuError::Shape`] naming the mismatching vector.
pub fn check_shapes(p: &HostPartition, srs: &ProvingKey) -> Result<(), GpuError> {
    let [a, b, c] = p.abc.abc();
    let abc = if p.abc.deferred().is_some() { [p.abc.len(); 3] } else { [a.len(), b.len(), c.len()] };
    let counts = [abc[0], abc[1], abc[2], p.l_scalars.len(), p.a_scalars.len(), p.b_scalars.len()];
    check_counts(counts, p.domain_log2, srs)?;
    check_split([&p.l_scalars, &p.a_scalars, &p.b_scalars])
}

/// a, b, c on the host: as they are, or evaluated from the recording when synthesis
/// left them to the backend ([`Evals::Deferred`]). The aux values are the L MSM's
/// scalars (L has one point per aux variable, in order).
///
/// # Errors
/// [`GpuError::Shape`] when the recording's inputs or aux variables differ from the
/// partition's.
pub fn host_evals(abc: Evals, l: &MsmScalars) -> Result<Evals, GpuError> {
    let Evals::Deferred(d) = abc else { return Ok(abc) };
    let (split, dense) = match l {
        MsmScalars::Split(s) => (Some(s), &[][..]),
        MsmScalars::Dense(v) => (None, v.as_slice()),
    };
    let [a, b, c] = evaluate_deferred(&d, split, dense)?;
    Ok(Evals::heap(a, b, c))
}

/// a, b, c of a deferred partition on the host, its aux values from L's scalars:
/// `split` when split, else `dense`.
///
/// # Errors
/// As [`host_evals`].
pub(crate) fn evaluate_deferred(
    d: &cuzk_core::Deferred,
    split: Option<&crate::SplitScalars>,
    dense: &[crate::ScalarBytes],
) -> Result<[Vec<blstrs::Scalar>; 3], GpuError> {
    use blstrs::Scalar;
    use ff::Field;
    let view = d.rec.view();
    let aux_len = split.map_or(dense.len(), |s| s.len);
    if view.inputs != d.input.len() || view.aux != aux_len {
        return Err(GpuError::Shape {
            op: "evaluate a, b, c",
            detail: format!(
                "the recording has {} inputs and {} aux variables, the partition {} and {}",
                view.inputs,
                view.aux,
                d.input.len(),
                aux_len
            ),
        });
    }
    let bad = || GpuError::Shape { op: "evaluate a, b, c", detail: "an L scalar is not a field element".into() };
    let from = |b: &crate::ScalarBytes| Option::<Scalar>::from(Scalar::from_bytes_le(b));
    let aux: Vec<Scalar> = match split {
        None => dense.par_iter().map(|b| from(b).ok_or_else(bad)).collect::<Result<_, _>>()?,
        Some(s) => {
            if !s.is_valid() {
                return Err(GpuError::Shape {
                    op: "evaluate a, b, c",
                    detail: format!("L scalars: split lists index outside their {} scalars", s.len),
                });
            }
            let mut v = vec![Scalar::ZERO; s.len];
            for &i in &s.ones {
                v[i as usize] = Scalar::ONE;
            }
            for (&i, r) in s.rest_idx.iter().zip(&s.rest) {
                v[i as usize] = from(r).ok_or_else(bad)?;
            }
            v
        }
    };
    Ok(d.rec.evaluate(&d.input, &aux))
}

/// Split scalar lists that index outside their vector (not made by
/// `SplitScalars::from_values`) are refused before any index is used.
///
/// # Errors
/// [`GpuError::Shape`] naming the vector.
pub(crate) fn check_split(scalars: [&crate::MsmScalars; 3]) -> Result<(), GpuError> {
    for (what, s) in ["L", "A", "B"].into_iter().zip(scalars) {
        if let Some(sp) = s.as_split() {
            if !sp.is_valid() {
                return Err(GpuError::Shape {
                    op: "execute",
                    detail: format!("{what} scalars: split lists index outside their {} scalars", sp.len),
                });
            }
        }
    }
    Ok(())
}

/// [`check_shapes`] from the element counts of a, b, c and the L, A, B scalars.
pub(crate) fn check_counts(counts: [usize; 6], domain_log2: u32, srs: &ProvingKey) -> Result<(), GpuError> {
    let [n, nb, nc, nl, na, nbs] = counts;
    let m = 1usize << domain_log2;
    let mismatch = |what: &str, have: usize, need: usize| GpuError::Shape {
        op: "execute",
        detail: format!("{what}: partition has {have}, parameters have {need}"),
    };
    if nb != n || nc != n {
        return Err(mismatch("b/c evaluations vs a", nb.max(nc), n));
    }
    if n > m {
        return Err(mismatch("constraints vs domain size", n, m));
    }
    let checks = [
        ("domain size - 1 (H points)", m - 1, srs.h.len()),
        ("L scalars", nl, srs.l.len()),
        ("A scalars", na, srs.a.len()),
        ("B scalars", nbs, srs.b_g1.len()),
        ("B scalars (G2)", nbs, srs.b_g2.len()),
    ];
    for (what, have, need) in checks {
        if have != need {
            return Err(mismatch(what, have, need));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use blstrs::Scalar;
    use cuzk_core::{CsrView, Deferred, R1csEntry, R1csView, Recorded};
    use ff::Field;

    use super::*;
    use crate::SplitScalars;

    /// Two rows over one input (ONE) and three aux variables: row 0 = ONE + 2·x0 −
    /// x1, row 1 = 5·x2 (coefficient table: ONE, −ONE, TWO, 5). `evaluate` is the
    /// reference: a naive product, A for a, B = A for b, c = a∘b.
    #[derive(Debug)]
    struct Tiny {
        row_end: Vec<u32>,
        entries: Vec<R1csEntry>,
        coeffs: Vec<Scalar>,
    }

    fn tiny() -> Tiny {
        let e = |var: u32, coeff: u32| R1csEntry { var, coeff };
        Tiny {
            row_end: vec![3, 4],
            entries: vec![e(0, 0), e(1, 2), e(3, 1), e(5, 3)],
            coeffs: vec![Scalar::ONE, -Scalar::ONE, Scalar::from(2u64), Scalar::from(5u64)],
        }
    }

    impl Recorded for Tiny {
        fn rows(&self) -> usize {
            2
        }
        fn view(&self) -> R1csView<'_> {
            let m = CsrView { row_end: &self.row_end, entries: &self.entries };
            R1csView { inputs: 1, aux: 3, a: m, b: m, coeffs: &self.coeffs }
        }
        fn evaluate(&self, input: &[Scalar], aux: &[Scalar]) -> [Vec<Scalar>; 3] {
            let a = vec![input[0] + aux[0].double() - aux[1], aux[2] * Scalar::from(5u64)];
            let c = a.iter().map(|x| x.square()).collect();
            [a.clone(), a, c]
        }
    }

    #[test]
    fn deferred_a_b_c_are_evaluated_from_the_l_scalars_split_or_dense() {
        let d = Deferred { rec: Arc::new(tiny()), input: vec![Scalar::ONE] };
        let aux = [Scalar::ONE, Scalar::ZERO, Scalar::from(9u64)];
        let want = d.rec.evaluate(&d.input, &aux);
        let dense: Vec<crate::ScalarBytes> = aux.iter().map(|s| s.to_bytes_le()).collect();
        assert_eq!(evaluate_deferred(&d, None, &dense).unwrap(), want);
        let split =
            SplitScalars { len: 3, ones: vec![0], rest_idx: vec![2], rest: vec![Scalar::from(9u64).to_bytes_le()] };
        assert_eq!(evaluate_deferred(&d, Some(&split), &[]).unwrap(), want);
        // Through `host_evals`, as the CPU backend takes a deferred partition.
        let evals = host_evals(Evals::Deferred(d.clone()), &MsmScalars::Split(split.clone())).unwrap();
        assert_eq!(evals.into_vecs(), want);

        // What does not fit the recording is refused, naming the counts.
        let short = evaluate_deferred(&d, None, &dense[..2]).unwrap_err().to_string();
        assert!(short.contains("3 aux variables") && short.contains("the partition 1 and 2"), "{short}");
        let bad = SplitScalars { len: 3, ones: vec![7], rest_idx: vec![], rest: vec![] };
        let e = evaluate_deferred(&d, Some(&bad), &[]).unwrap_err().to_string();
        assert!(e.contains("index outside"), "{e}");
        let not_field = vec![[0xff; 32]; 3];
        let e = evaluate_deferred(&d, None, &not_field).unwrap_err().to_string();
        assert!(e.contains("not a field element"), "{e}");
    }
}

//! The CPU backend: the reference implementation of every kernel.

mod msm;
mod ntt;

use std::time::Instant;

use cuzk_srs::ProvingKey;
use rayon::prelude::*;

pub use msm::{msm_g1, msm_g1_scalars, msm_g1_split, msm_g2, msm_g2_scalars, msm_g2_split};
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
pub(crate) fn host_evals(abc: Evals, l: &MsmScalars) -> Result<Evals, GpuError> {
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

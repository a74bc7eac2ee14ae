//! The CPU backend: the reference implementation of every kernel.

mod msm;
mod ntt;

use std::time::Instant;

use cuzk_srs::ProvingKey;
use rayon::prelude::*;

pub use msm::{msm_g1, msm_g1_scalars, msm_g1_split, msm_g2, msm_g2_scalars, msm_g2_split};
pub use ntt::{compute_h, ntt};

use crate::{Backend, GpuError, HostPartition, MsmResults, UploadedPartition};

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
        let p = uploaded.host;
        check_shapes(&p, srs)?;
        let mut timings = Vec::with_capacity(6);
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
    let counts = [a.len(), b.len(), c.len(), p.l_scalars.len(), p.a_scalars.len(), p.b_scalars.len()];
    check_counts(counts, p.domain_log2, srs)?;
    check_split([&p.l_scalars, &p.a_scalars, &p.b_scalars])
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

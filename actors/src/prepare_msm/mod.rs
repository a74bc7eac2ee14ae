//! PrepareMsm: lines the assignment up with the MSMs' points (compacted by density)
//! and hands each MSM its scalars, either all in canonical form or, for a witness
//! that is mostly bits, split by value (`cuzk_gpu::SplitScalars`); and (on the CPU
//! backend, by default) runs the B_G2 MSM on the CPU so ProveGpu never waits for it.

mod config;

use std::time::Instant;

use blstrs::Scalar;
pub use config::{BG2Placement, PrepareMsmConfig};
use cuzk_gpu::{cpu::msm_g2_scalars, HostPartition, MsmScalars, ScalarBytes, SplitScalars};
use cuzk_synth::Density;
use rayon::prelude::*;

use crate::{
    budget::{Ledger, Reservation},
    ground::{Assignment, PreparedPartition, StageError, StageName},
    runtime::{Stage, WorkItem},
};

/// The PrepareMsm stage.
pub struct PrepareMsm {
    pub b_g2_on_cpu: bool,
    pub bit_split: bool,
    /// The host budget, charged for a, b, c that synthesis left to the backend
    /// but that must be evaluated here (`evaluate_if_not_for_the_device`).
    pub ledger: Option<std::sync::Arc<Ledger>>,
}

impl PrepareMsm {
    /// a, b, c that synthesis left to the backend (`Evals::Deferred`) but that no
    /// device can evaluate (a witness that is not mostly bits: its MSM scalars do
    /// not split, and the device rebuilds the witness from L's split lists) are
    /// evaluated here, on this stage's worker, rather than later under the device's
    /// lock. Their memory is charged to the partition's reservation, which left
    /// them out.
    fn evaluate_if_not_for_the_device(
        &self,
        host: &mut HostPartition,
        reservation: Option<&mut Reservation>,
    ) -> Result<Option<std::time::Duration>, StageError> {
        if host.abc.deferred().is_none() || host.device_abc_possible() {
            return Ok(None);
        }
        let t = Instant::now();
        if let (Some(r), Some(ledger)) = (reservation, &self.ledger) {
            r.merge(ledger.charge(3 * 32 * host.abc.len() as u64));
        }
        host.abc =
            cuzk_gpu::cpu::host_evals(std::mem::take(&mut host.abc), &host.l_scalars).map_err(StageError::failed)?;
        Ok(Some(t.elapsed()))
    }
}

fn canonical<'a>(v: impl IntoParallelIterator<Item = &'a Scalar>) -> Vec<ScalarBytes> {
    v.into_par_iter().map(|s| s.to_bytes_le()).collect()
}

/// A run of consecutive scalars for the split's parallel scan: the index of its
/// first one and its values.
type Part<'a> = (usize, Box<dyn Iterator<Item = &'a Scalar> + Send + 'a>);

/// Scalars per part of the split's scan (a 32GiB partition's L vector makes 125).
const PART: usize = 1 << 20;

/// `v` in parts, its first scalar at index `first`.
fn slice_parts(v: &[Scalar], first: usize) -> Vec<Part<'_>> {
    v.chunks(PART).enumerate().map(|(i, c)| (first + i * PART, Box::new(c.iter()) as _)).collect()
}

/// The values of `v` that `d` selects, in parts, the first at index `first`.
fn density_parts<'a>(d: &'a Density, v: &'a [Scalar], first: usize) -> Vec<Part<'a>> {
    d.select_parts(v, PART / 64).into_iter().map(|(before, it)| (first + before, Box::new(it) as _)).collect()
}

/// One MSM's scalars: split when asked and it pays (the scan gives up early on
/// random values), else every value converted, in parallel. `parts` yields the
/// `len` scalars in point order, in parts scanned in parallel; `dense` collects the
/// same values for the dense path.
fn scalars<'a>(
    split: bool,
    domain: usize,
    len: usize,
    parts: impl FnOnce() -> Vec<Part<'a>>,
    dense: impl FnOnce() -> Vec<ScalarBytes>,
) -> MsmScalars {
    if split {
        if let Some(s) = SplitScalars::from_parts(parts(), len, domain) {
            return MsmScalars::Split(s);
        }
    }
    MsmScalars::Dense(dense())
}

/// Splits an assignment into the backend's inputs. The scalar vectors line up with
/// the parameter vectors: `l` ↔ every aux; `a` ↔ every input, then aux in A;
/// `b` ↔ inputs in B, then aux in B.
pub fn prepare(asg: Assignment, bit_split: bool) -> (HostPartition, Vec<Scalar>) {
    let shape = asg.shape();
    let domain_log2 = shape.domain_log2();
    let domain = 1usize << domain_log2;
    let Assignment { abc, input, aux, a_aux_density, b_input_density, b_aux_density } = asg;
    let (input, aux) = (&input, &aux);
    let (l_scalars, (a_scalars, b_scalars)) = rayon::join(
        || scalars(bit_split, domain, aux.len(), || slice_parts(aux, 0), || canonical(aux)),
        || {
            rayon::join(
                || {
                    scalars(
                        bit_split,
                        domain,
                        shape.a_query,
                        || {
                            let mut p: Vec<Part> = vec![(0, Box::new(input.iter()))];
                            p.extend(density_parts(&a_aux_density, aux, input.len()));
                            p
                        },
                        || {
                            let mut v = canonical(input);
                            v.extend(canonical(&a_aux_density.compact(aux)));
                            v
                        },
                    )
                },
                || {
                    scalars(
                        bit_split,
                        domain,
                        shape.b_query,
                        || {
                            let mut p: Vec<Part> = vec![(0, Box::new(b_input_density.select(input)))];
                            p.extend(density_parts(&b_aux_density, aux, b_input_density.count()));
                            p
                        },
                        || {
                            let mut v = canonical(&b_input_density.compact(input));
                            v.extend(canonical(&b_aux_density.compact(aux)));
                            v
                        },
                    )
                },
            )
        },
    );
    let public_inputs = input[1..].to_vec();
    (HostPartition { abc, domain_log2, l_scalars, a_scalars, b_scalars }, public_inputs)
}

impl Stage for PrepareMsm {
    type In = Assignment;
    type Out = PreparedPartition;
    const NAME: StageName = StageName::PrepareMsm;

    fn process(&self, item: WorkItem<Assignment>) -> Result<Vec<WorkItem<PreparedPartition>>, StageError> {
        let (asg, mut base) = item.take();
        let t = Instant::now();
        let (mut host, public_inputs) = prepare(asg, self.bit_split);
        let split = [&host.l_scalars, &host.a_scalars, &host.b_scalars].iter().any(|s| s.as_split().is_some());
        base.trace.add_ops(&[(if split { "bit_split" } else { "to_canonical" }, t.elapsed())]);
        if let Some(took) = self.evaluate_if_not_for_the_device(&mut host, base.reservation.as_mut())? {
            base.trace.add_ops(&[("abc_host", took)]);
        }
        let b_g2 = if self.b_g2_on_cpu {
            let srs = base.job.srs();
            if srs.b_g2.len() != host.b_scalars.len() {
                return Err(StageError::msg(format!(
                    "B_G2 points: parameters have {}, the partition has {} B scalars",
                    srs.b_g2.len(),
                    host.b_scalars.len()
                )));
            }
            let t = Instant::now();
            let r = msm_g2_scalars(&srs.b_g2, &host.b_scalars);
            base.trace.add_ops(&[("msm_b_g2_cpu", t.elapsed())]);
            Some(r)
        } else {
            None
        };
        Ok(vec![base.with(PreparedPartition { host, b_g2, public_inputs })])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cuzk_synth::{synthesize, synthesize_deferred, synthesize_recording, SyntheticCircuit, SyntheticSpec};

    use super::*;

    /// A synthetic circuit's witness is random: its scalars do not split, so no
    /// device could rebuild it, and PrepareMsm evaluates the deferred a, b, c itself
    /// (the plain synthesis's values), charging them to the partition's reservation.
    #[test]
    fn deferred_a_b_c_that_no_device_can_evaluate_are_evaluated_here_and_charged() {
        let spec = SyntheticSpec { constraints: 3000, public_inputs: 3, a_density: 1.0, b_density: 0.5 };
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(spec, 1).unwrap()).unwrap();
        let pre = Arc::new(pre.expect("recorded"));
        let circuit = SyntheticCircuit::new(spec, 2).unwrap();
        let plain = synthesize(circuit.clone()).unwrap();
        let deferred = synthesize_deferred(|cs| bellperson::Circuit::synthesize(circuit, cs), &pre).unwrap();
        assert!(deferred.abc.deferred().is_some());
        let (mut host, _) = prepare(deferred, true);
        assert!(!host.device_abc_possible(), "random scalars do not split");
        let ledger = Ledger::new("test", 1 << 30);
        let mut r = ledger.try_reserve(1000).unwrap();
        let stage = PrepareMsm { b_g2_on_cpu: false, bit_split: true, ledger: Some(ledger.clone()) };
        let took = stage.evaluate_if_not_for_the_device(&mut host, Some(&mut r)).unwrap();
        assert!(took.is_some());
        assert_eq!(host.abc, plain.abc, "the host's a, b, c are the plain synthesis's");
        assert_eq!(r.bytes(), 1000 + 3 * 32 * plain.abc.len() as u64, "charged to the reservation");
        // Already on the host: nothing more to do.
        assert_eq!(stage.evaluate_if_not_for_the_device(&mut host, Some(&mut r)).unwrap(), None);
    }
}

//! Synthesize: runs a partition's circuit into an [`Assignment`] (a/b/c evaluations,
//! input/aux assignments, A/B densities). Reserves the partition's whole host-memory
//! estimate first; the reservation then travels with the partition (less a, b, c
//! when they were written into a lent pinned buffer).

mod config;
mod urgent;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

pub use config::SynthesizeConfig;
use cuzk_srs::ProvingKey;
use cuzk_synth::{EvalAlloc, Evals, RecordHint, SynthMode};
pub use urgent::UrgentThread;

use crate::{
    ground::{Assignment, PartitionCircuit, Plan, RecordingStore, StageError, StageName},
    runtime::{Stage, WorkItem},
};

/// The Synthesize stage.
#[derive(Clone)]
pub struct Synthesize {
    /// Recorded circuit structures, shared by the stage's workers
    /// (`services::recordings`).
    pub recordings: Arc<dyn RecordingStore>,
    /// `synthesize.nice`, applied to each worker thread on its first partition.
    pub nice: i32,
    /// The backend's lender of a/b/c buffers (CUDA: pinned host memory), used by
    /// pre-compiled synthesis so that StagePcie has nothing of a, b, c to copy.
    pub evals: Option<Arc<dyn EvalAlloc>>,
    /// The backend computes H in host memory ([`cuzk_gpu::Backend::ntt_on_host`]):
    /// reserve its buffers with the partition.
    pub ntt_on_host: bool,
    /// Where partitions of jobs at or above `urgent_at` are synthesized: a thread
    /// that is never reniced (`urgent.rs`).
    pub urgent: Option<Arc<UrgentThread>>,
    /// `[ingest.priority] express`.
    pub urgent_at: i32,
    /// `synthesize.native`: pre-compiled synthesis uses a circuit's native witness
    /// generator where it has one.
    pub native: bool,
    /// The backend evaluates a, b, c itself from the recording
    /// ([`cuzk_gpu::Backend::abc_on_device`]): pre-compiled synthesis computes the
    /// witness alone.
    pub abc_on_device: bool,
    /// The host budget, charged when a partition admitted with the witness-only
    /// reservation must compute a, b, c on the host after all (its recording was
    /// dropped in between).
    pub ledger: Option<Arc<crate::budget::Ledger>>,
}

/// Lowers the calling thread's priority to `nice` once per thread (Linux: the nice
/// value is per thread). Only ever lowers it: raising needs privileges.
fn lower_priority(nice: i32) {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if nice <= 0 || DONE.with(|d| d.replace(true)) {
        return;
    }
    crate::runtime::lower_thread_priority(nice);
}

/// Abandons a claimed recording if dropped while panicking (the stage runtime
/// catches the panic and fails the partition; the next partition records).
struct AbandonOnPanic<'a>(&'a dyn RecordingStore, &'a Arc<ProvingKey>);

impl Drop for AbandonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abandon(self.1);
        }
    }
}

/// Host bytes one partition proved against `srs` holds at its peak, from the
/// parameter sizes alone (known before synthesis): a/b/c padded to the domain, the
/// assignment, the compacted MSM scalars and, when the backend computes H on the host
/// (`ntt_on_host`), the H coefficients and NTT twiddles. At 2^27 (a 32GiB PoRep
/// partition): 37.2 GB with them, 26.5 GB without.
pub fn partition_bytes(srs: &ProvingKey, ntt_on_host: bool) -> u64 {
    let scalars = srs.l.len() + srs.a.len() + srs.b_g1.len();
    bytes(srs.domain_size(), srs.num_inputs(), srs.l.len(), scalars, ntt_on_host)
}

/// [`partition_bytes`] for parameters of a circuit of `shape` (their vector lengths
/// follow from it): sizing a host before any parameter exists.
pub fn partition_bytes_for_shape(shape: &cuzk_core::CircuitShape, ntt_on_host: bool) -> u64 {
    let m = 1usize << shape.domain_log2();
    bytes(m, shape.inputs, shape.aux, shape.aux + shape.a_query + shape.b_query, ntt_on_host)
}

/// What a partition's reservation of `reserved` bytes still needs once synthesis has
/// written a, b, c into a lent buffer (the buffer is in the backend's pinned pool,
/// which the host budget already leaves out: `backend.pinned_memory`) or left them
/// to the backend (deferred: never on the host), so their share (padded to the
/// domain of `m` elements, as [`partition_bytes`] counts them) goes back. At 2^27:
/// 12.9 GB of 26.5 GB.
fn held_when_lent(reserved: u64, m: usize) -> u64 {
    reserved.saturating_sub(3 * 32 * m as u64)
}

fn bytes(m: usize, inputs: usize, aux: usize, scalars: usize, ntt_on_host: bool) -> u64 {
    let (m, inputs, aux, scalars) = (m as u64, inputs as u64, aux as u64, scalars as u64);
    // a, b, c padded to m; on the host path also H (m), its byte form (m), twiddles (m/2).
    let ntt = 3 * m + if ntt_on_host { 2 * m + m / 2 } else { 0 };
    32 * (ntt + inputs + aux + scalars) + 3 * (inputs + aux) / 8 + (64 << 10)
}

impl Stage for Synthesize {
    type In = PartitionCircuit;
    type Out = Assignment;
    const NAME: StageName = StageName::Synthesize;

    fn reservation_bytes(&self, item: &WorkItem<PartitionCircuit>) -> Result<u64, StageError> {
        let srs = item.job.srs();
        let full = partition_bytes(srs, self.ntt_on_host);
        // A recorded circuit whose a, b, c the backend evaluates never holds them.
        Ok(if self.defers(&item.payload, srs) { held_when_lent(full, srs.domain_size()) } else { full })
    }

    fn process(&self, item: WorkItem<PartitionCircuit>) -> Result<Vec<WorkItem<Assignment>>, StageError> {
        if let (true, Some(urgent)) = (item.job.priority >= self.urgent_at, &self.urgent) {
            let this = self.clone();
            return urgent.run(move || this.synthesize(item));
        }
        lower_priority(self.nice);
        self.synthesize(item)
    }
}

impl Synthesize {
    /// Whether `circuit`'s a, b, c will be left to the backend: it evaluates them,
    /// and the circuit's recording is there.
    fn defers(&self, circuit: &PartitionCircuit, srs: &Arc<ProvingKey>) -> bool {
        self.abc_on_device && circuit.0.precompile() && self.recordings.is_ready(srs)
    }

    fn synthesize(&self, item: WorkItem<PartitionCircuit>) -> Result<Vec<WorkItem<Assignment>>, StageError> {
        let (PartitionCircuit(circuit), mut base) = item.take();
        base.job.mark_started();
        let key = base.job.srs().clone();
        let t = Instant::now();
        let plan = if circuit.precompile() { self.recordings.plan(&key) } else { Plan::Plain };
        // Waiting for the recording to be read from disk or made beside the
        // parameters (seconds at 32GiB): named in the timings, not hidden in synthesis.
        let waited = t.elapsed();
        if waited >= Duration::from_millis(1) {
            base.trace.add_ops(&[("recording_wait", waited)]);
        }
        // Admitted without room for a, b, c (`reservation_bytes`) but computing
        // them here after all: the rest is charged now (the memory is about to be
        // allocated whatever the budget says; waiting could deadlock).
        let full = partition_bytes(&key, self.ntt_on_host);
        let deferred = self.abc_on_device && matches!(plan, Plan::Use(_));
        if let (false, Some(r), Some(ledger)) = (deferred, base.reservation.as_mut(), &self.ledger) {
            if r.bytes() < full {
                r.merge(ledger.charge(full - r.bytes()));
            }
        }
        // A recording that panics must not leave its slot claimed forever.
        let _guard = matches!(plan, Plan::Record).then(|| AbandonOnPanic(self.recordings.as_ref(), &key));
        let t = Instant::now();
        let (op, result) = match &plan {
            Plan::Plain => ("synth_plain", circuit.synthesize_with(SynthMode::Plain)),
            Plan::Record => {
                // The parameters say what the recording will hold: reserved once.
                let hint =
                    RecordHint { inputs: key.num_inputs(), aux: key.l.len(), max_constraints: key.domain_size() };
                ("synth_record", circuit.synthesize_with(SynthMode::RecordSized(hint)))
            }
            Plan::Use(pre) => {
                let alloc = self.evals.as_deref();
                let mode = match (self.native, alloc) {
                    _ if self.abc_on_device => SynthMode::Deferred { pre, native: self.native },
                    (false, alloc) => SynthMode::PrecompiledGeneric(pre, alloc),
                    (true, Some(alloc)) => SynthMode::PrecompiledInto(pre, alloc),
                    (true, None) => SynthMode::Precompiled(pre),
                };
                // Named apart in the timeline: the native witness is several times cheaper.
                let op = if self.native && circuit.has_native() { "synth_native" } else { "synth_precompiled" };
                (op, circuit.synthesize_with(mode))
            }
        };
        let assignment = match (plan, result) {
            (Plan::Record, Ok((a, pre))) => {
                // Refused (and not saved) when its sizes do not match the parameters.
                self.recordings.recorded(&key, pre)?;
                a
            }
            (Plan::Record, Err(e)) => {
                self.recordings.abandon(&key);
                return Err(StageError::failed(e));
            }
            (_, r) => r.map_err(StageError::failed)?.0,
        };
        base.trace.add_ops(&[(op, t.elapsed())]);
        // Fail here, with the sizes, rather than deep inside an MSM.
        base.job.srs().check_shape(&assignment.shape()).map_err(StageError::failed)?;
        // Lent a, b, c are in the pinned pool; deferred ones are never on the host.
        if let (Evals::Lent(_) | Evals::Deferred(_), Some(r)) = (&assignment.abc, base.reservation.as_mut()) {
            // (A deferred partition's reservation left them out from the start.)
            r.shrink_to(held_when_lent(full, base.job.srs().domain_size()));
        }
        Ok(vec![base.with(assignment)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuzk_synth::{SyntheticCircuit, SyntheticSpec};
    use rand::SeedableRng;

    #[test]
    fn the_host_ntt_buffers_are_reserved_only_when_the_backend_computes_h_on_the_host() {
        let spec = SyntheticSpec { constraints: 1000, public_inputs: 2, a_density: 1.0, b_density: 0.5 };
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let srs = cuzk_srs::generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap();
        let m = srs.domain_size() as u64;
        assert_eq!(partition_bytes(&srs, true) - partition_bytes(&srs, false), 32 * (2 * m + m / 2));
        // a, b, c padded to the domain are there either way.
        assert!(partition_bytes(&srs, false) > 3 * 32 * m);
        // Sizing from the shape alone gives the same figure.
        let shape = cuzk_core::CircuitShape {
            constraints: spec.constraints + spec.public_inputs,
            inputs: srs.num_inputs(),
            aux: srs.l.len(),
            a_query: srs.a.len(),
            b_query: srs.b_g1.len(),
        };
        assert_eq!(shape.domain_log2(), srs.domain_size().trailing_zeros());
        for host in [true, false] {
            assert_eq!(partition_bytes_for_shape(&shape, host), partition_bytes(&srs, host));
        }
        // Lent a, b, c give back exactly their padded share, and never more than held.
        let all = partition_bytes(&srs, false);
        assert_eq!(held_when_lent(all, srs.domain_size()), all - 3 * 32 * m);
        assert_eq!(held_when_lent(3 * 32 * m - 1, srs.domain_size()), 0);
    }

    #[test]
    fn a_32gib_partition_lent_keeps_about_half_its_reservation() {
        // The figures the docs quote (docs/architecture.md, "Budgets").
        let shape = cuzk_core::CircuitShape {
            constraints: 130_278_869,
            inputs: 328,
            aux: 130_169_893,
            a_query: 129_753_620,
            b_query: 33_112_282,
        };
        let all = partition_bytes_for_shape(&shape, false);
        let lent = held_when_lent(all, 1 << shape.domain_log2());
        assert_eq!(all / 100_000_000, 264, "{all}");
        assert_eq!(lent / 100_000_000, 135, "{lent}");
    }
}

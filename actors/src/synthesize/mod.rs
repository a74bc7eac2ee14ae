//! Synthesize: runs a partition's circuit into an [`Assignment`] (a/b/c evaluations,
//! input/aux assignments, A/B densities). Reserves the partition's whole host-memory
//! estimate first; the reservation then travels with the partition.

mod config;

use std::{sync::Arc, time::Instant};

pub use config::SynthesizeConfig;
use cuzk_srs::ProvingKey;
use cuzk_synth::{EvalAlloc, SynthMode};

use crate::{
    ground::{Assignment, PartitionCircuit, Plan, RecordingStore, StageError, StageName},
    runtime::{Stage, WorkItem},
};

/// The Synthesize stage.
pub struct Synthesize {
    /// Recorded circuit structures, shared by the stage's workers
    /// (`services::recordings`).
    pub recordings: Arc<dyn RecordingStore>,
    /// `synthesize.nice`, applied to each worker thread on its first partition.
    pub nice: i32,
    /// The backend's lender of a/b/c buffers (CUDA: pinned host memory), used by
    /// pre-compiled synthesis so that StagePcie has nothing of a, b, c to copy.
    pub evals: Option<Arc<dyn EvalAlloc>>,
}

/// Lowers the calling thread's priority to `nice` once per thread (Linux: the nice
/// value is per thread). Only ever lowers it: raising needs privileges.
fn lower_priority(nice: i32) {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if nice <= 0 || DONE.with(|d| d.replace(true)) {
        return;
    }
    // SAFETY: plain syscalls on the calling thread (who = 0), no pointers.
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    unsafe {
        let current = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice > current {
            libc::setpriority(libc::PRIO_PROCESS, 0, nice);
        }
    }
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
/// assignment, the compacted MSM scalars, the H coefficients and NTT twiddles.
pub fn partition_bytes(srs: &ProvingKey) -> u64 {
    let m = srs.domain_size() as u64;
    let inputs = srs.num_inputs() as u64;
    let aux = srs.l.len() as u64;
    let scalars = srs.l.len() as u64 + srs.a.len() as u64 + srs.b_g1.len() as u64;
    // a, b, c padded to m; H (m) and its byte form (m); twiddles (m/2).
    let ntt = 3 * m + 2 * m + m / 2;
    32 * (ntt + inputs + aux + scalars) + 3 * (inputs + aux) / 8 + (64 << 10)
}

impl Stage for Synthesize {
    type In = PartitionCircuit;
    type Out = Assignment;
    const NAME: StageName = StageName::Synthesize;

    fn reservation_bytes(&self, item: &WorkItem<PartitionCircuit>) -> Result<u64, StageError> {
        Ok(partition_bytes(item.job.srs()))
    }

    fn process(&self, item: WorkItem<PartitionCircuit>) -> Result<Vec<WorkItem<Assignment>>, StageError> {
        lower_priority(self.nice);
        let (PartitionCircuit(circuit), mut base) = item.take();
        let key = base.job.srs().clone();
        let plan = if circuit.precompile() { self.recordings.plan(&key) } else { Plan::Plain };
        // A recording that panics must not leave its slot claimed forever.
        let _guard = matches!(plan, Plan::Record).then(|| AbandonOnPanic(self.recordings.as_ref(), &key));
        let t = Instant::now();
        let (op, result) = match &plan {
            Plan::Plain => ("synth_plain", circuit.synthesize_with(SynthMode::Plain)),
            Plan::Record => ("synth_record", circuit.synthesize_with(SynthMode::Record)),
            Plan::Use(pre) => {
                let mode = match &self.evals {
                    Some(alloc) => SynthMode::PrecompiledInto(pre, alloc.as_ref()),
                    None => SynthMode::Precompiled(pre),
                };
                ("synth_precompiled", circuit.synthesize_with(mode))
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
        Ok(vec![base.with(assignment)])
    }
}

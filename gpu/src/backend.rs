use std::{any::Any, sync::Arc, time::Duration};

use blstrs::{G1Projective, G2Projective};
pub use cuzk_core::Evals;
use cuzk_srs::ProvingKey;

use crate::{GpuError, MsmScalars};

/// One partition's inputs to the accelerator, as PrepareMsm leaves them on the host.
///
/// `abc` holds the constraint evaluations a, b, c (length = constraints, at most
/// `2^domain_log2`; the backend pads with zeros), on the heap or in a buffer the
/// backend lent to synthesis ([`Backend::eval_alloc`]). The MSM scalars are compacted by
/// density so that they line up with the parameter vectors one to one:
/// `l_scalars` ↔ `l`, `a_scalars` ↔ `a`, `b_scalars` ↔ `b_g1` and `b_g2`; each is
/// dense or split by value ([`MsmScalars`]).
#[derive(Clone, Debug, Default)]
pub struct HostPartition {
    pub abc: Evals,
    pub domain_log2: u32,
    pub l_scalars: MsmScalars,
    pub a_scalars: MsmScalars,
    pub b_scalars: MsmScalars,
}

impl HostPartition {
    /// Whether a backend that evaluates a, b, c on a device can do so for this
    /// deferred partition: L, A and B split (the device rebuilds the aux values
    /// from L's lists; the device split needs all three) within a staging buffer's
    /// lists, and the witness within the domain. False when not deferred.
    pub fn device_abc_possible(&self) -> bool {
        let Some(d) = self.abc.deferred() else { return false };
        let [Some(l), Some(a), Some(b)] = [&self.l_scalars, &self.a_scalars, &self.b_scalars].map(|s| s.as_split())
        else {
            return false;
        };
        crate::split::lists_fit(self.domain_log2, [l, a, b]) && d.input.len() + l.len <= 1 << self.domain_log2
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> u64 {
        self.abc.heap_bytes() as u64
            + self.l_scalars.heap_bytes()
            + self.a_scalars.heap_bytes()
            + self.b_scalars.heap_bytes()
    }
}

/// A partition uploaded by a backend to where its kernels read it (on the CPU
/// backend, the host buffers themselves).
#[derive(Debug)]
pub struct UploadedPartition {
    /// The device staging buffer it was uploaded into ahead of `execute`
    /// ([`Backend::stage`]). First field, so that it is dropped first: dropping it
    /// waits for the copies that still read `host` and `pinned`.
    pub(crate) staged: Option<crate::cuda::Lease>,
    pub(crate) backend: &'static str,
    pub(crate) host: HostPartition,
    /// The CUDA backend's pinned copy of a, b, c and the dense scalar vectors
    /// (those are then emptied in `host`).
    pub(crate) pinned: Option<crate::pinned::PinnedPartition>,
    /// Deadline work: it takes the device before any bulk partition waiting for it.
    pub(crate) urgent: bool,
}

impl UploadedPartition {
    /// Marks the partition as deadline work ([`Backend::execute`] then hands it the
    /// device before any waiting bulk partition).
    pub fn set_urgent(&mut self, urgent: bool) {
        self.urgent = urgent;
    }

    /// Whether it is deadline work.
    pub fn is_urgent(&self) -> bool {
        self.urgent
    }

    /// Name of the backend that uploaded it.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// Heap bytes it still holds (what `upload` did not move into pinned memory,
    /// which is bounded apart from the host budget).
    pub fn heap_bytes(&self) -> u64 {
        self.host.heap_bytes()
    }

    /// Whether it sits in a device staging buffer ([`Backend::stage`]).
    pub fn is_staged(&self) -> bool {
        self.staged.is_some()
    }
}

/// What [`Backend::stage`] did with a partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Staged {
    /// Whether the partition is in a device staging buffer now.
    pub staged: bool,
    /// Time spent waiting for a staging buffer to come free (every one held a
    /// partition not yet executed: backpressure from execution, not transfer work).
    /// Zero without `wait`. Counted whether or not a buffer came free in the end.
    pub waited: Duration,
}

/// Time spent in each operation of [`Backend::execute`], in order.
pub type OpTimings = Vec<(&'static str, Duration)>;

/// The MSM results one partition needs for assembly.
#[derive(Clone, Debug)]
pub struct MsmResults {
    /// sum h_i * H_i
    pub h: G1Projective,
    /// sum aux_i * L_i
    pub l: G1Projective,
    /// sum over A query
    pub a: G1Projective,
    /// sum over B query in G1
    pub b_g1: G1Projective,
    /// sum over B query in G2, when the backend was asked for it
    pub b_g2: Option<G2Projective>,
    /// Whether the L, A and B MSMs ran on split scalars (sums of the ones' points
    /// plus MSMs of the rest) rather than on every scalar.
    pub split: bool,
    pub timings: OpTimings,
}

/// Charges host memory a backend allocates beyond a partition's reservation to the
/// host budget: called with the bytes, it returns a guard that holds them until
/// dropped (see [`Backend::set_host_charge`]).
pub type HostCharge = Arc<dyn Fn(u64) -> Box<dyn Any + Send> + Send + Sync>;

/// The interface the StagePcie and ProveGpu stages drive; implemented by the CPU
/// backend here and by the CUDA backend.
pub trait Backend: Send + Sync + 'static {
    /// Short name for logs and metrics ("cpu", "cuda").
    fn name(&self) -> &'static str;

    /// Moves a partition's host buffers to where [`Backend::execute`] reads them.
    ///
    /// # Errors
    /// Backend-specific (for CUDA: allocation or copy failures).
    fn upload(&self, host: HostPartition) -> Result<UploadedPartition, GpuError>;

    /// Starts the partition's transfer to a device ahead of [`Backend::execute`] (the
    /// CUDA backend: into a staging buffer in device memory, on that buffer's copy
    /// stream, so that it crosses PCIe while the device computes the partition
    /// before it). With `wait`, waits while every staging buffer holds a partition
    /// not yet executed: the double buffer's backpressure. Urgent work passes
    /// `false` and never waits behind bulk partitions.
    ///
    /// Returns whether it staged the partition and how long it waited for a free
    /// buffer ([`Staged`]). Never fails it: a partition that could not be staged (no
    /// buffer free, no room for one, a failed copy) is uploaded by `execute` itself,
    /// as without staging. The default stages nothing and never waits.
    fn stage(&self, _uploaded: &mut UploadedPartition, _wait: bool) -> Staged {
        Staged::default()
    }

    /// Computes H by NTT and runs the MSMs against `srs`; B_G2 only if `with_b_g2`.
    ///
    /// # Errors
    /// [`GpuError::Shape`] when the partition does not fit `srs`; backend-specific
    /// failures otherwise.
    fn execute(&self, uploaded: UploadedPartition, srs: &ProvingKey, with_b_g2: bool) -> Result<MsmResults, GpuError>;

    /// Makes `srs` ready for [`Backend::execute`] ahead of its first partition (CUDA:
    /// uploads it to every idle device where it fits), so that the upload overlaps
    /// synthesis instead of delaying the first proof. Blocks while it works; callers
    /// run it on a thread of their own. The default does nothing.
    fn prefetch(&self, _srs: &ProvingKey) {}

    /// Lends synthesis buffers for a, b, c where this backend reads them from (the
    /// CUDA backend: its pinned host pool), so that the upload copies nothing of
    /// them. `None`: synthesis keeps them on the heap.
    fn eval_alloc(&self) -> Option<std::sync::Arc<dyn cuzk_core::EvalAlloc>> {
        None
    }

    /// Whether this backend evaluates a, b, c itself from a partition's recorded
    /// matrices ([`Evals::Deferred`]), so that pre-compiled synthesis computes the
    /// witness alone. The CUDA backend does (on the device, `abc_on_device`); a
    /// deferred partition reaching the CPU backend is evaluated on the host.
    fn abc_on_device(&self) -> bool {
        false
    }

    /// Whether [`Backend::execute`] computes H (the NTTs) in host memory. Only then
    /// does a partition's host reservation include H, its byte form and the NTT
    /// twiddles (2.5 × domain × 32 bytes: 10.7 GB at 2^27). The CUDA backend keeps
    /// them on the device.
    fn ntt_on_host(&self) -> bool {
        true
    }

    /// How to charge host memory the backend allocates beyond a partition's
    /// reservation to the host budget (the CUDA backend: a partition that fails over
    /// to the CPU, which needs the host NTT buffers that [`Backend::ntt_on_host`] left
    /// out). The default ignores it: the CPU backend allocates nothing beyond.
    fn set_host_charge(&self, _charge: HostCharge) {}

    /// The pinned host pool, for backends that have one.
    fn pinned_stats(&self) -> Option<crate::pinned::PinnedStats> {
        None
    }

    /// Per-device VRAM budget, error counters and health, for backends with devices
    /// ([`crate::no_device_left`] tells from them whether any device is left).
    fn device_stats(&self) -> Vec<DeviceStats> {
        Vec::new()
    }
}

/// One device's VRAM budget, error counters and health (CUDA backend).
#[derive(Clone, Debug, Default)]
pub struct DeviceStats {
    /// Index among usable devices.
    pub device: usize,
    /// Device memory the backend may reserve: free memory when it started, minus
    /// `vram_margin` (left to MSM temporaries and other processes).
    pub vram_budget: u64,
    /// Reserved now: the workspace, the staging buffers and resident parameter sets.
    pub vram_reserved: u64,
    /// Parameter sets resident on the device.
    pub resident_sets: usize,
    /// Failed CUDA operations (each attempt counts).
    pub cuda_errors: u64,
    /// Of those, out-of-memory failures.
    pub oom_errors: u64,
    /// Partitions retried after an out-of-memory failure (cached memory freed first).
    pub oom_retries: u64,
    /// Retries that succeeded.
    pub oom_recovered: u64,
    /// Whether the device still takes work (retired after a sticky CUDA error).
    pub health: crate::DeviceHealth,
    /// The error that retired it.
    pub retired_reason: Option<String>,
    /// Partitions that failed here with a sticky error and ran again elsewhere
    /// (another device, or the CPU when none was left).
    pub partitions_moved: u64,
    /// Calls that held the device (a partition, a parameter upload), and how long
    /// they held it in all: over a stream, held / wall is how busy each device was
    /// kept (a deadline partition in the device's lane is not counted).
    pub calls: u64,
    pub held: std::time::Duration,
    /// Deadline partitions run beside the bulk work here, and the bulk work's
    /// stops for them (`gate.rs`).
    pub deadline: crate::gate::GateStats,
}

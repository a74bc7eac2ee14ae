//! The CUDA backend: NTT and MSMs on the GPU through `cuda/cuzk.cu` (sppark).
//!
//! Built only when nvcc was found at build time (`cfg(cuzk_cuda)`); otherwise the
//! same API exists and [`CudaBackend::new`] says why there is no GPU backend, so
//! callers compile the same either way.
//!
//! Per device: one workspace (the gathered rest points of split MSMs and the bit
//! sums' partial sums, at the largest domain seen), up to `device_buffers` staging
//! buffers (one partition's a, b, c, bit-split lists and rest scalars each, with a
//! copy stream: `staging.rs`), and the parameter points of recently used parameter
//! sets, kept resident when they fit in
//! the device's VRAM budget (its free memory at start minus `vram_margin`) and in
//! what is free now, least recently used sets evicted first; otherwise streamed from
//! host memory for every MSM. A device runs one partition at a time; with several
//! devices, partitions go to whichever healthy one is free. An out-of-memory failure
//! frees the device's cached memory and retries the partition once with streamed
//! parameters. A sticky error (the device's context is unusable) retires the device
//! for the rest of the process and runs the partition again on another device, or on
//! the CPU when none is left (`health.rs`). A device call that does not return
//! within `device_timeout` retires its device the same way, and the partition stuck
//! in it is given up (`watchdog.rs`).
//!
//! The backend also owns the pool of pinned host buffers (`pinned.rs`) that `upload`
//! copies partitions into and that synthesis borrows a/b/c buffers from; at start it
//! warms every device up on a background thread, and `prefetch` makes a newly loaded
//! parameter set resident on each idle device where it fits without evicting anything.
//!
//! Its files, by role (the CUDA ones only with `cfg(cuzk_cuda)`):
//! - `mod.rs`: what callers configure and read ([`CudaOptions`], [`DeviceInfo`]) and
//!   [`CudaBackend`]'s fields, which the files below extend;
//! - `stub.rs`: the stand-in of a build without nvcc;
//! - `backend.rs`: the [`crate::Backend`] implementation (upload, stage, execute,
//!   prefetch, device statistics);
//! - `discovery.rs`: finding the devices, their VRAM budgets, the start-up warm-up;
//! - `device.rs`: one device's state (workspace, resident parameter sets, counters)
//!   and making parameters resident within its budget;
//! - `execute.rs`: one attempt at a partition on a device (its arrays as the C side
//!   takes them, buffers, eviction, the kernels' timings), and a deadline
//!   partition's run through a busy device's lane (`gate.rs`);
//! - `recovery.rs`: what follows a failure (the out-of-memory retry, retiring a
//!   device after a sticky error, the CPU when no device is left).
//!
//! The sizes it reserves are in [`crate::sizing`].

/// What the backend found on one device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Index among usable devices (what `devices` in config refers to).
    pub index: usize,
    pub cuda_id: i32,
    pub name: String,
    pub sm_count: i32,
    pub compute_capability: (i32, i32),
    pub total_mem: u64,
    pub free_mem: u64,
}

/// Options of the CUDA backend.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Device indices to use; empty = all.
    pub devices: Vec<usize>,
    /// Keep parameter points on the device when they fit.
    pub srs_resident: bool,
    /// Device memory left free for MSM temporaries and other processes.
    pub vram_margin: u64,
    /// Bound of the pool of pinned host buffers partitions are uploaded from; 0 =
    /// upload from pageable memory.
    pub pinned_memory: u64,
    /// Staging buffers per device (at least 1): 2 uploads the next partition while
    /// one computes, when the VRAM budget has room for the second.
    pub device_buffers: usize,
    /// How long one device call (a partition's execution, a parameter upload) may
    /// take before the device is taken for hung and retired (`watchdog.rs`);
    /// `None` = never.
    pub device_timeout: Option<std::time::Duration>,
    /// Run a deadline partition that finds every device busy through a busy
    /// device's lane, between the bulk partition's kernels (`gate.rs`), rather than
    /// after it.
    pub deadline_lane: bool,
    /// Evaluate a, b, c on the device from the recorded matrices when synthesis
    /// leaves them ([`crate::Backend::abc_on_device`]).
    pub abc_on_device: bool,
    /// H's MSM at windows of this many bits (10..=26) where the device has room
    /// for its larger buckets and temporaries beside the parameters
    /// ([`crate::sizing::msm_h_window_extra_bytes`]); 0 = sppark's width. 20 by
    /// default: a 32GiB stream 5.6% faster on an H100 (docs/gpu.md).
    pub msm_h_window_bits: u32,
    /// The fewest H points `msm_h_window_bits` applies to: 2^26 (32GiB and 64GiB
    /// partitions; below, wider windows are slower: +13.5% at 2^25 and 20 bits,
    /// `cuzk bench kernels`). Tests lower it.
    pub msm_h_window_min_points: usize,
}

/// The default device timeout: far above the longest device call (a 64GiB
/// partition holds the device ~4 s, uploading its 63 GiB of parameters from
/// pageable memory some 10 s, and a partition retried after an out-of-memory
/// failure with streamed parameters a few times that).
pub const DEFAULT_DEVICE_TIMEOUT_SECS: u64 = 120;

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            devices: Vec::new(),
            srs_resident: true,
            vram_margin: 4 << 30,
            pinned_memory: 16 << 30,
            device_buffers: 2,
            device_timeout: Some(std::time::Duration::from_secs(DEFAULT_DEVICE_TIMEOUT_SECS)),
            deadline_lane: true,
            abc_on_device: true,
            msm_h_window_bits: 20,
            msm_h_window_min_points: 1 << 26,
        }
    }
}

#[cfg(cuzk_cuda)]
mod backend;
#[cfg(cuzk_cuda)]
mod device;
#[cfg(cuzk_cuda)]
mod discovery;
#[cfg(cuzk_cuda)]
mod execute;
#[cfg(cuzk_cuda)]
mod recovery;
#[cfg(not(cuzk_cuda))]
mod stub;

#[cfg(cuzk_cuda)]
use std::sync::{atomic::AtomicU32, Arc, Mutex};

#[cfg(cuzk_cuda)]
use self::device::{Device, DeviceState};
#[cfg(not(cuzk_cuda))]
pub(crate) use self::stub::Lease;
#[cfg(not(cuzk_cuda))]
pub use self::stub::{CudaBackend, COMPILED};
#[cfg(cuzk_cuda)]
use crate::{ffi::cuda, health::Devices, pinned::PinnedPool, staging::Staging};

/// Whether this build has CUDA code.
#[cfg(cuzk_cuda)]
pub const COMPILED: bool = true;

/// A partition's staging buffer ([`crate::Backend::stage`]).
#[cfg(cuzk_cuda)]
pub(crate) type Lease = crate::staging::Lease<cuda::Stage>;

/// The CUDA backend.
#[cfg(cuzk_cuda)]
pub struct CudaBackend {
    devices: Vec<Device>,
    /// Shared with the device watch's thread, which retires a hung device.
    slots: Arc<Devices<DeviceState>>,
    /// Each device's lane: what a deadline partition runs with beside the bulk
    /// partition holding the device (its workspace and resident parameters; its
    /// staging buffer is the device's urgent one), one at a time (`gate.rs`).
    lanes: Vec<Mutex<DeviceState>>,
    opts: CudaOptions,
    pinned: Arc<PinnedPool>,
    /// Every device's staging buffers (`staging.rs`).
    staging: Arc<Staging<cuda::Stage>>,
    /// Test hook: executions still to fail as out of memory.
    inject_oom: AtomicU32,
    /// Charges the CPU failover's host buffers to the host budget
    /// ([`crate::Backend::set_host_charge`]).
    host_charge: std::sync::OnceLock<crate::HostCharge>,
    /// One partition on the CPU at a time: what a failover adds beyond the
    /// partitions' reservations stays one partition's CPU-path buffers.
    cpu_failover: Mutex<()>,
    /// The start-up warm-up of every device, joined on drop (it must not
    /// outlive the backend's devices).
    warmup: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[cfg(cuzk_cuda)]
impl Drop for CudaBackend {
    fn drop(&mut self) {
        if let Some(h) = self.warmup.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // A warm-up still running after a device was found hung is probably
            // stuck on it: left behind rather than waited for forever.
            let hung = (0..self.devices.len()).any(|i| self.slots.watch().is_hung(i));
            if hung && !h.is_finished() {
                tracing::warn!("the GPU warm-up has not ended (a device is hung); not waiting for it");
            } else {
                let _ = h.join();
            }
        }
    }
}

//! Backend choice: the `[backend]` section and the implementation of the StagePcie
//! and ProveGpu stages it selects (CPU, or CUDA when a GPU is usable), plus the
//! host-memory policy that follows from it.

use std::sync::Arc;

use cuzk_gpu::{
    cpu::CpuBackend,
    cuda::{CudaBackend, CudaOptions},
    Backend,
};
use serde::Deserialize;
use tracing::info;

use crate::{
    budget::BudgetConfig,
    ground::{ByteSize, EngineError},
};

/// Which implementation runs the StagePcie and ProveGpu stages.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The GPU when one is usable, the CPU otherwise (logged at start).
    #[default]
    Auto,
    /// Always the CPU.
    Cpu,
    /// The GPU; the engine refuses to start without one.
    Gpu,
}

/// `[backend]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BackendConfig {
    /// "auto", "cpu" or "gpu".
    pub kind: BackendKind,
    /// GPU indices to use (among usable devices); empty = all.
    pub devices: Vec<usize>,
    /// Keep parameter points resident in device memory when they fit (else they are
    /// streamed from host memory for every MSM).
    pub srs_resident: bool,
    /// Device memory kept free for MSM temporaries and other processes.
    pub vram_margin: ByteSize,
    /// Bound of the pinned host memory StagePcie stages partitions in (uploads from it
    /// run at full PCIe speed); 0 = stage from pageable memory.
    pub pinned_memory: ByteSize,
    /// Staging buffers per GPU that StagePcie uploads partitions into (at least 1):
    /// 2 uploads the next partition while one computes.
    pub device_buffers: usize,
    /// How long one device call may take before its device is taken for hung:
    /// the device is retired (later partitions run on another device or the CPU)
    /// and the partition stuck in the call fails. 0 = never.
    pub device_timeout_secs: u64,
    /// A deadline partition (WinningPoSt, WindowPoSt) that finds every GPU busy
    /// runs between the kernels of the partition on one (its yield points), with
    /// its own workspace; false: it waits for that partition to end.
    pub deadline_lane: bool,
    /// Pre-compiled partitions (PoRep, WindowPoSt, SnapDeals) leave a, b, c to the
    /// GPU: the host computes the witness alone and each device evaluates a, b, c
    /// from the circuit's recorded A and B matrices, kept resident beside the
    /// parameters (c = a∘b). false: the host computes and uploads a, b, c.
    pub abc_on_device: bool,
    /// H's MSM (the largest: 2^27 points at 32GiB) at windows of this many bits,
    /// 10 to 26, for parameter sets of 2^26 H points or more (32GiB and 64GiB
    /// PoRep), on a device with room for its larger buckets and temporaries beside
    /// the parameters (4.2 GB more at 2^27 and 20 bits, charged to the resident
    /// set; without the room, sppark's width). 0 = sppark's width (18 bits at 2^27).
    /// 20 by default: H 13% and a 32GiB stream 5.6% faster on an H100 (docs/gpu.md).
    pub msm_h_window_bits: u32,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            kind: BackendKind::Auto,
            devices: Vec::new(),
            srs_resident: true,
            vram_margin: ByteSize(4 << 30),
            pinned_memory: ByteSize(16 << 30),
            device_buffers: 2,
            device_timeout_secs: cuzk_gpu::cuda::DEFAULT_DEVICE_TIMEOUT_SECS,
            deadline_lane: true,
            abc_on_device: true,
            msm_h_window_bits: 20,
        }
    }
}

/// The backend in use and how many devices it drives.
pub struct SelectedBackend {
    pub backend: Arc<dyn Backend>,
    pub devices: usize,
    /// A GPU backend (B_G2 placement "auto" keeps B_G2 on it).
    pub on_device: bool,
    /// Host bytes the backend pins outside the host budget's ledger (its pinned
    /// host pool's bound); an "auto" host budget leaves them room.
    pub pinned_bytes: u64,
}

impl SelectedBackend {
    /// The host budget: `budget.host_memory`, less what the backend pins when it is
    /// "auto" (a configured size is taken as it is).
    ///
    /// # Errors
    /// When the machine's memory cannot be read for "auto".
    pub fn host_budget(&self, budget: &BudgetConfig) -> Result<u64, String> {
        Ok(budget.less_pinned(budget.host_bytes()?, self.pinned_bytes))
    }
}

/// Picks the backend from config: "auto" takes the GPU when one is usable and says
/// why not otherwise; "gpu" refuses to start without one.
///
/// # Errors
/// [`EngineError::Backend`] when `kind = "gpu"` and no GPU backend is usable.
pub fn select_backend(cfg: &BackendConfig) -> Result<SelectedBackend, EngineError> {
    let cpu = || SelectedBackend { backend: Arc::new(CpuBackend), devices: 1, on_device: false, pinned_bytes: 0 };
    if cfg.kind == BackendKind::Cpu {
        info!(backend = "cpu", reason = "configured", "backend selected");
        return Ok(cpu());
    }
    let opts = CudaOptions {
        devices: cfg.devices.clone(),
        srs_resident: cfg.srs_resident,
        vram_margin: cfg.vram_margin.0,
        pinned_memory: cfg.pinned_memory.0,
        device_buffers: cfg.device_buffers,
        device_timeout: (cfg.device_timeout_secs > 0).then(|| std::time::Duration::from_secs(cfg.device_timeout_secs)),
        deadline_lane: cfg.deadline_lane,
        abc_on_device: cfg.abc_on_device,
        msm_h_window_bits: cfg.msm_h_window_bits,
        ..CudaOptions::default()
    };
    match CudaBackend::new(opts) {
        Ok(b) => {
            let devices = b.devices().len();
            info!(backend = "cuda", devices, "backend selected");
            Ok(SelectedBackend { backend: Arc::new(b), devices, on_device: true, pinned_bytes: cfg.pinned_memory.0 })
        }
        Err(e) if cfg.kind == BackendKind::Auto => {
            info!(backend = "cpu", reason = %e, "backend selected");
            Ok(cpu())
        }
        Err(e) => Err(EngineError::Backend(format!("backend.kind = \"gpu\": {e}"))),
    }
}

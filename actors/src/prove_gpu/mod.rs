//! ProveGpu: the backend's `execute` — H by NTT, then the MSMs. Once it is done the
//! partition's large buffers are gone, so its host reservation is returned here.

mod config;
mod messages;

use std::sync::Arc;

pub use config::ProveGpuConfig;
use cuzk_gpu::{
    cpu::CpuBackend,
    cuda::{CudaBackend, CudaOptions},
    Backend,
};
pub use messages::ProvedPartition;
use tracing::info;

use crate::{
    config::{BackendConfig, BackendKind},
    error::{EngineError, StageError},
    job::StageName,
    runtime::{Stage, WorkItem},
    stage_pcie::StagedWork,
};

/// The ProveGpu stage.
pub struct ProveGpu {
    pub backend: Arc<dyn Backend>,
}

/// The backend in use and how many devices it drives.
pub struct SelectedBackend {
    pub backend: Arc<dyn Backend>,
    pub devices: usize,
}

/// Picks the backend from config: "auto" takes the GPU when one is usable and says
/// why not otherwise; "gpu" refuses to start without one.
///
/// # Errors
/// [`EngineError::Backend`] when `kind = "gpu"` and no GPU backend is usable.
pub fn select_backend(cfg: &BackendConfig) -> Result<SelectedBackend, EngineError> {
    let cpu = || SelectedBackend { backend: Arc::new(CpuBackend), devices: 1 };
    if cfg.kind == BackendKind::Cpu {
        info!(backend = "cpu", reason = "configured", "backend selected");
        return Ok(cpu());
    }
    let opts = CudaOptions {
        devices: cfg.devices.clone(),
        srs_resident: cfg.srs_resident,
        vram_margin: cfg.vram_margin.0,
        pinned_memory: cfg.pinned_memory.0,
    };
    match CudaBackend::new(opts) {
        Ok(b) => {
            let devices = b.devices().len();
            info!(backend = "cuda", devices, "backend selected");
            Ok(SelectedBackend { backend: Arc::new(b), devices })
        }
        Err(e) if cfg.kind == BackendKind::Auto => {
            info!(backend = "cpu", reason = %e, "backend selected");
            Ok(cpu())
        }
        Err(e) => Err(EngineError::Backend(format!("backend.kind = \"gpu\": {e}"))),
    }
}

impl Stage for ProveGpu {
    type In = StagedWork;
    type Out = ProvedPartition;
    const NAME: StageName = StageName::ProveGpu;

    fn process(&self, item: WorkItem<StagedWork>) -> Result<Vec<WorkItem<ProvedPartition>>, StageError> {
        let (w, mut base) = item.take();
        let need_b_g2 = w.b_g2.is_none();
        let mut msm = self.backend.execute(w.staged, base.job.srs(), need_b_g2).map_err(StageError::failed)?;
        if let Some(b) = w.b_g2 {
            msm.b_g2 = Some(b);
        }
        base.trace.add_ops(&msm.timings);
        // a/b/c, H and the scalar vectors are freed: return the memory.
        base.reservation = None;
        Ok(vec![base.with(ProvedPartition { msm, public_inputs: w.public_inputs })])
    }
}

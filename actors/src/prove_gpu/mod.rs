//! ProveGpu: the backend's `execute` — H by NTT, then the MSMs. Once it is done the
//! partition's large buffers are gone, so its host reservation is returned here.

mod config;
mod messages;

use std::sync::Arc;

pub use config::ProveGpuConfig;
use cuzk_gpu::{cpu::CpuBackend, Backend};
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

/// Picks the backend from config.
///
/// # Errors
/// [`EngineError::Backend`] when `kind = "gpu"` and no GPU backend is usable.
pub fn select_backend(cfg: &BackendConfig) -> Result<Arc<dyn Backend>, EngineError> {
    match cfg.kind {
        BackendKind::Cpu => Ok(Arc::new(CpuBackend)),
        BackendKind::Auto => {
            info!(backend = "cpu", reason = "this build has no CUDA backend", "backend selected");
            Ok(Arc::new(CpuBackend))
        }
        BackendKind::Gpu => Err(EngineError::Backend(
            "backend.kind = \"gpu\" but this build has no CUDA backend; use \"auto\" or \"cpu\"".into(),
        )),
    }
}

impl Stage for ProveGpu {
    type In = StagedWork;
    type Out = ProvedPartition;
    const NAME: StageName = StageName::ProveGpu;

    fn process(&self, item: WorkItem<StagedWork>) -> Result<Vec<WorkItem<ProvedPartition>>, StageError> {
        let (w, mut base) = item.take();
        let need_b_g2 = w.b_g2.is_none();
        let mut msm = self.backend.execute(w.staged, &base.job.srs, need_b_g2).map_err(StageError::failed)?;
        if let Some(b) = w.b_g2 {
            msm.b_g2 = Some(b);
        }
        base.trace.add_ops(&msm.timings);
        // a/b/c, H and the scalar vectors are freed: return the memory.
        base.reservation = None;
        Ok(vec![base.with(ProvedPartition { msm, public_inputs: w.public_inputs })])
    }
}

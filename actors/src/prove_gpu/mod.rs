//! ProveGpu: the backend's `execute` — H by NTT, then the MSMs. Once it is done the
//! partition's large buffers are gone, so its host reservation is returned here.

mod config;

use std::sync::Arc;

pub use config::ProveGpuConfig;
use cuzk_gpu::{with_injected_fault, Backend, InjectedFault};

use crate::{
    ground::{FaultKind, ProvedPartition, StageError, StageName, UploadedWork},
    runtime::{Stage, WorkItem},
};

/// The ProveGpu stage.
pub struct ProveGpu {
    pub backend: Arc<dyn Backend>,
}

impl Stage for ProveGpu {
    type In = UploadedWork;
    type Out = ProvedPartition;
    const NAME: StageName = StageName::ProveGpu;

    fn process(&self, item: WorkItem<UploadedWork>) -> Result<Vec<WorkItem<ProvedPartition>>, StageError> {
        let (w, mut base) = item.take();
        let need_b_g2 = w.b_g2.is_none();
        let execute = || self.backend.execute(w.uploaded, base.job.srs(), need_b_g2);
        let result = match base.job.fault_for(Self::NAME, base.partition) {
            Some(FaultKind::DeviceError) => with_injected_fault(InjectedFault::Sticky, execute),
            Some(FaultKind::DeviceHang) => with_injected_fault(InjectedFault::Hang, execute),
            _ => execute(),
        };
        let mut msm = result.map_err(StageError::failed)?;
        if let Some(b) = w.b_g2 {
            msm.b_g2 = Some(b);
        }
        base.trace.add_ops(&msm.timings);
        // a/b/c, H and the scalar vectors are freed: return the memory.
        base.reservation = None;
        Ok(vec![base.with(ProvedPartition { msm, public_inputs: w.public_inputs })])
    }
}

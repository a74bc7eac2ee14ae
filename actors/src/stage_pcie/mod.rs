//! StagePcie: hands a prepared partition to the backend's `stage` (on the CUDA
//! backend: host→device copies on a copy stream; on the CPU backend: nothing to move).

mod config;
mod messages;

use std::{sync::Arc, time::Instant};

pub use config::StagePcieConfig;
use cuzk_gpu::Backend;
pub use messages::StagedWork;

use crate::{
    error::StageError,
    job::StageName,
    prepare_msm::PreparedPartition,
    runtime::{Stage, WorkItem},
};

/// The StagePcie stage.
pub struct StagePcie {
    pub backend: Arc<dyn Backend>,
}

impl Stage for StagePcie {
    type In = PreparedPartition;
    type Out = StagedWork;
    const NAME: StageName = StageName::StagePcie;

    fn process(&self, item: WorkItem<PreparedPartition>) -> Result<Vec<WorkItem<StagedWork>>, StageError> {
        let (p, mut base) = item.take();
        let t = Instant::now();
        let staged = self.backend.stage(p.host).map_err(StageError::failed)?;
        base.trace.add_ops(&[("stage", t.elapsed())]);
        Ok(vec![base.with(StagedWork { staged, b_g2: p.b_g2, public_inputs: p.public_inputs })])
    }
}

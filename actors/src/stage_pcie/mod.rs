//! StagePcie: hands a prepared partition to the backend's `upload`. On the CUDA
//! backend that copies a, b, c (unless synthesis already wrote them into a lent
//! pinned buffer) and the dense scalar vectors into the pinned host pool, so that
//! ProveGpu's host-to-device transfers run at full PCIe speed; the device copies
//! themselves are issued by ProveGpu. The partition's host reservation then shrinks
//! to what is still on the heap, so that the partitions waiting for the device stop
//! holding budget that synthesis can use. On the CPU backend there is nothing to move.

mod config;

use std::{sync::Arc, time::Instant};

pub use config::StagePcieConfig;
use cuzk_gpu::Backend;

use crate::{
    ground::{PreparedPartition, StageError, StageName, UploadedWork},
    runtime::{Stage, WorkItem},
};

/// The StagePcie stage.
pub struct StagePcie {
    pub backend: Arc<dyn Backend>,
}

impl Stage for StagePcie {
    type In = PreparedPartition;
    type Out = UploadedWork;
    const NAME: StageName = StageName::StagePcie;

    fn process(&self, item: WorkItem<PreparedPartition>) -> Result<Vec<WorkItem<UploadedWork>>, StageError> {
        let (p, mut base) = item.take();
        let t = Instant::now();
        let uploaded = self.backend.upload(p.host).map_err(StageError::failed)?;
        base.trace.add_ops(&[("upload", t.elapsed())]);
        // What `upload` moved into pinned memory (bounded apart from the host
        // budget) has left the heap: the reservation keeps only what is still there.
        // Not when ProveGpu computes H in host memory (the CPU backend): its NTT
        // buffers are part of the reservation. A partition the CUDA backend fails
        // over to the CPU charges its heap copies itself (`Backend::set_host_charge`).
        if !self.backend.ntt_on_host() {
            if let Some(r) = base.reservation.as_mut() {
                r.shrink_to(uploaded.heap_bytes());
            }
        }
        Ok(vec![base.with(UploadedWork { uploaded, b_g2: p.b_g2, public_inputs: p.public_inputs })])
    }
}

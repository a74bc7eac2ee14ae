//! StagePcie: moves a prepared partition to the accelerator, in two steps.
//!
//! 1. The backend's `upload`: on the CUDA backend, a, b, c (unless synthesis already
//!    wrote them into a lent pinned buffer) and the dense scalar vectors are copied
//!    into the pinned host pool. The partition's host reservation then shrinks to
//!    what is still on the heap, so that the partitions waiting for the device stop
//!    holding budget that synthesis can use.
//! 2. The backend's `stage`: on the CUDA backend, the transfer to device memory,
//!    into one of the device's staging buffers on that buffer's copy stream, while
//!    the device computes the partition before it; ProveGpu's kernels wait for its
//!    events. Bulk partitions wait here while every buffer holds a partition not yet
//!    executed (two per device by default: double buffering); urgent ones never
//!    wait, and when no buffer is free their execution uploads them itself.
//!
//! That wait is ProveGpu's backpressure, not work of this stage: it goes into the
//! output's `WorkItem::blocked`, so that the runtime counts it as StagePcie's
//! blocked time (metric `blocked`, the job's `StageTiming::blocked`) rather than its
//! busy time, and the `stage` operation in the trace excludes it.
//!
//! On the CPU backend there is nothing to move.

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
    /// Jobs of at least this priority are urgent (`ingest.priority.express`): their
    /// partitions never wait for a staging buffer.
    pub urgent_from: i32,
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
        let mut uploaded = uploaded;
        uploaded.set_urgent(base.job.priority >= self.urgent_from);
        let t = Instant::now();
        let staged = self.backend.stage(&mut uploaded, base.job.priority < self.urgent_from);
        if staged.staged {
            // Without the wait for a free buffer: that is the double buffer's
            // backpressure, counted as blocked below.
            base.trace.add_ops(&[("stage", t.elapsed().saturating_sub(staged.waited))]);
        }
        base.blocked += staged.waited;
        Ok(vec![base.with(UploadedWork { uploaded, b_g2: p.b_g2, public_inputs: p.public_inputs })])
    }
}

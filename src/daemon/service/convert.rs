//! Between the engine's types and the gRPC ones: a job's end as an
//! `AwaitProofResponse` (`to_response`), a refused submission as a status, the gRPC
//! priority as the engine's, and GetStatus's device health and listener status.

use std::time::Duration;

use tonic::Status;

use super::JobStatus;
use crate::{
    actors::{JobError, StageName},
    daemon::{
        listener::{CloseReason, ListenerStats},
        proto,
        results::StoreState,
    },
    JobOutput,
};

/// The gRPC status of a refused submission.
pub(in crate::daemon) fn submit_status(e: crate::SubmitError) -> Status {
    match e {
        crate::SubmitError::Invalid(_) => Status::invalid_argument(e.to_string()),
        crate::SubmitError::Busy => Status::resource_exhausted(e.to_string()),
        crate::SubmitError::NotRunning => Status::unavailable(e.to_string()),
    }
}

/// gRPC priority to engine priority (higher overtakes lower in every stage queue).
pub(in crate::daemon) fn priority(p: i32) -> i32 {
    match proto::Priority::try_from(p) {
        Ok(proto::Priority::Low) => -1,
        Ok(proto::Priority::High) => 1,
        Ok(proto::Priority::Critical) => 2,
        _ => 0,
    }
}

/// GetStatus's `listeners`: one listener's address, connections and counters.
pub(super) fn listener_status(l: &ListenerStats) -> proto::ListenerStatus {
    use std::sync::atomic::Ordering::Relaxed;
    proto::ListenerStatus {
        name: l.name.to_string(),
        address: l.address.clone(),
        listening: l.up.load(Relaxed),
        open_connections: l.open.load(Relaxed),
        max_connections: l.max_connections as u64,
        accepted_total: l.accepted.load(Relaxed),
        accept_errors_total: l.accept_errors.load(Relaxed),
        closed_total: CloseReason::ALL.iter().map(|r| (r.as_str().to_string(), l.closed(*r))).collect(),
    }
}

/// GetStatus's `results_store`.
pub(super) fn results_store(s: &StoreState) -> proto::ResultsStore {
    proto::ResultsStore {
        dir: s.dir.clone(),
        healthy: s.healthy,
        stored_total: s.stored_total,
        write_failures_total: s.write_failures_total,
        last_failure_unix: s.last_failure_unix,
        last_error: s.last_error.clone(),
        free_bytes: s.free_bytes.unwrap_or(0),
    }
}

/// GetStatus's `devices`: the backend's devices and their health.
pub(super) fn device_health(devices: &[cuzk_gpu::DeviceStats]) -> Vec<proto::DeviceHealth> {
    devices
        .iter()
        .map(|d| proto::DeviceHealth {
            index: u32::try_from(d.device).unwrap_or(u32::MAX),
            healthy: d.health == cuzk_gpu::DeviceHealth::Healthy,
            retired_reason: d.retired_reason.clone().unwrap_or_default(),
            partitions_moved: d.partitions_moved,
            cuda_errors: d.cuda_errors,
        })
        .collect()
}

pub(super) fn to_response(job_id: &str, r: Result<JobOutput, JobError>) -> proto::AwaitProofResponse {
    let mut resp = proto::AwaitProofResponse { job_id: job_id.to_string(), ..Default::default() };
    match r {
        Ok(out) => {
            let t = &out.timings;
            let ms = |d: Duration| d.as_millis() as u64;
            resp.status = JobStatus::Completed as i32;
            resp.proof = out.proof_bytes();
            resp.queue_wait_ms = ms(t.stage(StageName::Ingest).queue_wait + t.stage(StageName::Synthesize).queue_wait);
            resp.srs_load_ms = ms(t.stage(StageName::Ingest).busy);
            resp.synthesis_ms = ms(t.stage(StageName::Synthesize).busy);
            resp.gpu_compute_ms = ms(t.stage(StageName::StagePcie).busy + t.stage(StageName::ProveGpu).busy);
            resp.total_ms = ms(t.total);
        }
        Err(JobError::Cancelled) => {
            resp.status = JobStatus::Cancelled as i32;
            resp.error_message = "cancelled".into();
        }
        Err(JobError::Shutdown) => {
            resp.status = JobStatus::Interrupted as i32;
            resp.error_message = "interrupted: the daemon stopped before the job ended; submit it again".into();
        }
        Err(e) => {
            resp.status = JobStatus::Failed as i32;
            resp.error_message = e.to_string();
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retired device shows as unhealthy with its reason; the others as healthy.
    #[test]
    fn get_status_reports_retired_devices() {
        let healthy = cuzk_gpu::DeviceStats { device: 0, ..Default::default() };
        let retired = cuzk_gpu::DeviceStats {
            device: 1,
            health: cuzk_gpu::DeviceHealth::Retired,
            retired_reason: Some("an illegal memory access was encountered".into()),
            partitions_moved: 2,
            cuda_errors: 3,
            ..Default::default()
        };
        let got = device_health(&[healthy, retired]);
        assert_eq!(got.len(), 2);
        assert!(got[0].healthy && got[0].retired_reason.is_empty() && got[0].index == 0);
        assert!(!got[1].healthy && got[1].index == 1);
        assert_eq!(got[1].retired_reason, "an illegal memory access was encountered");
        assert_eq!((got[1].partitions_moved, got[1].cuda_errors), (2, 3));
    }
}

//! Idempotency of submissions: a request id names one job, bound to its inputs
//! (`JobKey`), so a retry finds the job it meant and a reused id for other inputs is
//! refused; submissions of one request id take turns (`Submitting`), so a retry
//! racing the original cannot create a second job; a request without an id is named
//! by its inputs (`content_id`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use sha2::Digest;
use tonic::Status;

use super::{lock, JobStatus, Service};
use crate::daemon::results::JobKey;

/// Longest request id accepted (Curio's are UUIDs or task ids).
pub(super) const MAX_REQUEST_ID: usize = 256;

/// The lock of each request id being submitted now.
pub(super) type SubmitLocks = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;

/// One submission's place among those of its request id; leaves the map when the
/// last of them ends (or is dropped: a client that went away).
pub(super) struct Submitting {
    map: Arc<SubmitLocks>,
    id: String,
    pub(super) lock: Arc<tokio::sync::Mutex<()>>,
}

impl Submitting {
    pub(super) fn enter(map: &Arc<SubmitLocks>, id: &str) -> Self {
        let lock = lock(map).entry(id.to_string()).or_default().clone();
        Submitting { map: map.clone(), id: id.to_string(), lock }
    }
}

impl Drop for Submitting {
    fn drop(&mut self) {
        // Clones are made only under the map's lock: two references (the map's and
        // this one) mean nobody else is submitting this id.
        let mut m = lock(&self.map);
        if Arc::strong_count(&self.lock) == 2 && m.get(&self.id).is_some_and(|l| Arc::ptr_eq(l, &self.lock)) {
            m.remove(&self.id);
        }
    }
}

/// SHA-256 (hex) of every input field of a submission: what a request id is bound
/// to beside its kind, miner, sector and proof type.
pub(super) fn inputs_digest(req: &crate::daemon::proto::SubmitProofRequest) -> String {
    let mut h = sha2::Sha256::new();
    let mut field = |tag: u8, b: &[u8]| {
        h.update([tag]);
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(1, &req.sector_size.to_le_bytes());
    field(2, &req.vanilla_proof);
    for v in &req.vanilla_proofs {
        field(3, v);
    }
    field(4, &req.randomness);
    field(5, &req.partition_index.to_le_bytes());
    field(6, &req.comm_r_old);
    field(7, &req.comm_r_new);
    field(8, &req.comm_d_new);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The request id of a submission that carries none: its kind, miner, sector, proof
/// type and the hash of its input.
pub(super) fn content_id(key: &JobKey, inputs: &[&[u8]]) -> String {
    let mut h = sha2::Sha256::new();
    h.update(format!("{key}").as_bytes());
    for i in inputs {
        h.update((i.len() as u64).to_le_bytes());
        h.update(i);
    }
    let d = h.finalize();
    format!("auto-{}", d.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

impl Service {
    /// The job a request id names, if a new submission must not create another:
    /// one running or completed for the same inputs. A failed, cancelled or
    /// interrupted one is retried (`None`); one for other inputs is refused.
    pub(super) fn existing(&self, request_id: &str, key: &JobKey) -> Result<Option<String>, Status> {
        let Some(job_id) = lock(&self.by_request).get(request_id).cloned() else { return Ok(None) };
        let state = lock(&self.jobs)
            .get(&job_id)
            .map(|j| (j.key.clone(), j.result.borrow().as_ref().map(|r| r.status)))
            .or_else(|| self.results.as_ref()?.read(&job_id).map(|r| (r.key, Some(r.status))));
        match state {
            None => Ok(None),
            // Stored before inputs were recorded: it cannot be told to be the same
            // inputs, so it is never served for this id; the request is proved anew.
            Some((k, _)) if k.inputs.is_empty() && key.kind != -1 => Ok(None),
            Some((k, _)) if k != *key => Err(Status::invalid_argument(format!(
                "request_id `{request_id}` already names job {job_id} for other inputs ({k}), not ({key}); a \
                 request id names one set of inputs"
            ))),
            Some((_, Some(s))) if s != JobStatus::Completed as i32 => Ok(None),
            Some(_) => Ok(Some(job_id)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Submissions of one request id share a lock; of different ids they do not; the
    /// map forgets an id when its last submission ends.
    #[test]
    fn submissions_wait_only_for_their_own_request_id() {
        let map = Arc::default();
        let a1 = Submitting::enter(&map, "a");
        let a2 = Submitting::enter(&map, "a");
        let b = Submitting::enter(&map, "b");
        assert!(Arc::ptr_eq(&a1.lock, &a2.lock));
        assert!(!Arc::ptr_eq(&a1.lock, &b.lock));
        let held = a1.lock.try_lock().unwrap();
        assert!(a2.lock.try_lock().is_err(), "a retry of `a` waits for it");
        assert!(b.lock.try_lock().is_ok(), "`b` does not wait for `a`");
        drop(held);
        drop(a1);
        assert_eq!(lock(&map).len(), 2, "`a` is still being submitted by a2");
        drop((a2, b));
        assert!(lock(&map).is_empty());
    }
}

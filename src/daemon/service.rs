//! The `cuzk.v1.ProvingEngine` service over the engine.

// tonic::Status is 176 bytes; every gRPC handler returns it, as tonic requires.
#![allow(clippy::result_large_err)]

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use sha2::Digest;
use tokio::sync::{watch, Notify};
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::{
    proto::{self, await_proof_response::Status as JobStatus, proving_engine_server::ProvingEngine, ProofKind},
    results::{JobKey, Record, Results},
    DaemonConfig,
};
use crate::{
    actors::{engine::Canceller, JobError, StageName},
    filecoin::{self as fil, PorepError, RegisteredSealProof},
    Engine, JobHandle, JobOutput, JobSpec, JobTimings,
};

struct Job {
    key: JobKey,
    result: watch::Receiver<Option<proto::AwaitProofResponse>>,
    canceller: Canceller,
    finished: Arc<Mutex<Option<Instant>>>,
    /// Per-stage timings once the job has produced its proof.
    timings: Arc<Mutex<Option<JobTimings>>>,
}

pub(super) struct Service {
    pub(super) engine: Engine,
    jobs: Mutex<HashMap<String, Job>>,
    by_request: Mutex<HashMap<String, String>>,
    /// Request ids being submitted now, each with its own lock, held from the
    /// request-id check to the registration of the new job: a retry racing the
    /// original waits for it; other submissions (a submit held by backpressure
    /// included) do not wait for each other.
    submitting: Arc<SubmitLocks>,
    max_input: usize,
    retention: Duration,
    started: Instant,
    /// Finished jobs on disk (`[daemon] results_dir`), if kept.
    results: Option<Arc<Results>>,
    results_retention: Duration,
    last_prune: Mutex<Instant>,
    /// Jobs whose result is not yet stored and published; shutdown waits for them.
    pending: Arc<(AtomicUsize, Notify)>,
}

/// Longest request id accepted (Curio's are UUIDs or task ids).
const MAX_REQUEST_ID: usize = 256;

/// The lock of each request id being submitted now.
type SubmitLocks = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;

/// One submission's place among those of its request id; leaves the map when the
/// last of them ends (or is dropped: a client that went away).
struct Submitting {
    map: Arc<SubmitLocks>,
    id: String,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl Submitting {
    fn enter(map: &Arc<SubmitLocks>, id: &str) -> Self {
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The gRPC status of a refused submission.
pub(super) fn submit_status(e: crate::SubmitError) -> Status {
    match e {
        crate::SubmitError::Invalid(_) => Status::invalid_argument(e.to_string()),
        crate::SubmitError::Busy => Status::resource_exhausted(e.to_string()),
        crate::SubmitError::NotRunning => Status::unavailable(e.to_string()),
    }
}

/// gRPC priority to engine priority (higher overtakes lower in every stage queue).
pub(super) fn priority(p: i32) -> i32 {
    match proto::Priority::try_from(p) {
        Ok(proto::Priority::Low) => -1,
        Ok(proto::Priority::High) => 1,
        Ok(proto::Priority::Critical) => 2,
        _ => 0,
    }
}

/// The circuit id the Curio API uses for a proof type's parameters ("porep-32g").
/// GetStatus's `devices`: the backend's devices and their health.
fn device_health(devices: &[cuzk_gpu::DeviceStats]) -> Vec<proto::DeviceHealth> {
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

fn circuit_id(p: RegisteredSealProof) -> String {
    let size = match u64::from(p.sector_size()) {
        2048 => "2k".to_string(),
        8_388_608 => "8m".to_string(),
        536_870_912 => "512m".to_string(),
        34_359_738_368 => "32g".to_string(),
        68_719_476_736 => "64g".to_string(),
        s => s.to_string(),
    };
    format!("porep-{size}")
}

fn proof_for_circuit_id(id: &str) -> Result<RegisteredSealProof, Status> {
    let size = id
        .strip_prefix("porep-")
        .ok_or_else(|| Status::unimplemented(format!("circuit `{id}`: only porep-<size> parameters are served")))?;
    let size = match size {
        "2k" => "2KiB",
        "8m" => "8MiB",
        "512m" => "512MiB",
        "32g" => "32GiB",
        "64g" => "64GiB",
        other => other,
    };
    fil::proof_for_sector_size(size).map_err(Status::invalid_argument)
}

/// The request id of a submission that carries none: its kind, miner, sector, proof
/// type and the hash of its input.
fn content_id(key: &JobKey, input: &[u8]) -> String {
    let mut h = sha2::Sha256::new();
    h.update(format!("{key}").as_bytes());
    h.update(input);
    let d = h.finalize();
    format!("auto-{}", d.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn to_response(job_id: &str, r: Result<JobOutput, JobError>) -> proto::AwaitProofResponse {
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

impl Service {
    /// `max_input`: the largest C1 accepted (the smaller of the message and Ingest
    /// limits).
    ///
    /// # Errors
    /// The results directory cannot be created.
    pub(super) fn new(engine: Engine, cfg: &DaemonConfig, max_input: usize) -> Result<Self, String> {
        let results_retention = Duration::from_secs(cfg.results_retention_secs);
        let results = match cfg.results_dir() {
            None => None,
            Some(dir) => Some(Arc::new(
                Results::open(dir.clone(), results_retention)
                    .map_err(|e| format!("results_dir {}: {e}", dir.display()))?,
            )),
        };
        // Request ids of stored results: a retry after a restart finds its job.
        let mut by_request: HashMap<String, (String, bool)> = HashMap::new();
        for r in results.iter().flat_map(|r| r.all()) {
            if r.request_id.is_empty() {
                continue;
            }
            let completed = r.status == JobStatus::Completed as i32;
            match by_request.get(&r.request_id) {
                Some((_, true)) => {}
                _ => {
                    by_request.insert(r.request_id.clone(), (r.job_id.clone(), completed));
                }
            }
        }
        if let Some(r) = &results {
            info!(dir = %r.dir().display(), request_ids = by_request.len(), "results directory");
        }
        Ok(Service {
            engine,
            jobs: Mutex::new(HashMap::new()),
            by_request: Mutex::new(by_request.into_iter().map(|(k, (id, _))| (k, id)).collect()),
            submitting: Arc::default(),
            max_input,
            retention: Duration::from_secs(cfg.job_retention_secs),
            started: Instant::now(),
            results,
            results_retention,
            last_prune: Mutex::new(Instant::now()),
            pending: Arc::new((AtomicUsize::new(0), Notify::new())),
        })
    }

    /// Waits (up to `limit`) until every ended job's result is stored and published.
    pub(super) async fn drain(&self, limit: Duration) {
        let wait = async {
            loop {
                let notified = self.pending.1.notified();
                if self.pending.0.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(limit, wait).await.is_err() {
            warn!(pending = self.pending.0.load(Ordering::SeqCst), "results not all stored at shutdown");
        }
    }

    /// The job a request id names, if a new submission must not create another:
    /// one running or completed for the same inputs. A failed, cancelled or
    /// interrupted one is retried (`None`); one for other inputs is refused.
    fn existing(&self, request_id: &str, key: &JobKey) -> Result<Option<String>, Status> {
        let Some(job_id) = lock(&self.by_request).get(request_id).cloned() else { return Ok(None) };
        let state = lock(&self.jobs)
            .get(&job_id)
            .map(|j| (j.key.clone(), j.result.borrow().as_ref().map(|r| r.status)))
            .or_else(|| self.results.as_ref()?.read(&job_id).map(|r| (r.key, Some(r.status))));
        match state {
            None => Ok(None),
            Some((k, _)) if k != *key => Err(Status::invalid_argument(format!(
                "request_id `{request_id}` already names job {job_id} for {k}, not {key}"
            ))),
            Some((_, Some(s))) if s != JobStatus::Completed as i32 => Ok(None),
            Some(_) => Ok(Some(job_id)),
        }
    }

    /// Forgets jobs that finished more than `retention` ago.
    pub(super) fn expire(&self) {
        if let Some(r) = &self.results {
            let mut last = lock(&self.last_prune);
            if last.elapsed() > Duration::from_secs(3600) {
                *last = Instant::now();
                let (r, keep) = (r.clone(), self.results_retention);
                tokio::task::spawn_blocking(move || r.prune(keep));
            }
        }
        let retention = self.retention;
        let mut jobs = lock(&self.jobs);
        let before = jobs.len();
        jobs.retain(|_, j| lock(&j.finished).is_none_or(|t| t.elapsed() < retention));
        if jobs.len() != before {
            let live: std::collections::HashSet<String> = jobs.keys().cloned().collect();
            lock(&self.by_request).retain(|_, id| live.contains(id));
        }
    }

    async fn submit(&self, req: proto::SubmitProofRequest) -> Result<String, Status> {
        self.expire();
        match ProofKind::try_from(req.proof_kind) {
            Ok(ProofKind::PorepSealCommit) => {}
            Ok(k @ (ProofKind::SnapDealsUpdate | ProofKind::WindowPostPartition | ProofKind::WinningPost)) => {
                return Err(Status::unimplemented(format!(
                    "{} is not supported by this daemon yet; it proves POREP_SEAL_COMMIT",
                    k.as_str_name()
                )))
            }
            Ok(ProofKind::Unspecified) => {
                return Err(Status::invalid_argument("proof_kind is unspecified; set POREP_SEAL_COMMIT"))
            }
            Err(_) => return Err(Status::invalid_argument(format!("unknown proof_kind {}", req.proof_kind))),
        }
        if req.request_id.len() > MAX_REQUEST_ID {
            return Err(Status::invalid_argument(format!(
                "request_id is {} bytes; at most {MAX_REQUEST_ID}",
                req.request_id.len()
            )));
        }
        let key = JobKey {
            kind: req.proof_kind,
            miner_id: req.miner_id,
            sector_number: req.sector_number,
            registered_proof: req.registered_proof,
        };
        if !req.request_id.is_empty() {
            if let Some(id) = self.existing(&req.request_id, &key)? {
                return Ok(id);
            }
        }
        if req.vanilla_proof.is_empty() {
            return Err(Status::invalid_argument("vanilla_proof is empty: it must carry the C1 output"));
        }
        if req.vanilla_proof.len() > self.max_input {
            return Err(Status::resource_exhausted(format!(
                "vanilla_proof is {} bytes, above the limit of {}",
                req.vanilla_proof.len(),
                self.max_input
            )));
        }
        // Validate on receipt, so a malformed C1 is an InvalidArgument now and not a
        // failed job later; the parsed form goes to Ingest, which does not parse again.
        let bytes = req.vanilla_proof;
        let max = self.max_input;
        // Without a request id, the inputs themselves name the job: a client that
        // lost its connection and submits (or Proves) again finds the same job.
        let explicit_id = (!req.request_id.is_empty()).then_some(req.request_id);
        let k = key.clone();
        let (c1, request_id) = tokio::task::spawn_blocking(move || {
            let c1 = fil::parse_c1(&bytes, max)?;
            let id = explicit_id.unwrap_or_else(|| content_id(&k, &bytes));
            Ok::<_, PorepError>((c1, id))
        })
        .await
        .map_err(|e| Status::internal(format!("C1 validation: {e}")))?
        .map_err(|e| match e {
            PorepError::TooLarge { .. } => Status::resource_exhausted(e.to_string()),
            e => Status::invalid_argument(e.to_string()),
        })?;
        let proof = c1.registered_proof();
        if req.sector_size != 0 && req.sector_size != u64::from(proof.sector_size()) {
            return Err(Status::invalid_argument(format!(
                "sector_size {} does not match the C1 output ({proof:?}, {} bytes)",
                req.sector_size,
                u64::from(proof.sector_size())
            )));
        }
        match fil::proof_from_number(req.registered_proof) {
            Some(p) if p == proof => {}
            Some(p) => {
                return Err(Status::invalid_argument(format!(
                    "registered_proof {} is {p:?} but the C1 output is for {proof:?}",
                    req.registered_proof
                )))
            }
            None => {
                return Err(Status::invalid_argument(format!(
                    "registered_proof {} is not a seal proof",
                    req.registered_proof
                )))
            }
        }
        let prover_id = fil::prover_id_from_actor(req.miner_id);
        fil::check_replica_id(&c1, &prover_id, req.sector_number).map_err(|e| {
            Status::invalid_argument(format!("miner {} sector {}: {e}", req.miner_id, req.sector_number))
        })?;
        let spec = JobSpec::porep_parsed(c1, prover_id, req.sector_number).with_priority(priority(req.priority));
        // Serialize submissions of one request id, so that a retry racing the
        // original cannot create a second job.
        let slot = Submitting::enter(&self.submitting, &request_id);
        let _turn = slot.lock.lock().await;
        if let Some(id) = self.existing(&request_id, &key)? {
            return Ok(id);
        }
        let handle = self.engine.submit(spec).await.map_err(submit_status)?;
        let job_id = self.register(handle, &request_id, key);
        info!(job = %job_id, sector = req.sector_number, miner = req.miner_id, proof = ?proof, "proof submitted");
        Ok(job_id)
    }

    /// Makes a submitted job visible to AwaitProof / CancelProof (and, with a
    /// request id, to idempotent resubmission); returns its id.
    pub(super) fn register(&self, handle: JobHandle, request_id: &str, key: JobKey) -> String {
        let job_id = handle.id().to_string();
        let (tx, rx) = watch::channel(None);
        let finished = Arc::new(Mutex::new(None));
        let timings = Arc::new(Mutex::new(None));
        let canceller = handle.canceller();
        let (id2, fin2, tim2) = (job_id.clone(), finished.clone(), timings.clone());
        let (results, pending, rid, k) =
            (self.results.clone(), self.pending.clone(), request_id.to_string(), key.clone());
        pending.0.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let r = handle.wait().await;
            if let Ok(out) = &r {
                *lock(&tim2) = Some(out.timings.clone());
            }
            let resp = to_response(&id2, r);
            // Stored before anyone is told, so a proof a client saw is never lost.
            if let Some(results) = results {
                let rec = Record::new(&resp, &rid, &k);
                match tokio::task::spawn_blocking(move || results.write(&rec)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => warn!(job = %id2, error = %e, "result not stored"),
                    Err(e) => warn!(job = %id2, error = %e, "result not stored"),
                }
            }
            *lock(&fin2) = Some(Instant::now());
            let _ = tx.send(Some(resp));
            pending.0.fetch_sub(1, Ordering::SeqCst);
            pending.1.notify_waiters();
        });
        lock(&self.jobs).insert(job_id.clone(), Job { key, result: rx, canceller, finished, timings });
        if !request_id.is_empty() {
            lock(&self.by_request).insert(request_id.to_string(), job_id.clone());
        }
        job_id
    }

    /// A job's state for cuzk.ext.v1: (finished, timings if it produced a proof).
    pub(super) fn job_timings(&self, job_id: &str) -> Result<(bool, Option<JobTimings>), Status> {
        let jobs = lock(&self.jobs);
        let j = jobs.get(job_id).ok_or_else(|| Status::not_found(format!("no job `{job_id}`")))?;
        let finished = lock(&j.finished).is_some();
        let timings = lock(&j.timings).clone();
        Ok((finished, timings))
    }

    async fn await_job(&self, job_id: &str, timeout_ms: u64) -> Result<proto::AwaitProofResponse, Status> {
        let rx = lock(&self.jobs).get(job_id).map(|j| j.result.clone());
        let Some(mut rx) = rx else {
            // Finished before a restart, or forgotten from memory: the results directory.
            let stored = self.results.clone().map(|r| (r, job_id.to_string()));
            let rec = match stored {
                Some((r, id)) => tokio::task::spawn_blocking(move || r.read(&id)).await.ok().flatten(),
                None => None,
            };
            return rec.and_then(|r| r.response()).ok_or_else(|| {
                Status::not_found(format!("no job `{job_id}` (unknown, or finished and its result expired)"))
            });
        };
        let wait = async {
            loop {
                if let Some(r) = rx.borrow_and_update().clone() {
                    return Ok(r);
                }
                if rx.changed().await.is_err() {
                    return Err(Status::internal("job result lost"));
                }
            }
        };
        if timeout_ms == 0 {
            wait.await
        } else {
            match tokio::time::timeout(Duration::from_millis(timeout_ms), wait).await {
                Ok(r) => r,
                Err(_) => Ok(proto::AwaitProofResponse {
                    job_id: job_id.to_string(),
                    status: JobStatus::Timeout as i32,
                    ..Default::default()
                }),
            }
        }
    }
}

#[tonic::async_trait]
impl ProvingEngine for Service {
    async fn submit_proof(
        &self,
        request: Request<proto::SubmitProofRequest>,
    ) -> Result<Response<proto::SubmitProofResponse>, Status> {
        let job_id = self.submit(request.into_inner()).await?;
        let queued = self.engine.stage_snapshots().iter().map(|s| s.queue_len).sum::<u64>();
        Ok(Response::new(proto::SubmitProofResponse {
            job_id,
            queue_position: u32::try_from(queued).unwrap_or(u32::MAX),
            assigned_gpu: String::new(),
        }))
    }

    async fn await_proof(
        &self,
        request: Request<proto::AwaitProofRequest>,
    ) -> Result<Response<proto::AwaitProofResponse>, Status> {
        let r = request.into_inner();
        Ok(Response::new(self.await_job(&r.job_id, r.timeout_ms).await?))
    }

    async fn prove(&self, request: Request<proto::ProveRequest>) -> Result<Response<proto::ProveResponse>, Status> {
        let submit = request.into_inner().submit.ok_or_else(|| Status::invalid_argument("submit is missing"))?;
        let job_id = self.submit(submit).await?;
        let result = self.await_job(&job_id, 0).await?;
        Ok(Response::new(proto::ProveResponse { result: Some(result) }))
    }

    async fn cancel_proof(
        &self,
        request: Request<proto::CancelProofRequest>,
    ) -> Result<Response<proto::CancelProofResponse>, Status> {
        let id = request.into_inner().job_id;
        let (canceller, running) = {
            let jobs = lock(&self.jobs);
            let j = jobs.get(&id).ok_or_else(|| Status::not_found(format!("no job `{id}`")))?;
            let running = j.result.borrow().is_none();
            (j.canceller.clone(), running)
        };
        canceller.cancel().await;
        Ok(Response::new(proto::CancelProofResponse { was_running: running }))
    }

    async fn get_status(
        &self,
        _: Request<proto::GetStatusRequest>,
    ) -> Result<Response<proto::GetStatusResponse>, Status> {
        let snap = self.engine.snapshot().await;
        let loaded_srs = self
            .engine
            .params()
            .resident()
            .into_iter()
            .map(|(p, bytes, refs)| proto::SrsStatus {
                circuit_id: circuit_id(p),
                tier: proto::srs_status::Tier::Hot as i32,
                size_bytes: bytes,
                ref_count: u32::try_from(refs).unwrap_or(u32::MAX),
            })
            .collect();
        let queues = snap
            .stages
            .iter()
            .map(|s| proto::QueueStatus {
                proof_kind: s.stage.as_str().to_string(),
                pending: u32::try_from(s.queue_len).unwrap_or(u32::MAX),
                in_progress: u32::try_from(s.in_flight).unwrap_or(u32::MAX),
            })
            .collect();
        let gpus = tokio::task::spawn_blocking(crate::metrics::gpus)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|g| proto::GpuStatus {
                ordinal: g.index,
                name: g.name,
                vram_total_bytes: g.memory_total.unwrap_or(0),
                vram_free_bytes: g.memory_total.unwrap_or(0).saturating_sub(g.memory_used.unwrap_or(0)),
                current_job_id: String::new(),
                current_proof_kind: String::new(),
            })
            .collect();
        Ok(Response::new(proto::GetStatusResponse {
            gpus,
            loaded_srs,
            queues,
            total_proofs_completed: snap.jobs.succeeded,
            total_proofs_failed: snap.jobs.failed,
            uptime_seconds: self.started.elapsed().as_secs(),
            pinned_memory_bytes: snap.pinned.map_or(0, |p| p.in_use),
            pinned_memory_limit_bytes: snap.pinned.map_or(0, |p| p.capacity),
            devices: device_health(&snap.devices),
        }))
    }

    async fn get_metrics(
        &self,
        _: Request<proto::GetMetricsRequest>,
    ) -> Result<Response<proto::GetMetricsResponse>, Status> {
        let snap = self.engine.snapshot().await;
        let text = tokio::task::spawn_blocking(move || crate::metrics::render(&snap))
            .await
            .map_err(|e| Status::internal(format!("metrics: {e}")))?;
        Ok(Response::new(proto::GetMetricsResponse { prometheus_text: text }))
    }

    async fn preload_srs(
        &self,
        request: Request<proto::PreloadSrsRequest>,
    ) -> Result<Response<proto::PreloadSrsResponse>, Status> {
        let proof = proof_for_circuit_id(&request.into_inner().circuit_id)?;
        let params = self.engine.params().clone();
        if params.is_resident(proof) {
            return Ok(Response::new(proto::PreloadSrsResponse { already_loaded: true, load_time_ms: 0 }));
        }
        let t = Instant::now();
        tokio::task::spawn_blocking(move || params.get(proof))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(proto::PreloadSrsResponse {
            already_loaded: false,
            load_time_ms: t.elapsed().as_millis() as u64,
        }))
    }

    async fn evict_srs(
        &self,
        request: Request<proto::EvictSrsRequest>,
    ) -> Result<Response<proto::EvictSrsResponse>, Status> {
        let proof = proof_for_circuit_id(&request.into_inner().circuit_id)?;
        let freed = self.engine.params().evict(proof).map_err(Status::failed_precondition)?;
        Ok(Response::new(proto::EvictSrsResponse { was_loaded: freed.is_some(), freed_bytes: freed.unwrap_or(0) }))
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

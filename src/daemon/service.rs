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
    listener::{CloseReason, ListenerStats},
    proto::{self, await_proof_response::Status as JobStatus, proving_engine_server::ProvingEngine, ProofKind},
    results::{JobKey, Record, Results},
    DaemonConfig,
};
use crate::{
    actors::{engine::Canceller, JobError, StageName},
    filecoin::{self as fil, PorepError},
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
    /// The daemon's listeners, for GetStatus and GetMetrics.
    listeners: Arc<[Arc<ListenerStats>]>,
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
fn listener_status(l: &ListenerStats) -> proto::ListenerStatus {
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

/// A Curio circuit id (`porep-32g`, `winning-2k`, `wpost-64g`, `snap-512m`).
fn circuit_for_id(id: &str) -> Result<fil::CircuitId, Status> {
    fil::CircuitId::from_curio_id(id).map_err(Status::invalid_argument)
}

/// Clears the top two bits of a 32-byte PoSt randomness, as filecoin-ffi does
/// before it generates or verifies a PoSt (Lotus and Curio pass it so already).
fn post_randomness(b: &[u8]) -> Result<[u8; 32], Status> {
    let mut r: [u8; 32] = b
        .try_into()
        .map_err(|_| Status::invalid_argument(format!("randomness is {} bytes; a PoSt needs 32", b.len())))?;
    r[31] &= 0x3f;
    Ok(r)
}

/// What a vanilla-proof request's parts weigh together, checked against the input
/// limit before anything is decoded.
fn vanilla_bytes(req: &proto::SubmitProofRequest) -> usize {
    req.vanilla_proofs.iter().map(Vec::len).sum::<usize>() + req.vanilla_proof.len()
}

/// The vanilla proofs of a PoSt or SnapDeals request: field 11, or (from a client
/// that packs them in field 10) the JSON array of base64 strings cuzk-bench and
/// Curio's storage write.
fn vanilla_list(req: &proto::SubmitProofRequest) -> Result<Vec<Vec<u8>>, Status> {
    if !req.vanilla_proofs.is_empty() {
        return Ok(req.vanilla_proofs.clone());
    }
    if req.vanilla_proof.is_empty() {
        return Err(Status::invalid_argument(
            "vanilla_proofs is empty: it must carry one vanilla proof per sector (PoSt) or per partition (SnapDeals)",
        ));
    }
    fil::vanilla_json(&req.vanilla_proof).map_err(|e| {
        Status::invalid_argument(format!("vanilla_proofs (field 11) is empty and vanilla_proof is not one: {e}"))
    })
}

/// The request id of a submission that carries none: its kind, miner, sector, proof
/// type and the hash of its input.
fn content_id(key: &JobKey, inputs: &[&[u8]]) -> String {
    let mut h = sha2::Sha256::new();
    h.update(format!("{key}").as_bytes());
    for i in inputs {
        h.update((i.len() as u64).to_le_bytes());
        h.update(i);
    }
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

/// Logs a request's sector size when it contradicts its proof type's: the
/// registered proof decides the circuit and the vanilla proofs are checked against
/// it, so the size cannot make a wrong proof (Curio's cuzk-bench always sends 32GiB).
fn check_sector_size(req: &proto::SubmitProofRequest, proof: &str, size: u64) {
    if req.sector_size != 0 && req.sector_size != size {
        warn!(
            sector_size = req.sector_size,
            registered_proof = req.registered_proof,
            proof,
            "request's sector_size differs from its registered proof's; proving the registered proof's"
        );
    }
}

/// A WinningPoSt or WindowPoSt-partition request: the proof type from
/// `registered_proof` (filecoin-ffi's numbering), the vanilla proofs decoded and
/// checked against the challenges on receipt (INVALID_ARGUMENT naming the problem),
/// the circuits handed to the engine built.
async fn post_spec(
    req: proto::SubmitProofRequest,
    key: &JobKey,
    winning: bool,
) -> Result<(JobSpec, String, String), Status> {
    let proof = fil::post_from_number(req.registered_proof).ok_or_else(|| {
        Status::invalid_argument(format!(
            "registered_proof {} is not a PoSt proof (filecoin-ffi's numbering: 0-4 WinningPoSt, 5-9 WindowPoSt \
             v1, 10-14 WindowPoSt v1.1; 2KiB to 64GiB)",
            req.registered_proof
        ))
    })?;
    if fil::post::is_winning(proof) != winning {
        return Err(Status::invalid_argument(format!(
            "registered_proof {} is {proof:?}, not a {} proof",
            req.registered_proof,
            if winning { "WinningPoSt" } else { "WindowPoSt" }
        )));
    }
    check_sector_size(&req, &format!("{proof:?}"), u64::from(proof.sector_size()));
    let randomness = post_randomness(&req.randomness)?;
    let vanilla_proofs = vanilla_list(&req)?;
    let request_id = if req.request_id.is_empty() {
        let index = req.partition_index.to_le_bytes();
        let parts: Vec<&[u8]> = std::iter::once(&randomness[..])
            .chain(std::iter::once(&index[..]))
            .chain(vanilla_proofs.iter().map(Vec::as_slice))
            .collect();
        content_id(key, &parts)
    } else {
        req.request_id.clone()
    };
    let request = fil::PostRequest {
        proof,
        randomness,
        prover_id: fil::prover_id_from_actor(req.miner_id),
        vanilla_proofs,
        partition: (!winning).then_some(req.partition_index as usize),
    };
    let parts = tokio::task::spawn_blocking(move || fil::post_circuits(request))
        .await
        .map_err(|e| Status::internal(format!("vanilla proof validation: {e}")))?
        .map_err(|e| Status::invalid_argument(format!("miner {}: {e}", req.miner_id)))?;
    let spec = JobSpec::prepared(fil::CircuitId::PoSt(proof), parts).with_priority(priority(req.priority));
    let what = if winning { format!("{proof:?}") } else { format!("{proof:?} partition {}", req.partition_index) };
    Ok((spec, request_id, what))
}

/// A SnapDeals request: the update proof type from `registered_proof`, the
/// commitments (raw 32 bytes or their CIDs) and the vanilla partition proofs
/// checked against them on receipt.
async fn update_spec(req: proto::SubmitProofRequest, key: &JobKey) -> Result<(JobSpec, String, String), Status> {
    let proof = fil::update_from_number(req.registered_proof).ok_or_else(|| {
        Status::invalid_argument(format!(
            "registered_proof {} is not an update proof (filecoin-ffi's numbering: 0-4, 2KiB to 64GiB)",
            req.registered_proof
        ))
    })?;
    check_sector_size(&req, &format!("{proof:?}"), u64::from(proof.sector_size()));
    let comm = |name: &str, b: &[u8]| fil::commitment(name, b).map_err(Status::invalid_argument);
    let (comm_r_old, comm_r_new, comm_d_new) = (
        comm("comm_r_old", &req.comm_r_old)?,
        comm("comm_r_new", &req.comm_r_new)?,
        comm("comm_d_new", &req.comm_d_new)?,
    );
    let vanilla_proofs = vanilla_list(&req)?;
    let request_id = if req.request_id.is_empty() {
        let parts: Vec<&[u8]> = [&comm_r_old[..], &comm_r_new[..], &comm_d_new[..]]
            .into_iter()
            .chain(vanilla_proofs.iter().map(Vec::as_slice))
            .collect();
        content_id(key, &parts)
    } else {
        req.request_id.clone()
    };
    let request = fil::UpdateRequest { proof, vanilla_proofs, comm_r_old, comm_r_new, comm_d_new };
    let parts = tokio::task::spawn_blocking(move || fil::update_circuits(request))
        .await
        .map_err(|e| Status::internal(format!("vanilla proof validation: {e}")))?
        .map_err(|e| Status::invalid_argument(format!("miner {} sector {}: {e}", req.miner_id, req.sector_number)))?;
    let spec = JobSpec::prepared(fil::CircuitId::Update(proof), parts).with_priority(priority(req.priority));
    Ok((spec, request_id, format!("{proof:?}")))
}

impl Service {
    /// `max_input`: the largest C1 accepted (the smaller of the message and Ingest
    /// limits).
    ///
    /// # Errors
    /// The results directory cannot be created.
    pub(super) fn new(
        engine: Engine,
        cfg: &DaemonConfig,
        max_input: usize,
        listeners: Arc<[Arc<ListenerStats>]>,
    ) -> Result<Self, String> {
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
            listeners,
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
        let kind = match ProofKind::try_from(req.proof_kind) {
            Ok(ProofKind::Unspecified) => {
                return Err(Status::invalid_argument(
                    "proof_kind is unspecified; set POREP_SEAL_COMMIT, WINNING_POST, WINDOW_POST_PARTITION or \
                     SNAP_DEALS_UPDATE",
                ))
            }
            Ok(k) => k,
            Err(_) => return Err(Status::invalid_argument(format!("unknown proof_kind {}", req.proof_kind))),
        };
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
        let input = vanilla_bytes(&req);
        if input == 0 {
            return Err(Status::invalid_argument(match kind {
                ProofKind::PorepSealCommit => "vanilla_proof is empty: it must carry the C1 output",
                _ => {
                    "vanilla_proofs is empty: it must carry one vanilla proof per sector (PoSt) or per partition \
                      (SnapDeals)"
                }
            }));
        }
        if input > self.max_input {
            return Err(Status::resource_exhausted(format!(
                "the vanilla proofs are {input} bytes, above the limit of {}",
                self.max_input
            )));
        }
        let (spec, request_id, what) = match kind {
            ProofKind::PorepSealCommit => self.porep_spec(req, &key).await?,
            ProofKind::WinningPost | ProofKind::WindowPostPartition => {
                post_spec(req, &key, kind == ProofKind::WinningPost).await?
            }
            ProofKind::SnapDealsUpdate => update_spec(req, &key).await?,
            ProofKind::Unspecified => unreachable!("refused above"),
        };
        // Serialize submissions of one request id, so that a retry racing the
        // original cannot create a second job.
        let slot = Submitting::enter(&self.submitting, &request_id);
        let _turn = slot.lock.lock().await;
        if let Some(id) = self.existing(&request_id, &key)? {
            return Ok(id);
        }
        let handle = self.engine.submit(spec).await.map_err(submit_status)?;
        let job_id = self.register(handle, &request_id, key.clone());
        info!(job = %job_id, kind = kind.as_str_name(), sector = key.sector_number, miner = key.miner_id, proof = %what, "proof submitted");
        Ok(job_id)
    }

    /// A PoRep request: its C1 output validated on receipt, so a malformed C1 is an
    /// InvalidArgument now and not a failed job later; the parsed form goes to
    /// Ingest, which does not parse again. The C1 is authoritative for the proof type
    /// and sector size: a request that says otherwise (Curio's cuzk-bench sends
    /// registered_proof 0 and a 32GiB sector size by default) is logged.
    async fn porep_spec(
        &self,
        req: proto::SubmitProofRequest,
        key: &JobKey,
    ) -> Result<(JobSpec, String, String), Status> {
        let bytes = req.vanilla_proof;
        let max = self.max_input;
        // Without a request id, the inputs themselves name the job: a client that
        // lost its connection and submits (or Proves) again finds the same job.
        let explicit_id = (!req.request_id.is_empty()).then_some(req.request_id);
        let k = key.clone();
        let (c1, request_id) = tokio::task::spawn_blocking(move || {
            let c1 = fil::parse_c1(&bytes, max)?;
            let id = explicit_id.unwrap_or_else(|| content_id(&k, &[&bytes]));
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
            warn!(
                sector_size = req.sector_size,
                c1 = ?proof,
                "request's sector_size differs from the C1 output's; proving the C1's"
            );
        }
        if fil::proof_from_number(req.registered_proof) != Some(proof) {
            warn!(
                registered_proof = req.registered_proof,
                c1 = ?proof,
                "request's registered_proof differs from the C1 output's; proving the C1's"
            );
        }
        let prover_id = fil::prover_id_from_actor(req.miner_id);
        fil::check_replica_id(&c1, &prover_id, req.sector_number).map_err(|e| {
            Status::invalid_argument(format!("miner {} sector {}: {e}", req.miner_id, req.sector_number))
        })?;
        let spec = JobSpec::porep_parsed(c1, prover_id, req.sector_number).with_priority(priority(req.priority));
        Ok((spec, request_id, format!("{proof:?}")))
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
                circuit_id: p.curio_id(),
                tier: proto::srs_status::Tier::Hot as i32,
                size_bytes: bytes,
                ref_count: u32::try_from(refs).unwrap_or(u32::MAX),
            })
            .collect();
        // Per proof kind, in jobs, under the names Curio's server uses; per-stage
        // queues are in cuzk.ext.v1's GetPipeline.
        let queues = snap
            .jobs
            .by_kind
            .iter()
            .filter_map(|k| {
                let name = match k.kind {
                    "porep" => "porep-c2",
                    "snap_deals" => "snap-update",
                    "window_post" => "window-post",
                    "winning_post" => "winning-post",
                    _ => return None,
                };
                Some(proto::QueueStatus {
                    proof_kind: name.to_string(),
                    pending: u32::try_from(k.pending).unwrap_or(u32::MAX),
                    in_progress: u32::try_from(k.in_progress).unwrap_or(u32::MAX),
                })
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
            listeners: self.listeners.iter().map(|l| listener_status(l)).collect(),
        }))
    }

    async fn get_metrics(
        &self,
        _: Request<proto::GetMetricsRequest>,
    ) -> Result<Response<proto::GetMetricsResponse>, Status> {
        let snap = self.engine.snapshot().await;
        let mut text = tokio::task::spawn_blocking(move || crate::metrics::render(&snap))
            .await
            .map_err(|e| Status::internal(format!("metrics: {e}")))?;
        text.push_str(&super::listener::render(&self.listeners));
        Ok(Response::new(proto::GetMetricsResponse { prometheus_text: text }))
    }

    async fn preload_srs(
        &self,
        request: Request<proto::PreloadSrsRequest>,
    ) -> Result<Response<proto::PreloadSrsResponse>, Status> {
        let proof = circuit_for_id(&request.into_inner().circuit_id)?;
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
        let proof = circuit_for_id(&request.into_inner().circuit_id)?;
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

//! The `cuzk.v1.ProvingEngine` service over the engine: [`Service`], the jobs it
//! knows (in memory, and finished ones in the results directory), submission
//! (checks, then the request's job specification, then one job per request id),
//! registering a job so that its result is stored before it is published, awaiting
//! and expiring jobs. Its other parts, by role:
//! - `rpc.rs`: every RPC of `cuzk.v1.ProvingEngine`;
//! - `specs.rs`: a request's job specification (PoRep, PoSt, SnapDeals), its inputs
//!   checked on receipt;
//! - `request_id.rs`: idempotency: request ids bound to their inputs, one
//!   submission of a request id at a time, the id of a request that carries none;
//! - `convert.rs`: between the engine's types and the gRPC ones (results, errors,
//!   priorities, device and listener status).

// tonic::Status is 176 bytes; every gRPC handler returns it, as tonic requires.
#![allow(clippy::result_large_err)]

mod convert;
mod request_id;
mod rpc;
mod specs;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use tokio::sync::{watch, Notify};
use tonic::Status;
use tracing::{info, warn};

pub(super) use self::convert::{priority, submit_status};
use self::{
    convert::to_response,
    request_id::{inputs_digest, SubmitLocks, Submitting, MAX_REQUEST_ID},
    specs::{post_spec, update_spec, vanilla_bytes},
};
use super::{
    listener::ListenerStats,
    proto::{self, await_proof_response::Status as JobStatus, ProofKind},
    results::{JobKey, Record, Results},
    DaemonConfig,
};
use crate::{actors::engine::Canceller, Engine, JobHandle, JobTimings};

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
    /// Decoded requests not yet taken by the engine (`intake.rs`).
    pub(super) intake: Arc<super::intake::Intake>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        let results = match cfg.results_dir()? {
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
            intake: super::intake::Intake::new(cfg.max_waiting_inputs),
        })
    }

    /// The results directory, if results are kept on disk.
    pub(super) fn results_store(&self) -> Option<Arc<Results>> {
        self.results.clone()
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
            // A request id whose job left memory still names it while its result is
            // stored: a retry is answered from the store, not proved again.
            let stored = |id: &String| self.results.as_ref().is_some_and(|r| r.has(id));
            lock(&self.by_request).retain(|_, id| live.contains(id) || stored(id));
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
        // From here until the engine takes the job (or this returns), the decoded
        // request counts among the waiting ones; beyond the bound it is refused.
        let _waiting = self
            .intake
            .enter(matches!(kind, ProofKind::WinningPost | ProofKind::WindowPostPartition), kind.as_str_name())?;
        if req.request_id.len() > MAX_REQUEST_ID {
            return Err(Status::invalid_argument(format!(
                "request_id is {} bytes; at most {MAX_REQUEST_ID}",
                req.request_id.len()
            )));
        }
        // A C1 may be 100 MiB: hashed on a blocking thread (the request moves there
        // and back, uncopied).
        let (req, inputs) = tokio::task::spawn_blocking(move || {
            let d = inputs_digest(&req);
            (req, d)
        })
        .await
        .map_err(|e| Status::internal(format!("hashing the request: {e}")))?;
        let key = JobKey {
            kind: req.proof_kind,
            miner_id: req.miner_id,
            sector_number: req.sector_number,
            registered_proof: req.registered_proof,
            inputs,
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
                // A failed write is logged at error, counted and shown by Results
                // itself; the proof is still returned (it is valid), only not durable.
                if let Err(e) = tokio::task::spawn_blocking(move || results.write(&rec)).await {
                    tracing::error!(job = %id2, error = %e, "result not stored: the writer panicked");
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

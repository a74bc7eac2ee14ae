//! The engine: starts the topology on its own threads and is the library entry
//! point (submit, await, cancel, metrics, shutdown). Its methods can be called
//! from any thread, async or not — but not from inside the engine's own actors.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, OnceLock,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use actix::prelude::*;
use serde::Serialize;
use tokio::sync::oneshot;
use tracing::info;

use crate::{
    budget::{BudgetSnapshot, Ledger},
    config::Config,
    ground::{CancelToken, EngineError, JobContext, JobError, JobId, JobSpec, SubmitError},
    ingest::Ingest,
    metrics::StageSnapshot,
    runtime::{StageActor, StageControl, WorkItem},
    services::{select_backend, SelectedBackend},
    timeline::Timeline,
    topology,
    tracker::{Cancel, Counts, FailAll, JobCounts, JobResult, JobTracker, Register},
};

struct Running {
    system: System,
    thread: JoinHandle<()>,
    /// The stages' threads: joined at shutdown, so that when it returns no actor holds
    /// the backend (a later engine in the same process gets the device's memory back).
    arbiters: Vec<actix_rt::Arbiter>,
}

struct Inner {
    ingest: Addr<StageActor<Ingest>>,
    ingest_express: crate::runtime::ExpressLane<crate::ground::JobInput>,
    params: Arc<crate::services::ParamCache>,
    recordings: Arc<crate::services::RecordingCache>,
    tracker: Addr<JobTracker>,
    host_ledger: Arc<Ledger>,
    stages: Vec<Arc<dyn StageControl>>,
    /// The high half of every job id of this engine: random per start.
    epoch: u64,
    next_id: AtomicU64,
    started: Instant,
    timeline: Arc<Timeline>,
    backend: &'static str,
    backend_arc: Arc<dyn cuzk_gpu::Backend>,
    /// Added to each job's priority by kind (`[ingest.priority]`).
    kind_priority: crate::ingest::KindPriority,
    running: Mutex<Option<Running>>,
}

/// A running proving pipeline. Cheap to clone; shut down with [`Engine::shutdown`]
/// (or when the last clone is dropped).
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// A submitted job: await its result, or cancel it.
pub struct JobHandle {
    id: JobId,
    rx: oneshot::Receiver<JobResult>,
    canceller: Canceller,
}

/// Cancels one job; cloneable, usable after the handle is consumed by `wait`.
#[derive(Clone)]
pub struct Canceller {
    id: JobId,
    token: CancelToken,
    tracker: Addr<JobTracker>,
}

impl Canceller {
    /// Cancels the job: queued partitions are dropped, in-flight ones stop at their
    /// next stage boundary, reservations are returned, and the job's result is
    /// [`JobError::Cancelled`] unless it had already ended.
    pub async fn cancel(&self) {
        self.token.cancel();
        let _ = self.tracker.send(Cancel(self.id)).await;
    }

    /// [`Canceller::cancel`] from synchronous code.
    pub fn cancel_blocking(&self) {
        futures::executor::block_on(self.cancel());
    }
}

impl JobHandle {
    /// The job's id.
    pub fn id(&self) -> JobId {
        self.id
    }

    /// A handle that can cancel this job.
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }

    /// Waits for the job's terminal result.
    ///
    /// # Errors
    /// The job's [`JobError`].
    pub async fn wait(self) -> JobResult {
        self.rx.await.unwrap_or(Err(JobError::Shutdown))
    }

    /// [`JobHandle::wait`] from synchronous code.
    ///
    /// # Errors
    /// The job's [`JobError`].
    pub fn wait_blocking(self) -> JobResult {
        futures::executor::block_on(self.wait())
    }
}

/// Everything the engine can report about itself.
#[derive(Clone, Debug, Serialize)]
pub struct EngineSnapshot {
    pub backend: &'static str,
    pub uptime: Duration,
    pub stages: Vec<StageSnapshot>,
    pub host_budget: BudgetSnapshot,
    pub jobs: JobCounts,
    /// The backend's pinned host pool (CUDA backend only).
    #[serde(skip)]
    pub pinned: Option<cuzk_gpu::pinned::PinnedStats>,
    /// Per-device VRAM budget and CUDA error counters (CUDA backend only).
    #[serde(skip)]
    pub devices: Vec<cuzk_gpu::DeviceStats>,
    /// Host bytes held by recorded circuit structures (pre-compiled synthesis).
    pub precompiled_bytes: u64,
    /// Parameter, verifying-key and SRS files checked against Filecoin's published
    /// digests so far, with what the last check found (`cuzk_filecoin::digest`).
    pub param_digests: Vec<(std::path::PathBuf, cuzk_filecoin::DigestStatus)>,
}

impl Engine {
    /// Validates `cfg`, picks the backend, and starts every actor.
    ///
    /// # Errors
    /// [`EngineError`] for an invalid config, an unavailable backend, or a failure
    /// to start.
    pub fn start(cfg: Config) -> Result<Engine, EngineError> {
        cfg.validate()?;
        let backend = select_backend(&cfg.backend)?;
        Self::start_on(cfg, backend)
    }

    /// [`Engine::start`] on a backend the caller built (an embedder's own, or a
    /// test's), instead of the one `[backend]` selects.
    ///
    /// # Errors
    /// [`EngineError`] for an invalid config or a failure to start.
    pub fn start_with_backend(cfg: Config, backend: SelectedBackend) -> Result<Engine, EngineError> {
        cfg.validate()?;
        Self::start_on(cfg, backend)
    }

    fn start_on(cfg: Config, backend: SelectedBackend) -> Result<Engine, EngineError> {
        let backend_name = backend.backend.name();
        let backend_arc = backend.backend.clone();
        let kind_priority = cfg.ingest.priority.clone();
        let started = Instant::now();
        let timeline = Arc::new(Timeline::new(started, cfg.timeline.enabled, cfg.timeline.max_events));
        let tl = timeline.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cuzk-engine".into())
            .spawn(move || {
                let sys = System::new();
                let built = sys.block_on(async { topology::build(&cfg, backend, tl) });
                let ok = built.is_ok();
                let _ = tx.send(built.map(|t| (t, System::current())));
                if ok {
                    let _ = sys.run();
                }
            })
            .map_err(|e| EngineError::Start(e.to_string()))?;
        let (topo, system) = rx.recv().map_err(|_| EngineError::Start("engine thread exited".into()))??;
        info!(backend = backend_name, host_budget = %crate::ByteSize(topo.host_ledger.capacity()), "engine started");
        Ok(Engine {
            inner: Arc::new(Inner {
                ingest: topo.ingest,
                ingest_express: topo.ingest_express,
                params: topo.params,
                recordings: topo.recordings,
                tracker: topo.tracker,
                host_ledger: topo.host_ledger,
                stages: topo.stages,
                epoch: rand::random(),
                next_id: AtomicU64::new(1),
                started,
                timeline,
                backend: backend_name,
                backend_arc,
                kind_priority,
                running: Mutex::new(Some(Running { system, thread, arbiters: topo.arbiters })),
            }),
        })
    }

    /// Filecoin parameters loaded by Ingest (preload, evict, status).
    pub fn params(&self) -> &Arc<crate::services::ParamCache> {
        &self.inner.params
    }

    /// Recorded circuit structures (pre-compiled synthesis) Synthesize uses.
    pub fn recordings(&self) -> &Arc<crate::services::RecordingCache> {
        &self.inner.recordings
    }

    /// The timeline recorder: enable it, export Chrome trace JSON, plot utilization.
    pub fn timeline(&self) -> &Arc<Timeline> {
        &self.inner.timeline
    }

    /// The pinned host pool of the backend, if it has one.
    pub fn pinned(&self) -> Option<cuzk_gpu::pinned::PinnedStats> {
        self.inner.backend_arc.pinned_stats()
    }

    /// The backend's devices (VRAM, health, calls and the time they held each);
    /// empty without a GPU.
    pub fn devices(&self) -> Vec<cuzk_gpu::DeviceStats> {
        self.inner.backend_arc.device_stats()
    }

    /// The backend in use ("cpu" or "cuda").
    pub fn backend(&self) -> &'static str {
        self.inner.backend
    }

    fn context(&self, spec: &JobSpec) -> Result<Arc<JobContext>, SubmitError> {
        let ctx = JobContext {
            id: JobId { epoch: self.inner.epoch, seq: self.inner.next_id.fetch_add(1, Ordering::Relaxed) },
            priority: spec.priority.saturating_add(self.inner.kind_priority.of(spec.input.kind())),
            srs: OnceLock::new(),
            shape: OnceLock::new(),
            randomness_spec: spec.randomness.clone(),
            aggregation: OnceLock::new(),
            cancel: CancelToken::default(),
            submitted: Instant::now(),
            fault: spec.fault,
            kind: spec.input.kind(),
            started: Default::default(),
        };
        // Circuit jobs know their shape now; PoRep jobs learn it in Ingest.
        if let (Some(srs), Some(n)) = (&spec.srs, spec.partitions) {
            ctx.set_shape(srs.clone(), n).map_err(SubmitError::Invalid)?;
        }
        Ok(Arc::new(ctx))
    }

    fn handle(&self, ctx: &JobContext, rx: oneshot::Receiver<JobResult>) -> JobHandle {
        JobHandle {
            id: ctx.id,
            rx,
            canceller: Canceller { id: ctx.id, token: ctx.cancel.clone(), tracker: self.inner.tracker.clone() },
        }
    }

    /// Submits a job, waiting while the pipeline's intake is full (backpressure).
    ///
    /// # Errors
    /// [`SubmitError::Invalid`] for a malformed spec, [`SubmitError::NotRunning`]
    /// after shutdown.
    pub async fn submit(&self, spec: JobSpec) -> Result<JobHandle, SubmitError> {
        let ctx = self.context(&spec)?;
        let (tx, rx) = oneshot::channel();
        // From before Register is sent until the intake takes the item, a dropped
        // future (the caller gave up while backpressure held it, or while Register
        // was in the tracker's mailbox) must withdraw the job, or the tracker would
        // count it in flight forever. Withdrawing a job never registered (the
        // future dropped before Register was queued) cancels an unknown id: nothing.
        let mut withdraw = Withdraw { ctx: Some(ctx.clone()), tracker: self.inner.tracker.clone() };
        if self.inner.tracker.send(Register { ctx: ctx.clone(), done: tx }).await.is_err() {
            withdraw.ctx = None;
            return Err(SubmitError::NotRunning);
        }
        let item = WorkItem::new(ctx.clone(), 0, spec.input);
        // An urgent job goes past a full intake mailbox (runtime docs: express lane).
        let item = match self.inner.ingest_express.offer(item) {
            Ok(()) => {
                withdraw.ctx = None;
                return Ok(self.handle(&ctx, rx));
            }
            Err(item) => item,
        };
        if self.inner.ingest.send(item).await.is_err() {
            drop(withdraw);
            return Err(SubmitError::NotRunning);
        }
        withdraw.ctx = None;
        Ok(self.handle(&ctx, rx))
    }

    /// [`Engine::submit`] from synchronous code (blocks while the intake is full).
    ///
    /// # Errors
    /// As [`Engine::submit`].
    pub fn submit_blocking(&self, spec: JobSpec) -> Result<JobHandle, SubmitError> {
        futures::executor::block_on(self.submit(spec))
    }

    /// Submits without waiting: [`SubmitError::Busy`] when the intake is full.
    ///
    /// # Errors
    /// [`SubmitError::Busy`], or as [`Engine::submit`].
    pub fn try_submit(&self, spec: JobSpec) -> Result<JobHandle, SubmitError> {
        let ctx = self.context(&spec)?;
        let (tx, rx) = oneshot::channel();
        // Registered first so the tracker knows the job before any partition ends;
        // withdrawn (as cancelled, never awaited) if the intake refuses it.
        futures::executor::block_on(self.inner.tracker.send(Register { ctx: ctx.clone(), done: tx }))
            .map_err(|_| SubmitError::NotRunning)?;
        match self.inner.ingest.try_send(WorkItem::new(ctx.clone(), 0, spec.input)) {
            Ok(()) => Ok(self.handle(&ctx, rx)),
            Err(e) => {
                let _ = futures::executor::block_on(self.inner.tracker.send(Cancel(ctx.id)));
                Err(match e {
                    SendError::Full(_) => SubmitError::Busy,
                    SendError::Closed(_) => SubmitError::NotRunning,
                })
            }
        }
    }

    /// Cancels a job by id; returns whether it was still in flight.
    pub async fn cancel(&self, id: JobId) -> bool {
        self.inner.tracker.send(Cancel(id)).await.unwrap_or(false)
    }

    /// Current metrics of every stage, the host budget and the job counters.
    pub async fn snapshot(&self) -> EngineSnapshot {
        let jobs = self.inner.tracker.send(Counts).await.unwrap_or_default();
        EngineSnapshot {
            backend: self.inner.backend,
            uptime: self.inner.started.elapsed(),
            stages: self.stage_snapshots(),
            host_budget: self.inner.host_ledger.snapshot(),
            jobs,
            pinned: self.pinned(),
            devices: self.devices(),
            precompiled_bytes: self.inner.recordings.bytes(),
            param_digests: self.inner.params.digests().outcomes(),
        }
    }

    /// [`Engine::snapshot`] from synchronous code.
    pub fn snapshot_blocking(&self) -> EngineSnapshot {
        futures::executor::block_on(self.snapshot())
    }

    /// Stage counters only (no message round trip).
    pub fn stage_snapshots(&self) -> Vec<StageSnapshot> {
        self.inner.stages.iter().map(|s| s.metrics().snapshot()).collect()
    }

    /// The host budget itself: memory held outside the pipeline (a daemon's synthetic
    /// parameters, for example) is reserved here so the stages see it.
    pub fn host_ledger(&self) -> &Arc<Ledger> {
        &self.inner.host_ledger
    }

    /// The host budget's counters (no message round trip).
    pub fn host_budget(&self) -> BudgetSnapshot {
        self.inner.host_ledger.snapshot()
    }

    /// Ends every job in flight with [`JobError::Shutdown`] and stops all actors.
    /// Idempotent.
    pub fn shutdown(&self) {
        let Some(r) = self.inner.running.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        let _ = futures::executor::block_on(self.inner.tracker.send(FailAll));
        for s in &self.inner.stages {
            s.close();
        }
        // A stage thread ends once its items do. One stuck in a device call that
        // hung never does: shutdown does not wait for it.
        let abandoned: u64 = self.inner.stages.iter().map(|s| s.metrics().snapshot().abandoned).sum();
        let wait = if abandoned > 0 { STUCK_JOIN_WAIT } else { JOIN_WAIT };
        let deadline = Instant::now() + wait;
        r.system.stop();
        join_until("cuzk-engine", deadline, move || drop(r.thread.join()));
        for a in r.arbiters {
            a.stop();
            join_until("a stage arbiter", deadline, move || drop(a.join()));
        }
        info!("engine stopped");
    }
}

/// How long shutdown waits for the engine's threads: the items they run end
/// first (a 64GiB synthesis takes minutes), but not forever.
const JOIN_WAIT: Duration = Duration::from_secs(600);
/// The same after an item was given up in a hung device call: its thread never
/// ends.
const STUCK_JOIN_WAIT: Duration = Duration::from_secs(5);

/// Runs `join` (a thread's join) until it returns or `deadline` passes; then the
/// thread is left behind, said at error.
fn join_until(what: &str, deadline: Instant, join: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let joiner = std::thread::Builder::new().name("cuzk-join".into()).spawn(move || {
        join();
        let _ = tx.send(());
    });
    if joiner.is_err() {
        return;
    }
    if rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
        tracing::error!(
            thread = what,
            "engine thread still running at shutdown (stuck in a device call?): left behind"
        );
    }
}

/// Withdraws a registered job that never reached the intake: cancels its token (an
/// item already queued is dropped at its next stage boundary) and ends it in the
/// tracker. Runs in `Drop`, possibly inside an executor that must not block, so the
/// message is sent from a short-lived thread.
struct Withdraw {
    ctx: Option<Arc<JobContext>>,
    tracker: Addr<JobTracker>,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some(ctx) = self.ctx.take() else { return };
        ctx.cancel.cancel();
        let (tracker, id) = (self.tracker.clone(), ctx.id);
        let _ = std::thread::Builder::new()
            .name("cuzk-withdraw".into())
            .spawn(move || futures::executor::block_on(tracker.send(Cancel(id))));
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(r) = self.running.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            r.system.stop();
            let _ = r.thread.join();
        }
    }
}

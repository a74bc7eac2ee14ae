//! The stage runtime shared by every stage: [`Stage`] is what a stage implements,
//! [`StageActor`] is how it runs.
//!
//! ```text
//!  upstream workers ──send().await──▶ [mailbox: mailbox_capacity]
//!                                        │ StageActor::handle: push, or wait for room
//!                                        ▼
//!                               [StageQueue: queue_capacity, by priority]
//!                                        │ pop when free (credits)
//!                                        ▼
//!                     `workers` worker tasks: budget reservation → spawn_blocking(process)
//!                                        │ send().await (blocks while downstream is full)
//!                                        ▼
//!                                  next stage / tracker
//! ```
//!
//! Bounds: at most `queue_capacity` items queued, plus one held while the actor waits
//! for room, plus the mailbox (`mailbox_capacity`, and as in any futures-style channel,
//! one parked message per sender handle). At most `workers` items in processing.
//!
//! The express lane: an item of a job whose priority reaches the lane's threshold
//! (`[ingest.priority] express`: WinningPoSt and WindowPoSt by default) is pushed by
//! the upstream worker straight into the next stage's priority queue, past the FIFO
//! mailbox that backpressure fills, up to `queue_capacity` items beyond the queue's
//! capacity; when even that is full it takes the mailbox like any item. Without it a
//! deadline proof waits behind every PoRep partition in each full mailbox. Each stage
//! also runs one express worker beside its `workers`, which takes only such items, so
//! that one does not wait for a worker busy with (or blocked sending on) bulk work.

pub mod queue;
pub mod urgent_pool;

/// Lowers the calling thread's scheduling priority to `nice` (Linux: the nice value
/// is per thread); never raises it, which needs privileges.
pub fn lower_thread_priority(nice: i32) {
    // SAFETY: plain syscalls on the calling thread (who = 0), no pointers.
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    unsafe {
        let current = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice > current {
            libc::setpriority(libc::PRIO_PROCESS, 0, nice);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

use std::{
    sync::{atomic::Ordering::Relaxed, Arc, RwLock},
    time::{Duration, Instant},
};

use actix::prelude::*;
use tracing::{debug, info_span, warn, Instrument};

use crate::{
    budget::{BudgetActor, Class, Reservation, Reserve},
    ground::{FaultKind, JobContext, JobId, JobTimings, PartitionFailed, StageError, StageName},
    metrics::StageMetrics,
    timeline::Timeline,
};
pub use queue::StageQueue;

/// One partition (or, before Ingest splits it, one job) moving between stages.
pub struct WorkItem<T> {
    pub job: Arc<JobContext>,
    pub partition: u32,
    pub payload: T,
    /// Host memory held for this partition; returned when dropped.
    pub reservation: Option<Reservation>,
    /// Per-stage timings of this partition so far.
    pub trace: JobTimings,
    /// Time of the current stage's `process` spent blocked on backpressure from
    /// downstream rather than working (StagePcie: waiting for a free device staging
    /// buffer, which only ProveGpu frees). A stage adds it to the items it returns;
    /// the runtime takes the largest among them, counts it as the stage's blocked
    /// time instead of busy time, and resets it before the items move on.
    pub blocked: Duration,
    pub(crate) enqueued: Instant,
}

impl<T: Send + 'static> Message for WorkItem<T> {
    type Result = ();
}

impl<T> WorkItem<T> {
    pub(crate) fn new(job: Arc<JobContext>, partition: u32, payload: T) -> Self {
        WorkItem {
            job,
            partition,
            payload,
            reservation: None,
            trace: JobTimings::default(),
            blocked: Duration::ZERO,
            enqueued: Instant::now(),
        }
    }

    /// Replaces the payload, keeping job, partition, reservation, trace and blocked time.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> WorkItem<U> {
        let (payload, item) = self.take();
        item.with(f(payload))
    }

    /// Splits off the payload.
    pub fn take(self) -> (T, WorkItem<()>) {
        let WorkItem { job, partition, payload, reservation, trace, blocked, enqueued } = self;
        (payload, WorkItem { job, partition, payload: (), reservation, trace, blocked, enqueued })
    }
}

impl WorkItem<()> {
    /// Attaches a payload.
    pub fn with<U>(self, payload: U) -> WorkItem<U> {
        let WorkItem { job, partition, reservation, trace, blocked, enqueued, .. } = self;
        WorkItem { job, partition, payload, reservation, trace, blocked, enqueued }
    }
}

/// What a stage implements. `process` runs on a blocking worker thread, so it may
/// use all the CPU it wants (rayon inside is fine).
pub trait Stage: Send + Sync + Sized + 'static {
    type In: Send + 'static;
    type Out: Send + 'static;
    /// Which stage this is (config section, metric label, error messages).
    const NAME: StageName;

    /// Host-memory bytes to reserve before `process` runs (0 = none). The runtime
    /// waits for the reservation (cancellable) and attaches it to the item.
    ///
    /// # Errors
    /// When the item cannot be sized; the partition fails with it.
    fn reservation_bytes(&self, _item: &WorkItem<Self::In>) -> Result<u64, StageError> {
        Ok(0)
    }

    /// Does the stage's work: one item in, one or more out. Time it spent blocked on
    /// downstream backpressure goes into its outputs' [`WorkItem::blocked`], so that
    /// the runtime counts it apart from busy time.
    ///
    /// # Errors
    /// Any failure; the partition's job fails with an error naming this stage.
    fn process(&self, item: WorkItem<Self::In>) -> Result<Vec<WorkItem<Self::Out>>, StageError>;
}

/// Builds (and on restart, rebuilds) a stage.
pub type StageFactory<S> = Arc<dyn Fn() -> Result<S, StageError> + Send + Sync>;

/// Sizes of a stage's buffers and pool, from its config section.
#[derive(Clone, Copy, Debug)]
pub struct StageLimits {
    pub mailbox_capacity: usize,
    pub queue_capacity: usize,
    pub workers: usize,
}

/// A stage's queue as an express lane's target (see the module docs).
pub trait Express<T>: Send + Sync {
    /// Pushes `item` into the queue now, or gives it back when the lane is full.
    ///
    /// # Errors
    /// The item, when the queue is beyond its capacity by the lane's slack.
    // The item comes back to be sent by mailbox; boxing it would allocate per item.
    #[allow(clippy::result_large_err)]
    fn try_push(&self, item: WorkItem<T>) -> Result<(), WorkItem<T>>;
}

/// Where urgent items go past the mailbox, and from which job priority.
pub struct ExpressLane<T> {
    pub target: Arc<dyn Express<T>>,
    /// Items of jobs with at least this priority take the lane.
    pub threshold: i32,
}

impl<T> Clone for ExpressLane<T> {
    fn clone(&self) -> Self {
        ExpressLane { target: self.target.clone(), threshold: self.threshold }
    }
}

impl<T> ExpressLane<T> {
    /// Takes `item` if it is urgent and the lane has room; otherwise gives it back.
    ///
    /// # Errors
    /// The item, for the mailbox.
    #[allow(clippy::result_large_err)]
    pub fn offer(&self, item: WorkItem<T>) -> Result<(), WorkItem<T>> {
        if item.job.priority >= self.threshold {
            self.target.try_push(item)
        } else {
            Err(item)
        }
    }
}

/// State shared by the actor and its worker tasks; survives actor restarts.
struct Shared<S: Stage> {
    /// The express worker's threshold: it takes only items of at least this job
    /// priority (none: no express worker).
    express_at: Option<i32>,
    stage: RwLock<Arc<S>>,
    factory: StageFactory<S>,
    queue: StageQueue<WorkItem<S::In>>,
    next: Recipient<WorkItem<S::Out>>,
    /// The next stage's express lane (none before the tracker).
    express_next: Option<ExpressLane<S::Out>>,
    /// Where failures go (the job tracker).
    failures: Recipient<PartitionFailed>,
    budget: Option<Addr<BudgetActor>>,
    metrics: Arc<StageMetrics>,
    limits: StageLimits,
    timeline: Arc<Timeline>,
}

impl<S: Stage> Shared<S> {
    fn current(&self) -> Arc<S> {
        self.stage.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Type-erased handle on a stage, for the tracker (purging a finished job's items)
/// and the engine (metrics, shutdown).
pub trait StageControl: Send + Sync {
    fn name(&self) -> StageName;
    /// Drops every queued item of `job`; returns how many.
    fn purge(&self, job: JobId) -> usize;
    fn metrics(&self) -> Arc<StageMetrics>;
    /// Lets the workers exit once the queue is drained.
    fn close(&self);
}

impl<S: Stage> Express<S::In> for Shared<S> {
    #[allow(clippy::result_large_err)]
    fn try_push(&self, mut item: WorkItem<S::In>) -> Result<(), WorkItem<S::In>> {
        item.enqueued = Instant::now();
        let priority = item.job.priority;
        let m = &self.metrics;
        // Counted before the push: a worker may pop (and count down) the item at once.
        StageMetrics::gauge_up(&m.queue_len, &m.queue_peak);
        if let Err(item) = self.queue.try_push_urgent(priority, item, self.limits.queue_capacity) {
            StageMetrics::gauge_down(&m.queue_len);
            return Err(item);
        }
        m.received.fetch_add(1, Relaxed);
        m.pushed.fetch_add(1, Relaxed);
        Ok(())
    }
}

impl<S: Stage> StageControl for Shared<S> {
    fn name(&self) -> StageName {
        S::NAME
    }
    fn purge(&self, job: JobId) -> usize {
        let n = self.queue.remove_where(|i| i.job.id == job).len();
        self.metrics.queue_len.fetch_sub(n as u64, Relaxed);
        self.metrics.cancelled.fetch_add(n as u64, Relaxed);
        n
    }
    fn metrics(&self) -> Arc<StageMetrics> {
        self.metrics.clone()
    }
    fn close(&self) {
        self.queue.close();
    }
}

/// The actor of one stage: the mailbox in front of the stage's queue, and the
/// supervised owner of the stage's state.
pub struct StageActor<S: Stage> {
    shared: Arc<Shared<S>>,
    workers_started: bool,
}

/// Sent by a worker after the stage's code panicked: the actor stops and its
/// actix `Supervisor` restarts it, rebuilding the stage from its factory.
#[derive(Message)]
#[rtype(result = "()")]
struct Restart;

impl<S: Stage> StageActor<S> {
    /// Starts the stage on `arbiter` under an actix `Supervisor`; returns its
    /// address, its control handle and its queue as an express-lane target.
    ///
    /// # Errors
    /// When the factory cannot build the stage.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    pub fn start(
        arbiter: &ArbiterHandle,
        factory: StageFactory<S>,
        limits: StageLimits,
        next: Recipient<WorkItem<S::Out>>,
        express_next: Option<ExpressLane<S::Out>>,
        failures: Recipient<PartitionFailed>,
        budget: Option<Addr<BudgetActor>>,
        timeline: Arc<Timeline>,
        express_at: Option<i32>,
    ) -> Result<(Addr<Self>, Arc<dyn StageControl>, Arc<dyn Express<S::In>>), StageError> {
        let stage = factory()?;
        let metrics = Arc::new(StageMetrics::new(S::NAME, limits.workers, limits.queue_capacity, timeline.epoch()));
        let shared = Arc::new(Shared {
            express_at,
            stage: RwLock::new(Arc::new(stage)),
            factory,
            queue: StageQueue::new(limits.queue_capacity),
            next,
            express_next,
            failures,
            budget,
            metrics,
            limits,
            timeline,
        });
        let control: Arc<dyn StageControl> = shared.clone();
        let express: Arc<dyn Express<S::In>> = shared.clone();
        let addr = Supervisor::start_in_arbiter(arbiter, move |ctx: &mut Context<Self>| {
            ctx.set_mailbox_capacity(limits.mailbox_capacity);
            StageActor { shared, workers_started: false }
        });
        Ok((addr, control, express))
    }
}

impl<S: Stage> Actor for StageActor<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.shared.limits.mailbox_capacity);
        if !self.workers_started {
            self.workers_started = true;
            for w in 0..self.shared.limits.workers {
                actix_rt::spawn(worker_loop(self.shared.clone(), ctx.address(), w, i32::MIN));
            }
            // One more worker that takes only urgent items, so a deadline proof does
            // not wait for a bulk item to finish (or to be sent on) to get a worker.
            if let Some(min) = self.shared.express_at {
                actix_rt::spawn(worker_loop(self.shared.clone(), ctx.address(), self.shared.limits.workers, min));
            }
        }
    }
}

impl<S: Stage> Supervised for StageActor<S> {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.shared.metrics.restarts.fetch_add(1, Relaxed);
        match (self.shared.factory)() {
            Ok(s) => {
                *self.shared.stage.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(s);
                warn!(stage = %S::NAME, "stage actor restarted after a panic");
            }
            Err(e) => {
                warn!(stage = %S::NAME, error = %e, "stage restart could not rebuild the stage; keeping the previous instance")
            }
        }
    }
}

impl<S: Stage> Handler<WorkItem<S::In>> for StageActor<S> {
    type Result = ();

    fn handle(&mut self, mut item: WorkItem<S::In>, ctx: &mut Context<Self>) {
        let m = &self.shared.metrics;
        m.received.fetch_add(1, Relaxed);
        item.enqueued = Instant::now();
        let shared = self.shared.clone();
        let push = move |item: WorkItem<S::In>| {
            StageMetrics::gauge_up(&shared.metrics.queue_len, &shared.metrics.queue_peak);
            shared.metrics.pushed.fetch_add(1, Relaxed);
            shared.queue.push(item.job.priority, item);
        };
        if self.shared.queue.has_space() {
            push(item);
        } else {
            // Stop reading the mailbox until a worker frees a slot: the mailbox then
            // fills and upstream senders wait — this is the backpressure.
            let shared = self.shared.clone();
            ctx.wait(
                async move {
                    shared.queue.wait_space().await;
                    push(item);
                }
                .into_actor(self),
            );
        }
    }
}

impl<S: Stage> Handler<Restart> for StageActor<S> {
    type Result = ();

    fn handle(&mut self, _: Restart, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

async fn fail<S: Stage>(shared: &Shared<S>, job: JobId, partition: u32, error: StageError) {
    shared.metrics.failed.fetch_add(1, Relaxed);
    // The tracker's mailbox is bounded too; it only does bookkeeping, so this wait is short.
    let _ = shared.failures.send(PartitionFailed { job, partition, stage: S::NAME, error }).await;
}

/// Operation time in `after` beyond `before` (ops are accumulated by name).
fn ops_added(
    before: &[(&'static str, std::time::Duration)],
    after: &[(&'static str, std::time::Duration)],
) -> Vec<(&'static str, std::time::Duration)> {
    after
        .iter()
        .map(|&(name, d)| {
            let prev = before.iter().find(|(n, _)| *n == name).map(|(_, d)| *d).unwrap_or_default();
            (name, d.saturating_sub(prev))
        })
        .filter(|(_, d)| !d.is_zero())
        .collect()
}

/// One worker: pops, reserves, processes on a blocking thread, forwards.
async fn worker_loop<S: Stage>(shared: Arc<Shared<S>>, actor: Addr<StageActor<S>>, worker: usize, min: i32) {
    let m = shared.metrics.clone();
    while let Some(mut item) = shared.queue.pop_from(min).await {
        StageMetrics::gauge_down(&m.queue_len);
        m.popped.fetch_add(1, Relaxed);
        let waited = item.enqueued.elapsed();
        StageMetrics::add(&m.queue_wait_ns, waited);
        item.trace.stages[S::NAME.index()].queue_wait += waited;
        if item.job.cancel.is_cancelled() {
            m.cancelled.fetch_add(1, Relaxed);
            continue;
        }
        let (job, partition) = (item.job.id, item.partition);
        let span = info_span!("stage", stage = S::NAME.as_str(), job = %job, partition, worker);
        let stage = shared.current();

        // Reserve memory before allocating; give up the wait if the job is cancelled.
        let bytes = match stage.reservation_bytes(&item) {
            Ok(b) => b,
            Err(e) => {
                fail(&shared, job, partition, e).await;
                continue;
            }
        };
        // Deadline work reserves ahead of bulk work, into the deadline reserve
        // (budget/ledger.rs): it never waits behind a PoRep partition for room.
        let class = if shared.express_at.is_some_and(|t| item.job.priority >= t) { Class::Urgent } else { Class::Bulk };
        if let (true, Some(budget)) = (bytes > 0, shared.budget.as_ref()) {
            let t = Instant::now();
            let granted = tokio::select! {
                r = budget.send(Reserve { bytes, class, priority: item.job.priority }) => Some(r),
                _ = item.job.cancel.cancelled() => None,
            };
            StageMetrics::add(&m.budget_wait_ns, t.elapsed());
            item.trace.stages[S::NAME.index()].queue_wait += t.elapsed();
            match granted {
                None => {
                    m.cancelled.fetch_add(1, Relaxed);
                    continue;
                }
                Some(Ok(Ok(r))) => {
                    m.reserved_bytes.fetch_add(bytes, Relaxed);
                    match item.reservation.as_mut() {
                        Some(held) => held.merge(r),
                        None => item.reservation = Some(r),
                    }
                }
                Some(Ok(Err(e))) => {
                    fail(&shared, job, partition, e.into()).await;
                    continue;
                }
                Some(Err(e)) => {
                    fail(&shared, job, partition, StageError::Disconnected(e.to_string())).await;
                    continue;
                }
            }
        }

        StageMetrics::gauge_up(&m.in_flight, &m.in_flight_peak);
        let started = Instant::now();
        let token = m.work_started(started);
        let fault = item.job.fault_for(S::NAME, partition);
        // The timeline shows the backend operations this stage adds to the trace.
        let ops_before = if shared.timeline.is_enabled() { Some(item.trace.ops.clone()) } else { None };
        let work_span = span.clone();
        // A device call that the backend's watchdog finds hung says so here: the
        // item is given up (below) while its thread stays stuck.
        let (hung_tx, hung_rx) = tokio::sync::oneshot::channel::<String>();
        let work = actix_rt::task::spawn_blocking(move || {
            let _e = work_span.enter();
            match fault {
                Some(FaultKind::Panic) => panic!("fault injected in stage {}", S::NAME),
                Some(FaultKind::Error) => return Err(StageError::msg(format!("fault injected in stage {}", S::NAME))),
                Some(FaultKind::Delay(d)) => std::thread::sleep(d),
                // Acted on by the stage itself (ProveGpu).
                Some(FaultKind::DeviceError | FaultKind::DeviceHang) | None => {}
            }
            let process = move || {
                // Deadline work's parallel parts run in a pool bulk work never uses.
                if class == Class::Urgent {
                    urgent_pool::install(|| stage.process(item))
                } else {
                    stage.process(item)
                }
            };
            cuzk_gpu::watchdog::on_hang(move |reason| drop(hung_tx.send(reason)), process)
        });
        let result = tokio::select! {
            r = work => Ok(r),
            Ok(reason) = hung_rx => {
                // The stuck thread keeps the item and its reservation: memory a hung
                // device may still read is never freed. It is dropped (and the
                // reservation returned) if the call ever returns.
                warn!(parent: &span, error = %reason, "device call hung: the partition is given up, its thread left behind");
                m.abandoned.fetch_add(1, Relaxed);
                Err(reason)
            }
        };
        let elapsed = started.elapsed();
        StageMetrics::gauge_down(&m.in_flight);
        m.work_ended(token, Instant::now());
        let result = match result {
            Ok(r) => r,
            Err(reason) => {
                StageMetrics::add(&m.busy_ns, elapsed);
                let e = StageError::msg(format!(
                    "stuck in a device call: {reason}; the device is retired and this partition given up"
                ));
                fail(&shared, job, partition, e).await;
                continue;
            }
        };
        // What the stage reported as blocked on backpressure (`WorkItem::blocked`) is
        // not work: counted apart from busy, and reset before the items move on.
        let mut result = result;
        let blocked = match &mut result {
            Ok(Ok(outs)) => outs.iter_mut().map(|o| std::mem::take(&mut o.blocked)).max().unwrap_or_default(),
            _ => Duration::ZERO,
        }
        .min(elapsed);
        let busy = elapsed - blocked;
        StageMetrics::add(&m.busy_ns, busy);
        StageMetrics::add(&m.blocked_ns, blocked);

        let outputs = match result {
            Ok(Ok(outs)) => outs,
            Ok(Err(e)) => {
                debug!(parent: &span, error = %e, "stage failed");
                fail(&shared, job, partition, e).await;
                continue;
            }
            Err(join) => {
                let msg = if join.is_panic() { panic_message(join.into_panic()) } else { join.to_string() };
                warn!(parent: &span, panic = %msg, "stage panicked; failing the job and restarting the actor");
                m.panics.fetch_add(1, Relaxed);
                fail(&shared, job, partition, StageError::Panicked(msg)).await;
                // Detached: the mailbox may be full, and this worker must keep draining
                // the queue for the actor to get to the message.
                let actor = actor.clone();
                actix_rt::spawn(async move {
                    let _ = actor.send(Restart).await;
                });
                continue;
            }
        };
        m.completed.fetch_add(1, Relaxed);
        if let Some(before) = ops_before {
            let ops = outputs.first().map(|o| ops_added(&before, &o.trace.ops)).unwrap_or_default();
            shared.timeline.record_stage(S::NAME, worker, job.seq, partition, started, busy, blocked, &ops);
        }
        let n = outputs.len().max(1) as u32;
        let (share, blocked_share) = (busy / n, blocked / n);
        for mut out in outputs {
            if out.job.cancel.is_cancelled() {
                m.cancelled.fetch_add(1, Relaxed);
                continue;
            }
            out.trace.stages[S::NAME.index()].busy += share;
            out.trace.stages[S::NAME.index()].blocked += blocked_share;
            out.enqueued = Instant::now();
            let (oj, op) = (out.job.id, out.partition);
            m.emitted.fetch_add(1, Relaxed);
            // Urgent work goes past the next stage's mailbox (module docs).
            let out = match &shared.express_next {
                Some(lane) => match lane.offer(out) {
                    Ok(()) => continue,
                    Err(out) => out,
                },
                None => out,
            };
            // Waits while the next stage is full: backpressure.
            if let Err(e) = shared.next.send(out).instrument(span.clone()).await {
                fail(&shared, oj, op, StageError::Disconnected(e.to_string())).await;
            }
        }
    }
    debug!(stage = %S::NAME, worker, "worker exits: queue closed");
}

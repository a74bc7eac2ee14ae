//! The pipeline's topology, declared in one place.
//!
//! ```text
//! submit ─▶ Ingest ─▶ Synthesize ─▶ PrepareMsm ─▶ StagePcie ─▶ ProveGpu ─▶ Assemble ─▶ [Verify] ─▶ JobTracker
//!                       │ reserves host memory (BudgetActor)          └ returns it
//! every stage ──PartitionFailed──▶ JobTracker ──purge──▶ every stage queue
//! ```
//!
//! Stages are built from the last to the first, since each needs the address of the
//! next. Each stage actor runs on its own arbiter (thread); its heavy work runs on
//! that arbiter's blocking pool.

use std::sync::Arc;

use actix::prelude::*;

use crate::{
    assemble::Assemble,
    budget::{BudgetActor, Ledger},
    config::Config,
    ground::{EngineError, JobInput, PartitionProof, StageError},
    ingest::Ingest,
    prepare_msm::PrepareMsm,
    prove_gpu::ProveGpu,
    runtime::{ExpressLane, Stage, StageActor, StageControl, StageFactory, StageLimits, WorkItem},
    services::{ParamCache, RecordingCache, SelectedBackend},
    stage_pcie::StagePcie,
    synthesize::{self, Synthesize},
    timeline::Timeline,
    tracker::{JobTracker, SetStages},
    verify::Verify,
};

/// Handles on the running topology.
pub struct Topology {
    /// Where jobs enter.
    pub ingest: Addr<StageActor<Ingest>>,
    /// Where urgent jobs enter, past Ingest's mailbox.
    pub ingest_express: ExpressLane<JobInput>,
    pub tracker: Addr<JobTracker>,
    pub budget: Addr<BudgetActor>,
    pub host_ledger: Arc<Ledger>,
    /// Every stage, in pipeline order.
    pub stages: Vec<Arc<dyn StageControl>>,
    /// Filecoin parameters Ingest has loaded.
    pub params: Arc<ParamCache>,
    /// Recorded circuit structures Synthesize uses.
    pub recordings: Arc<RecordingCache>,
    /// Kept so the arbiters (threads) live as long as the topology.
    pub arbiters: Vec<Arbiter>,
}

struct Builder {
    arbiters: Vec<Arbiter>,
    stages: Vec<Arc<dyn StageControl>>,
    tracker: Addr<JobTracker>,
    budget: Addr<BudgetActor>,
    timeline: Arc<Timeline>,
    /// `[ingest.priority] express`: jobs from this priority take the express lanes.
    express_at: i32,
}

/// Where a stage sends its output: the next stage's mailbox and, when it has one,
/// its express lane.
type Downstream<T> = (Recipient<WorkItem<T>>, Option<ExpressLane<T>>);

/// A started stage: its address (the mailbox) and its express lane.
struct Started<S: Stage> {
    addr: Addr<StageActor<S>>,
    lane: ExpressLane<S::In>,
}

impl<S: Stage> Started<S> {
    fn next(&self) -> Downstream<S::In> {
        (self.addr.clone().recipient(), Some(self.lane.clone()))
    }
}

impl Builder {
    fn stage<S: Stage>(
        &mut self,
        make: impl Fn() -> S + Send + Sync + 'static,
        limits: StageLimits,
        (next, express_next): Downstream<S::Out>,
        with_budget: bool,
    ) -> Result<Started<S>, EngineError> {
        let arbiter = Arbiter::new();
        let factory: StageFactory<S> = Arc::new(move || Ok::<S, StageError>(make()));
        let budget = with_budget.then(|| self.budget.clone());
        let (addr, control, target) = StageActor::start(
            &arbiter.handle(),
            factory,
            limits,
            next,
            express_next,
            self.tracker.clone().recipient(),
            budget,
            self.timeline.clone(),
            Some(self.express_at),
        )
        .map_err(|e| EngineError::Start(format!("stage {}: {e}", S::NAME)))?;
        self.arbiters.push(arbiter);
        self.stages.insert(0, control);
        Ok(Started { addr, lane: ExpressLane { target, threshold: self.express_at } })
    }
}

/// Builds and starts every actor. Must run inside an actix `System`.
///
/// # Errors
/// [`EngineError`] when the host budget cannot be resolved or a stage cannot start.
pub fn build(cfg: &Config, selected: SelectedBackend, timeline: Arc<Timeline>) -> Result<Topology, EngineError> {
    let host_bytes = selected.host_budget(&cfg.budget).map_err(EngineError::Config)?;
    let host_ledger = Ledger::with_reserve("host", host_bytes, cfg.budget.deadline_reserve_bytes(host_bytes));
    let SelectedBackend { backend, devices, on_device, .. } = selected;
    // What the backend allocates beyond partitions' reservations (a CPU failover's
    // NTT buffers) is charged too, never waited for.
    let charged = host_ledger.clone();
    backend.set_host_charge(Arc::new(move |bytes| Box::new(charged.charge(bytes))));

    let support = Arbiter::new();
    let ledger = host_ledger.clone();
    let budget = BudgetActor::start_in_arbiter(&support.handle(), move |_| BudgetActor::new(ledger));
    let tracker_cap = cfg.tracker.mailbox_capacity;
    let tl = timeline.clone();
    let tracker = JobTracker::start_in_arbiter(&support.handle(), move |ctx: &mut Context<JobTracker>| {
        ctx.set_mailbox_capacity(tracker_cap);
        JobTracker::new().with_timeline(tl)
    });
    let mut b = Builder {
        arbiters: vec![support],
        stages: Vec::new(),
        tracker: tracker.clone(),
        budget: budget.clone(),
        timeline,
        express_at: cfg.ingest.priority.express,
    };

    // The tracker answers at once: its mailbox needs no express lane.
    let done: Recipient<WorkItem<PartitionProof>> = tracker.clone().recipient();
    let after_assemble = if cfg.verify.enabled {
        b.stage(|| Verify, cfg.verify.limits(), (done, None), false)?.next()
    } else {
        (done, None)
    };
    let assemble = b.stage(|| Assemble, cfg.assemble.limits(), after_assemble, false)?;
    let be = backend.clone();
    let prove =
        b.stage(move || ProveGpu { backend: be.clone() }, cfg.prove_gpu.limits(devices), assemble.next(), false)?;
    let be = backend.clone();
    let urgent_from = cfg.ingest.priority.express;
    let pcie =
        b.stage(move || StagePcie { backend: be.clone(), urgent_from }, cfg.stage_pcie.limits(), prove.next(), false)?;
    let b_g2_on_cpu = cfg.prepare_msm.b_g2_on_cpu(on_device);
    let bit_split = cfg.prepare_msm.bit_split;
    let prepare_ledger = host_ledger.clone();
    let prepare = b.stage(
        move || PrepareMsm { b_g2_on_cpu, bit_split, ledger: Some(prepare_ledger.clone()) },
        cfg.prepare_msm.limits(),
        pcie.next(),
        false,
    )?;
    let mut recordings = RecordingCache::new(cfg.synthesize.precompile, host_ledger.clone());
    if cfg.synthesize.save_recordings {
        let dir = match cfg.synthesize.recording_dir.as_str() {
            "" => cfg.ingest.param_cache_dir(),
            d => std::path::PathBuf::from(d),
        };
        recordings = recordings.with_dir(dir);
    }
    let recordings = Arc::new(recordings);
    let nice = cfg.synthesize.nice;
    let synth_recordings = recordings.clone();
    let evals = backend.eval_alloc().filter(|_| cfg.synthesize.write_pinned);
    let ntt_on_host = backend.ntt_on_host();
    // One thread for deadline partitions, started here at the engine's own priority
    // and kept across restarts of the stage.
    let urgent = synthesize::UrgentThread::spawn().map(Arc::new);
    // Built here, before any worker is reniced, so its threads are not.
    crate::runtime::urgent_pool::init();
    crate::runtime::urgent_pool::lower_bulk_pool(cfg.synthesize.bulk_pool_nice);
    let urgent_at = cfg.ingest.priority.express;
    let native = cfg.synthesize.native;
    let abc_on_device = backend.abc_on_device();
    let synth_ledger = host_ledger.clone();
    let synth = b.stage(
        move || Synthesize {
            recordings: synth_recordings.clone(),
            nice,
            evals: evals.clone(),
            ntt_on_host,
            urgent: urgent.clone(),
            urgent_at,
            native,
            abc_on_device,
            ledger: Some(synth_ledger.clone()),
        },
        cfg.synthesize.limits(),
        prepare.next(),
        true,
    )?;
    let load = cuzk_srs::LoadOptions { subgroup_checks: cfg.ingest.subgroup_checks };
    let digests = Arc::new(cuzk_filecoin::DigestChecker::filecoin(cfg.ingest.check_digests));
    let params =
        Arc::new(ParamCache::new(cfg.ingest.param_cache_dir(), load, host_ledger.clone()).with_digests(digests));
    // Recordings go with their parameters: release them as soon as those are evicted.
    let purge = recordings.clone();
    params.set_on_evict(move || purge.purge());
    // A set's recording is read, or its blank circuit recorded, while its points
    // load: the first proof waits for the longer of the two, not their sum.
    let beside = recordings.clone();
    let record_beside_load = cfg.synthesize.record_beside_load;
    params.set_on_loading(move |proof, header| {
        if !record_beside_load {
            return None;
        }
        let prepared = beside.prepare(proof, header)?;
        let cache = beside.clone();
        Some(Box::new(move |key: &Arc<cuzk_srs::ProvingKey>| cache.adopt(key, prepared))
            as crate::services::params::BesideLoad)
    });
    // Parameters made in memory (timing parameters) get the same, their partitions
    // waiting for it.
    let inserted = recordings.clone();
    params.set_on_insert(move |proof, key| {
        if record_beside_load {
            inserted.prepare_inserted(proof, key);
        }
    });
    // A loaded set goes to the devices while its first partitions synthesize, not
    // with the first partition to reach one (a 2KiB set: 0.2-0.5 s of upload).
    let be = backend.clone();
    params.set_on_load(move |key| {
        let (be, key) = (be.clone(), key.clone());
        let _ = std::thread::Builder::new().name("cuzk-prefetch".into()).spawn(move || be.prefetch(&key));
    });
    params
        .preload(cfg.ingest.preload.iter().map(|&p| p.into()).collect())
        .map_err(|e| EngineError::Start(format!("preload thread: {e}")))?;
    let max_input_bytes = usize::try_from(cfg.ingest.max_input_bytes.0).unwrap_or(usize::MAX);
    let ingest_params: Arc<dyn crate::ground::ParameterSource> = params.clone();
    let ingest = b.stage(
        move || Ingest { params: ingest_params.clone(), max_input_bytes, urgent_at },
        cfg.ingest.limits(),
        synth.next(),
        false,
    )?;

    // `try_send`: the tracker was just started and its mailbox is empty.
    tracker.try_send(SetStages(b.stages.clone())).map_err(|e| EngineError::Start(format!("tracker: {e}")))?;
    Ok(Topology {
        ingest: ingest.addr,
        ingest_express: ingest.lane,
        tracker,
        budget,
        host_ledger,
        stages: b.stages,
        params,
        recordings,
        arbiters: b.arbiters,
    })
}

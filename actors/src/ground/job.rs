//! Jobs: what is submitted, what flows with every partition, what comes back.

use std::{
    fmt,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, OnceLock,
    },
    time::{Duration, Instant},
};

use bellperson::{groth16::Proof, Circuit};
use blstrs::{Bls12, Scalar};
use cuzk_srs::ProvingKey;
use cuzk_synth::{Assignment, Precompiled, SynthError, SynthMode};
use ff::Field;
use rand::{rngs::OsRng, SeedableRng};
use serde::Serialize;
use tokio::sync::Notify;

/// The stages of the pipeline, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageName {
    Ingest,
    Synthesize,
    PrepareMsm,
    StagePcie,
    ProveGpu,
    Assemble,
    Verify,
}

impl StageName {
    /// Every stage, in pipeline order.
    pub const ALL: [StageName; 7] = [
        StageName::Ingest,
        StageName::Synthesize,
        StageName::PrepareMsm,
        StageName::StagePcie,
        StageName::ProveGpu,
        StageName::Assemble,
        StageName::Verify,
    ];

    /// snake_case name, as used in config sections and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            StageName::Ingest => "ingest",
            StageName::Synthesize => "synthesize",
            StageName::PrepareMsm => "prepare_msm",
            StageName::StagePcie => "stage_pcie",
            StageName::ProveGpu => "prove_gpu",
            StageName::Assemble => "assemble",
            StageName::Verify => "verify",
        }
    }

    /// Index into per-stage arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for StageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for StageName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        StageName::ALL.into_iter().find(|n| n.as_str() == s).ok_or_else(|| format!("unknown stage `{s}`"))
    }
}

/// A job's id: 128 bits, a random epoch drawn when the engine starts and a sequence
/// number within it. Ids of different runs never collide, so after a restart an old
/// id is unknown (or served from the results directory) rather than naming another
/// sector's job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct JobId {
    /// Random per engine start.
    pub epoch: u64,
    /// 1, 2, 3… within the engine; what timelines and per-run logs key on.
    pub seq: u64,
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{:x}", self.epoch, self.seq)
    }
}

impl std::str::FromStr for JobId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a job id (16 hex digits, `-`, hex sequence)");
        let (e, q) = s.split_once('-').ok_or_else(bad)?;
        if e.len() != 16 || q.is_empty() || q.len() > 16 {
            return Err(bad());
        }
        Ok(JobId {
            epoch: u64::from_str_radix(e, 16).map_err(|_| bad())?,
            seq: u64::from_str_radix(q, 16).map_err(|_| bad())?,
        })
    }
}

/// A cancellation flag shared by a job's partitions; waiters can await it.
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<(AtomicBool, Notify)>);

impl CancelToken {
    /// Sets the flag and wakes every waiter.
    pub fn cancel(&self) {
        self.0 .0.store(true, Ordering::SeqCst);
        self.0 .1.notify_waiters();
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0 .0.load(Ordering::SeqCst)
    }

    /// Resolves once cancelled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.0 .1.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

/// What a fault injection does (tests and drills; see [`JobSpec::with_fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The stage's code panics.
    Panic,
    /// The stage's code returns an error.
    Error,
    /// The stage's code sleeps this long before working (a slow stage).
    Delay(Duration),
    /// ProveGpu only: the backend's execution fails as if its device hit a sticky
    /// CUDA error (CUDA backend: a simulated illegal address, handled as a real one:
    /// the device is retired and the partition runs again elsewhere, so the job
    /// still succeeds). The CPU backend ignores it.
    DeviceError,
    /// ProveGpu only: the backend's execution holds its device without returning
    /// (CUDA backend: simulated, until the device timeout finds it hung; the device
    /// is retired and this partition given up, so the job fails naming the hung
    /// device, and later partitions run elsewhere). The CPU backend ignores it.
    DeviceHang,
}

/// A fault injected into one stage for one partition of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub stage: StageName,
    /// Partition to hit; `None` hits every partition.
    pub partition: Option<u32>,
    pub kind: FaultKind,
}

/// A circuit with its type erased, synthesized by the Synthesize stage.
pub trait ErasedCircuit: Send {
    /// Runs the circuit's synthesis into an assignment, in `mode`; returns the
    /// recorded structure for [`SynthMode::Record`] (see `cuzk_synth::Precompiled`).
    ///
    /// # Errors
    /// The circuit's synthesis error, or a structure mismatch in
    /// [`SynthMode::Precompiled`].
    fn synthesize_with(self: Box<Self>, mode: SynthMode<'_>) -> Result<(Assignment, Option<Precompiled>), SynthError>;

    /// Whether recording this circuit's structure once and then computing only
    /// witnesses pays off (costly synthesis, many instances per parameter set). The
    /// Synthesize stage only pre-compiles circuits that say so.
    fn precompile(&self) -> bool {
        false
    }

    /// Whether pre-compiled synthesis computes this circuit's witness natively
    /// (`cuzk_synth::native`) rather than with its `synthesize`.
    fn has_native(&self) -> bool {
        false
    }
}

impl<C: Circuit<Scalar> + Send> ErasedCircuit for C {
    fn synthesize_with(self: Box<Self>, mode: SynthMode<'_>) -> Result<(Assignment, Option<Precompiled>), SynthError> {
        cuzk_synth::synthesize_in(*self, mode)
    }
}

/// A boxed circuit.
pub type BoxedCircuit = Box<dyn ErasedCircuit>;

/// What a job proves.
pub enum JobInput {
    /// Arbitrary bellperson circuits over one set of parameters; one partition each.
    Circuits(Vec<BoxedCircuit>),
    /// A Filecoin PoRep commit phase 2: the C1 output (either format), parsed and
    /// split into partitions by Ingest, which also finds the parameters.
    PoRep(PorepInput),
    /// A WinningPoSt or WindowPoSt from vanilla proofs (one partition, or all).
    PoSt(cuzk_filecoin::PostRequest),
    /// A SnapDeals update proof from vanilla partition proofs and commitments.
    Update(cuzk_filecoin::UpdateRequest),
    /// A PoSt or SnapDeals proof whose circuits a caller already built from vanilla
    /// proofs it checked on receipt (the daemon, to refuse bad input at once).
    Prepared(PreparedProof),
}

/// Partition circuits of one Filecoin circuit, built and checked.
pub struct PreparedProof {
    pub circuit: cuzk_filecoin::CircuitId,
    pub partitions: Vec<cuzk_filecoin::Partition>,
}

impl JobInput {
    /// Every value of [`JobInput::kind`], for metrics that list each kind from the
    /// start.
    pub const KINDS: [&'static str; 5] = ["circuits", "porep", "winning_post", "window_post", "snap_deals"];

    /// The `kind` label of the job metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            JobInput::Circuits(_) => "circuits",
            JobInput::PoRep(_) => "porep",
            JobInput::PoSt(p) => cuzk_filecoin::post::post_kind(p.proof),
            JobInput::Update(_) => "snap_deals",
            JobInput::Prepared(p) => p.circuit.kind(),
        }
    }
}

/// The C1 output of one sector and the ids the proof is bound to.
pub struct PorepInput {
    /// filecoin-proofs-api `SealCommitPhase1Output` JSON or the Lotus/Curio wrapper,
    /// or already parsed (by a caller that validated it on receipt).
    pub c1: PorepC1,
    pub prover_id: [u8; 32],
    pub sector_id: u64,
}

/// A C1 output, raw or parsed.
pub enum PorepC1 {
    Raw(Vec<u8>),
    Parsed(Box<cuzk_filecoin::ParsedC1>),
}

impl fmt::Debug for JobInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobInput::Circuits(c) => write!(f, "Circuits({})", c.len()),
            JobInput::PoRep(p) => write!(f, "PoRep(sector {})", p.sector_id),
            JobInput::PoSt(p) => write!(f, "PoSt({:?}, {} vanilla proofs)", p.proof, p.vanilla_proofs.len()),
            JobInput::Update(u) => write!(f, "Update({:?})", u.proof),
            JobInput::Prepared(p) => write!(f, "Prepared({}, {} partitions)", p.circuit, p.partitions.len()),
        }
    }
}

/// Randomness `(r, s)` for every partition's proof.
#[derive(Clone, Debug)]
pub enum Randomness {
    /// Fresh from the operating system (production).
    Os,
    /// Derived from a seed (reproducible tests and benchmarks).
    Seeded(u64),
    /// Given, one pair per partition.
    Given(Vec<(Scalar, Scalar)>),
}

/// A job to submit to the [`crate::Engine`].
pub struct JobSpec {
    /// Known at submission for circuit jobs; found by Ingest for PoRep jobs.
    pub(crate) srs: Option<Arc<ProvingKey>>,
    pub(crate) input: JobInput,
    /// Known at submission for circuit jobs; from the C1 output for PoRep jobs.
    pub(crate) partitions: Option<usize>,
    pub(crate) randomness: Randomness,
    pub(crate) priority: i32,
    pub(crate) fault: Option<Fault>,
}

impl JobSpec {
    /// Proves each circuit (a partition each) with `srs`; randomness from the OS.
    pub fn circuits<C: Circuit<Scalar> + Send + 'static>(srs: Arc<ProvingKey>, circuits: Vec<C>) -> Self {
        let partitions = Some(circuits.len());
        let input = JobInput::Circuits(circuits.into_iter().map(|c| Box::new(c) as BoxedCircuit).collect());
        JobSpec { srs: Some(srs), input, partitions, randomness: Randomness::Os, priority: 0, fault: None }
    }

    /// Proves a Filecoin PoRep C1 output (commit phase 2). Ingest parses it, finds
    /// the parameters in the parameter cache, and splits it into partitions; the
    /// result is the partition proofs in order ([`JobOutput::proof_bytes`] is what
    /// `seal_commit_phase2` returns).
    pub fn porep_c1(c1: Vec<u8>, prover_id: [u8; 32], sector_id: u64) -> Self {
        JobSpec {
            srs: None,
            input: JobInput::PoRep(PorepInput { c1: PorepC1::Raw(c1), prover_id, sector_id }),
            partitions: None,
            randomness: Randomness::Os,
            priority: 0,
            fault: None,
        }
    }

    /// [`JobSpec::porep_c1`] for a C1 output already parsed and validated (Ingest
    /// does not parse it again).
    pub fn porep_parsed(c1: cuzk_filecoin::ParsedC1, prover_id: [u8; 32], sector_id: u64) -> Self {
        JobSpec {
            srs: None,
            input: JobInput::PoRep(PorepInput { c1: PorepC1::Parsed(Box::new(c1)), prover_id, sector_id }),
            partitions: None,
            randomness: Randomness::Os,
            priority: 0,
            fault: None,
        }
    }

    /// Proves a WinningPoSt or WindowPoSt from vanilla proofs. Ingest checks them,
    /// finds the parameters and splits the proof into partitions; the result is the
    /// partition proofs in order ([`JobOutput::proof_bytes`] is what
    /// `generate_winning_post_with_vanilla`, `generate_window_post_with_vanilla` or,
    /// for one partition, `generate_single_window_post_with_vanilla` returns).
    pub fn post(req: cuzk_filecoin::PostRequest) -> Self {
        JobSpec {
            srs: None,
            input: JobInput::PoSt(req),
            partitions: None,
            randomness: Randomness::Os,
            priority: 0,
            fault: None,
        }
    }

    /// Proves a SnapDeals update ([`JobOutput::proof_bytes`] is what
    /// `generate_empty_sector_update_proof_with_vanilla` returns).
    pub fn update(req: cuzk_filecoin::UpdateRequest) -> Self {
        JobSpec {
            srs: None,
            input: JobInput::Update(req),
            partitions: None,
            randomness: Randomness::Os,
            priority: 0,
            fault: None,
        }
    }

    /// Proves partitions built from checked vanilla proofs
    /// (`cuzk_filecoin::post_circuits`, `update_circuits`).
    pub fn prepared(circuit: cuzk_filecoin::CircuitId, partitions: Vec<cuzk_filecoin::Partition>) -> Self {
        JobSpec {
            srs: None,
            input: JobInput::Prepared(PreparedProof { circuit, partitions }),
            partitions: None,
            randomness: Randomness::Os,
            priority: 0,
            fault: None,
        }
    }

    /// Uses these `(r, s)` pairs, one per partition (for byte-reproducible proofs).
    pub fn with_randomness(mut self, rs: Vec<(Scalar, Scalar)>) -> Self {
        self.randomness = Randomness::Given(rs);
        self
    }

    /// Derives `(r, s)` from `seed`.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.randomness = Randomness::Seeded(seed);
        self
    }

    /// Higher values overtake lower ones in every stage queue (default 0). The
    /// engine adds its per-kind base (`[ingest.priority]`: WinningPoSt first, then
    /// WindowPoSt, by default).
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Injects a fault into one stage (tests, drills). Not for production.
    #[doc(hidden)]
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = Some(fault);
        self
    }

    /// Number of partitions, when known before Ingest.
    pub fn partitions(&self) -> Option<usize> {
        self.partitions
    }
}

impl Randomness {
    /// `n` pairs of (r, s).
    ///
    /// # Errors
    /// When given pairs do not number `n`.
    pub(crate) fn resolve(&self, n: usize) -> Result<Vec<(Scalar, Scalar)>, String> {
        Ok(match self {
            Randomness::Given(v) if v.len() != n => {
                return Err(format!("{} (r, s) pairs given for {n} partitions", v.len()))
            }
            Randomness::Given(v) => v.clone(),
            Randomness::Seeded(seed) => {
                let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(*seed);
                (0..n).map(|_| (Scalar::random(&mut rng), Scalar::random(&mut rng))).collect()
            }
            Randomness::Os => (0..n).map(|_| (Scalar::random(OsRng), Scalar::random(OsRng))).collect(),
        })
    }
}

/// What every partition of a job carries by reference.
///
/// The parameters, the partition count and the randomness are set once: at
/// submission for circuit jobs, by Ingest for PoRep jobs (before it emits any
/// partition, so every stage after Ingest finds them set).
pub struct JobContext {
    pub id: JobId,
    pub priority: i32,
    pub(crate) srs: OnceLock<Arc<ProvingKey>>,
    pub(crate) shape: OnceLock<(usize, Vec<(Scalar, Scalar)>)>,
    pub(crate) randomness_spec: Randomness,
    /// Set by Ingest for non-interactive PoRep: the tracker aggregates the job's
    /// partition proofs into one proof when the last one arrives.
    pub(crate) aggregation: OnceLock<Aggregation>,
    pub cancel: CancelToken,
    pub submitted: Instant,
    pub fault: Option<Fault>,
    /// What the job proves, for per-kind metrics: [`JobInput::kind`].
    pub kind: &'static str,
    /// Set when a partition of the job first starts synthesis: the job is in
    /// progress, no longer pending (GetStatus's per-kind queues).
    pub(crate) started: AtomicBool,
}

impl JobContext {
    /// The job's parameters.
    ///
    /// # Panics
    /// Before Ingest set them (never after Ingest: see the type's docs).
    pub fn srs(&self) -> &Arc<ProvingKey> {
        self.srs.get().expect("parameters are set before partitions exist")
    }

    /// Number of partitions, once known.
    pub fn partitions(&self) -> Option<usize> {
        self.shape.get().map(|s| s.0)
    }

    /// (r, s) of a partition.
    ///
    /// # Panics
    /// Before the partition count is set, or for a partition out of range (neither
    /// happens after Ingest).
    pub fn randomness(&self, partition: u32) -> (Scalar, Scalar) {
        self.shape.get().expect("partition count is set before partitions exist").1[partition as usize]
    }

    /// Sets parameters, partition count and randomness (once; later calls are errors).
    ///
    /// # Errors
    /// When already set or the randomness does not fit the count.
    pub(crate) fn set_shape(&self, srs: Arc<ProvingKey>, partitions: usize) -> Result<(), String> {
        if partitions == 0 {
            return Err("job has no partitions".into());
        }
        let rs = self.randomness_spec.resolve(partitions)?;
        let _ = self.srs.set(srs);
        self.shape.set((partitions, rs)).map_err(|_| "job shape set twice".to_string())
    }
    /// Marks the job as in progress (a partition is being synthesized).
    pub fn mark_started(&self) {
        self.started.store(true, Ordering::Relaxed);
    }

    /// Whether a partition of the job has started synthesis.
    pub fn is_started(&self) -> bool {
        self.started.load(Ordering::Relaxed)
    }

    /// The fault to apply in `stage` to `partition`, if any.
    pub fn fault_for(&self, stage: StageName, partition: u32) -> Option<FaultKind> {
        self.fault.filter(|f| f.stage == stage && f.partition.is_none_or(|p| p == partition)).map(|f| f.kind)
    }
}

/// How a job's partition proofs become one aggregated proof (non-interactive PoRep).
pub struct Aggregation {
    /// The inner-product SRS (resident in the parameter cache).
    pub srs: Arc<cuzk_filecoin::IppSrs>,
    /// The sector's comm_r, hashed into SnarkPack's transcript.
    pub comm_r: [u8; 32],
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext").field("id", &self.id).field("partitions", &self.partitions()).finish()
    }
}

/// Time one stage spent on a job, summed over its partitions.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StageTiming {
    /// Time partitions waited in the stage's queue (and for its budget).
    pub queue_wait: Duration,
    /// Time the stage's workers spent processing, less `blocked`.
    pub busy: Duration,
    /// Time the stage's workers spent blocked on backpressure from downstream while
    /// processing the job's partitions (StagePcie: waiting for a free device staging
    /// buffer, which ProveGpu frees as it executes), apart from `busy`.
    pub blocked: Duration,
}

/// Per-stage and per-operation timings of a job.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobTimings {
    /// Submission to terminal result.
    pub total: Duration,
    /// Indexed by [`StageName::index`].
    pub stages: [StageTiming; 7],
    /// Backend operations (NTT, each MSM), summed over partitions.
    pub ops: Vec<(&'static str, Duration)>,
}

impl JobTimings {
    /// Timing of one stage.
    pub fn stage(&self, s: StageName) -> StageTiming {
        self.stages[s.index()]
    }

    /// Adds operation durations by name.
    pub fn add_ops(&mut self, ops: &[(&'static str, Duration)]) {
        for (name, d) in ops {
            match self.ops.iter_mut().find(|(n, _)| n == name) {
                Some((_, acc)) => *acc += *d,
                None => self.ops.push((name, *d)),
            }
        }
    }
}

/// A finished job.
#[derive(Clone, Debug)]
pub struct JobOutput {
    pub id: JobId,
    /// One proof per partition, in partition order.
    pub proofs: Vec<Proof<Bls12>>,
    /// Non-interactive PoRep: the SnarkPack aggregate of `proofs`, which is the
    /// job's proof.
    pub aggregate: Option<Vec<u8>>,
    pub timings: JobTimings,
}

impl JobOutput {
    /// The job's proof as Filecoin expects it (what `seal_commit_phase2` returns): the
    /// aggregate for non-interactive PoRep, else the partition proofs back to back
    /// (192 bytes each).
    pub fn proof_bytes(&self) -> Vec<u8> {
        if let Some(a) = &self.aggregate {
            return a.clone();
        }
        let mut out = Vec::with_capacity(self.proofs.len() * 192);
        for p in &self.proofs {
            p.write(&mut out).expect("writing to a Vec cannot fail");
        }
        out
    }
}

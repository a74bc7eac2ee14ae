use std::path::PathBuf;

use serde::Deserialize;

use crate::{ground::ByteSize, runtime::StageLimits};

/// `[ingest]`: turns a submitted job into per-partition work items.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// Jobs waiting in the actor's mailbox once the queue is full.
    pub mailbox_capacity: usize,
    /// Jobs accepted but not yet split into partitions.
    pub queue_capacity: usize,
    /// Jobs parsed at once.
    pub workers: usize,
    /// Largest C1 input accepted; larger ones are refused before parsing (a 32GiB
    /// sector's C1 output is tens of megabytes).
    pub max_input_bytes: ByteSize,
    /// Filecoin parameter cache (`v28-*.params`); "" = `FIL_PROOFS_PARAMETER_CACHE`,
    /// else /var/tmp/filecoin-proof-parameters.
    pub param_cache: PathBuf,
    /// Proof types whose parameters are loaded when the engine starts (e.g.
    /// ["StackedDrg32GiBV1_1"]) instead of by the first job that needs them.
    pub preload: Vec<cuzk_filecoin::RegisteredSealProof>,
    /// Check every parameter point's subgroup membership when loading (slower; the
    /// daemon sets it from `[srs] subgroup_checks`).
    pub subgroup_checks: bool,
    /// Check parameter, verifying-key and SRS files against Filecoin's published
    /// digests before reading them (the daemon sets it from `[srs] check_digests`).
    pub check_digests: bool,
    /// `[ingest.priority]`: added to every job's priority by its kind, so that proofs
    /// with a deadline of seconds (WinningPoSt) or minutes (WindowPoSt) overtake
    /// PoRep and SnapDeals (deadline: hours) in every stage queue.
    pub priority: KindPriority,
}

/// Priority added to a job by its kind (higher overtakes lower in every stage queue;
/// a request's own priority, -1..2 over gRPC, is added to it).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KindPriority {
    pub winning_post: i32,
    pub window_post: i32,
    pub porep: i32,
    pub snap_deals: i32,
    /// Jobs of arbitrary circuits (`JobSpec::circuits`, synthetic benchmarks).
    pub circuits: i32,
    /// Jobs with at least this priority take the express lane at every stage: pushed
    /// straight into the next stage's priority queue instead of waiting behind a full
    /// mailbox (bounded: up to a queue's capacity beyond it).
    pub express: i32,
}

impl Default for KindPriority {
    fn default() -> Self {
        KindPriority { winning_post: 200, window_post: 100, porep: 0, snap_deals: 0, circuits: 0, express: 100 }
    }
}

impl KindPriority {
    /// The base of a job kind (`JobInput::kind`).
    pub fn of(&self, kind: &str) -> i32 {
        match kind {
            "winning_post" => self.winning_post,
            "window_post" => self.window_post,
            "porep" => self.porep,
            "snap_deals" => self.snap_deals,
            _ => self.circuits,
        }
    }
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            mailbox_capacity: 4,
            queue_capacity: 16,
            workers: 1,
            max_input_bytes: ByteSize(512 << 20),
            param_cache: PathBuf::new(),
            preload: Vec::new(),
            subgroup_checks: false,
            check_digests: true,
            priority: KindPriority::default(),
        }
    }
}

impl IngestConfig {
    /// The parameter cache directory with the default resolved.
    pub fn param_cache_dir(&self) -> PathBuf {
        if self.param_cache.as_os_str().is_empty() {
            cuzk_filecoin::default_parameter_cache()
        } else {
            self.param_cache.clone()
        }
    }

    pub(crate) fn limits(&self) -> StageLimits {
        StageLimits {
            mailbox_capacity: self.mailbox_capacity,
            queue_capacity: self.queue_capacity,
            workers: self.workers,
        }
    }
}

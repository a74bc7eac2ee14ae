use serde::Deserialize;

use crate::runtime::StageLimits;

/// `[synthesize]`: circuit synthesis, the memory-heavy CPU stage.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SynthesizeConfig {
    /// Partitions waiting in the actor's mailbox once the queue is full.
    pub mailbox_capacity: usize,
    /// Partitions waiting for a synthesis slot.
    pub queue_capacity: usize,
    /// Most partitions synthesized at once; fewer when the host budget admits fewer.
    /// 0 = the number of CPU cores.
    pub max_concurrency: usize,
    /// Record the structure of circuits that opt in (PoRep) once per parameter set,
    /// then compute only witnesses: about 1.5x less synthesis CPU for PoRep, for
    /// the recording's memory (176 MiB per 2KiB/8MiB-class partition structure,
    /// charged to the host budget). Proofs are the same bytes either way.
    pub precompile: bool,
    /// With `precompile`, compute the witness of circuits that have a native
    /// generator (PoRep, WindowPoSt, SnapDeals) natively: SHA-256 and Poseidon
    /// without the circuits' gadgets, the same values (cuzk-filecoin's
    /// `tests/native.rs`), ~5x less synthesis CPU. Off: the circuit's own
    /// `synthesize` computes it.
    pub native: bool,
    /// Nice value of the synthesis threads (Linux; 0 = unchanged). Synthesis is
    /// the bulk CPU work and runs on every core; at a lower priority it yields the
    /// cores at once to the stages that feed the GPU (PrepareMsm, StagePcie,
    /// ProveGpu's host side), which otherwise wait behind it.
    pub nice: i32,
    /// Nice value of rayon's global pool, where only bulk work's parallel parts
    /// run (PrepareMsm's split, StagePcie's copies; deadline work has a pool of its
    /// own, `runtime/urgent_pool.rs`): the engine renices the pool's threads at
    /// start. 0 = unchanged.
    pub bulk_pool_nice: i32,
    /// Pre-compiled synthesis writes a, b, c straight into pinned memory lent by
    /// the GPU backend's pinned host pool (`backend.pinned_memory`), so StagePcie has
    /// nothing of them to copy. When the pool is at its bound they go to the heap
    /// and StagePcie copies them as before. No effect on the CPU backend.
    pub write_pinned: bool,
    /// Save each recorded circuit structure (`precompile`) to `recording_dir` and
    /// load it in later processes, so that their first partitions are pre-compiled
    /// too. About 145 MiB per 2KiB/8MiB-class parameter set on disk.
    pub save_recordings: bool,
    /// Where recordings are saved; "" = the parameter cache (`ingest.param_cache`).
    pub recording_dir: String,
    /// With `precompile`: while a parameter file loads, read its saved recording or
    /// record its circuit's blank instance beside the load, so the key is handed
    /// out with its recording and no partition records (at 32GiB the first proof
    /// waits for the longer of loading and recording, not their sum); parameters
    /// made in memory (`ParamCache::insert`) as they are inserted, their partitions
    /// waiting for it. Off: the first partition to need it records it. Not for
    /// WinningPoSt, which is never pre-compiled.
    pub record_beside_load: bool,
}

impl Default for SynthesizeConfig {
    fn default() -> Self {
        SynthesizeConfig {
            mailbox_capacity: 4,
            queue_capacity: 4,
            max_concurrency: 0,
            precompile: true,
            native: true,
            nice: 10,
            bulk_pool_nice: 19,
            write_pinned: true,
            save_recordings: true,
            recording_dir: String::new(),
            record_beside_load: true,
        }
    }
}

impl SynthesizeConfig {
    pub(crate) fn limits(&self) -> StageLimits {
        let workers = if self.max_concurrency == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            self.max_concurrency
        };
        StageLimits { mailbox_capacity: self.mailbox_capacity, queue_capacity: self.queue_capacity, workers }
    }
}

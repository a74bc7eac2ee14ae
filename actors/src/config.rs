//! Typed configuration of the engine: one struct per `config.toml` section, every
//! field documented and defaulted, unknown fields refused, validated at load.
//!
//! It assembles the sections each stage and service defines next to its code
//! (`ingest/config.rs`, `services/backend.rs`, ...); nothing imports this module
//! back but the wiring (`topology.rs`, `engine.rs`).

use serde::Deserialize;

use crate::ground::{ByteSize, EngineError, MemoryLimit};
pub use crate::{
    assemble::AssembleConfig,
    budget::BudgetConfig,
    ingest::IngestConfig,
    prepare_msm::{BG2Placement, PrepareMsmConfig},
    prove_gpu::ProveGpuConfig,
    services::backend::{BackendConfig, BackendKind},
    stage_pcie::StagePcieConfig,
    synthesize::SynthesizeConfig,
    verify::VerifyConfig,
};

/// The engine's configuration (the pipeline sections of `config.toml`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub backend: BackendConfig,
    pub budget: BudgetConfig,
    pub tracker: TrackerConfig,
    pub ingest: IngestConfig,
    pub synthesize: SynthesizeConfig,
    pub prepare_msm: PrepareMsmConfig,
    pub stage_pcie: StagePcieConfig,
    pub prove_gpu: ProveGpuConfig,
    pub assemble: AssembleConfig,
    pub verify: VerifyConfig,
    pub timeline: TimelineConfig,
}

/// The top-level sections [`Config`] reads.
pub const SECTIONS: &[&str] = &[
    "backend",
    "budget",
    "tracker",
    "ingest",
    "synthesize",
    "prepare_msm",
    "stage_pcie",
    "prove_gpu",
    "assemble",
    "verify",
    "timeline",
];

impl Config {
    /// Parses TOML text.
    ///
    /// # Errors
    /// [`EngineError::Config`] naming the field and line.
    pub fn from_toml(text: &str) -> Result<Self, EngineError> {
        let cfg: Config = toml::from_str(text).map_err(|e| EngineError::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks values serde cannot: zero capacities and worker counts.
    ///
    /// # Errors
    /// [`EngineError::Config`] naming the field.
    pub fn validate(&self) -> Result<(), EngineError> {
        let positive = [
            ("tracker.mailbox_capacity", self.tracker.mailbox_capacity),
            ("ingest.mailbox_capacity", self.ingest.mailbox_capacity),
            ("ingest.queue_capacity", self.ingest.queue_capacity),
            ("ingest.workers", self.ingest.workers),
            ("synthesize.mailbox_capacity", self.synthesize.mailbox_capacity),
            ("synthesize.queue_capacity", self.synthesize.queue_capacity),
            ("prepare_msm.mailbox_capacity", self.prepare_msm.mailbox_capacity),
            ("prepare_msm.queue_capacity", self.prepare_msm.queue_capacity),
            ("prepare_msm.workers", self.prepare_msm.workers),
            ("stage_pcie.mailbox_capacity", self.stage_pcie.mailbox_capacity),
            ("stage_pcie.queue_capacity", self.stage_pcie.queue_capacity),
            ("stage_pcie.workers", self.stage_pcie.workers),
            ("prove_gpu.mailbox_capacity", self.prove_gpu.mailbox_capacity),
            ("prove_gpu.queue_capacity", self.prove_gpu.queue_capacity),
            ("prove_gpu.workers_per_device", self.prove_gpu.workers_per_device),
            ("assemble.mailbox_capacity", self.assemble.mailbox_capacity),
            ("assemble.queue_capacity", self.assemble.queue_capacity),
            ("assemble.workers", self.assemble.workers),
            ("verify.mailbox_capacity", self.verify.mailbox_capacity),
            ("verify.queue_capacity", self.verify.queue_capacity),
            ("verify.workers", self.verify.workers),
            ("backend.device_buffers", self.backend.device_buffers),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(EngineError::Config(format!("{name} must be at least 1")));
            }
        }
        let w = self.backend.msm_h_window_bits;
        if w != 0 && !(10..=26).contains(&w) {
            return Err(EngineError::Config(format!(
                "backend.msm_h_window_bits = {w}: must be 0 (sppark's width) or 10 to 26"
            )));
        }
        if let MemoryLimit::Bytes(ByteSize(0)) = self.budget.host_memory {
            return Err(EngineError::Config("budget.host_memory must be above 0".into()));
        }
        Ok(())
    }
}

/// `[tracker]`: the job tracker actor.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TrackerConfig {
    /// Mailbox capacity of the job tracker (every stage reports to it).
    pub mailbox_capacity: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig { mailbox_capacity: 64 }
    }
}

/// `[timeline]`: per-item spans of every stage, exportable as Chrome trace JSON.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TimelineConfig {
    /// Record from the start (`cuzk bench --trace` and the daemon's SetTimeline turn it
    /// on at run time too).
    pub enabled: bool,
    /// Spans kept; the oldest are dropped beyond this (about 100 bytes each).
    pub max_events: usize,
}

impl Default for TimelineConfig {
    fn default() -> Self {
        TimelineConfig { enabled: false, max_events: 200_000 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_field() {
        let e = Config::from_toml("[budget]\nhost_memory = -5\n").unwrap_err().to_string();
        assert!(e.contains("negative") && e.contains("host_memory"), "{e}");
        let e = Config::from_toml("[synthesize]\nmax_concurency = 3\n").unwrap_err().to_string();
        assert!(e.contains("unknown field") && e.contains("max_concurency"), "{e}");
        let e = Config::from_toml("[prove_gpu]\nworkers_per_device = 0\n").unwrap_err().to_string();
        assert!(e.contains("prove_gpu.workers"), "{e}");
        let e = Config::from_toml("[backend]\nmsm_h_window_bits = 30\n").unwrap_err().to_string();
        assert!(e.contains("backend.msm_h_window_bits = 30") && e.contains("10 to 26"), "{e}");
        let c = Config::from_toml("[backend]\nmsm_h_window_bits = 0\n").unwrap();
        assert_eq!(c.backend.msm_h_window_bits, 0);
        let c = Config::from_toml("[budget]\nhost_memory = \"2GiB\"\n").unwrap();
        assert_eq!(c.budget.host_memory, MemoryLimit::Bytes(ByteSize(2 << 30)));
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }
}

//! Typed configuration of the engine: one struct per `config.toml` section, every
//! field documented and defaulted, unknown fields refused, validated at load.

use std::fmt;

use serde::{de, Deserialize, Deserializer};

pub use crate::budget::BudgetConfig;
use crate::{
    assemble::AssembleConfig, ingest::IngestConfig, prepare_msm::PrepareMsmConfig, prove_gpu::ProveGpuConfig,
    stage_pcie::StagePcieConfig, synthesize::SynthesizeConfig, verify::VerifyConfig, EngineError,
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
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(EngineError::Config(format!("{name} must be at least 1")));
            }
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

/// Which implementation runs the StagePcie and ProveGpu stages.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The GPU when one is usable, the CPU otherwise (logged at start).
    #[default]
    Auto,
    /// Always the CPU.
    Cpu,
    /// The GPU; the engine refuses to start without one.
    Gpu,
}

/// `[backend]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BackendConfig {
    /// "auto", "cpu" or "gpu".
    pub kind: BackendKind,
    /// GPU indices to use (among usable devices); empty = all.
    pub devices: Vec<usize>,
    /// Keep parameter points resident in device memory when they fit (else they are
    /// streamed from host memory for every MSM).
    pub srs_resident: bool,
    /// Device memory kept free for MSM temporaries and other processes.
    pub vram_margin: ByteSize,
    /// Bound of the pinned host memory StagePcie stages partitions in (uploads from it
    /// run at full PCIe speed); 0 = stage from pageable memory.
    pub pinned_memory: ByteSize,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            kind: BackendKind::Auto,
            devices: Vec::new(),
            srs_resident: true,
            vram_margin: ByteSize(4 << 30),
            pinned_memory: ByteSize(16 << 30),
        }
    }
}

/// A number of bytes; in TOML an integer or a string with a unit
/// ("512MiB", "64GiB", "1.5 GB").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (u, n) in UNITS {
            if self.0 >= n {
                return write!(f, "{:.2} {u}", self.0 as f64 / n as f64);
            }
        }
        write!(f, "{} B", self.0)
    }
}

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" => 1_000,
            "kib" => 1 << 10,
            "m" | "mb" => 1_000_000,
            "mib" => 1 << 20,
            "g" | "gb" => 1_000_000_000,
            "gib" => 1 << 30,
            "t" | "tb" => 1_000_000_000_000,
            "tib" => 1 << 40,
            u => return Err(format!("unknown size unit `{u}` in `{s}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
        };
        let v: f64 = num.parse().map_err(|_| format!("`{s}` is not a size (expected e.g. \"64GiB\")"))?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!("`{s}` is not a non-negative size"));
        }
        Ok(ByteSize((v * mult as f64) as u64))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative byte count or a size string like \"64GiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| E::custom(format!("size must not be negative, got {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A memory budget: a size or "auto".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimit {
    /// Derived from the machine (see the section's docs).
    Auto,
    Bytes(ByteSize),
}

impl<'de> Deserialize<'de> for MemoryLimit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = MemoryLimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"auto\", a non-negative byte count, or a size string like \"64GiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MemoryLimit, E> {
                Ok(MemoryLimit::Bytes(ByteSize(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MemoryLimit, E> {
                u64::try_from(v)
                    .map(|b| MemoryLimit::Bytes(ByteSize(b)))
                    .map_err(|_| E::custom(format!("budget must not be negative, got {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemoryLimit, E> {
                if v.trim().eq_ignore_ascii_case("auto") {
                    Ok(MemoryLimit::Auto)
                } else {
                    v.parse().map(MemoryLimit::Bytes).map_err(E::custom)
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!("64GiB".parse::<ByteSize>().unwrap().0, 64 << 30);
        assert_eq!("1.5 GB".parse::<ByteSize>().unwrap().0, 1_500_000_000);
        assert_eq!("100".parse::<ByteSize>().unwrap().0, 100);
        assert!("12 parsecs".parse::<ByteSize>().unwrap_err().contains("unit"));
    }

    #[test]
    fn config_errors_name_the_field() {
        let e = Config::from_toml("[budget]\nhost_memory = -5\n").unwrap_err().to_string();
        assert!(e.contains("negative") && e.contains("host_memory"), "{e}");
        let e = Config::from_toml("[synthesize]\nmax_concurency = 3\n").unwrap_err().to_string();
        assert!(e.contains("unknown field") && e.contains("max_concurency"), "{e}");
        let e = Config::from_toml("[prove_gpu]\nworkers_per_device = 0\n").unwrap_err().to_string();
        assert!(e.contains("prove_gpu.workers"), "{e}");
        let c = Config::from_toml("[budget]\nhost_memory = \"2GiB\"\n").unwrap();
        assert_eq!(c.budget.host_memory, MemoryLimit::Bytes(ByteSize(2 << 30)));
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }
}

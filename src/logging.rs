//! Log setup. One style everywhere: a short lowercase message plus key=value fields
//! (`job`, `partition`, `stage`, sizes in bytes, durations in ms), e.g.
//! `INFO job done job=3 partitions=10 total_ms=31250`.

use tracing_subscriber::{fmt, EnvFilter};

use crate::config::{LogConfig, LogFormat};

/// Installs the global subscriber (stderr). `RUST_LOG` overrides `cfg.level`.
/// Safe to call more than once (later calls do nothing).
pub fn init(cfg: &LogConfig) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&cfg.level));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match cfg.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

//! The whole `config.toml`: the engine's sections plus the binary's own (`[log]`,
//! `[srs]`, `[bench]`, `[daemon]`). Unknown sections and fields are errors.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{actors::ByteSize, EngineConfig};

/// `[log]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// tracing filter: "error", "warn", "info", "debug", "trace", or directives like
    /// "cuzk_actors=debug,info". `RUST_LOG` overrides it.
    pub level: String,
    /// "text" or "json".
    pub format: LogFormat,
}

/// Log line format.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: "info".into(), format: LogFormat::Text }
    }
}

/// `[srs]`: parameter files.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SrsConfig {
    /// Where generated test parameters are cached; empty = `$XDG_CACHE_HOME/cuzk`
    /// or `~/.cache/cuzk`.
    pub cache_dir: PathBuf,
    /// Check every point's subgroup membership when loading (slower).
    pub subgroup_checks: bool,
    /// Check parameter (`.params`), verifying-key (`.vk`) and SRS files against
    /// Filecoin's published digests (parameters.json) before using them; test
    /// parameters marked by `cuzk srs gen` and files not in parameters.json are used,
    /// and logged as such.
    pub check_digests: bool,
}

impl Default for SrsConfig {
    fn default() -> Self {
        SrsConfig { cache_dir: PathBuf::new(), subgroup_checks: false, check_digests: true }
    }
}

impl SrsConfig {
    /// The cache directory with the default resolved.
    pub fn cache_dir(&self) -> PathBuf {
        if !self.cache_dir.as_os_str().is_empty() {
            return self.cache_dir.clone();
        }
        if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
            return PathBuf::from(x).join("cuzk");
        }
        match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".cache").join("cuzk"),
            None => std::env::temp_dir().join("cuzk-cache"),
        }
    }
}

/// `[bench]`: what `cuzk bench` runs without arguments.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BenchConfig {
    /// Synthetic circuit size: 2^log2 constraints.
    pub log2: u32,
    /// Proofs in the stream.
    pub count: usize,
    /// Public inputs of the synthetic circuit.
    pub public_inputs: usize,
    /// Fraction of constraints using a variable in A / in B.
    pub a_density: f64,
    pub b_density: f64,
    /// Seed of witnesses and randomness.
    pub seed: u64,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig { log2: 14, count: 16, public_inputs: 2, a_density: 1.0, b_density: 1.0, seed: 0 }
    }
}

/// `[daemon]`: what `cuzk daemon` serves on (crate feature `daemon`). Parsed in every
/// build, so one config.toml serves all.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// gRPC address: "host:port" (TCP) or "unix:///path/to/socket".
    pub listen: String,
    /// Prometheus metrics over HTTP ("host:port", path /metrics); "" = off.
    pub metrics_listen: String,
    /// On SIGINT/SIGTERM: how long jobs in flight may take to finish before they are
    /// ended with a shutdown error.
    pub shutdown_timeout_secs: u64,
    /// Largest gRPC message accepted (a 32GiB C1 output is tens of megabytes; Curio's
    /// own server takes 128 MiB). C1 inputs are also held to `[ingest]
    /// max_input_bytes`; the smaller applies, before anything is parsed.
    pub max_message_bytes: ByteSize,
    /// How long a finished job's result stays in memory for AwaitProof (it stays in
    /// `results_dir` for `results_retention_secs`).
    pub job_retention_secs: u64,
    /// Where every finished job's result is written (atomically) so that AwaitProof
    /// serves it after a restart; "" = `$XDG_STATE_HOME/cuzk/results` (else
    /// `~/.local/state/cuzk/results`, else systemd's `$STATE_DIRECTORY/results`;
    /// with none of them set the daemon refuses to start rather than use the
    /// temporary directory); "none" = keep results in memory only.
    pub results_dir: String,
    /// How long result files are kept.
    pub results_retention_secs: u64,
    /// A file holding a shared secret: when set, every gRPC call must carry
    /// `authorization: Bearer <secret>`. For TCP listeners beyond loopback; a unix
    /// socket's file permissions are the recommended local access control.
    pub auth_token_file: String,
    /// Permissions of the unix socket (octal, e.g. "660": owner and group).
    pub socket_mode: String,
    /// TLS for a TCP listener: the server's certificate chain (PEM). With
    /// `tls_key_file`; both "" = plain text.
    pub tls_cert_file: String,
    /// The private key (PEM) of `tls_cert_file`.
    pub tls_key_file: String,
    /// With TLS: CA certificates (PEM) that client certificates must chain to; set,
    /// every client must present one (mutual TLS). "" = no client certificates.
    pub tls_client_ca_file: String,
    /// Serve cuzk.ext.v1 SubmitSynthetic (benchmarking; its parameters are charged
    /// to the host budget). Off in production daemons.
    pub allow_synthetic: bool,
    /// gRPC connections open at once (TCP or unix socket, authenticated or not). At
    /// the cap a new connection closes one that has not sent a request, else one not
    /// authenticated, else the one idle longest; one with a request in flight never.
    /// Keep it well under the process's open-file limit (`ulimit -n`).
    pub max_connections: usize,
    /// From accept: time for a client's first bytes (the HTTP/2 preface, or a TLS
    /// ClientHello).
    pub handshake_timeout_secs: u64,
    /// From accept: time for the first gRPC request to start.
    pub first_request_timeout_secs: u64,
    /// With `auth_token_file`, from accept: time for a request carrying the token.
    pub auth_timeout_secs: u64,
    /// A connection with no request in flight for this long is closed (clients
    /// reconnect on their next call).
    pub idle_timeout_secs: u64,
    /// HTTP/2 PING to every connection this often; one not answered within
    /// `http2_keepalive_timeout_secs` is closed (a peer gone while its Prove runs).
    /// 0 = off.
    pub http2_keepalive_interval_secs: u64,
    pub http2_keepalive_timeout_secs: u64,
    /// Concurrent requests (HTTP/2 streams) per connection.
    pub max_concurrent_streams: u32,
    /// SubmitProof / Prove request bodies (a C1 or vanilla proofs, up to
    /// `max_message_bytes` each) received at once across all connections; more wait
    /// their turn, held back by HTTP/2 flow control. Other calls never wait for it.
    pub max_concurrent_uploads: usize,
    /// Such a body must have fully arrived this long after its turn came, or the call
    /// fails with DEADLINE_EXCEEDED and its slot goes to the next. 0 = no deadline.
    pub upload_timeout_secs: u64,
    /// Decoded SubmitProof / Prove requests waiting for the engine to take them, per
    /// class (PoRep and SnapDeals; PoSt): one more is refused at once with
    /// RESOURCE_EXHAUSTED. Bounds what waiting inputs hold (a C1 each).
    pub max_waiting_inputs: usize,
    /// The systemd watchdog (`WatchdogSec=`) is fed only while the engine answers and
    /// no stage has held one item longer than this: a wedged daemon is restarted.
    /// Above the longest legitimate item (recording a 64GiB circuit takes minutes).
    pub stall_timeout_secs: u64,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            listen: "127.0.0.1:9820".into(),
            metrics_listen: "127.0.0.1:9821".into(),
            shutdown_timeout_secs: 30,
            max_message_bytes: ByteSize(128 << 20),
            job_retention_secs: 3600,
            results_dir: String::new(),
            results_retention_secs: 7 * 24 * 3600,
            auth_token_file: String::new(),
            socket_mode: "660".into(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_client_ca_file: String::new(),
            allow_synthetic: false,
            // 512 connections leave half of the usual 1,024 descriptors to the rest
            // of the process (parameter files, the GPU driver, results).
            max_connections: 512,
            handshake_timeout_secs: 5,
            first_request_timeout_secs: 10,
            auth_timeout_secs: 10,
            idle_timeout_secs: 600,
            http2_keepalive_interval_secs: 30,
            http2_keepalive_timeout_secs: 20,
            max_concurrent_streams: 64,
            max_concurrent_uploads: 16,
            upload_timeout_secs: 300,
            max_waiting_inputs: 32,
            stall_timeout_secs: 1800,
        }
    }
}

impl DaemonConfig {
    /// The results directory with the default resolved; `None` for "none".
    ///
    /// # Errors
    /// `results_dir` is "" and none of `XDG_STATE_HOME`, `HOME` or systemd's
    /// `STATE_DIRECTORY` is set: the temporary directory would lose proofs on a
    /// reboot, so the operator must name a directory (or "none").
    pub fn results_dir(&self) -> Result<Option<PathBuf>, String> {
        resolve_results_dir(&self.results_dir, |k| std::env::var_os(k))
    }
}

/// [`DaemonConfig::results_dir`] with the environment passed in.
fn resolve_results_dir(
    setting: &str,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Option<PathBuf>, String> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    match setting {
        "none" => Ok(None),
        "" => var("XDG_STATE_HOME")
            .or_else(|| var("HOME").map(|h| h.join(".local").join("state")))
            .map(|state| state.join("cuzk"))
            // systemd's StateDirectory= (already the service's own directory).
            .or_else(|| var("STATE_DIRECTORY").and_then(|d| d.to_str()?.split(':').next().map(PathBuf::from)))
            .map(|dir| Some(dir.join("results")))
            .ok_or_else(|| {
                "results_dir is \"\" but none of XDG_STATE_HOME, HOME or STATE_DIRECTORY is set: set [daemon] \
                     results_dir to a directory that survives a reboot (or \"none\" to keep results in memory only)"
                    .to_string()
            }),
        d => Ok(Some(PathBuf::from(d))),
    }
}

/// Everything in `config.toml`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    pub engine: EngineConfig,
    pub log: LogConfig,
    pub srs: SrsConfig,
    pub bench: BenchConfig,
    pub daemon: DaemonConfig,
}

/// A config file that could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {msg}")]
pub struct ConfigError {
    pub path: String,
    pub msg: String,
}

impl Config {
    /// Parses TOML text; `origin` names it in errors.
    ///
    /// # Errors
    /// [`ConfigError`] naming the section/field that is wrong.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let err = |msg: String| ConfigError { path: origin.to_string(), msg };
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| err(e.to_string()))?;
        fn take<T: for<'de> Deserialize<'de> + Default>(t: &mut toml::Table, key: &str) -> Result<T, String> {
            match t.remove(key) {
                None => Ok(T::default()),
                Some(v) => v.try_into().map_err(|e: toml::de::Error| format!("[{key}]: {e}")),
            }
        }
        let log = take(&mut table, "log").map_err(err)?;
        let srs: SrsConfig = take(&mut table, "srs").map_err(err)?;
        let bench = take(&mut table, "bench").map_err(err)?;
        let daemon = take(&mut table, "daemon").map_err(err)?;
        for key in table.keys() {
            if !cuzk_actors::config::SECTIONS.contains(&key.as_str()) {
                return Err(err(format!(
                    "unknown section [{key}]; known: log, srs, bench, daemon, {}",
                    cuzk_actors::config::SECTIONS.join(", ")
                )));
            }
        }
        let mut engine = EngineConfig::from_toml(&toml::to_string(&table).map_err(|e| err(e.to_string()))?)
            .map_err(|e| err(e.to_string()))?;
        // `[srs] subgroup_checks` governs every load, the daemon's parameter cache too.
        engine.ingest.subgroup_checks |= srs.subgroup_checks;
        // `[srs] check_digests = false` turns the digest checks off there too.
        engine.ingest.check_digests &= srs.check_digests;
        Ok(Config { engine, log, srs, bench, daemon })
    }

    /// Reads a config file.
    ///
    /// # Errors
    /// [`ConfigError`] if unreadable or invalid.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError { path: path.display().to_string(), msg: e.to_string() })?;
        Self::parse(&text, &path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_results_dir_is_never_the_temporary_directory() {
        let with = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            resolve_results_dir("", move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.into()))
        };
        let p = |s: &str| Ok(Some(PathBuf::from(s)));
        assert_eq!(with(&[("XDG_STATE_HOME", "/s"), ("HOME", "/h")]), p("/s/cuzk/results"));
        assert_eq!(with(&[("XDG_STATE_HOME", ""), ("HOME", "/h")]), p("/h/.local/state/cuzk/results"));
        assert_eq!(with(&[("STATE_DIRECTORY", "/var/lib/cuzk:/var/lib/other")]), p("/var/lib/cuzk/results"));
        let e = with(&[]).unwrap_err();
        assert!(e.contains("results_dir") && e.contains("HOME"), "{e}");
        assert_eq!(resolve_results_dir("none", |_| None), Ok(None));
        assert_eq!(resolve_results_dir("/r", |_| None), p("/r"));
    }

    #[test]
    fn shipped_config_is_the_default() {
        let text = include_str!("../config.toml");
        let parsed = Config::parse(text, "config.toml").unwrap();
        assert_eq!(parsed, Config::default(), "config.toml must document exactly the defaults");
    }

    #[test]
    fn subgroup_checks_reach_the_parameter_cache() {
        let c = Config::parse("[srs]\nsubgroup_checks = true\n", "t").unwrap();
        assert!(c.engine.ingest.subgroup_checks);
        assert!(!Config::parse("", "t").unwrap().engine.ingest.subgroup_checks);
    }

    #[test]
    fn check_digests_is_on_by_default_and_reaches_the_parameter_cache() {
        assert!(Config::parse("", "t").unwrap().engine.ingest.check_digests);
        let c = Config::parse("[srs]\ncheck_digests = false\n", "t").unwrap();
        assert!(!c.srs.check_digests && !c.engine.ingest.check_digests);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = Config::parse("[nonsense]\nx = 1\n", "t").unwrap_err().to_string();
        assert!(e.contains("unknown section [nonsense]"), "{e}");
        let e = Config::parse("[log]\nlevle = \"debug\"\n", "t").unwrap_err().to_string();
        assert!(e.contains("levle"), "{e}");
        let e = Config::parse("[budget]\nhost_memory = -1\n", "t").unwrap_err().to_string();
        assert!(e.contains("negative"), "{e}");
        let e = Config::parse("[synthesize\n", "t").unwrap_err().to_string();
        assert!(e.starts_with("t: "), "{e}");
    }
}

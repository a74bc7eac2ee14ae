//! The command line: clap's top-level [`Cli`] and [`Command`], the dispatch to one
//! module per command, and what several commands share (config, parameter loading,
//! progress bars, the synthetic circuit's flags).

mod bench;
mod daemon;
mod deadline;
mod deadline_full;
mod gen_c1;
mod gen_vanilla;
mod grid;
mod kernels;
mod prove;
mod size;
mod srs;
mod status;

use std::{
    io::IsTerminal,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};
use cuzk::{config::Config, LoadOptions, ProvingKey, SyntheticSpec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing::info;

#[derive(Parser)]
#[command(name = "cuzk", version, about = "Pipelined Groth16 proving engine for Filecoin")]
pub struct Cli {
    /// Configuration file (see the documented config.toml); defaults when absent.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parameter (SRS) files.
    Srs {
        #[command(subcommand)]
        cmd: srs::SrsCmd,
    },
    /// Prove synthetic circuits through the pipeline.
    Prove(prove::ProveArgs),
    /// Benchmark the pipeline on a stream of synthetic proofs and report the bottleneck;
    /// `bench batch` drives a running daemon, `bench sweep` tries worker counts.
    Bench(Box<bench::BenchCmd>),
    /// Seal random data with filecoin-proofs and write its C1 output (test fixture).
    GenC1(gen_c1::GenC1Args),
    /// Seal test sectors with filecoin-proofs and write the vanilla proofs of a
    /// WinningPoSt, WindowPoSt or SnapDeals update, with the request's fields.
    GenVanilla(gen_vanilla::GenVanillaArgs),
    /// Serve the cuzk.v1 gRPC API and Prometheus metrics until SIGINT/SIGTERM.
    Daemon,
    /// A running daemon's status (GetStatus): jobs, devices, listeners and the
    /// connections they hold, the results directory; exits 1 if a listener is not
    /// accepting or results are not being stored.
    Status(status::StatusArgs),
    /// What a sector size's PoRep proof needs of this host: parameters, recording and
    /// partition memory, partitions at once under the host budget, device placement.
    Size(size::SizeArgs),
}

impl Cli {
    /// Runs the command with `cfg` (read from [`Cli::config`]); the exit code it
    /// chose, or the error that ended it.
    pub fn run(self, cfg: &Config) -> Result<ExitCode> {
        match self.cmd {
            Command::Srs { cmd } => srs::run(cfg, cmd),
            Command::Prove(a) => prove::run(cfg, a),
            Command::Bench(b) => bench::run(cfg, self.config.as_deref(), *b),
            Command::GenC1(a) => gen_c1::run(a),
            Command::GenVanilla(a) => gen_vanilla::run(a),
            Command::Daemon => daemon::run(cfg),
            Command::Status(a) => status::run(a),
            Command::Size(a) => size::run(cfg, a),
        }
    }
}

/// How to reach a running daemon (`bench batch`, `status`).
#[derive(Args, Clone)]
pub(crate) struct ConnectArgs {
    /// Daemon address: "http://host:port", "https://host:port", "host:port" or
    /// "unix:///path".
    #[arg(long, short = 'a', default_value = "http://127.0.0.1:9820")]
    pub addr: String,
    /// A file holding the daemon's shared secret (its `auth_token_file`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// CA certificate (PEM) of a daemon with TLS; connects over TLS.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM), for a daemon that requires one (mutual TLS).
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// The name the daemon's certificate must carry (default: the address's host).
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    pub tls_domain: Option<String>,
}

impl ConnectArgs {
    pub fn access(&self) -> cuzk::client::Access {
        cuzk::client::Access {
            token_file: self.token_file.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_identity: self.tls_cert.clone().zip(self.tls_key.clone()),
            tls_domain: self.tls_domain.clone(),
        }
    }
}

/// Which synthetic circuit.
#[derive(Args, Clone)]
struct CircuitArgs {
    /// 2^K constraints.
    #[arg(long, value_name = "K", conflicts_with = "constraints")]
    synthetic: Option<u32>,
    /// Exactly N constraints (any N).
    #[arg(long, value_name = "N")]
    constraints: Option<usize>,
    /// Public inputs (not counting ONE).
    #[arg(long, default_value_t = 2)]
    public_inputs: usize,
    /// Fraction of constraints whose A side uses a variable.
    #[arg(long, default_value_t = 1.0)]
    a_density: f64,
    /// Fraction of constraints whose B side uses a variable.
    #[arg(long, default_value_t = 1.0)]
    b_density: f64,
}

impl CircuitArgs {
    fn spec(&self) -> Result<SyntheticSpec> {
        let constraints = match (self.synthetic, self.constraints) {
            (Some(k), None) if k <= 32 => 1usize << k,
            (Some(k), None) => bail!("--synthetic {k}: at most 32 (BLS12-381's largest NTT domain)"),
            (None, Some(n)) => n,
            _ => bail!("give --synthetic K or --constraints N (or, where supported, --porep / --c1)"),
        };
        let spec = SyntheticSpec {
            constraints,
            public_inputs: self.public_inputs,
            a_density: self.a_density,
            b_density: self.b_density,
        };
        spec.validate()?;
        Ok(spec)
    }
}

/// A progress bar of `len` steps, or a spinner; drawn only when stderr is a terminal.
fn progress(len: Option<u64>, msg: &str) -> ProgressBar {
    let pb = match len {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed_precise} eta {eta}")
                .expect("static template")
                .progress_chars("=> "),
        ),
        None => {
            let pb = ProgressBar::new_spinner();
            pb.enable_steady_tick(Duration::from_millis(200));
            pb
        }
    };
    pb.set_message(msg.to_string());
    // Quiet in pipes and CI: progress only on a terminal.
    if !std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    pb
}

/// The config file at `path`, or the defaults when none is given.
pub fn load_config(path: Option<&Path>) -> Result<Config> {
    Ok(match path {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    })
}

/// Loads a parameter file (with `[srs] subgroup_checks`, and its digest checked
/// when it is one of Filecoin's, `[srs] check_digests`) and logs how fast.
fn load_params(path: &Path, cfg: &Config) -> Result<Arc<ProvingKey>> {
    let digests = cuzk::filecoin::DigestChecker::filecoin(cfg.srs.check_digests);
    let checked = digests.check(path)?;
    let t = Instant::now();
    let key = ProvingKey::load(path, LoadOptions { subgroup_checks: cfg.srs.subgroup_checks })?;
    digests.unchanged(path, &checked)?;
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    info!(
        file = %path.display(),
        bytes,
        ms = t.elapsed().as_millis() as u64,
        gb_per_s = format!("{:.2}", bytes as f64 / 1e9 / t.elapsed().as_secs_f64().max(1e-9)),
        "parameters loaded"
    );
    Ok(Arc::new(key))
}

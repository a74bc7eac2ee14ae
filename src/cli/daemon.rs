//! `cuzk daemon`: serves the gRPC API and Prometheus metrics ([`cuzk::daemon`]) with
//! the config's `[daemon]` and engine sections until SIGINT/SIGTERM.

use std::process::ExitCode;

use anyhow::Result;
use cuzk::config::Config;

pub fn run(cfg: &Config) -> Result<ExitCode> {
    cuzk::daemon::run_until_signal(cfg.daemon.clone(), cfg.engine.clone())
        .map(|()| ExitCode::SUCCESS)
        .map_err(anyhow::Error::from)
}

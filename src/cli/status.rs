//! `cuzk status`: a running daemon's GetStatus, for a person at a terminal: jobs,
//! devices, each listener with the connections it holds and what its bounds closed
//! (docs/operators.md, "Liveness"), the results directory and the parameter files'
//! digest checks; exits 1 when a listener is not accepting, results are not being
//! stored or a parameter file is not the published one.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use cuzk::daemon::proto::GetStatusRequest;

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    conn: super::ConnectArgs,
}

pub fn run(a: StatusArgs) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let s = rt.block_on(async {
        let c = cuzk::client::connect_with(&a.conn.addr, &a.conn.access()).await?;
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            cuzk::client::v1(c).get_status(GetStatusRequest {}),
        )
        .await
        .context("GetStatus did not answer within 30 s")?
        .map_err(|e| anyhow::anyhow!("GetStatus: {}: {}", e.code(), e.message()))?;
        anyhow::Ok(r.into_inner())
    })?;
    println!(
        "uptime {} s; proofs completed {}, failed {}",
        s.uptime_seconds, s.total_proofs_completed, s.total_proofs_failed
    );
    for q in &s.queues {
        println!("queue {:<13} pending {:>4}  in progress {:>4}", q.proof_kind, q.pending, q.in_progress);
    }
    for d in &s.devices {
        let state = if d.healthy { "healthy".to_string() } else { format!("RETIRED: {}", d.retired_reason) };
        println!("device {} {state}; CUDA errors {}, partitions moved {}", d.index, d.cuda_errors, d.partitions_moved);
    }
    for g in &s.gpus {
        println!(
            "gpu {} {}: {:.1} of {:.1} GiB free",
            g.ordinal,
            g.name,
            g.vram_free_bytes as f64 / (1u64 << 30) as f64,
            g.vram_total_bytes as f64 / (1u64 << 30) as f64
        );
    }
    let mut all_up = true;
    for l in &s.listeners {
        all_up &= l.listening;
        let mut closed: Vec<_> = l.closed_total.iter().filter(|(_, n)| **n > 0).collect();
        closed.sort();
        let closed = closed.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(", ");
        println!(
            "listener {:<7} {:<24} {}; connections {}/{}, accepted {}, accept errors {}; closed: {}",
            l.name,
            l.address,
            if l.listening { "listening" } else { "NOT LISTENING" },
            l.open_connections,
            l.max_connections,
            l.accepted_total,
            l.accept_errors_total,
            if closed.is_empty() { "none".to_string() } else { closed }
        );
    }
    let mut store_ok = true;
    if let Some(r) = &s.results_store {
        store_ok = r.healthy;
        let free = if r.free_bytes > 0 {
            format!("{:.1} GiB free", r.free_bytes as f64 / (1u64 << 30) as f64)
        } else {
            "free space unknown".into()
        };
        println!(
            "results {} {}; stored {}, write failures {}; {free}{}",
            r.dir,
            if r.healthy { "writable" } else { "NOT STORING" },
            r.stored_total,
            r.write_failures_total,
            if r.last_error.is_empty() {
                String::new()
            } else {
                format!("; last failure at {} (Unix s): {}", r.last_failure_unix, r.last_error)
            }
        );
    }
    let mut params_ok = true;
    for f in &s.parameter_files {
        params_ok &= f.digest_status != "mismatch";
        let note = match f.digest_status.as_str() {
            "mismatch" => " (REFUSED: not Filecoin's published file; fetch it again)",
            "test" => " (test parameters: proofs from them are not valid on chain)",
            _ => "",
        };
        println!("parameters {} digest {}{note}", f.path, f.digest_status);
    }
    Ok(if all_up && store_ok && params_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

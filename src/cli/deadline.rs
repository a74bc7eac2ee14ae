//! `cuzk bench deadline`: the latency of WinningPoSt and of one WindowPoSt partition,
//! alone and while a saturating PoRep stream runs, on this host's backend. The
//! per-kind priorities (`[ingest.priority]`) are what keep the second close to the
//! first.
//!
//! With `--load-sector-size 32GiB` (or 64GiB) the load is full size: shape-only C1s
//! against TEST-ONLY timing parameters made in memory, from a cold engine (the
//! recording of the circuit included), while WinningPoSt, a WindowPoSt partition, a
//! whole WindowPoSt deadline and a SnapDeals update are submitted every
//! `--post-every-ms`, overlapping, each verified by filecoin-proofs (full_size.rs).

use std::{
    process::ExitCode,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use clap::Args;
use cuzk::{config::Config, filecoin as fil, Engine, JobSpec};

#[derive(Args)]
pub struct DeadlineArgs {
    /// Submissions of each kind per phase (one at a time).
    #[arg(long, default_value_t = 20)]
    pub(super) count: usize,
    /// PoRep jobs kept in flight by the load stream (default 32; 2 with
    /// --load-sector-size).
    #[arg(long)]
    pub(super) load_inflight: Option<usize>,
    /// Work directory for the sealed test sectors (default: a temporary one).
    #[arg(long, value_name = "DIR")]
    pub(super) work: Option<std::path::PathBuf>,
    /// A full-size load instead of 2KiB PoRep: shape-only C1s of this sector size
    /// (32GiB, 64GiB) against TEST-ONLY timing parameters made in memory. The
    /// engine's Verify stage is off (such proofs never verify); the deadline proofs
    /// are verified by filecoin-proofs here.
    #[arg(long, value_name = "SIZE")]
    pub(super) load_sector_size: Option<String>,
    /// With --load-sector-size: PoRep proofs the load makes; the run ends with them.
    #[arg(long, default_value_t = 4)]
    pub(super) load_proofs: usize,
    /// With --load-sector-size: of those, the last N run with no deadline work
    /// beside them, for the PoRep throughput the deadline work costs.
    #[arg(long, default_value_t = 0)]
    pub(super) quiet_proofs: usize,
    /// With --load-sector-size: a deadline proof is submitted this often (the kinds
    /// in turn, overlapping).
    #[arg(long, default_value_t = 1500)]
    pub(super) post_every_ms: u64,
    /// With --load-sector-size: issue no load proof and no deadline proof after
    /// this many seconds since the run began; the proofs in flight finish and the
    /// summary covers what was done (for a host lent by the hour, instead of a
    /// kill that loses the summary). The quiet proofs may then be fewer or none.
    #[arg(long, value_name = "SECS")]
    pub(super) stop_after: Option<u64>,
}

/// p50 / p99 / max of `v` in seconds.
pub(super) fn percentiles(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    (at(0.5), at(0.99), v[v.len() - 1])
}

/// Latencies of `n` jobs one after another, each proof checked, and the mean time
/// per stage (queue wait, busy) in ms: where a late proof waited.
fn latencies(
    engine: &Engine,
    n: usize,
    spec: &dyn Fn() -> JobSpec,
    check: &dyn Fn(&[u8]) -> bool,
) -> Result<(Vec<f64>, String)> {
    let mut sum = [(0f64, 0f64); 7];
    let lat = (0..n)
        .map(|i| {
            let t = Instant::now();
            let out = engine.submit_blocking(spec())?.wait_blocking()?;
            let s = t.elapsed().as_secs_f64();
            anyhow::ensure!(check(&out.proof_bytes()), "proof {i} did not verify with filecoin-proofs");
            for (acc, st) in sum.iter_mut().zip(out.timings.stages.iter()) {
                acc.0 += st.queue_wait.as_secs_f64() * 1e3 / n as f64;
                acc.1 += st.busy.as_secs_f64() * 1e3 / n as f64;
            }
            Ok(s)
        })
        .collect::<Result<Vec<_>>>()?;
    let stages = cuzk::StageName::ALL
        .iter()
        .zip(sum)
        .map(|(name, (q, b))| format!("{name} {q:.0}/{b:.0}"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok((lat, stages))
}

pub fn run(cfg: &Config, a: DeadlineArgs) -> Result<ExitCode> {
    if a.load_sector_size.is_some() {
        return super::deadline_full::run(cfg, a);
    }
    anyhow::ensure!(a.stop_after.is_none(), "--stop-after needs --load-sector-size (the 2KiB load ends by --count)");
    let dir = cfg.engine.ingest.param_cache_dir();
    std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &dir);
    let winning = fil::RegisteredPoStProof::StackedDrgWinning2KiBV1;
    let window = fil::RegisteredPoStProof::StackedDrgWindow2KiBV1_2;
    let seal = fil::RegisteredSealProof::StackedDrg2KiBV1_1;
    for id in [fil::CircuitId::Seal(seal), winning.into(), window.into()] {
        let (params, vk) = fil::parameter_files(&dir, id)?;
        if !params.exists() || !vk.exists() {
            super::srs::gen_circuit(id, Some(dir.clone()), Some(1))?;
        }
    }
    let tmp = tempdir_in(a.work.clone())?;
    let t = Instant::now();
    let c1 = fil::generate_c1(seal, 1, &tmp.join("c1"))?;
    let w = fil::generate_post_vanilla(winning, 1, 2, &tmp.join("winning"))?;
    let d = fil::generate_post_vanilla(window, 2, 3, &tmp.join("window"))?;
    println!("fixtures (2KiB PoRep C1, WinningPoSt, one WindowPoSt partition) in {:.1} s", t.elapsed().as_secs_f64());

    let engine = Engine::start(cfg.engine.clone())?;
    println!("backend: {}", engine.backend());
    let post = |f: &fil::PostFixture, partition: Option<usize>| {
        let f = (f.proof, f.randomness, f.prover_id, f.vanilla_proofs.clone());
        move || {
            JobSpec::post(fil::PostRequest {
                proof: f.0,
                randomness: f.1,
                prover_id: f.2,
                vanilla_proofs: f.3.clone(),
                partition,
            })
        }
    };
    let winning_spec = post(&w, None);
    let window_spec = post(&d, Some(0));
    let winning_ok =
        |p: &[u8]| fil::verify_winning_post(winning, w.randomness, w.prover_id, &w.challenged, p).unwrap_or(false);
    let window_ok =
        |p: &[u8]| fil::verify_window_post(window, d.randomness, d.prover_id, &d.sectors, p).unwrap_or(false);
    let porep = {
        let (c1, prover, sector) = (c1.c1_json.clone(), c1.prover_id, c1.sector_id);
        move || JobSpec::porep_c1(c1.clone(), prover, sector)
    };
    // Warm: parameters loaded, recordings made, devices warm.
    latencies(&engine, 2, &winning_spec, &winning_ok)?;
    latencies(&engine, 2, &window_spec, &window_ok)?;
    engine.submit_blocking(porep())?.wait_blocking()?;

    let mut rows = Vec::new();
    for (phase, loaded) in [("alone", false), ("under PoRep load", true)] {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let load: Vec<_> = if loaded {
            (0..a.load_inflight.unwrap_or(32))
                .map(|_| {
                    let (engine, stop, done, porep) = (engine.clone(), stop.clone(), done.clone(), porep.clone());
                    std::thread::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            if let Ok(h) = engine.submit_blocking(porep()) {
                                if h.wait_blocking().is_ok() {
                                    done.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        if loaded {
            // Let the stream fill every stage queue first.
            std::thread::sleep(Duration::from_secs(5));
        }
        let t = Instant::now();
        let before = done.load(Ordering::Relaxed);
        let (mut win, win_stages) = latencies(&engine, a.count, &winning_spec, &winning_ok)?;
        let (mut wdp, wdp_stages) = latencies(&engine, a.count, &window_spec, &window_ok)?;
        println!("{phase}: WinningPoSt mean queue wait / busy per stage (ms): {win_stages}");
        println!("{phase}: WindowPoSt partition mean queue wait / busy per stage (ms): {wdp_stages}");
        let porep_rate = (done.load(Ordering::Relaxed) - before) as f64 / t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for h in load {
            let _ = h.join();
        }
        rows.push((phase, "WinningPoSt", percentiles(&mut win), porep_rate));
        rows.push((phase, "WindowPoSt partition", percentiles(&mut wdp), porep_rate));
    }
    engine.shutdown();
    println!("{:<18} {:<22} {:>8} {:>8} {:>8} {:>16}", "phase", "kind", "p50 s", "p99 s", "max s", "PoRep proofs/s");
    for (phase, kind, (p50, p99, max), rate) in &rows {
        println!("{phase:<18} {kind:<22} {p50:>8.3} {p99:>8.3} {max:>8.3} {rate:>16.2}");
    }
    for kind in ["WinningPoSt", "WindowPoSt partition"] {
        let p = |phase: &str| rows.iter().find(|r| r.0 == phase && r.1 == kind).map(|r| r.2 .0).unwrap_or(f64::NAN);
        println!("{kind}: p50 under load / alone = {:.2}x (target <= 1.5x)", p("under PoRep load") / p("alone"));
    }
    if a.work.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn tempdir_in(dir: Option<std::path::PathBuf>) -> Result<std::path::PathBuf> {
    let d = dir.unwrap_or_else(|| std::env::temp_dir().join(format!("cuzk-deadline-{}", std::process::id())));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

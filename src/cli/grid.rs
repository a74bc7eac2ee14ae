//! `cuzk prove --c1 … --grid-synth … --grid-jobs …`: the host budget under every
//! setting of synthesis workers × jobs in flight, one process, one parameter set.
//!
//! For each `synthesize.max_concurrency` an engine is started and warmed by one
//! partition (recording made or loaded, parameters resident); then for each number of
//! jobs in flight the client keeps that many jobs submitted for a window, cancels them,
//! and waits until every stage is empty and the budget is back where it started. A line
//! per setting: partitions proved in the window, partitions synthesized at once, the
//! budget's peak, the process's peak RSS (reset per window), the least memory the
//! machine had available, and any job that failed other than by the cancel.

use std::{
    process::ExitCode,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::Result;
use cuzk::{actors::engine::Canceller, bench, bench::fmt_bytes, Engine, EngineConfig, JobError, JobSpec, StageName};

/// The sector a `--c1` run proves (`prove.rs`), and the grid repeats.
#[derive(Clone)]
pub(super) struct Sector {
    /// The C1 output as given (JSON or the Lotus/Curio wrapper).
    pub(super) c1: Vec<u8>,
    pub(super) prover_id: [u8; 32],
    pub(super) sector_id: u64,
}

/// The grid's axes and each window's length.
pub struct Grid {
    pub synth: Vec<usize>,
    pub jobs: Vec<usize>,
    pub window: Duration,
}

/// What one window showed.
#[derive(Default)]
struct Window {
    proved: u64,
    jobs_done: u64,
    synth_at_once: u64,
    budget_peak: u64,
    min_available: u64,
    errors: Vec<String>,
    drained: Option<Duration>,
    leaked: u64,
}

/// Runs the grid; FAILURE when a job failed other than by its cancel, or a window's
/// reservations were not all returned.
pub fn run(
    engine_cfg: &EngineConfig,
    sector: &Sector,
    seed: Option<u64>,
    timing: Option<(cuzk::filecoin::RegisteredSealProof, Arc<cuzk::ProvingKey>)>,
    grid: &Grid,
) -> Result<ExitCode> {
    let mut ok = true;
    let mut next_seed = seed.unwrap_or_else(rand::random);
    println!(
        "budget grid: synthesis workers {:?} x jobs in flight {:?}, {:.0} s windows (TEST windows: jobs are \
         cancelled at the window's end, no proof is kept)",
        grid.synth,
        grid.jobs,
        grid.window.as_secs_f64()
    );
    for &s in &grid.synth {
        let mut cfg = engine_cfg.clone();
        cfg.synthesize.max_concurrency = s;
        let t = Instant::now();
        let engine = Engine::start(cfg)?;
        if let Some((proof, key)) = &timing {
            if let Err(e) = engine.params().insert(*proof, key.clone()) {
                engine.shutdown();
                return Err(anyhow::Error::from(e).context("timing parameters"));
            }
        }
        let rest = match warm_up(&engine, engine_cfg.synthesize.precompile, sector, &mut next_seed) {
            Ok(rest) => rest,
            Err(e) => {
                engine.shutdown();
                return Err(e.context(format!("warming the engine with synthesize.max_concurrency = {s}")));
            }
        };
        let b = engine.host_budget();
        println!(
            "synth {s:>2}: engine warm in {:.1} s (one partition synthesized, then cancelled; recordings ready: {}); \
             host budget {}, {} held at rest (parameters, recording)",
            t.elapsed().as_secs_f64(),
            engine.recordings().ready(),
            fmt_bytes(b.capacity),
            fmt_bytes(rest)
        );
        for &j in &grid.jobs {
            let w = window(&engine, sector, j, grid.window, rest, &mut next_seed);
            let bad = !w.errors.is_empty() || w.drained.is_none() || w.leaked > 0;
            ok &= !bad;
            println!(
                "synth {s:>2} jobs {j}: {} partitions proved in the window ({} s/partition), {} jobs done; \
                 synthesizing at once max {}; budget peak {} of {}; peak RSS {}; least MemAvailable {}; drained {}{}{}",
                w.proved,
                if w.proved > 0 { format!("{:.2}", grid.window.as_secs_f64() / w.proved as f64) } else { "-".into() },
                w.jobs_done,
                w.synth_at_once,
                fmt_bytes(w.budget_peak),
                fmt_bytes(b.capacity),
                bench::peak_rss_bytes().map_or("?".into(), fmt_bytes),
                fmt_bytes(w.min_available),
                w.drained.map_or("NOT within 180 s".into(), |d| format!("in {:.1} s", d.as_secs_f64())),
                if w.leaked > 0 {
                    format!("; {} of reservations NOT returned", fmt_bytes(w.leaked))
                } else {
                    String::new()
                },
                if bad { "  FAILED" } else { "" }
            );
            for e in &w.errors {
                println!("  job error: {e}");
            }
        }
        engine.shutdown();
    }
    println!("budget grid: {}", if ok { "every setting within its budget, nothing failed" } else { "FAILED" });
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The sector's job with the next seed.
fn job(sector: &Sector, seed: &mut u64) -> JobSpec {
    *seed = seed.wrapping_add(1);
    JobSpec::porep_c1(sector.c1.clone(), sector.prover_id, sector.sector_id).with_seed(*seed)
}

fn stage(engine: &Engine, s: StageName) -> cuzk::actors::StageSnapshot {
    engine.stage_snapshots().into_iter().find(|x| x.stage == s).expect("every stage has metrics")
}

/// One job until a partition is synthesized and, with pre-compiled synthesis, the
/// recording is ready (made, or loaded from `recording_dir`; at most 10 minutes), the
/// parameters resident; then cancelled and drained.
fn warm_up(engine: &Engine, precompile: bool, sector: &Sector, seed: &mut u64) -> Result<u64> {
    let before = stage(engine, StageName::Synthesize).completed;
    // At rest afterwards: what is held now (parameters) plus the recording it makes.
    let rest = engine.host_budget().used - engine.recordings().bytes();
    let h = engine.submit_blocking(job(sector, seed))?;
    let c = h.canceller();
    let waiter = std::thread::spawn(move || h.wait_blocking());
    let t = Instant::now();
    let warm = || {
        stage(engine, StageName::Synthesize).completed > before
            && (!precompile || engine.recordings().ready() > 0 || t.elapsed() > Duration::from_secs(600))
    };
    while !warm() && !waiter.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
    }
    c.cancel_blocking();
    match waiter.join().expect("waiter thread") {
        Ok(_) | Err(JobError::Cancelled) => {}
        Err(e) => return Err(anyhow::Error::from(e).context("warm-up job")),
    }
    // A cancelled partition may still be in a mailbox between stages, holding its
    // reservation: drained means back to the parameters and the recording.
    let rest = rest + engine.recordings().bytes();
    drain(engine, rest).map(|_| rest).map_err(|left| {
        anyhow::anyhow!("the warm-up job's partitions did not drain: {} still reserved", fmt_bytes(left))
    })
}

/// Waits until no stage holds or queues an item and the host budget is back to `base`
/// bytes: how long that took, or the bytes still reserved after 180 s.
fn drain(engine: &Engine, base: u64) -> std::result::Result<Duration, u64> {
    let t = Instant::now();
    loop {
        let idle = engine.stage_snapshots().iter().all(|s| s.in_flight == 0 && s.queue_len == 0);
        let used = engine.host_budget().used;
        if idle && used <= base {
            return Ok(t.elapsed());
        }
        if t.elapsed() > Duration::from_secs(180) {
            return Err(used.saturating_sub(base));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `jobs` jobs kept in flight for `len`, then cancelled and drained back to `rest`
/// bytes of the host budget, with the process's peak RSS reset at the start.
fn window(engine: &Engine, sector: &Sector, jobs: usize, len: Duration, rest: u64, seed: &mut u64) -> Window {
    reset_peak_rss();
    let proved_before = stage(engine, StageName::ProveGpu).completed;
    let stop = Arc::new(AtomicBool::new(false));
    // Cancellers of submitted jobs; a job submitted after the stop is cancelled by its
    // own thread, under this lock, so none outlives the window.
    let live: Arc<Mutex<Vec<Canceller>>> = Arc::default();
    let mut w = Window { min_available: u64::MAX, ..Window::default() };
    let seeds: Vec<u64> = (0..jobs).map(|i| seed.wrapping_add(1000 * (i as u64 + 1))).collect();
    *seed = seed.wrapping_add(1000 * (jobs as u64 + 1));
    let clients: Vec<_> = seeds
        .into_iter()
        .map(|mut s| {
            let (engine, stop, live, sector) = (engine.clone(), stop.clone(), live.clone(), sector.clone());
            std::thread::spawn(move || {
                let (mut done, mut errors) = (0u64, Vec::new());
                while !stop.load(Ordering::SeqCst) {
                    let h = match engine.submit_blocking(job(&sector, &mut s)) {
                        Ok(h) => h,
                        Err(e) => {
                            errors.push(format!("submit: {e}"));
                            break;
                        }
                    };
                    {
                        let mut l = live.lock().unwrap_or_else(|e| e.into_inner());
                        if stop.load(Ordering::SeqCst) {
                            h.canceller().cancel_blocking();
                        }
                        l.push(h.canceller());
                    }
                    match h.wait_blocking() {
                        Ok(_) => done += 1,
                        Err(JobError::Cancelled) => {}
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (done, errors)
            })
        })
        .collect();
    let t = Instant::now();
    let sample = |w: &mut Window| {
        w.synth_at_once = w.synth_at_once.max(stage(engine, StageName::Synthesize).in_flight);
        w.budget_peak = w.budget_peak.max(engine.host_budget().used);
        if let Some(a) = mem_available() {
            w.min_available = w.min_available.min(a);
        }
    };
    while t.elapsed() < len {
        sample(&mut w);
        std::thread::sleep(Duration::from_millis(100));
    }
    w.proved = stage(engine, StageName::ProveGpu).completed - proved_before;
    {
        let l = live.lock().unwrap_or_else(|e| e.into_inner());
        stop.store(true, Ordering::SeqCst);
        for c in l.iter() {
            c.cancel_blocking();
        }
    }
    for c in clients {
        let (done, errors) = c.join().unwrap_or_else(|_| (0, vec!["client thread panicked".into()]));
        w.jobs_done += done;
        w.errors.extend(errors);
    }
    sample(&mut w);
    match drain(engine, rest) {
        Ok(d) => w.drained = Some(d),
        Err(left) => w.leaked = left,
    }
    w
}

/// Resets the process's peak RSS (`VmHWM`) so each window reports its own (Linux:
/// `clear_refs` 5); elsewhere the peak stays the process's.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The machine's `MemAvailable` (Linux), in bytes.
fn mem_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

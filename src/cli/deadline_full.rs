//! `cuzk bench deadline --load-sector-size 32GiB`: deadline proofs under a full-size
//! PoRep load, from the load's cold start to its end.
//!
//! The load: `--load-inflight` jobs of a shape-only C1 at a time against TEST-ONLY
//! timing parameters made in memory, until `--load-proofs` are done; the engine
//! starts cold, so the first proof records the circuit (minutes at 32GiB). Verify is
//! off in the engine (timing-parameter proofs never verify). Beside it, every
//! `--post-every-ms` a deadline proof is submitted on a thread of its own (they
//! overlap): WinningPoSt, one WindowPoSt partition, a whole WindowPoSt deadline (two
//! partitions) and a SnapDeals update in turn, from real test parameters (2KiB), each
//! verified here by filecoin-proofs. Each is timed from submission to its result and
//! put in the phase it was submitted in: `recording` (before the load's first proof),
//! `steady` (after it). The last `--quiet-proofs` load proofs run with no deadline
//! work beside them, so that the median gap between PoRep proofs with and without it
//! gives the throughput the deadline work costs, in the same run.

use std::{
    process::ExitCode,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use cuzk::{config::Config, filecoin as fil, Engine, JobSpec};

use super::deadline::{percentiles, tempdir_in, DeadlineArgs};

/// One deadline proof: its kind, when it was submitted (since the load started),
/// its latency, and its per-stage queue wait and busy time.
struct Sample {
    at: f64,
    secs: f64,
    /// (queue wait, busy) per stage, in seconds.
    stages: [(f64, f64); 7],
    /// The backend's operations, summed over the job's partitions; beside the
    /// load also the lane's waits and spans (`lane_wait`, `yield_wait`, `prep`,
    /// `execute`): where ProveGpu's busy time went.
    ops: Vec<(&'static str, f64)>,
}

/// Deadline proofs of one kind outstanding at once.
const MAX_OUTSTANDING: usize = 2;

/// Whether a sample belongs to a phase.
type InPhase = Box<dyn Fn(&Sample) -> bool>;

type Check = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;
type Make = Box<dyn Fn() -> JobSpec + Send + Sync>;

pub fn run(cfg: &Config, a: DeadlineArgs) -> Result<ExitCode> {
    let size = a.load_sector_size.clone().unwrap_or_default();
    let seal = fil::proof_for_sector_size(&size).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(a.load_proofs > a.quiet_proofs, "--load-proofs must be above --quiet-proofs");
    // --stop-after: nothing new is issued past it (checked by the load threads and
    // the deadline loop), so the run ends with a summary.
    let began = Instant::now();
    let stop_at = a.stop_after.map(|s| began + Duration::from_secs(s));
    let past = move || stop_at.is_some_and(|t| Instant::now() >= t);
    let dir = cfg.engine.ingest.param_cache_dir();
    std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &dir);
    let winning = fil::RegisteredPoStProof::StackedDrgWinning2KiBV1;
    let window = fil::RegisteredPoStProof::StackedDrgWindow2KiBV1_2;
    let update = fil::RegisteredUpdateProof::StackedDrg2KiBV1;
    for id in [winning.into(), window.into(), fil::CircuitId::Update(update)] {
        let (params, vk) = fil::parameter_files(&dir, id)?;
        if !params.exists() || !vk.exists() {
            super::srs::gen_circuit(id, Some(dir.clone()), Some(1))?;
        }
    }
    let tmp = tempdir_in(a.work.clone())?;
    let t = Instant::now();
    let w = fil::generate_post_vanilla(winning, 1, 2, &tmp.join("winning"))?;
    let d = fil::generate_post_vanilla(window, 2, 3, &tmp.join("window"))?;
    let dd = fil::generate_post_vanilla(window, 4, 4, &tmp.join("window-deadline"))?;
    let u = fil::generate_update_vanilla(update, 5, &tmp.join("update"))?;
    let load = fil::shape_only_fixture(seal, 1)?;
    println!(
        "fixtures (WinningPoSt, WindowPoSt 2 and 4 sectors, SnapDeals; {size} shape-only C1) in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let post = |f: &fil::PostFixture, partition: Option<usize>| -> Make {
        let (proof, randomness, prover_id, vanilla) = (f.proof, f.randomness, f.prover_id, f.vanilla_proofs.clone());
        Box::new(move || {
            JobSpec::post(fil::PostRequest { proof, randomness, prover_id, vanilla_proofs: vanilla.clone(), partition })
        })
    };
    let window_check = |f: &fil::PostFixture| -> Check {
        let (randomness, prover_id, sectors) = (f.randomness, f.prover_id, f.sectors.clone());
        Box::new(move |p| fil::verify_window_post(window, randomness, prover_id, &sectors, p).unwrap_or(false))
    };
    let (wr, wp, wc) = (w.randomness, w.prover_id, w.challenged.clone());
    let (ur, un, ud, uv) = (u.comm_r_old, u.comm_r_new, u.comm_d_new, u.vanilla_proofs.clone());
    let kinds: Vec<(&'static str, Make, Check)> = vec![
        (
            "WinningPoSt",
            post(&w, None),
            Box::new(move |p| fil::verify_winning_post(winning, wr, wp, &wc, p).unwrap_or(false)),
        ),
        ("WindowPoSt partition", post(&d, Some(0)), window_check(&d)),
        ("WindowPoSt deadline", post(&dd, None), window_check(&dd)),
        (
            "SnapDeals",
            Box::new(move || {
                JobSpec::update(fil::UpdateRequest {
                    proof: update,
                    vanilla_proofs: uv.clone(),
                    comm_r_old: ur,
                    comm_r_new: un,
                    comm_d_new: ud,
                })
            }),
            Box::new(move |p| fil::verify_empty_sector_update(update, p, ur, un, ud).unwrap_or(false)),
        ),
    ];
    let kinds = Arc::new(kinds);

    // The load's proofs cannot verify; the deadline proofs are checked here.
    let mut engine_cfg = cfg.engine.clone();
    engine_cfg.verify.enabled = false;
    let engine = Engine::start(engine_cfg)?;
    println!("backend: {}", engine.backend());
    let fail = |e: anyhow::Error| {
        engine.shutdown();
        e
    };

    // Alone: each kind, one at a time, after two untimed ones (parameters loaded).
    let mut alone = Vec::new();
    for (k, (kind, make, check)) in kinds.iter().enumerate() {
        for i in 0..a.count + 2 {
            let s = prove_one(&engine, kind, make, check, Instant::now()).map_err(fail)?;
            if i >= 2 {
                alone.push((k, s));
            }
        }
    }

    let t = Instant::now();
    let key = super::srs::porep_timing_key(seal, 1).map_err(fail)?;
    engine.params().insert(seal, Arc::new(key)).context("timing parameters").map_err(fail)?;
    println!("timing parameters for {size} in memory in {:.1} s", t.elapsed().as_secs_f64());

    // The load: `load_inflight` jobs at a time until `load_proofs` are done.
    let start = Instant::now();
    let done_at = Arc::new(Mutex::new(Vec::<f64>::new()));
    let issued = Arc::new(AtomicUsize::new(0));
    let load_threads: Vec<_> = (0..a.load_inflight.unwrap_or(2).max(1))
        .map(|_| {
            let (engine, done_at, issued, n) = (engine.clone(), done_at.clone(), issued.clone(), a.load_proofs);
            let (c1, prover, sector) = (load.c1_json.clone(), load.prover_id, load.sector_id);
            std::thread::spawn(move || -> Result<()> {
                while !past() && issued.fetch_add(1, Ordering::SeqCst) < n {
                    let out = engine.submit_blocking(JobSpec::porep_c1(c1.clone(), prover, sector))?.wait_blocking()?;
                    anyhow::ensure!(!out.proofs.is_empty(), "a load proof came back empty");
                    let at = start.elapsed().as_secs_f64();
                    let mut d = done_at.lock().unwrap_or_else(|p| p.into_inner());
                    d.push(at);
                    // As it happens, so that a run cut short still says what it saw.
                    println!("load proof {} done at {at:.1} s", d.len());
                }
                Ok(())
            })
        })
        .collect();

    // Deadline proofs every `post_every_ms`, until the quiet proofs begin.
    let samples = Arc::new(Mutex::new(Vec::<(usize, Sample)>::new()));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut posts = Vec::new();
    let (mut next, mut skipped) = (0usize, 0usize);
    let quiet_from = a.load_proofs - a.quiet_proofs;
    while done_at.lock().unwrap_or_else(|p| p.into_inner()).len() < quiet_from
        && !load_threads.iter().all(|h| h.is_finished())
        && !past()
    {
        // At most MAX_OUTSTANDING of a kind at once: on a slow host, or for a kind
        // that waits long (SnapDeals is bulk work), its turns are skipped (and
        // counted) rather than piling up threads or crowding out the other kinds.
        posts.retain(|(_, p): &(usize, std::thread::JoinHandle<()>)| !p.is_finished());
        let k = next % kinds.len();
        next += 1;
        if posts.iter().filter(|(i, _)| *i == k).count() >= MAX_OUTSTANDING {
            skipped += 1;
            std::thread::sleep(Duration::from_millis(a.post_every_ms));
            continue;
        }
        let (engine, kinds, samples, failures) = (engine.clone(), kinds.clone(), samples.clone(), failures.clone());
        posts.push((
            k,
            std::thread::spawn(move || {
                let (kind, make, check) = &kinds[k];
                match prove_one(&engine, kind, make, check, start) {
                    Ok(s) => {
                        println!("{kind} submitted at {:.1} s: {:.3} s", s.at, s.secs);
                        samples.lock().unwrap_or_else(|p| p.into_inner()).push((k, s))
                    }
                    Err(e) => failures.lock().unwrap_or_else(|p| p.into_inner()).push(format!("{kind}: {e:#}")),
                }
            }),
        ));
        std::thread::sleep(Duration::from_millis(a.post_every_ms));
    }
    for (_, p) in posts {
        let _ = p.join();
    }
    let mut load_errors = Vec::new();
    for h in load_threads {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => load_errors.push(format!("{e:#}")),
            Err(_) => load_errors.push("a load thread panicked".into()),
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let made = done_at.lock().unwrap_or_else(|p| p.into_inner()).len();
    if made < a.load_proofs && past() {
        println!(
            "stopped issuing at --stop-after {} s (since the run began): {made} of {} load proofs done",
            a.stop_after.unwrap_or_default(),
            a.load_proofs
        );
    }
    if skipped > 0 {
        println!("deadline submissions skipped with {MAX_OUTSTANDING} of their kind outstanding: {skipped}");
    }
    engine.shutdown();
    if a.work.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }

    // The load's proofs.
    let mut done = done_at.lock().unwrap_or_else(|p| p.into_inner()).clone();
    done.sort_by(f64::total_cmp);
    let first = done.first().copied().unwrap_or(f64::INFINITY);
    let gaps: Vec<f64> = done.windows(2).map(|w| w[1] - w[0]).collect();
    println!("load: {} {size} proofs at {} s (since the load started; {wall:.1} s in all)", done.len(), fmt(&done));
    println!("load gaps: {} s", fmt(&gaps));
    // Gaps after the second proof: with deadline work beside them, then without.
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        (!v.is_empty()).then(|| percentiles(&mut v).0)
    };
    let steady: Vec<f64> = gaps.iter().skip(1).copied().collect();
    let quiet_gaps = a.quiet_proofs.min(steady.len());
    let (busy, quiet) = steady.split_at(steady.len() - quiet_gaps);
    println!(
        "PoRep median gap after the second proof: with deadline work {} s ({} gaps), without {} s ({} gaps)",
        median(busy).map_or("-".into(), |m| format!("{m:.1}")),
        busy.len(),
        median(quiet).map_or("-".into(), |m| format!("{m:.1}")),
        quiet.len()
    );

    // The deadline proofs, by phase and kind.
    let samples = samples.lock().unwrap_or_else(|p| p.into_inner());
    println!(
        "{:<10} {:<22} {:>4} {:>8} {:>8} {:>8}   mean queue wait / busy per stage (ms)",
        "phase", "kind", "n", "p50 s", "p99 s", "max s"
    );
    let phases: [(&str, InPhase); 3] = [
        ("alone", Box::new(|_| false)),
        ("recording", Box::new(move |s: &Sample| s.at < first)),
        ("steady", Box::new(move |s: &Sample| s.at >= first)),
    ];
    for (phase, in_phase) in &phases {
        for (k, (kind, _, _)) in kinds.iter().enumerate() {
            let set: Vec<&Sample> = if *phase == "alone" {
                alone.iter().filter(|(i, _)| *i == k).map(|(_, s)| s).collect()
            } else {
                samples.iter().filter(|(i, s)| *i == k && in_phase(s)).map(|(_, s)| s).collect()
            };
            if set.is_empty() {
                continue;
            }
            let mut lat: Vec<f64> = set.iter().map(|s| s.secs).collect();
            let (p50, p99, max) = percentiles(&mut lat);
            let n = set.len() as f64;
            let stages = per_stage(|i| {
                let q: f64 = set.iter().map(|s| s.stages[i].0).sum::<f64>() / n;
                let b: f64 = set.iter().map(|s| s.stages[i].1).sum::<f64>() / n;
                (q, b)
            });
            println!("{phase:<10} {kind:<22} {:>4} {p50:>8.3} {p99:>8.3} {max:>8.3}   {stages}", set.len());
            // Where the slowest one's time went: the tail a mean hides.
            if let Some(s) = set.iter().max_by(|a, b| a.secs.total_cmp(&b.secs)).filter(|_| set.len() > 1) {
                println!(
                    "{phase:<10} {kind:<22} slowest, submitted at {:.1} s: {:.3} s; queue wait / busy (ms): {}",
                    s.at,
                    s.secs,
                    per_stage(|i| s.stages[i])
                );
                let ops: Vec<String> = s.ops.iter().map(|(n, d)| format!("{n} {:.0}", d * 1e3)).collect();
                println!("{phase:<10} {kind:<22} slowest, operations (ms): {}", ops.join(", "));
            }
        }
    }
    // What deadline work cost the load on each device, and its wait there.
    for d in engine.snapshot_blocking().devices {
        let g = d.deadline;
        println!(
            "device {}: {} deadline partitions beside the load, mean wait for a yield point {:.0} ms \
             (longest {:.0} ms: the load's work from \"{}\" to \"{}\"); load work stood aside {} times, \
             {:.2} s in all",
            d.device,
            g.turns,
            g.turn_wait.as_secs_f64() * 1e3 / g.turns.max(1) as f64,
            g.turn_wait_max.as_secs_f64() * 1e3,
            g.turn_wait_max_at.0,
            g.turn_wait_max_at.1,
            g.yields,
            g.yielded.as_secs_f64()
        );
        // Which stretches of the load's work ended the longest waits: the next one to cut.
        for w in g.worst.iter().flatten() {
            println!(
                "device {}: waits ended by the load's work from \"{}\" to \"{}\": {}, mean {:.0} ms, longest {:.0} ms",
                d.device,
                w.from,
                w.to,
                w.waits,
                w.total.as_secs_f64() * 1e3 / w.waits.max(1) as f64,
                w.max.as_secs_f64() * 1e3
            );
        }
    }
    let failures = failures.lock().unwrap_or_else(|p| p.into_inner());
    for f in failures.iter().chain(&load_errors) {
        println!("FAILED: {f}");
    }
    Ok(if failures.is_empty() && load_errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Proves one deadline job, checks its proof with filecoin-proofs, and times it.
fn prove_one(engine: &Engine, kind: &'static str, make: &Make, check: &Check, since: Instant) -> Result<Sample> {
    let at = since.elapsed().as_secs_f64();
    let t = Instant::now();
    let out = engine.submit_blocking(make())?.wait_blocking()?;
    let secs = t.elapsed().as_secs_f64();
    anyhow::ensure!(check(&out.proof_bytes()), "{kind}: the proof did not verify with filecoin-proofs");
    let mut stages = [(0.0, 0.0); 7];
    for (acc, st) in stages.iter_mut().zip(out.timings.stages.iter()) {
        *acc = (st.queue_wait.as_secs_f64(), st.busy.as_secs_f64());
    }
    let ops = out.timings.ops.iter().map(|(n, d)| (*n, d.as_secs_f64())).collect();
    Ok(Sample { at, secs, stages, ops })
}

/// "stage q/b, ..." in ms, from (queue wait, busy) in seconds per stage index.
fn per_stage(f: impl Fn(usize) -> (f64, f64)) -> String {
    cuzk::StageName::ALL
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (q, b) = f(i);
            format!("{name} {:.0}/{:.0}", q * 1e3, b * 1e3)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt(v: &[f64]) -> String {
    v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(", ")
}

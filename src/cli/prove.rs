//! `cuzk prove`: synthetic circuits through the pipeline, or with `--c1` a Filecoin
//! sector's commit phase 2 (cuzk, or filecoin-proofs with `--baseline`), with a
//! timing report and optional `verify_seal`.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use clap::Args;
use cuzk::{
    bench::{self, fmt_bytes},
    config::Config,
    gpu::pinned::PinnedStats,
    Engine, EngineConfig, JobHandle, JobSpec, JobTimings, StageName, SubmitError,
};

use super::{grid::Sector, load_params, progress, CircuitArgs};

#[derive(Args)]
pub struct ProveArgs {
    #[command(flatten)]
    circuit: CircuitArgs,
    /// Parameter file for the synthetic circuit.
    #[arg(long, value_name = "FILE", required_unless_present = "c1")]
    params: Option<PathBuf>,
    /// A Filecoin C1 output (filecoin-proofs-api JSON or the Lotus/Curio wrapper):
    /// prove the sector's commit phase 2.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["synthetic", "constraints", "params"], requires_all = ["prover_id", "sector_id"])]
    c1: Option<PathBuf>,
    /// Prover id (32 bytes hex, or an actor id like 1000 / f01000).
    #[arg(long, value_name = "HEX")]
    prover_id: Option<String>,
    /// Sector number.
    #[arg(long, value_name = "N")]
    sector_id: Option<u64>,
    /// Filecoin parameter cache (default: [ingest] param_cache, FIL_PROOFS_PARAMETER_CACHE,
    /// /var/tmp/filecoin-proof-parameters).
    #[arg(long, value_name = "DIR")]
    param_cache: Option<PathBuf>,
    /// With --c1: run filecoin-proofs' own `seal_commit_phase2` (bellperson CPU
    /// prover) instead of cuzk, for comparison.
    #[arg(long, requires = "c1")]
    baseline: bool,
    /// Number of proofs.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// With --c1: prove this many first, untimed, in the same process (parameters
    /// loaded, kernels and recordings warm), then time the --count proofs: a warm
    /// figure comparable to a warmed-up baseline. Their proofs are not kept.
    #[arg(long, default_value_t = 0, requires = "c1")]
    warmup: usize,
    /// Makes witnesses and r/s deterministic (default: random).
    #[arg(long)]
    seed: Option<u64>,
    /// Write the proof here: the partition proofs back to back (192 bytes each), or for
    /// non-interactive PoRep the aggregate; with --count, one after another.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Verify every proof; exit non-zero unless all verify.
    #[arg(long)]
    verify: bool,
    /// With --c1: prove against TEST-ONLY timing parameters generated in memory for
    /// the C1's proof type (`srs gen --timing`, without the file), with the Verify
    /// stage off: times a full-size sector (with a `gen-c1 --shape-only` C1) on a host
    /// without room for its parameter file. Its proofs never verify.
    #[arg(long, requires = "c1", conflicts_with_all = ["baseline", "verify"])]
    timing_params: bool,
    /// With --c1: instead of a timed stream, the host budget under each of these
    /// `synthesize.max_concurrency` settings (comma-separated) crossed with each
    /// --grid-jobs: jobs kept in flight for --grid-window seconds, then cancelled and
    /// drained; a line per setting (partitions proved, synthesized at once, budget peak,
    /// peak RSS, least MemAvailable). Exits non-zero if a job fails or a reservation is
    /// not returned.
    #[arg(long, value_delimiter = ',', requires_all = ["c1", "grid_jobs"], conflicts_with_all = ["baseline", "verify", "out", "warmup", "count"])]
    grid_synth: Vec<usize>,
    /// Jobs kept in flight in each grid window (comma-separated).
    #[arg(long, value_delimiter = ',', requires = "grid_synth")]
    grid_jobs: Vec<usize>,
    /// Length of each grid window, in seconds.
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    grid_window: f64,
}

pub fn run(cfg: &Config, a: ProveArgs) -> Result<ExitCode> {
    if let Some(c1) = a.c1.clone() {
        return prove_c1(cfg, &a, &c1);
    }
    let spec = a.circuit.spec()?;
    if a.count == 0 {
        bail!("--count must be at least 1");
    }
    let srs = load_params(a.params.as_deref().context("--params is required")?, cfg)?;
    let engine = Engine::start(cfg.engine.clone())?;
    let seed = a.seed.unwrap_or_else(rand::random);
    let pb = progress(Some(a.count as u64), "proving");
    let outcome = bench::run_synthetic_stream(&engine, srs.clone(), spec, a.count, seed, || pb.inc(1));
    pb.finish_and_clear();
    engine.shutdown();
    let failed: Vec<_> =
        outcome.results.iter().enumerate().filter_map(|(i, r)| r.as_ref().err().map(|e| (i, e))).collect();
    for (i, e) in &failed {
        eprintln!("proof {i} failed: {e}");
    }
    if let Some(out) = &a.out {
        let mut bytes = Vec::new();
        for (p, _) in outcome.results.iter().flatten() {
            p.write(&mut bytes)?;
        }
        std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    }
    println!(
        "{} proofs in {:.2} s ({:.2} s/proof)",
        outcome.results.len() - failed.len(),
        outcome.wall.as_secs_f64(),
        outcome.wall.as_secs_f64() / a.count as f64
    );
    if !failed.is_empty() {
        return Ok(ExitCode::FAILURE);
    }
    if a.verify {
        let (ok, bad) = bench::verify_all(&srs.vk, &outcome);
        for b in &bad {
            eprintln!("{b}");
        }
        println!("verified {ok}/{}", a.count);
        if ok != a.count {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a `--c1` run produced: each proof's bytes, and when each finished, counted
/// from the run's start.
struct C1Run {
    proofs: Vec<Vec<u8>>,
    done: Vec<Duration>,
    /// When the timed part began: the start of the run, or the end of the warm-up.
    start: Instant,
    /// The process's minor page faults then (first touches of fresh memory).
    faults: u64,
}

/// `prove --c1`: `--count` proofs of one sector's commit phase 2, then the timing
/// report, `--out` and `--verify`.
fn prove_c1(cfg: &Config, a: &ProveArgs, c1_path: &Path) -> Result<ExitCode> {
    let prover_id = parse_prover_id(a.prover_id.as_deref().context("--prover-id is required with --c1")?)?;
    let sector_id = a.sector_id.context("--sector-id is required with --c1")?;
    let window = Duration::try_from_secs_f64(a.grid_window).ok().filter(|d| !d.is_zero());
    if a.grid_synth.contains(&0) || a.grid_jobs.contains(&0) || window.is_none() {
        bail!("--grid-synth and --grid-jobs take counts of at least 1, --grid-window a positive number of seconds");
    }
    let mut engine_cfg = cfg.engine.clone();
    if let Some(dir) = &a.param_cache {
        engine_cfg.ingest.param_cache = dir.clone();
    }
    let cache = engine_cfg.ingest.param_cache_dir();
    let c1 = std::fs::read(c1_path).with_context(|| format!("reading {}", c1_path.display()))?;
    // `cuzk gen-c1 --shape-only` marks its meta.json: say that these proofs cannot verify.
    let meta = c1_path.with_file_name("meta.json");
    if let Some(v) = std::fs::read(&meta).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok()) {
        if v["shape_only"] == serde_json::Value::Bool(true) {
            println!(
                "SHAPE-ONLY C1 ({}): a benchmark input; its proofs never verify (with [verify] enabled, every job \
                 fails at Verify)",
                meta.display()
            );
        }
    }
    // filecoin-proofs finds parameters and verifying keys through this variable.
    std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &cache);
    if a.count == 0 {
        bail!("--count must be at least 1");
    }
    let sector = Sector { c1, prover_id, sector_id };
    let timing = if a.timing_params {
        let proof = cuzk::filecoin::parse_c1(&sector.c1, usize::MAX)?.registered_proof();
        // Nothing could verify against them: the Verify stage would fail every job.
        engine_cfg.verify.enabled = false;
        Some((proof, std::sync::Arc::new(super::srs::porep_timing_key(proof, a.seed.unwrap_or_else(rand::random))?)))
    } else {
        None
    };
    if !a.grid_synth.is_empty() {
        let grid = super::grid::Grid {
            synth: a.grid_synth.clone(),
            jobs: a.grid_jobs.clone(),
            window: window.unwrap_or_default(),
        };
        return super::grid::run(&engine_cfg, &sector, a.seed, timing, &grid);
    }
    let mut run = if a.baseline {
        baseline(&sector, a.count, a.warmup)?
    } else {
        pipeline(engine_cfg, &sector, a.count, a.warmup, a.seed, timing)?
    };
    report_times(run.start, run.faults, &mut run.done);
    let proof: Vec<u8> = run.proofs.concat();
    if let Some(p) = &a.out {
        std::fs::write(p, &proof).with_context(|| format!("writing {}", p.display()))?;
    }
    if a.verify {
        let ok = verify(&sector, &run.proofs)?;
        println!("verify_seal: {}", if ok { "valid" } else { "INVALID" });
        if !ok {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// filecoin-proofs' own `seal_commit_phase2`, `warmup` times untimed, then `count`
/// times in a row.
fn baseline(sector: &Sector, count: usize, warmup: usize) -> Result<C1Run> {
    let once = || -> Result<Vec<u8>> {
        let c1 = cuzk::filecoin::parse_c1(&sector.c1, usize::MAX)?;
        let out = filecoin_proofs_api::seal::seal_commit_phase2(
            c1.output,
            sector.prover_id,
            filecoin_proofs_api::SectorId::from(sector.sector_id),
        )?;
        Ok(out.proof)
    };
    let w = Instant::now();
    for _ in 0..warmup {
        once()?;
    }
    if warmup > 0 {
        println!("warm-up: {warmup} proof(s) in {:.2} s (not timed below)", w.elapsed().as_secs_f64());
    }
    let start = Instant::now();
    let faults = bench::minor_page_faults().unwrap_or(0);
    let mut run = C1Run { proofs: Vec::with_capacity(count), done: Vec::with_capacity(count), start, faults };
    for _ in 0..count {
        run.proofs.push(once()?);
        run.done.push(start.elapsed());
    }
    println!("filecoin-proofs seal_commit_phase2: {count} proof(s), {} bytes each", run.proofs[0].len());
    Ok(run)
}

/// A submitted job and the instant it was submitted, or why submission failed.
type Submitted = Result<(Instant, JobHandle), SubmitError>;

/// `count` proofs through the cuzk pipeline, submitted from a thread while results
/// are awaited here, after `warmup` untimed ones (a stream of their own, seeds after
/// the timed ones'); prints the per-stage report of the timed proofs.
fn pipeline(
    engine_cfg: EngineConfig,
    sector: &Sector,
    count: usize,
    warmup: usize,
    seed: Option<u64>,
    timing: Option<(cuzk::filecoin::RegisteredSealProof, std::sync::Arc<cuzk::ProvingKey>)>,
) -> Result<C1Run> {
    let w = Instant::now();
    let engine = Engine::start(engine_cfg)?;
    if let Some((proof, key)) = timing {
        if let Err(e) = engine.params().insert(proof, key) {
            engine.shutdown();
            return Err(anyhow::Error::from(e).context("timing parameters"));
        }
    }
    if warmup > 0 {
        let (submitter, rx) = submit_all(&engine, sector, warmup, seed.map(|s| s.wrapping_add(count as u64)));
        let r: Result<()> = rx.into_iter().try_for_each(|h| {
            h.map_err(anyhow::Error::from)?.1.wait_blocking().map_err(anyhow::Error::from)?;
            Ok(())
        });
        let _ = submitter.join();
        if let Err(e) = r {
            engine.shutdown();
            return Err(e.context("warm-up proof"));
        }
        println!("warm-up: {warmup} proof(s) in {:.2} s (not timed below)", w.elapsed().as_secs_f64());
    }
    let t = Instant::now();
    let (submitter, rx) = submit_all(&engine, sector, count, seed);
    let faults = bench::minor_page_faults().unwrap_or(0);
    let mut run = C1Run { proofs: Vec::with_capacity(count), done: Vec::with_capacity(count), start: t, faults };
    let mut partitions = 0;
    let mut result = Ok(());
    let mut busy = [Duration::ZERO; StageName::ALL.len()];
    let mut ops = JobTimings::default();
    for h in rx {
        let r = h
            .map_err(anyhow::Error::from)
            .and_then(|(submitted, h)| h.wait_blocking().map(|o| (submitted, o)).map_err(anyhow::Error::from));
        match r {
            Ok((submitted, out)) => {
                // Results are awaited in submission order; record when each
                // one actually finished.
                run.done.push((submitted + out.timings.total).duration_since(t));
                for (acc, st) in busy.iter_mut().zip(out.timings.stages.iter()) {
                    *acc += st.busy;
                }
                ops.add_ops(&out.timings.ops);
                partitions = out.proofs.len();
                run.proofs.push(out.proof_bytes());
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let _ = submitter.join();
    let pinned = engine.pinned();
    let devices = engine.devices();
    engine.shutdown();
    result?;
    println!(
        "cuzk ({}): {count} proof(s) of {partitions} partition(s), {} bytes each",
        engine.backend(),
        run.proofs[0].len()
    );
    report_stages(t, count, &busy, &ops, pinned, &devices);
    Ok(run)
}

/// Submits `count` jobs for `sector` from a new thread (submission blocks on
/// backpressure) and sends each handle, with its submission instant, to the receiver.
fn submit_all(
    engine: &Engine,
    sector: &Sector,
    count: usize,
    seed: Option<u64>,
) -> (JoinHandle<()>, mpsc::Receiver<Submitted>) {
    let (tx, rx) = mpsc::channel();
    let (engine, c1, prover_id, sector_id) = (engine.clone(), sector.c1.clone(), sector.prover_id, sector.sector_id);
    let submitter = std::thread::spawn(move || {
        for i in 0..count {
            let mut job = JobSpec::porep_c1(c1.clone(), prover_id, sector_id);
            if let Some(s) = seed {
                job = job.with_seed(s.wrapping_add(i as u64));
            }
            // Submission starts the job's clock (`timings.total`), so this
            // instant plus its total is when it finished.
            let submitted = Instant::now();
            if tx.send(engine.submit_blocking(job).map(|h| (submitted, h))).is_err() {
                break;
            }
        }
    });
    (submitter, rx)
}

/// The pipeline's report: busy time per stage and per device, operations per
/// proof, the pinned pool.
fn report_stages(
    t: Instant,
    count: usize,
    busy: &[Duration],
    ops: &JobTimings,
    pinned: Option<PinnedStats>,
    devices: &[cuzk::gpu::DeviceStats],
) {
    // Busy time per stage over the run, as a share of the wall time: a stage near
    // its worker count x 100% is the one that limits the stream.
    let wall = t.elapsed().as_secs_f64();
    let shares: Vec<String> = StageName::ALL
        .iter()
        .map(|s| format!("{} {:.0}%", s.as_str(), 100.0 * busy[s.index()].as_secs_f64() / wall))
        .collect();
    println!("stage busy / wall: {}", shares.join(", "));
    // Each device's share of the wall held by a call: with several, one well
    // under the others waits for work rather than limiting the stream.
    if !devices.is_empty() {
        let held: Vec<String> = devices
            .iter()
            .map(|d| format!("{} {:.0}% ({} calls)", d.device, 100.0 * d.held.as_secs_f64() / wall, d.calls))
            .collect();
        println!("device held / wall: {}", held.join(", "));
    }
    // Operations summed over the run (synthesis kind, each MSM, ...), per proof.
    let per: Vec<String> =
        ops.ops.iter().map(|(n, d)| format!("{n} {:.0} ms", d.as_secs_f64() * 1e3 / count as f64)).collect();
    println!("ops per proof: {}", per.join(", "));
    if let Some(p) = pinned {
        println!(
            "pinned pool: {} a/b/c buffers lent to synthesis, {} requests refused, {} allocated",
            p.lent,
            p.fallbacks,
            fmt_bytes(p.allocated)
        );
    }
}

/// Wall time, s/proof, the first proof's latency and the steady rate after it (the
/// first includes loading parameters), peak RSS, and the minor page faults since the
/// timed part began (`faults` then). Sorts `done`.
fn report_times(t: Instant, faults: u64, done: &mut [Duration]) {
    let count = done.len();
    done.sort();
    let wall = t.elapsed().as_secs_f64();
    print!("wall {wall:.2} s, {:.3} s/proof, first proof {:.2} s", wall / count as f64, done[0].as_secs_f64());
    if count > 1 {
        let steady = (done[count - 1] - done[0]).as_secs_f64() / (count - 1) as f64;
        print!(", then {steady:.3} s/proof");
    }
    print!(", peak RSS {}", fmt_bytes(bench::peak_rss_bytes().unwrap_or(0)));
    println!(", minor page faults {}", bench::minor_page_faults().unwrap_or(0).saturating_sub(faults));
}

/// Whether every proof passes filecoin-proofs' `verify_seal` for `sector`.
fn verify(sector: &Sector, proofs: &[Vec<u8>]) -> Result<bool> {
    let c1 = cuzk::filecoin::parse_c1(&sector.c1, usize::MAX)?;
    let o = &c1.output;
    let mut ok = true;
    for p in proofs {
        ok &= cuzk::filecoin::verify_seal(
            c1.registered_proof(),
            o.comm_r,
            o.comm_d,
            sector.prover_id,
            sector.sector_id,
            o.ticket,
            o.seed,
            p,
        )?;
    }
    Ok(ok)
}

/// A prover id: 64 hex digits, or an actor id (`1000`, `f01000`, `t01000`) turned into
/// bytes the way Lotus does (unsigned LEB128 of the id, zero-padded to 32 bytes).
fn parse_prover_id(s: &str) -> Result<[u8; 32]> {
    let t = s.trim().trim_start_matches("0x");
    if t.len() == 64 && t.chars().all(|c| c.is_ascii_hexdigit()) {
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16)?;
        }
        return Ok(out);
    }
    let digits = t.trim_start_matches(['f', 't']).trim_start_matches('0');
    let id: u64 = if digits.is_empty() {
        0
    } else {
        digits.parse().with_context(|| format!("prover id `{s}`: not 64 hex digits nor an actor id"))?
    };
    Ok(cuzk::filecoin::prover_id_from_actor(id))
}

//! `cuzk bench`: a synthetic stream through the pipeline (or bellperson, or both with
//! `--compare`) with the stage report; `bench batch` against a running daemon; `bench
//! sweep` over worker counts. The streams and tables are [`cuzk::bench`]'s.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use cuzk::{
    bench::{self, StreamOutcome},
    config::Config,
    Engine, SyntheticCircuit, SyntheticSpec,
};
use serde::{Deserialize, Serialize};
use tracing::info;

use super::{
    load_params, progress,
    srs::{generate, Generator},
};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCmd {
    #[command(subcommand)]
    sub: Option<BenchSub>,
    #[command(flatten)]
    args: BenchArgs,
}

#[derive(Subcommand)]
enum BenchSub {
    /// COUNT proofs against a running daemon with CONCURRENCY in flight (the flags of
    /// Curio's `cuzk-bench batch`); one line per proof and a summary.
    Batch(BatchArgs),
    /// The synthetic stream at every combination of synthesis workers and GPU workers
    /// per device; prints the throughput table.
    Sweep(SweepArgs),
    /// WinningPoSt and WindowPoSt-partition latency (p50/p99), alone and under a
    /// saturating 2KiB PoRep stream, on this host's backend.
    Deadline(super::deadline::DeadlineArgs),
    /// H's MSM and the NTT phase of a partition at domains of 2^k, each alone on a
    /// device (or the CPU), every MSM sum checked; single call against cuzk's chunks.
    Kernels(super::kernels::KernelsArgs),
}

#[derive(Args)]
struct BatchArgs {
    #[command(flatten)]
    conn: super::ConnectArgs,
    /// Proof type: porep, or synthetic (cuzk daemons only).
    #[arg(long = "type", short = 't', default_value = "porep")]
    kind: String,
    /// C1 output (JSON or the Lotus/Curio wrapper), for -t porep.
    #[arg(long)]
    c1: Option<PathBuf>,
    /// Number of proofs.
    #[arg(long, short = 'c', default_value_t = 3)]
    count: usize,
    /// Proofs in flight at once.
    #[arg(long, short = 'j', default_value_t = 1)]
    concurrency: usize,
    /// Registered seal proof (Filecoin's numbering; 0 = taken from the C1 output).
    #[arg(long, default_value_t = 0)]
    registered_proof: u64,
    /// Miner actor id (the prover id is derived from it as Lotus/Curio do).
    #[arg(long, default_value_t = 1000)]
    miner_id: u64,
    /// Sector number.
    #[arg(long, default_value_t = 1)]
    sector_num: u64,
    /// For -t synthetic: 2^K constraints.
    #[arg(long, default_value_t = 14)]
    log2: u32,
    /// For -t synthetic: partitions per proof.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
}

#[derive(Args)]
struct SweepArgs {
    /// Synthesis worker counts to try.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    synth_workers: Vec<usize>,
    /// GPU workers per device to try.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    gpu_workers: Vec<usize>,
    #[command(flatten)]
    args: BenchArgs,
}

#[derive(Args, Clone)]
struct BenchArgs {
    /// Synthetic circuit size 2^K (default: [bench] log2).
    #[arg(long, value_name = "K")]
    log2: Option<u32>,
    /// Proofs in the stream (default: [bench] count).
    #[arg(long)]
    count: Option<usize>,
    /// Witness/randomness seed (default: [bench] seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Public inputs of the synthetic circuit (default: [bench] public_inputs).
    #[arg(long)]
    public_inputs: Option<usize>,
    /// A-query density (default: [bench] a_density).
    #[arg(long)]
    a_density: Option<f64>,
    /// B-query density (default: [bench] b_density).
    #[arg(long)]
    b_density: Option<f64>,
    /// Use this parameter file instead of the cached generated one.
    #[arg(long, value_name = "FILE")]
    params: Option<PathBuf>,
    /// Which prover to run.
    #[arg(long, value_enum, default_value = "cuzk")]
    prover: Prover,
    /// Run cuzk and bellperson in turn (separate processes, same circuits, same
    /// randomness) and print both with the throughput ratio.
    #[arg(long)]
    compare: bool,
    /// Write the result as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Record the timeline and write it as Chrome trace JSON (open in Perfetto).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Write a plot of per-stage utilization over time (SVG).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Prover {
    /// The cuzk pipeline.
    Cuzk,
    /// bellperson's CPU prover (`create_proof_batch`), same circuits and randomness.
    Bellperson,
}

/// What one bench run reports (and `--compare` reads back from its children).
#[derive(Serialize, Deserialize)]
struct BenchResult {
    prover: Prover,
    backend: String,
    constraints: usize,
    count: usize,
    wall_s: f64,
    proofs_per_min: f64,
    s_per_proof: f64,
    peak_rss_bytes: u64,
    verified: usize,
    /// Proof bytes hash, to check both provers made identical proofs.
    proofs_digest: String,
}

/// `cuzk bench [batch|sweep|deadline|kernels]`; `config` is the `--config` file, passed on to the
/// child processes of `--compare`.
pub fn run(cfg: &Config, config: Option<&Path>, b: BenchCmd) -> Result<ExitCode> {
    match b {
        BenchCmd { sub: None, args } => stream(cfg, config, args),
        BenchCmd { sub: Some(BenchSub::Batch(a)), .. } => batch(a),
        BenchCmd { sub: Some(BenchSub::Sweep(a)), .. } => sweep(cfg, a),
        BenchCmd { sub: Some(BenchSub::Deadline(a)), .. } => super::deadline::run(cfg, a),
        BenchCmd { sub: Some(BenchSub::Kernels(a)), .. } => super::kernels::run(a),
    }
}

/// What a synthetic bench run proves: flags over `[bench]` defaults, and the parameter
/// file (generated once into the cache when `--params` is not given).
struct BenchPlan {
    log2: u32,
    count: usize,
    seed: u64,
    spec: SyntheticSpec,
    params: PathBuf,
}

impl BenchArgs {
    fn plan(&self, cfg: &Config) -> Result<BenchPlan> {
        let b = &cfg.bench;
        let log2 = self.log2.unwrap_or(b.log2);
        let count = self.count.unwrap_or(b.count);
        let seed = self.seed.unwrap_or(b.seed);
        if count == 0 {
            bail!("--count must be at least 1");
        }
        let spec = SyntheticSpec {
            constraints: 1usize.checked_shl(log2).filter(|_| log2 <= 32).context("--log2 at most 32")?,
            public_inputs: self.public_inputs.unwrap_or(b.public_inputs),
            a_density: self.a_density.unwrap_or(b.a_density),
            b_density: self.b_density.unwrap_or(b.b_density),
        };
        spec.validate()?;
        let params = match &self.params {
            Some(p) => p.clone(),
            None => {
                let p = cfg.srs.cache_dir().join(format!(
                    "synthetic-{}-{}-{}-{}.params",
                    spec.constraints, spec.public_inputs, spec.a_density, spec.b_density
                ));
                if !p.exists() {
                    info!(file = %p.display(), "no cached parameters for this circuit; generating them once");
                    generate(spec, None, &p, Generator::Cuzk)?;
                }
                p
            }
        };
        Ok(BenchPlan { log2, count, seed, spec, params })
    }
}

/// `cuzk bench`: one stream with the chosen prover, its report and result line.
fn stream(cfg: &Config, config_path: Option<&Path>, a: BenchArgs) -> Result<ExitCode> {
    let BenchPlan { log2, count, seed, spec, params } = a.plan(cfg)?;
    if a.compare {
        return compare(config_path, &a, log2, count, seed, &params);
    }
    let srs = load_params(&params, cfg)?;
    let result = match a.prover {
        Prover::Cuzk => {
            let mut engine_cfg = cfg.engine.clone();
            engine_cfg.timeline.enabled |= a.trace.is_some() || a.plot.is_some();
            let engine = Engine::start(engine_cfg)?;
            let pb = progress(Some(count as u64), "proving");
            let outcome = bench::run_synthetic_stream(&engine, srs.clone(), spec, count, seed, || pb.inc(1));
            pb.finish_and_clear();
            let snap = engine.snapshot_blocking();
            engine.shutdown();
            write_timeline(&engine, a.trace.as_deref(), a.plot.as_deref())?;
            let (verified, bad) = bench::verify_all(&srs.vk, &outcome);
            for x in &bad {
                eprintln!("{x}");
            }
            println!("\n{}", bench::stage_table(&snap, outcome.wall));
            println!("{}", bench::ops_table(&outcome.ops, count));
            if let Some(v) = bench::verdict(&snap, outcome.wall) {
                println!("bottleneck: {} — {}", v.stage, v.reason);
            }
            println!(
                "host budget: {} capacity, peak {} reserved, {} waits",
                bench::fmt_bytes(snap.host_budget.capacity),
                bench::fmt_bytes(snap.host_budget.peak),
                snap.host_budget.waits
            );
            BenchResult {
                prover: Prover::Cuzk,
                backend: snap.backend.to_string(),
                constraints: spec.constraints,
                count,
                wall_s: outcome.wall.as_secs_f64(),
                proofs_per_min: count as f64 * 60.0 / outcome.wall.as_secs_f64(),
                s_per_proof: outcome.wall.as_secs_f64() / count as f64,
                peak_rss_bytes: bench::peak_rss_bytes().unwrap_or(0),
                verified,
                proofs_digest: digest(&outcome),
            }
        }
        Prover::Bellperson => {
            let pb = progress(None, "bellperson create_proof_batch");
            let (wall, proofs) = bench::run_bellperson_baseline(&srs, spec, count, seed)?;
            pb.finish_and_clear();
            let results = proofs
                .into_iter()
                .enumerate()
                .map(|(i, p)| Ok((p, SyntheticCircuit { spec, seed: seed.wrapping_add(i as u64) }.public_inputs())))
                .collect();
            let outcome = StreamOutcome { wall, results, ops: Vec::new() };
            let (verified, _) = bench::verify_all(&srs.vk, &outcome);
            BenchResult {
                prover: Prover::Bellperson,
                backend: "cpu".into(),
                constraints: spec.constraints,
                count,
                wall_s: wall.as_secs_f64(),
                proofs_per_min: count as f64 * 60.0 / wall.as_secs_f64(),
                s_per_proof: wall.as_secs_f64() / count as f64,
                peak_rss_bytes: bench::peak_rss_bytes().unwrap_or(0),
                verified,
                proofs_digest: digest(&outcome),
            }
        }
    };
    println!(
        "{} ({}): {} proofs of 2^{log2} constraints in {:.2} s = {:.1} proofs/min ({:.3} s/proof), {} verified, peak RSS {}, digest {}",
        match result.prover {
            Prover::Cuzk => "cuzk",
            Prover::Bellperson => "bellperson",
        },
        result.backend,
        count,
        result.wall_s,
        result.proofs_per_min,
        result.s_per_proof,
        result.verified,
        bench::fmt_bytes(result.peak_rss_bytes),
        &result.proofs_digest[..16]
    );
    if let Some(j) = &a.json {
        std::fs::write(j, serde_json::to_vec_pretty(&result)?)?;
    }
    Ok(if result.verified == count { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// SHA-256 of every proof's bytes, in order (failed jobs skipped).
fn digest(results: &StreamOutcome) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for r in results.results.iter().flatten() {
        let mut b = Vec::new();
        r.0.write(&mut b).expect("vec write");
        h.update(&b);
    }
    format!("{:x}", h.finalize())
}

/// Writes the engine's recorded timeline (Chrome trace JSON) and utilization plot.
fn write_timeline(engine: &Engine, trace: Option<&Path>, plot: Option<&Path>) -> Result<()> {
    let tl = engine.timeline();
    if let Some(f) = trace {
        std::fs::write(f, tl.chrome_trace()).with_context(|| format!("writing {}", f.display()))?;
        println!("timeline: {} spans → {} (open in https://ui.perfetto.dev)", tl.spans().len(), f.display());
    }
    if let Some(f) = plot {
        let svg = cuzk::actors::timeline::utilization_svg(&tl.utilization(120));
        std::fs::write(f, svg).with_context(|| format!("writing {}", f.display()))?;
        println!("utilization plot → {}", f.display());
    }
    Ok(())
}

/// `cuzk bench batch`: `count` proofs against a running daemon through the client.
fn batch(a: BatchArgs) -> Result<ExitCode> {
    use cuzk::client::{run_batch, BatchJob};
    let job = match a.kind.to_ascii_lowercase().as_str() {
        "porep" | "porep-c2" | "seal-commit" => {
            let path = a.c1.as_ref().context("-t porep needs --c1 FILE")?;
            let c1 = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let registered_proof = if a.registered_proof != 0 {
                a.registered_proof
            } else {
                // What the daemon will check it against: the proof inside the C1 output.
                let parsed = cuzk::filecoin::parse_c1(&c1, usize::MAX)?;
                cuzk::filecoin::proof_number(parsed.registered_proof())
            };
            BatchJob::Porep { c1, registered_proof, miner_id: a.miner_id, sector_num: a.sector_num }
        }
        "synthetic" => BatchJob::Synthetic {
            log2: a.log2,
            public_inputs: 2,
            a_density: 1.0,
            b_density: 1.0,
            partitions: a.partitions,
        },
        "snap" | "wpost" | "winning" => bail!("-t {}: this cuzk proves porep (and synthetic) only", a.kind),
        other => bail!("unknown proof type `{other}`: use porep or synthetic"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let access = a.conn.access();
    let summary = rt.block_on(run_batch(&a.conn.addr, &access, job, a.count, a.concurrency, |p| match &p.error {
        None => println!(
            "proof {:>3}: wall {:.2} s, prove {:.2} s, queue {:.2} s, {} bytes",
            p.index,
            p.wall.as_secs_f64(),
            p.prove.as_secs_f64(),
            p.queue.as_secs_f64(),
            p.proof_bytes
        ),
        Some(e) => println!("proof {:>3}: FAILED after {:.2} s: {e}", p.index, p.wall.as_secs_f64()),
    }))?;
    println!("{}", summary.report());
    Ok(if summary.ok() == a.count { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `cuzk bench sweep`: the stream once per (synthesis workers, GPU workers) pair.
fn sweep(cfg: &Config, a: SweepArgs) -> Result<ExitCode> {
    if a.synth_workers.contains(&0) || a.gpu_workers.contains(&0) {
        bail!("worker counts must be at least 1");
    }
    let BenchPlan { log2, count, seed, spec, params } = a.args.plan(cfg)?;
    let srs = load_params(&params, cfg)?;
    println!("sweep: {count} proofs of 2^{log2} constraints per setting");
    println!(
        "{:>13} {:>11} {:>9} {:>11} {:>12} {:>8}  bottleneck",
        "synth_workers", "gpu_workers", "s/proof", "proofs/min", "peak budget", "verified"
    );
    let mut all_ok = true;
    for &sw in &a.synth_workers {
        for &gw in &a.gpu_workers {
            let mut ec = cfg.engine.clone();
            ec.synthesize.max_concurrency = sw;
            ec.prove_gpu.workers_per_device = gw;
            let engine = Engine::start(ec)?;
            let outcome = bench::run_synthetic_stream(&engine, srs.clone(), spec, count, seed, || {});
            let snap = engine.snapshot_blocking();
            engine.shutdown();
            let (verified, _) = bench::verify_all(&srs.vk, &outcome);
            all_ok &= verified == count;
            let wall = outcome.wall.as_secs_f64();
            let v = bench::verdict(&snap, outcome.wall).map(|v| format!("{} {:.0}%", v.stage, v.utilization * 100.0));
            println!(
                "{sw:>13} {gw:>11} {:>9.3} {:>11.1} {:>12} {:>8}  {}",
                wall / count as f64,
                count as f64 * 60.0 / wall,
                bench::fmt_bytes(snap.host_budget.peak),
                format!("{verified}/{count}"),
                v.unwrap_or_default()
            );
        }
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Runs both provers as child processes (so each one's peak RSS is its own).
fn compare(
    config: Option<&Path>,
    a: &BenchArgs,
    log2: u32,
    count: usize,
    seed: u64,
    params: &Path,
) -> Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir();
    let mut results = Vec::new();
    for prover in ["cuzk", "bellperson"] {
        let json = dir.join(format!("cuzk-bench-{}-{prover}.json", std::process::id()));
        let mut cmd = std::process::Command::new(&exe);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        cmd.args(["bench", "--prover", prover, "--log2", &log2.to_string(), "--count", &count.to_string()])
            .args(a.public_inputs.map(|p| format!("--public-inputs={p}")))
            .args(a.a_density.map(|d| format!("--a-density={d}")))
            .args(a.b_density.map(|d| format!("--b-density={d}")))
            .args(["--seed", &seed.to_string(), "--params"])
            .arg(params)
            .arg("--json")
            .arg(&json);
        println!("== {prover} ==");
        let status = cmd.status().with_context(|| format!("running {}", exe.display()))?;
        if !status.success() {
            bail!("{prover} run failed ({status})");
        }
        let r: BenchResult = serde_json::from_slice(&std::fs::read(&json)?)?;
        let _ = std::fs::remove_file(&json);
        results.push(r);
    }
    let (c, b) = (&results[0], &results[1]);
    println!("\n== comparison: {count} proofs of 2^{log2} constraints ==");
    println!("{:<12} {:>10} {:>12} {:>12} {:>14}", "prover", "wall s", "proofs/min", "s/proof", "peak RSS");
    for r in &results {
        println!(
            "{:<12} {:>10.2} {:>12.1} {:>12.3} {:>14}",
            if r.prover == Prover::Cuzk { format!("cuzk/{}", r.backend) } else { "bellperson".into() },
            r.wall_s,
            r.proofs_per_min,
            r.s_per_proof,
            bench::fmt_bytes(r.peak_rss_bytes)
        );
    }
    println!(
        "throughput ratio cuzk/bellperson: {:.2}x; peak RSS ratio: {:.2}x; identical proof bytes: {}",
        c.proofs_per_min / b.proofs_per_min,
        c.peak_rss_bytes as f64 / b.peak_rss_bytes.max(1) as f64,
        c.proofs_digest == b.proofs_digest
    );
    if let Some(j) = &a.json {
        std::fs::write(j, serde_json::to_vec_pretty(&results)?)?;
    }
    Ok(ExitCode::SUCCESS)
}

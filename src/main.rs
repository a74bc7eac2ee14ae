//! The `cuzk` command: `srs`, `prove`, `bench`. See `cuzk --help`.

use std::{
    io::IsTerminal,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use cuzk::{
    bench::{self, StreamOutcome},
    config::Config,
    Engine, LoadOptions, ProvingKey, SyntheticCircuit, SyntheticSpec,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use tracing::info;

/// mimalloc instead of glibc's malloc (Cargo feature `mimalloc`, default): the 16
/// synthesis threads of a PoRep stream spend their time in bellperson gadgets that
/// allocate and free small vectors by the million (docs/benchmarks.md, session 7).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "cuzk", version, about = "Pipelined Groth16 proving engine for Filecoin")]
struct Cli {
    /// Configuration file (see the documented config.toml); defaults when absent.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Parameter (SRS) files.
    Srs {
        #[command(subcommand)]
        cmd: SrsCmd,
    },
    /// Prove synthetic circuits through the pipeline.
    Prove(ProveArgs),
    /// Benchmark the pipeline on a stream of synthetic proofs and report the bottleneck;
    /// `bench batch` drives a running daemon, `bench sweep` tries worker counts.
    Bench(Box<BenchCmd>),
    /// Seal random data with filecoin-proofs and write its C1 output (test fixture).
    GenC1(GenC1Args),
    /// Serve the cuzk.v1 gRPC API and Prometheus metrics until SIGINT/SIGTERM.
    Daemon,
}

#[derive(Args)]
struct GenC1Args {
    /// Sector size: 2KiB or 8MiB (larger ones work but take long).
    #[arg(long, default_value = "2KiB")]
    sector_size: String,
    /// Registered seal proof, Filecoin's numbering (e.g. 10 = 2KiB synthetic PoRep);
    /// overrides --sector-size (default: that size's v1.1 proof).
    #[arg(long)]
    registered_proof: Option<u64>,
    /// Seed of the data, ticket, seed and ids.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Subcommand)]
enum SrsCmd {
    /// Generate random (test-only) parameters for a synthetic circuit.
    Gen(SrsGenArgs),
    /// Print the sizes in a parameter file.
    Info {
        /// Parameter file in bellperson format.
        file: PathBuf,
    },
    /// Time loading a parameter file with cuzk (mmap + parallel decode) and with
    /// bellperson (`Parameters::read`, `build_mapped_parameters`), same file, same run.
    LoadBench {
        /// Parameter file in bellperson format.
        file: PathBuf,
    },
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

#[derive(Args)]
struct SrsGenArgs {
    #[command(flatten)]
    circuit: CircuitArgs,
    /// Output file (synthetic circuits).
    #[arg(long, value_name = "FILE", required_unless_present = "porep")]
    out: Option<PathBuf>,
    /// Parameters for Filecoin's PoRep circuit of this sector size (2KiB, 8MiB,
    /// 512MiB, ...; API v1.1), written under Filecoin's names into --cache.
    #[arg(long, value_name = "SIZE", conflicts_with_all = ["synthetic", "constraints", "out"])]
    porep: Option<String>,
    /// Parameter cache directory for --porep (default: FIL_PROOFS_PARAMETER_CACHE or
    /// /var/tmp/filecoin-proof-parameters).
    #[arg(long, value_name = "DIR", requires = "porep")]
    cache: Option<PathBuf>,
    /// Seed of the toxic waste (default: random). Test parameters only.
    #[arg(long)]
    seed: Option<u64>,
    /// Which generator: cuzk's (fast) or bellperson's `generate_random_parameters`.
    #[arg(long, value_enum, default_value = "cuzk")]
    generator: Generator,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Generator {
    Cuzk,
    Bellperson,
}

#[derive(Args)]
struct ProveArgs {
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
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Prover {
    /// The cuzk pipeline.
    Cuzk,
    /// bellperson's CPU prover (`create_proof_batch`), same circuits and randomness.
    Bellperson,
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchCmd {
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
}

#[derive(Args)]
struct BatchArgs {
    /// Daemon address: "http://host:port", "host:port" or "unix:///path".
    #[arg(long, short = 'a', default_value = "http://127.0.0.1:9820")]
    addr: String,
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

fn load_config(path: Option<&Path>) -> Result<Config> {
    Ok(match path {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    })
}

fn load_params(path: &Path, cfg: &Config) -> Result<Arc<ProvingKey>> {
    let t = Instant::now();
    let key = ProvingKey::load(path, LoadOptions { subgroup_checks: cfg.srs.subgroup_checks })?;
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

fn generate(spec: SyntheticSpec, seed: Option<u64>, out: &Path, generator: Generator) -> Result<()> {
    let pb = progress(None, &format!("generating parameters for {} constraints", spec.constraints));
    let t = Instant::now();
    let mut rng = match seed {
        Some(s) => rand_chacha::ChaCha20Rng::seed_from_u64(s),
        None => rand_chacha::ChaCha20Rng::from_entropy(),
    };
    let circuit = SyntheticCircuit::new(spec, 0)?;
    let key = match generator {
        Generator::Cuzk => cuzk::srs::generate_random(circuit, &mut rng)?,
        Generator::Bellperson => cuzk::srs::generate_bellperson(circuit, &mut rng)?,
    };
    let gen_ms = t.elapsed().as_millis() as u64;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    key.write(out)?;
    pb.finish_and_clear();
    info!(file = %out.display(), constraints = spec.constraints, generate_ms = gen_ms, total_ms = t.elapsed().as_millis() as u64, "parameters written");
    Ok(())
}

/// Random parameters for Filecoin's PoRep circuit, under Filecoin's file names, with
/// the verifying key beside them (what filecoin-proofs' verify_seal reads).
fn gen_porep(size: &str, cache: Option<PathBuf>, seed: Option<u64>) -> Result<()> {
    use cuzk::synth::porep;
    let proof = porep::proof_for_sector_size(size).map_err(anyhow::Error::msg)?;
    let dir = cache.unwrap_or_else(porep::default_parameter_cache);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (params, vk) = porep::parameter_files(&dir, proof)?;
    let pb = progress(None, &format!("generating test parameters for {proof:?}"));
    let t = Instant::now();
    let mut rng = match seed {
        Some(s) => rand_chacha::ChaCha20Rng::seed_from_u64(s),
        None => rand_chacha::ChaCha20Rng::from_entropy(),
    };
    let key = cuzk::srs::generate_random(porep::blank_circuit(proof)?, &mut rng)?;
    key.write(&params)?;
    let mut f = std::fs::File::create(&vk).with_context(|| format!("creating {}", vk.display()))?;
    key.vk.write(&mut f)?;
    pb.finish_and_clear();
    println!(
        "{proof:?}: {} (domain 2^{}, {} aux) and {} in {:.1} s",
        params.display(),
        key.domain_size().trailing_zeros(),
        key.l.len(),
        vk.display(),
        t.elapsed().as_secs_f64()
    );
    // Non-interactive PoRep (API v1.2) proves with the same parameter file and then
    // aggregates with the inner-product SRS: write a fake one unless one is there
    // (never replace what may be the production file).
    let ipp = porep::ipp_srs_file(&dir);
    if !ipp.exists() {
        porep::write_fake_ipp_srs(&ipp, FAKE_IPP_PROOFS, seed.unwrap_or_else(rand::random))?;
        println!("fake inner-product SRS for up to {FAKE_IPP_PROOFS} aggregated proofs: {}", ipp.display());
    }
    Ok(())
}

/// Proofs a fake inner-product SRS can aggregate: a 32GiB/64GiB NI-PoRep's 126
/// partitions pad to 128.
const FAKE_IPP_PROOFS: usize = 128;

/// A C1 output for tests and benchmarks: seals random data with filecoin-proofs.
fn cmd_gen_c1(a: GenC1Args) -> Result<ExitCode> {
    use cuzk::synth::porep;
    let proof = match a.registered_proof {
        Some(n) => porep::proof_from_number(n).with_context(|| format!("--registered-proof {n}: not a seal proof"))?,
        None => porep::proof_for_sector_size(&a.sector_size).map_err(anyhow::Error::msg)?,
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let pb = progress(None, &format!("sealing a {} sector", a.sector_size));
    let t = Instant::now();
    let f = porep::generate_c1(proof, a.seed, &a.out.join("work"))?;
    pb.finish_and_clear();
    std::fs::write(a.out.join("c1.json"), &f.c1_json)?;
    std::fs::write(a.out.join("c1-wrapper.json"), &f.wrapper_json)?;
    let meta = serde_json::json!({
        "registered_proof": format!("{:?}", f.registered_proof),
        "prover_id": hex(&f.prover_id),
        "miner_id": f.miner_id,
        "sector_id": f.sector_id,
        "ticket": hex(&f.ticket),
        "seed": hex(&f.seed),
        "comm_r": hex(&f.comm_r),
        "comm_d": hex(&f.comm_d),
    });
    std::fs::write(a.out.join("meta.json"), serde_json::to_vec_pretty(&meta)?)?;
    let _ = std::fs::remove_dir_all(a.out.join("work"));
    println!(
        "{}: c1.json, c1-wrapper.json, meta.json (prover id {}, sector {}) in {:.1} s",
        a.out.display(),
        hex(&f.prover_id),
        f.sector_id,
        t.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

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
    Ok(cuzk::synth::porep::prover_id_from_actor(id))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn cmd_prove_c1(cfg: &Config, a: &ProveArgs, c1_path: &Path) -> Result<ExitCode> {
    let prover_id = parse_prover_id(a.prover_id.as_deref().context("--prover-id is required with --c1")?)?;
    let sector_id = a.sector_id.context("--sector-id is required with --c1")?;
    let mut engine_cfg = cfg.engine.clone();
    if let Some(dir) = &a.param_cache {
        engine_cfg.ingest.param_cache = dir.clone();
    }
    let cache = engine_cfg.ingest.param_cache_dir();
    let bytes = std::fs::read(c1_path).with_context(|| format!("reading {}", c1_path.display()))?;
    // filecoin-proofs finds parameters and verifying keys through this variable.
    std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &cache);
    if a.count == 0 {
        bail!("--count must be at least 1");
    }
    let count = a.count;
    let t = Instant::now();
    // Completion time of each proof (sorted before the report), to report the
    // steady state after the first (which includes loading parameters).
    let mut done = Vec::with_capacity(count);
    let mut proofs = Vec::with_capacity(count);
    if a.baseline {
        for _ in 0..count {
            let c1 = cuzk::synth::porep::parse_c1(&bytes, usize::MAX)?;
            let out = filecoin_proofs_api::seal::seal_commit_phase2(
                c1.output,
                prover_id,
                filecoin_proofs_api::SectorId::from(sector_id),
            )?;
            done.push(t.elapsed());
            proofs.push(out.proof);
        }
        println!("filecoin-proofs seal_commit_phase2: {count} proof(s), {} bytes each", proofs[0].len());
    } else {
        let engine = Engine::start(engine_cfg.clone())?;
        // Submit from a thread: submission blocks on backpressure while results arrive.
        let (tx, rx) = std::sync::mpsc::channel();
        let (e2, b2, seed) = (engine.clone(), bytes.clone(), a.seed);
        let submitter = std::thread::spawn(move || {
            for i in 0..count {
                let mut job = cuzk::JobSpec::porep_c1(b2.clone(), prover_id, sector_id);
                if let Some(s) = seed {
                    job = job.with_seed(s.wrapping_add(i as u64));
                }
                // Submission starts the job's clock (`timings.total`), so this
                // instant plus its total is when it finished.
                let submitted = Instant::now();
                if tx.send(e2.submit_blocking(job).map(|h| (submitted, h))).is_err() {
                    break;
                }
            }
        });
        let mut partitions = 0;
        let mut result = Ok(());
        let mut busy = [std::time::Duration::ZERO; cuzk::StageName::ALL.len()];
        let mut ops = cuzk::JobTimings::default();
        for h in rx {
            let r = h
                .map_err(anyhow::Error::from)
                .and_then(|(submitted, h)| h.wait_blocking().map(|o| (submitted, o)).map_err(anyhow::Error::from));
            match r {
                Ok((submitted, out)) => {
                    // Results are awaited in submission order; record when each
                    // one actually finished.
                    done.push((submitted + out.timings.total).duration_since(t));
                    for (acc, st) in busy.iter_mut().zip(out.timings.stages.iter()) {
                        *acc += st.busy;
                    }
                    ops.add_ops(&out.timings.ops);
                    partitions = out.proofs.len();
                    proofs.push(out.proof_bytes());
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let _ = submitter.join();
        let pinned = engine.pinned();
        engine.shutdown();
        result?;
        println!(
            "cuzk ({}): {count} proof(s) of {partitions} partition(s), {} bytes each",
            engine.backend(),
            proofs[0].len()
        );
        // Busy time per stage over the run, as a share of the wall time: a stage near
        // its worker count x 100% is the one that limits the stream.
        let wall = t.elapsed().as_secs_f64();
        let shares: Vec<String> = cuzk::StageName::ALL
            .iter()
            .map(|s| format!("{} {:.0}%", s.as_str(), 100.0 * busy[s.index()].as_secs_f64() / wall))
            .collect();
        println!("stage busy / wall: {}", shares.join(", "));
        // Operations summed over the run (synthesis kind, each MSM, ...), per proof.
        let per: Vec<String> =
            ops.ops.iter().map(|(n, d)| format!("{n} {:.0} ms", d.as_secs_f64() * 1e3 / count as f64)).collect();
        println!("ops per proof: {}", per.join(", "));
        if let Some(p) = pinned {
            println!(
                "pinned pool: {} a/b/c buffers lent to synthesis, {} requests refused, {} allocated",
                p.lent,
                p.fallbacks,
                cuzk::bench::fmt_bytes(p.allocated)
            );
        }
    }
    done.sort();
    let wall = t.elapsed().as_secs_f64();
    print!("wall {wall:.2} s, {:.3} s/proof, first proof {:.2} s", wall / count as f64, done[0].as_secs_f64());
    if count > 1 {
        let steady = (done[count - 1] - done[0]).as_secs_f64() / (count - 1) as f64;
        print!(", then {steady:.3} s/proof");
    }
    println!(", peak RSS {}", cuzk::bench::fmt_bytes(cuzk::bench::peak_rss_bytes().unwrap_or(0)));
    let proof: Vec<u8> = proofs.concat();
    if let Some(p) = &a.out {
        std::fs::write(p, &proof).with_context(|| format!("writing {}", p.display()))?;
    }
    if a.verify {
        let c1 = cuzk::synth::porep::parse_c1(&bytes, usize::MAX)?;
        let o = &c1.output;
        let mut ok = true;
        for p in &proofs {
            ok &= cuzk::synth::porep::verify_seal(
                c1.registered_proof(),
                o.comm_r,
                o.comm_d,
                prover_id,
                sector_id,
                o.ticket,
                o.seed,
                p,
            )?;
        }
        println!("verify_seal: {}", if ok { "valid" } else { "INVALID" });
        if !ok {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_prove(cfg: &Config, a: ProveArgs) -> Result<ExitCode> {
    if let Some(c1) = a.c1.clone() {
        return cmd_prove_c1(cfg, &a, &c1);
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

fn cmd_bench(cfg: &Config, config_path: Option<&Path>, a: BenchArgs) -> Result<ExitCode> {
    let BenchPlan { log2, count, seed, spec, params } = a.plan(cfg)?;
    if a.compare {
        return bench_compare(config_path, &a, log2, count, seed, &params);
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

fn cmd_bench_batch(a: BatchArgs) -> Result<ExitCode> {
    use cuzk::client::{run_batch, BatchJob};
    let job = match a.kind.to_ascii_lowercase().as_str() {
        "porep" | "porep-c2" | "seal-commit" => {
            let path = a.c1.as_ref().context("-t porep needs --c1 FILE")?;
            let c1 = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let registered_proof = if a.registered_proof != 0 {
                a.registered_proof
            } else {
                // What the daemon will check it against: the proof inside the C1 output.
                let parsed = cuzk::synth::porep::parse_c1(&c1, usize::MAX)?;
                cuzk::synth::porep::proof_number(parsed.registered_proof())
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
    let summary = rt.block_on(run_batch(&a.addr, job, a.count, a.concurrency, |p| match &p.error {
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

fn cmd_bench_sweep(cfg: &Config, a: SweepArgs) -> Result<ExitCode> {
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
fn bench_compare(
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

fn load_bench(file: &Path) -> Result<()> {
    use bellperson::groth16::Parameters;
    let bytes = std::fs::metadata(file).with_context(|| format!("{}", file.display()))?.len();
    let gbps = |d: Duration| bytes as f64 / 1e9 / d.as_secs_f64();
    // Warm the page cache once so every reader sees the same state.
    let _ = std::fs::read(file)?;
    let mut rows = Vec::new();
    for checked in [false, true] {
        let t = Instant::now();
        let k = ProvingKey::load(file, LoadOptions { subgroup_checks: checked })?;
        rows.push((format!("cuzk ProvingKey::load (subgroup checks: {checked})"), t.elapsed()));
        drop(k);
        let t = Instant::now();
        let p = Parameters::<blstrs::Bls12>::read(std::io::BufReader::new(std::fs::File::open(file)?), checked)?;
        rows.push((format!("bellperson Parameters::read (checked: {checked})"), t.elapsed()));
        drop(p);
    }
    let t = Instant::now();
    let m = Parameters::<blstrs::Bls12>::build_mapped_parameters(file.to_path_buf(), false)?;
    rows.push(("bellperson build_mapped_parameters (offsets only; decodes per proof)".into(), t.elapsed()));
    drop(m);
    println!("{} ({}):", file.display(), bench::fmt_bytes(bytes));
    for (what, d) in rows {
        println!("  {what:<70} {:>8.3} s  {:>6.2} GB/s", d.as_secs_f64(), gbps(d));
    }
    Ok(())
}

fn cmd_srs(cfg: &Config, cmd: SrsCmd) -> Result<ExitCode> {
    match cmd {
        SrsCmd::LoadBench { file } => load_bench(&file)?,
        SrsCmd::Gen(a) => match &a.porep {
            Some(size) => gen_porep(size, a.cache.clone(), a.seed)?,
            None => generate(a.circuit.spec()?, a.seed, a.out.as_deref().context("--out is required")?, a.generator)?,
        },
        SrsCmd::Info { file } => {
            let k = load_params(&file, cfg)?;
            println!(
                "{}: inputs {} (with ONE), domain {} (2^{}), h {}, l {}, a {}, b_g1 {}, b_g2 {}, {} decoded",
                file.display(),
                k.num_inputs(),
                k.domain_size(),
                k.domain_size().trailing_zeros(),
                k.h.len(),
                k.l.len(),
                k.a.len(),
                k.b_g1.len(),
                k.b_g2.len(),
                bench::fmt_bytes(k.heap_bytes())
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cfg = match load_config(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    cuzk::logging::init(&cfg.log);
    let res = match cli.cmd {
        Cmd::Srs { cmd } => cmd_srs(&cfg, cmd),
        Cmd::Prove(a) => cmd_prove(&cfg, a),
        Cmd::Bench(b) => match *b {
            BenchCmd { sub: None, args } => cmd_bench(&cfg, cli.config.as_deref(), args),
            BenchCmd { sub: Some(BenchSub::Batch(a)), .. } => cmd_bench_batch(a),
            BenchCmd { sub: Some(BenchSub::Sweep(a)), .. } => cmd_bench_sweep(&cfg, a),
        },
        Cmd::GenC1(a) => cmd_gen_c1(a),
        Cmd::Daemon => cuzk::daemon::run_until_signal(cfg.daemon.clone(), cfg.engine.clone())
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
    };
    let ok = match res {
        Ok(code) => code == ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            false
        }
    };
    // Leave without running atexit handlers. The CUDA runtime tears its context down
    // in one, while threads of the stopped engine may still be releasing pinned
    // buffers or device memory: on the H200 that crashed 1 run in 8 with SIGSEGV
    // after the results were printed. Everything the process holds is the OS's to
    // reclaim; output is flushed first.
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: fflush(NULL) flushes C stdio (CUDA/sppark may printf); _exit ends the
    // process at once and nothing runs after it.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(if ok { 0 } else { 1 })
    }
}

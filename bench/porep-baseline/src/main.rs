//! The PoRep C2 baseline: filecoin-proofs' `seal_commit_phase2` built with
//! `cuda-supraseal` (supraseal-c2 on the GPU), on the C1 output `cuzk gen-c1` writes.
//!
//! `porep-baseline --c1 FILE --param-cache DIR [--count N] [--threads T]
//!                 [--warmup W] [--prover-id HEX] [--sector-id N]`
//!
//! T threads in one process each call `seal_commit_phase2` on their share of the N
//! proofs (proof i on thread i mod T; T = 1 is sequential), as a Curio/Lotus node
//! calls it from several tasks. Every call verifies its proof (`seal_commit_phase2`
//! runs `verify_seal` before returning), so a success is a valid proof. The first
//! call also loads the parameters (filecoin-proofs keeps them for the process) and
//! JIT-compiles kernels, hence `first` and `steady` in the summary. `--warmup W`
//! proves W first, one after another and untimed, so the timed N start warm (the
//! figure to set beside `cuzk prove --warmup`).
//!
//! The C1 file is either filecoin-proofs-api's `SealCommitPhase1Output` JSON or the
//! Lotus/Curio wrapper `{"SectorNum", "Phase1Out" (base64 of that JSON), "SectorSize"}`.
//! Neither carries the prover id: it comes from `--prover-id`, else from the
//! `meta.json` that `cuzk gen-c1` writes next to `c1.json` (which also gives the
//! sector id; the wrapper's `SectorNum` is used when there is no meta.json).
//!
//! `--partitions K` proves only the first K partitions of the C1, in one call
//! (`seal_commit_phase2_circuit_proofs`: bellperson synthesizes the K circuits in
//! parallel, supraseal-c2 proves them as one batch). That call runs neither the
//! vanilla sanity check nor `verify_seal`, so it accepts a shape-only C1 and TEST-ONLY
//! timing parameters: the baseline on the real 32GiB/64GiB circuit without a sealed
//! sector, where ten partitions at once would not fit the host. Such proofs are not
//! verified (and from a shape-only C1 could not be).

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use base64::Engine as _;
use filecoin_proofs_api::seal::{seal_commit_phase2, seal_commit_phase2_circuit_proofs, SealCommitPhase1Output};
use filecoin_proofs_api::SectorId;

const USAGE: &str = "usage: porep-baseline --c1 FILE --param-cache DIR [--count N] [--threads T] \
                     [--warmup W] [--prover-id HEX] [--sector-id N] [--partitions K]";

struct Args {
    c1: PathBuf,
    param_cache: PathBuf,
    count: usize,
    threads: usize,
    warmup: usize,
    prover_id: Option<String>,
    sector_id: Option<u64>,
    /// Prove only the first K partitions, unchecked (see the module docs).
    partitions: Option<usize>,
}

fn parse_args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut c1, mut param_cache, mut count, mut threads, mut warmup, mut prover_id, mut sector_id) =
        (None, None, 1usize, 1usize, 0usize, None, None);
    let mut partitions = None;
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it.next().with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        let num = |v: &str| v.parse::<u64>().with_context(|| format!("{flag} {v}: not a number"));
        match flag.as_str() {
            "--c1" => c1 = Some(PathBuf::from(value)),
            "--param-cache" => param_cache = Some(PathBuf::from(value)),
            "--count" => count = num(&value)? as usize,
            "--threads" => threads = num(&value)? as usize,
            "--warmup" => warmup = num(&value)? as usize,
            "--prover-id" => prover_id = Some(value),
            "--sector-id" => sector_id = Some(num(&value)?),
            "--partitions" => partitions = Some(num(&value)? as usize),
            _ => bail!("unknown argument {flag}\n{USAGE}"),
        }
    }
    let c1 = c1.with_context(|| format!("--c1 is required\n{USAGE}"))?;
    let param_cache = param_cache.with_context(|| format!("--param-cache is required\n{USAGE}"))?;
    ensure!(count >= 1, "--count must be at least 1");
    ensure!(threads >= 1, "--threads must be at least 1");
    ensure!(partitions != Some(0), "--partitions must be at least 1");
    Ok(Args { c1, param_cache, count, threads: threads.min(count), warmup, prover_id, sector_id, partitions })
}

/// The first key of a JSON object (to tell the wrapper from the plain output).
fn first_key(bytes: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(bytes).ok()?.trim_start().strip_prefix('{')?.trim_start();
    let s = s.strip_prefix('"')?;
    Some(&s[..s.find('"')?])
}

/// The C1 output and the wrapper's sector number, if it was a wrapper.
fn load_c1(path: &Path) -> Result<(SealCommitPhase1Output, Option<u64>)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading C1 file {}", path.display()))?;
    match first_key(&bytes) {
        Some("SectorNum" | "Phase1Out" | "SectorSize") => {
            let w: serde_json::Value =
                serde_json::from_slice(&bytes).with_context(|| format!("{}: not valid JSON", path.display()))?;
            let b64 = w["Phase1Out"].as_str().context("wrapper has no Phase1Out string")?;
            let inner = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .context("Phase1Out is not valid base64")?;
            let out: SealCommitPhase1Output =
                serde_json::from_slice(&inner).context("Phase1Out is not a SealCommitPhase1Output")?;
            if let Some(size) = w["SectorSize"].as_u64() {
                let inner_size = u64::from(out.registered_proof.sector_size());
                ensure!(size == inner_size, "wrapper SectorSize {size} but the C1 output is for {inner_size} bytes");
            }
            Ok((out, w["SectorNum"].as_u64()))
        }
        _ => {
            let out = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a SealCommitPhase1Output JSON", path.display()))?;
            Ok((out, None))
        }
    }
}

fn parse_hex32(s: &str) -> Result<[u8; 32]> {
    let s = s.trim().trim_start_matches("0x");
    ensure!(s.len() == 64, "prover id must be 64 hex digits, got {} characters", s.len());
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).with_context(|| format!("prover id {s}: not hex"))?;
    }
    Ok(out)
}

/// The C1 output with only its first `k` partitions' vanilla proofs (the enum's one
/// variant holds a list per partition).
fn first_partitions(c1: &SealCommitPhase1Output, k: usize) -> Result<SealCommitPhase1Output> {
    let mut v = serde_json::to_value(c1).context("re-encoding the C1 output")?;
    let by_kind = v["vanilla_proofs"].as_object_mut().context("C1 output: vanilla_proofs is not an object")?;
    let parts = by_kind
        .values_mut()
        .next()
        .and_then(|p| p.as_array_mut())
        .context("C1 output: vanilla_proofs holds no partition list")?;
    ensure!(k <= parts.len(), "--partitions {k}: the C1 output has {} partitions", parts.len());
    parts.truncate(k);
    serde_json::from_value(v).context("C1 output with fewer partitions")
}

/// Peak resident set size (VmHWM) in kB.
fn peak_rss_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn run() -> Result<()> {
    let a = parse_args()?;
    // filecoin-proofs reads its settings once, at the first use: set the cache first.
    ensure!(a.param_cache.is_dir(), "--param-cache {}: not a directory", a.param_cache.display());
    std::env::set_var("FIL_PROOFS_PARAMETER_CACHE", &a.param_cache);

    let (c1, wrapper_sector) = load_c1(&a.c1)?;
    let meta_path = a.c1.parent().unwrap_or(Path::new(".")).join("meta.json");
    let meta: Option<serde_json::Value> = match std::fs::read(&meta_path) {
        Ok(b) => Some(serde_json::from_slice(&b).with_context(|| format!("{}: not valid JSON", meta_path.display()))?),
        Err(_) => None,
    };
    let prover_hex = match (&a.prover_id, &meta) {
        (Some(p), _) => p.clone(),
        (None, Some(m)) => {
            m["prover_id"].as_str().with_context(|| format!("{} has no prover_id", meta_path.display()))?.to_string()
        }
        (None, None) => bail!("no --prover-id and no {} (written by `cuzk gen-c1`)", meta_path.display()),
    };
    let prover_id = parse_hex32(&prover_hex)?;
    let sector_id = a
        .sector_id
        .or_else(|| meta.as_ref().and_then(|m| m["sector_id"].as_u64()))
        .or(wrapper_sector)
        .context("no --sector-id, no sector_id in meta.json and no wrapper SectorNum")?;

    let c1 = match a.partitions {
        Some(k) => first_partitions(&c1, k)?,
        None => c1,
    };
    let unchecked = a.partitions.is_some();
    // `seal_commit_phase2`, or for --partitions the first K partitions unchecked.
    let prove = |c1: SealCommitPhase1Output| -> Result<usize> {
        let sector = SectorId::from(sector_id);
        Ok(if unchecked {
            seal_commit_phase2_circuit_proofs(c1, sector)?.proof.len()
        } else {
            seal_commit_phase2(c1, prover_id, sector)?.proof.len()
        })
    };
    let proof = c1.registered_proof;
    let params = proof.cache_params_path().context("naming the parameter file")?;
    let vk = proof.cache_verifying_key_path().context("naming the verifying key file")?;
    // filecoin-proofs would generate missing parameters (hours for real sizes): refuse.
    for f in [&params, &vk] {
        ensure!(f.is_file(), "{} is missing (`cuzk srs gen --porep <size> --cache DIR` makes it)", f.display());
    }
    println!(
        "porep-baseline: {:?} ({}), prover id {prover_hex}, sector {sector_id}, params {} ({:.2} GB), \
         count {}, threads {}",
        proof,
        match a.partitions {
            Some(k) => format!(
                "the first {k} of {} partitions, unchecked: no vanilla sanity check, not verified",
                proof.partitions()
            ),
            None => format!("{} partition(s)", proof.partitions()),
        },
        params.display(),
        std::fs::metadata(&params).map(|m| m.len()).unwrap_or(0) as f64 / 1e9,
        a.count,
        a.threads
    );

    if a.warmup > 0 {
        let w = Instant::now();
        for i in 0..a.warmup {
            prove(c1.clone()).with_context(|| format!("warm-up proof {i}"))?;
        }
        println!("warm-up: {} proof(s) in {:.3}s (not timed below)", a.warmup, w.elapsed().as_secs_f64());
    }
    let start = Instant::now();
    // Completion times (seconds since start), in completion order.
    let done: Mutex<Vec<f64>> = Mutex::new(Vec::with_capacity(a.count));
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..a.threads {
            let (c1, done, failures, start, prove) = (&c1, &done, &failures, start, &prove);
            let count = a.count;
            let threads = a.threads;
            std::thread::Builder::new()
                .name(format!("c2-{t}"))
                .spawn_scoped(s, move || {
                    for i in (t..count).step_by(threads) {
                        let t0 = Instant::now();
                        // A panic inside filecoin-proofs/supraseal is reported like an error.
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| prove(c1.clone())))
                        .unwrap_or_else(|p| {
                            let msg = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "unknown panic".into());
                            Err(anyhow::anyhow!("panicked: {msg}"))
                        });
                        let (took, at) = (t0.elapsed().as_secs_f64(), start.elapsed().as_secs_f64());
                        match r {
                            Ok(len) => {
                                println!(
                                    "proof {i} thread {t}: {took:.3}s (done at {at:.3}s, {len} bytes, {})",
                                    if unchecked { "not verified" } else { "verified" }
                                );
                                done.lock().unwrap().push(at);
                            }
                            Err(e) => {
                                println!("proof {i} thread {t}: FAILED after {took:.3}s: {e:#}");
                                failures.lock().unwrap().push(format!("proof {i}: {e:#}"));
                                return; // one failure per thread is enough to see why
                            }
                        }
                    }
                })
                .expect("spawning a prover thread");
        }
    });
    let wall = start.elapsed().as_secs_f64();
    let done = done.into_inner().unwrap();
    let failures = failures.into_inner().unwrap();
    let peak = peak_rss_kb().map_or_else(|| "?".into(), |kb| format!("{:.2} GiB", kb as f64 / (1024.0 * 1024.0)));
    // `first`: when the first proof completed (parameter load and kernel JIT included);
    // `steady`: the rest of the wall time per further proof.
    let first = done.iter().copied().fold(f64::INFINITY, f64::min);
    let first_s = if done.is_empty() { "-".into() } else { format!("{first:.3}s") };
    let steady_s =
        if done.len() > 1 { format!("{:.3}s/proof", (wall - first) / (done.len() - 1) as f64) } else { "-".into() };
    println!(
        "baseline threads={} count={} warmup={} wall={wall:.3}s first={first_s} steady={steady_s} ok={} failed={} \
         not_run={} peak_rss={peak}",
        a.threads,
        a.count,
        a.warmup,
        done.len(),
        failures.len(),
        a.count - done.len() - failures.len()
    );
    if !failures.is_empty() {
        bail!(
            "{} of {} proofs failed ({} not run); first: {}",
            failures.len(),
            a.count,
            a.count - done.len() - failures.len(),
            failures[0]
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("porep-baseline: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

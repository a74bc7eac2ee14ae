//! `cuzk srs gen | info | load-bench`: generate test parameters (synthetic circuits
//! or Filecoin's PoRep), print a parameter file's sizes, time loading one.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use cuzk::{bench::fmt_bytes, config::Config, LoadOptions, ProvingKey, SyntheticCircuit, SyntheticSpec};
use rand::SeedableRng;
use tracing::info;

use super::{load_params, progress, CircuitArgs};

#[derive(Subcommand)]
pub enum SrsCmd {
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

#[derive(Args)]
pub struct SrsGenArgs {
    #[command(flatten)]
    circuit: CircuitArgs,
    /// Output file (synthetic circuits).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["porep", "filecoin"])]
    out: Option<PathBuf>,
    /// Parameters for Filecoin's PoRep circuit of this sector size (2KiB, 8MiB,
    /// 512MiB, ...; API v1.1), written under Filecoin's names into --cache.
    #[arg(long, value_name = "SIZE", conflicts_with_all = ["synthetic", "constraints", "out"])]
    porep: Option<String>,
    /// Parameters for any Filecoin circuit by Curio's circuit id: porep-2k,
    /// winning-2k (WinningPoSt), wpost-2k (WindowPoSt), snap-2k (SnapDeals update);
    /// sizes 2k, 8m, 512m, 32g, 64g. Written under Filecoin's names into --cache.
    #[arg(long = "circuit", value_name = "ID", conflicts_with_all = ["synthetic", "constraints", "out", "porep", "timing"])]
    filecoin: Option<String>,
    /// Parameter cache directory for --porep / --circuit (default:
    /// FIL_PROOFS_PARAMETER_CACHE or /var/tmp/filecoin-proof-parameters).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Seed of the toxic waste (default: random). Test parameters only.
    #[arg(long)]
    seed: Option<u64>,
    /// Which generator: cuzk's (fast) or bellperson's `generate_random_parameters`.
    #[arg(long, value_enum, default_value = "cuzk")]
    generator: Generator,
    /// With --porep or a synthetic circuit: TEST-ONLY timing parameters, the exact
    /// vector lengths of real ones with points from no toxic waste (chains of
    /// additions): minutes at 32GiB or 2^27 instead of days or hours; proofs made with
    /// them never verify. Refuses to replace a file.
    #[arg(long, conflicts_with = "generator")]
    timing: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Generator {
    Cuzk,
    Bellperson,
}

pub fn run(cfg: &Config, cmd: SrsCmd) -> Result<ExitCode> {
    match cmd {
        SrsCmd::LoadBench { file } => load_bench(&file)?,
        SrsCmd::Gen(a) => match (&a.porep, &a.filecoin) {
            (Some(size), _) if a.timing => gen_porep_timing(size, a.cache.clone(), a.seed)?,
            (Some(size), _) => {
                let proof = cuzk::filecoin::proof_for_sector_size(size).map_err(anyhow::Error::msg)?;
                gen_circuit(proof.into(), a.cache.clone(), a.seed)?
            }
            (None, Some(id)) => {
                let id = cuzk::filecoin::CircuitId::from_curio_id(id).map_err(anyhow::Error::msg)?;
                gen_circuit(id, a.cache.clone(), a.seed)?
            }
            (None, None) if a.cache.is_some() => anyhow::bail!("--cache goes with --porep or --circuit"),
            (None, None) if a.timing => {
                gen_synthetic_timing(a.circuit.spec()?, a.seed, a.out.as_deref().context("--out is required")?)?
            }
            (None, None) => {
                generate(a.circuit.spec()?, a.seed, a.out.as_deref().context("--out is required")?, a.generator)?
            }
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
                fmt_bytes(k.heap_bytes())
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Random parameters for the synthetic circuit `spec`, written to `out`.
pub fn generate(spec: SyntheticSpec, seed: Option<u64>, out: &Path, generator: Generator) -> Result<()> {
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

/// `srs gen --synthetic K --timing --out FILE`: TEST-ONLY timing parameters for the
/// synthetic circuit `spec` (its shape, then chains of additions), for benchmarks at
/// sizes where random parameters take hours (2^26, 2^27). Both provers given the same
/// file and randomness still produce the same bytes, so digests compare; nothing
/// verifies. Never replaces a file.
fn gen_synthetic_timing(spec: SyntheticSpec, seed: Option<u64>, out: &Path) -> Result<()> {
    anyhow::ensure!(
        !out.exists(),
        "{} exists: timing parameters never replace a parameter file (it may be a real one)",
        out.display()
    );
    let what = format!("the synthetic circuit (A density {}, B density {})", spec.a_density, spec.b_density);
    let key = timing_key(&what, SyntheticCircuit::new(spec, 0)?, seed.unwrap_or_else(rand::random))?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let t = Instant::now();
    key.write(out)?;
    println!(
        "{} written in {:.1} s (TIMING PARAMETERS: proofs never verify)",
        out.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Random parameters for a Filecoin circuit, under Filecoin's file names, with the
/// verifying key beside them (what filecoin-proofs' verifiers read).
pub(super) fn gen_circuit(proof: cuzk::filecoin::CircuitId, cache: Option<PathBuf>, seed: Option<u64>) -> Result<()> {
    use cuzk::filecoin as fil;
    let dir = cache.unwrap_or_else(fil::default_parameter_cache);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (params, vk) = fil::parameter_files(&dir, proof)?;
    let pb = progress(None, &format!("generating test parameters for {proof}"));
    let t = Instant::now();
    let mut rng = match seed {
        Some(s) => rand_chacha::ChaCha20Rng::seed_from_u64(s),
        None => rand_chacha::ChaCha20Rng::from_entropy(),
    };
    let key = cuzk::srs::generate_random(fil::blank_circuit_of(proof)?, &mut rng)?;
    key.write(&params)?;
    let mut f = std::fs::File::create(&vk).with_context(|| format!("creating {}", vk.display()))?;
    key.vk.write(&mut f)?;
    drop(f);
    mark_generated(&[&params, &vk])?;
    pb.finish_and_clear();
    println!(
        "{proof} ({}): {} (domain 2^{}, {} aux) and {} in {:.1} s",
        proof.curio_id(),
        params.display(),
        key.domain_size().trailing_zeros(),
        key.l.len(),
        vk.display(),
        t.elapsed().as_secs_f64()
    );
    // Non-interactive PoRep (API v1.2) proves with the same parameter file and then
    // aggregates with the inner-product SRS: write a fake one unless one is there
    // (never replace what may be the production file).
    let ipp = fil::ipp_srs_file(&dir);
    if matches!(proof, fil::CircuitId::Seal(_)) && !ipp.exists() {
        fil::write_fake_ipp_srs(&ipp, FAKE_IPP_PROOFS, seed.unwrap_or_else(rand::random))?;
        println!("fake inner-product SRS for up to {FAKE_IPP_PROOFS} aggregated proofs: {}", ipp.display());
    }
    Ok(())
}

/// TEST-ONLY timing parameters for `proof`'s PoRep circuit, in memory: the blank
/// circuit's shape (no witness, no recording), then chains of additions
/// (`cuzk_srs::generate_timing`). Says what it did and how long each part took.
pub fn porep_timing_key(proof: cuzk::filecoin::RegisteredSealProof, seed: u64) -> Result<ProvingKey> {
    timing_key(&format!("{proof:?}"), cuzk::filecoin::blank_circuit(proof)?, seed)
}

/// TEST-ONLY timing parameters for `circuit` (its shape, then chains of additions),
/// announced as such with their sizes and how long each part took.
fn timing_key<C: bellperson::Circuit<blstrs::Scalar>>(what: &str, circuit: C, seed: u64) -> Result<ProvingKey> {
    let t = Instant::now();
    let shape = cuzk::synth::shape_of(circuit)?;
    let shape_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let key = cuzk::srs::generate_timing(&shape, seed);
    println!(
        "TIMING PARAMETERS (test-only; proofs made with them never verify) for {what}: {} constraints \
         (domain 2^{}), {} inputs, {} aux, A {} / B {} points, {}; shape {shape_s:.1} s, points {:.1} s",
        shape.constraints,
        shape.domain_log2(),
        shape.inputs,
        shape.aux,
        shape.a_query,
        shape.b_query,
        fmt_bytes(key.heap_bytes()),
        t.elapsed().as_secs_f64()
    );
    Ok(key)
}

/// `srs gen --porep SIZE --timing`: timing parameters under Filecoin's file names,
/// so the pipeline finds them as it finds real ones. Never replaces a file there.
fn gen_porep_timing(size: &str, cache: Option<PathBuf>, seed: Option<u64>) -> Result<()> {
    use cuzk::filecoin as fil;
    let proof = fil::proof_for_sector_size(size).map_err(anyhow::Error::msg)?;
    let dir = cache.unwrap_or_else(fil::default_parameter_cache);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (params, vk) = fil::parameter_files(&dir, proof)?;
    for f in [&params, &vk] {
        if f.exists() {
            anyhow::bail!(
                "{} exists: timing parameters never replace a parameter file (it may be a real one); \
                 use another --cache",
                f.display()
            );
        }
    }
    let key = porep_timing_key(proof, seed.unwrap_or_else(rand::random))?;
    let t = Instant::now();
    key.write(&params)?;
    let mut f = std::fs::File::create(&vk).with_context(|| format!("creating {}", vk.display()))?;
    key.vk.write(&mut f)?;
    drop(f);
    mark_generated(&[&params, &vk])?;
    println!(
        "{} and {} written in {:.1} s (TIMING PARAMETERS: proofs never verify)",
        params.display(),
        vk.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Marks test parameters written under Filecoin's names as such (a `.cuzk-digest`
/// record beside each), so the digest check uses them as test parameters instead of
/// refusing them as corrupt copies of Filecoin's files.
fn mark_generated(files: &[&Path]) -> Result<()> {
    for f in files {
        cuzk::filecoin::digest::mark_generated(f)?;
    }
    Ok(())
}

/// Proofs a fake inner-product SRS can aggregate: a 32GiB/64GiB NI-PoRep's 126
/// partitions pad to 128.
const FAKE_IPP_PROOFS: usize = 128;

/// `srs load-bench`: cuzk's loader against bellperson's readers on the same file.
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
    println!("{} ({}):", file.display(), fmt_bytes(bytes));
    for (what, d) in rows {
        println!("  {what:<70} {:>8.3} s  {:>6.2} GB/s", d.as_secs_f64(), gbps(d));
    }
    Ok(())
}

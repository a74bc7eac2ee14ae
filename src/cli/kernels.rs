//! `cuzk bench kernels`: H's MSM and the NTT phase of a partition at domains of
//! 2^k, each alone on a device (or on the CPU backend's kernels), every MSM sum
//! checked exactly (`cuzk::gpu::kernels`). The MSM runs as a single call of
//! sppark's `msm_t` over all points (supraseal-c2's prover calls it that way for H),
//! as the engine runs H (on a device: one call, a yield point between its batches),
//! and in calls of 2^C points per `--chunk-log2` (how the engine cut H for its yield
//! points before 2026-12-06), so the table gives both a kernel's speed and what
//! yield points cost. `--wbits` adds rows of the engine's H with other window
//! widths than sppark's rule picks, `--groups` rows with other numbers of windows
//! per accumulate launch and `--rounds` rows with launches of R buckets per thread
//! across windows, at sppark's width and at each `--wbits` one (the engine's
//! H yields after each launch when a deadline partition waits; its rows here take
//! every yield point).

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use cuzk::gpu::kernels::{cuda_devices, time_msm_h, time_ntt, HInputs, On, GROUP_ROUNDS};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Where {
    /// A CUDA device when this build and host have one, else the CPU.
    Auto,
    Cuda,
    Cpu,
}

#[derive(Args)]
pub struct KernelsArgs {
    /// Domains, as log2 (comma-separated); default 20,22,24,26,27 on a device,
    /// 10,12,14,16 on the CPU. 27 is a 32GiB PoRep partition's.
    #[arg(long, value_delimiter = ',', value_name = "K,...")]
    log2: Vec<u32>,
    /// H-MSM calls of 2^C points each, besides the single call (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "24,25", value_name = "C,...")]
    chunk_log2: Vec<u32>,
    /// Also the engine's H with windows of W bits instead of sppark's choice (18 at
    /// 2^27), in sppark's batches (wider windows: fewer, larger ones) and in batches
    /// of at most 2^24 points, as the engine's yield points want them
    /// (comma-separated; a device only; 10..=26).
    #[arg(long, value_delimiter = ',', value_name = "W,...")]
    wbits: Vec<u32>,
    /// Also the engine's H with G windows per accumulate launch instead of its
    /// own choice (3 of 15 at 2^27 on an H100 or H200), a yield point after each
    /// launch, at sppark's width and at each `--wbits` width (comma-separated; a
    /// device only; 0: a batch's windows in one launch, yield points between
    /// batches only).
    #[arg(long, value_delimiter = ',', value_name = "G,...")]
    groups: Vec<u32>,
    /// Also the engine's H in accumulate launches of R buckets per thread, across
    /// windows (its own choice with windows of 20 bits or more: 4), a yield point
    /// after each launch, at sppark's width and at each `--wbits` width
    /// (comma-separated; a device only; 1..=1024).
    #[arg(long, value_delimiter = ',', value_name = "R,...")]
    rounds: Vec<u32>,
    /// Repetitions of each kernel (the table gives their median, min and max).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    #[arg(long, value_enum, default_value = "auto")]
    on: Where,
    /// CUDA device index.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Seed of the points and scalars.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn stats(ms: &[f64]) -> (f64, f64, f64) {
    let mut v = ms.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// Prints the table; exits 1 when an MSM sum is wrong.
pub fn run(a: KernelsArgs) -> Result<ExitCode> {
    if a.reps == 0 {
        bail!("--reps must be at least 1");
    }
    if let Some(k) = a.log2.iter().chain(&a.chunk_log2).find(|k| !(1..=32).contains(*k)) {
        bail!("log2 {k} is outside 1..=32");
    }
    let on = match a.on {
        Where::Cpu => On::Cpu,
        Where::Cuda => On::Cuda(a.device),
        Where::Auto if a.device < cuda_devices() => On::Cuda(a.device),
        Where::Auto => {
            println!("no CUDA device {} here: the CPU backend's kernels", a.device);
            On::Cpu
        }
    };
    if on == On::Cpu && !a.wbits.is_empty() {
        bail!("--wbits sets the device MSM's window width: not for the CPU");
    }
    if on == On::Cpu && !a.groups.is_empty() {
        bail!("--groups sets the device MSM's windows per launch: not for the CPU");
    }
    if on == On::Cpu && !a.rounds.is_empty() {
        bail!("--rounds sets the device MSM's buckets per launch: not for the CPU");
    }
    if let Some(r) = a.rounds.iter().find(|r| !(1..=1024).contains(*r)) {
        bail!("--rounds {r} is outside 1..=1024");
    }
    if let Some(g) = a.groups.iter().find(|&&g| g & GROUP_ROUNDS != 0) {
        bail!("--groups {g} is not a number of windows");
    }
    // Rounds go to the device as groups with a flag (GROUP_ROUNDS).
    let groups: Vec<u32> = a.groups.iter().copied().chain(a.rounds.iter().map(|r| GROUP_ROUNDS | r)).collect();
    if let Some(w) = a.wbits.iter().find(|w| !(10..=26).contains(*w)) {
        bail!("--wbits {w} is outside 10..=26 (sppark's sort takes up to 26 bits)");
    }
    let sizes = if !a.log2.is_empty() {
        a.log2.clone()
    } else if on == On::Cpu {
        vec![10, 12, 14, 16]
    } else {
        vec![20, 22, 24, 26, 27]
    };
    // sppark's msm_t in one call (supraseal-c2's way), the engine's H (a device
    // only: one call with a yield point between batches), then sppark's in chunks.
    let mut chunks = vec![usize::MAX];
    if on != On::Cpu {
        chunks.push(0);
    }
    chunks.extend(a.chunk_log2.iter().map(|c| 1usize << c));
    // Refused up front, with the figure, rather than aborted on allocation halfway.
    let mut sys = sysinfo::System::new()?;
    sys.refresh_memory();
    let avail = sys.available_memory();
    if let Some(&k) = sizes.iter().find(|&&k| HInputs::host_bytes(k) > avail) {
        bail!(
            "log2 {k} needs ~{:.1} GiB of host memory for its points, scalars and NTT arrays; {:.1} GiB is available",
            HInputs::host_bytes(k) as f64 / (1u64 << 30) as f64,
            avail as f64 / (1u64 << 30) as f64
        );
    }
    println!("kernels on {on}, {} repetitions each, times in ms (median, min, max)", a.reps);
    println!(
        "{:>4}  {:<32} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9}  check",
        "log2", "kernel", "calls", "median", "min", "max", "ns/pt", "vs 1 call"
    );
    let mut wrong = Vec::new();
    for &k in &sizes {
        let t = std::time::Instant::now();
        let inp = HInputs::new(k, a.seed);
        tracing::info!(log2 = k, ms = t.elapsed().as_millis() as u64, "inputs generated");
        let n = inp.points.len() as f64;
        let runs = time_msm_h(on, &inp, &chunks, &a.wbits, &groups, a.reps)?;
        let one = stats(&runs[0].ms).0;
        for (i, r) in runs.iter().enumerate() {
            // A chunk as large as the whole is the single call again, and a window
            // width whose batches are already within the cap the same run twice.
            if i > 0 && r.chunk != 0 && r.calls == 1 {
                continue;
            }
            if i > 0
                && r.chunk == 0
                && runs[i - 1].chunk == 0
                && (runs[i - 1].wbits, runs[i - 1].yields, runs[i - 1].group) == (r.wbits, r.yields, r.group)
            {
                continue;
            }
            let (med, min, max) = stats(&r.ms);
            let name = match (i, r.chunk) {
                (0, _) => "msm_h one call".to_string(),
                (_, 0) if r.group & GROUP_ROUNDS != 0 => {
                    format!("msm_h engine w{} r{}, {} yields", r.wbits, r.group & !GROUP_ROUNDS, r.yields)
                }
                (_, 0) => format!("msm_h engine w{} g{}, {} yields", r.wbits, r.group, r.yields),
                (_, c) => format!("msm_h chunks of 2^{}", c.trailing_zeros()),
            };
            let vs = if i == 0 { String::new() } else { format!("{:+.1}%", (med / one - 1.0) * 100.0) };
            let check = if r.correct { "ok" } else { "WRONG" };
            println!(
                "{k:>4}  {name:<32} {:>6} {med:>10.2} {min:>10.2} {max:>10.2} {:>9.2} {vs:>9}  {check}",
                r.calls,
                med * 1e6 / n
            );
            if !r.correct {
                wrong.push(format!("2^{k} {name}"));
            }
        }
        for (name, ms) in time_ntt(on, k, a.seed, a.reps)? {
            let (med, min, max) = stats(&ms);
            println!(
                "{k:>4}  {:<32} {:>6} {med:>10.2} {min:>10.2} {max:>10.2} {:>9.2} {:>9}  -",
                format!("ntt {name}"),
                "",
                med * 1e6 / n,
                ""
            );
        }
    }
    if wrong.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("FAILED: these MSM sums differ from the expected ones: {}", wrong.join(", "));
        Ok(ExitCode::from(1))
    }
}

//! Kernel timings for `cuzk bench kernels`: a partition's H-MSM and NTT phase at a
//! domain of 2^k, each alone on one device (or on the CPU, with the CPU backend's
//! own MSM and NTT), so that a kernel change is measured as a kernel, apart from
//! the pipeline around it.
//!
//! The MSM's inputs are what a partition's H has: 2^k − 1 points (TEST-ONLY timing
//! points, `cuzk_srs::timing_g1`) resident on the device and as many uniformly
//! random scalars in Montgomery form. Every result is checked exactly against the
//! discrete logarithm of the sum (`cuzk_srs::timing_msm_dlog`), so a timing of a
//! wrong kernel is never reported as a timing.

use blstrs::{G1Affine, G1Projective, Scalar};
use cuzk_srs::{timing_g1, timing_msm_dlog, TimingVector};
use ff::Field;
use group::Group;
use rand_chacha::{rand_core::SeedableRng, ChaCha8Rng};
use rayon::prelude::*;

use crate::GpuError;

/// Where the kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    /// A CUDA device, by its CUDA index.
    Cuda(usize),
    /// The CPU backend's MSM (blst's Pippenger) and NTT, on all cores.
    Cpu,
}

/// CUDA devices this build and host have (0 without either).
#[must_use]
pub fn cuda_devices() -> usize {
    #[cfg(cuzk_cuda)]
    return crate::ffi::cuda::count();
    #[cfg(not(cuzk_cuda))]
    0
}

impl std::fmt::Display for On {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            On::Cuda(d) => write!(f, "CUDA device {d}"),
            On::Cpu => f.write_str("the CPU"),
        }
    }
}

/// H's inputs at a domain of 2^`log2`.
pub struct HInputs {
    pub log2: u32,
    pub seed: u64,
    pub points: Vec<G1Affine>,
    pub scalars: Vec<Scalar>,
}

impl HInputs {
    /// 2^`log2` − 1 timing points of the H vector and as many random scalars, both
    /// deterministic in `seed`.
    ///
    /// # Panics
    /// When `log2` is 0 or above 32.
    #[must_use]
    pub fn new(log2: u32, seed: u64) -> Self {
        assert!((1..=32).contains(&log2), "log2 {log2} outside 1..=32");
        let n = (1usize << log2) - 1;
        let points = timing_g1(n, seed, TimingVector::H);
        let mut scalars = vec![Scalar::ZERO; n];
        scalars.par_chunks_mut(1 << 16).enumerate().for_each(|(i, c)| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed.rotate_left(32) ^ i as u64);
            c.iter_mut().for_each(|s| *s = Scalar::random(&mut rng));
        });
        Self { log2, seed, points, scalars }
    }

    /// Host memory the bench holds at once at a domain of 2^`log2`, at most: the
    /// points, the scalars and their byte form (the MSM), and the NTT phase's three
    /// arrays, which run while the MSM's inputs are still held.
    #[must_use]
    pub fn host_bytes(log2: u32) -> u64 {
        let per_point =
            std::mem::size_of::<G1Affine>() + 2 * std::mem::size_of::<Scalar>() + 3 * std::mem::size_of::<Scalar>();
        (1u64 << log2) * per_point as u64
    }

    /// `Σ scalars[i] · points[i]`, from the points' discrete logarithms: O(n) field
    /// operations, no MSM.
    #[must_use]
    pub fn expected(&self) -> G1Projective {
        G1Projective::generator() * timing_msm_dlog(self.seed, TimingVector::H, &self.scalars)
    }
}

/// The most points the engine's H takes between two yield points: sppark's batch
/// at 2^27 with its 18-bit windows (~0.14 s on an H100).
pub const ENGINE_BATCH: usize = 1 << 24;

/// One way of running H's MSM: calls of `chunk` points each.
#[derive(Clone, Debug)]
pub struct MsmRun {
    /// Points per call (the number of points: one call); 0: the engine's H on a
    /// device (one call, a yield point between sppark's batches).
    pub chunk: usize,
    /// Calls per MSM.
    pub calls: usize,
    /// Yield points the engine's H passed (0 otherwise).
    pub yields: usize,
    /// The engine's H on a device: its window width in bits (0 otherwise).
    pub wbits: u32,
    /// The engine's H on a device: windows per accumulate launch (its windows:
    /// one launch per batch; 0 otherwise), or [`GROUP_ROUNDS`] | buckets per
    /// thread.
    pub group: u32,
    /// Wall time of each repetition, ms.
    pub ms: Vec<f64>,
    /// The sum equals the expected one.
    pub correct: bool,
}

/// One way of running H's MSM ([`time_msm_h`]): points per call (0: the engine's
/// H), and for the engine's H on a device its window width and batch cap (0:
/// sppark's rule) and windows per accumulate launch ([`GROUP_ENGINE`]: the
/// engine's choice; 0: all of a batch's in one launch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsmWay {
    pub chunk: usize,
    pub wbits: u32,
    pub max_batch: usize,
    pub group: u32,
}

/// [`MsmWay::group`]: the engine's own choice (`engine_launches` in
/// `cuda/cuzk.cu`).
pub const GROUP_ENGINE: u32 = u32::MAX;

/// [`MsmWay::group`] and [`MsmRun::group`]: `GROUP_ROUNDS | r` is launches of r
/// buckets per accumulate thread (spans across windows) instead of whole windows.
pub const GROUP_ROUNDS: u32 = 1 << 31;

/// Batches sppark's MSM cuts `n` points into with `wbits`-bit windows
/// (`msm_t::invoke` in sppark/msm/pippenger.cuh, and `msm_yield.cuh`).
fn sppark_batches(n: usize, wbits: u32) -> usize {
    let lg = (n + n / 2).max(1).ilog2();
    ((1usize << (lg.max(wbits) - wbits)) >> 6).max(1)
}

/// The ways `cuzk bench kernels` times: per entry of `chunks` (points per call; 0
/// is the engine's H as it runs under a gate, its windows in the engine's groups),
/// then per entry of `wbits` the engine's H with windows of that many bits, in
/// sppark's batches and in batches of at most [`ENGINE_BATCH`] points, a batch's
/// windows in one launch, then per entry of `groups` the engine's H with that many
/// windows per launch (0: a batch's all), at sppark's width and at each of `wbits`
/// (in sppark's batches; group 0 there is the width's own row).
#[must_use]
pub fn msm_ways(n: usize, chunks: &[usize], wbits: &[u32], groups: &[u32]) -> Vec<MsmWay> {
    let way = |chunk, wbits, max_batch, group| MsmWay { chunk, wbits, max_batch, group };
    chunks
        .iter()
        .map(|&c| if c == 0 { way(0, 0, 0, GROUP_ENGINE) } else { way(c.clamp(1, n.max(1)), 0, 0, 0) })
        .chain(wbits.iter().flat_map(|&w| {
            // The capped run only where the cap changes sppark's batches.
            let capped = sppark_batches(n, w) < n.div_ceil(ENGINE_BATCH);
            std::iter::once(way(0, w, 0, 0)).chain(capped.then(|| way(0, w, ENGINE_BATCH, 0)))
        }))
        .chain(groups.iter().map(|&g| way(0, 0, 0, g)))
        .chain(wbits.iter().flat_map(|&w| groups.iter().filter(|&&g| g != 0).map(move |&g| way(0, w, 0, g))))
        .collect()
}

/// Times H's MSM `reps` times per way of [`msm_ways`] (on the CPU, the engine's
/// H is the single call) and checks every sum. With window groups, the engine's H
/// takes a yield point after every launch, as when a deadline partition waits all
/// along.
///
/// # Errors
/// [`GpuError::Unavailable`] when `on` names a device this build or host does not
/// have, or `wbits` or `groups` is given for the CPU; [`GpuError::Cuda`] when a
/// call fails (a window width outside 10..=26 included).
pub fn time_msm_h(
    on: On,
    inp: &HInputs,
    chunks: &[usize],
    wbits: &[u32],
    groups: &[u32],
    reps: u32,
) -> Result<Vec<MsmRun>, GpuError> {
    let n = inp.points.len();
    let ways = msm_ways(n, chunks, wbits, groups);
    let expected = inp.expected();
    let results: Vec<Timed> = match on {
        On::Cpu if !wbits.is_empty() || !groups.is_empty() => {
            return Err(GpuError::Unavailable(
                "window widths and groups are the device MSM's: the CPU's is blst's".into(),
            ))
        }
        On::Cpu => ways.iter().map(|w| cpu_msm(inp, if w.chunk == 0 { n.max(1) } else { w.chunk }, reps)).collect(),
        On::Cuda(dev) => cuda_msm(dev, inp, &ways, reps)?,
    };
    Ok(ways
        .iter()
        .zip(results)
        .map(|(w, t)| MsmRun {
            chunk: w.chunk,
            calls: if w.chunk == 0 { 1 } else { n.div_ceil(w.chunk) },
            yields: t.yields,
            wbits: t.wbits,
            group: t.group,
            ms: t.ms,
            correct: t.sum == expected,
        })
        .collect())
}

/// NTT phase timings, ms per repetition, by name: on a device `intt`, `coset_ntt`,
/// `coset_intt` (each alone on one stream), `phase` (a partition's: three arrays on
/// three streams, H on the coset, the coset iNTT) and `phase_yield` (the same as
/// bulk work runs it under a gate: the arrays in turn, a sync and a yield point
/// after every kernel; its result checked word for word against `phase`'s); on
/// the CPU `forward` (one transform, all cores). The transforms themselves are
/// checked by the proof tests.
///
/// # Errors
/// As [`time_msm_h`].
pub fn time_ntt(on: On, log2: u32, seed: u64, reps: u32) -> Result<Vec<(&'static str, Vec<f64>)>, GpuError> {
    let n = 1usize << log2;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let distinct: Vec<Scalar> = (0..n.min(1 << 16)).map(|_| Scalar::random(&mut rng)).collect();
    let values: Vec<Scalar> = distinct.iter().copied().cycle().take(n).collect();
    match on {
        On::Cpu => {
            let w = crate::cpu::omega(log2)?;
            let ms = (0..reps)
                .map(|_| {
                    let mut v = values.clone();
                    let t = std::time::Instant::now();
                    crate::cpu::ntt(&mut v, w);
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            Ok(vec![("forward", ms)])
        }
        On::Cuda(dev) => {
            let per_rep = cuda_ntt(dev, &values, reps)?;
            let names = ["intt", "coset_ntt", "coset_intt", "phase", "phase_yield"];
            Ok(names.iter().enumerate().map(|(i, &name)| (name, per_rep.iter().map(|r| r[i]).collect())).collect())
        }
    }
}

/// One way's repetitions: times (ms), the sum, the yield points passed, the
/// window width (device only).
struct Timed {
    ms: Vec<f64>,
    sum: G1Projective,
    yields: usize,
    wbits: u32,
    group: u32,
}

fn cpu_msm(inp: &HInputs, chunk: usize, reps: u32) -> Timed {
    let bytes: Vec<_> = inp.scalars.par_iter().map(Scalar::to_bytes_le).collect();
    let mut sum = G1Projective::identity();
    let ms = (0..reps)
        .map(|_| {
            let t = std::time::Instant::now();
            sum = inp
                .points
                .chunks(chunk)
                .zip(bytes.chunks(chunk))
                .map(|(p, s)| crate::cpu::msm_g1(p, s))
                .fold(G1Projective::identity(), |a, b| a + b);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    Timed { ms, sum, yields: 0, wbits: 0, group: 0 }
}

#[cfg(cuzk_cuda)]
use crate::error::cuda_err;

#[cfg(cuzk_cuda)]
fn cuda_device(dev: usize) -> Result<(), GpuError> {
    let count = crate::ffi::cuda::count();
    if dev >= count {
        return Err(GpuError::Unavailable(format!("no CUDA device {dev} (this host has {count})")));
    }
    // Kernels load and NTT twiddles are built on first use: not in the timings.
    crate::ffi::cuda::warmup(dev).map_err(cuda_err("warm-up", dev))
}

#[cfg(cuzk_cuda)]
fn cuda_msm(dev: usize, inp: &HInputs, ways: &[MsmWay], reps: u32) -> Result<Vec<Timed>, GpuError> {
    cuda_device(dev)?;
    let runs =
        crate::ffi::cuda::bench_msm(dev, &inp.points, &inp.scalars, ways, reps).map_err(cuda_err("H-MSM", dev))?;
    Ok(runs
        .into_iter()
        .map(|r| Timed {
            ms: r.ms,
            sum: crate::ffi::g1_projective(r.sum),
            yields: r.yields,
            wbits: r.wbits,
            group: r.group,
        })
        .collect())
}

#[cfg(cuzk_cuda)]
fn cuda_ntt(dev: usize, values: &[Scalar], reps: u32) -> Result<Vec<[f64; 5]>, GpuError> {
    cuda_device(dev)?;
    crate::ffi::cuda::bench_ntt(dev, values, reps).map_err(cuda_err("NTT", dev))
}

#[cfg(not(cuzk_cuda))]
fn no_cuda() -> GpuError {
    GpuError::Unavailable("this build has no CUDA backend (nvcc was not found when cuzk-gpu was built)".into())
}

#[cfg(not(cuzk_cuda))]
fn cuda_msm(_: usize, _: &HInputs, _: &[MsmWay], _: u32) -> Result<Vec<Timed>, GpuError> {
    Err(no_cuda())
}

#[cfg(not(cuzk_cuda))]
fn cuda_ntt(_: usize, _: &[Scalar], _: u32) -> Result<Vec<[f64; 5]>, GpuError> {
    Err(no_cuda())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_msm_in_chunks_or_whole_gives_the_discrete_log_sum() {
        let inp = HInputs::new(12, 3);
        assert_eq!(inp.points.len(), 4095);
        let runs = time_msm_h(On::Cpu, &inp, &[usize::MAX, 0, 1000, 1 << 10], &[], &[], 2).unwrap();
        let shape: Vec<_> = runs.iter().map(|r| (r.chunk, r.calls, r.yields)).collect();
        assert_eq!(shape, [(4095, 1, 0), (0, 1, 0), (1000, 5, 0), (1024, 4, 0)]);
        assert!(runs.iter().all(|r| r.correct && r.ms.len() == 2));
        // The check can fail: the same points and scalars checked as another seed's.
        let runs = time_msm_h(On::Cpu, &HInputs { seed: 4, ..inp }, &[usize::MAX], &[], &[], 1).unwrap();
        assert!(!runs[0].correct, "points of seed 3 checked as seed 4's");
        // Window widths are the device MSM's.
        let e = time_msm_h(On::Cpu, &HInputs::new(4, 1), &[usize::MAX], &[19], &[], 1).unwrap_err();
        assert!(matches!(e, GpuError::Unavailable(_)), "{e}");
        // So are window groups.
        let e = time_msm_h(On::Cpu, &HInputs::new(4, 1), &[usize::MAX], &[], &[3], 1).unwrap_err();
        assert!(matches!(e, GpuError::Unavailable(_)), "{e}");
    }

    /// The table's rows: the engine's H in its own groups, window widths with a
    /// batch's windows in one launch (sppark's batches, then capped), then groups
    /// at sppark's width and at each width given.
    #[test]
    fn the_msm_ways_cover_chunks_widths_and_groups() {
        let w = |chunk, wbits, max_batch, group| MsmWay { chunk, wbits, max_batch, group };
        let ways = msm_ways(1000, &[usize::MAX, 0, 1 << 8], &[20], &[0, 3]);
        assert_eq!(
            ways,
            [
                w(1000, 0, 0, 0),
                w(0, 0, 0, GROUP_ENGINE),
                w(256, 0, 0, 0),
                w(0, 20, 0, 0),
                w(0, 0, 0, 0),
                w(0, 0, 0, 3),
                w(0, 20, 0, 3)
            ]
        );
        // At 2^27 sppark gives 18-bit windows 8 batches of 2^24 points (the cap
        // changes nothing) and 21-bit ones a single batch (capped: 8).
        let n = (1 << 27) - 1;
        assert_eq!((sppark_batches(n, 18), sppark_batches(n, 21)), (8, 1));
        let ways = msm_ways(n, &[], &[18, 21], &[]);
        assert_eq!(ways, [w(0, 18, 0, 0), w(0, 21, 0, 0), w(0, 21, ENGINE_BATCH, 0)]);
    }

    #[test]
    fn the_cpu_ntt_is_timed_per_repetition() {
        let t = time_ntt(On::Cpu, 10, 1, 3).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].0, t[0].1.len()), ("forward", 3));
    }

    #[test]
    fn a_device_this_host_lacks_is_refused_with_the_reason() {
        let inp = HInputs::new(4, 1);
        let e = time_msm_h(On::Cuda(1 << 20), &inp, &[usize::MAX], &[], &[], 1).unwrap_err();
        assert!(matches!(e, GpuError::Unavailable(_)), "{e}");
        let e = time_ntt(On::Cuda(1 << 20), 4, 1, 1).unwrap_err();
        assert!(matches!(e, GpuError::Unavailable(_)), "{e}");
    }
}

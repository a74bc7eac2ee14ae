//! The CUDA backend computes the same group elements as the CPU backend, for domains
//! 2^k (sizes from `CUZK_GPU_TEST_LOG2`, default "8,12,15"), non-power-of-two
//! constraint counts, empty MSMs, with parameter points resident and streamed, and
//! MSM scalars dense or split by value (the bit split, with resident points only).
//! Tests that need a GPU are `#[ignore]`d: reported as ignored without one; run with
//! `--include-ignored` on a GPU host.

use std::sync::{
    atomic::{AtomicI64, AtomicU64, Ordering},
    Arc,
};

use bellperson::groth16::VerifyingKey;
use blstrs::{Bls12, G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use cuzk_gpu::{
    cpu::CpuBackend,
    cuda::{CudaBackend, CudaOptions, COMPILED},
    no_device_left, with_injected_fault, Backend, DeviceHealth, Evals, GpuError, HostPartition, InjectedFault,
    MsmScalars, ScalarBytes, SplitScalars,
};
use cuzk_srs::ProvingKey;
use ff::Field;
use group::{Curve, Group};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// n distinct points p0 + i*q (cheap: one addition each), normalized in a batch.
fn points<G: Group<Scalar = Scalar> + Curve + Send + Sync>(n: usize, seed: u64) -> Vec<G::AffineRepr>
where
    G::AffineRepr: Send + Default + Clone,
{
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (p0, q) = (G::random(&mut rng), G::random(&mut rng));
    let proj: Vec<G> = (0..n)
        .into_par_iter()
        .chunks(4096)
        .flat_map_iter(|c| {
            let mut p = p0 + q * Scalar::from(c[0] as u64);
            c.into_iter().map(move |_| {
                let r = p;
                p += q;
                r
            })
        })
        .collect();
    let mut out = vec![G::AffineRepr::default(); n];
    G::batch_normalize(&proj, &mut out);
    out
}

fn g1s(n: usize, seed: u64) -> Vec<G1Affine> {
    points::<G1Projective>(n, seed)
}

fn g2s(n: usize, seed: u64) -> Vec<G2Affine> {
    points::<G2Projective>(n, seed)
}

fn scalars(n: usize, seed: u64) -> Vec<Scalar> {
    (0..n)
        .into_par_iter()
        .map(|i| Scalar::random(rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (i as u64) << 20)))
        .collect()
}

fn bytes(v: &[Scalar]) -> Vec<ScalarBytes> {
    v.par_iter().map(|s| s.to_bytes_le()).collect()
}

fn dense(v: &[Scalar]) -> MsmScalars {
    MsmScalars::Dense(bytes(v))
}

/// Random points of the right sizes: not a valid SRS, but both backends must agree on it.
fn fake_srs(m: usize, nl: usize, na: usize, nb: usize) -> ProvingKey {
    let g1 = g1s(8, 1);
    let g2 = g2s(3, 2);
    ProvingKey {
        vk: VerifyingKey::<Bls12> {
            alpha_g1: g1[0],
            beta_g1: g1[1],
            beta_g2: g2[0],
            gamma_g2: g2[1],
            delta_g1: g1[2],
            delta_g2: g2[2],
            ic: vec![g1[3]],
        },
        h: Arc::new(g1s(m - 1, 10)),
        l: Arc::new(g1s(nl, 11)),
        a: Arc::new(g1s(na, 12)),
        b_g1: Arc::new(g1s(nb, 13)),
        b_g2: Arc::new(g2s(nb, 14)),
    }
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn cuda_matches_cpu() {
    if !COMPILED {
        panic!("built without CUDA (nvcc was not found at build time)");
    }
    let gpu = CudaBackend::new(CudaOptions::default()).unwrap_or_else(|e| panic!("no usable GPU: {e}"));
    let streaming = CudaBackend::new(CudaOptions { srs_resident: false, ..Default::default() }).unwrap();
    // Uploading from pageable memory (no pool), and a pool too small for the larger
    // partitions (those fall back to pageable memory).
    let pageable = CudaBackend::new(CudaOptions { pinned_memory: 0, ..Default::default() }).unwrap();
    let small_pool = CudaBackend::new(CudaOptions { pinned_memory: 64 << 20, ..Default::default() }).unwrap();
    let sizes = std::env::var("CUZK_GPU_TEST_LOG2").unwrap_or_else(|_| "8,12,15".into());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    for lg in sizes.split(',').map(|s| s.trim().parse::<u32>().unwrap()) {
        let m = 1usize << lg;
        for n in [m, m - 3, m / 2 + 1] {
            let (nl, na) = (n / 2 + rng.gen_range(1..16), n / 3 + 7);
            let nb = if n == m { 0 } else { n / 5 + 1 };
            let srs = fake_srs(m, nl, na, nb);
            // Random MSM scalars, and witness-like ones (mostly 0 and 1, as in
            // PoRep), dense and split by value; the split takes the device's split
            // path when the points are resident.
            for (witness, split) in [(false, false), (true, false), (true, true)] {
                let msm_scalars = |k: usize, seed: u64| {
                    let mut v = scalars(k, seed);
                    if witness {
                        // 1 in 10 is neither 0 nor 1: under the split's 1/8 limit.
                        for (i, x) in v.iter_mut().enumerate() {
                            match i % 10 {
                                0 => {}
                                1..=5 => *x = Scalar::ZERO,
                                _ => *x = Scalar::ONE,
                            }
                        }
                    }
                    if split {
                        MsmScalars::Split(SplitScalars::from_values(v.iter(), k, m).expect("witness-like: splits"))
                    } else {
                        dense(&v)
                    }
                };
                let host = HostPartition {
                    abc: Evals::heap(scalars(n, 1), scalars(n, 2), scalars(n, 3)),
                    domain_log2: lg,
                    l_scalars: msm_scalars(nl, 4),
                    a_scalars: msm_scalars(na, 5),
                    b_scalars: msm_scalars(nb, 6),
                };
                // The reference: the CPU backend on every scalar; its own split path
                // must agree with it too.
                let full = |s: &MsmScalars| MsmScalars::Dense(s.dense().into_owned());
                let dense_host = HostPartition {
                    l_scalars: full(&host.l_scalars),
                    a_scalars: full(&host.a_scalars),
                    b_scalars: full(&host.b_scalars),
                    ..host.clone()
                };
                let want = CpuBackend.execute(CpuBackend.upload(dense_host).unwrap(), &srs, true).unwrap();
                let cpu = CpuBackend.execute(CpuBackend.upload(host.clone()).unwrap(), &srs, true).unwrap();
                assert_eq!(cpu.split, split, "CPU backend split path");
                for (x, y, what) in [(cpu.l, want.l, "L"), (cpu.a, want.a, "A"), (cpu.b_g1, want.b_g1, "B_G1")] {
                    assert_eq!(x.to_affine(), y.to_affine(), "CPU {what} lg {lg} n {n} split {split}");
                }
                assert_eq!(cpu.b_g2.unwrap().to_affine(), want.b_g2.unwrap().to_affine(), "CPU B_G2 lg {lg} n {n}");
                let variants = [
                    ("resident", &gpu),
                    ("streaming", &streaming),
                    ("pageable", &pageable),
                    ("small pool", &small_pool),
                ];
                for (name, be) in variants {
                    let got = be.execute(be.upload(host.clone()).unwrap(), &srs, true).unwrap();
                    let ctx = format!(
                        "lg {lg} n {n} {name}{}{}",
                        if witness { " witness" } else { "" },
                        if split { " split" } else { "" }
                    );
                    assert_eq!(got.h.to_affine(), want.h.to_affine(), "H {ctx}");
                    assert_eq!(got.l.to_affine(), want.l.to_affine(), "L {ctx}");
                    assert_eq!(got.a.to_affine(), want.a.to_affine(), "A {ctx}");
                    assert_eq!(got.b_g1.to_affine(), want.b_g1.to_affine(), "B_G1 {ctx}");
                    assert_eq!(got.b_g2.unwrap().to_affine(), want.b_g2.unwrap().to_affine(), "B_G2 {ctx}");
                    // Split scalars run split on the device when its points are resident;
                    // streamed, they are rebuilt in full.
                    assert_eq!(got.split, split && name != "streaming", "device split used: {ctx}");
                    eprintln!("ok {ctx}: {:?}", got.timings);
                }
                // Staged ahead into a device buffer (StagePcie's `stage`), then
                // executed from it; streaming, the staged split lists go unused.
                for (name, be) in [("staged resident", &gpu), ("staged streaming", &streaming)] {
                    let mut up = be.upload(host.clone()).unwrap();
                    assert!(be.stage(&mut up, true).staged, "{name}: a buffer was free");
                    let got = be.execute(up, &srs, true).unwrap();
                    let ctx = format!("lg {lg} n {n} {name} witness {witness} split {split}");
                    assert_eq!(got.h.to_affine(), want.h.to_affine(), "H {ctx}");
                    assert_eq!(got.l.to_affine(), want.l.to_affine(), "L {ctx}");
                    assert_eq!(got.a.to_affine(), want.a.to_affine(), "A {ctx}");
                    assert_eq!(got.b_g1.to_affine(), want.b_g1.to_affine(), "B_G1 {ctx}");
                    assert_eq!(got.b_g2.unwrap().to_affine(), want.b_g2.unwrap().to_affine(), "B_G2 {ctx}");
                    assert_eq!(got.split, split && name == "staged resident", "device split used: {ctx}");
                    assert!(got.timings.iter().any(|(op, _)| *op == "h2d_staged"), "ran from the staged buffer: {ctx}");
                }
                // a, b, c in a buffer lent from the pool, as pre-compiled synthesis
                // writes them: uploaded without a copy, the same result.
                let mut buf = gpu.eval_alloc().expect("the pool lends").alloc(n).expect("room in the pool");
                for (dst, src) in buf.abc_mut().into_iter().zip(host.abc.abc()) {
                    dst.copy_from_slice(src);
                }
                let lent = HostPartition { abc: Evals::Lent(buf), ..host.clone() };
                let got = gpu.execute(gpu.upload(lent).unwrap(), &srs, true).unwrap();
                let ctx = format!("lg {lg} n {n} lent a/b/c witness {witness} split {split}");
                assert_eq!(got.h.to_affine(), want.h.to_affine(), "H {ctx}");
                assert_eq!(got.l.to_affine(), want.l.to_affine(), "L {ctx}");
                assert_eq!(got.b_g2.unwrap().to_affine(), want.b_g2.unwrap().to_affine(), "B_G2 {ctx}");
            }
        }
    }
    let (big, small) = (gpu.pinned_stats().unwrap(), small_pool.pinned_stats().unwrap());
    eprintln!("pinned pools: default {big:?}, small {small:?}");
    assert_eq!(big.fallbacks, 0, "the default pool holds every test partition");
    assert_eq!(big.in_use, 0, "every uploaded partition returned its buffer");
    assert!(big.lent > 0, "a/b/c buffers were lent");
    assert!(small.allocated <= 64 << 20);
    assert_eq!(pageable.pinned_stats().unwrap().allocated, 0);
}

/// Several partitions in flight at once, more than the device has staging buffers:
/// the first two are staged, the rest go on unstaged; run in reverse order, the
/// unstaged ones take a staged partition's buffer (that one uploads again when it
/// runs), and one staged partition is dropped without running. Every result equals
/// the CPU backend's, so no partition ever ran on another one's inputs.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn staged_partitions_in_flight_match_the_cpu() {
    let Some(gpu) = device0() else { return };
    let lg = 12;
    let m = 1usize << lg;
    let srs = fake_srs(m, m / 2, m / 3, m / 4);
    let hosts: Vec<HostPartition> = (0..6u64)
        .map(|i| HostPartition {
            abc: Evals::heap(scalars(m, 100 * i + 1), scalars(m, 100 * i + 2), scalars(m, 100 * i + 3)),
            domain_log2: lg,
            l_scalars: dense(&scalars(m / 2, 100 * i + 4)),
            a_scalars: dense(&scalars(m / 3, 100 * i + 5)),
            b_scalars: dense(&scalars(m / 4, 100 * i + 6)),
        })
        .collect();
    let want: Vec<_> =
        hosts.iter().map(|h| CpuBackend.execute(CpuBackend.upload(h.clone()).unwrap(), &srs, true).unwrap()).collect();
    // Warm: the workspace, the resident parameters and one buffer exist.
    gpu.execute(gpu.upload(hosts[5].clone()).unwrap(), &srs, true).unwrap();
    let mut ups: Vec<_> = hosts[..5]
        .iter()
        .map(|h| {
            let mut u = gpu.upload(h.clone()).unwrap();
            gpu.stage(&mut u, false);
            Some(u)
        })
        .collect();
    let staged: Vec<bool> = ups.iter().map(|u| u.as_ref().unwrap().is_staged()).collect();
    assert_eq!(staged, [true, true, false, false, false], "two buffers per device");
    let check = |i: usize, got: &cuzk_gpu::MsmResults| {
        assert_eq!(got.h.to_affine(), want[i].h.to_affine(), "H of partition {i}");
        assert_eq!(got.l.to_affine(), want[i].l.to_affine(), "L of partition {i}");
        assert_eq!(got.a.to_affine(), want[i].a.to_affine(), "A of partition {i}");
        assert_eq!(got.b_g1.to_affine(), want[i].b_g1.to_affine(), "B_G1 of partition {i}");
        assert_eq!(got.b_g2.unwrap().to_affine(), want[i].b_g2.unwrap().to_affine(), "B_G2 of partition {i}");
        got.timings.iter().any(|(op, _)| *op == "h2d_staged")
    };
    let run = |ups: &mut Vec<Option<cuzk_gpu::UploadedPartition>>, i: usize| {
        let got = gpu.execute(ups[i].take().unwrap(), &srs, true).unwrap();
        check(i, &got)
    };
    assert!(!run(&mut ups, 4), "unstaged: takes partition 1's buffer");
    assert!(!run(&mut ups, 3), "unstaged: the buffer partition 4 freed");
    drop(ups[0].take());
    assert!(!run(&mut ups, 1), "lost its buffer: uploaded again");
    assert!(!run(&mut ups, 2));
    // Staged again, then run from its buffer.
    let mut u = gpu.upload(hosts[0].clone()).unwrap();
    let st = gpu.stage(&mut u, true);
    assert!(st.staged, "{st:?}");
    assert!(st.waited.is_zero(), "buffers were free: {st:?}");
    assert!(check(0, &gpu.execute(u, &srs, true).unwrap()), "from the staged buffer");
    let s = gpu.device_stats()[0].clone();
    assert!(s.vram_reserved <= s.vram_budget, "{s:?}");
    assert_eq!(gpu.pinned_stats().unwrap().in_use, 0, "every partition returned its pinned buffer");
}

/// The CUDA backend on device 0. The tests that use it are ignored by default and
/// fail, naming the reason, when run without a CUDA build or a GPU.
fn device0() -> Option<CudaBackend> {
    if !COMPILED {
        panic!("built without CUDA (nvcc was not found at build time)");
    }
    // `CUZK_GPU_H_WINDOW_BITS`: H at that width (0: sppark's) instead of the default.
    let msm_h_window_bits = std::env::var("CUZK_GPU_H_WINDOW_BITS")
        .map_or(CudaOptions::default().msm_h_window_bits, |v| v.parse().unwrap());
    Some(
        CudaBackend::new(CudaOptions { devices: vec![0], msm_h_window_bits, ..Default::default() })
            .unwrap_or_else(|e| panic!("no usable GPU: {e}")),
    )
}

/// H's MSM at windows wider than sppark's (`msm_h_window_bits`, one window a
/// launch under a gate; here below its 2^26-point floor) gives the CPU's H, and
/// its larger temporaries are charged to the resident set.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn wide_h_windows_match_the_cpu() {
    if !COMPILED {
        panic!("built without CUDA (nvcc was not found at build time)");
    }
    let lg = 14;
    let m = 1usize << lg;
    let srs = fake_srs(m, m / 2, m / 3, m / 4);
    let host = random_partition(lg);
    let want = CpuBackend.execute(CpuBackend.upload(host.clone()).unwrap(), &srs, true).unwrap();
    let narrow = device0().unwrap();
    narrow.prefetch(&srs);
    let base = narrow.device_stats()[0].vram_reserved;
    drop(narrow);
    let wide =
        CudaOptions { devices: vec![0], msm_h_window_bits: 20, msm_h_window_min_points: 0, ..Default::default() };
    let gpu = CudaBackend::new(wide).unwrap();
    gpu.prefetch(&srs);
    let extra = cuzk_gpu::sizing::msm_h_window_extra_bytes(srs.h.len(), 20);
    assert!(extra > 0);
    assert_eq!(gpu.device_stats()[0].vram_reserved, base + extra, "the wider windows are charged");
    let got = gpu.execute(gpu.upload(host).unwrap(), &srs, true).unwrap();
    assert_eq!(got.h.to_affine(), want.h.to_affine(), "H at 20-bit windows");
    assert_eq!(got.l.to_affine(), want.l.to_affine(), "L");
}

/// A partition of domain 2^lg with random a, b, c and dense scalars for
/// `fake_srs(m, m / 2, m / 3, m / 4)`.
fn random_partition(lg: u32) -> HostPartition {
    let m = 1usize << lg;
    HostPartition {
        abc: Evals::heap(scalars(m, 1), scalars(m, 2), scalars(m, 3)),
        domain_log2: lg,
        l_scalars: dense(&scalars(m / 2, 4)),
        a_scalars: dense(&scalars(m / 3, 5)),
        b_scalars: dense(&scalars(m / 4, 6)),
    }
}

/// An out-of-memory failure frees the device's cached memory and retries once: one
/// failure is absorbed (same result), two fail the partition with a clear error, and
/// the device works afterwards. Counted in `device_stats`.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn out_of_memory_is_retried_once() {
    let Some(gpu) = device0() else { return };
    let lg = 12;
    let m = 1usize << lg;
    let srs = fake_srs(m, m / 2, m / 3, m / 4);
    let host = random_partition(lg);
    let want = CpuBackend.execute(CpuBackend.upload(host.clone()).unwrap(), &srs, true).unwrap();
    // Warm: workspace and resident parameters reserved from the VRAM budget.
    gpu.execute(gpu.upload(host.clone()).unwrap(), &srs, true).unwrap();
    let s = gpu.device_stats()[0].clone();
    assert!(s.vram_budget > 0 && s.vram_reserved > 0 && s.vram_reserved <= s.vram_budget, "{s:?}");
    assert_eq!(s.resident_sets, 1, "{s:?}");

    gpu.inject_oom(1);
    let got = gpu.execute(gpu.upload(host.clone()).unwrap(), &srs, true).unwrap();
    assert_eq!(got.h.to_affine(), want.h.to_affine(), "H after a retried OOM");
    assert_eq!(got.b_g2.unwrap().to_affine(), want.b_g2.unwrap().to_affine(), "B_G2 after a retried OOM");
    let s = gpu.device_stats()[0].clone();
    assert_eq!((s.cuda_errors, s.oom_errors, s.oom_retries, s.oom_recovered), (1, 1, 1, 1), "{s:?}");
    assert_eq!(s.resident_sets, 0, "the retry freed the resident parameters and streamed them");

    gpu.inject_oom(2);
    let e = gpu.execute(gpu.upload(host.clone()).unwrap(), &srs, true).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, GpuError::Cuda { out_of_memory: true, .. }), "{msg}");
    assert!(msg.contains("out of memory") && msg.contains("retrying once"), "{msg}");
    let s = gpu.device_stats()[0].clone();
    assert_eq!((s.cuda_errors, s.oom_errors, s.oom_retries, s.oom_recovered), (3, 3, 2, 1), "{s:?}");

    // The device still works, and parameters become resident again.
    let got = gpu.execute(gpu.upload(host).unwrap(), &srs, true).unwrap();
    assert_eq!(got.l.to_affine(), want.l.to_affine(), "L after a failed partition");
    assert_eq!(gpu.device_stats()[0].resident_sets, 1);
}

/// Split lists that index past their points are refused with a named error, on the
/// CPU backend and (when there is a GPU) before anything reaches the device.
#[test]
fn invalid_split_lists_are_refused() {
    let m = 1usize << 8;
    let srs = fake_srs(m, 10, 10, 10);
    let split = |ones: Vec<u32>| MsmScalars::Split(SplitScalars { len: 10, ones, ..Default::default() });
    let host = HostPartition {
        abc: Evals::heap(scalars(m, 1), scalars(m, 2), scalars(m, 3)),
        domain_log2: 8,
        l_scalars: split(vec![1, 10]),
        a_scalars: split(vec![2]),
        b_scalars: split(vec![3]),
    };
    let mut backends: Vec<Box<dyn Backend>> = vec![Box::new(CpuBackend)];
    if let Ok(gpu) = CudaBackend::new(CudaOptions::default()) {
        backends.push(Box::new(gpu));
    }
    for be in backends {
        let err = be.execute(be.upload(host.clone()).unwrap(), &srs, true).unwrap_err();
        assert!(
            matches!(&err, GpuError::Shape { .. }) && err.to_string().contains("L scalars"),
            "{}: {err}",
            be.name()
        );
    }
}

/// A prefetch makes a parameter set resident before its first partition, which then
/// uses it (same results as the CPU backend); a second set joins it (room permitting)
/// instead of replacing it, and prefetching a resident set again changes nothing.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn prefetch_makes_parameters_resident() {
    let Some(gpu) = device0() else { return };
    let lg = 10;
    let m = 1usize << lg;
    let (srs1, srs2) = (fake_srs(m, m / 2, m / 3, m / 4), fake_srs(m, m / 2, m / 3, m / 4));
    gpu.prefetch(&srs1);
    let s = gpu.device_stats()[0].clone();
    assert_eq!(s.resident_sets, 1, "{s:?}");
    let before = s.vram_reserved;
    assert!(before > 0, "{s:?}");

    let host = random_partition(lg);
    let want = CpuBackend.execute(CpuBackend.upload(host.clone()).unwrap(), &srs1, true).unwrap();
    let got = gpu.execute(gpu.upload(host).unwrap(), &srs1, true).unwrap();
    assert_eq!(got.h.to_affine(), want.h.to_affine(), "H");
    assert_eq!(got.l.to_affine(), want.l.to_affine(), "L");
    assert_eq!(got.b_g2.unwrap().to_affine(), want.b_g2.unwrap().to_affine(), "B_G2");
    let s = gpu.device_stats()[0].clone();
    assert_eq!(s.resident_sets, 1, "the partition used the prefetched set: {s:?}");
    assert!(s.vram_reserved > before, "the workspace came on top: {s:?}");

    gpu.prefetch(&srs2);
    assert_eq!(gpu.device_stats()[0].resident_sets, 2);
    gpu.prefetch(&srs1);
    assert_eq!(gpu.device_stats()[0].resident_sets, 2, "already resident");
}

/// A deadline partition that arrives while bulk partitions hold the device runs
/// between their kernels, through the device's lane (`gate.rs`): it does not wait
/// for the device, and every result, bulk and deadline, is the CPU's.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn deadline_partitions_run_beside_bulk_partitions() {
    use std::sync::atomic::AtomicBool;
    let Some(gpu) = device0() else { return };
    let (lb, lu) = (20u32, 10u32);
    let (mb, mu) = (1usize << lb, 1usize << lu);
    let bulk_srs = fake_srs(mb, mb / 2, mb / 3, mb / 4);
    let urgent_srs = fake_srs(mu, mu / 2, mu / 3, mu / 4);
    let (bulk, urgent) = (random_partition(lb), random_partition(lu));
    let want_b = CpuBackend.execute(CpuBackend.upload(bulk.clone()).unwrap(), &bulk_srs, true).unwrap();
    let want_u = CpuBackend.execute(CpuBackend.upload(urgent.clone()).unwrap(), &urgent_srs, true).unwrap();
    let same = |got: &cuzk_gpu::MsmResults, want: &cuzk_gpu::MsmResults, what: &str| {
        assert_eq!(got.h.to_affine(), want.h.to_affine(), "H of the {what} partition");
        assert_eq!(got.l.to_affine(), want.l.to_affine(), "L of the {what} partition");
        assert_eq!(got.a.to_affine(), want.a.to_affine(), "A of the {what} partition");
        assert_eq!(got.b_g1.to_affine(), want.b_g1.to_affine(), "B_G1 of the {what} partition");
        assert_eq!(got.b_g2.unwrap().to_affine(), want.b_g2.unwrap().to_affine(), "B_G2 of the {what} partition");
    };
    // Warm: the bulk set resident and its workspace allocated.
    same(&gpu.execute(gpu.upload(bulk.clone()).unwrap(), &bulk_srs, true).unwrap(), &want_b, "bulk");
    let before = gpu.device_stats()[0].deadline;
    let done = AtomicBool::new(false);
    // Uploaded here: a partition moves to the bulk thread, it is not shared.
    let bulks: Vec<_> = (0..8).map(|_| gpu.upload(bulk.clone()).unwrap()).collect();
    let deadline_runs = std::thread::scope(|s| {
        let (gpu, bulk_srs, want_b, done) = (&gpu, &bulk_srs, &want_b, &done);
        s.spawn(move || {
            for u in bulks {
                same(&gpu.execute(u, bulk_srs, true).unwrap(), want_b, "bulk");
            }
            done.store(true, Ordering::Release);
        });
        let mut runs = 0;
        while !done.load(Ordering::Acquire) {
            let mut u = gpu.upload(urgent.clone()).unwrap();
            u.set_urgent(true);
            same(&gpu.execute(u, &urgent_srs, true).unwrap(), &want_u, "deadline");
            runs += 1;
        }
        runs
    });
    let s = gpu.device_stats()[0].clone();
    let (turns, yields) = (s.deadline.turns - before.turns, s.deadline.yields - before.yields);
    eprintln!(
        "{deadline_runs} deadline partitions beside 8 bulk ones: {turns} through the lane, {yields} bulk stops; {:?}",
        s.deadline
    );
    assert!(turns > 0, "no deadline partition ran beside the bulk work: {s:?}");
    assert!(s.vram_reserved <= s.vram_budget, "{s:?}");
    assert_eq!(s.cuda_errors, 0, "{s:?}");
    assert_eq!(gpu.pinned_stats().unwrap().in_use, 0, "every partition returned its pinned buffer");
}

/// The CUDA backend on every device. Ignored-by-default tests only (as `device0`).
fn all_devices() -> CudaBackend {
    if !COMPILED {
        panic!("built without CUDA (nvcc was not found at build time)");
    }
    CudaBackend::new(CudaOptions::default()).unwrap_or_else(|e| panic!("no usable GPU: {e}"))
}

/// A partition with `fault` injected into its first attempt runs again elsewhere and
/// gives the CPU backend's results; the device it hit is retired (shown in
/// `device_stats`), takes no later partition, and later partitions succeed: on the
/// other devices, or on the CPU when it was the only one. Returns the backend and
/// the retired device.
fn sticky_fault_is_survived(fault: InjectedFault) -> (CudaBackend, usize) {
    let gpu = all_devices();
    let n = gpu.devices().len();
    let lg = 12;
    let m = 1usize << lg;
    let srs = fake_srs(m, m / 2, m / 3, m / 4);
    let host = random_partition(lg);
    let want = CpuBackend.execute(CpuBackend.upload(host.clone()).unwrap(), &srs, true).unwrap();
    let same = |got: &cuzk_gpu::MsmResults, what: &str| {
        assert_eq!(got.h.to_affine(), want.h.to_affine(), "H {what}");
        assert_eq!(got.l.to_affine(), want.l.to_affine(), "L {what}");
        assert_eq!(got.a.to_affine(), want.a.to_affine(), "A {what}");
        assert_eq!(got.b_g1.to_affine(), want.b_g1.to_affine(), "B_G1 {what}");
        assert_eq!(got.b_g2.unwrap().to_affine(), want.b_g2.unwrap().to_affine(), "B_G2 {what}");
    };
    // What the backend charges beyond partitions' reservations (a CPU failover's
    // buffers): (bytes charged, guards still held).
    let charged = Arc::new((AtomicU64::new(0), AtomicI64::new(0)));
    struct Held(Arc<(AtomicU64, AtomicI64)>);
    impl Drop for Held {
        fn drop(&mut self) {
            self.0 .1.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let c = charged.clone();
    gpu.set_host_charge(Arc::new(move |bytes| {
        c.0.fetch_add(bytes, Ordering::SeqCst);
        c.1.fetch_add(1, Ordering::SeqCst);
        Box::new(Held(c.clone()))
    }));
    // Warm: a workspace and resident parameters on the device that ran it.
    same(&gpu.execute(gpu.upload(host.clone()).unwrap(), &srs, true).unwrap(), "before the fault");
    assert!(gpu.device_stats().iter().all(|d| d.health == DeviceHealth::Healthy));

    let got = with_injected_fault(fault, || gpu.execute(gpu.upload(host.clone()).unwrap(), &srs, true))
        .unwrap_or_else(|e| panic!("the partition was not retried: {e}"));
    same(&got, "of the partition that hit the sticky error");
    // On one device the partition ran on the CPU: its host NTT buffers (which the
    // CUDA backend's reservations leave out) were charged, and returned after.
    let cpu_bytes = 32 * (11 * m as u64 / 2 + (srs.l.len() + srs.a.len() + srs.b_g1.len()) as u64);
    let want_charged = if n == 1 { cpu_bytes } else { 0 };
    assert_eq!(charged.0.load(Ordering::SeqCst), want_charged, "bytes charged by the failover");
    assert_eq!(charged.1.load(Ordering::SeqCst), 0, "the charge outlived the partition");
    let stats = gpu.device_stats();
    eprintln!("{fault:?}: {stats:?}");
    let retired: Vec<_> = stats.iter().filter(|d| d.health == DeviceHealth::Retired).collect();
    assert_eq!(retired.len(), 1, "{stats:?}");
    let r = retired[0].clone();
    assert_eq!((r.partitions_moved, r.cuda_errors, r.oom_errors), (1, 1, 0), "{r:?}");
    let reason = r.retired_reason.clone().unwrap_or_default();
    assert!(reason.contains("illegal memory access"), "{reason}");
    assert_eq!((r.resident_sets, r.vram_reserved), (0, 0), "cached memory dropped: {r:?}");
    assert_eq!(no_device_left(&stats), n == 1, "{stats:?}");

    // Later partitions succeed and never reach the retired device.
    for k in 0..3 {
        same(&gpu.execute(gpu.upload(host.clone()).unwrap(), &srs, true).unwrap(), &format!("after the fault ({k})"));
    }
    gpu.prefetch(&fake_srs(m, m / 2, m / 3, m / 4));
    let after = gpu.device_stats()[r.device].clone();
    assert_eq!(
        (after.health, after.cuda_errors, after.partitions_moved, after.resident_sets),
        (DeviceHealth::Retired, 1, 1, 0),
        "{after:?}"
    );
    if n > 1 {
        assert!(gpu.device_stats().iter().any(|d| d.health == DeviceHealth::Healthy && d.resident_sets > 0));
    }
    (gpu, r.device)
}

/// A (simulated) sticky error mid-stream: see `sticky_fault_is_survived`.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn sticky_error_retires_the_device_and_retries_the_partition() {
    sticky_fault_is_survived(InjectedFault::Sticky);
}

/// The same with a real illegal address (a kernel stores to an invalid address), in
/// a child process of its own: the poisoned context stays so for the rest of the
/// process, which would fail other tests. The child also drops the backend, which
/// frees (or, where the context is poisoned, leaks) the retired device's memory
/// without ending the process.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn real_illegal_address_retires_the_device() {
    const CHILD: &str = "CUZK_TEST_ILLEGAL_ADDRESS_CHILD";
    const PASSED: &str = "illegal-address child: ok";
    if std::env::var_os(CHILD).is_some() {
        let (gpu, dev) = sticky_fault_is_survived(InjectedFault::IllegalAddress);
        drop(gpu);
        println!("{PASSED} (device {dev} retired)");
        return;
    }
    // This test's name in this binary (`kernels::…` when tests/gpu.rs includes it).
    let f = "real_illegal_address_retires_the_device";
    let name = module_path!().split_once("::").map_or(f.to_string(), |(_, m)| format!("{m}::{f}"));
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--include-ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("--- child ---\n{text}--- child exited: {} ---", out.status);
    assert!(text.contains(PASSED) && text.contains("1 passed"), "the child did not pass (exit {})", out.status);
    // After the test passed, only the CUDA runtime's teardown at exit is left (the
    // daemon skips it: `_exit`).
    if !out.status.success() {
        eprintln!("warning: the child passed, then exited with {}", out.status);
    }
}

/// At full size (a 32GiB PoRep partition is 2^27) the CPU MSMs would take minutes,
/// but over timing parameters every point's discrete logarithm is known, so each MSM
/// the device computes must equal `(Σ scalar · dlog) · G`, summed in field arithmetic
/// on the CPU (`cuzk_srs::timing_msm_dlog`); H's coefficients come from the CPU NTT
/// (`compute_h`), so the device's NTTs are checked through the H MSM. Domains from
/// `CUZK_GPU_AT_SIZE_LOG2` (default "20"; the GPU host runs "26,27": ~100 GB of host
/// memory at 2^27). PoRep-like shape (A nearly dense, B a quarter); scalars
/// witness-like (mostly 0 and 1, as PoRep's) split by value and dense, and random.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn at_size_msms_and_h_match_the_cpu_by_discrete_logs() {
    use cuzk_core::CircuitShape;
    use cuzk_srs::{generate_timing, timing_msm_dlog, TimingVector};
    let Some(gpu) = device0() else { return };
    let sizes = std::env::var("CUZK_GPU_AT_SIZE_LOG2").unwrap_or_else(|_| "20".into());
    let witness = |mut v: Vec<Scalar>| {
        for (i, x) in v.iter_mut().enumerate() {
            match i % 10 {
                0 => {}
                1..=5 => *x = Scalar::ZERO,
                _ => *x = Scalar::ONE,
            }
        }
        v
    };
    for lg in sizes.split(',').map(|s| s.trim().parse::<u32>().unwrap()) {
        let t = std::time::Instant::now();
        let m = 1usize << lg;
        let n = m - 9_000;
        let shape = CircuitShape { constraints: n, inputs: 328, aux: n - 328 - 100, a_query: n - 500, b_query: n / 4 };
        let seed = 7 + u64::from(lg);
        let srs = generate_timing(&shape, seed);
        let gen_s = t.elapsed().as_secs_f64();
        let abc = [scalars(n, 1), scalars(n, 2), scalars(n, 3)];
        let t = std::time::Instant::now();
        let [ea, eb, ec] = abc.clone();
        let h = cuzk_gpu::cpu::compute_h(ea, eb, ec, lg).unwrap();
        let g1 = |v, s: &[Scalar]| (G1Projective::generator() * timing_msm_dlog(seed, v, s)).to_affine();
        let want_h = g1(TimingVector::H, &h);
        drop(h);
        eprintln!("2^{lg} (n {n}): points {gen_s:.1} s, CPU H {:.1} s", t.elapsed().as_secs_f64());
        for (name, random, split) in
            [("witness-like split", false, true), ("witness-like dense", false, false), ("random", true, false)]
        {
            let v = |k, seed| if random { scalars(k, seed) } else { witness(scalars(k, seed)) };
            let (l, a, b) = (v(shape.aux, 4), v(shape.a_query, 5), v(shape.b_query, 6));
            let want = [g1(TimingVector::L, &l), g1(TimingVector::A, &a), g1(TimingVector::BG1, &b)];
            let want_b_g2 = (G2Projective::generator() * timing_msm_dlog(seed, TimingVector::BG2, &b)).to_affine();
            let msm = |s: &[Scalar]| {
                if split {
                    MsmScalars::Split(SplitScalars::from_values(s.iter(), s.len(), m).expect("witness-like: splits"))
                } else {
                    dense(s)
                }
            };
            let host = HostPartition {
                abc: Evals::heap(abc[0].clone(), abc[1].clone(), abc[2].clone()),
                domain_log2: lg,
                l_scalars: msm(&l),
                a_scalars: msm(&a),
                b_scalars: msm(&b),
            };
            drop((l, a, b));
            let t = std::time::Instant::now();
            let got = gpu.execute(gpu.upload(host).unwrap(), &srs, true).unwrap();
            let gpu_s = t.elapsed().as_secs_f64();
            let ctx = format!("2^{lg} {name}");
            assert_eq!(got.h.to_affine(), want_h, "H {ctx}");
            assert_eq!(got.l.to_affine(), want[0], "L {ctx}");
            assert_eq!(got.a.to_affine(), want[1], "A {ctx}");
            assert_eq!(got.b_g1.to_affine(), want[2], "B_G1 {ctx}");
            assert_eq!(got.b_g2.unwrap().to_affine(), want_b_g2, "B_G2 {ctx}");
            assert_eq!(got.split, split, "device split used: {ctx}");
            // The first execution includes making the points resident.
            eprintln!("ok {ctx}: device {gpu_s:.1} s {:?}", got.timings);
        }
    }
}

/// A PoRep-shaped recorded R1CS at a given size, for the at-size check of a, b, c
/// evaluated on the device: the input rows first (A = that input, as bellperson
/// lays them out), then rows of one to three A entries and, one row in four, one B
/// entry; coefficients ONE, −ONE, TWO (the table's fixed first three) and random
/// ones. Deterministic from the row index, so the host builds it in seconds.
#[derive(Debug)]
struct AtSizeR1cs {
    inputs: usize,
    aux: usize,
    a_end: Vec<u32>,
    a: Vec<cuzk_core::R1csEntry>,
    b_end: Vec<u32>,
    b: Vec<cuzk_core::R1csEntry>,
    coeffs: Vec<Scalar>,
}

impl AtSizeR1cs {
    fn new(rows: usize, inputs: usize, aux: usize) -> Self {
        use cuzk_core::R1csEntry;
        let mix = |mut z: u64| {
            // splitmix64: a cheap, well-spread hash of the row index.
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let ncoeffs = 64u64;
        let coeff = |h: u64| match h % 8 {
            0..=3 => 0,
            4 => 1,
            5 => 2,
            _ => 3 + (h >> 3) as u32 % (ncoeffs as u32 - 3),
        };
        let aux_var = |h: u64| ((h % aux as u64) as u32) << 1 | 1;
        let (mut a_end, mut a, mut b_end, mut b) = (
            Vec::with_capacity(rows),
            Vec::with_capacity(rows * 2 + rows / 4),
            Vec::with_capacity(rows),
            Vec::with_capacity(rows / 4 + inputs),
        );
        for i in 0..rows {
            let h = mix(i as u64);
            if i < inputs {
                a.push(R1csEntry { var: (i as u32) << 1, coeff: 0 });
            } else {
                for k in 0..1 + h % 3 {
                    let hk = mix(h ^ k);
                    a.push(R1csEntry { var: aux_var(hk >> 8), coeff: coeff(hk) });
                }
                if h >> 60 == 0 || (h >> 2) % 4 == 0 {
                    let hb = mix(!h);
                    // Now and then the constant ONE (input 0), as circuits use it.
                    let var = if hb % 16 == 0 { 0 } else { aux_var(hb >> 8) };
                    b.push(R1csEntry { var, coeff: coeff(hb >> 4) });
                }
            }
            a_end.push(a.len() as u32);
            b_end.push(b.len() as u32);
        }
        let mut coeffs = vec![Scalar::ONE, -Scalar::ONE, Scalar::from(2u64)];
        coeffs.extend(scalars(ncoeffs as usize - 3, 77));
        AtSizeR1cs { inputs, aux, a_end, a, b_end, b, coeffs }
    }
}

impl cuzk_core::Recorded for AtSizeR1cs {
    fn rows(&self) -> usize {
        self.a_end.len()
    }
    fn view(&self) -> cuzk_core::R1csView<'_> {
        use cuzk_core::CsrView;
        cuzk_core::R1csView {
            inputs: self.inputs,
            aux: self.aux,
            a: CsrView { row_end: &self.a_end, entries: &self.a },
            b: CsrView { row_end: &self.b_end, entries: &self.b },
            coeffs: &self.coeffs,
        }
    }
    fn evaluate(&self, input: &[Scalar], aux: &[Scalar]) -> [Vec<Scalar>; 3] {
        let row = |end: &[u32], ent: &[cuzk_core::R1csEntry], i: usize| {
            let start = if i == 0 { 0 } else { end[i - 1] as usize };
            ent[start..end[i] as usize].iter().fold(Scalar::ZERO, |acc, e| {
                let w = if e.var & 1 == 0 { input[(e.var >> 1) as usize] } else { aux[(e.var >> 1) as usize] };
                acc + self.coeffs[e.coeff as usize] * w
            })
        };
        let a: Vec<Scalar> = (0..self.rows()).into_par_iter().map(|i| row(&self.a_end, &self.a, i)).collect();
        let b: Vec<Scalar> = (0..self.rows()).into_par_iter().map(|i| row(&self.b_end, &self.b, i)).collect();
        let c = a.par_iter().zip(&b).map(|(x, y)| x * y).collect();
        [a, b, c]
    }
}

/// A deferred partition (a, b, c left to the backend, only the witness given) of
/// an `AtSizeR1cs` of domain 2^lg, proved by `be` against timing parameters: its H,
/// whose coefficients come from the backend's a, b, c through its NTTs, must equal
/// the discrete-logarithm sum of the H the CPU computes from the host's evaluation
/// of the same matrices; L, A, B_G1 are checked the same way. `on_device`: the
/// CUDA backend must have evaluated a, b, c on the device, with the device split.
fn check_deferred<B: Backend>(be: &B, lg: u32, on_device: bool) {
    use cuzk_core::{CircuitShape, Deferred, Recorded};
    use cuzk_srs::{generate_timing, timing_msm_dlog, TimingVector};
    let t = std::time::Instant::now();
    let m = 1usize << lg;
    let n = m - (m / 16).min(9_000);
    let inputs = 328.min(n / 8);
    let aux = n - inputs - 100;
    let shape = CircuitShape { constraints: n, inputs, aux, a_query: n - (n / 8).min(500), b_query: n / 4 };
    let seed = 31 + u64::from(lg);
    let srs = generate_timing(&shape, seed);
    let rec = Arc::new(AtSizeR1cs::new(n, inputs, aux));
    // Witness-like values (most 0 or 1, PoRep's): a, b, c are evaluated on the
    // device only when all three MSMs' scalars are split there.
    let witness_like = |k, seed| {
        let mut v = scalars(k, seed);
        v.par_iter_mut().enumerate().for_each(|(i, x)| match i % 10 {
            0 => {}
            1..=5 => *x = Scalar::ZERO,
            _ => *x = Scalar::ONE,
        });
        v
    };
    let split = |v: &[Scalar]| MsmScalars::Split(SplitScalars::from_values(v.iter(), v.len(), m).expect("splits"));
    let w = witness_like(aux, 8);
    let mut input = scalars(inputs, 9);
    input[0] = Scalar::ONE;
    let gen_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let [ha, hb, hc] = rec.evaluate(&input, &w);
    assert_eq!(ha.len(), n);
    assert!(hb.iter().any(|x| !bool::from(x.is_zero())), "B has non-zero rows");
    let g1 = |v, s: &[Scalar]| (G1Projective::generator() * timing_msm_dlog(seed, v, s)).to_affine();
    let want_h = g1(TimingVector::H, &cuzk_gpu::cpu::compute_h(ha, hb, hc, lg).unwrap());
    let want_l = g1(TimingVector::L, &w);
    eprintln!(
        "2^{lg} (n {n}, A {} B {} entries): points and matrices {gen_s:.1} s, host a, b, c and H {:.1} s",
        rec.a.len(),
        rec.b.len(),
        t.elapsed().as_secs_f64()
    );
    let (a, b) = (witness_like(shape.a_query, 5), witness_like(shape.b_query, 6));
    let host = HostPartition {
        abc: Evals::Deferred(Deferred { rec: rec.clone(), input }),
        domain_log2: lg,
        l_scalars: split(&w),
        a_scalars: split(&a),
        b_scalars: split(&b),
    };
    drop(w);
    let t = std::time::Instant::now();
    let got = be.execute(be.upload(host).unwrap(), &srs, true).unwrap();
    let took = t.elapsed().as_secs_f64();
    if on_device {
        assert!(
            got.timings.iter().any(|(op, _)| *op == "abc_device"),
            "2^{lg}: a, b, c were not evaluated on the device: {:?}",
            got.timings
        );
        assert!(got.split, "2^{lg}: the device split was used");
    }
    assert_eq!(got.h.to_affine(), want_h, "H from the backend's a, b, c at 2^{lg}");
    assert_eq!(got.l.to_affine(), want_l, "L at 2^{lg}");
    assert_eq!(got.a.to_affine(), g1(TimingVector::A, &a), "A at 2^{lg}");
    assert_eq!(got.b_g1.to_affine(), g1(TimingVector::BG1, &b), "B_G1 at 2^{lg}");
    // On the device, the first execution includes making the points and the
    // matrices resident.
    eprintln!("ok 2^{lg} deferred a, b, c: {took:.1} s {:?}", got.timings);
}

/// The check above on the CPU backend (which evaluates a deferred partition's a, b,
/// c on the host from the same recording): the reference the device is held to,
/// and the test's own matrices and sums checked where there is no GPU.
#[test]
fn deferred_partition_on_the_cpu_matches_the_host_evaluation() {
    check_deferred(&CpuBackend, 12, false);
}

/// a, b, c evaluated on the device from a recording resident there equal the
/// host's at full size (`check_deferred`). Sizes from `CUZK_GPU_AT_SIZE_LOG2` as
/// above (the GPU host runs "26,27").
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a GPU host (scripts/gpu-run.sh does)"]
fn at_size_abc_on_the_device_match_the_host() {
    let Some(gpu) = device0() else { return };
    let sizes = std::env::var("CUZK_GPU_AT_SIZE_LOG2").unwrap_or_else(|_| "20".into());
    for lg in sizes.split(',').map(|s| s.trim().parse::<u32>().unwrap()) {
        check_deferred(&gpu, lg, true);
    }
}

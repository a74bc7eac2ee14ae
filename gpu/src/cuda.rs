//! The CUDA backend: NTT and MSMs on the GPU through `cuda/cuzk.cu` (sppark).
//!
//! Built only when nvcc was found at build time (`cfg(cuzk_cuda)`); otherwise the
//! same API exists and [`CudaBackend::new`] says why there is no GPU backend, so
//! callers compile the same either way.
//!
//! Per device: one workspace (the gathered rest points of split MSMs and the bit
//! sums' partial sums, at the largest domain seen), up to `device_buffers` staging
//! buffers (one partition's a, b, c, bit-split lists and rest scalars each, with a
//! copy stream: `staging.rs`), and the parameter points of recently used parameter
//! sets, kept resident when they fit in
//! the device's VRAM budget (its free memory at start minus `vram_margin`) and in
//! what is free now, least recently used sets evicted first; otherwise streamed from
//! host memory for every MSM. A device runs one partition at a time; with several
//! devices, partitions go to whichever healthy one is free. An out-of-memory failure
//! frees the device's cached memory and retries the partition once with streamed
//! parameters. A sticky error (the device's context is unusable) retires the device
//! for the rest of the process and runs the partition again on another device, or on
//! the CPU when none is left (`health.rs`).
//!
//! The backend also owns the pool of pinned host buffers (`pinned.rs`) that `upload`
//! copies partitions into and that synthesis borrows a/b/c buffers from; at start it
//! warms every device up on a background thread, and `prefetch` makes a newly loaded
//! parameter set resident on each idle device where it fits without evicting anything.

use crate::GpuError;

/// What the backend found on one device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Index among usable devices (what `devices` in config refers to).
    pub index: usize,
    pub cuda_id: i32,
    pub name: String,
    pub sm_count: i32,
    pub compute_capability: (i32, i32),
    pub total_mem: u64,
    pub free_mem: u64,
}

pub use crate::sizing::{device_resident_bytes, device_staging_bytes, device_workspace_bytes};

/// Options of the CUDA backend.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Device indices to use; empty = all.
    pub devices: Vec<usize>,
    /// Keep parameter points on the device when they fit.
    pub srs_resident: bool,
    /// Device memory left free for MSM temporaries and other processes.
    pub vram_margin: u64,
    /// Bound of the pool of pinned host buffers partitions are uploaded from; 0 =
    /// upload from pageable memory.
    pub pinned_memory: u64,
    /// Staging buffers per device (at least 1): 2 uploads the next partition while
    /// one computes, when the VRAM budget has room for the second.
    pub device_buffers: usize,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            devices: Vec::new(),
            srs_resident: true,
            vram_margin: 4 << 30,
            pinned_memory: 16 << 30,
            device_buffers: 2,
        }
    }
}

#[cfg(not(cuzk_cuda))]
mod imp {
    use super::*;
    use crate::{Backend, HostPartition, MsmResults, UploadedPartition};
    use cuzk_srs::ProvingKey;

    /// Stand-in when built without nvcc: construction fails with the reason.
    pub struct CudaBackend {
        _never: std::convert::Infallible,
    }

    impl CudaBackend {
        /// # Errors
        /// Always: this build has no CUDA code.
        pub fn new(_: CudaOptions) -> Result<Self, GpuError> {
            Err(GpuError::Unavailable(
                "this build has no CUDA backend (nvcc was not found when cuzk-gpu was built; see docs/gpu.md)".into(),
            ))
        }

        /// Devices in use.
        pub fn devices(&self) -> Vec<DeviceInfo> {
            match self._never {}
        }

        /// Test hook: the next `n` executions fail as out of memory.
        pub fn inject_oom(&self, _n: u32) {
            match self._never {}
        }
    }

    impl Backend for CudaBackend {
        fn name(&self) -> &'static str {
            "cuda"
        }
        fn upload(&self, _: HostPartition) -> Result<UploadedPartition, GpuError> {
            match self._never {}
        }
        fn execute(&self, _: UploadedPartition, _: &ProvingKey, _: bool) -> Result<MsmResults, GpuError> {
            match self._never {}
        }
    }

    /// Whether this build has CUDA code.
    pub const COMPILED: bool = false;

    /// A staging buffer held for an uploaded partition (never made without CUDA).
    pub struct Lease(std::convert::Infallible);

    impl std::fmt::Debug for Lease {
        fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self.0 {}
        }
    }
}

#[cfg(cuzk_cuda)]
mod imp {
    use std::{
        sync::{
            atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering},
            Arc, Mutex, Weak,
        },
        time::{Duration, Instant},
    };

    use blstrs::{G1Affine, Scalar};
    use cuzk_srs::ProvingKey;
    use ff::{Field, PrimeField};
    use tracing::{error, info, warn};

    use super::*;
    use crate::{
        cpu::{check_counts, check_split, CpuBackend},
        ffi::{self, cuda},
        health::{failover, take_injected_fault, Devices},
        pinned::{PinnedEvalAlloc, PinnedEvals, PinnedPartition, PinnedPool, PinnedStats},
        staging::Staging,
        Backend, DeviceStats, ErrorClass, Evals, HostPartition, InjectedFault, MsmResults, MsmScalars, ScalarBytes,
        SplitScalars, Staged, UploadedPartition,
    };

    /// Whether this build has CUDA code.
    pub const COMPILED: bool = true;

    /// A partition's staging buffer ([`Backend::stage`]).
    pub type Lease = crate::staging::Lease<cuda::Stage>;

    struct Resident {
        key: Weak<Vec<G1Affine>>,
        srs: cuda::ResidentSrs,
        bytes: u64,
        last_used: Instant,
    }

    #[derive(Default)]
    struct DeviceState {
        ws: Option<cuda::Workspace>,
        resident: Vec<Resident>,
    }

    impl DeviceState {
        /// Device bytes held here: the workspace and the resident sets (the staging
        /// buffers are counted by `Staging`).
        fn reserved(&self) -> u64 {
            self.ws.as_ref().map_or(0, |w| ws_bytes(w.lg)) + self.resident.iter().map(|r| r.bytes).sum::<u64>()
        }
    }

    /// The workspace of a 2^lg domain without its staging buffer.
    fn ws_bytes(lg: u32) -> u64 {
        super::device_workspace_bytes(lg) - super::device_staging_bytes(lg)
    }

    #[derive(Default)]
    struct Counters {
        errors: AtomicU64,
        oom: AtomicU64,
        retries: AtomicU64,
        recovered: AtomicU64,
        /// Partitions moved elsewhere after a sticky error here.
        moved: AtomicU64,
        /// Mirror of `DeviceState::reserved`, readable without the device lock.
        reserved: AtomicU64,
        resident_sets: AtomicUsize,
    }

    /// One device: the VRAM budget every device buffer is reserved from, and
    /// counters. Its state (one partition at a time) and health are in
    /// `CudaBackend::slots`, at the same index.
    struct Device {
        info: DeviceInfo,
        budget: u64,
        counters: Counters,
    }

    impl Device {
        fn publish(&self, st: &DeviceState) {
            self.counters.reserved.store(st.reserved(), Ordering::Relaxed);
            self.counters.resident_sets.store(st.resident.len(), Ordering::Relaxed);
        }
    }

    /// The CUDA backend.
    pub struct CudaBackend {
        devices: Vec<Device>,
        slots: Devices<DeviceState>,
        opts: CudaOptions,
        pinned: Arc<PinnedPool>,
        /// Every device's staging buffers (`staging.rs`).
        staging: Arc<Staging<cuda::Stage>>,
        /// Test hook: executions still to fail as out of memory.
        inject_oom: AtomicU32,
        /// Charges the CPU failover's host buffers to the host budget
        /// ([`Backend::set_host_charge`]).
        host_charge: std::sync::OnceLock<crate::HostCharge>,
        /// One partition on the CPU at a time: what a failover adds beyond the
        /// partitions' reservations stays one partition's CPU-path buffers.
        cpu_failover: Mutex<()>,
        /// The start-up warm-up of every device, joined on drop (it must not
        /// outlive the backend's devices).
        warmup: Mutex<Option<std::thread::JoinHandle<()>>>,
    }

    impl Drop for CudaBackend {
        fn drop(&mut self) {
            if let Some(h) = self.warmup.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = h.join();
            }
        }
    }

    /// Pointers and counts of a, b, c and the three scalar vectors of an uploaded
    /// partition, and its domain. A split scalar vector has its lists in `split`
    /// and a null pointer here (its count is the number of points).
    struct Arrays<'a> {
        ptrs: [*const u8; 6],
        counts: [usize; 6],
        lg: u32,
        split: [Option<&'a SplitScalars>; 3],
        /// Whether B_G2 is asked for.
        with_b_g2: bool,
        /// Deadline work: runs from a staging buffer of its own (staging.rs).
        urgent: bool,
    }

    impl<'a> Arrays<'a> {
        /// An uploaded partition's arrays: from pinned memory where the array is
        /// there, else from the host arrays.
        fn of(p: &'a HostPartition, pin: Option<&'a PinnedPartition>, with_b_g2: bool) -> Self {
            let pinned = |i: usize| pin.and_then(|pp| pp.part(i));
            let mut arrays = Arrays {
                ptrs: [std::ptr::null(); 6],
                counts: [0; 6],
                lg: p.domain_log2,
                split: [None; 3],
                with_b_g2,
                urgent: false,
            };
            for (i, s) in p.abc.abc().into_iter().enumerate() {
                (arrays.ptrs[i], arrays.counts[i]) = pinned(i).unwrap_or((s.as_ptr().cast(), s.len()));
            }
            for (k, s) in [&p.l_scalars, &p.a_scalars, &p.b_scalars].into_iter().enumerate() {
                (arrays.ptrs[3 + k], arrays.counts[3 + k]) = match s {
                    MsmScalars::Split(sp) => {
                        arrays.split[k] = Some(sp);
                        (std::ptr::null(), sp.len)
                    }
                    MsmScalars::Dense(v) => pinned(3 + k).unwrap_or((v.as_ptr().cast(), v.len())),
                };
            }
            arrays
        }
    }

    impl Arrays<'_> {
        /// The device split applies: all three vectors split, their lists within the
        /// staging buffer's index space (3 x 2^lg entries) and the gather buffer
        /// (2^lg / 8).
        fn device_split(&self) -> Option<[&SplitScalars; 3]> {
            let [Some(l), Some(a), Some(b)] = self.split else { return None };
            let cap = (1usize << self.lg) / 8;
            let total: usize = [l, a, b].iter().map(|s| s.ones.len() + s.rest.len()).sum();
            ([l, a, b].iter().all(|s| s.rest.len() <= cap) && total <= 3 << self.lg).then_some([l, a, b])
        }
    }

    fn cuda_err(op: &'static str, dev: usize) -> impl Fn((i32, String)) -> GpuError {
        move |(code, msg)| GpuError::Cuda { op, device: dev, code, msg, out_of_memory: code.abs() == 2 }
    }

    /// The C side's view of a partition: `ptrs` (the arrays', or with split vectors
    /// rebuilt dense), the bit-split lists when `split`, and the parameter points
    /// when streamed from `srs` (`None` for an upload, which reads none of them).
    fn inputs(
        arr: &Arrays,
        ptrs: [*const u8; 6],
        split: Option<[&SplitScalars; 3]>,
        srs: Option<&ProvingKey>,
    ) -> cuda::Inputs {
        let counts = arr.counts;
        let lg = arr.lg;
        let mut inputs = cuda::Inputs {
            a: ptrs[0].cast(),
            b: ptrs[1].cast(),
            c: ptrs[2].cast(),
            n: counts[0],
            lg,
            z_inv: z_inv(lg),
            l_s: ptrs[3].cast(),
            nl: counts[3],
            a_s: ptrs[4].cast(),
            na: counts[4],
            b_s: ptrs[5].cast(),
            nb: counts[5],
            with_b2: arr.with_b_g2,
            ones: [std::ptr::null(); 3],
            nones: [0; 3],
            rest_idx: [std::ptr::null(); 3],
            rest_s: [std::ptr::null(); 3],
            nrest: [0; 3],
            h_pts: srs.map_or(std::ptr::null(), |s| s.h.as_ptr()),
            l_pts: srs.map_or(std::ptr::null(), |s| s.l.as_ptr()),
            a_pts: srs.map_or(std::ptr::null(), |s| s.a.as_ptr()),
            b1_pts: srs.map_or(std::ptr::null(), |s| s.b_g1.as_ptr()),
            b2_pts: srs.map_or(std::ptr::null(), |s| s.b_g2.as_ptr()),
        };
        if let Some(l) = split {
            inputs.ones = [0, 1, 2].map(|k| l[k].ones.as_ptr());
            inputs.nones = [0, 1, 2].map(|k| l[k].ones.len());
            inputs.rest_idx = [0, 1, 2].map(|k| l[k].rest_idx.as_ptr());
            inputs.rest_s = [0, 1, 2].map(|k| l[k].rest.as_ptr());
            inputs.nrest = [0, 1, 2].map(|k| l[k].rest.len());
        }
        inputs
    }

    impl CudaBackend {
        /// Finds the devices. Probes the driver first, so a host without one gets
        /// an error, not a crash.
        ///
        /// # Errors
        /// [`GpuError::Unavailable`] when there is no usable GPU or a configured
        /// device does not exist.
        pub fn new(opts: CudaOptions) -> Result<Self, GpuError> {
            if let Err((_, msg)) = cuda::probe() {
                return Err(GpuError::Unavailable(format!("no usable CUDA driver or device: {msg}")));
            }
            let n = cuda::count();
            if n == 0 {
                return Err(GpuError::Unavailable(
                    "the CUDA driver reports no device of compute capability 7.0 or newer".into(),
                ));
            }
            let wanted: Vec<usize> = if opts.devices.is_empty() { (0..n).collect() } else { opts.devices.clone() };
            let mut devices = Vec::new();
            for idx in wanted {
                if idx >= n {
                    return Err(GpuError::Unavailable(format!("device {idx} configured, but only {n} usable")));
                }
                let i = cuda::info(idx).map_err(|(_, m)| GpuError::Unavailable(format!("device {idx}: {m}")))?;
                let name =
                    String::from_utf8_lossy(&i.name[..i.name.iter().position(|b| *b == 0).unwrap_or(0)]).into_owned();
                let info = DeviceInfo {
                    index: idx,
                    cuda_id: i.cuda_id,
                    name,
                    sm_count: i.sm_count,
                    compute_capability: (i.major, i.minor),
                    total_mem: i.total_mem as u64,
                    free_mem: i.free_mem as u64,
                };
                let budget = info.free_mem.saturating_sub(opts.vram_margin);
                info!(
                    device = idx,
                    name = %info.name,
                    sms = info.sm_count,
                    total_mem = info.total_mem,
                    vram_budget = budget,
                    "gpu found"
                );
                devices.push(Device { info, budget, counters: Counters::default() });
            }
            let pinned = PinnedPool::new(opts.pinned_memory, devices.first().map_or(0, |d| d.info.index));
            // Kernel loading and NTT tables cost the first partition: its iNTT took
            // 155 ms and its H MSM 148 ms, against 1.1 and 53 ms later ones
            // (docs/bench-logs/h200-2026-11-30/run15-cuda-trace.log). Paid here, in
            // the background, while that partition synthesizes.
            let indices: Vec<usize> = devices.iter().map(|d| d.info.index).collect();
            let warmup = std::thread::Builder::new()
                .name("cuzk-gpu-warmup".into())
                .spawn(move || {
                    for dev in indices {
                        let t = Instant::now();
                        match cuda::warmup(dev) {
                            Ok(()) => info!(device = dev, ms = t.elapsed().as_millis() as u64, "gpu warmed up"),
                            Err((code, msg)) => warn!(device = dev, code, error = %msg, "gpu warm-up failed"),
                        }
                    }
                })
                .ok();
            Ok(CudaBackend {
                staging: Staging::new(devices.len(), opts.device_buffers),
                slots: Devices::new(devices.iter().map(|_| DeviceState::default())),
                devices,
                opts,
                pinned,
                inject_oom: AtomicU32::new(0),
                host_charge: std::sync::OnceLock::new(),
                cpu_failover: Mutex::new(()),
                warmup: Mutex::new(warmup),
            })
        }

        /// Devices in use.
        pub fn devices(&self) -> Vec<DeviceInfo> {
            self.devices.iter().map(|d| d.info.clone()).collect()
        }

        /// Test hook: the next `n` executions fail as out of memory before they
        /// touch the device (exercises the free-and-retry path without a real OOM).
        pub fn inject_oom(&self, n: u32) {
            self.inject_oom.store(n, Ordering::Relaxed);
        }

        fn resident_bytes(srs: &ProvingKey) -> u64 {
            super::device_resident_bytes(srs.h.len(), srs.l.len(), srs.a.len(), srs.b_g1.len(), srs.b_g2.len())
        }

        /// Makes `srs` resident on the device if it fits (evicting the least
        /// recently used sets if needed); returns its index in `st.resident`.
        fn ensure_resident(&self, dev: usize, st: &mut DeviceState, srs: &ProvingKey) -> Option<usize> {
            self.make_resident(dev, st, srs, false)
        }

        /// `ensure_resident`, or with `prefetch` the same without evicting: it also
        /// leaves room for the workspace of `srs`'s domain, so that a prefetch never
        /// costs a running job its resident set or the next partition its workspace.
        fn make_resident(&self, dev: usize, st: &mut DeviceState, srs: &ProvingKey, prefetch: bool) -> Option<usize> {
            st.resident.retain(|r| r.key.strong_count() > 0);
            let key = Arc::downgrade(&srs.h);
            if let Some(i) = st.resident.iter().position(|r| r.key.ptr_eq(&key)) {
                st.resident[i].last_used = Instant::now();
                return Some(i);
            }
            if !self.opts.srs_resident {
                return None;
            }
            let need = Self::resident_bytes(srs);
            let device = &self.devices[dev];
            let d = &device.info;
            let lg = srs.domain_size().trailing_zeros();
            loop {
                let staged = self.staging.bytes(dev);
                let ws_to_come = if !prefetch {
                    0
                } else {
                    let ws = if st.ws.as_ref().is_none_or(|w| w.lg < lg) { ws_bytes(lg) } else { 0 };
                    let buffer = super::device_staging_bytes(lg);
                    ws + if staged < buffer { buffer } else { 0 }
                };
                // Within this device's budget, and within what the driver says is
                // free now (other processes share the device).
                let free = cuda::info(d.index).map(|i| i.free_mem as u64).unwrap_or(0);
                if st.reserved() + staged + need + ws_to_come <= device.budget
                    && free >= need + ws_to_come + self.opts.vram_margin
                {
                    break;
                }
                if prefetch {
                    return None;
                }
                // A second staging buffer yields to resident parameters: streaming
                // the points costs far more than uploading in line.
                if self.staging.trim(dev, 1) > 0 {
                    continue;
                }
                // Evict the least recently used set, if any, and look again.
                let Some(lru) = st.resident.iter().enumerate().min_by_key(|(_, r)| r.last_used).map(|(i, _)| i) else {
                    warn!(device = dev, need, free, "parameters do not fit in device memory; streaming them per MSM");
                    return None;
                };
                let r = st.resident.swap_remove(lru);
                info!(device = dev, bytes = r.bytes, "evicting resident parameters");
            }
            let t = Instant::now();
            match cuda::ResidentSrs::new(d.index, &srs.h, &srs.l, &srs.a, &srs.b_g1, &srs.b_g2) {
                Ok(r) => {
                    info!(
                        device = dev,
                        bytes = need,
                        ms = t.elapsed().as_millis() as u64,
                        "parameters resident on device"
                    );
                    st.resident.push(Resident { key, srs: r, bytes: need, last_used: Instant::now() });
                    device.publish(st);
                    Some(st.resident.len() - 1)
                }
                Err((code, msg)) => {
                    warn!(device = dev, code, error = %msg, "could not make parameters resident; streaming them");
                    None
                }
            }
        }
    }

    /// (g^m - 1)^-1 for the coset generator g = 7 and m = 2^lg.
    fn z_inv(lg: u32) -> Scalar {
        let g = Scalar::MULTIPLICATIVE_GENERATOR;
        (g.pow_vartime([1u64 << lg]) - Scalar::ONE).invert().unwrap()
    }

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v.max(0.0) / 1e3)
    }

    impl Backend for CudaBackend {
        fn name(&self) -> &'static str {
            "cuda"
        }

        fn upload(&self, host: HostPartition) -> Result<UploadedPartition, GpuError> {
            // a, b, c that synthesis wrote into a buffer from our pool stay there.
            // The rest (a, b, c otherwise, and the dense scalar vectors) is copied
            // into pinned memory here, on the CPU, so that the transfers to the
            // device (`stage`, or `execute` for a partition not staged) run at full
            // PCIe bandwidth, and the pageable arrays are freed at once. Split lists
            // are a few MB and are uploaded from where they are.
            let HostPartition { abc, domain_log2, l_scalars, a_scalars, b_scalars } = host;
            let (lent, abc) = match abc {
                Evals::Lent(b) if b.as_any().is::<PinnedEvals>() => {
                    (b.into_any().downcast::<PinnedEvals>().ok().map(|b| *b), Evals::default())
                }
                // Not ours (no other lender exists today): as heap arrays.
                Evals::Lent(b) => (None, Evals::Lent(b).clone()),
                heap => (None, heap),
            };
            let dense = |s: &MsmScalars| match s {
                MsmScalars::Dense(v) => (v.as_ptr() as *const u8, v.len()),
                MsmScalars::Split(_) => (std::ptr::null(), 0),
            };
            let [a, b, c] = abc.abc();
            let arrays = [
                (a.as_ptr() as *const u8, a.len()),
                (b.as_ptr() as *const u8, b.len()),
                (c.as_ptr() as *const u8, c.len()),
                dense(&l_scalars),
                dense(&a_scalars),
                dense(&b_scalars),
            ];
            let bytes = arrays.iter().map(|(_, n)| n).sum::<usize>() * 32;
            let buf = if self.opts.pinned_memory == 0 || bytes == 0 { None } else { self.pinned.acquire(bytes) };
            let mut host = HostPartition { abc, domain_log2, l_scalars, a_scalars, b_scalars };
            let pinned = match (buf, lent) {
                (Some(buf), lent) => {
                    let pp = PinnedPartition::fill(lent, buf, arrays);
                    // Copied: keep only what was not (the split lists).
                    let keep = |s: MsmScalars| match s {
                        MsmScalars::Dense(_) => MsmScalars::Dense(Vec::new()),
                        split => split,
                    };
                    host = HostPartition {
                        domain_log2,
                        l_scalars: keep(host.l_scalars),
                        a_scalars: keep(host.a_scalars),
                        b_scalars: keep(host.b_scalars),
                        ..HostPartition::default()
                    };
                    Some(pp)
                }
                (None, Some(lent)) => Some(PinnedPartition::lent(lent)),
                (None, None) => None,
            };
            Ok(UploadedPartition { staged: None, backend: self.name(), host, pinned, urgent: false })
        }

        fn prefetch(&self, srs: &ProvingKey) {
            for dev in 0..self.devices.len() {
                // A busy device makes the set resident with its next partition anyway;
                // a retired one takes no more work.
                let Some(mut st) = self.slots.try_lock_healthy(dev) else { continue };
                self.make_resident(dev, &mut st, srs, true);
            }
        }

        fn eval_alloc(&self) -> Option<Arc<dyn cuzk_core::EvalAlloc>> {
            (self.opts.pinned_memory > 0)
                .then(|| Arc::new(PinnedEvalAlloc(self.pinned.clone())) as Arc<dyn cuzk_core::EvalAlloc>)
        }

        fn pinned_stats(&self) -> Option<PinnedStats> {
            Some(self.pinned.stats())
        }

        fn execute(
            &self,
            uploaded: UploadedPartition,
            srs: &ProvingKey,
            with_b_g2: bool,
        ) -> Result<MsmResults, GpuError> {
            if uploaded.backend != self.name() {
                return Err(GpuError::WrongBackend { uploaded: uploaded.backend, executing: self.name() });
            }
            let (p, pin) = (&uploaded.host, uploaded.pinned.as_ref());
            let mut arrays = Arrays::of(p, pin, with_b_g2);
            arrays.urgent = uploaded.urgent;
            check_counts(arrays.counts, p.domain_log2, srs)?;
            check_split([&p.l_scalars, &p.a_scalars, &p.b_scalars])?;
            let lease = uploaded.staged.as_ref();
            // A fault injected on this thread hits the first attempt only.
            let mut fault = take_injected_fault();
            // On the device the partition was staged on, unless another is free now.
            failover(
                &self.slots,
                lease.map(|l| l.device),
                uploaded.urgent,
                |dev, st| self.attempt(dev, st, &arrays, lease, srs, fault.take()),
                |dev, e| self.is_sticky(dev, e),
                |dev, st, e| self.retired(dev, st, e),
                || self.on_cpu(p, pin, srs, with_b_g2),
            )
            // `uploaded` is dropped here: its lease first (waiting for copies still
            // in flight if it never ran), then its host and pinned memory.
        }

        fn stage(&self, uploaded: &mut UploadedPartition, wait: bool) -> Staged {
            if uploaded.backend != self.name() || uploaded.staged.is_some() {
                return Staged::default();
            }
            let arrays = Arrays::of(&uploaded.host, uploaded.pinned.as_ref(), true);
            let lg = arrays.lg;
            let fits = |dev: usize, after: u64, need: u64| {
                let device = &self.devices[dev];
                let free = cuda::info(device.info.index).map(|i| i.free_mem as u64).unwrap_or(0);
                device.counters.reserved.load(Ordering::Relaxed) + after <= device.budget
                    && free >= need + self.opts.vram_margin
            };
            let healthy = |dev: usize| self.slots.health(dev) == crate::DeviceHealth::Healthy;
            let mut waited = Duration::ZERO;
            let Some(u) = self.staging.acquire(lg, healthy, fits, wait, &mut waited) else {
                return Staged { staged: false, waited };
            };
            // The lists go up whenever the device split could use them; whether it
            // does is known at execution (it needs resident points).
            let inputs = inputs(&arrays, arrays.ptrs, arrays.device_split(), None);
            // SAFETY: the arrays belong to `uploaded`, which owns them until its lease
            // (made below) is dropped or its execution from this buffer ends; a lease
            // is dropped before them (field order) and waits for the copies. The
            // buffer is this caller's alone while it is Uploading.
            let queued = unsafe { u.stage.upload(&inputs) };
            if let Err((code, msg)) = &queued {
                warn!(device = u.device, code, error = %msg, "staging upload failed; the partition uploads when it runs");
            }
            uploaded.staged = self.staging.uploaded(u, queued.is_ok());
            Staged { staged: uploaded.staged.is_some(), waited }
        }

        fn ntt_on_host(&self) -> bool {
            false
        }

        fn set_host_charge(&self, charge: crate::HostCharge) {
            // Set once, by the engine that owns the backend.
            let _ = self.host_charge.set(charge);
        }

        fn device_stats(&self) -> Vec<DeviceStats> {
            self.devices
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let c = &d.counters;
                    DeviceStats {
                        device: i,
                        vram_budget: d.budget,
                        vram_reserved: c.reserved.load(Ordering::Relaxed) + self.staging.bytes(i),
                        resident_sets: c.resident_sets.load(Ordering::Relaxed),
                        cuda_errors: c.errors.load(Ordering::Relaxed),
                        oom_errors: c.oom.load(Ordering::Relaxed),
                        oom_retries: c.retries.load(Ordering::Relaxed),
                        oom_recovered: c.recovered.load(Ordering::Relaxed),
                        health: self.slots.health(i),
                        retired_reason: self.slots.retired_reason(i).map(str::to_owned),
                        partitions_moved: c.moved.load(Ordering::Relaxed),
                    }
                })
                .collect()
        }
    }

    impl CudaBackend {
        /// The partition on device `dev` (its state locked by the caller); an
        /// out-of-memory failure frees what the device caches and tries once more.
        /// Failed CUDA calls are counted here, each attempt.
        fn attempt(
            &self,
            dev: usize,
            st: &mut DeviceState,
            arrays: &Arrays,
            lease: Option<&Lease>,
            srs: &ProvingKey,
            fault: Option<InjectedFault>,
        ) -> Result<MsmResults, GpuError> {
            let device = &self.devices[dev];
            let c = &device.counters;
            let first = self.run(dev, st, arrays, lease, srs, self.opts.srs_resident, fault);
            let result = match first {
                Err(GpuError::Cuda { op, code, msg, out_of_memory: true, .. }) => {
                    // Free what this device caches (resident parameters, the
                    // workspace, free staging buffers) and try once more, streaming
                    // the parameters and uploading in line: the smallest footprint
                    // this partition can have.
                    c.errors.fetch_add(1, Ordering::Relaxed);
                    c.oom.fetch_add(1, Ordering::Relaxed);
                    c.retries.fetch_add(1, Ordering::Relaxed);
                    let freed = st.reserved() + self.staging.trim(dev, 0);
                    st.resident.clear();
                    st.ws = None;
                    // And what the driver's pool keeps of earlier MSMs' temporaries.
                    let _ = cuda::trim(device.info.index);
                    device.publish(st);
                    warn!(device = dev, op, code, error = %msg, freed, "out of device memory; freed cached memory, retrying once");
                    match self.run(dev, st, arrays, None, srs, false, None) {
                        Ok(r) => {
                            c.recovered.fetch_add(1, Ordering::Relaxed);
                            Ok(r)
                        }
                        Err(GpuError::Cuda { op, device, code, msg, out_of_memory }) => Err(GpuError::Cuda {
                            op,
                            device,
                            code,
                            msg: format!("{msg} (after freeing {freed} cached bytes and retrying once)"),
                            out_of_memory,
                        }),
                        Err(e) => Err(e),
                    }
                }
                r => r,
            };
            if let Err(GpuError::Cuda { out_of_memory, .. }) = &result {
                c.errors.fetch_add(1, Ordering::Relaxed);
                if *out_of_memory {
                    c.oom.fetch_add(1, Ordering::Relaxed);
                }
            }
            device.publish(st);
            result
        }

        /// Whether `e` left device `dev` unusable: a sticky code, or any other CUDA
        /// failure after which the device's context no longer synchronizes (a
        /// kernel fault can surface under another code, e.g. through sppark's
        /// exception handling). Out-of-memory never is.
        fn is_sticky(&self, dev: usize, e: &GpuError) -> bool {
            match e.cuda_class() {
                Some(ErrorClass::Sticky) => true,
                Some(ErrorClass::Other) => cuda::synchronize(self.devices[dev].info.index).is_err(),
                Some(ErrorClass::OutOfMemory) | None => false,
            }
        }

        /// Device `dev` was just retired (its lock still held): drop what it caches,
        /// move the pinned pool to a device that works, and say so.
        fn retired(&self, dev: usize, st: &mut DeviceState, e: &GpuError) {
            let device = &self.devices[dev];
            device.counters.moved.fetch_add(1, Ordering::Relaxed);
            // On a poisoned context these frees fail; they are ignored, and the C
            // side leaks what it cannot free safely (cuzk.cu, `sync_or_leak`). The
            // memory goes with the context when the process ends.
            st.resident.clear();
            st.ws = None;
            // And its free staging buffers. Staged ones stay until their partitions,
            // which now run elsewhere, let go of them (then only counted: the
            // device takes no more work).
            self.staging.trim(dev, 0);
            device.publish(st);
            let next = self.slots.first_healthy();
            self.pinned.set_device(next.map(|i| self.devices[i].info.index));
            let left = self.slots.healthy_count();
            error!(
                device = dev,
                error = %e,
                healthy_devices_left = left,
                "sticky CUDA error: device retired for the rest of the process (a restart recovers it); \
                 its partition runs again {}",
                if left > 0 { "on another device" } else { "on the CPU" }
            );
            if left == 0 {
                error!("no GPU device left: partitions run on the CPU until the process is restarted");
            }
        }

        /// The partition on the CPU backend, when no device is left to run it: a
        /// heap copy of what was uploaded (the pinned copy, or the host arrays). The
        /// partition's host reservation shrank to what stayed on the heap after
        /// `upload` (StagePcie), so the charge below covers the copies too.
        fn on_cpu(
            &self,
            p: &HostPartition,
            pin: Option<&PinnedPartition>,
            srs: &ProvingKey,
            with_b_g2: bool,
        ) -> Result<MsmResults, GpuError> {
            let _one = self.cpu_failover.lock().unwrap_or_else(|e| e.into_inner());
            // The partition's reservation left out the host NTT buffers
            // (`ntt_on_host`); charged here, with the heap copies made below: a, b, c
            // padded, H and its byte form, the twiddles, the scalars at most.
            let m = 1u64 << p.domain_log2;
            let scalars = (srs.l.len() + srs.a.len() + srs.b_g1.len()) as u64;
            let bytes = 32 * (3 * m + 2 * m + m / 2 + scalars);
            let _charge = self.host_charge.get().map(|charge| charge(bytes));
            warn!(domain_log2 = p.domain_log2, bytes, "no GPU device left; proving the partition on the CPU");
            let abc = p.abc.abc();
            let [a, b, c] = [0, 1, 2].map(|i| pin.and_then(|pp| pp.abc_part(i)).unwrap_or(abc[i]).to_vec());
            let msm = |k: usize, s: &MsmScalars| match s {
                MsmScalars::Dense(v) => MsmScalars::Dense(pin.and_then(|pp| pp.scalars_part(k)).unwrap_or(v).to_vec()),
                split => split.clone(),
            };
            let host = HostPartition {
                abc: Evals::heap(a, b, c),
                domain_log2: p.domain_log2,
                l_scalars: msm(0, &p.l_scalars),
                a_scalars: msm(1, &p.a_scalars),
                b_scalars: msm(2, &p.b_scalars),
            };
            CpuBackend.execute(CpuBackend.upload(host)?, srs, with_b_g2)
        }

        /// One attempt at a partition on device `dev` (its state locked by the
        /// caller): from its staging buffer when `lease` holds it there, else
        /// uploaded now into one.
        #[allow(clippy::too_many_arguments)]
        fn run(
            &self,
            dev: usize,
            st: &mut DeviceState,
            arr: &Arrays,
            lease: Option<&Lease>,
            srs: &ProvingKey,
            allow_resident: bool,
            fault: Option<InjectedFault>,
        ) -> Result<MsmResults, GpuError> {
            let device = &self.devices[dev];
            let index = device.info.index;
            if self.inject_oom.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
                return Err(GpuError::Cuda {
                    op: "execute",
                    device: dev,
                    code: 2,
                    msg: "out of memory (injected by the test hook)".into(),
                    out_of_memory: true,
                });
            }
            match fault {
                Some(InjectedFault::Sticky) => {
                    return Err(GpuError::Cuda {
                        op: "execute",
                        device: dev,
                        code: 700,
                        msg: "an illegal memory access was encountered (simulated by the test hook)".into(),
                        out_of_memory: false,
                    })
                }
                Some(InjectedFault::IllegalAddress) => {
                    cuda::illegal_address(index).map_err(cuda_err("execute (injected illegal address)", dev))?
                }
                None => {}
            }
            let lg = arr.lg;
            // Never fits: fail before giving up what is cached.
            let one = super::device_workspace_bytes(lg);
            if one > device.budget {
                return Err(GpuError::VramBudget { device: dev, need: one, budget: device.budget });
            }
            if st.ws.as_ref().is_none_or(|w| w.lg < lg) {
                let need = ws_bytes(lg);
                st.ws = None; // free the smaller one first
                              // The workspace is required; resident parameters are not: evict them
                              // (least recently used first) until the workspace fits the budget.
                while st.reserved() + self.staging.bytes(dev) + need > device.budget && !st.resident.is_empty() {
                    let lru = st.resident.iter().enumerate().min_by_key(|(_, r)| r.last_used).map_or(0, |(i, _)| i);
                    let r = st.resident.swap_remove(lru);
                    info!(device = dev, bytes = r.bytes, "evicting resident parameters for the workspace");
                }
                st.ws = Some(cuda::Workspace::new(index, lg).map_err(cuda_err("allocate workspace", dev))?);
                device.publish(st);
            }
            // The buffer to run from. Room for a new one comes from the budget beside
            // the workspace and resident sets; a required one may evict resident
            // sets, least recently used first.
            let margin = self.opts.vram_margin;
            let buffer = self.staging.for_execution(dev, lg, lease, arr.urgent, |after, need, may_evict| loop {
                let free = cuda::info(index).map(|i| i.free_mem as u64).unwrap_or(0);
                if st.reserved() + after <= device.budget && free >= need + margin {
                    return true;
                }
                if !may_evict || st.resident.is_empty() {
                    return may_evict && st.reserved() + after <= device.budget;
                }
                let lru = st.resident.iter().enumerate().min_by_key(|(_, r)| r.last_used).map_or(0, |(i, _)| i);
                let r = st.resident.swap_remove(lru);
                info!(device = dev, bytes = r.bytes, "evicting resident parameters for a staging buffer");
            });
            device.publish(st);
            let buffer = buffer.map_err(|(need, e)| match e {
                Some(e) => cuda_err("allocate staging buffer", dev)(e),
                None => GpuError::VramBudget { device: dev, need, budget: device.budget },
            })?;
            // After the buffer, which is required: making the set resident never
            // takes it away (only free buffers yield to parameters).
            let resident = if allow_resident { self.ensure_resident(dev, st, srs) } else { None };
            // The device split needs resident points (the sums and gathers address
            // them); otherwise split vectors are rebuilt in full for the plain MSMs.
            let split = arr.device_split().filter(|_| resident.is_some());
            let mut ptrs = arr.ptrs;
            let mut rebuilt: Vec<Vec<ScalarBytes>> = Vec::new();
            if split.is_none() {
                for (k, s) in arr.split.iter().enumerate() {
                    if let Some(s) = s {
                        rebuilt.push(s.to_dense());
                        ptrs[3 + k] = rebuilt.last().map_or(std::ptr::null(), |v| v.as_ptr().cast());
                    }
                }
            }
            let inputs = inputs(arr, ptrs, split, Some(srs));
            if !buffer.staged {
                // SAFETY: the arrays outlive this call, and the execution below (or
                // the C side's error path) waits for every copy before it returns;
                // the buffer is this caller's alone while it is executing.
                unsafe { buffer.stage.upload(&inputs) }.map_err(cuda_err("upload", dev))?;
            }
            let DeviceState { ws, resident: res, .. } = st;
            let ws = ws.as_mut().expect("workspace allocated above");
            let out = ws
                .execute(&buffer.stage, resident.map(|i| &res[i].srs), &inputs, buffer.staged)
                .map_err(cuda_err("execute", dev))?;
            drop(rebuilt);
            let mut timings = if buffer.staged {
                // Uploaded by StagePcie beside the previous partition's kernels;
                // what this partition still waited for it is `h2d_wait`.
                vec![("h2d_staged", ms(out.ms[0])), ("h2d_wait", ms(out.ms[7]))]
            } else {
                vec![("h2d_abc", ms(out.ms[0]))]
            };
            timings.extend([
                ("ntt_h", ms(out.ms[1])),
                ("msm_h", ms(out.ms[2])),
                ("msm_l", ms(out.ms[3])),
                ("msm_a", ms(out.ms[4])),
                ("msm_b_g1", ms(out.ms[5])),
            ]);
            if arr.with_b_g2 {
                timings.push(("msm_b_g2", ms(out.ms[6])));
            }
            Ok(MsmResults {
                h: ffi::g1_projective(out.h),
                l: ffi::g1_projective(out.l),
                a: ffi::g1_projective(out.a),
                b_g1: ffi::g1_projective(out.b1),
                b_g2: arr.with_b_g2.then(|| ffi::g2_projective(out.b2)),
                split: split.is_some(),
                timings,
            })
        }
    }
}

pub(crate) use imp::Lease;
pub use imp::{CudaBackend, COMPILED};

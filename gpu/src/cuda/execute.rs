//! One attempt at a partition on one device of the CUDA backend: its arrays as the
//! C side takes them ([`Arrays`], `inputs`), the workspace and a staging buffer made
//! to fit the device's budget (evicting resident parameter sets if they must), the
//! device split when the points are resident, the upload when not staged, the
//! kernels, and their timings.

use std::{sync::atomic::Ordering, time::Duration};

use blstrs::Scalar;
use cuzk_srs::ProvingKey;
use ff::{Field, PrimeField};
use tracing::{error, info, warn};

use super::{
    device::{ws_bytes, DeviceState},
    CudaBackend, Lease,
};
use crate::{
    error::cuda_err,
    ffi::{self, cuda},
    pinned::PinnedPartition,
    sizing::device_workspace_bytes,
    GpuError, HostPartition, InjectedFault, MsmResults, MsmScalars, ScalarBytes, SplitScalars,
};

/// Pointers and counts of a, b, c and the three scalar vectors of an uploaded
/// partition, and its domain. A split scalar vector has its lists in `split`
/// and a null pointer here (its count is the number of points).
pub(super) struct Arrays<'a> {
    pub(super) ptrs: [*const u8; 6],
    pub(super) counts: [usize; 6],
    pub(super) lg: u32,
    split: [Option<&'a SplitScalars>; 3],
    /// Whether B_G2 is asked for.
    with_b_g2: bool,
    /// Deadline work: runs from a staging buffer of its own (staging.rs).
    pub(super) urgent: bool,
    /// a, b, c left to the backend (null pointers above, counts the rows).
    pub(super) deferred: Option<&'a cuzk_core::Deferred>,
}

impl<'a> Arrays<'a> {
    /// An uploaded partition's arrays: from pinned memory where the array is
    /// there, else from the host arrays.
    pub(super) fn of(p: &'a HostPartition, pin: Option<&'a PinnedPartition>, with_b_g2: bool) -> Self {
        let pinned = |i: usize| pin.and_then(|pp| pp.part(i));
        let mut arrays = Arrays {
            ptrs: [std::ptr::null(); 6],
            counts: [0; 6],
            lg: p.domain_log2,
            split: [None; 3],
            with_b_g2,
            urgent: false,
            deferred: p.abc.deferred(),
        };
        for (i, s) in p.abc.abc().into_iter().enumerate() {
            (arrays.ptrs[i], arrays.counts[i]) = match arrays.deferred {
                Some(_) => (std::ptr::null(), p.abc.len()),
                None => pinned(i).unwrap_or((s.as_ptr().cast(), s.len())),
            };
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
    pub(super) fn device_split(&self) -> Option<[&SplitScalars; 3]> {
        let [Some(l), Some(a), Some(b)] = self.split else { return None };
        crate::split::lists_fit(self.lg, [l, a, b]).then_some([l, a, b])
    }

    /// Whether a deferred partition can have a, b, c evaluated on the device: its
    /// aux values come from L's split lists, and the witness fits in c's slot.
    pub(super) fn device_abc(&self) -> bool {
        self.deferred.is_some_and(|d| self.device_split().is_some() && d.input.len() + self.counts[3] <= 1 << self.lg)
    }

    /// The same arrays with a, b, c evaluated on the host.
    fn with_abc<'b>(&'b self, abc: &'b [Vec<Scalar>; 3]) -> Arrays<'b> {
        let mut ptrs = self.ptrs;
        let mut counts = self.counts;
        for i in 0..3 {
            (ptrs[i], counts[i]) = (abc[i].as_ptr().cast(), abc[i].len());
        }
        Arrays {
            ptrs,
            counts,
            lg: self.lg,
            split: self.split,
            with_b_g2: self.with_b_g2,
            urgent: self.urgent,
            deferred: None,
        }
    }

    /// A deferred partition's a, b, c on the host.
    fn evaluate_on_host(&self) -> Result<[Vec<Scalar>; 3], GpuError> {
        let d = self.deferred.expect("only deferred partitions are evaluated here");
        let dense: &[crate::ScalarBytes] = match self.split[0] {
            Some(_) => &[],
            // SAFETY: a dense L vector's pointer and count are the host or pinned
            // array it was given by (`of`), alive as long as the partition.
            None if !self.ptrs[3].is_null() => unsafe {
                std::slice::from_raw_parts(self.ptrs[3].cast::<crate::ScalarBytes>(), self.counts[3])
            },
            None => &[],
        };
        crate::cpu::evaluate_deferred(d, self.split[0], dense)
    }
}

/// The C side's view of a partition: `ptrs` (the arrays', or with split vectors
/// rebuilt dense), the bit-split lists when `split`, and the parameter points
/// when streamed from `srs` (`None` for an upload, which reads none of them).
pub(super) fn inputs(
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
        // Set by the execution that has the matrices resident.
        r1cs: std::ptr::null(),
        w_in: arr.deferred.map_or(std::ptr::null(), |d| d.input.as_ptr()),
        n_in: arr.deferred.map_or(0, |d| d.input.len()),
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

/// (g^m - 1)^-1 for the coset generator g = 7 and m = 2^lg.
fn z_inv(lg: u32) -> Scalar {
    let g = Scalar::MULTIPLICATIVE_GENERATOR;
    (g.pow_vartime([1u64 << lg]) - Scalar::ONE).invert().unwrap()
}

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v.max(0.0) / 1e3)
}

impl CudaBackend {
    /// One attempt at a partition on device `dev` (its state locked by the
    /// caller): from its staging buffer when `lease` holds it there, else
    /// uploaded now into one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
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
        let started = std::time::Instant::now();
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
            Some(InjectedFault::Sticky) => return Err(GpuError::simulated_sticky(dev)),
            Some(InjectedFault::IllegalAddress) => {
                cuda::illegal_address(index).map_err(cuda_err("execute (injected illegal address)", dev))?
            }
            Some(InjectedFault::Hang) => {
                let watch = self.slots.watch();
                while !watch.is_hung(dev) {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                std::thread::sleep(watch.limit().unwrap_or_default());
                return Err(GpuError::Cuda {
                    op: "execute",
                    device: dev,
                    code: -1,
                    msg: "a device call that hung returned late (simulated by the test hook)".into(),
                    out_of_memory: false,
                });
            }
            None => {}
        }
        let lg = arr.lg;
        // Never fits: fail before giving up what is cached.
        let one = device_workspace_bytes(lg);
        if one > device.budget {
            return Err(GpuError::VramBudget { device: dev, need: one, budget: device.budget });
        }
        if st.ws.as_ref().is_none_or(|w| w.lg < lg) {
            let need = ws_bytes(lg);
            st.ws = None; // free the smaller one first
                          // The workspace is required; resident parameters are not: evict them
                          // (least recently used first) until the workspace fits the budget.
            while st.reserved() + device.others(st) + self.staging.bytes(dev) + need > device.budget
                && !(st.resident.is_empty() && st.matrices.is_empty())
            {
                if st.matrices.pop().is_some() {
                    info!(device = dev, "evicting resident constraint matrices for the workspace");
                    continue;
                }
                // A free second staging buffer gives way before resident parameters:
                // without them every partition streams its points.
                if !st.lane && self.staging.trim(dev, 1) > 0 {
                    continue;
                }
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
        let others = device.others(st);
        let buffer = self.staging.for_execution(dev, lg, lease, arr.urgent, |after, need, may_evict| loop {
            let free = cuda::info(index).map(|i| i.free_mem as u64).unwrap_or(0);
            if st.reserved() + others + after <= device.budget && free >= need + margin {
                return true;
            }
            if may_evict && st.matrices.pop().is_some() {
                info!(device = dev, "evicting resident constraint matrices for a staging buffer");
                continue;
            }
            if !may_evict || st.resident.is_empty() {
                return may_evict && st.reserved() + others + after <= device.budget;
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
        // a, b, c left to the backend: evaluated here from the matrices resident
        // on the device, or on the host where they cannot be (no room, no device
        // split), and then uploaded as before.
        let mut matrices = None;
        let mut host_abc = None;
        // Charged to the host budget while the host's a, b, c live (to the end).
        let mut _abc_charge = None;
        let mut abc_ops = Vec::new();
        if let Some(d) = arr.deferred {
            if self.opts.abc_on_device && split.is_some() && arr.device_abc() {
                matrices = self.ensure_matrices(dev, st, &d.rec);
            }
            if matrices.is_none() {
                let n = arr.counts[0] as u64;
                _abc_charge = self.host_charge.get().map(|charge| charge(3 * 32 * n));
                let t = std::time::Instant::now();
                host_abc = Some(arr.evaluate_on_host()?);
                abc_ops.push(("abc_host", t.elapsed()));
            }
        }
        let evaluated;
        let arr = match &host_abc {
            Some(v) => {
                evaluated = arr.with_abc(v);
                &evaluated
            }
            None => arr,
        };
        // What StagePcie put in the buffer lacks the host's a, b, c.
        let staged = buffer.staged && host_abc.is_none();
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
        let mut inputs = inputs(arr, ptrs, split, Some(srs));
        if let Some(i) = matrices {
            inputs.r1cs = st.matrices[i].r1cs.ptr();
        }
        if !staged {
            // SAFETY: the arrays outlive this call, and the execution below (or
            // the C side's error path) waits for every copy before it returns;
            // the buffer is this caller's alone while it is executing.
            unsafe { buffer.stage.upload(&inputs) }.map_err(cuda_err("upload", dev))?;
        }
        let gate = device.gate_for(st);
        let DeviceState { ws, resident: res, .. } = st;
        let ws = ws.as_mut().expect("workspace allocated above");
        // The host's share before the kernels: workspace, buffer, resident sets,
        // a, b, c on the host, dense vectors, the upload when not staged.
        let prep = started.elapsed();
        let t = std::time::Instant::now();
        let cpu = thread_cpu();
        let runq = thread_runq();
        let out = ws
            .execute(&buffer.stage, resident.map(|i| &res[i].srs), &inputs, staged, gate)
            .map_err(cuda_err("execute", dev))?;
        let execute = t.elapsed();
        let execute_cpu = thread_cpu().saturating_sub(cpu);
        let execute_runq = thread_runq().saturating_sub(runq);
        drop(rebuilt);
        if matrices.is_some() {
            abc_ops.push(("abc_device", ms(out.ms[8])));
        }
        let mut timings = if staged {
            // Uploaded by StagePcie beside the previous partition's kernels;
            // what this partition still waited for it is `h2d_wait`.
            vec![("h2d_staged", ms(out.ms[0])), ("h2d_wait", ms(out.ms[7]))]
        } else {
            vec![("h2d_abc", ms(out.ms[0]))]
        };
        timings.extend(abc_ops);
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
        if st.lane {
            // Spans over the ops above (the deadline bench's breakdown), so only
            // for a deadline partition beside the load.
            // `execute_cpu`: this thread's CPU time in `execute` (its device waits
            // spin); `execute_runq`: its time ready to run but waiting for a CPU
            // (scheduler statistics); the rest of `execute` it was blocked (H's
            // thread, sppark's pool, the driver).
            timings.extend([
                ("prep", prep),
                ("execute", execute),
                ("execute_cpu", execute_cpu),
                ("execute_runq", execute_runq),
            ]);
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

impl CudaBackend {
    /// A deadline partition when every healthy device is busy: run through a busy
    /// device's lane, between the kernels of the partition holding it (`gate.rs`),
    /// with the lane's workspace and resident parameters and the device's urgent
    /// staging buffer. `None`: it goes the usual way (a device is free, the lane is
    /// off, or it failed here: no VRAM for the lane, an error; a sticky error
    /// retires the device first).
    pub(super) fn execute_beside(
        &self,
        arrays: &Arrays,
        lease: Option<&Lease>,
        srs: &ProvingKey,
        fault: &mut Option<InjectedFault>,
    ) -> Option<Result<MsmResults, GpuError>> {
        if !self.opts.deadline_lane {
            return None;
        }
        // Every busy healthy device's lane, the device it was staged on first; while
        // each lane runs another deadline partition (tens of ms), wait for one,
        // unless a device comes free meanwhile (then the usual way: it goes before
        // every bulk partition waiting there).
        let asked = std::time::Instant::now();
        let (dev, mut lane) = loop {
            let mut order: Vec<usize> =
                (0..self.devices.len()).filter(|&d| self.slots.health(d) == crate::DeviceHealth::Healthy).collect();
            if order.is_empty() || order.iter().any(|&d| self.slots.is_free(d)) {
                return None;
            }
            if let Some(p) = lease.map(|l| l.device) {
                order.sort_by_key(|&d| d != p);
            }
            if let Some(got) = order.iter().find_map(|&d| self.lanes[d].try_lock().ok().map(|l| (d, l))) {
                break got;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        let lane_wait = asked.elapsed();
        let device = &self.devices[dev];
        let result = {
            let _call = self.slots.watch().begin_lane(dev);
            let t = std::time::Instant::now();
            let _turn = device.gate.urgent();
            let yield_wait = t.elapsed();
            self.run(
                dev,
                &mut lane,
                arrays,
                lease.filter(|l| l.device == dev),
                srs,
                self.opts.srs_resident,
                fault.take(),
            )
            .map(|mut r| {
                // Where a deadline partition's ProveGpu time went beside the load:
                // another deadline partition in the lane, the bulk work's next
                // yield point, then its own run (`prep`, `execute`).
                r.timings.extend([("lane_wait", lane_wait), ("yield_wait", yield_wait)]);
                r
            })
        };
        device.publish(&lane);
        let e = match result {
            Ok(r) => return Some(Ok(r)),
            Err(e) => e,
        };
        let c = &device.counters;
        if let GpuError::Cuda { out_of_memory, .. } = &e {
            c.errors.fetch_add(1, Ordering::Relaxed);
            if *out_of_memory {
                c.oom.fetch_add(1, Ordering::Relaxed);
            }
        }
        // What the lane caches goes; the device's own work keeps its share.
        lane.resident.clear();
        lane.matrices.clear();
        lane.ws = None;
        device.publish(&lane);
        if self.is_sticky(dev, &e) && self.slots.retire(dev, e.to_string()) {
            // The bulk partition holds the device's own state; it drops what the
            // device caches when its own call fails (`retired`).
            c.moved.fetch_add(1, Ordering::Relaxed);
            error!(
                device = dev,
                error = %e,
                "sticky CUDA error in a deadline partition: device retired; the partition runs again on another \
                 device or the CPU"
            );
            self.pinned.set_device(self.slots.first_healthy().map(|i| self.devices[i].info.index));
        } else {
            warn!(device = dev, error = %e, "deadline partition could not run beside the bulk work; it waits for a device");
        }
        None
    }
}

/// The calling thread's CPU time (zero where it cannot be read).
fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The calling thread's time waiting on a run queue (Linux scheduler statistics,
/// `/proc/thread-self/schedstat`; zero where they cannot be read).
fn thread_runq() -> std::time::Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|w| w.parse::<u64>().ok()))
        .map_or(std::time::Duration::ZERO, std::time::Duration::from_nanos)
}

//! The CUDA backend's [`Backend`] implementation: what the stages call (upload into
//! pinned memory, stage into a device buffer, execute with failover, prefetch, the
//! pinned pool, device statistics). The work behind them is in the sibling files:
//! device state, execution, recovery.

use std::{
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use cuzk_srs::ProvingKey;
use tracing::warn;

use super::{
    execute::{inputs, Arrays},
    CudaBackend,
};
use crate::{
    cpu::{check_counts, check_split},
    ffi::cuda,
    health::{failover, take_injected_fault},
    pinned::{PinnedEvalAlloc, PinnedEvals, PinnedPartition, PinnedStats},
    Backend, DeviceStats, Evals, GpuError, HostPartition, MsmResults, MsmScalars, Staged, UploadedPartition,
};

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
                // A deferred partition's a, b, c stay deferred (nothing was copied).
                let abc = match host.abc {
                    Evals::Deferred(d) => Evals::Deferred(d),
                    _ => Evals::default(),
                };
                host = HostPartition {
                    abc,
                    domain_log2,
                    l_scalars: keep(host.l_scalars),
                    a_scalars: keep(host.a_scalars),
                    b_scalars: keep(host.b_scalars),
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

    fn execute(&self, uploaded: UploadedPartition, srs: &ProvingKey, with_b_g2: bool) -> Result<MsmResults, GpuError> {
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
        // Deadline work that finds every device busy runs beside the bulk work.
        if uploaded.urgent {
            if let Some(r) = self.execute_beside(&arrays, lease, srs, &mut fault) {
                return r;
            }
        }
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
        // A deferred partition whose a, b, c cannot be evaluated on the device is
        // evaluated on the host at execution and uploaded then.
        if arrays.deferred.is_some() && !(self.opts.abc_on_device && arrays.device_abc()) {
            return Staged::default();
        }
        let lg = arrays.lg;
        // A buffer leaves room for the workspace the partition will run in: taking
        // it would make the execution evict resident parameters instead.
        let fits = |dev: usize, after: u64, need: u64| {
            let device = &self.devices[dev];
            let free = cuda::info(device.info.index).map(|i| i.free_mem as u64).unwrap_or(0);
            let ws = device.workspace_to_come(lg);
            device.counters.reserved.load(Ordering::Relaxed)
                + device.counters.lane_reserved.load(Ordering::Relaxed)
                + after
                + ws
                <= device.budget
                && free >= need + ws + self.opts.vram_margin
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

    fn abc_on_device(&self) -> bool {
        self.opts.abc_on_device
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
                let (calls, held) = self.slots.held_for(i);
                DeviceStats {
                    device: i,
                    vram_budget: d.budget,
                    vram_reserved: c.reserved.load(Ordering::Relaxed)
                        + c.lane_reserved.load(Ordering::Relaxed)
                        + self.staging.bytes(i),
                    resident_sets: c.resident_sets.load(Ordering::Relaxed),
                    cuda_errors: c.errors.load(Ordering::Relaxed),
                    oom_errors: c.oom.load(Ordering::Relaxed),
                    oom_retries: c.retries.load(Ordering::Relaxed),
                    oom_recovered: c.recovered.load(Ordering::Relaxed),
                    health: self.slots.health(i),
                    retired_reason: self.slots.retired_reason(i).map(str::to_owned),
                    partitions_moved: c.moved.load(Ordering::Relaxed),
                    calls,
                    held,
                    deadline: d.gate.stats(),
                }
            })
            .collect()
    }
}

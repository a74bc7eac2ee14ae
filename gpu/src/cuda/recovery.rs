//! What the CUDA backend does when a partition fails on a device: an out-of-memory
//! failure frees what the device caches and tries once more; a sticky error retires
//! the device (its cached memory dropped, the pinned pool moved to a device that
//! works); with no device left, the partition runs on the CPU backend, charged to the
//! host budget. Which device runs next is `health::failover`'s choice.

use std::sync::atomic::Ordering;

use cuzk_srs::ProvingKey;
use tracing::{error, warn};

use super::{device::DeviceState, execute::Arrays, CudaBackend, Lease};
use crate::{
    cpu::CpuBackend,
    ffi::cuda,
    health::Devices,
    pinned::{PinnedPartition, PinnedPool},
    staging::Staging,
    watchdog::Hung,
    Backend, ErrorClass, Evals, GpuError, HostPartition, InjectedFault, MsmResults, MsmScalars,
};

impl CudaBackend {
    /// The partition on device `dev` (its state locked by the caller); an
    /// out-of-memory failure frees what the device caches and tries once more.
    /// Failed CUDA calls are counted here, each attempt.
    pub(super) fn attempt(
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
                st.matrices.clear();
                st.matrices.clear();
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
    pub(super) fn is_sticky(&self, dev: usize, e: &GpuError) -> bool {
        match e.cuda_class() {
            Some(ErrorClass::Sticky) => true,
            Some(ErrorClass::Other) => cuda::synchronize(self.devices[dev].info.index).is_err(),
            Some(ErrorClass::OutOfMemory) | None => false,
        }
    }

    /// Device `dev` was just retired (its lock still held): drop what it caches,
    /// move the pinned pool to a device that works, and say so.
    pub(super) fn retired(&self, dev: usize, st: &mut DeviceState, e: &GpuError) {
        let device = &self.devices[dev];
        device.counters.moved.fetch_add(1, Ordering::Relaxed);
        // On a poisoned context these frees fail; they are ignored, and the C
        // side leaks what it cannot free safely (cuzk.cu, `sync_or_leak`). The
        // memory goes with the context when the process ends.
        st.resident.clear();
        st.matrices.clear();
        st.ws = None;
        if let Ok(mut lane) = self.lanes[dev].try_lock() {
            lane.resident.clear();
            lane.matrices.clear();
            lane.ws = None;
            device.publish(&lane);
        }
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

    /// Device `h.device` was found hung (the watch's thread): retired without its
    /// lock, which the stuck call holds, and without touching it again; its
    /// staging buffers are left alone; the pinned pool moves to a device that
    /// works. The partition stuck in the call is given up by its waiting caller.
    pub(super) fn hung(
        slots: &Devices<DeviceState>,
        staging: &Staging<cuda::Stage>,
        pinned: &PinnedPool,
        indices: &[usize],
        h: Hung,
    ) {
        if !slots.retire(h.device, h.reason.clone()) {
            return;
        }
        staging.lose(h.device);
        pinned.set_device(slots.first_healthy().map(|i| indices[i]));
        let left = slots.healthy_count();
        error!(
            device = h.device,
            error = %h.reason,
            healthy_devices_left = left,
            "GPU device hung: retired for the rest of the process (a restart recovers it); the partition \
             stuck on it fails, later ones run {}",
            if left > 0 { "on another device" } else { "on the CPU" }
        );
    }

    /// The partition on the CPU backend, when no device is left to run it: a
    /// heap copy of what was uploaded (the pinned copy, or the host arrays). The
    /// partition's host reservation shrank to what stayed on the heap after
    /// `upload` (StagePcie), so the charge below covers the copies too.
    pub(super) fn on_cpu(
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
            // Deferred: evaluated on the host by the CPU backend.
            abc: match p.abc.deferred() {
                Some(d) => Evals::Deferred(d.clone()),
                None => Evals::heap(a, b, c),
            },
            domain_log2: p.domain_log2,
            l_scalars: msm(0, &p.l_scalars),
            a_scalars: msm(1, &p.a_scalars),
            b_scalars: msm(2, &p.b_scalars),
        };
        CpuBackend.execute(CpuBackend.upload(host)?, srs, with_b_g2)
    }
}

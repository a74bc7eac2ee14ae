//! One device's state in the CUDA backend: its VRAM budget and counters
//! (`Device`), what it holds under its lock (`DeviceState`: the workspace and the
//! resident parameter sets), and making a parameter set resident within the budget
//! and what the driver says is free, least recently used sets evicted first.

use std::{
    sync::{
        atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering},
        Arc, Weak,
    },
    time::Instant,
};

use blstrs::G1Affine;
use cuzk_srs::ProvingKey;
use tracing::{info, warn};

use super::{CudaBackend, DeviceInfo};
use crate::{
    ffi::cuda,
    gate::Gate,
    sizing::{
        device_matrices_allowance, device_resident_bytes, device_staging_bytes, device_workspace_bytes,
        msm_h_window_extra_bytes,
    },
};

pub(super) struct Resident {
    key: Weak<Vec<G1Affine>>,
    pub(super) srs: cuda::ResidentSrs,
    pub(super) bytes: u64,
    pub(super) last_used: Instant,
}

/// A recorded circuit's A and B matrices on the device (a, b, c evaluated there).
pub(super) struct ResidentMatrices {
    key: Weak<dyn cuzk_core::Recorded>,
    pub(super) r1cs: cuda::ResidentR1cs,
    pub(super) bytes: u64,
    pub(super) last_used: Instant,
}

#[derive(Default)]
pub(super) struct DeviceState {
    pub(super) ws: Option<cuda::Workspace>,
    pub(super) resident: Vec<Resident>,
    pub(super) matrices: Vec<ResidentMatrices>,
    /// The device's lane (deadline work beside the bulk partition), not the
    /// device's own state.
    pub(super) lane: bool,
}

impl DeviceState {
    /// Device bytes held here: the workspace and the resident sets (the staging
    /// buffers are counted by `Staging`).
    pub(super) fn reserved(&self) -> u64 {
        self.ws.as_ref().map_or(0, |w| ws_bytes(w.lg))
            + self.resident.iter().map(|r| r.bytes).sum::<u64>()
            + self.matrices.iter().map(|m| m.bytes).sum::<u64>()
    }
}

/// The workspace of a 2^lg domain without its staging buffer.
pub(super) fn ws_bytes(lg: u32) -> u64 {
    device_workspace_bytes(lg) - device_staging_bytes(lg)
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) errors: AtomicU64,
    pub(super) oom: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) recovered: AtomicU64,
    /// Partitions moved elsewhere after a sticky error here.
    pub(super) moved: AtomicU64,
    /// Mirror of `DeviceState::reserved`, readable without the device lock.
    pub(super) reserved: AtomicU64,
    /// The same for the device's lane.
    pub(super) lane_reserved: AtomicU64,
    pub(super) resident_sets: AtomicUsize,
    /// log2 of the domain the device's own workspace holds (0: none yet), so that
    /// staging leaves room for the workspace a partition will need to run.
    pub(super) ws_lg: AtomicU32,
}

/// One device: the VRAM budget every device buffer is reserved from, and
/// counters. Its state (one partition at a time) and health are in
/// `CudaBackend::slots`, at the same index.
pub(super) struct Device {
    pub(super) info: DeviceInfo,
    pub(super) budget: u64,
    pub(super) counters: Counters,
    /// Yield points between the bulk work here and a deadline partition in the
    /// lane (`gate.rs`).
    pub(super) gate: Gate,
}

impl Device {
    pub(super) fn publish(&self, st: &DeviceState) {
        self.publish_with(st, 0);
    }

    /// [`Device::publish`] with `pending` bytes more: an allocation under way
    /// (a parameter set uploading for seconds), which staging must not take.
    pub(super) fn publish_with(&self, st: &DeviceState, pending: u64) {
        if st.lane {
            self.counters.lane_reserved.store(st.reserved() + pending, Ordering::Relaxed);
        } else {
            self.counters.reserved.store(st.reserved() + pending, Ordering::Relaxed);
            self.counters.resident_sets.store(st.resident.len(), Ordering::Relaxed);
            self.counters.ws_lg.store(st.ws.as_ref().map_or(0, |w| w.lg), Ordering::Relaxed);
        }
    }

    /// Device bytes a partition of domain 2^lg still needs beside its staging
    /// buffer: the workspace, where the device's own is smaller or absent.
    pub(super) fn workspace_to_come(&self, lg: u32) -> u64 {
        if self.counters.ws_lg.load(Ordering::Relaxed) >= lg {
            0
        } else {
            ws_bytes(lg)
        }
    }

    /// What the device's other state (the lane for the device's own, and the
    /// other way round) holds, which `st`'s allocations must leave room for.
    pub(super) fn others(&self, st: &DeviceState) -> u64 {
        let c = &self.counters;
        if st.lane {
            c.reserved.load(Ordering::Relaxed)
        } else {
            c.lane_reserved.load(Ordering::Relaxed)
        }
    }

    /// The yield points `st`'s work calls at: the device's own work yields to the
    /// lane's, which yields to nothing.
    pub(super) fn gate_for(&self, st: &DeviceState) -> Option<&Gate> {
        (!st.lane).then_some(&self.gate)
    }
}

impl CudaBackend {
    /// Makes `rec`'s matrices resident on the device if they fit beside what is
    /// there (a free second staging buffer gives way; resident parameters and
    /// other matrices do not: without matrices a partition's a, b, c are computed
    /// on the host, without parameters every MSM streams its points). Returns the
    /// index in `st.matrices`.
    pub(super) fn ensure_matrices(
        &self,
        dev: usize,
        st: &mut DeviceState,
        rec: &std::sync::Arc<dyn cuzk_core::Recorded>,
    ) -> Option<usize> {
        st.matrices.retain(|m| m.key.strong_count() > 0);
        let key = Arc::downgrade(rec);
        if let Some(i) = st.matrices.iter().position(|m| Weak::ptr_eq(&m.key, &key)) {
            st.matrices[i].last_used = Instant::now();
            return Some(i);
        }
        let view = rec.view();
        let need = cuda::ResidentR1cs::bytes(&view);
        let device = &self.devices[dev];
        loop {
            let free = cuda::info(device.info.index).map(|i| i.free_mem as u64).unwrap_or(0);
            if st.reserved() + device.others(st) + self.staging.bytes(dev) + need <= device.budget
                && free >= need + self.opts.vram_margin
            {
                break;
            }
            if !st.lane && self.staging.trim(dev, 1) > 0 {
                continue;
            }
            // Matrices of another circuit, least recently used first.
            let Some(lru) = st.matrices.iter().enumerate().min_by_key(|(_, m)| m.last_used).map(|(i, _)| i) else {
                warn!(device = dev, need, free, "constraint matrices do not fit in device memory; a, b, c on the host");
                return None;
            };
            let m = st.matrices.swap_remove(lru);
            info!(device = dev, bytes = m.bytes, "evicting resident constraint matrices");
        }
        let t = Instant::now();
        // Counted before the upload, as a parameter set's is (`make_resident`).
        device.publish_with(st, need);
        match cuda::ResidentR1cs::new(device.info.index, &view, device.gate_for(st)) {
            Ok(r1cs) => {
                info!(
                    device = dev,
                    bytes = need,
                    ms = t.elapsed().as_millis() as u64,
                    "constraint matrices resident on device"
                );
                st.matrices.push(ResidentMatrices { key, r1cs, bytes: need, last_used: Instant::now() });
                device.publish(st);
                Some(st.matrices.len() - 1)
            }
            Err((code, msg)) => {
                device.publish(st);
                warn!(device = dev, code, error = %msg, "could not make constraint matrices resident; a, b, c on the host");
                None
            }
        }
    }

    fn resident_bytes(srs: &ProvingKey) -> u64 {
        device_resident_bytes(srs.h.len(), srs.l.len(), srs.a.len(), srs.b_g1.len(), srs.b_g2.len())
    }

    /// Makes `srs` resident on the device if it fits (evicting the least
    /// recently used sets if needed); returns its index in `st.resident`.
    pub(super) fn ensure_resident(&self, dev: usize, st: &mut DeviceState, srs: &ProvingKey) -> Option<usize> {
        self.make_resident(dev, st, srs, false)
    }

    /// `ensure_resident`, or with `prefetch` the same without evicting: it also
    /// leaves room for the workspace of `srs`'s domain, so that a prefetch never
    /// costs a running job its resident set or the next partition its workspace.
    pub(super) fn make_resident(
        &self,
        dev: usize,
        st: &mut DeviceState,
        srs: &ProvingKey,
        prefetch: bool,
    ) -> Option<usize> {
        st.resident.retain(|r| r.key.strong_count() > 0);
        let key = Arc::downgrade(&srs.h);
        if let Some(i) = st.resident.iter().position(|r| r.key.ptr_eq(&key)) {
            st.resident[i].last_used = Instant::now();
            return Some(i);
        }
        if !self.opts.srs_resident {
            return None;
        }
        let mut need = Self::resident_bytes(srs);
        let device = &self.devices[dev];
        let d = &device.info;
        let lg = srs.domain_size().trailing_zeros();
        let fits = |st: &DeviceState, need: u64| {
            let staged = self.staging.bytes(dev);
            let ws_to_come = if !prefetch {
                0
            } else {
                let ws = if st.ws.as_ref().is_none_or(|w| w.lg < lg) { ws_bytes(lg) } else { 0 };
                let buffer = device_staging_bytes(lg);
                ws + if staged < buffer { buffer } else { 0 }
            };
            // Within this device's budget, and within what the driver says is
            // free now (other processes share the device).
            let free = cuda::info(d.index).map(|i| i.free_mem as u64).unwrap_or(0);
            (
                st.reserved() + device.others(st) + staged + need + ws_to_come <= device.budget
                    && free >= need + ws_to_come + self.opts.vram_margin,
                free,
            )
        };
        // H at the configured window width where its larger buckets and
        // temporaries fit as things stand (nothing is evicted for them; the set
        // is charged them), sppark's width otherwise. Room is left for the
        // recording's matrices still to come: a, b, c on the device are worth
        // far more (1.43x a 32GiB stream) than the wider windows (~6%).
        let mut h_wbits =
            if srs.h.len() >= self.opts.msm_h_window_min_points { self.opts.msm_h_window_bits } else { 0 };
        if h_wbits != 0 {
            let extra = msm_h_window_extra_bytes(srs.h.len(), h_wbits);
            let matrices_to_come =
                if self.opts.abc_on_device && st.matrices.is_empty() { device_matrices_allowance(lg) } else { 0 };
            if fits(st, need + extra + matrices_to_come).0 {
                need += extra;
            } else {
                info!(device = dev, extra, h_window_bits = h_wbits, "no room for H's wider windows; sppark's width");
                h_wbits = 0;
            }
        }
        loop {
            let (room, free) = fits(st, need);
            if room {
                break;
            }
            if prefetch {
                return None;
            }
            // A second staging buffer yields to resident parameters: streaming
            // the points costs far more than uploading in line. (Not to the lane's:
            // the buffers are the bulk work's.)
            if !st.lane && self.staging.trim(dev, 1) > 0 {
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
        // Counted before the upload (seconds at 32GiB): StagePcie, which reads the
        // published bytes without this lock, must not fill the room meanwhile
        // (a second staging buffer there made the next partition's workspace evict
        // the set just uploaded, and every partition after it streamed the points).
        device.publish_with(st, need);
        match cuda::ResidentSrs::new(
            d.index,
            &srs.h,
            &srs.l,
            &srs.a,
            &srs.b_g1,
            &srs.b_g2,
            h_wbits,
            device.gate_for(st),
        ) {
            Ok(r) => {
                info!(
                    device = dev,
                    bytes = need,
                    h_window_bits = h_wbits,
                    ms = t.elapsed().as_millis() as u64,
                    "parameters resident on device"
                );
                st.resident.push(Resident { key, srs: r, bytes: need, last_used: Instant::now() });
                device.publish(st);
                Some(st.resident.len() - 1)
            }
            Err((code, msg)) => {
                device.publish(st);
                warn!(device = dev, code, error = %msg, "could not make parameters resident; streaming them");
                None
            }
        }
    }
}

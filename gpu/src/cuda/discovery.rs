//! Finding the CUDA backend's devices: the driver probed first (a host without one
//! gets an error, not a crash), the configured devices checked, each device's VRAM
//! budget set from its free memory at start, the pinned pool created, every device
//! warmed up on a background thread.

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc, Mutex,
    },
    time::Instant,
};

use tracing::{info, warn};

use super::{
    device::{Counters, Device, DeviceState},
    CudaBackend, CudaOptions, DeviceInfo,
};
use crate::{ffi::cuda, health::Devices, pinned::PinnedPool, staging::Staging, GpuError};

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
            devices.push(Device { info, budget, counters: Counters::default(), gate: Default::default() });
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
        let staging = Staging::new(devices.len(), opts.device_buffers);
        let slots = Arc::new(Devices::watched(devices.iter().map(|_| DeviceState::default()), opts.device_timeout));
        // The watch's thread holds the backend's parts weakly: it ends with them.
        let (s, st, p) = (Arc::downgrade(&slots), Arc::downgrade(&staging), Arc::downgrade(&pinned));
        let indices: Vec<usize> = devices.iter().map(|d| d.info.index).collect();
        slots.watch().spawn(move |h| {
            if let (Some(s), Some(st), Some(p)) = (s.upgrade(), st.upgrade(), p.upgrade()) {
                CudaBackend::hung(&s, &st, &p, &indices, h);
            }
        });
        let lanes = devices.iter().map(|_| Mutex::new(DeviceState { lane: true, ..DeviceState::default() })).collect();
        Ok(CudaBackend {
            lanes,
            staging,
            slots,
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
}

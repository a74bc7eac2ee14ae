//! Backends that misbehave on purpose, for tests of what is built on [`Backend`]:
//! the engine's stages, the daemon, a scheduler embedding either.
//!
//! [`HangingBackend`] is one simulated device whose chosen execution never returns
//! until [`HangingBackend::release`], watched by a [`DeviceWatch`] as the CUDA
//! backend's devices are: once the watch finds it hung the device is retired and
//! every later execution runs on the CPU, which is what the CUDA backend does when
//! no device is left. The proofs it makes are [`CpuBackend`]'s, so they verify.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Condvar, Mutex,
    },
    time::Duration,
};

use cuzk_srs::ProvingKey;

use crate::{
    cpu::CpuBackend,
    watchdog::{DeviceWatch, Hung},
    Backend, DeviceHealth, DeviceStats, GpuError, HostPartition, MsmResults, UploadedPartition,
};

/// One simulated device whose `hang_at`-th execution (counting from 0) hangs in its
/// "device call" until [`release`](Self::release).
pub struct HangingBackend {
    watch: Arc<DeviceWatch>,
    retired: Arc<Mutex<Option<String>>>,
    gate: (Mutex<bool>, Condvar),
    executions: AtomicUsize,
    hang_at: usize,
}

impl HangingBackend {
    /// The device is found hung once a call has run for `limit` (the CUDA backend's
    /// `device_timeout_secs`).
    pub fn new(limit: Duration, hang_at: usize) -> Arc<Self> {
        let watch = Arc::new(DeviceWatch::new(1, Some(limit)));
        let retired = Arc::new(Mutex::new(None));
        let r = retired.clone();
        watch.spawn(move |h: Hung| *r.lock().unwrap_or_else(|p| p.into_inner()) = Some(h.reason));
        Arc::new(HangingBackend {
            watch,
            retired,
            gate: (Mutex::new(false), Condvar::new()),
            executions: AtomicUsize::new(0),
            hang_at,
        })
    }

    /// Lets the stuck call return (its result is then whatever the CPU computes).
    pub fn release(&self) {
        *self.gate.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.gate.1.notify_all();
    }

    /// Why the device was retired, once the watch found it hung.
    pub fn hung(&self) -> Option<String> {
        self.retired.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Backend for HangingBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn upload(&self, host: HostPartition) -> Result<UploadedPartition, GpuError> {
        CpuBackend.upload(host)
    }

    fn execute(&self, uploaded: UploadedPartition, srs: &ProvingKey, with_b_g2: bool) -> Result<MsmResults, GpuError> {
        if self.hung().is_none() {
            let _call = self.watch.begin(0);
            if self.executions.fetch_add(1, Ordering::SeqCst) == self.hang_at {
                let (open, cv) = &self.gate;
                let _open = cv.wait_while(open.lock().unwrap_or_else(|p| p.into_inner()), |o| !*o);
            }
        }
        CpuBackend.execute(uploaded, srs, with_b_g2)
    }

    fn device_stats(&self) -> Vec<DeviceStats> {
        let reason = self.hung();
        let health = if reason.is_some() { DeviceHealth::Retired } else { DeviceHealth::Healthy };
        vec![DeviceStats { device: 0, health, retired_reason: reason, ..Default::default() }]
    }
}

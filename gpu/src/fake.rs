//! Backends that misbehave on purpose, for tests of what is built on [`Backend`]:
//! the engine's stages, the daemon, a scheduler embedding either.
//!
//! [`HangingBackend`] is one simulated device whose chosen execution never returns
//! until [`HangingBackend::release`], watched by a [`DeviceWatch`] as the CUDA
//! backend's devices are: once the watch finds it hung the device is retired and
//! every later execution runs on the CPU, which is what the CUDA backend does when
//! no device is left. The proofs it makes are [`CpuBackend`]'s, so they verify.
//!
//! [`FakeDevices`] is several simulated devices, handed partitions and failed over
//! by the CUDA backend's own code (`Devices::acquire`, `failover`), each computing
//! on the CPU: for tests of a stream over more than one device without GPUs.

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
    health::{failover, take_injected_fault, Devices},
    watchdog::{DeviceWatch, Hung},
    Backend, DeviceHealth, DeviceStats, GpuError, HostPartition, InjectedFault, MsmResults, UploadedPartition,
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

/// Simulated devices: partitions go to them as the CUDA backend hands them out (a
/// free healthy device, an urgent caller first, failover after a sticky error), and
/// each computes on the CPU, so its proofs verify. A device can be held shut (its
/// executions wait until [`open`](Self::open)), and a sticky error injected into an
/// execution (`FaultKind::DeviceError`, `InjectedFault::Sticky`) retires the device
/// it ran on and moves the partition to another, as on the CUDA backend.
pub struct FakeDevices {
    devices: Devices<()>,
    shut: Vec<(Mutex<bool>, Condvar)>,
    executed: Vec<AtomicUsize>,
    moved: Vec<AtomicUsize>,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

impl FakeDevices {
    /// `n` healthy devices, every one open.
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(FakeDevices {
            devices: Devices::watched((0..n).map(|_| ()), None),
            shut: (0..n).map(|_| (Mutex::new(false), Condvar::new())).collect(),
            executed: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            moved: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            running: AtomicUsize::new(0),
            most_at_once: AtomicUsize::new(0),
        })
    }

    /// Device `i`'s next executions wait (holding the device) until [`open`](Self::open).
    pub fn shut(&self, i: usize) {
        *self.shut[i].0.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    /// Lets device `i`'s executions run.
    pub fn open(&self, i: usize) {
        *self.shut[i].0.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.shut[i].1.notify_all();
    }

    /// Executions each device has started (a waiting one counts).
    pub fn executed(&self) -> Vec<usize> {
        self.executed.iter().map(|c| c.load(Ordering::SeqCst)).collect()
    }

    /// The most executions that ran at once, over all devices.
    pub fn most_at_once(&self) -> usize {
        self.most_at_once.load(Ordering::SeqCst)
    }

    fn attempt(
        &self,
        dev: usize,
        host: &HostPartition,
        srs: &ProvingKey,
        with_b_g2: bool,
        fault: &mut Option<InjectedFault>,
    ) -> Result<MsmResults, GpuError> {
        self.executed[dev].fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        struct Done<'a>(&'a AtomicUsize);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _done = Done(&self.running);
        let (shut, cv) = &self.shut[dev];
        drop(cv.wait_while(shut.lock().unwrap_or_else(|p| p.into_inner()), |s| *s));
        if fault.take() == Some(InjectedFault::Sticky) {
            return Err(GpuError::simulated_sticky(dev));
        }
        CpuBackend.execute(CpuBackend.upload(host.clone())?, srs, with_b_g2)
    }
}

impl Backend for FakeDevices {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn upload(&self, host: HostPartition) -> Result<UploadedPartition, GpuError> {
        CpuBackend.upload(host)
    }

    fn execute(&self, uploaded: UploadedPartition, srs: &ProvingKey, with_b_g2: bool) -> Result<MsmResults, GpuError> {
        let mut fault = take_injected_fault();
        let urgent = uploaded.is_urgent();
        let host = &uploaded.host;
        failover(
            &self.devices,
            None,
            urgent,
            |dev, _| self.attempt(dev, host, srs, with_b_g2, &mut fault),
            |_, e| e.cuda_class() == Some(crate::ErrorClass::Sticky),
            |dev, _, _| {
                self.moved[dev].fetch_add(1, Ordering::SeqCst);
            },
            || CpuBackend.execute(CpuBackend.upload(host.clone())?, srs, with_b_g2),
        )
    }

    fn device_stats(&self) -> Vec<DeviceStats> {
        (0..self.shut.len())
            .map(|i| {
                let (calls, held) = self.devices.held_for(i);
                DeviceStats {
                    device: i,
                    health: self.devices.health(i),
                    retired_reason: self.devices.retired_reason(i).map(str::to_owned),
                    partitions_moved: self.moved[i].load(Ordering::SeqCst) as u64,
                    calls,
                    held,
                    ..Default::default()
                }
            })
            .collect()
    }
}

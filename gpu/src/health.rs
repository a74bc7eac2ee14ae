//! Device health: which CUDA errors leave a device unusable, handing work only to
//! devices that are not, and where a partition goes when its device fails.
//!
//! A sticky error (an illegal address, a kernel fault, an uncorrectable ECC error)
//! poisons the device's CUDA context: every later call on it returns the same error,
//! and CUDA's documentation says that "the process must be terminated and
//! relaunched". So a device that reports one is retired for the rest of the process:
//! no more work goes to it, the partition that failed runs again on another healthy
//! device, and when none is left, on the CPU ([`failover`]).
//!
//! Why no `cudaDeviceReset`: sppark keeps each device's streams (`gpu_t`) and NTT
//! twiddle tables in process-wide statics, created once and never rebuilt; a reset
//! would leave them dangling (later NTTs would read freed memory), and the pinned
//! host pool is allocated through one device's context, which a reset would free
//! under the partitions using it. Restarting the process is the reset: when every
//! device is retired, [`no_device_left`] says so, for a daemon to exit non-zero and
//! let its supervisor restart it.

use std::{
    cell::Cell,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Condvar, Mutex, MutexGuard, OnceLock, TryLockError,
    },
    time::{Duration, Instant},
};

use crate::{
    watchdog::{CallGuard, DeviceWatch},
    DeviceStats, GpuError,
};

/// What a failed CUDA call means for its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Out of device memory: the backend frees what the device caches and retries
    /// once on the same device.
    OutOfMemory,
    /// The device's context is unusable: the device is retired and the partition
    /// retried elsewhere.
    Sticky,
    /// Anything else (an invalid argument, a launch configuration): the partition
    /// fails; the device goes on.
    Other,
}

/// `cudaError_t` values (CUDA 13, driver_types.h) after which CUDA says "the process
/// must be terminated and relaunched" (or the context "cannot be used"), plus
/// uncorrectable ECC (214) and NVLink (220) errors.
const STICKY: [i32; 15] = [
    214, // cudaErrorECCUncorrectable
    220, // cudaErrorNvlinkUncorrectable
    226, // cudaErrorContained
    700, // cudaErrorIllegalAddress
    702, // cudaErrorLaunchTimeout
    710, // cudaErrorAssert
    714, // cudaErrorHardwareStackError
    715, // cudaErrorIllegalInstruction
    716, // cudaErrorMisalignedAddress
    717, // cudaErrorInvalidAddressSpace
    718, // cudaErrorInvalidPc
    719, // cudaErrorLaunchFailure
    721, // cudaErrorTensorMemoryLeak
    810, // cudaErrorMpsClientTerminated
    911, // cudaErrorExternalDevice
];

/// The class of a CUDA error code. sppark reports a failed call as the negated
/// `cudaError_t`, our own C code as the value itself: both signs are accepted.
pub fn classify(code: i32) -> ErrorClass {
    let code = code.saturating_abs();
    if code == 2 {
        ErrorClass::OutOfMemory // cudaErrorMemoryAllocation
    } else if STICKY.contains(&code) {
        ErrorClass::Sticky
    } else {
        ErrorClass::Other
    }
}

impl GpuError {
    /// The sticky error [`InjectedFault::Sticky`] simulates on device `dev`: an
    /// illegal address, as a faulting kernel reports it.
    pub(crate) fn simulated_sticky(dev: usize) -> GpuError {
        GpuError::Cuda {
            op: "execute",
            device: dev,
            code: 700,
            msg: "an illegal memory access was encountered (simulated by the test hook)".into(),
            out_of_memory: false,
        }
    }

    /// How a CUDA failure affects its device; `None` for errors that are not CUDA
    /// failures (shapes, budgets).
    pub fn cuda_class(&self) -> Option<ErrorClass> {
        match self {
            GpuError::Cuda { out_of_memory: true, .. } => Some(ErrorClass::OutOfMemory),
            GpuError::Cuda { code, .. } => Some(classify(*code)),
            _ => None,
        }
    }
}

/// Whether a device still takes work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceHealth {
    #[default]
    Healthy,
    /// Retired after a sticky CUDA error or a device call that never returned
    /// (`watchdog.rs`), for the rest of the process.
    Retired,
}

/// Whether the backend had devices and every one of them is retired: its partitions
/// now run on the CPU, and only a restart of the process recovers the devices. A
/// daemon should exit non-zero (after letting the jobs in flight finish) so that its
/// supervisor restarts it.
pub fn no_device_left(devices: &[DeviceStats]) -> bool {
    !devices.is_empty() && devices.iter().all(|d| d.health == DeviceHealth::Retired)
}

/// A device's state behind its lock (one partition at a time), and its health.
struct Slot<T> {
    state: Mutex<T>,
    /// Set once, when the device is retired: why.
    retired: OnceLock<String>,
    held: Held,
}

/// How often and how long a device was held by a call (a partition, a parameter
/// upload): with several devices, the share of the wall each was held says which
/// one waits for work (docs/gpu.md).
#[derive(Default)]
struct Held {
    calls: AtomicU64,
    ns: AtomicU64,
}

/// The devices of a backend, by index; work is handed only to healthy ones.
///
/// Deadline work goes first: while an urgent caller waits in [`Devices::acquire`],
/// bulk callers do not take a device, so the next device freed (after the PoRep
/// partition running on it, ~1.8 s at 32GiB) goes to the deadline partition.
pub(crate) struct Devices<T> {
    slots: Vec<Slot<T>>,
    /// Each device's call in progress (a device is held for one), against the
    /// device timeout.
    watch: std::sync::Arc<DeviceWatch>,
    next: AtomicUsize,
    /// Urgent callers waiting in `acquire`, and the signal of a device freed.
    urgent: Mutex<usize>,
    freed: Condvar,
}

/// A device's state, held; dropping it wakes the callers waiting for a device.
/// While held, the device is in a call the watchdog times.
pub(crate) struct DeviceGuard<'a, T> {
    guard: Option<MutexGuard<'a, T>>,
    _call: CallGuard<'a>,
    freed: &'a Condvar,
    held: &'a Held,
    since: Instant,
}

impl<T> std::ops::Deref for DeviceGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl<T> std::ops::DerefMut for DeviceGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl<T> Drop for DeviceGuard<'_, T> {
    fn drop(&mut self) {
        self.held.calls.fetch_add(1, Ordering::Relaxed);
        self.held.ns.fetch_add(u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        drop(self.guard.take());
        self.freed.notify_all();
    }
}

/// Counts an urgent caller while it waits.
struct UrgentWaiting<'a>(&'a Mutex<usize>, &'a Condvar);

impl Drop for UrgentWaiting<'_> {
    fn drop(&mut self) {
        *lock(self.0) -= 1;
        // Bulk callers held back by this one may go now.
        self.1.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T> Devices<T> {
    /// Devices without a call time limit.
    #[cfg(test)]
    pub(crate) fn new(states: impl IntoIterator<Item = T>) -> Self {
        Self::watched(states, None)
    }

    /// Devices whose calls may take up to `limit` each before the device is
    /// found hung ([`Devices::watch`] says which are).
    pub(crate) fn watched(states: impl IntoIterator<Item = T>, limit: Option<Duration>) -> Self {
        let slots: Vec<Slot<T>> = states
            .into_iter()
            .map(|s| Slot { state: Mutex::new(s), retired: OnceLock::new(), held: Held::default() })
            .collect();
        let watch = std::sync::Arc::new(DeviceWatch::new(slots.len(), limit));
        Devices { slots, watch, next: AtomicUsize::new(0), urgent: Mutex::new(0), freed: Condvar::new() }
    }

    /// The watch over the devices' calls.
    pub(crate) fn watch(&self) -> &std::sync::Arc<DeviceWatch> {
        &self.watch
    }

    fn held<'a>(&'a self, i: usize, g: MutexGuard<'a, T>) -> DeviceGuard<'a, T> {
        DeviceGuard {
            guard: Some(g),
            _call: self.watch.begin(i),
            freed: &self.freed,
            held: &self.slots[i].held,
            since: Instant::now(),
        }
    }

    /// Calls that held device `i` (each ended), and how long they held it in all.
    pub(crate) fn held_for(&self, i: usize) -> (u64, Duration) {
        let h = &self.slots[i].held;
        (h.calls.load(Ordering::Relaxed), Duration::from_nanos(h.ns.load(Ordering::Relaxed)))
    }

    pub(crate) fn health(&self, i: usize) -> DeviceHealth {
        if self.slots[i].retired.get().is_some() {
            DeviceHealth::Retired
        } else {
            DeviceHealth::Healthy
        }
    }

    /// Why device `i` was retired.
    pub(crate) fn retired_reason(&self, i: usize) -> Option<&str> {
        self.slots[i].retired.get().map(String::as_str)
    }

    /// Retires device `i`; false if it already was.
    pub(crate) fn retire(&self, i: usize, reason: String) -> bool {
        self.slots[i].retired.set(reason).is_ok()
    }

    fn healthy(&self) -> Vec<usize> {
        (0..self.slots.len()).filter(|&i| self.health(i) == DeviceHealth::Healthy).collect()
    }

    /// How many devices are healthy.
    pub(crate) fn healthy_count(&self) -> usize {
        self.healthy().len()
    }

    /// The first healthy device.
    pub(crate) fn first_healthy(&self) -> Option<usize> {
        self.healthy().first().copied()
    }

    /// Device `i`'s state if it is healthy and free now.
    pub(crate) fn try_lock_healthy(&self, i: usize) -> Option<DeviceGuard<'_, T>> {
        let g = match self.slots[i].state.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        (self.health(i) == DeviceHealth::Healthy).then(|| self.held(i, g))
    }

    /// Whether device `i` is healthy and nobody holds it now (a glance: it may be
    /// taken the next moment).
    pub(crate) fn is_free(&self, i: usize) -> bool {
        self.health(i) == DeviceHealth::Healthy && self.slots[i].state.try_lock().is_ok()
    }

    /// Device `i`'s state, waiting for it, whatever its health (statistics, drop).
    #[cfg(test)]
    pub(crate) fn lock(&self, i: usize) -> MutexGuard<'_, T> {
        lock(&self.slots[i].state)
    }

    /// A free healthy device (`prefer` first, when it is healthy and free), or (all
    /// busy) the first healthy one freed, waited for; `None` when every device is
    /// retired. Never a retired device: a device that fails fast is idle more often
    /// than the others, and would otherwise draw most of the work. An `urgent`
    /// caller goes before every bulk caller (type docs).
    pub(crate) fn acquire(&self, prefer: Option<usize>, urgent: bool) -> Option<(usize, DeviceGuard<'_, T>)> {
        let _waiting = urgent.then(|| {
            *lock(&self.urgent) += 1;
            UrgentWaiting(&self.urgent, &self.freed)
        });
        loop {
            let healthy = self.healthy();
            if healthy.is_empty() {
                return None;
            }
            let waiting = lock(&self.urgent);
            // A bulk caller leaves every device to urgent ones while any waits.
            if urgent || *waiting == 0 {
                drop(waiting);
                let prefer = prefer.filter(|p| healthy.contains(p));
                if let Some(g) = prefer.and_then(|p| self.try_lock_healthy(p)) {
                    return Some((prefer.unwrap_or_default(), g));
                }
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                for k in 0..healthy.len() {
                    let i = healthy[(start + k) % healthy.len()];
                    if let Some(g) = self.try_lock_healthy(i) {
                        return Some((i, g));
                    }
                }
                // Freed devices signal; a guard taken by `try_lock_healthy`
                // elsewhere (prefetch) does not, hence the timeout.
                let waiting = lock(&self.urgent);
                let _ = self.freed.wait_timeout(waiting, Duration::from_millis(5));
            } else {
                let _ = self.freed.wait_timeout(waiting, Duration::from_millis(5));
            }
        }
    }
}

/// Runs one partition on the devices: `attempt` on a healthy device, `prefer` (the
/// device its inputs were staged on) unless it is busy and another is free; the
/// attempt retries an out-of-memory failure itself. On an error that `sticky` says poisoned the
/// device, the device is retired, `retired` cleans up after it (its lock still
/// held), and the partition runs again on another healthy device, once. With no
/// healthy device left, or after a second sticky failure, it runs on the CPU
/// (`cpu`). Other errors fail the partition as they are.
///
/// At most two devices are tried: a partition that poisons two in a row probably
/// makes the kernels fault by itself, and is not handed a third.
pub(crate) fn failover<T, R>(
    devices: &Devices<T>,
    prefer: Option<usize>,
    urgent: bool,
    mut attempt: impl FnMut(usize, &mut T) -> Result<R, GpuError>,
    mut sticky: impl FnMut(usize, &GpuError) -> bool,
    mut retired: impl FnMut(usize, &mut T, &GpuError),
    cpu: impl FnOnce() -> Result<R, GpuError>,
) -> Result<R, GpuError> {
    const DEVICE_ATTEMPTS: usize = 2;
    for _ in 0..DEVICE_ATTEMPTS {
        let Some((dev, mut st)) = devices.acquire(prefer, urgent) else { break };
        match attempt(dev, &mut *st) {
            Ok(r) => return Ok(r),
            Err(e) if sticky(dev, &e) => {
                devices.retire(dev, e.to_string());
                retired(dev, &mut *st, &e);
            }
            Err(e) => return Err(e),
        }
    }
    cpu()
}

/// A device failure injected by tests and drills (see [`with_injected_fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedFault {
    /// A sticky error, simulated: the execution fails as an illegal address would,
    /// before it touches the device, and the device is retired (though it works).
    /// Safe to use beside other work on the same devices.
    Sticky,
    /// A real sticky error: a kernel writes to an invalid device address. The
    /// device's CUDA context stays unusable for the rest of the process (other
    /// backends in it lose the device too): use it only in a process of its own.
    IllegalAddress,
    /// A device call that does not return, simulated: the execution holds the
    /// device, touching nothing, until the watchdog finds it hung (and a while
    /// after: a hung call that returns late), then fails. Without a device
    /// timeout it never ends.
    Hang,
}

thread_local! {
    static INJECTED: Cell<Option<InjectedFault>> = const { Cell::new(None) };
}

/// Runs `f` with `fault` injected into the first attempt of the first CUDA backend
/// execution `f` makes on this thread (the CPU backend ignores it). Thread-scoped,
/// so that it hits exactly that execution and no test running beside it. Tests and
/// drills only.
pub fn with_injected_fault<R>(fault: InjectedFault, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<InjectedFault>);
    impl Drop for Restore {
        fn drop(&mut self) {
            INJECTED.set(self.0);
        }
    }
    let _restore = Restore(INJECTED.replace(Some(fault)));
    f()
}

/// The fault injected on this thread, taken (it applies once).
#[cfg_attr(not(cuzk_cuda), allow(dead_code))]
pub(crate) fn take_injected_fault() -> Option<InjectedFault> {
    INJECTED.take()
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Arc, Barrier},
        time::Duration,
    };

    use super::*;

    fn cuda(code: i32) -> GpuError {
        GpuError::Cuda { op: "execute", device: 0, code, msg: "test".into(), out_of_memory: code.abs() == 2 }
    }

    /// Each call that held a device is counted with the time it held it, on that
    /// device only; a device taken for a look and not held counts nothing.
    #[test]
    fn a_device_held_by_calls_counts_them_and_their_time() {
        let d = Devices::new([(), ()]);
        for _ in 0..2 {
            let (i, g) = d.acquire(Some(1), false).unwrap();
            assert_eq!(i, 1);
            std::thread::sleep(Duration::from_millis(20));
            drop(g);
        }
        let (calls, held) = d.held_for(1);
        assert_eq!(calls, 2);
        assert!(held >= Duration::from_millis(40), "{held:?}");
        assert_eq!(d.held_for(0), (0, Duration::ZERO));
        assert!(d.is_free(0));
        assert_eq!(d.held_for(0).0, 0, "a glance holds nothing");
    }

    #[test]
    fn classifies_cuda_errors() {
        // sppark negates the code; our own C code does not.
        for code in [700, -700, 719, -719, 214, 716, 702, 911] {
            assert_eq!(classify(code), ErrorClass::Sticky, "{code}");
        }
        assert_eq!(classify(-2), ErrorClass::OutOfMemory);
        assert_eq!(classify(2), ErrorClass::OutOfMemory);
        // Invalid value, launch out of resources, a C++ exception (-1), "no device".
        for code in [1, -1, 701, -701, 100, 0, i32::MIN] {
            assert_eq!(classify(code), ErrorClass::Other, "{code}");
        }
        assert_eq!(cuda(-700).cuda_class(), Some(ErrorClass::Sticky));
        assert_eq!(cuda(-2).cuda_class(), Some(ErrorClass::OutOfMemory));
        assert_eq!(cuda(1).cuda_class(), Some(ErrorClass::Other));
        let shape = GpuError::Shape { op: "msm", detail: "bad".into() };
        assert_eq!(shape.cuda_class(), None);
        assert_eq!(GpuError::VramBudget { device: 0, need: 2, budget: 1 }.cuda_class(), None);
    }

    #[test]
    fn acquire_skips_retired_devices() {
        let devs = Arc::new(Devices::new([0u32, 0, 0]));
        assert!(devs.retire(1, "illegal address".into()));
        assert!(!devs.retire(1, "again".into()), "retired once");
        assert_eq!(devs.health(1), DeviceHealth::Retired);
        assert_eq!(devs.retired_reason(1), Some("illegal address"));
        // Device 1 is free (it fails fast, so it is idle) but never handed out.
        for _ in 0..12 {
            let (i, _g) = devs.acquire(None, false).unwrap();
            assert_ne!(i, 1);
        }
        // All healthy ones busy: wait for one of them, never take the idle retired one.
        let g0 = devs.lock(0);
        let g2 = devs.lock(2);
        let d = devs.clone();
        let waiter = std::thread::spawn(move || d.acquire(None, false).map(|(i, _)| i));
        std::thread::sleep(Duration::from_millis(50));
        drop((g0, g2));
        let got = waiter.join().unwrap().unwrap();
        assert!(got == 0 || got == 2, "{got}");
        assert!(devs.try_lock_healthy(1).is_none(), "prefetch skips retired devices");
        assert!(devs.try_lock_healthy(0).is_some());
        assert_eq!(devs.first_healthy(), Some(0));
        assert_eq!(devs.healthy_count(), 2);
    }

    #[test]
    fn a_waiter_on_a_device_retired_meanwhile_picks_another() {
        let devs = Arc::new(Devices::new([0u32, 0]));
        let g0 = devs.lock(0);
        let g1 = devs.lock(1);
        let (d, b) = (devs.clone(), Arc::new(Barrier::new(2)));
        let b2 = b.clone();
        let waiter = std::thread::spawn(move || {
            b2.wait();
            d.acquire(None, false).map(|(i, _)| i)
        });
        b.wait();
        std::thread::sleep(Duration::from_millis(50));
        // Whichever the waiter queued on, retire device 0 and free it first.
        devs.retire(0, "launch failure".into());
        drop(g0);
        std::thread::sleep(Duration::from_millis(20));
        drop(g1);
        assert_eq!(waiter.join().unwrap(), Some(1));
    }

    /// A deadline partition waiting for a busy device gets it before a bulk one
    /// that was waiting first.
    #[test]
    fn an_urgent_caller_gets_the_device_before_waiting_bulk_callers() {
        let devs = Arc::new(Devices::new([0u32]));
        let (_, held) = devs.acquire(None, false).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |urgent: bool, name: &'static str| {
            let (d, o) = (devs.clone(), order.clone());
            std::thread::spawn(move || {
                let (_, mut g) = d.acquire(None, urgent).unwrap();
                o.lock().unwrap().push(name);
                *g += 1;
                std::thread::sleep(Duration::from_millis(20));
            })
        };
        let bulk = spawn(false, "bulk");
        std::thread::sleep(Duration::from_millis(50));
        let urgent = spawn(true, "urgent");
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
        bulk.join().unwrap();
        urgent.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["urgent", "bulk"]);
    }

    /// A partition stuck in a device call past the limit: the watch reports the
    /// device (with the stuck caller's signal fired), and once retired it is passed
    /// over although its lock is still held.
    #[test]
    fn a_device_found_hung_is_retired_and_passed_over_while_its_call_is_stuck() {
        let devs = Arc::new(Devices::watched([0u32, 0], Some(Duration::from_millis(30))));
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (told, heard) = std::sync::mpsc::channel();
        let d = devs.clone();
        let stuck = std::thread::spawn(move || {
            crate::watchdog::on_hang(
                move |r| told.send(r).unwrap(),
                || {
                    let (dev, _g) = d.acquire(Some(0), false).unwrap();
                    assert_eq!(dev, 0);
                    released.recv().unwrap();
                },
            )
        });
        let hung = loop {
            let found = devs.watch().check(|_| {});
            if let Some(h) = found.into_iter().next() {
                break h;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(hung.device, 0);
        assert_eq!(heard.recv().unwrap(), hung.reason, "the stuck caller is told why");
        assert!(devs.retire(hung.device, hung.reason.clone()));
        for _ in 0..4 {
            assert_eq!(devs.acquire(None, false).map(|(i, _)| i), Some(1));
        }
        devs.retire(1, "x".into());
        assert!(devs.acquire(None, true).is_none(), "no device left: the CPU");
        release.send(()).unwrap();
        stuck.join().unwrap();
        assert!(devs.retired_reason(0).unwrap().contains("hung"));
    }

    #[test]
    fn no_device_left_is_reported() {
        let devs = Devices::new([(), ()]);
        devs.retire(0, "x".into());
        assert!(devs.acquire(None, false).is_some());
        devs.retire(1, "y".into());
        assert!(devs.acquire(None, false).is_none());
        assert_eq!(devs.first_healthy(), None);
        let stats = |h: [DeviceHealth; 2]| {
            h.iter()
                .enumerate()
                .map(|(device, &health)| DeviceStats { device, health, ..Default::default() })
                .collect::<Vec<_>>()
        };
        assert!(!no_device_left(&stats([DeviceHealth::Healthy, DeviceHealth::Retired])));
        assert!(no_device_left(&stats([DeviceHealth::Retired, DeviceHealth::Retired])));
        assert!(!no_device_left(&[]), "a backend without devices (CPU) has not lost any");
    }

    #[test]
    fn acquire_prefers_the_staged_device_unless_another_is_free() {
        let devs = Arc::new(Devices::new([0u32, 0, 0]));
        for _ in 0..6 {
            assert_eq!(devs.acquire(Some(2), false).map(|(i, _)| i), Some(2), "free: the preferred one");
        }
        let g2 = devs.lock(2);
        let (other, g) = devs.acquire(Some(2), false).unwrap();
        assert_ne!(other, 2, "busy: a free one instead");
        drop(g);
        // All busy: wait for the preferred one, not the next in turn.
        let (g0, g1) = (devs.lock(0), devs.lock(1));
        let d = devs.clone();
        let waiter = std::thread::spawn(move || d.acquire(Some(2), false).map(|(i, _)| i));
        std::thread::sleep(Duration::from_millis(50));
        drop(g2);
        assert_eq!(waiter.join().unwrap(), Some(2));
        drop((g0, g1));
        // A retired preferred device is passed over.
        assert!(devs.retire(2, "illegal address".into()));
        assert_ne!(devs.acquire(Some(2), false).map(|(i, _)| i), Some(2));
    }

    /// Simulated devices: `fail[i]` is the error device i returns (None: works).
    /// Returns the result and the devices tried, "cpu" when it ran there.
    fn run(devs: &Devices<u32>, fail: &[Option<i32>]) -> (Result<&'static str, GpuError>, Vec<String>) {
        let mut tried = Vec::new();
        let r = failover(
            devs,
            None,
            false,
            |i, runs| {
                *runs += 1;
                tried.push(i.to_string());
                match fail[i] {
                    Some(code) => Err(cuda(code)),
                    None => Ok("gpu"),
                }
            },
            |_, e| e.cuda_class() == Some(ErrorClass::Sticky),
            |_, runs, _| *runs += 100,
            || Ok("cpu"),
        );
        (r, tried)
    }

    #[test]
    fn a_sticky_error_retires_the_device_and_retries_elsewhere() {
        let devs = Devices::new([0u32, 0]);
        // Device 0 (tried first) poisoned: retired, the partition runs on device 1.
        let (r, tried) = run(&devs, &[Some(-700), None]);
        assert_eq!(r.unwrap(), "gpu");
        assert_eq!(tried, ["0", "1"]);
        assert_eq!(devs.health(0), DeviceHealth::Retired);
        assert!(devs.retired_reason(0).unwrap().contains("code -700"));
        assert_eq!(*devs.lock(0), 101, "cleaned up once, under its lock");
        // Later partitions go to device 1 only.
        for _ in 0..4 {
            let (r, tried) = run(&devs, &[Some(-700), None]);
            assert_eq!((r.unwrap(), tried), ("gpu", vec!["1".to_string()]));
        }
        assert_eq!(*devs.lock(0), 101, "no work reached the retired device");
    }

    #[test]
    fn with_no_device_left_partitions_run_on_the_cpu() {
        let devs = Devices::new([0u32, 0]);
        // Both devices poisoned by the same partition: both retired, then the CPU.
        let (r, tried) = run(&devs, &[Some(719), Some(-700)]);
        assert_eq!(r.unwrap(), "cpu");
        assert_eq!(tried.len(), 2);
        assert!(devs.acquire(None, false).is_none());
        let (r, tried) = run(&devs, &[None, None]);
        assert_eq!((r.unwrap(), tried.len()), ("cpu", 0));
    }

    #[test]
    fn a_partition_is_not_handed_a_third_device() {
        let devs = Devices::new([0u32, 0, 0]);
        let (r, tried) = run(&devs, &[Some(-700), Some(-700), Some(-700)]);
        assert_eq!(r.unwrap(), "cpu");
        assert_eq!(tried.len(), 2);
        assert_eq!((0..3).filter(|&i| devs.health(i) == DeviceHealth::Retired).count(), 2);
    }

    #[test]
    fn other_errors_fail_the_partition_and_keep_the_device() {
        let devs = Devices::new([0u32]);
        let (r, tried) = run(&devs, &[Some(-1)]);
        assert!(matches!(r, Err(GpuError::Cuda { code: -1, .. })));
        assert_eq!(tried.len(), 1);
        assert_eq!(devs.health(0), DeviceHealth::Healthy);
        let (r, _) = run(&devs, &[Some(-2)]);
        assert!(matches!(r, Err(GpuError::Cuda { out_of_memory: true, .. })), "OOM is retried by the attempt itself");
        assert_eq!(devs.health(0), DeviceHealth::Healthy);
    }

    #[test]
    fn injected_faults_apply_once_on_their_thread() {
        assert_eq!(take_injected_fault(), None);
        let (inside, again) = with_injected_fault(InjectedFault::Sticky, || {
            let other = std::thread::spawn(take_injected_fault).join().unwrap();
            assert_eq!(other, None, "another thread sees nothing");
            (take_injected_fault(), take_injected_fault())
        });
        assert_eq!((inside, again), (Some(InjectedFault::Sticky), None));
        with_injected_fault(InjectedFault::IllegalAddress, || {});
        assert_eq!(take_injected_fault(), None, "cleared when the scope ends");
    }
}

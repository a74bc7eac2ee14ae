//! The device watchdog: a device call that does not return is found, the device is
//! retired, and the work waiting on the call is let go.
//!
//! A CUDA call on a wedged GPU (a kernel that never ends, a driver that stopped
//! answering) blocks its thread for good, and nothing can interrupt it. What can be
//! done is to stop depending on it: [`DeviceWatch`] notes when each device call
//! starts ([`DeviceWatch::begin`], held for the call); a call older than the limit
//! marks its device hung, once, which the backend turns into a retirement (no more
//! work goes there; partitions run on another device or the CPU). The caller that
//! waits on the stuck thread learns it through the signal it installed around the
//! work ([`on_hang`]): the stage runtime fails that partition with the reason and
//! goes on, leaving the thread, and what it holds, behind. A hung call that returns
//! later has its result dropped.
//!
//! The stuck thread keeps what it was given (the partition's buffers, its host
//! reservation): freeing memory a device may still read is the one thing worse than
//! leaking it. A restart of the process gets it back.

use std::{
    cell::RefCell,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

/// Tells whoever waits on a thread that the device call it made is hung; fires at
/// most once.
#[derive(Clone)]
pub struct HangSignal(Arc<Mutex<Option<Notify>>>);

/// What a [`HangSignal`] calls.
type Notify = Box<dyn FnOnce(String) + Send>;

impl HangSignal {
    fn new(notify: impl FnOnce(String) + Send + 'static) -> Self {
        HangSignal(Arc::new(Mutex::new(Some(Box::new(notify)))))
    }

    /// Calls the notification with `reason`, the first time only.
    pub fn fire(&self, reason: String) {
        let f = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(f) = f {
            f(reason);
        }
    }
}

thread_local! {
    static SIGNAL: RefCell<Option<HangSignal>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread with `notify` as its hang signal: a device call `f` makes
/// that the watchdog finds hung calls `notify` (once, from the watchdog's thread)
/// with the reason, while `f` is still stuck in it.
pub fn on_hang<R>(notify: impl FnOnce(String) + Send + 'static, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<HangSignal>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SIGNAL.with(|s| *s.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(SIGNAL.with(|s| s.borrow_mut().replace(HangSignal::new(notify))));
    f()
}

fn current_signal() -> Option<HangSignal> {
    SIGNAL.with(|s| s.borrow().clone())
}

/// A device call in progress.
struct Call {
    since: Instant,
    signal: Option<HangSignal>,
}

/// A device found hung by [`DeviceWatch::check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hung {
    pub device: usize,
    /// Why, for logs, errors and the device's retirement.
    pub reason: String,
}

/// When each device's call in progress started, against a time limit.
pub struct DeviceWatch {
    /// Per device, its call (the holder of its lock), then its lane's (a deadline
    /// partition run beside it, `gate.rs`): `2 * devices` slots.
    calls: Vec<Mutex<Option<Call>>>,
    /// Devices already reported hung (each once).
    hung: Vec<std::sync::OnceLock<()>>,
    limit: Option<Duration>,
}

/// A device call, noted from [`DeviceWatch::begin`] until dropped.
pub struct CallGuard<'a> {
    watch: &'a DeviceWatch,
    /// Its slot in `calls`.
    device: usize,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        *lock(&self.watch.calls[self.device]) = None;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DeviceWatch {
    /// A watch over `devices` devices; `limit` is how long one call may take
    /// (`None`: never hung).
    pub fn new(devices: usize, limit: Option<Duration>) -> Self {
        DeviceWatch {
            calls: (0..2 * devices).map(|_| Mutex::new(None)).collect(),
            hung: (0..devices).map(|_| std::sync::OnceLock::new()).collect(),
            limit: limit.filter(|l| !l.is_zero()),
        }
    }

    /// The limit in force.
    pub fn limit(&self) -> Option<Duration> {
        self.limit
    }

    /// Notes a call on `device` by this thread, with this thread's hang signal
    /// ([`on_hang`]), until the guard is dropped. One call per device at a time
    /// (the caller holds the device's lock).
    pub fn begin(&self, device: usize) -> CallGuard<'_> {
        self.begin_slot(device)
    }

    /// [`DeviceWatch::begin`] for a call in `device`'s lane (one at a time, under
    /// the lane's lock), beside the device's own call.
    pub fn begin_lane(&self, device: usize) -> CallGuard<'_> {
        self.begin_slot(self.hung.len() + device)
    }

    fn begin_slot(&self, slot: usize) -> CallGuard<'_> {
        *lock(&self.calls[slot]) = Some(Call { since: Instant::now(), signal: current_signal() });
        CallGuard { watch: self, device: slot }
    }

    /// Whether `device` was found hung.
    pub fn is_hung(&self, device: usize) -> bool {
        self.hung[device].get().is_some()
    }

    /// Devices whose call in progress has run past the limit, each reported once:
    /// handed to `report` (which retires the device) and only then the waiting
    /// caller's signal fired with the reason, so whoever hears of the failure finds
    /// the device already retired.
    pub fn check(&self, mut report: impl FnMut(&Hung)) -> Vec<Hung> {
        let Some(limit) = self.limit else { return Vec::new() };
        let n = self.hung.len();
        let mut found = Vec::new();
        for device in 0..n {
            let slots = [&self.calls[device], &self.calls[n + device]];
            let took =
                slots.iter().filter_map(|c| lock(c).as_ref().map(|c| c.since.elapsed())).max().filter(|t| *t > limit);
            let Some(took) = took else { continue };
            if self.hung[device].set(()).is_err() {
                continue;
            }
            let reason = format!(
                "device {device} hung: a device call has not returned for {:.0} s (device_timeout_secs = {})",
                took.as_secs_f64(),
                limit.as_secs()
            );
            let hung = Hung { device, reason };
            report(&hung);
            let reason = &hung.reason;
            // Both calls on the device wait on it: the lane's for the device's
            // own to reach a yield point, or the other way round.
            for c in slots {
                let signal = lock(c).as_ref().and_then(|c| c.signal.clone());
                if let Some(s) = signal {
                    s.fire(reason.clone());
                }
            }
            found.push(hung);
        }
        found
    }

    /// Checks on a thread of its own, about ten times per limit (at most once a
    /// second), handing each hung device to `on_hung`; the thread ends when the watch
    /// is dropped. Nothing to watch without a limit.
    pub fn spawn(self: &Arc<Self>, on_hung: impl Fn(Hung) + Send + 'static) {
        let Some(limit) = self.limit else { return };
        let every = (limit / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let weak: Weak<Self> = Arc::downgrade(self);
        let _ = std::thread::Builder::new().name("cuzk-device-watch".into()).spawn(move || loop {
            std::thread::sleep(every);
            let Some(watch) = weak.upgrade() else { return };
            watch.check(|h| on_hung(h.clone()));
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn a_call_past_the_limit_is_reported_once_and_its_caller_told() {
        let watch = Arc::new(DeviceWatch::new(2, Some(Duration::from_millis(50))));
        let (told, heard) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let w = watch.clone();
        let stuck = std::thread::spawn(move || {
            on_hang(
                move |reason| told.send(reason).unwrap(),
                || {
                    let _call = w.begin(1);
                    released.recv().unwrap();
                },
            )
        });
        // Device 0 makes a call that returns in time.
        drop(watch.begin(0));
        let (found, hung) = mpsc::channel();
        watch.spawn(move |h| found.send(h).unwrap());
        let reason = heard.recv_timeout(Duration::from_secs(30)).expect("the caller is told");
        assert!(reason.starts_with("device 1 hung"), "{reason}");
        assert!(reason.contains("device_timeout_secs"), "{reason}");
        let h = hung.try_recv().expect("the device is reported before its caller is told");
        assert_eq!(h, Hung { device: 1, reason: reason.clone() });
        assert!(watch.is_hung(1) && !watch.is_hung(0));
        assert!(watch.check(|_| {}).is_empty(), "reported once");
        release.send(()).unwrap();
        stuck.join().unwrap();
        assert!(hung.try_recv().is_err());
    }

    /// A lane call (a deadline partition beside the device's own) is watched too,
    /// and a hung device tells both callers.
    #[test]
    fn a_hung_lane_call_retires_its_device_and_tells_both_callers() {
        let watch = DeviceWatch::new(2, Some(Duration::from_millis(30)));
        let (tx, rx) = mpsc::channel();
        let (tx2, tx3) = (tx.clone(), tx.clone());
        let own = on_hang(move |r| tx2.send(("own", r)).unwrap(), || watch.begin(1));
        let lane = on_hang(move |r| tx3.send(("lane", r)).unwrap(), || watch.begin_lane(1));
        drop(own);
        let _fresh = watch.begin(1);
        std::thread::sleep(Duration::from_millis(50));
        drop(tx);
        let found = watch.check(|_| {});
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].device, 1, "the lane's slot maps to its device");
        let told: Vec<_> = rx.try_iter().map(|(who, _)| who).collect();
        assert_eq!(told, ["lane"], "the device's own call was begun without a signal");
        assert!(watch.is_hung(1) && !watch.is_hung(0));
        drop(lane);
    }

    #[test]
    fn calls_in_time_or_without_a_limit_are_never_hung() {
        let watch = DeviceWatch::new(1, None);
        let _call = watch.begin(0);
        std::thread::sleep(Duration::from_millis(20));
        assert!(watch.check(|_| {}).is_empty());
        assert_eq!(DeviceWatch::new(1, Some(Duration::ZERO)).limit(), None, "0 = off");
        let watch = DeviceWatch::new(1, Some(Duration::from_millis(20)));
        drop(watch.begin(0));
        std::thread::sleep(Duration::from_millis(40));
        assert!(watch.check(|_| {}).is_empty(), "a call that returned is not hung");
        // A call without a signal (a prefetch) is still found.
        let _call = watch.begin(0);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(watch.check(|_| {}).len(), 1);
    }

    #[test]
    fn the_signal_is_scoped_to_its_thread_and_call() {
        let (tx, rx) = mpsc::channel();
        on_hang(
            move |r| tx.send(r).unwrap(),
            || {
                assert!(current_signal().is_some());
                let other = std::thread::spawn(|| current_signal().is_none()).join().unwrap();
                assert!(other, "another thread has none");
                current_signal().unwrap().fire("x".into());
                current_signal().unwrap().fire("y".into());
            },
        );
        assert!(current_signal().is_none(), "cleared after");
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), ["x"], "fires once");
    }
}

//! systemd's notify protocol (`Type=notify` in deploy/cuzk.service), through the
//! sd-notify crate: READY=1 once the listeners are bound and the engine is up,
//! STATUS= with the jobs in flight, WATCHDOG=1 only while the daemon is
//! demonstrably alive, STOPPING=1 when shutdown starts. Without NOTIFY_SOCKET in
//! the environment nothing here runs.
//!
//! Alive means a round trip, not a timer: each watchdog period a probe is spawned
//! on the daemon's own runtime (the one that serves gRPC), asks the engine for a
//! snapshot through its actors, and must answer within the period, with every
//! listener accepting and no stage holding one item longer than
//! `[daemon] stall_timeout_secs`. A wedged runtime, engine or backend stops the
//! pings, and systemd restarts the daemon after `WatchdogSec=`.

use std::{
    sync::{mpsc, Arc, Condvar, Mutex},
    thread::JoinHandle,
    time::Duration,
};

use sd_notify::NotifyState;
use tracing::{error, info};

use super::{listener::ListenerStats, service::Service};

/// How often STATUS= is refreshed when systemd asks for no watchdog.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// What the probe checks.
pub(super) struct Health {
    pub svc: Arc<Service>,
    pub listeners: Arc<[Arc<ListenerStats>]>,
    pub stall: Duration,
}

impl Health {
    /// Jobs in flight, or why the daemon is not healthy.
    async fn check(&self) -> Result<u64, String> {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(l) = self.listeners.iter().find(|l| !l.up.load(Relaxed)) {
            return Err(format!("the {} listener ({}) is not accepting", l.name, l.address));
        }
        let snap = self.svc.engine.snapshot().await;
        let stalled = snap.stages.iter().filter(|s| s.longest_running > self.stall).max_by_key(|s| s.longest_running);
        if let Some(s) = stalled {
            return Err(format!(
                "stage {} has held one item for {:.0} s (stall_timeout_secs = {})",
                s.stage.as_str(),
                s.longest_running.as_secs_f64(),
                self.stall.as_secs()
            ));
        }
        Ok(snap.jobs.in_flight)
    }
}

/// The thread that feeds systemd; [`Notifier::stopping`] ends it.
pub(super) struct Notifier {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

impl Notifier {
    /// Sends READY=1 and starts the watchdog thread; `None` without NOTIFY_SOCKET.
    pub(super) fn start(rt: tokio::runtime::Handle, health: Health) -> Option<Notifier> {
        std::env::var_os("NOTIFY_SOCKET")?;
        let watchdog = sd_notify::watchdog_enabled();
        send(&[NotifyState::Ready, NotifyState::Status("serving")]);
        // systemd asks for a ping at least every WATCHDOG_USEC; twice as often
        // leaves a whole period for a probe that is slow but alive.
        let period = watchdog.map_or(STATUS_EVERY, |w| (w / 2).max(Duration::from_millis(20)));
        info!(watchdog = ?watchdog, "systemd notify: READY=1 sent");
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stop2 = stop.clone();
        let health = Arc::new(health);
        let thread = std::thread::Builder::new()
            .name("cuzk-watchdog".into())
            .spawn(move || {
                let mut pending: Option<mpsc::Receiver<Result<u64, String>>> = None;
                let mut healthy = true;
                loop {
                    let (lock, cv) = &*stop2;
                    let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                    let (guard, _) = cv.wait_timeout_while(guard, period, |s| !*s).unwrap_or_else(|p| p.into_inner());
                    if *guard {
                        return;
                    }
                    drop(guard);
                    // One probe at a time: a probe that never answers is not stacked.
                    let rx = pending.take().unwrap_or_else(|| {
                        let (tx, rx) = mpsc::channel();
                        let h = health.clone();
                        rt.spawn(async move {
                            let _ = tx.send(h.check().await);
                        });
                        rx
                    });
                    let result = match rx.recv_timeout(period) {
                        Ok(r) => r,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            pending = Some(rx);
                            Err(format!("the daemon did not answer its health probe within {period:?}"))
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => Err("the daemon's runtime has stopped".into()),
                    };
                    match result {
                        Ok(jobs) => {
                            if !healthy {
                                info!("healthy again: the systemd watchdog is fed");
                            }
                            healthy = true;
                            let status = format!("serving; {jobs} jobs in flight");
                            if watchdog.is_some() {
                                send(&[NotifyState::Watchdog, NotifyState::Status(&status)]);
                            } else {
                                send(&[NotifyState::Status(&status)]);
                            }
                        }
                        Err(why) => {
                            if healthy {
                                error!(reason = %why, "unhealthy: the systemd watchdog is no longer fed");
                            }
                            healthy = false;
                            send(&[NotifyState::Status(&format!("unhealthy: {why}"))]);
                        }
                    }
                }
            })
            .ok()?;
        Some(Notifier { stop, thread: Some(thread) })
    }

    /// Sends STOPPING=1 and ends the thread.
    pub(super) fn stopping(mut self) {
        send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

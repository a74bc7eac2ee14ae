//! Per-stage counters, collected by the stage runtime with atomics (no messages, so
//! reading them never waits behind work). The metrics endpoint and `cuzk bench` read
//! [`StageSnapshot`]s.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering::Relaxed},
        Mutex,
    },
    time::{Duration, Instant},
};

use serde::Serialize;

use crate::ground::StageName;

/// Live counters of one stage.
#[derive(Debug)]
pub struct StageMetrics {
    pub name: StageName,
    pub workers: usize,
    pub queue_capacity: usize,
    epoch: Instant,
    pub(crate) received: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) emitted: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) restarts: AtomicU64,
    pub(crate) busy_ns: AtomicU64,
    pub(crate) blocked_ns: AtomicU64,
    pub(crate) queue_wait_ns: AtomicU64,
    pub(crate) budget_wait_ns: AtomicU64,
    pub(crate) queue_len: AtomicU64,
    pub(crate) queue_peak: AtomicU64,
    pub(crate) pushed: AtomicU64,
    pub(crate) popped: AtomicU64,
    pub(crate) reserved_bytes: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) in_flight_peak: AtomicU64,
    /// ns since `epoch` of the first work start / last work end (+1 so 0 = never).
    first_start: AtomicU64,
    last_end: AtomicU64,
    /// Start of each item being processed now, by a token from `work_started`: the
    /// longest of them is how a wedged stage shows (the daemon's watchdog reads it).
    running: Mutex<HashMap<u64, Instant>>,
    next_token: AtomicU64,
}

impl StageMetrics {
    pub(crate) fn new(name: StageName, workers: usize, queue_capacity: usize, epoch: Instant) -> Self {
        StageMetrics {
            name,
            workers,
            queue_capacity,
            epoch,
            received: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            emitted: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            blocked_ns: AtomicU64::new(0),
            queue_wait_ns: AtomicU64::new(0),
            budget_wait_ns: AtomicU64::new(0),
            queue_len: AtomicU64::new(0),
            queue_peak: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
            popped: AtomicU64::new(0),
            reserved_bytes: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            in_flight_peak: AtomicU64::new(0),
            first_start: AtomicU64::new(0),
            last_end: AtomicU64::new(0),
            running: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(0),
        }
    }

    pub(crate) fn gauge_up(gauge: &AtomicU64, peak: &AtomicU64) {
        let v = gauge.fetch_add(1, Relaxed) + 1;
        peak.fetch_max(v, Relaxed);
    }

    pub(crate) fn gauge_down(gauge: &AtomicU64) {
        gauge.fetch_sub(1, Relaxed);
    }

    pub(crate) fn add(counter: &AtomicU64, d: Duration) {
        counter.fetch_add(d.as_nanos() as u64, Relaxed);
    }

    /// An item's processing starts; the token goes back to [`Self::work_ended`].
    pub(crate) fn work_started(&self, at: Instant) -> u64 {
        let ns = at.saturating_duration_since(self.epoch).as_nanos() as u64 + 1;
        let _ = self.first_start.compare_exchange(0, ns, Relaxed, Relaxed);
        let token = self.next_token.fetch_add(1, Relaxed);
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(token, at);
        token
    }

    pub(crate) fn work_ended(&self, token: u64, at: Instant) {
        let ns = at.saturating_duration_since(self.epoch).as_nanos() as u64 + 1;
        self.last_end.fetch_max(ns, Relaxed);
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&token);
    }

    /// How long the item processed longest right now has been at it.
    fn longest_running(&self) -> Duration {
        let now = Instant::now();
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.values().map(|t| now.saturating_duration_since(*t)).max().unwrap_or_default()
    }

    /// A consistent-enough copy of the counters.
    pub fn snapshot(&self) -> StageSnapshot {
        let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Relaxed));
        let (first, last) = (self.first_start.load(Relaxed), self.last_end.load(Relaxed));
        StageSnapshot {
            stage: self.name,
            workers: self.workers,
            queue_capacity: self.queue_capacity,
            received: self.received.load(Relaxed),
            completed: self.completed.load(Relaxed),
            emitted: self.emitted.load(Relaxed),
            failed: self.failed.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            panics: self.panics.load(Relaxed),
            abandoned: self.abandoned.load(Relaxed),
            restarts: self.restarts.load(Relaxed),
            busy: ns(&self.busy_ns),
            blocked: ns(&self.blocked_ns),
            queue_wait: ns(&self.queue_wait_ns),
            budget_wait: ns(&self.budget_wait_ns),
            queue_len: self.queue_len.load(Relaxed),
            queue_peak: self.queue_peak.load(Relaxed),
            pushed: self.pushed.load(Relaxed),
            popped: self.popped.load(Relaxed),
            reserved_bytes: self.reserved_bytes.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            in_flight_peak: self.in_flight_peak.load(Relaxed),
            active_window: if first == 0 { Duration::ZERO } else { Duration::from_nanos(last.saturating_sub(first)) },
            longest_running: self.longest_running(),
        }
    }
}

/// A copy of one stage's counters.
#[derive(Clone, Debug, Serialize)]
pub struct StageSnapshot {
    pub stage: StageName,
    /// Configured worker count (credits).
    pub workers: usize,
    pub queue_capacity: usize,
    /// Items taken from the mailbox.
    pub received: u64,
    /// Items processed successfully.
    pub completed: u64,
    /// Items sent downstream (Ingest emits one per partition).
    pub emitted: u64,
    pub failed: u64,
    /// Items dropped because their job was cancelled or had already failed.
    pub cancelled: u64,
    pub panics: u64,
    /// Items given up because the device call they were in hung (their threads
    /// stay stuck; the device is retired).
    pub abandoned: u64,
    pub restarts: u64,
    /// Sum of processing time over all workers, less `blocked`.
    pub busy: Duration,
    /// Sum of time workers spent inside processing blocked on backpressure from
    /// downstream, as the stage reported it (StagePcie: waiting for a free device
    /// staging buffer, freed only as ProveGpu executes partitions). Not in `busy`.
    pub blocked: Duration,
    /// Sum of time items waited in the queue.
    pub queue_wait: Duration,
    /// Sum of time workers waited for a memory reservation.
    pub budget_wait: Duration,
    pub queue_len: u64,
    pub queue_peak: u64,
    /// Items pushed into / popped from the stage queue.
    pub pushed: u64,
    pub popped: u64,
    /// Host memory this stage reserved from the budget, summed over items.
    pub reserved_bytes: u64,
    pub in_flight: u64,
    pub in_flight_peak: u64,
    /// From the first work started to the last work finished.
    pub active_window: Duration,
    /// How long the item processed longest right now has been at it (zero when idle).
    pub longest_running: Duration,
}

impl StageSnapshot {
    /// Fraction of the stage's worker capacity that was busy over `wall`.
    pub fn utilization(&self, wall: Duration) -> f64 {
        let cap = wall.as_secs_f64() * self.workers.max(1) as f64;
        if cap == 0.0 {
            0.0
        } else {
            (self.busy.as_secs_f64() / cap).min(1.0)
        }
    }
}

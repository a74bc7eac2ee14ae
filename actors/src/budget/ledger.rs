//! The accounting behind a budget: capacity, what is reserved, who waits.
//!
//! Two classes of request. Bulk work (PoRep, SnapDeals, parameters, recordings)
//! may use the budget less its deadline reserve, highest priority first and in FIFO
//! order within a priority (the job's, as every stage queue serves it: a SnapDeals
//! job given a base above PoRep's in `[ingest.priority]` passes queued PoRep
//! partitions here too, not only in the queues). Urgent work
//! (deadline proofs: WinningPoSt, WindowPoSt) may use all of it and goes ahead of
//! every bulk waiter: it is granted at once when it fits, else it waits at the
//! front, and the next memory returned goes to it. So a WinningPoSt never queues
//! behind a 26 GB PoRep partition that waits for room, and the reserve keeps room
//! for it even while a recording holds its partition for minutes.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use serde::Serialize;
use tokio::sync::oneshot;

use crate::ground::{BudgetError, ByteSize};

struct Waiter {
    bytes: u64,
    /// Bulk waiters are kept in descending priority, FIFO within one.
    priority: i32,
    tx: oneshot::Sender<Reservation>,
}

#[derive(Default)]
struct State {
    used: u64,
    peak: u64,
    /// Bulk waiters, highest priority first, FIFO within a priority.
    waiters: VecDeque<Waiter>,
    /// Urgent waiters, FIFO, all served before any bulk waiter.
    urgent: VecDeque<Waiter>,
    grants: u64,
    waits: u64,
    urgent_grants: u64,
    urgent_waits: u64,
}

/// Which class a request belongs to (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Bulk,
    Urgent,
}

/// A budget: grants [`Reservation`]s in FIFO order while they fit, urgent ones
/// first (module docs).
pub struct Ledger {
    name: &'static str,
    capacity: u64,
    /// Kept out of reach of bulk requests.
    reserve: u64,
    state: Mutex<State>,
}

/// Counters of a budget.
#[derive(Clone, Debug, Serialize)]
pub struct BudgetSnapshot {
    pub name: &'static str,
    pub capacity: u64,
    pub used: u64,
    /// Highest `used` seen.
    pub peak: u64,
    /// Requests waiting now.
    pub waiting: usize,
    /// Reservations granted.
    pub grants: u64,
    /// Reservations that had to wait.
    pub waits: u64,
    /// Kept for urgent work: bulk requests may use `capacity - deadline_reserve`.
    pub deadline_reserve: u64,
    /// Of `grants` and `waits`, those of urgent requests.
    pub urgent_grants: u64,
    pub urgent_waits: u64,
}

/// Either granted now, or a receiver that gets the grant later.
pub enum Grant {
    Now(Reservation),
    Later(oneshot::Receiver<Reservation>),
}

impl Ledger {
    /// A budget of `capacity` bytes named `name` ("host", "pinned", "vram0").
    pub fn new(name: &'static str, capacity: u64) -> Arc<Self> {
        Self::with_reserve(name, capacity, 0)
    }

    /// A budget that keeps `reserve` bytes (at most all of it) for urgent requests.
    pub fn with_reserve(name: &'static str, capacity: u64, reserve: u64) -> Arc<Self> {
        Arc::new(Ledger { name, capacity, reserve: reserve.min(capacity), state: Mutex::new(State::default()) })
    }

    /// What requests of `class` may hold in all.
    fn limit(&self, class: Class) -> u64 {
        match class {
            Class::Bulk => self.capacity - self.reserve,
            Class::Urgent => self.capacity,
        }
    }

    /// The budget's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the counters half-updated
        // (every critical section is a few arithmetic steps), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for `bytes` as bulk work: granted at once if it fits beside the
    /// deadline reserve and nobody waits before it; otherwise queued in FIFO order
    /// (a large request is not starved by small ones).
    ///
    /// # Errors
    /// [`BudgetError::ExceedsCapacity`] when `bytes` exceeds what bulk work may hold.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Result<Grant, BudgetError> {
        self.reserve_as(bytes, Class::Bulk)
    }

    /// Asks for `bytes` as `class` at priority 0 (module docs).
    ///
    /// # Errors
    /// [`BudgetError::ExceedsCapacity`] when `bytes` exceeds what the class may hold.
    pub fn reserve_as(self: &Arc<Self>, bytes: u64, class: Class) -> Result<Grant, BudgetError> {
        self.reserve_ranked(bytes, class, 0)
    }

    /// Asks for `bytes` as `class`; a bulk request waits behind bulk waiters of its
    /// priority or higher only, and ahead of lower ones (module docs).
    ///
    /// # Errors
    /// [`BudgetError::ExceedsCapacity`] when `bytes` exceeds what the class may hold.
    pub fn reserve_ranked(self: &Arc<Self>, bytes: u64, class: Class, priority: i32) -> Result<Grant, BudgetError> {
        if bytes > self.capacity {
            return Err(BudgetError::ExceedsCapacity {
                budget: self.name,
                requested: ByteSize(bytes),
                capacity: ByteSize(self.capacity),
            });
        }
        let limit = self.limit(class);
        if bytes > limit {
            return Err(BudgetError::ExceedsBulkLimit {
                budget: self.name,
                requested: ByteSize(bytes),
                limit: ByteSize(limit),
                reserve: ByteSize(self.reserve),
            });
        }
        let mut s = self.lock();
        // Urgent requests wait only for urgent ones; bulk ones for everybody.
        let ahead = s.urgent.iter().any(|w| !w.tx.is_closed())
            || (class == Class::Bulk && s.waiters.iter().any(|w| w.priority >= priority && !w.tx.is_closed()));
        if !ahead && s.used + bytes <= limit {
            s.used += bytes;
            s.peak = s.peak.max(s.used);
            s.grants += 1;
            s.urgent_grants += u64::from(class == Class::Urgent);
            return Ok(Grant::Now(Reservation { ledger: Some(self.clone()), bytes }));
        }
        let (tx, rx) = oneshot::channel();
        s.waits += 1;
        match class {
            Class::Bulk => {
                let at = s.waiters.iter().position(|w| w.priority < priority).unwrap_or(s.waiters.len());
                s.waiters.insert(at, Waiter { bytes, priority, tx });
            }
            Class::Urgent => {
                s.urgent_waits += 1;
                s.urgent.push_back(Waiter { bytes, priority, tx });
            }
        }
        Ok(Grant::Later(rx))
    }

    /// Takes `bytes` now if they fit, ahead of any waiters; `None` otherwise. For
    /// optional holdings that must never wait (a cache that can do without), not
    /// for partitions, which keep their FIFO order through [`Ledger::reserve`].
    /// Bulk work: the deadline reserve stays out of reach.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        let mut s = self.lock();
        if s.used + bytes > self.limit(Class::Bulk) {
            return None;
        }
        s.used += bytes;
        s.peak = s.peak.max(s.used);
        s.grants += 1;
        Some(Reservation { ledger: Some(self.clone()), bytes })
    }

    /// Takes `bytes` now, even beyond capacity, ahead of any waiters: for memory
    /// that is being allocated whatever the budget says, where waiting could
    /// deadlock (a partition that fails over to the CPU while holding a device
    /// stage). While `used` is above capacity nothing else is granted; `peak` shows
    /// the excess.
    pub fn charge(self: &Arc<Self>, bytes: u64) -> Reservation {
        let mut s = self.lock();
        s.used += bytes;
        s.peak = s.peak.max(s.used);
        s.grants += 1;
        Reservation { ledger: Some(self.clone()), bytes }
    }

    fn release(self: &Arc<Self>, bytes: u64) {
        let mut s = self.lock();
        s.used -= bytes;
        self.grant_waiters(&mut s);
    }

    fn grant_waiters(self: &Arc<Self>, s: &mut State) {
        // Urgent waiters first, up to the whole budget; bulk ones only once none is
        // left, up to the budget less the reserve.
        self.grant_queue(s, Class::Urgent);
        if s.urgent.is_empty() {
            self.grant_queue(s, Class::Bulk);
        }
    }

    fn grant_queue(self: &Arc<Self>, s: &mut State, class: Class) {
        let limit = self.limit(class);
        loop {
            let q = if class == Class::Urgent { &mut s.urgent } else { &mut s.waiters };
            let Some(w) = q.front() else { return };
            if w.tx.is_closed() {
                // The requester gave up (cancelled); skip it.
                q.pop_front();
                continue;
            }
            if s.used + w.bytes > limit {
                return;
            }
            let w = q.pop_front().expect("front exists");
            s.used += w.bytes;
            s.peak = s.peak.max(s.used);
            s.grants += 1;
            s.urgent_grants += u64::from(class == Class::Urgent);
            let r = Reservation { ledger: Some(self.clone()), bytes: w.bytes };
            if let Err(mut r) = w.tx.send(r) {
                // Receiver dropped between the check and the send: undo here, since
                // dropping `r` normally would re-enter this lock.
                r.ledger = None;
                s.used -= r.bytes;
                s.grants -= 1;
                s.urgent_grants -= u64::from(class == Class::Urgent);
            }
        }
    }

    /// Current counters.
    pub fn snapshot(&self) -> BudgetSnapshot {
        let s = self.lock();
        BudgetSnapshot {
            name: self.name,
            capacity: self.capacity,
            used: s.used,
            peak: s.peak,
            waiting: s.waiters.iter().chain(&s.urgent).filter(|w| !w.tx.is_closed()).count(),
            grants: s.grants,
            waits: s.waits,
            deadline_reserve: self.reserve,
            urgent_grants: s.urgent_grants,
            urgent_waits: s.urgent_waits,
        }
    }
}

/// Bytes held in a budget. Returned when dropped, wherever that happens: after the
/// last stage, on error, on panic unwinding, or when a cancelled job's partition is
/// discarded.
pub struct Reservation {
    ledger: Option<Arc<Ledger>>,
    bytes: u64,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Returns all but `keep` bytes to the budget now (when a stage frees buffers).
    pub fn shrink_to(&mut self, keep: u64) {
        if keep < self.bytes {
            let give = self.bytes - keep;
            self.bytes = keep;
            if let Some(l) = &self.ledger {
                l.release(give);
            }
        }
    }

    /// Adds `other`'s bytes to this reservation (same budget).
    pub fn merge(&mut self, mut other: Reservation) {
        debug_assert!(match (&self.ledger, &other.ledger) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => true,
        });
        self.bytes += other.bytes;
        other.ledger = None;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(l) = self.ledger.take() {
            if self.bytes > 0 {
                l.release(self.bytes);
            }
        }
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reservation({})", ByteSize(self.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(g: Grant) -> Reservation {
        match g {
            Grant::Now(r) => r,
            Grant::Later(_) => panic!("expected an immediate grant"),
        }
    }

    #[test]
    fn fifo_grants_and_release_on_drop() {
        let l = Ledger::new("host", 100);
        let a = now(l.reserve(60).unwrap());
        let Grant::Later(mut rx_b) = l.reserve(50).unwrap() else { panic!() };
        // A small request behind a waiting large one waits too (no starvation).
        let Grant::Later(mut rx_c) = l.reserve(10).unwrap() else { panic!() };
        assert!(rx_b.try_recv().is_err());
        drop(a);
        let b = rx_b.try_recv().expect("granted on release");
        let c = rx_c.try_recv().expect("fits after b");
        assert_eq!(l.snapshot().used, 60);
        drop((b, c));
        let s = l.snapshot();
        assert_eq!((s.used, s.peak, s.grants, s.waits), (0, 60, 3, 2));
    }

    /// A bulk request of a higher priority (a SnapDeals job ranked above PoRep)
    /// is served before lower ones that waited longer, and waits only behind
    /// waiters of its priority or higher; FIFO within a priority.
    #[test]
    fn bulk_waiters_are_served_by_priority_then_in_order() {
        let l = Ledger::new("host", 100);
        let a = now(l.reserve(90).unwrap());
        let Grant::Later(mut low1) = l.reserve_ranked(30, Class::Bulk, 0).unwrap() else { panic!("waits") };
        let Grant::Later(mut low2) = l.reserve_ranked(30, Class::Bulk, 0).unwrap() else { panic!("waits") };
        // Fits in the 10 left, but a waiter of its own priority is ahead: waits.
        let Grant::Later(mut low3) = l.reserve_ranked(5, Class::Bulk, 0).unwrap() else { panic!("FIFO") };
        // Fits and nobody of its priority or higher waits: granted at once.
        let high_now = now(l.reserve_ranked(5, Class::Bulk, 50).unwrap());
        let Grant::Later(mut high) = l.reserve_ranked(30, Class::Bulk, 50).unwrap() else { panic!("waits") };
        drop(a);
        // 95 returned less the 5 held: the high waiter first, then the low ones in
        // their order while they fit (30 + 30 + 30 + 5 = 95).
        let h = high.try_recv().expect("the higher priority first");
        let l1 = low1.try_recv().expect("then the first low one");
        let l2 = low2.try_recv().expect("then the second");
        let l3 = low3.try_recv().expect("then the third");
        assert_eq!((h.bytes(), l1.bytes(), l2.bytes(), l3.bytes()), (30, 30, 30, 5));
        drop((high_now, h, l1, l2, l3));
        // Held back by a higher waiter that does not fit yet, a lower one that
        // would fit waits too (no overtaking from below).
        let b = now(l.reserve(80).unwrap());
        let Grant::Later(mut big) = l.reserve_ranked(50, Class::Bulk, 50).unwrap() else { panic!("waits") };
        let Grant::Later(mut small) = l.reserve_ranked(10, Class::Bulk, 0).unwrap() else { panic!("behind") };
        assert!(small.try_recv().is_err());
        drop(b);
        assert_eq!((big.try_recv().unwrap().bytes(), small.try_recv().unwrap().bytes()), (50, 10));
    }

    #[test]
    fn a_charge_goes_beyond_capacity_and_holds_back_grants_until_dropped() {
        let l = Ledger::new("host", 100);
        let a = now(l.reserve(80).unwrap());
        let c = l.charge(50);
        let s = l.snapshot();
        assert_eq!((s.used, s.peak), (130, 130));
        assert!(l.try_reserve(1).is_none(), "nothing is granted while over capacity");
        let Grant::Later(mut rx) = l.reserve(60).unwrap() else { panic!("over capacity: must wait") };
        drop(a);
        assert!(rx.try_recv().is_err(), "the charge's 50 + 60 exceeds 100");
        drop(c);
        let r = rx.try_recv().expect("granted once the charge is returned");
        assert_eq!(r.bytes(), 60);
        drop(r);
        assert_eq!(l.snapshot().used, 0);
    }

    /// A deadline request neither queues behind a bulk request waiting for room,
    /// nor finds the budget full: the reserve is out of bulk work's reach.
    #[test]
    fn urgent_requests_skip_bulk_waiters_and_use_the_reserve() {
        let l = Ledger::with_reserve("host", 100, 10);
        // Bulk work fills what it may: 90.
        let a = now(l.reserve(60).unwrap());
        let b = now(l.reserve(30).unwrap());
        assert!(l.try_reserve(1).is_none(), "the reserve is out of bulk work's reach");
        let Grant::Later(mut big) = l.reserve(50).unwrap() else { panic!("bulk waits") };
        // An urgent request fits in the reserve: granted at once, past the waiter.
        let u = now(l.reserve_as(8, Class::Urgent).unwrap());
        // One that does not fit waits ahead of the bulk waiter: memory returned
        // goes to it first.
        let Grant::Later(mut u2) = l.reserve_as(20, Class::Urgent).unwrap() else { panic!("urgent waits") };
        drop(b);
        let u2 = u2.try_recv().expect("the urgent waiter is served first");
        assert!(big.try_recv().is_err(), "the bulk waiter still waits");
        drop((u, u2));
        // 60 held: the bulk 50 would pass 90, the bulk limit.
        assert!(big.try_recv().is_err());
        drop(a);
        assert_eq!(big.try_recv().expect("granted").bytes(), 50);
        let s = l.snapshot();
        assert_eq!((s.deadline_reserve, s.urgent_grants, s.urgent_waits), (10, 2, 1));
        // Bulk requests above capacity less the reserve fail at once, naming it.
        assert!(l.reserve(91).err().unwrap().to_string().contains("budget.deadline_reserve"));
        assert!(l.reserve_as(100, Class::Urgent).is_ok());
    }

    #[test]
    fn oversized_fails_at_once_and_abandoned_waiters_are_skipped() {
        let l = Ledger::new("host", 100);
        let err = l.reserve(101).err().unwrap();
        assert!(err.to_string().contains("whole host budget"), "{err}");
        let a = now(l.reserve(100).unwrap());
        let Grant::Later(rx) = l.reserve(100).unwrap() else { panic!() };
        drop(rx); // cancelled requester
        let Grant::Later(mut rx2) = l.reserve(30).unwrap() else { panic!() };
        drop(a);
        let mut r = rx2.try_recv().unwrap();
        r.shrink_to(10);
        assert_eq!(l.snapshot().used, 10);
        drop(r);
        assert_eq!(l.snapshot().used, 0);
    }
}

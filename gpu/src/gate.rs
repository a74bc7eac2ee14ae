//! Yield points between bulk work on a device and a deadline partition.
//!
//! A 32GiB PoRep partition holds a device ~1.8 s, and a WinningPoSt that waits for
//! it misses its target (docs/benchmarks.md). The CUDA backend runs a deadline
//! partition beside it instead, through the device's *lane* (its own workspace,
//! staging buffer and resident parameters, `cuda/backend.rs`), and [`Gate`] keeps
//! the two from sharing the device's streams at once: the bulk side's threads
//! (a partition's main thread and its H-MSM thread, a parameter upload) check in at
//! yield points between their kernels — between ranges of a's and b's rows and after
//! c, after each radix step of a large NTT (`ntt_yield.cuh`) and after H on the
//! coset, between the batches of every MSM, between the accumulate launches inside
//! a batch (window groups; spans of buckets for H) and after each launch of its
//! digit sort (`msm_yield.cuh`), between the L, A and B MSMs
//! and between the two halves of each (the 0/1 sums in ranges of 2^24 indices, the
//! rest's MSM), between chunks of a parameter upload — each point a place where the
//! thread has nothing queued on the device. The points inside a batch and between
//! 0/1-sum ranges are taken only while a deadline partition waits
//! ([`Gate::pending`]). A deadline partition takes its turn ([`Gate::urgent`]) once
//! every bulk thread is at such a point or outside; bulk threads that reach one
//! meanwhile wait until it is done. So a deadline partition waits at most for one
//! step of the bulk work (a span of H's buckets, ~15 ms at 2^27 on an H100 alone;
//! a whole batch was ~0.14 s), not for the whole partition. [`GateStats::worst`]
//! names the stretches that made it wait longest.
//!
//! The C side (`cuda/cuzk.cu`) calls back into [`Gate`] through `ffi::gate_op`; the
//! gate itself knows nothing of CUDA, so its ordering is tested here without a GPU.

use std::{
    cell::Cell,
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Condvar, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};

/// Where a bulk thread calls the gate: the C side passes the index (`gate_place`
/// in `cuda/cuzk.cu`, the same order) in the operation's upper bits, so that the
/// longest wait for a yield point can name the stretch of bulk work it waited for.
/// A unit test holds the two lists to one order.
pub const GATE_PLACES: &[&str] = &[
    "unnamed",
    "parameter upload step",
    "matrices upload step",
    "partition start",
    "range of a, b's rows",
    "a, b, c done",
    "NTT radix step",
    "an iNTT done",
    "a coset NTT done",
    "H on the coset",
    "inputs arrived",
    "H's window group end",
    "range of 0/1 sums",
    "0/1 sums done",
    "rest's window group end",
    "L done",
    "A done",
    "B_G1 done",
    "partition end",
    "H thread start",
    "H thread end",
    "H's digits sorted",
    "H's batch end",
    "rest's digits sorted",
    "rest's batch end",
    "H's sort step",
    "rest's sort step",
];

fn place_name(p: i32) -> &'static str {
    usize::try_from(p).ok().and_then(|i| GATE_PLACES.get(i)).copied().unwrap_or("unnamed")
}

thread_local! {
    /// Where this thread last called the gate: the start of the stretch of
    /// device work it is in.
    static LAST: Cell<i32> = const { Cell::new(0) };
}

#[derive(Default)]
struct State {
    /// Bulk threads between yield points (doing device work).
    running: usize,
    /// Deadline partitions waiting for their turn or running.
    urgent: usize,
    /// The stretch of bulk work that last let a waiting deadline partition in:
    /// from and to which places (indices in [`GATE_PLACES`]).
    released_by: (i32, i32),
    /// The longest turn's wait and that stretch.
    max_at: (i32, i32),
    /// Per stretch that let a waiting deadline partition in: waits it ended,
    /// their total and the longest (ns).
    by_stretch: HashMap<(i32, i32), (u64, u64, u64)>,
}

/// One device's yield points (module docs).
#[derive(Default)]
pub struct Gate {
    state: Mutex<State>,
    changed: Condvar,
    /// Mirror of `State::urgent`, read without the lock at every yield point.
    urgent: AtomicUsize,
    /// Times a bulk thread stopped at a yield point for a deadline partition, and
    /// how long it stood there in all (ns).
    yields: AtomicU64,
    yielded_ns: AtomicU64,
    /// Deadline partitions run through the gate, and their wait for the bulk
    /// threads to reach a yield point (ns).
    turns: AtomicU64,
    turn_wait_ns: AtomicU64,
    /// The longest of those waits (ns): the tail a mean hides.
    turn_wait_max_ns: AtomicU64,
}

impl State {
    /// A bulk thread leaves a stretch of device work at `to`: if that lets a
    /// waiting deadline partition in, remember the stretch.
    fn left(&mut self, to: i32) {
        self.running = self.running.saturating_sub(1);
        if self.urgent > 0 && self.running == 0 {
            self.released_by = (LAST.with(Cell::get), to);
        }
    }
}

/// A gate's counters (device statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Deadline partitions run beside bulk work.
    pub turns: u64,
    /// Their total wait for the bulk work to reach a yield point, and the longest.
    pub turn_wait: Duration,
    pub turn_wait_max: Duration,
    /// The stretch of bulk work the longest wait ended with: from and to which
    /// yield points ([`GATE_PLACES`]; "unnamed" for calls without a place).
    pub turn_wait_max_at: (&'static str, &'static str),
    /// Stops of bulk threads at yield points, and their total time stopped.
    pub yields: u64,
    pub yielded: Duration,
    /// The stretches of bulk work whose waits were longest, longest first: which
    /// step to cut next (the longest alone can hide a second one just as long).
    pub worst: [Option<StretchWait>; WORST_STRETCHES],
}

/// How many stretches [`GateStats::worst`] keeps.
pub const WORST_STRETCHES: usize = 4;

/// The waits that one stretch of bulk work ended (from one yield point to the next).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StretchWait {
    pub from: &'static str,
    pub to: &'static str,
    pub waits: u64,
    pub total: Duration,
    pub max: Duration,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Gate {
    /// A bulk thread starts device work: waits while a deadline partition is
    /// waiting or running.
    pub fn enter(&self) {
        self.enter_at(0);
    }

    fn enter_at(&self, place: i32) {
        let mut s = lock(&self.state);
        while s.urgent > 0 {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.running += 1;
        LAST.with(|l| l.set(place));
    }

    /// A bulk thread's device work is over (nothing of it left queued).
    pub fn leave(&self) {
        self.leave_at(0);
    }

    fn leave_at(&self, place: i32) {
        let mut s = lock(&self.state);
        s.left(place);
        drop(s);
        self.changed.notify_all();
    }

    /// A yield point of a bulk thread (nothing of its own queued on the device):
    /// when a deadline partition waits, stands aside until it is done. Whether it
    /// stood aside.
    pub fn checkpoint(&self) -> bool {
        self.checkpoint_at(0)
    }

    fn checkpoint_at(&self, place: i32) -> bool {
        if self.urgent.load(Ordering::Acquire) == 0 {
            LAST.with(|l| l.set(place));
            return false;
        }
        let t = Instant::now();
        self.leave_at(place);
        self.enter_at(place);
        self.yields.fetch_add(1, Ordering::Relaxed);
        self.yielded_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        true
    }

    /// A deadline partition's turn: returned once no bulk thread is between yield
    /// points; bulk threads wait at their next one until it is dropped. One at a
    /// time per device is the caller's affair (the lane's lock).
    pub fn urgent(&self) -> UrgentTurn<'_> {
        let t = Instant::now();
        let mut s = lock(&self.state);
        s.urgent += 1;
        self.urgent.store(s.urgent, Ordering::Release);
        let busy = s.running > 0;
        while s.running > 0 {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        let waited = t.elapsed().as_nanos() as u64;
        self.turns.fetch_add(1, Ordering::Relaxed);
        self.turn_wait_ns.fetch_add(waited, Ordering::Relaxed);
        if self.turn_wait_max_ns.fetch_max(waited, Ordering::Relaxed) < waited {
            s.max_at = if busy { s.released_by } else { (0, 0) };
        }
        if busy {
            let at = s.released_by;
            let e = s.by_stretch.entry(at).or_default();
            *e = (e.0 + 1, e.1 + waited, e.2.max(waited));
        }
        drop(s);
        UrgentTurn(self)
    }

    /// Bulk threads between yield points now (tests, diagnostics).
    pub fn running(&self) -> usize {
        lock(&self.state).running
    }

    pub fn stats(&self) -> GateStats {
        let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        let s = lock(&self.state);
        let (from, to) = s.max_at;
        let mut by: Vec<_> = s.by_stretch.iter().map(|(k, v)| (*k, *v)).collect();
        drop(s);
        by.sort_by_key(|&(at, (_, _, max))| (std::cmp::Reverse(max), at));
        let mut worst = [None; WORST_STRETCHES];
        for (w, ((from, to), (waits, total, max))) in worst.iter_mut().zip(by) {
            *w = Some(StretchWait {
                from: place_name(from),
                to: place_name(to),
                waits,
                total: Duration::from_nanos(total),
                max: Duration::from_nanos(max),
            });
        }
        GateStats {
            turns: self.turns.load(Ordering::Relaxed),
            turn_wait: ns(&self.turn_wait_ns),
            turn_wait_max: ns(&self.turn_wait_max_ns),
            turn_wait_max_at: (place_name(from), place_name(to)),
            yields: self.yields.load(Ordering::Relaxed),
            yielded: ns(&self.yielded_ns),
            worst,
        }
    }
}

/// A deadline partition's turn on the device ([`Gate::urgent`]); ends when dropped.
pub struct UrgentTurn<'a>(&'a Gate);

impl Drop for UrgentTurn<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.0.state);
        s.urgent = s.urgent.saturating_sub(1);
        self.0.urgent.store(s.urgent, Ordering::Release);
        drop(s);
        self.0.changed.notify_all();
    }
}

/// The operations the C side calls at its yield points (`cuzk_gate_fn` in
/// `cuda/cuzk.cu`, through `ffi::gate_op`), in the low 8 bits; the place
/// ([`GATE_PLACES`]) in the bits above.
pub(crate) const GATE_ENTER: i32 = 0;
pub(crate) const GATE_LEAVE: i32 = 1;
pub(crate) const GATE_CHECKPOINT: i32 = 2;
pub(crate) const GATE_PENDING: i32 = 3;

impl Gate {
    /// Whether a deadline partition waits or runs: a bulk thread that paces its
    /// kernels (H's window groups) syncs and stops at its next yield point only
    /// then, and otherwise keeps the device fed.
    pub fn pending(&self) -> bool {
        self.urgent.load(Ordering::Acquire) > 0
    }

    /// One operation from the C side; 1 for a pending deadline partition
    /// (`GATE_PENDING`), else 0.
    pub(crate) fn op(&self, op: i32) -> i32 {
        let place = op >> 8;
        match op & 0xff {
            GATE_ENTER => self.enter_at(place),
            GATE_LEAVE => self.leave_at(place),
            GATE_CHECKPOINT => {
                self.checkpoint_at(place);
            }
            GATE_PENDING => {
                let pending = self.pending();
                // Passed by without stopping: the thread's stretch starts here. (When
                // it stops, the checkpoint that follows ends the stretch instead.)
                if !pending && place != 0 {
                    LAST.with(|l| l.set(place));
                }
                return i32::from(pending);
            }
            _ => {}
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{mpsc, Arc},
        thread,
    };

    use super::*;

    /// A deadline partition arriving while a bulk thread works gets the device at
    /// the bulk thread's next yield point, and the bulk thread goes on after it.
    #[test]
    fn a_deadline_turn_comes_at_the_next_yield_point() {
        let gate = Arc::new(Gate::default());
        let (log_tx, log) = mpsc::channel::<&'static str>();
        let (step_tx, step) = mpsc::channel::<()>();
        gate.enter();
        let urgent = {
            let (gate, log_tx) = (gate.clone(), log_tx.clone());
            thread::spawn(move || {
                let _turn = gate.urgent();
                log_tx.send("urgent runs").unwrap();
            })
        };
        // The deadline partition is waiting: nothing ran yet.
        while gate.urgent.load(Ordering::Acquire) == 0 {
            thread::yield_now();
        }
        assert!(log.try_recv().is_err(), "the urgent turn waits for a yield point");
        let bulk = {
            let gate = gate.clone();
            thread::spawn(move || {
                // The bulk thread finishes its step, then yields.
                step.recv().unwrap();
                assert!(gate.checkpoint(), "stood aside");
                log_tx.send("bulk resumes").unwrap();
                gate.leave();
            })
        };
        step_tx.send(()).unwrap();
        urgent.join().unwrap();
        bulk.join().unwrap();
        assert_eq!(log.try_iter().collect::<Vec<_>>(), ["urgent runs", "bulk resumes"]);
        let s = gate.stats();
        assert_eq!((s.turns, s.yields), (1, 1));
        assert_eq!(gate.running(), 0);
    }

    /// Two bulk threads of one partition (main and H): the turn waits for both.
    #[test]
    fn the_turn_waits_for_every_bulk_thread() {
        let gate = Arc::new(Gate::default());
        gate.enter();
        gate.enter();
        let (tx, rx) = mpsc::channel();
        let g = gate.clone();
        let urgent = thread::spawn(move || {
            let _turn = g.urgent();
            tx.send(()).unwrap();
        });
        while gate.urgent.load(Ordering::Acquire) == 0 {
            thread::yield_now();
        }
        // One thread leaves (its work done); the other is still between points.
        gate.leave();
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "one bulk thread still works");
        // The other reaches a yield point on its own thread.
        let g = gate.clone();
        let other = thread::spawn(move || {
            g.checkpoint();
            g.leave();
        });
        rx.recv().unwrap();
        urgent.join().unwrap();
        other.join().unwrap();
        assert_eq!(gate.running(), 0);
        // One turn: its wait (over 50 ms, the check above) is the total and the longest.
        let s = gate.stats();
        assert_eq!(s.turns, 1);
        assert_eq!(s.turn_wait_max, s.turn_wait);
        assert!(s.turn_wait_max >= Duration::from_millis(50), "{s:?}");
    }

    /// A bulk thread that starts work while a deadline partition runs waits for it;
    /// yield points cost nothing when none waits.
    #[test]
    fn bulk_work_does_not_start_during_a_turn() {
        let gate = Arc::new(Gate::default());
        assert!(!gate.checkpoint(), "nothing waits: no stop");
        let turn = gate.urgent();
        let (tx, rx) = mpsc::channel();
        let g = gate.clone();
        let bulk = thread::spawn(move || {
            g.enter();
            tx.send(()).unwrap();
            g.leave();
        });
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "bulk waits for the turn");
        drop(turn);
        rx.recv().unwrap();
        bulk.join().unwrap();
        assert_eq!(gate.stats().yields, 0);
    }

    /// The longest wait names the stretch of bulk work it waited for: from the
    /// bulk thread's last call to the gate to the yield point that let the
    /// deadline partition in.
    /// The C side names a place by its index in `enum gate_place` (cuzk.cu): both
    /// lists must keep one order, or the longest wait names the wrong stretch.
    #[test]
    fn the_c_places_and_their_names_keep_one_order() {
        let src = include_str!("../cuda/cuzk.cu");
        let body = src
            .split("enum gate_place {")
            .nth(1)
            .and_then(|r| r.split("};").next())
            .expect("enum gate_place in cuzk.cu");
        let c: Vec<&str> = body.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        let pairs = [
            ("P_UNNAMED", "unnamed"),
            ("P_SRS_UPLOAD", "parameter upload step"),
            ("P_R1CS_UPLOAD", "matrices upload step"),
            ("P_PART_START", "partition start"),
            ("P_ABC_RANGE", "range of a, b's rows"),
            ("P_ABC_DONE", "a, b, c done"),
            ("P_NTT_STEP", "NTT radix step"),
            ("P_INTT_DONE", "an iNTT done"),
            ("P_COSET_NTT_DONE", "a coset NTT done"),
            ("P_H_COSET", "H on the coset"),
            ("P_INPUTS", "inputs arrived"),
            ("P_H_MSM_STEP", "H's window group end"),
            ("P_SUM_RANGE", "range of 0/1 sums"),
            ("P_SUMS_DONE", "0/1 sums done"),
            ("P_REST_MSM_STEP", "rest's window group end"),
            ("P_L_DONE", "L done"),
            ("P_A_DONE", "A done"),
            ("P_B1_DONE", "B_G1 done"),
            ("P_PART_END", "partition end"),
            ("P_H_START", "H thread start"),
            ("P_H_END", "H thread end"),
            ("P_H_MSM_DIGITS", "H's digits sorted"),
            ("P_H_MSM_BATCH", "H's batch end"),
            ("P_REST_MSM_DIGITS", "rest's digits sorted"),
            ("P_REST_MSM_BATCH", "rest's batch end"),
            ("P_H_MSM_SORT", "H's sort step"),
            ("P_REST_MSM_SORT", "rest's sort step"),
        ];
        assert_eq!(c, pairs.map(|p| p.0), "enum gate_place in cuzk.cu");
        assert_eq!(GATE_PLACES, pairs.map(|p| p.1), "GATE_PLACES");
    }

    #[test]
    fn the_longest_wait_names_its_stretch() {
        let gate = Arc::new(Gate::default());
        let at = |op: i32, place: &str| op | (GATE_PLACES.iter().position(|p| *p == place).unwrap() as i32) << 8;
        let (tx, rx) = mpsc::channel::<()>();
        let (ready_tx, ready) = mpsc::channel::<()>();
        let g = gate.clone();
        let bulk = thread::spawn(move || {
            g.op(at(GATE_ENTER, "partition start"));
            // Nobody waits: a new stretch starts at the checkpoint, then at a yield
            // point passed by.
            g.op(at(GATE_CHECKPOINT, "a, b, c done"));
            assert_eq!(g.op(at(GATE_PENDING, "NTT radix step")), 0);
            ready_tx.send(()).unwrap();
            rx.recv().unwrap();
            // The next one finds the deadline partition waiting and stops there.
            assert_eq!(g.op(at(GATE_PENDING, "an iNTT done")), 1);
            g.op(at(GATE_CHECKPOINT, "an iNTT done"));
            g.op(at(GATE_LEAVE, "partition end"));
        });
        ready.recv().unwrap();
        let g = gate.clone();
        let urgent = thread::spawn(move || drop(g.urgent()));
        while !gate.pending() {
            thread::yield_now();
        }
        tx.send(()).unwrap();
        urgent.join().unwrap();
        bulk.join().unwrap();
        let s = gate.stats();
        assert_eq!(s.turns, 1);
        assert_eq!(s.turn_wait_max_at, ("NTT radix step", "an iNTT done"), "{s:?}");
        // The per-stretch table holds the same wait under the same names.
        let w = s.worst[0].expect("one stretch ended a wait");
        assert_eq!((w.from, w.to, w.waits, w.max), ("NTT radix step", "an iNTT done", 1, s.turn_wait_max));
        assert_eq!(s.worst[1], None);
        // A turn that finds no bulk work waits for nothing and names no stretch.
        drop(gate.urgent());
        let s = gate.stats();
        assert_eq!((s.turns, s.worst[0].map(|w| w.waits), s.worst[1]), (2, Some(1), None));
    }

    /// The callback the C side uses drives the same gate.
    #[test]
    fn the_c_callback_drives_the_gate() {
        let gate = Gate::default();
        let p = (&gate as *const Gate).cast();
        crate::ffi::gate_op(p, GATE_ENTER);
        assert_eq!(gate.running(), 1);
        assert_eq!(crate::ffi::gate_op(p, GATE_PENDING), 0, "no deadline partition yet");
        crate::ffi::gate_op(p, GATE_CHECKPOINT);
        crate::ffi::gate_op(p, GATE_LEAVE);
        assert_eq!(gate.running(), 0);
        // A deadline partition's turn makes the bulk side's pending check true
        // until it ends.
        let turn = gate.urgent();
        assert_eq!(crate::ffi::gate_op(p, GATE_PENDING), 1);
        drop(turn);
        assert_eq!(crate::ffi::gate_op(p, GATE_PENDING), 0);
        crate::ffi::gate_op(std::ptr::null(), GATE_ENTER);
        assert_eq!(crate::ffi::gate_op(std::ptr::null(), GATE_PENDING), 0);
    }
}

//! Device staging buffers (CUDA backend): where StagePcie uploads a partition
//! ahead of its execution, so that its transfer crosses PCIe while the device
//! computes the partition before it.
//!
//! Each device has up to `backend.device_buffers` buffers (`cuda::Stage`: a, b, c,
//! the bit-split lists and rest scalars of one partition, and a copy stream). A
//! buffer is in one state at a time, changed only under this module's lock:
//!
//! - Free: nobody's; its last upload has finished.
//! - Uploading: StagePcie is queueing a partition's copies into it.
//! - Staged: it holds a partition that has not started executing; the partition
//!   holds a [`Lease`] on it.
//! - Executing: a partition runs from it (under the device's lock).
//!
//! An execution takes its own staged buffer; a partition without one (not staged,
//! or staged on another device) takes a free buffer, allocates one if the budget has
//! room, or takes a staged partition's buffer (that partition uploads again when it
//! runs: its host copy is kept until then). So an execution never waits for
//! StagePcie, and StagePcie waiting for a free buffer cannot deadlock: every buffer
//! it waits for is freed by an execution or a dropped partition.
//!
//! Buffers are named by an id that is never reused, and every hand-over gives the
//! buffer a new generation from one counter: a lease whose buffer is gone or whose
//! generation no longer matches has lost its buffer, and does nothing when dropped;
//! the highest generation among staged buffers is the most recently staged.
//!
//! A device found hung ([`Staging::lose`]) is never synchronized or freed again:
//! its buffers stay as they are (a wait on its copies would never end), and the
//! partitions staged there run elsewhere from their host copies.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Condvar, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};

use tracing::warn;

use crate::sizing::device_staging_bytes;

/// A device buffer for one partition's inputs (`cuda::Stage`; tests use a fake).
pub(crate) trait DeviceBuffer: Send + Sync + Sized + 'static {
    /// Allocates one of domain 2^`lg` on device `dev`.
    fn alloc(dev: usize, lg: u32) -> Result<Self, (i32, String)>;
    /// Its domain's log2.
    fn lg(&self) -> u32;
    /// Waits until its last upload has finished.
    fn sync(&self) -> Result<(), (i32, String)>;
}

#[cfg(cuzk_cuda)]
impl DeviceBuffer for crate::ffi::cuda::Stage {
    fn alloc(dev: usize, lg: u32) -> Result<Self, (i32, String)> {
        crate::ffi::cuda::Stage::new(dev, lg)
    }
    fn lg(&self) -> u32 {
        self.lg
    }
    fn sync(&self) -> Result<(), (i32, String)> {
        crate::ffi::cuda::Stage::sync(self)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Uploading,
    Staged,
    Executing,
}

struct Buffer<B> {
    id: u64,
    stage: Arc<B>,
    state: State,
    generation: u64,
    /// Deadline partitions' own buffer, beyond `per_device`: StagePcie never takes
    /// or replaces it, so a WinningPoSt does not wait for a PoRep upload to finish,
    /// nor take (and cost a re-upload to) a staged PoRep partition's buffer.
    urgent_only: bool,
}

struct Inner<B> {
    devices: Vec<Vec<Buffer<B>>>,
    /// Devices found hung: their buffers are left alone.
    lost: Vec<bool>,
    next_id: u64,
}

impl<B: DeviceBuffer> Inner<B> {
    /// A new free buffer of domain 2^`lg` on `dev`, at the end of its list.
    fn add(&mut self, dev: usize, lg: u32) -> Result<usize, (i32, String)> {
        let stage = B::alloc(dev, lg)?;
        self.next_id += 1;
        let v = &mut self.devices[dev];
        v.push(Buffer {
            id: self.next_id,
            stage: Arc::new(stage),
            state: State::Free,
            generation: 0,
            urgent_only: false,
        });
        Ok(v.len() - 1)
    }

    /// Bulk buffers of `dev` (what `per_device` bounds).
    fn bulk(&self, dev: usize) -> usize {
        self.devices[dev].iter().filter(|b| !b.urgent_only).count()
    }

    /// Frees buffer `i` of `dev` (free, or staged and then synchronized), then
    /// allocates one of domain 2^`lg` in its place: only one of the two needs
    /// room at a time.
    fn replace(&mut self, dev: usize, i: usize, lg: u32) -> Result<usize, (i32, String)> {
        let _ = self.devices[dev][i].stage.sync();
        drop(self.devices[dev].remove(i));
        self.add(dev, lg)
    }
}

/// Every device's staging buffers.
pub(crate) struct Staging<B> {
    inner: Mutex<Inner<B>>,
    generations: AtomicU64,
    changed: Condvar,
    per_device: usize,
}

/// Why an execution got no buffer: the bytes it needed, and the allocation's
/// error when one failed (none: the budget had no room).
pub(crate) type NoBuffer = (u64, Option<(i32, String)>);

/// How long StagePcie waits for a buffer before it hands the partition on
/// unstaged. Buffers free as executions end (seconds at 2^27), so this is only a
/// safety valve against a partition parked elsewhere with its buffer.
const WAIT_LIMIT: Duration = Duration::from_secs(60);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn bytes_of<B: DeviceBuffer>(v: &[Buffer<B>]) -> u64 {
    v.iter().map(|b| device_staging_bytes(b.stage.lg())).sum()
}

/// A partition's staged buffer; dropped without executing, it waits for its copies
/// (which still read the partition's host memory) and frees the buffer.
pub struct Lease<B: DeviceBuffer> {
    staging: Arc<Staging<B>>,
    pub(crate) device: usize,
    id: u64,
    generation: u64,
}

impl<B: DeviceBuffer> std::fmt::Debug for Lease<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("device", &self.device).field("buffer", &self.id).finish()
    }
}

impl<B: DeviceBuffer> Drop for Lease<B> {
    fn drop(&mut self) {
        let mut inner = lock(&self.staging.inner);
        if inner.lost[self.device] {
            return;
        }
        if let Some(b) = inner.devices[self.device].iter_mut().find(|b| b.id == self.id) {
            if b.generation == self.generation && b.state == State::Staged {
                // On a retired device this fails; its memory goes with the context.
                let _ = b.stage.sync();
                b.state = State::Free;
                b.generation = self.staging.next_generation();
                self.staging.changed.notify_all();
            }
        }
    }
}

/// A buffer an execution runs from; freed when dropped.
pub(crate) struct Running<'a, B: DeviceBuffer> {
    staging: &'a Staging<B>,
    device: usize,
    id: u64,
    pub(crate) stage: Arc<B>,
    /// Whether it holds the partition already (staged ahead), or must be uploaded.
    pub(crate) staged: bool,
}

impl<B: DeviceBuffer> Drop for Running<'_, B> {
    fn drop(&mut self) {
        let mut inner = lock(&self.staging.inner);
        // An executing buffer is never removed.
        if let Some(b) = inner.devices[self.device].iter_mut().find(|b| b.id == self.id) {
            b.state = State::Free;
            b.generation = self.staging.next_generation();
        }
        self.staging.changed.notify_all();
    }
}

/// A buffer taken by StagePcie, being filled: [`Staging::uploaded`] turns it into
/// a [`Lease`] or frees it.
pub(crate) struct Uploading<B> {
    pub(crate) device: usize,
    id: u64,
    generation: u64,
    pub(crate) stage: Arc<B>,
}

impl<B: DeviceBuffer> Staging<B> {
    /// A new generation for a buffer changing hands.
    fn next_generation(&self) -> u64 {
        self.generations.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn new(devices: usize, per_device: usize) -> Arc<Self> {
        Arc::new(Staging {
            inner: Mutex::new(Inner {
                devices: (0..devices).map(|_| Vec::new()).collect(),
                lost: vec![false; devices],
                next_id: 0,
            }),
            generations: AtomicU64::new(0),
            changed: Condvar::new(),
            per_device: per_device.max(1),
        })
    }

    /// Device `dev` was found hung: its buffers are never synchronized or freed
    /// again (module docs).
    pub(crate) fn lose(&self, dev: usize) {
        lock(&self.inner).lost[dev] = true;
        self.changed.notify_all();
    }

    /// Device bytes of device `dev`'s buffers.
    pub(crate) fn bytes(&self, dev: usize) -> u64 {
        bytes_of(&lock(&self.inner).devices[dev])
    }

    /// A buffer for a partition of domain 2^`lg`, for StagePcie: a free one that
    /// holds it, a new one where `fits(device, buffers' bytes after, new bytes)`
    /// allows, or a free smaller one replaced. With `wait`, waits (up to
    /// [`WAIT_LIMIT`]) while every buffer able to hold it is in use, and adds the
    /// time it waited (only that: not the allocations) to `waited`. `None`: the
    /// partition goes on unstaged.
    pub(crate) fn acquire(
        &self,
        lg: u32,
        healthy: impl Fn(usize) -> bool,
        fits: impl Fn(usize, u64, u64) -> bool,
        wait: bool,
        waited: &mut Duration,
    ) -> Option<Uploading<B>> {
        let need = device_staging_bytes(lg);
        let deadline = Instant::now() + WAIT_LIMIT;
        let mut inner = lock(&self.inner);
        loop {
            // Least busy device first.
            let mut order: Vec<usize> = (0..inner.devices.len()).filter(|&d| healthy(d)).collect();
            order.sort_by_key(|&d| inner.devices[d].iter().filter(|b| b.state != State::Free).count());
            let take = |b: &mut Buffer<B>, dev: usize| {
                b.state = State::Uploading;
                b.generation = self.next_generation();
                Uploading { device: dev, id: b.id, generation: b.generation, stage: b.stage.clone() }
            };
            for &d in &order {
                if let Some(b) =
                    inner.devices[d].iter_mut().find(|b| !b.urgent_only && b.state == State::Free && b.stage.lg() >= lg)
                {
                    return Some(take(b, d));
                }
            }
            for &d in &order {
                let v = &inner.devices[d];
                if inner.bulk(d) < self.per_device && fits(d, bytes_of(v) + need, need) {
                    match inner.add(d, lg) {
                        Ok(i) => return Some(take(&mut inner.devices[d][i], d)),
                        Err((code, msg)) => {
                            warn!(device = d, code, error = %msg, "could not allocate a staging buffer")
                        }
                    }
                }
            }
            for &d in &order {
                let v = &inner.devices[d];
                let Some(i) = v.iter().position(|b| !b.urgent_only && b.state == State::Free) else { continue };
                let old = device_staging_bytes(v[i].stage.lg());
                if fits(d, bytes_of(v) - old + need, need.saturating_sub(old)) {
                    match inner.replace(d, i, lg) {
                        Ok(i) => return Some(take(&mut inner.devices[d][i], d)),
                        Err((code, msg)) => {
                            warn!(device = d, code, error = %msg, "could not allocate a staging buffer")
                        }
                    }
                }
            }
            // Wait only for a buffer that will come free and can hold it.
            let coming = order.iter().any(|&d| {
                inner.devices[d].iter().any(|b| !b.urgent_only && b.state != State::Free && b.stage.lg() >= lg)
            });
            let now = Instant::now();
            if !wait || !coming || now >= deadline {
                return None;
            }
            inner = self.changed.wait_timeout(inner, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            *waited += now.elapsed();
        }
    }

    /// The upload into `u` was queued (`ok`): the partition's lease on it; or it
    /// failed: the buffer is free again (after what was queued of it finished).
    pub(crate) fn uploaded(self: &Arc<Self>, u: Uploading<B>, ok: bool) -> Option<Lease<B>> {
        let mut inner = lock(&self.inner);
        let b =
            inner.devices[u.device].iter_mut().find(|b| b.id == u.id).expect("an uploading buffer is never removed");
        debug_assert_eq!((b.state, b.generation), (State::Uploading, u.generation));
        if ok {
            b.state = State::Staged;
            return Some(Lease { staging: self.clone(), device: u.device, id: u.id, generation: u.generation });
        }
        let _ = b.stage.sync();
        b.state = State::Free;
        b.generation = self.next_generation();
        self.changed.notify_all();
        None
    }

    /// The buffer an execution on `dev` (whose lock the caller holds) runs a
    /// partition of domain 2^`lg` from: its own staged buffer when `lease` is one
    /// on this device, else (to be uploaded into) a free buffer, a new one where
    /// `fits(buffers' bytes after, new bytes, false)` allows, a staged partition's
    /// buffer, or a replaced or first one where `fits(.., .., true)` allows (it may
    /// evict resident parameters to make room). Waits only while StagePcie is
    /// filling every buffer, which takes moments.
    ///
    /// # Errors
    /// `(bytes needed, None)` when no buffer fits the budget, `(.., Some(error))`
    /// when allocating one failed.
    ///
    /// An `urgent` partition (deadline work) first runs from its own buffer: a
    /// free one kept for such partitions, or one added beyond `per_device` where
    /// `fits(.., .., false)` allows; only then from the others.
    pub(crate) fn for_execution(
        &self,
        dev: usize,
        lg: u32,
        lease: Option<&Lease<B>>,
        urgent: bool,
        mut fits: impl FnMut(u64, u64, bool) -> bool,
    ) -> Result<Running<'_, B>, NoBuffer> {
        let need = device_staging_bytes(lg);
        let mut inner = lock(&self.inner);
        let run = |b: &mut Buffer<B>, staged: bool| {
            b.state = State::Executing;
            b.generation = self.next_generation();
            Running { staging: self, device: dev, id: b.id, stage: b.stage.clone(), staged }
        };
        if let Some(l) = lease.filter(|l| l.device == dev) {
            if let Some(b) = inner.devices[dev].iter_mut().find(|b| {
                b.id == l.id && b.generation == l.generation && b.state == State::Staged && b.stage.lg() >= lg
            }) {
                return Ok(run(b, true));
            }
        }
        if urgent {
            let v = &inner.devices[dev];
            if let Some(i) = v.iter().position(|b| b.urgent_only && b.state == State::Free && b.stage.lg() >= lg) {
                return Ok(run(&mut inner.devices[dev][i], false));
            }
            // Replace a smaller one of its own, or add one.
            let own = v.iter().position(|b| b.urgent_only && b.state == State::Free);
            let old = own.map_or(0, |i| device_staging_bytes(v[i].stage.lg()));
            if fits(bytes_of(v) - old + need, need.saturating_sub(old), false) {
                let added = match own {
                    Some(i) => inner.replace(dev, i, lg),
                    None => inner.add(dev, lg),
                };
                if let Ok(i) = added {
                    let b = &mut inner.devices[dev][i];
                    b.urgent_only = true;
                    return Ok(run(b, false));
                }
            }
        }
        loop {
            let v = &inner.devices[dev];
            if let Some(i) = v.iter().position(|b| b.state == State::Free && b.stage.lg() >= lg) {
                return Ok(run(&mut inner.devices[dev][i], false));
            }
            if inner.bulk(dev) < self.per_device && fits(bytes_of(v) + need, need, false) {
                let i = inner.add(dev, lg).map_err(|e| (need, Some(e)))?;
                return Ok(run(&mut inner.devices[dev][i], false));
            }
            // Take a staged partition's buffer: the most recently staged one, likely
            // the last of them to run. It uploads again when it runs.
            let staged = |b: &Buffer<B>| b.state == State::Staged && b.stage.lg() >= lg;
            if let Some(i) = (0..v.len()).filter(|&i| staged(&v[i])).max_by_key(|&i| v[i].generation) {
                let b = &mut inner.devices[dev][i];
                let _ = b.stage.sync();
                return Ok(run(b, false));
            }
            if let Some(i) = v.iter().position(|b| matches!(b.state, State::Free | State::Staged)) {
                let old = device_staging_bytes(v[i].stage.lg());
                if !fits(bytes_of(v) - old + need, need.saturating_sub(old), true) {
                    return Err((need, None));
                }
                let i = inner.replace(dev, i, lg).map_err(|e| (need, Some(e)))?;
                return Ok(run(&mut inner.devices[dev][i], false));
            }
            if v.is_empty() {
                if !fits(need, need, true) {
                    return Err((need, None));
                }
                let i = inner.add(dev, lg).map_err(|e| (need, Some(e)))?;
                return Ok(run(&mut inner.devices[dev][i], false));
            }
            inner = self.changed.wait(inner).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Frees free buffers of device `dev` until at most `keep` are left (resident
    /// parameters, or the retry after an out-of-memory failure, need the room);
    /// returns the bytes freed.
    pub(crate) fn trim(&self, dev: usize, keep: usize) -> u64 {
        let mut inner = lock(&self.inner);
        if inner.lost[dev] {
            return 0;
        }
        let v = &mut inner.devices[dev];
        let mut freed = 0;
        while v.len() > keep {
            let Some(i) = v.iter().rposition(|b| b.state == State::Free) else { break };
            freed += device_staging_bytes(v[i].stage.lg());
            drop(v.remove(i));
        }
        freed
    }
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    /// A buffer that only knows its size; allocation fails at lg 30.
    struct Fake(u32);

    impl DeviceBuffer for Fake {
        fn alloc(_: usize, lg: u32) -> Result<Self, (i32, String)> {
            if lg == 30 {
                Err((2, "out of memory (fake)".into()))
            } else {
                Ok(Fake(lg))
            }
        }
        fn lg(&self) -> u32 {
            self.0
        }
        fn sync(&self) -> Result<(), (i32, String)> {
            Ok(())
        }
    }

    fn states(s: &Staging<Fake>, dev: usize) -> Vec<State> {
        lock(&s.inner).devices[dev].iter().map(|b| b.state).collect()
    }

    fn stage(s: &Arc<Staging<Fake>>, lg: u32, wait: bool) -> Option<Lease<Fake>> {
        timed_stage(s, lg, wait).0
    }

    /// [`stage`], and how long it waited for a buffer.
    fn timed_stage(s: &Arc<Staging<Fake>>, lg: u32, wait: bool) -> (Option<Lease<Fake>>, Duration) {
        let mut waited = Duration::ZERO;
        let lease = s.acquire(lg, |_| true, |_, _, _| true, wait, &mut waited).and_then(|u| s.uploaded(u, true));
        (lease, waited)
    }

    #[test]
    fn double_buffering_one_executes_while_the_next_is_staged() {
        let s = Staging::<Fake>::new(1, 2);
        let l1 = stage(&s, 10, false).expect("a first buffer");
        let l2 = stage(&s, 10, false).expect("a second buffer");
        assert!(stage(&s, 10, false).is_none(), "two per device, both hold partitions");
        assert_eq!(s.bytes(0), 2 * device_staging_bytes(10));
        let r = s.for_execution(0, 10, Some(&l1), false, |_, _, _| panic!("no new buffer needed")).unwrap();
        assert!(r.staged, "runs from its own staged buffer");
        assert_eq!(states(&s, 0), [State::Executing, State::Staged]);
        drop(l1); // its buffer is executing: the lease no longer owns it
        assert_eq!(states(&s, 0), [State::Executing, State::Staged]);
        drop(r);
        let l3 = stage(&s, 10, false).expect("the freed buffer, reused");
        assert_eq!(s.bytes(0), 2 * device_staging_bytes(10), "no third buffer");
        drop((l2, l3));
        assert_eq!(states(&s, 0), [State::Free, State::Free], "dropped leases free their buffers");
    }

    /// A hung device's buffers are left alone: a staged partition dropped (it ran
    /// elsewhere) neither waits on the device's copies nor frees its buffer, and a
    /// trim frees nothing there.
    #[test]
    fn a_lost_device_is_never_synchronized_or_freed() {
        let s = Staging::<Fake>::new(2, 2);
        let lease = stage(&s, 10, false).unwrap();
        let dev = lease.device;
        let free = stage(&s, 10, false).unwrap();
        let other = free.device;
        drop(free);
        s.lose(dev);
        drop(lease);
        assert!(states(&s, dev).contains(&State::Staged), "left as it was");
        assert_eq!(s.trim(dev, 0), 0);
        assert!(!states(&s, dev).is_empty());
        if other != dev {
            assert_eq!(s.trim(other, 0), device_staging_bytes(10), "other devices as before");
        }
    }

    #[test]
    fn an_unstaged_execution_takes_a_staged_buffer_and_its_owner_uploads_again() {
        let s = Staging::<Fake>::new(1, 1);
        let l1 = stage(&s, 10, false).unwrap();
        let r = s.for_execution(0, 10, None, false, |_, _, _| false).unwrap();
        assert!(!r.staged, "taken from the staged partition, to be uploaded into");
        drop(l1);
        assert_eq!(states(&s, 0), [State::Executing], "the old lease does not free a buffer it lost");
        drop(r);
        let l2 = stage(&s, 10, false).unwrap();
        let lost = stage(&s, 10, false);
        assert!(lost.is_none());
        let r = s.for_execution(0, 10, None, false, |_, _, _| false).unwrap();
        drop(r);
        let r = s.for_execution(0, 10, Some(&l2), false, |_, _, _| false).unwrap();
        assert!(!r.staged, "its buffer was taken: it uploads again");
    }

    /// A deadline partition runs from a buffer of its own beyond `per_device`: it
    /// takes no staged PoRep partition's buffer, and StagePcie never takes its.
    #[test]
    fn an_urgent_execution_runs_from_its_own_buffer() {
        let s = Staging::<Fake>::new(1, 1);
        let l1 = stage(&s, 12, false).unwrap();
        let r = s.for_execution(0, 8, None, true, |_, _, _| true).unwrap();
        assert!(!r.staged);
        assert_eq!(states(&s, 0), [State::Staged, State::Executing], "the staged partition keeps its buffer");
        drop(r);
        // Reused by the next deadline partition; never by StagePcie.
        assert!(stage(&s, 8, false).is_none(), "StagePcie does not take the deadline buffer");
        let r = s.for_execution(0, 8, None, true, |_, _, _| panic!("no new buffer needed")).unwrap();
        drop(r);
        let r = s.for_execution(0, 12, Some(&l1), false, |_, _, _| false).unwrap();
        assert!(r.staged, "the PoRep partition runs from its own staged buffer");
        drop(r);
        // Without room for one, it falls back to taking a buffer as before.
        let s = Staging::<Fake>::new(1, 1);
        let _l = stage(&s, 12, false).unwrap();
        let r = s.for_execution(0, 8, None, true, |_, _, may_evict| may_evict).unwrap();
        assert_eq!(states(&s, 0), [State::Executing]);
        drop(r);
    }

    #[test]
    fn the_most_recently_staged_partition_loses_its_buffer_first() {
        let s = Staging::<Fake>::new(1, 2);
        // The first buffer changes hands a few times before the second exists.
        for _ in 0..3 {
            drop(stage(&s, 10, false).unwrap());
        }
        let first = stage(&s, 10, false).unwrap();
        let second = stage(&s, 10, false).unwrap();
        let r = s.for_execution(0, 10, None, false, |_, _, _| false).unwrap();
        drop(r);
        let r = s.for_execution(0, 10, Some(&second), false, |_, _, _| false).unwrap();
        assert!(!r.staged, "the later one lost its buffer");
        drop(r);
        let r = s.for_execution(0, 10, Some(&first), false, |_, _, _| false).unwrap();
        assert!(r.staged, "the earlier one kept it");
    }

    #[test]
    fn bulk_waits_for_a_buffer_and_urgent_work_does_not() {
        let s = Staging::<Fake>::new(1, 1);
        let l1 = stage(&s, 10, false).unwrap();
        assert!(stage(&s, 10, false).is_none(), "urgent: no wait");
        let (_, waited) = timed_stage(&s, 10, false);
        assert_eq!(waited, Duration::ZERO, "urgent work reports no wait");
        let s2 = s.clone();
        let waiter = thread::spawn(move || {
            let (lease, waited) = timed_stage(&s2, 10, true);
            (lease.is_some(), waited)
        });
        let t = Instant::now();
        thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "bulk waits while the only buffer holds a partition");
        drop(l1);
        let freed_after = t.elapsed();
        let (got, waited) = waiter.join().unwrap();
        assert!(got, "and takes it once freed");
        assert!(waited >= Duration::from_millis(50), "and reports its wait: {waited:?}");
        assert!(waited <= freed_after + Duration::from_secs(1), "{waited:?}");
    }

    #[test]
    fn never_waits_for_a_buffer_that_cannot_come() {
        let s = Staging::<Fake>::new(1, 1);
        let _l = stage(&s, 10, false).unwrap();
        // Only a 2^10 buffer exists and no room for another: a 2^12 partition
        // goes on unstaged at once, even when it may wait.
        let t = Instant::now();
        assert!(s.acquire(12, |_| true, |_, _, _| false, true, &mut Duration::default()).is_none());
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn budget_and_allocation_failures_leave_partitions_unstaged() {
        let s = Staging::<Fake>::new(1, 2);
        assert!(s.acquire(10, |_| true, |_, _, _| false, false, &mut Duration::default()).is_none(), "no room");
        assert!(
            s.acquire(30, |_| true, |_, _, _| true, false, &mut Duration::default()).is_none(),
            "allocation failed"
        );
        assert_eq!(s.bytes(0), 0);
        // An execution that needs a buffer and has no room gets the bytes it needed.
        let e = s.for_execution(0, 10, None, false, |_, _, _| false).err().unwrap();
        assert_eq!(e.0, device_staging_bytes(10));
        assert!(e.1.is_none());
        let e = s.for_execution(0, 30, None, false, |_, _, _| true).err().unwrap();
        assert!(e.1.is_some(), "allocation error passed on");
    }

    #[test]
    fn larger_partitions_replace_free_smaller_buffers() {
        let s = Staging::<Fake>::new(1, 1);
        drop(stage(&s, 10, false).unwrap());
        let l = stage(&s, 12, false).expect("the free 2^10 buffer replaced");
        assert_eq!(s.bytes(0), device_staging_bytes(12));
        let r = s.for_execution(0, 12, Some(&l), false, |_, _, _| false).unwrap();
        assert!(r.staged);
    }

    #[test]
    fn retired_devices_get_no_buffers_and_trim_frees_only_free_ones() {
        let s = Staging::<Fake>::new(2, 2);
        let u = s.acquire(10, |d| d == 1, |_, _, _| true, false, &mut Duration::default()).unwrap();
        assert_eq!(u.device, 1, "device 0 is retired");
        let l = s.uploaded(u, true).unwrap();
        drop(stage(&s, 10, false));
        let before = s.bytes(0) + s.bytes(1);
        let freed = s.trim(0, 0) + s.trim(1, 0);
        assert_eq!(s.bytes(1), device_staging_bytes(10), "the staged buffer stays");
        assert_eq!(before - freed, s.bytes(0) + s.bytes(1));
        drop(l);
        assert_eq!(s.trim(1, 0), device_staging_bytes(10));
    }
}

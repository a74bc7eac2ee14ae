//! Pinned (page-locked) host buffers that partitions are copied into before their upload.
//!
//! Uploads from pageable memory run at ~7 GB/s on the H200 host, from pinned memory at
//! ~55 GB/s (docs/gpu.md). A 2^22 partition moves ~0.9 GB per proof
//! (a, b, c and the MSM scalars), so StagePcie copies it into a pinned buffer on the
//! CPU and ProveGpu's uploads then take a fraction of the time. The pool is bounded
//! by `backend.pinned_memory`; buffers are reused across partitions (allocating pinned
//! memory is slow) and idle ones are freed to make room for a larger size. When the
//! pool is exhausted a partition is uploaded from pageable memory instead (counted as a
//! fallback), so the pool never blocks the pipeline.
//!
//! The pool also lends buffers to synthesis ([`PinnedEvals`], through the
//! `EvalAlloc` the backend hands the Synthesize stage): pre-compiled synthesis
//! writes a, b, c straight into pinned memory, and StagePcie then has nothing of
//! them to copy.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc, Mutex,
};

use blstrs::Scalar;
use cuzk_core::{EvalAlloc, EvalBuffer};

/// The pool's state, for status and metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct PinnedStats {
    /// The configured bound.
    pub capacity: u64,
    /// Pinned memory allocated now (in use or idle in the pool).
    pub allocated: u64,
    /// Held by partitions now (lent to synthesis or holding an uploaded partition).
    pub in_use: u64,
    /// Buffers lent to synthesis for a, b, c.
    pub lent: u64,
    /// Requests the pool did not serve: a partition uploaded from pageable memory
    /// (the pool at its bound), or synthesis finding no idle buffer.
    pub fallbacks: u64,
}

/// Allocation granularity, so that partitions of nearly the same size share buffers.
const GRANULE: usize = 64 << 20;

struct Block {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the block owns its allocation exclusively; it is plain host memory.
unsafe impl Send for Block {}

#[cfg(cuzk_cuda)]
impl Block {
    fn alloc(dev: usize, len: usize) -> Result<Block, String> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: out-pointer is valid; the C side catches every exception.
        crate::ffi::cuda::check(unsafe { crate::ffi::cuda::cuzk_host_alloc(dev, len, &mut ptr) })
            .map_err(|(_, m)| m)?;
        // Initialized once, when the pool grows: buffers lent to synthesis are then
        // viewed as scalars before they are written.
        // SAFETY: `ptr` is a fresh allocation of `len` bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(Block { ptr, len })
    }
}

#[cfg(not(cuzk_cuda))]
impl Block {
    fn alloc(_: usize, _: usize) -> Result<Block, String> {
        Err("this build has no CUDA code".into())
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        #[cfg(cuzk_cuda)]
        // SAFETY: allocated by cuzk_host_alloc and freed once, here.
        unsafe {
            crate::ffi::cuda::cuzk_host_free(self.ptr)
        }
    }
}

#[derive(Default)]
struct State {
    free: Vec<Block>,
    stats: PinnedStats,
}

/// A bounded pool of pinned host buffers.
pub struct PinnedPool {
    st: Mutex<State>,
    /// The device whose context allocates (the memory is portable to all devices);
    /// `NO_DEVICE` once every device is retired (the pool then stops growing).
    device: AtomicUsize,
}

const NO_DEVICE: usize = usize::MAX;

/// A buffer from the pool; returns to it when dropped.
pub struct PinnedBuf {
    block: Option<Block>,
    pool: Arc<PinnedPool>,
}

impl PinnedBuf {
    pub fn as_ptr(&self) -> *const u8 {
        self.block.as_ref().map_or(std::ptr::null(), |b| b.ptr)
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.block.as_ref().map_or(std::ptr::null_mut(), |b| b.ptr)
    }

    pub fn len(&self) -> usize {
        self.block.as_ref().map_or(0, |b| b.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            let mut st = self.pool.st.lock().unwrap_or_else(|e| e.into_inner());
            st.stats.in_use -= b.len as u64;
            st.free.push(b);
        }
    }
}

impl PinnedPool {
    /// A pool of at most `capacity` bytes, allocated through `device`'s context.
    pub fn new(capacity: u64, device: usize) -> Arc<PinnedPool> {
        let st = State { free: Vec::new(), stats: PinnedStats { capacity, ..Default::default() } };
        Arc::new(PinnedPool { st: Mutex::new(st), device: AtomicUsize::new(device) })
    }

    /// Allocates through `device` from now on (the one it used was retired after a
    /// sticky error: its context fails every call); `None`: no device is left, and the
    /// pool stops growing. Buffers already allocated stay valid host memory.
    pub(crate) fn set_device(&self, device: Option<usize>) {
        self.device.store(device.unwrap_or(NO_DEVICE), Ordering::Relaxed);
    }

    pub fn stats(&self) -> PinnedStats {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).stats
    }

    /// A buffer of at least `bytes`, or `None` (counted as a fallback) when the pool
    /// cannot provide one within its bound.
    pub fn acquire(self: &Arc<Self>, bytes: usize) -> Option<PinnedBuf> {
        self.take(bytes, true)
    }

    /// An idle buffer of at least `bytes`, never a new one: for callers that must not
    /// wait for an allocation (pinning memory takes ~0.1 s per 256 MiB and takes
    /// the driver's locks, which stalls the GPU stage's CUDA calls).
    pub fn acquire_idle(self: &Arc<Self>, bytes: usize) -> Option<PinnedBuf> {
        self.take(bytes, false)
    }

    fn take(self: &Arc<Self>, bytes: usize, grow: bool) -> Option<PinnedBuf> {
        // Declared before the guard: buffers freed to make room are released (which
        // synchronizes the device) after the lock is.
        let mut freed = Vec::new();
        let len = {
            let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
            // Smallest idle buffer that fits.
            if let Some(i) =
                st.free.iter().enumerate().filter(|(_, b)| b.len >= bytes).min_by_key(|(_, b)| b.len).map(|(i, _)| i)
            {
                let b = st.free.swap_remove(i);
                st.stats.in_use += b.len as u64;
                return Some(PinnedBuf { block: Some(b), pool: self.clone() });
            }
            let len = bytes.div_ceil(GRANULE) * GRANULE;
            // Buffers in use cannot be freed: if the new one cannot fit beside them,
            // keep the idle ones for later partitions and upload this one from
            // pageable memory.
            let device = self.device.load(Ordering::Relaxed);
            if !grow || device == NO_DEVICE || st.stats.in_use + len as u64 > st.stats.capacity {
                st.stats.fallbacks += 1;
                return None;
            }
            // Free idle (too small) buffers, largest first, until the new one fits.
            while st.stats.allocated + len as u64 > st.stats.capacity {
                st.free.sort_by_key(|b| b.len);
                match st.free.pop() {
                    Some(b) => {
                        st.stats.allocated -= b.len as u64;
                        freed.push(b);
                    }
                    None => {
                        st.stats.fallbacks += 1;
                        return None;
                    }
                }
            }
            // Claimed now, allocated below without the lock, so that other workers
            // (and buffers coming back) never wait for the allocation.
            st.stats.allocated += len as u64;
            st.stats.in_use += len as u64;
            len
        };
        drop(freed);
        match Block::alloc(self.device.load(Ordering::Relaxed), len) {
            Ok(b) => Some(PinnedBuf { block: Some(b), pool: self.clone() }),
            Err(e) => {
                tracing::warn!(bytes = len, error = %e, "pinned host allocation failed; uploading from pageable memory");
                let mut st = self.st.lock().unwrap_or_else(|e| e.into_inner());
                st.stats.allocated -= len as u64;
                st.stats.in_use -= len as u64;
                st.stats.fallbacks += 1;
                None
            }
        }
    }
}

/// a, b, c written by synthesis into a buffer from the pool (`len` scalars each,
/// back to back).
#[derive(Debug)]
pub struct PinnedEvals {
    buf: PinnedBuf,
    len: usize,
}

impl std::fmt::Debug for PinnedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuf").field("bytes", &self.len()).finish()
    }
}

impl EvalBuffer for PinnedEvals {
    fn len(&self) -> usize {
        self.len
    }

    fn abc(&self) -> [&[Scalar]; 3] {
        // SAFETY: the buffer holds at least 3 * len scalars (checked in `alloc`),
        // initialized (zeroed when allocated), page-aligned; borrowed from `self`.
        let all = unsafe { std::slice::from_raw_parts(self.buf.as_ptr() as *const Scalar, 3 * self.len) };
        let (a, rest) = all.split_at(self.len);
        let (b, c) = rest.split_at(self.len);
        [a, b, c]
    }

    fn abc_mut(&mut self) -> [&mut [Scalar]; 3] {
        // SAFETY: as in `abc`, and borrowed mutably from `self`.
        let all = unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr() as *mut Scalar, 3 * self.len) };
        let (a, rest) = all.split_at_mut(self.len);
        let (b, c) = rest.split_at_mut(self.len);
        [a, b, c]
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// Lends pool buffers to synthesis for a, b, c.
pub struct PinnedEvalAlloc(pub Arc<PinnedPool>);

impl EvalAlloc for PinnedEvalAlloc {
    fn alloc(&self, len: usize) -> Option<Box<dyn EvalBuffer>> {
        let bytes = len.checked_mul(3 * 32)?;
        // Idle buffers only: the pool grows in StagePcie, whose upload of the
        // first (plain) wave leaves buffers of this size behind.
        let buf = self.0.acquire_idle(bytes)?;
        self.0.st.lock().unwrap_or_else(|e| e.into_inner()).stats.lent += 1;
        Some(Box::new(PinnedEvals { buf, len }))
    }
}

/// A partition's host inputs in pinned memory: a, b, c (Montgomery scalars) lent
/// to synthesis, or copied here with the dense L, A, B MSM scalars into one buffer,
/// 32 bytes per element.
pub struct PinnedPartition {
    pub(crate) lent: Option<PinnedEvals>,
    pub(crate) buf: Option<PinnedBuf>,
    /// Element offsets and counts of a, b, c, l_scalars, a_scalars, b_scalars in
    /// `buf` (a, b, c only when not lent).
    pub(crate) parts: [(usize, usize); 6],
}

impl std::fmt::Debug for PinnedPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedPartition")
            .field("lent", &self.lent)
            .field("bytes", &self.buf.as_ref().map(PinnedBuf::len))
            .field("parts", &self.parts)
            .finish()
    }
}

impl PinnedPartition {
    /// Copies host arrays (32-byte elements each; a, b, c, then the L, A, B scalars;
    /// empty ones take no room) into `buf`, in parallel.
    pub(crate) fn fill(
        lent: Option<PinnedEvals>,
        mut buf: PinnedBuf,
        arrays: [(*const u8, usize); 6],
    ) -> PinnedPartition {
        use rayon::prelude::*;
        let mut parts = [(0usize, 0usize); 6];
        let mut off = 0;
        for (p, (_, n)) in parts.iter_mut().zip(arrays.iter()) {
            *p = (off, *n);
            off += n;
        }
        assert!(off * 32 <= buf.len(), "pinned buffer too small");
        // Chunks of 8 MiB so that all cores share the copy.
        const CHUNK: usize = 8 << 20;
        let dst = buf.as_mut_ptr() as usize;
        let jobs: Vec<(usize, usize, usize)> = arrays
            .iter()
            .zip(parts.iter())
            .flat_map(|((src, n), (o, _))| {
                let (src, bytes, dst_off) = (*src as usize, n * 32, o * 32);
                (0..bytes.div_ceil(CHUNK)).map(move |k| {
                    let s = k * CHUNK;
                    (src + s, dst_off + s, CHUNK.min(bytes - s))
                })
            })
            .collect();
        jobs.into_par_iter().for_each(|(src, dst_off, len)| {
            // SAFETY: src ranges lie within the caller's arrays (alive for this call);
            // dst ranges are disjoint and within `buf` (checked above).
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, (dst + dst_off) as *mut u8, len) }
        });
        PinnedPartition { lent, buf: Some(buf), parts }
    }

    /// Only a, b, c, lent to synthesis (nothing else to copy, or no room to).
    pub(crate) fn lent(lent: PinnedEvals) -> PinnedPartition {
        PinnedPartition { lent: Some(lent), buf: None, parts: [(0, 0); 6] }
    }

    /// a, b or c (`i` < 3) when it is in pinned memory.
    pub(crate) fn abc_part(&self, i: usize) -> Option<&[Scalar]> {
        let (p, n) = if i < 3 { self.part(i)? } else { return None };
        // SAFETY: `part` points at `n` scalars within a live buffer of `self` (lent
        // to synthesis, which wrote them, or copied from the partition's a, b, c by
        // `fill`), initialized, page-aligned; borrowed from `self`.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<Scalar>(), n) })
    }

    /// The L, A or B MSM scalars (`k` < 3) when they are in pinned memory.
    pub(crate) fn scalars_part(&self, k: usize) -> Option<&[crate::ScalarBytes]> {
        let (p, n) = if k < 3 { self.part(3 + k)? } else { return None };
        // SAFETY: as in `abc_part`: `n` 32-byte scalars copied by `fill`; any bytes
        // are a valid `[u8; 32]`.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<crate::ScalarBytes>(), n) })
    }

    /// Pointer and count of part `i` (0 = a … 5 = b_scalars) when it is in pinned
    /// memory.
    pub(crate) fn part(&self, i: usize) -> Option<(*const u8, usize)> {
        if i < 3 {
            if let Some(l) = &self.lent {
                let s = l.abc()[i];
                return Some((s.as_ptr().cast(), s.len()));
            }
        }
        let buf = self.buf.as_ref()?;
        let (off, n) = self.parts[i];
        // SAFETY: within the buffer by construction (`fill`).
        Some((unsafe { buf.as_ptr().add(off * 32) }, n))
    }
}

/// Without CUDA the pool cannot allocate (the GPU tests cover lending with it).
#[cfg(all(test, not(cuzk_cuda)))]
mod tests {
    use super::*;

    /// Synthesis is told no, and falls back to heap memory.
    #[test]
    fn no_cuda_no_loan() {
        let pool = PinnedPool::new(1 << 30, 0);
        assert!(PinnedEvalAlloc(pool.clone()).alloc(1000).is_none());
        assert_eq!(pool.stats().fallbacks, 1);
    }
}

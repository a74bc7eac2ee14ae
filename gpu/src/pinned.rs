//! Pinned (page-locked) host buffers for staging partitions before upload.
//!
//! Uploads from pageable memory run at ~7 GB/s on the H200 host, from pinned memory at
//! ~55 GB/s (../shared/design/gpu-build.md). A 2^22 partition moves ~0.9 GB per proof
//! (a, b, c and the MSM scalars), so StagePcie copies it into a pinned buffer on the
//! CPU and ProveGpu's uploads then take a fraction of the time. The pool is bounded
//! by `backend.pinned_memory`; buffers are reused across partitions (allocating pinned
//! memory is slow) and idle ones are freed to make room for a larger size. When the
//! pool is exhausted a partition is staged from pageable memory instead (counted as a
//! fallback), so the pool never blocks the pipeline.

use std::sync::{Arc, Mutex};

/// The pool's state, for status and metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct PinnedStats {
    /// The configured bound.
    pub capacity: u64,
    /// Pinned memory allocated now (in use or idle in the pool).
    pub allocated: u64,
    /// Held by staged partitions now.
    pub in_use: u64,
    /// Partitions staged from pageable memory because the pool was full.
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
    /// The device whose context allocates (the memory is portable to all devices).
    device: usize,
}

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
        Arc::new(PinnedPool { st: Mutex::new(st), device })
    }

    pub fn stats(&self) -> PinnedStats {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).stats
    }

    /// A buffer of at least `bytes`, or `None` (counted as a fallback) when the pool
    /// cannot provide one within its bound.
    pub fn acquire(self: &Arc<Self>, bytes: usize) -> Option<PinnedBuf> {
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
        // Buffers in use cannot be freed: if the new one cannot fit beside them, keep
        // the idle ones for later partitions and stage this one from pageable memory.
        if st.stats.in_use + len as u64 > st.stats.capacity {
            st.stats.fallbacks += 1;
            return None;
        }
        // Free idle (too small) buffers, largest first, until the new one fits.
        while st.stats.allocated + len as u64 > st.stats.capacity {
            st.free.sort_by_key(|b| b.len);
            match st.free.pop() {
                Some(b) => st.stats.allocated -= b.len as u64,
                None => {
                    st.stats.fallbacks += 1;
                    return None;
                }
            }
        }
        // Allocating under the lock keeps the accounting simple; it happens only while
        // the pool grows (warm-up, or a larger partition shape).
        match Block::alloc(self.device, len) {
            Ok(b) => {
                st.stats.allocated += len as u64;
                st.stats.in_use += len as u64;
                Some(PinnedBuf { block: Some(b), pool: self.clone() })
            }
            Err(e) => {
                tracing::warn!(bytes = len, error = %e, "pinned host allocation failed; staging from pageable memory");
                st.stats.fallbacks += 1;
                None
            }
        }
    }
}

/// A partition's host inputs copied into one pinned buffer: a, b, c (Montgomery
/// scalars) then the L, A, B MSM scalars, each 32 bytes per element.
pub struct PinnedPartition {
    pub(crate) buf: PinnedBuf,
    /// Element offsets and counts of a, b, c, l_scalars, a_scalars, b_scalars.
    pub(crate) parts: [(usize, usize); 6],
}

impl std::fmt::Debug for PinnedPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedPartition").field("bytes", &self.buf.len()).field("parts", &self.parts).finish()
    }
}

impl PinnedPartition {
    /// Copies the six host arrays (32-byte elements each) into `buf`, in parallel.
    pub(crate) fn fill(mut buf: PinnedBuf, arrays: [(*const u8, usize); 6]) -> PinnedPartition {
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
        PinnedPartition { buf, parts }
    }

    /// Pointer to part `i` (0 = a … 5 = b_scalars).
    pub(crate) fn ptr<T>(&self, i: usize) -> *const T {
        // SAFETY: within the buffer by construction.
        unsafe { self.buf.as_ptr().add(self.parts[i].0 * 32) as *const T }
    }

    pub(crate) fn count(&self, i: usize) -> usize {
        self.parts[i].1
    }
}

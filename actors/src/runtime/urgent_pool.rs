//! The thread pool deadline work runs its parallel parts on.
//!
//! Stages parallelize with rayon (PrepareMsm's scalar split, the pinned copies of an
//! upload). On the global pool, a WinningPoSt's few milliseconds of parallel work
//! queue behind a 32GiB PoRep partition's bit split (~1.7 s) and thousands of 8 MiB
//! copies: rayon serves jobs injected from outside its pool after its threads run
//! out of their own. So the runtime runs an urgent item's `process` inside this
//! small pool of its own ([`install`]), where nothing bulk ever runs.

use std::sync::OnceLock;

static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();

/// Threads of the pool: deadline partitions are small, and the pool must not take
/// the host's cores from bulk work when it is idle (its threads then sleep).
const THREADS: usize = 4;

/// Builds the pool now: its threads inherit this thread's scheduling priority, so
/// the engine builds it at start, before any thread is reniced for bulk work.
pub fn init() {
    POOL.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()).min(THREADS);
        rayon::ThreadPoolBuilder::new().num_threads(n).thread_name(|i| format!("cuzk-urgent-{i}")).build().ok()
    });
}

/// Lowers the priority of rayon's global pool, where only bulk work's parallel parts
/// run, to `nice` (every thread of it, built now if it is not yet); 0 or less: no
/// change. Deadline work's threads (this pool, the urgent synthesis thread, the
/// stages' workers) keep the engine's priority, so a bulk split or copy filling
/// every core gives way to them.
pub fn lower_bulk_pool(nice: i32) {
    if nice > 0 {
        rayon::broadcast(|_| super::lower_thread_priority(nice));
    }
}

/// Runs `f` inside the urgent pool (its rayon calls stay in it); in place if the
/// pool could not be built.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    init();
    match POOL.get().and_then(Option::as_ref) {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rayon_work_of_an_urgent_item_stays_in_its_pool() {
        use rayon::prelude::*;
        let names: Vec<String> = super::install(|| {
            (0..64).into_par_iter().map(|_| std::thread::current().name().unwrap_or_default().to_string()).collect()
        });
        assert!(names.iter().all(|n| n.starts_with("cuzk-urgent-")), "{names:?}");
    }

    /// Every thread of the global pool is reniced; this pool's and the caller's
    /// are not. (Other tests of this binary then run their bulk work at nice 3:
    /// harmless, and only ever lowered.)
    #[cfg(target_os = "linux")]
    #[test]
    #[allow(unsafe_code)]
    fn the_bulk_pool_is_reniced_and_the_urgent_one_is_not() {
        // SAFETY: a plain syscall on the calling thread.
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        super::init();
        let before = nice();
        super::lower_bulk_pool(3);
        let bulk = rayon::broadcast(|_| nice());
        assert!(bulk.iter().all(|&n| n >= 3), "global pool's nice values: {bulk:?}");
        assert_eq!(nice(), before, "the calling thread keeps its priority");
        let urgent: Vec<i32> = super::install(|| rayon::broadcast(|_| nice()));
        assert!(urgent.iter().all(|&n| n == before), "urgent pool's nice values: {urgent:?}");
    }
}

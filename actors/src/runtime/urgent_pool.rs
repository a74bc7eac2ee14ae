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
}

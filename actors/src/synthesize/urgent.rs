//! The thread deadline partitions are synthesized on.
//!
//! Bulk synthesis runs at `synthesize.nice` on the stage's worker threads, and a
//! thread's nice value can only be raised back with privileges, so a worker that once
//! ran bulk work cannot give a WinningPoSt the CPU ahead of its neighbours. This
//! thread is started by the engine at its own priority and never reniced: a partition
//! of a job at or above the express threshold is handed to it through a rendezvous
//! channel (crossbeam-channel, `bounded(0)`: handed over only if the thread is idle),
//! so the scheduler gives it the CPU ahead of the niced bulk workers. When the thread
//! is busy with another deadline partition, the worker synthesizes in place.

use std::{any::Any, panic::AssertUnwindSafe};

use crossbeam_channel::{bounded, Sender, TrySendError};

type Task = Box<dyn FnOnce() + Send>;

/// A dedicated, un-niced thread fed one task at a time.
pub struct UrgentThread {
    tx: Sender<Task>,
}

impl UrgentThread {
    /// Starts the thread (named `cuzk-synth-urgent`); `None` if it cannot start (the
    /// workers then synthesize everything in place).
    pub fn spawn() -> Option<Self> {
        let (tx, rx) = bounded::<Task>(0);
        std::thread::Builder::new()
            .name("cuzk-synth-urgent".into())
            .spawn(move || {
                for task in rx {
                    task();
                }
            })
            .ok()?;
        Some(UrgentThread { tx })
    }

    /// Runs `f` on the thread if it is idle, else on the calling thread; returns its
    /// result either way. A panic in `f` is raised again on the calling thread, where
    /// the stage runtime handles it as any stage panic (the thread lives on).
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (rtx, rrx) = bounded::<Result<R, Box<dyn Any + Send>>>(1);
        let task: Task = Box::new(move || {
            let _ = rtx.send(std::panic::catch_unwind(AssertUnwindSafe(f)));
        });
        match self.tx.try_send(task) {
            Ok(()) => {}
            Err(TrySendError::Full(task) | TrySendError::Disconnected(task)) => task(),
        }
        match rrx.recv() {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => panic!("the urgent synthesis task ended without a result"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_on_the_thread_when_idle_in_place_when_busy_and_passes_panics_on() {
        let u = std::sync::Arc::new(UrgentThread::spawn().unwrap());
        // The rendezvous needs the thread parked in recv: give it a moment.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let name = u.run(|| std::thread::current().name().map(str::to_owned));
        assert_eq!(name.as_deref(), Some("cuzk-synth-urgent"));
        // Busy: the second caller runs its task itself.
        let (hold_tx, hold_rx) = bounded::<()>(0);
        let u2 = u.clone();
        let busy = std::thread::spawn(move || u2.run(move || hold_rx.recv().is_ok()));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let me = std::thread::current().id();
        assert_eq!(u.run(move || std::thread::current().id()), me, "in place while the thread is busy");
        hold_tx.send(()).unwrap();
        assert!(busy.join().unwrap());
        // A panic comes back to the caller; the thread serves the next task.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| u.run(|| panic!("boom"))));
        assert!(r.is_err());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(u.run(|| 7), 7);
    }
}

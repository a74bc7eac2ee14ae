//! A bound on decoded requests waiting to be handed to the engine.
//!
//! `max_concurrent_uploads` bounds the SubmitProof / Prove bodies being received;
//! once a body has arrived its slot is free again, but the decoded request (a C1 of
//! up to `max_message_bytes`, then the spec built from it) still waits in its
//! handler until the engine's intake takes the job, which under backpressure can be
//! minutes. Without a bound, a client that keeps sending while the engine is full
//! grows the daemon's memory without limit. [`Intake`] counts the requests between
//! decoding and the engine taking them, per class (bulk: PoRep, SnapDeals; deadline:
//! WinningPoSt, WindowPoSt, so that a flood of PoRep never refuses a PoSt), and
//! refuses one beyond `[daemon] max_waiting_inputs` of its class at once with
//! `RESOURCE_EXHAUSTED` naming the limit: the request is dropped, the client retries
//! later. Memory held by waiting inputs is thus at most
//! 2 × `max_waiting_inputs` × `max_message_bytes` (with the spec built from each).

// tonic::Status is 176 bytes; the handlers' error type is Status, as tonic requires.
#![allow(clippy::result_large_err)]

use std::{
    fmt::Write,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// Waiting requests, per class.
pub(crate) struct Intake {
    max: usize,
    slots: [Arc<Semaphore>; 2],
    waiting: [AtomicU64; 2],
    refused: [AtomicU64; 2],
}

const CLASSES: [&str; 2] = ["bulk", "deadline"];

/// A request's place among the waiting ones; freed when dropped (the engine took
/// the job, or the handler returned).
pub(crate) struct Waiting {
    _permit: OwnedSemaphorePermit,
    intake: Arc<Intake>,
    class: usize,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.intake.waiting[self.class].fetch_sub(1, Ordering::Relaxed);
    }
}

impl Intake {
    /// At most `max` waiting requests of each class (at least 1).
    pub(crate) fn new(max: usize) -> Arc<Self> {
        let max = max.max(1);
        Arc::new(Intake {
            max,
            slots: [Arc::new(Semaphore::new(max)), Arc::new(Semaphore::new(max))],
            waiting: Default::default(),
            refused: Default::default(),
        })
    }

    /// A decoded request of `what` (its kind, for the error) enters, or is refused
    /// at once when `max` of its class already wait.
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED`, naming the limit.
    pub(crate) fn enter(self: &Arc<Self>, deadline: bool, what: &str) -> Result<Waiting, Status> {
        let class = usize::from(deadline);
        match self.slots[class].clone().try_acquire_owned() {
            Ok(permit) => {
                self.waiting[class].fetch_add(1, Ordering::Relaxed);
                Ok(Waiting { _permit: permit, intake: self.clone(), class })
            }
            Err(_) => {
                self.refused[class].fetch_add(1, Ordering::Relaxed);
                Err(Status::resource_exhausted(format!(
                    "{} {} requests already wait for the engine to take them ([daemon] max_waiting_inputs = {}): \
                     the {what} request was not accepted; retry later",
                    self.max, CLASSES[class], self.max
                )))
            }
        }
    }

    /// Requests of the class waiting now.
    #[cfg(test)]
    pub(crate) fn waiting(&self, deadline: bool) -> u64 {
        self.waiting[usize::from(deadline)].load(Ordering::Relaxed)
    }

    /// Prometheus text of the gauges and counters.
    pub(crate) fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "# HELP cuzk_daemon_inputs_waiting Decoded SubmitProof/Prove requests not yet taken by the engine."
        );
        let _ = writeln!(o, "# TYPE cuzk_daemon_inputs_waiting gauge");
        for (i, c) in CLASSES.iter().enumerate() {
            let _ =
                writeln!(o, "cuzk_daemon_inputs_waiting{{class=\"{c}\"}} {}", self.waiting[i].load(Ordering::Relaxed));
        }
        let _ = writeln!(o, "# HELP cuzk_daemon_inputs_waiting_max [daemon] max_waiting_inputs, per class.");
        let _ = writeln!(o, "# TYPE cuzk_daemon_inputs_waiting_max gauge");
        let _ = writeln!(o, "cuzk_daemon_inputs_waiting_max {}", self.max);
        let _ = writeln!(
            o,
            "# HELP cuzk_daemon_inputs_refused_total Requests refused because max_waiting_inputs of their class waited."
        );
        let _ = writeln!(o, "# TYPE cuzk_daemon_inputs_refused_total counter");
        for (i, c) in CLASSES.iter().enumerate() {
            let _ = writeln!(
                o,
                "cuzk_daemon_inputs_refused_total{{class=\"{c}\"}} {}",
                self.refused[i].load(Ordering::Relaxed)
            );
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Beyond the limit a request is refused at once with an error naming it; the
    /// classes are counted apart; a freed place is taken again.
    #[test]
    fn waiting_requests_are_bounded_per_class() {
        let intake = Intake::new(2);
        let a = intake.enter(false, "PoRep").unwrap();
        let _b = intake.enter(false, "PoRep").unwrap();
        let e = intake.enter(false, "PoRep").err().expect("a third bulk request is refused");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("max_waiting_inputs = 2") && e.message().contains("PoRep"), "{e:?}");
        // PoSt is never refused because bulk requests wait.
        let p = intake.enter(true, "WinningPoSt").expect("deadline requests have their own places");
        assert_eq!((intake.waiting(false), intake.waiting(true)), (2, 1));
        drop(a);
        drop(p);
        assert_eq!((intake.waiting(false), intake.waiting(true)), (1, 0));
        let _c = intake.enter(false, "SnapDeals").expect("a freed place is taken again");
        let text = intake.render();
        assert!(text.contains("cuzk_daemon_inputs_waiting{class=\"bulk\"} 2"), "{text}");
        assert!(text.contains("cuzk_daemon_inputs_refused_total{class=\"bulk\"} 1"), "{text}");
        assert!(text.contains("cuzk_daemon_inputs_refused_total{class=\"deadline\"} 0"), "{text}");
    }
}

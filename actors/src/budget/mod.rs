//! Memory budgets. The [`BudgetActor`] owns a [`Ledger`]; stages ask it for
//! [`Reservation`]s before they allocate.

mod config;
mod ledger;

use std::sync::Arc;

use actix::prelude::*;

pub use config::BudgetConfig;
pub use ledger::{BudgetSnapshot, Class, Grant, Ledger, Reservation};

pub use crate::ground::BudgetError;

/// Owns one budget and answers reservation requests.
///
/// The ledger is shared with the reservations it grants, so that a reservation
/// returns its bytes from wherever it is dropped, without a message.
pub struct BudgetActor {
    ledger: Arc<Ledger>,
}

impl BudgetActor {
    /// An actor owning `ledger`.
    pub fn new(ledger: Arc<Ledger>) -> Self {
        BudgetActor { ledger }
    }
}

impl Actor for BudgetActor {
    type Context = Context<Self>;
}

/// Ask for `bytes`; resolves when granted (or fails at once when larger than the
/// whole budget). Dropping the request before it resolves withdraws it.
#[derive(Debug, Message)]
#[rtype(result = "Result<Reservation, BudgetError>")]
pub struct Reserve {
    pub bytes: u64,
    /// Deadline work: ahead of bulk waiters, and into the deadline reserve.
    pub class: Class,
    /// The job's priority: bulk waiters are served highest first.
    pub priority: i32,
}

impl Handler<Reserve> for BudgetActor {
    type Result = ResponseFuture<Result<Reservation, BudgetError>>;

    fn handle(&mut self, msg: Reserve, _: &mut Context<Self>) -> Self::Result {
        let name = self.ledger.name();
        let grant = self.ledger.reserve_ranked(msg.bytes, msg.class, msg.priority);
        Box::pin(async move {
            match grant? {
                Grant::Now(r) => Ok(r),
                Grant::Later(rx) => rx.await.map_err(|_| BudgetError::Closed(name)),
            }
        })
    }
}

/// Current counters of the budget.
#[derive(Debug, Message)]
#[rtype(result = "BudgetSnapshot")]
pub struct Snapshot;

impl Handler<Snapshot> for BudgetActor {
    type Result = MessageResult<Snapshot>;

    fn handle(&mut self, _: Snapshot, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.ledger.snapshot())
    }
}

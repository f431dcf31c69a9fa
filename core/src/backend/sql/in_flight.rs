//! The acquire attempts of one SQL Locker still running, by owner id, so that a release can
//! wait for the attempt it undoes. Kept apart from the SQL (`table.rs`): it is about how long
//! a task lives, not about the database.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ids::OwnerId;
use crate::sync::unpoisoned;

/// The acquire attempts running, by owner id. An attempt runs to its end in a task of its own
/// even when the acquire that started it is dropped: a statement cut short can still reach the
/// server afterwards (sqlx sends what it buffered when the connection is next used), taking the
/// lock after the release that was meant to undo it.
///
/// A release for the same owner id (the one the core sends for an attempt whose answer it did
/// not see) marks the attempt abandoned and waits for it to end. The attempt itself releases
/// the lock when it ends abandoned (unless its answer was `Held`), however late that is: the
/// core gives its release 2 x operation timeout + 1 s, and a statement held up in the network
/// longer used to take the lock after that release had given up, for an owner nobody held a
/// lease for, until the ttl (`faults::sql`: `a_late_acquire_statement_leaves_a_ghost…`).
#[derive(Default)]
pub(super) struct InFlight(std::sync::Mutex<HashMap<OwnerId, Arc<Gate>>>);

/// One attempt's entry: locked while it runs.
struct Gate {
    running: Arc<tokio::sync::Mutex<()>>,
    /// Set by a release for its owner id while it ran: nobody will read its answer.
    abandoned: AtomicBool,
}

/// One running attempt: ends (and wakes the releases waiting for it) when dropped.
pub(super) struct Running {
    registry: Arc<InFlight>,
    owner: OwnerId,
    gate: Arc<Gate>,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl InFlight {
    pub(super) fn start(self: &Arc<Self>, owner: OwnerId) -> Running {
        let running = Arc::new(tokio::sync::Mutex::new(()));
        let held = running
            .clone()
            .try_lock_owned()
            .expect("a new mutex is free");
        let gate = Arc::new(Gate {
            running,
            abandoned: AtomicBool::new(false),
        });
        unpoisoned(&self.0).insert(owner, gate.clone());
        Running {
            registry: self.clone(),
            owner,
            gate,
            _held: held,
        }
    }

    /// Marks the attempt under `owner`, if one is running, abandoned, and returns once none
    /// is running.
    pub(super) async fn abandon(&self, owner: OwnerId) {
        // Marked with the registry locked, as the attempt checks it (see [`Running::settle`]).
        let gate = unpoisoned(&self.0)
            .get(&owner)
            .inspect(|gate| {
                gate.abandoned.store(true, Ordering::Release);
            })
            .cloned();
        if let Some(gate) = gate {
            drop(gate.running.lock().await);
        }
    }
}

impl Running {
    /// Called with the attempt's answer: whether it was abandoned, so that it must undo
    /// itself before it ends. When it was not, it is taken off the registry now, atomically
    /// with the check: a release arriving later finds nothing running and releases by itself.
    pub(super) fn settle(&self) -> bool {
        let mut running = unpoisoned(&self.registry.0);
        if self.gate.abandoned.load(Ordering::Acquire) {
            return true;
        }
        self.unregister(&mut running);
        false
    }

    fn unregister(&self, running: &mut HashMap<OwnerId, Arc<Gate>>) {
        // A later attempt under the same owner id may have replaced the entry.
        if running
            .get(&self.owner)
            .is_some_and(|gate| Arc::ptr_eq(gate, &self.gate))
        {
            running.remove(&self.owner);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = unpoisoned(&self.registry.0);
        self.unregister(&mut running);
    }
}

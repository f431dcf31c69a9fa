//! Re-entry per execution scope (docs/design.md §1.5): a thread, task or coroutine that holds a
//! lock and acquires it again with the `reentrant` option gets a nested lease at once, over the
//! same server lease, with the same token. Without the option the nested acquire fails with
//! DEADLOCK, since waiting for a lock its own scope holds would wait forever.
//!
//! The count is kept here, locally: the server sees one acquisition with one owner id. The
//! lock is released on the server when the last nested lease is released (or dropped); a loss
//! makes every nested lease lost, since they share one lease and its one lost signal.
//!
//! What a scope is belongs to the binding, which names it with a [`Scope`]: Python uses the
//! current asyncio task or else the current thread; Node an AsyncLocalStorage context; the JVM a
//! thread or coroutine. Other scopes sharing the Locker contend as usual, as Redisson and
//! Curator users expect (they count per thread).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::state::LeaseShared;
use crate::error::{Error, Result};
use crate::name::LockName;
use crate::sync::unpoisoned;

/// An execution scope, named by the binding: acquisitions in one scope may re-enter each other;
/// acquisitions in different scopes contend. Two live scopes must never share a number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Scope(u64);

impl Scope {
    pub const fn new(id: u64) -> Scope {
        Scope(id)
    }

    pub const fn id(self) -> u64 {
        self.0
    }
}

type Key = (LockName, Scope);

/// Which scopes hold which names, in one Locker. Entries are weak: a lease nobody holds any
/// more cannot be re-entered.
#[derive(Default)]
pub(crate) struct ScopeRegistry {
    held: Mutex<HashMap<Key, Weak<Reentry>>>,
}

impl ScopeRegistry {
    /// The lease `scope` holds on `name`, if it still holds one.
    pub(crate) fn held(&self, name: &LockName, scope: Scope) -> Option<Arc<Reentry>> {
        let key = (name.clone(), scope);
        let mut held = unpoisoned(&self.held);
        match held.get(&key).and_then(Weak::upgrade) {
            Some(reentry) if reentry.shared.is_held_now() => Some(reentry),
            Some(_) | None => {
                // Released, lost or gone: the scope may acquire afresh.
                held.remove(&key);
                None
            }
        }
    }

    /// Records a fresh acquisition by `scope` and returns its first ticket.
    pub(crate) fn enter_first(
        self: &Arc<Self>,
        name: LockName,
        scope: Scope,
        shared: Arc<LeaseShared>,
    ) -> Arc<Ticket> {
        let reentry = Arc::new(Reentry {
            shared,
            open: Mutex::new(0),
            key: (name, scope),
            registry: Arc::downgrade(self),
        });
        let mut held = unpoisoned(&self.held);
        if held.len() >= 1024 {
            held.retain(|_, entry| entry.strong_count() > 0);
        }
        held.insert(reentry.key.clone(), Arc::downgrade(&reentry));
        drop(held);
        reentry.enter()
    }

    fn forget(&self, reentry: &Reentry) {
        let mut held = unpoisoned(&self.held);
        // Only if the entry is still this one: the scope may have acquired afresh since.
        if held
            .get(&reentry.key)
            .is_some_and(|entry| std::ptr::eq(entry.as_ptr(), reentry))
        {
            held.remove(&reentry.key);
        }
    }
}

/// One server lease held by one scope, and how many of its acquisitions are not released yet.
pub(crate) struct Reentry {
    pub(crate) shared: Arc<LeaseShared>,
    open: Mutex<usize>,
    key: Key,
    registry: Weak<ScopeRegistry>,
}

impl Reentry {
    /// A nested acquisition, if the scope's lease is still open and held. Checked under the
    /// count's lock, which the last release takes before it releases the lock: an acquisition
    /// racing a release on another thread either enters before it (and the release is only of
    /// one acquisition) or finds the lease gone and acquires afresh.
    pub(crate) fn try_enter(self: &Arc<Self>) -> Option<Arc<Ticket>> {
        let mut open = unpoisoned(&self.open);
        if *open == 0 || !self.shared.is_held_now() {
            return None;
        }
        *open += 1;
        drop(open);
        Some(Arc::new(Ticket {
            reentry: self.clone(),
            released: AtomicBool::new(false),
        }))
    }

    /// The first acquisition.
    fn enter(self: &Arc<Self>) -> Arc<Ticket> {
        *unpoisoned(&self.open) += 1;
        Arc::new(Ticket {
            reentry: self.clone(),
            released: AtomicBool::new(false),
        })
    }

    /// Closes one acquisition; true when it was the last one open.
    fn close_one(&self) -> bool {
        let mut open = unpoisoned(&self.open);
        *open = open.saturating_sub(1);
        let last = *open == 0;
        drop(open);
        if last && let Some(registry) = self.registry.upgrade() {
            registry.forget(self);
        }
        last
    }

    pub(crate) fn depth(&self) -> usize {
        *unpoisoned(&self.open)
    }
}

/// One acquisition of a scope's lease: each nested acquire gets its own, and clones of that
/// `Lease` share it.
pub(crate) struct Ticket {
    reentry: Arc<Reentry>,
    released: AtomicBool,
}

impl Ticket {
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// NOT_HELD for an acquisition already released while an outer one still holds the lock;
    /// otherwise what the shared lease says.
    pub(crate) fn ensure_held(&self) -> Result<()> {
        if self.is_released() {
            self.reentry.shared.ensure_held()?;
            return Err(Error::not_held(format!(
                "this acquisition of lock {:?} was already released (an outer one still holds the lock)",
                self.reentry.shared.name.as_str()
            )));
        }
        self.reentry.shared.ensure_held()
    }

    /// Releases this acquisition; the lock itself when it was the last one open.
    pub(crate) async fn release(&self) -> Result<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            // Released before: the same answer as a second release of a plain lease.
            self.reentry.shared.ensure_held()?;
            return Err(Error::not_held(format!(
                "this acquisition of lock {:?} was already released",
                self.reentry.shared.name.as_str()
            )));
        }
        if self.reentry.close_one() {
            self.reentry.shared.release().await
        } else {
            // Inner release: the lock stays held by the outer acquisitions, unless it was lost,
            // which the caller must hear about as with any release.
            self.reentry.shared.ensure_held()
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.released.swap(true, Ordering::AcqRel) && self.reentry.close_one() {
            // The last open acquisition went away without release: release in the background,
            // as a plain lease dropped without release is.
            self.reentry.shared.release_in_background();
        }
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("released", &self.is_released())
            .field("open", &self.reentry.depth())
            .finish()
    }
}

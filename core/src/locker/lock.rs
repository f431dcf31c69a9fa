//! [`Lock`]: one name taken in one mode (a mutex, a semaphore's permit, the read or the write
//! side of a read-write lock), with the acquire forms every mode shares and the re-entry rules
//! between modes (docs/design.md §1.5, §1.8).

use std::time::Duration;

use super::Locker;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::lease::reentry::Scope;
use crate::mode::{LockMode, kind_conflict, permits_conflict};
use crate::name::LockName;
use crate::options::LockOptions;

/// A lock name in one mode, made by [`Locker::mutex`], [`Locker::semaphore`],
/// [`Locker::read_lock`] or [`Locker::write_lock`]. Cheap to clone; it holds nothing itself:
/// each acquire returns a [`Lease`].
///
/// ```no_run
/// # async fn demo(locker: fencelock::Locker) -> fencelock::Result<()> {
/// let reports = locker.semaphore("nightly-reports", 3)?;
/// let permit = reports.acquire(&Default::default()).await?;
/// println!("permit token {}", permit.token());
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    locker: Locker,
    name: LockName,
    mode: LockMode,
}

impl Lock {
    pub(super) fn new(locker: Locker, name: LockName, mode: LockMode) -> Lock {
        Lock { locker, name, mode }
    }

    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// Acquires, waiting up to `options.wait` (forever when `None`). As
    /// [`Locker::acquire`] (errors, cancellation safety); a semaphore taken with another number
    /// of permits than its holders and waiters use, or a name in use as another kind, is
    /// INVALID_ARGUMENT.
    pub async fn acquire(&self, options: &LockOptions) -> Result<Lease> {
        options.validate()?;
        if options.reentrant {
            return Err(Error::invalid(
                "reentrant needs an execution scope to count re-entries in: use acquire_in(scope, ...)",
            ));
        }
        self.locker
            .inner
            .acquire_lock(self.name.clone(), self.mode, options)
            .await
    }

    /// Tries once: `Ok(None)` when the lock is not available in this mode now.
    pub async fn try_acquire(&self, options: &LockOptions) -> Result<Option<Lease>> {
        let options = options.clone().with_wait(Some(Duration::ZERO));
        none_if_timeout(self.acquire(&options).await)
    }

    /// Acquires on behalf of an execution scope (a thread, task or coroutine that the binding
    /// names; docs/design.md §1.5).
    ///
    /// If `scope` already holds the name through this Locker: with `options.reentrant` the
    /// nested acquisition returns at once, with the same token, over the same server lease (the
    /// rest of `options` is ignored), when the scope holds it in this mode, or holds the write
    /// lease and asks for a read; without it, DEADLOCK, since waiting for a lock the scope itself
    /// holds would wait forever. A scope holding a read lease that asks for the write lock is
    /// DEADLOCK at once (the write would wait for its own read), as is any wait on a name the
    /// scope holds; a name the scope holds as another kind is INVALID_ARGUMENT.
    pub async fn acquire_in(&self, scope: Scope, options: &LockOptions) -> Result<Lease> {
        options.validate()?;
        let inner = &self.locker.inner;
        inner.ensure_open()?;
        if let Some(reentry) = inner.scopes.held(&self.name, scope) {
            self.check_reentry(reentry.shared.mode, options)?;
            // None: released or lost on another thread meanwhile; acquire afresh below.
            if let Some(ticket) = reentry.try_enter() {
                return Ok(Lease {
                    shared: reentry.shared.clone(),
                    ticket: Some(ticket),
                });
            }
        }
        let Lease { shared, .. } = inner
            .acquire_lock(self.name.clone(), self.mode, options)
            .await?;
        let ticket = inner
            .scopes
            .enter_first(self.name.clone(), scope, shared.clone());
        Ok(Lease {
            shared,
            ticket: Some(ticket),
        })
    }

    /// [`Lock::try_acquire`] on behalf of an execution scope, as [`Lock::acquire_in`].
    pub async fn try_acquire_in(
        &self,
        scope: Scope,
        options: &LockOptions,
    ) -> Result<Option<Lease>> {
        let options = options.clone().with_wait(Some(Duration::ZERO));
        none_if_timeout(self.acquire_in(scope, &options).await)
    }

    /// Whether a scope holding the name in `held` mode may re-enter it in this lock's mode.
    fn check_reentry(&self, held: LockMode, options: &LockOptions) -> Result<()> {
        let name = self.name.as_str();
        if held.kind() != self.mode.kind() {
            return Err(kind_conflict(name, self.mode.kind(), held.kind()));
        }
        match (held, self.mode) {
            (LockMode::Permit { permits: had }, LockMode::Permit { permits: wanted })
                if had != wanted =>
            {
                Err(permits_conflict(name, wanted, had))
            }
            (LockMode::Read, LockMode::Write) => Err(Error::deadlock(format!(
                "lock {name:?} is read-locked by this scope (the same thread or task): its write \
                 lock would wait for that read lease forever; release the read lease first"
            ))),
            _ if !options.reentrant => Err(Error::deadlock(format!(
                "lock {name:?} is already held by this scope (the same thread or task) and was \
                 not acquired as reentrant: acquiring it again would wait forever"
            ))),
            _ => Ok(()),
        }
    }
}

fn none_if_timeout(result: Result<Lease>) -> Result<Option<Lease>> {
    match result {
        Ok(lease) => Ok(Some(lease)),
        Err(e) if e.is_timeout() => Ok(None),
        Err(e) => Err(e),
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .finish()
    }
}

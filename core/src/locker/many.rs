//! Several mutexes taken as one ([`MultiLease`], docs/design.md §1.9): all or nothing, in one
//! canonical order, so two callers taking overlapping sets never hold one name each while
//! waiting for the other's.

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::Locker;
use crate::error::{Error, ErrorCode, Result};
use crate::lease::Lease;
use crate::lease::multi::MultiLease;
use crate::lease::reentry::Scope;
use crate::name::LockName;
use crate::options::LockOptions;

/// The most names one multi-name lock takes: each is a lease of its own, renewed on its own.
pub const MAX_NAMES_AT_ONCE: usize = 64;

impl Locker {
    /// Acquires the mutexes of every name in `names` as one [`MultiLease`]: all of them, or
    /// none. The names are taken one after another in their canonical order (by name, byte for
    /// byte, whatever order they were given in), so two callers taking overlapping sets cannot
    /// deadlock; `options.wait` bounds the whole, and `options` applies to every part.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for no names, more than [`MAX_NAMES_AT_ONCE`], a name given twice or a
    /// bad name (before anything is taken); otherwise the first error of a part (TIMEOUT naming
    /// the name that stayed busy), after the parts already taken were released; TIMEOUT also
    /// when a part was lost while a later one was waited for and the wait ran out before the
    /// whole could be taken again. A whole is returned only if every part is held then.
    ///
    /// # Cancellation safety
    /// Dropping the future releases the parts taken so far in the background, as dropping
    /// their leases does.
    pub async fn acquire_many(&self, names: &[&str], options: &LockOptions) -> Result<MultiLease> {
        self.take_all(names, options, None).await
    }

    /// [`Locker::acquire_many`] on behalf of an execution scope: each part as
    /// [`Locker::acquire_in`] (DEADLOCK for a name the scope holds, unless `reentrant`).
    pub async fn acquire_many_in(
        &self,
        scope: Scope,
        names: &[&str],
        options: &LockOptions,
    ) -> Result<MultiLease> {
        self.take_all(names, options, Some(scope)).await
    }

    /// Tries once: `Ok(None)` when some name is held by somebody else (nothing is kept).
    pub async fn try_acquire_many(
        &self,
        names: &[&str],
        options: &LockOptions,
    ) -> Result<Option<MultiLease>> {
        let options = options.clone().with_wait(Some(Duration::ZERO));
        match self.acquire_many(names, &options).await {
            Ok(lease) => Ok(Some(lease)),
            Err(e) if e.code() == ErrorCode::Timeout => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn take_all(
        &self,
        names: &[&str],
        options: &LockOptions,
        scope: Option<Scope>,
    ) -> Result<MultiLease> {
        options.validate()?;
        let names = canonical_order(names)?;
        let given_up_at = options
            .wait
            .and_then(|wait| Instant::now().checked_add(wait));
        // A whole is returned only if every part is held when it returns (docs/design.md §1.9):
        // a part taken earlier can be lost, and taken by somebody else, while a later one is
        // waited for. Then every part is given back and the whole is taken again from the
        // first name, within the wait: retaking only the lost one while holding later names
        // would break the canonical order that keeps two callers from deadlocking.
        loop {
            let mut parts: Vec<Lease> = Vec::with_capacity(names.len());
            let mut lost_while_waiting = None;
            for name in &names {
                let remaining = given_up_at.map(|at| at.saturating_duration_since(Instant::now()));
                let part_options = options.clone().with_wait(remaining.or(options.wait));
                let lock = self.mutex(name.as_str())?;
                let taking = async {
                    match scope {
                        Some(scope) => lock.acquire_in(scope, &part_options).await,
                        None => lock.acquire(&part_options).await,
                    }
                };
                let taken = tokio::select! {
                    biased;
                    taken = taking => Some(taken),
                    _ = any_lost(&parts) => None,
                };
                match taken {
                    Some(Ok(lease)) => parts.push(lease),
                    Some(Err(e)) => {
                        give_back(parts).await;
                        return Err(e);
                    }
                    None => {
                        lost_while_waiting = Some(name);
                        break;
                    }
                }
            }
            if lost_while_waiting.is_none() && parts.iter().all(Lease::is_held) {
                return Ok(MultiLease::new(parts));
            }
            let lost = parts
                .iter()
                .find(|part| !part.is_held())
                .map_or_else(String::new, |part| part.name().to_string());
            give_back(parts).await;
            let waited_for = lost_while_waiting.map_or("the last part", LockName::as_str);
            if given_up_at.is_some_and(|at| Instant::now() >= at) {
                return Err(Error::timeout(format!(
                    "lock {lost:?} was lost while the multi-name lock waited for {waited_for:?}, \
                     and the wait ran out before it could be taken again"
                )));
            }
            flog!(
                info,
                lock = lost.as_str(),
                "lost while the multi-name lock waited for {waited_for:?}: every part is given \
                 back and taken again"
            );
        }
    }
}

/// Completes when any of `parts` is lost (never while none is).
async fn any_lost(parts: &[Lease]) {
    let mut waits: Vec<_> = parts
        .iter()
        .map(|part| {
            let signal = part.lost_signal();
            Box::pin(async move { signal.wait().await })
        })
        .collect();
    std::future::poll_fn(|cx| {
        if waits
            .iter_mut()
            .any(|wait| wait.as_mut().poll(cx).is_ready())
        {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}

/// The names checked and sorted, so every caller takes a set in the same order.
fn canonical_order(names: &[&str]) -> Result<Vec<LockName>> {
    if names.is_empty() {
        return Err(Error::invalid("a multi-name lock needs at least one name"));
    }
    if names.len() > MAX_NAMES_AT_ONCE {
        return Err(Error::invalid(format!(
            "a multi-name lock takes at most {MAX_NAMES_AT_ONCE} names, not {}",
            names.len()
        )));
    }
    let mut checked = names
        .iter()
        .map(|&name| LockName::new(name))
        .collect::<Result<Vec<_>>>()?;
    checked.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    if let Some(pair) = checked.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(Error::invalid(format!(
            "lock {:?} is given twice: a multi-name lock takes each name once",
            pair[0].as_str()
        )));
    }
    Ok(checked)
}

/// Releases the parts taken before a later one failed. Their errors do not matter to the
/// caller, who gets the failure that stopped the acquisition; a part that cannot be released
/// now expires on its own.
async fn give_back(parts: Vec<Lease>) {
    for part in parts.into_iter().rev() {
        let _ = part.release().await;
    }
}

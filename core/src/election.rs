//! Leader election on a name, built on the lock and its lost signal (issue 12).
//!
//! A candidate campaigns by waiting to acquire the election's lock; it leads while it holds the
//! lease, which auto-renew keeps. Its term is the lease's fencing token, so on one backend
//! every term is larger than the last whoever won it and in whatever language, and the leader
//! can fence its writes with the term. Leadership ends on [`Leadership::resign`], when the
//! Locker closes (shutdown), or the moment the lease is lost; the lost signal says which.
//! Observers ask [`Locker::leader`] without campaigning.

use std::fmt;

use crate::error::{Error, Result};
use crate::holder::HolderDescription;
use crate::lease::Lease;
use crate::locker::Locker;
use crate::options::LockOptions;
use crate::signal::LostSignal;

/// Leadership won by [`Locker::campaign`]: the lease on the election's name, seen as a term.
#[derive(Clone, Debug)]
pub struct Leadership {
    lease: Lease,
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.lease.name()
    }

    /// This leader's term: the lease's fencing token, larger than every earlier term.
    pub fn term(&self) -> u64 {
        self.lease.token()
    }

    /// Still the leader: neither resigned nor lost (a passed client deadline counts as lost).
    pub fn is_leader(&self) -> bool {
        self.lease.is_held()
    }

    /// Set the moment leadership is lost; stop acting as leader then.
    pub fn lost_signal(&self) -> LostSignal {
        self.lease.lost_signal()
    }

    /// The lease behind the leadership, to fence writes with (its token is the term).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Steps down: releases the election's lock so another candidate can lead.
    ///
    /// # Errors
    /// As [`Lease::release`]: NOT_HELD when already resigned, LOST when leadership was lost
    /// first (work done since may have overlapped the next leader's).
    pub async fn resign(&self) -> Result<()> {
        self.lease.release().await
    }
}

/// Who leads an election now, as an observer sees it.
#[derive(Clone, PartialEq, Eq)]
pub struct Leader {
    pub term: u64,
    /// The leader's description (host, pid, language, its holder text), when the backend keeps it.
    pub holder: Option<HolderDescription>,
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("term", &self.term)
            .field("holder", &self.holder)
            .finish()
    }
}

impl Locker {
    /// Campaigns for leadership of `name`: waits (up to `options.wait`, forever by default)
    /// to acquire its lock, and returns the leadership. `options` are the lock's: the ttl
    /// bounds how long a leader that died unannounced keeps the role.
    ///
    /// # Errors
    /// As [`Locker::acquire`]: TIMEOUT when `options.wait` ends first; INVALID_ARGUMENT for
    /// `reentrant`, since a candidate that leads never campaigns again.
    pub async fn campaign(&self, name: &str, options: &LockOptions) -> Result<Leadership> {
        if options.reentrant {
            return Err(Error::invalid(
                "an election is never re-entered (a leader does not campaign again): leave out the reentrant option",
            ));
        }
        Ok(Leadership {
            lease: self.acquire(name, options).await?,
        })
    }

    /// Who leads `name` now and in which term, without campaigning; `None` when nobody does.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        let info = self.inspect(name).await?;
        Ok(match (info.held, info.token) {
            (true, Some(term)) => Some(Leader {
                term,
                holder: info.holder.as_deref().map(HolderDescription::parse),
            }),
            _ => None,
        })
    }
}

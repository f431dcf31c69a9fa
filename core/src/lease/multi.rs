//! [`MultiLease`]: several mutexes of one Locker held as one (docs/design.md §1.9), the
//! counterpart of Redisson's `RedissonMultiLock` and Curator's `InterProcessMultiLock`.
//!
//! Each part is an ordinary [`Lease`] with its own token, renewal and deadline, so a fence
//! takes a part exactly as it takes a single lease; the whole is held while every part is, and
//! lost the moment any part is.

use std::fmt;
use std::time::{Duration, SystemTime};

use super::Lease;
use crate::error::{Error, ErrorCode, Result};
use crate::signal::LostSignal;
use crate::sync::join_all;

/// The leases of several names taken together by [`crate::Locker::acquire_many`], in the
/// canonical order they were acquired in (by name, byte for byte). Cheap to clone: clones share
/// the parts.
#[derive(Clone)]
pub struct MultiLease {
    parts: Vec<Lease>,
    signal: LostSignal,
}

impl MultiLease {
    /// Wraps parts already acquired, in their acquisition order; the lost signal fires with
    /// the first part's that does.
    pub(crate) fn new(parts: Vec<Lease>) -> MultiLease {
        let signal = LostSignal::default();
        for part in &parts {
            let whole = signal.clone();
            part.lost_signal().on_lost(move |reason| {
                whole.fire(reason);
            });
        }
        MultiLease { parts, signal }
    }

    /// The names, in the order they were acquired.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(Lease::name)
    }

    /// Each name with its fencing token, in the order they were acquired.
    pub fn tokens(&self) -> Vec<(String, u64)> {
        self.parts
            .iter()
            .map(|part| (part.name().to_string(), part.token()))
            .collect()
    }

    /// The lease of one name, to fence writes to what that name guards; `None` for a name
    /// that is not a part.
    pub fn part(&self, name: &str) -> Option<&Lease> {
        self.parts.iter().find(|part| part.name() == name)
    }

    /// Every part, in the order they were acquired.
    pub fn parts(&self) -> &[Lease] {
        &self.parts
    }

    /// Held: every part is (none released, none lost).
    pub fn is_held(&self) -> bool {
        self.parts.iter().all(Lease::is_held)
    }

    /// Lost: some part is. Work guarded by the whole must stop.
    pub fn is_lost(&self) -> bool {
        self.parts.iter().any(Lease::is_lost)
    }

    /// Set the moment any part is lost.
    pub fn lost_signal(&self) -> LostSignal {
        // Reading each part's phase turns a passed deadline into a fired signal.
        for part in &self.parts {
            let _ = part.lost_signal();
        }
        self.signal.clone()
    }

    /// `Ok` while every part is held; otherwise the first part's error (LOST, NOT_HELD or
    /// CLOSED), in acquisition order.
    pub fn ensure_held(&self) -> Result<()> {
        self.parts.iter().try_for_each(Lease::ensure_held)
    }

    /// The earliest part's client deadline on the wall clock: the whole is valid until then.
    pub fn valid_until(&self) -> SystemTime {
        self.parts
            .iter()
            .map(Lease::valid_until)
            .min()
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The earliest part's server expiry estimate; `None` on backends without one.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.parts.iter().filter_map(Lease::expires_at).min()
    }

    /// Sets a new ttl from now on every part (the current ttl when `None`), all parts at once:
    /// the whole costs the slowest part's extension, not their sum (a ZooKeeper extension waits
    /// for the session's answer).
    ///
    /// # Errors
    /// The first part's error in the canonical order, as [`Lease::extend`]'s; the other parts
    /// are extended all the same, so a part that failed alone does not shorten the others.
    pub async fn extend(&self, ttl: Option<Duration>) -> Result<()> {
        let extensions = self.parts.iter().map(|part| part.extend(ttl)).collect();
        join_all(extensions).await.into_iter().collect()
    }

    /// Releases every part, last acquired first, whatever happens to the others.
    ///
    /// # Errors
    /// LOST when any part was lost first (the work may have run without that lock), else
    /// NOT_HELD when any part was already released, else the first other error (UNAVAILABLE:
    /// that part then expires on its own).
    pub async fn release(&self) -> Result<()> {
        let mut errors = Vec::new();
        for part in self.parts.iter().rev() {
            if let Err(e) = part.release().await {
                errors.push(e);
            }
        }
        match worst(errors) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// The error that matters most to the caller of a release of several parts.
fn worst(errors: Vec<Error>) -> Option<Error> {
    let rank = |e: &Error| match e.code() {
        ErrorCode::Lost => 0,
        ErrorCode::NotHeld => 1,
        _ => 2,
    };
    errors.into_iter().min_by_key(rank)
}

impl fmt::Debug for MultiLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLease")
            .field("tokens", &self.tokens())
            .field("held", &self.is_held())
            .finish()
    }
}

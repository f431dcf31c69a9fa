//! What a lock name is used as (a mutex, a semaphore or a read-write lock), and how one lease
//! holds it (docs/design.md §1.8).
//!
//! One name is one kind: while a name is held or waited on as one kind, taking it as another is
//! INVALID_ARGUMENT naming both, on every backend. Tokens are minted from one counter per name,
//! whatever the mode, so a permit's token is larger than every earlier permit's, and a write
//! lease's larger than every earlier read or write lease's.

use std::fmt;

use crate::error::{Error, Result};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 10_000;

/// What a lock name is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// One holder at a time (an election is the mutex of its name).
    Mutex,
    /// At most a number of holders at a time.
    Semaphore,
    /// Any number of readers, or one writer.
    ReadWrite,
}

impl LockKind {
    /// The spelling every language and the stored data use.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::Semaphore => "semaphore",
            LockKind::ReadWrite => "read-write lock",
        }
    }

    /// The kind stored under `spelling` ([`LockKind::as_str`]), if it is one.
    pub fn parse(spelling: &str) -> Option<LockKind> {
        [LockKind::Mutex, LockKind::Semaphore, LockKind::ReadWrite]
            .into_iter()
            .find(|kind| kind.as_str() == spelling)
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one lease holds its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// The mutex's one holder.
    Exclusive,
    /// One of at most `permits` holders of a semaphore.
    Permit { permits: u32 },
    /// One of the readers of a read-write lock, while no writer holds it.
    Read,
    /// The one writer of a read-write lock, while no reader holds it.
    Write,
}

impl LockMode {
    /// A semaphore's permit, checking the count.
    pub fn permit(permits: u32) -> Result<LockMode> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::invalid(format!(
                "permits must be 1 to {MAX_PERMITS}, not {permits}"
            )));
        }
        Ok(LockMode::Permit { permits })
    }

    pub fn kind(self) -> LockKind {
        match self {
            LockMode::Exclusive => LockKind::Mutex,
            LockMode::Permit { .. } => LockKind::Semaphore,
            LockMode::Read | LockMode::Write => LockKind::ReadWrite,
        }
    }

    /// Whether a lease of this mode is the name's only holder: only such leases may be fenced,
    /// since "the newest token wins" is wrong among holders that run at once.
    /// A semaphore's N; 0 for the other modes (the `permits` argument of the shared scripts
    /// and statements).
    pub(crate) fn permits(self) -> u32 {
        match self {
            LockMode::Permit { permits } => permits,
            _ => 0,
        }
    }

    pub fn is_exclusive(self) -> bool {
        matches!(self, LockMode::Exclusive | LockMode::Write)
    }

    /// The spelling of the mode in messages, events and the stored data.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Permit { .. } => "permit",
            LockMode::Read => "read",
            LockMode::Write => "write",
        }
    }
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockMode::Permit { permits } => write!(f, "permit of {permits}"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// The error for taking `name` as `wanted` while it is held or waited on as `found`.
pub(crate) fn kind_conflict(name: &str, wanted: LockKind, found: LockKind) -> Error {
    Error::invalid(format!(
        "lock {name:?} is in use as a {found}, so it cannot be taken as a {wanted}: one name is \
         one kind (use another name)"
    ))
}

/// The error for a semaphore taken with `wanted` permits while its holders or waiters use
/// `stored`.
pub(crate) fn permits_conflict(name: &str, wanted: u32, stored: u32) -> Error {
    Error::invalid(format!(
        "semaphore {name:?} has {stored} permits while it is held or waited on, not {wanted}: \
         every participant must use the same count (it may change once the semaphore is idle)"
    ))
}

/// The error of a backend that does not offer `mode`'s kind (Redlock: no semaphores).
pub(crate) fn not_offered(backend: &str, mode: LockMode) -> Error {
    let what = match mode.kind() {
        LockKind::Mutex => "mutexes",
        LockKind::Semaphore => "semaphores",
        LockKind::ReadWrite => "read-write locks",
    };
    let why = match (backend, mode.kind()) {
        // Every master counting at most N permits does not bound the whole to N: with N = 2 and
        // 5 masters, three clients can each win a different majority ({1,2,3}, {3,4,5},
        // {1,2,4}) while no master counts more than two.
        ("redlock", LockKind::Semaphore) => {
            ": a permit won on a majority of masters does not bound the holders to N (with N of \
             2 or more, N + 1 clients can each win a different majority)"
        }
        _ => "",
    };
    Error::invalid(format!(
        "the {backend} backend does not offer {what}{why} (docs/status.md lists the lock kinds \
         of each backend)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_checked() {
        assert!(LockMode::permit(0).is_err());
        assert!(LockMode::permit(MAX_PERMITS + 1).is_err());
        assert_eq!(
            LockMode::permit(3).unwrap(),
            LockMode::Permit { permits: 3 }
        );
    }

    #[test]
    fn kinds_round_trip_and_only_mutex_and_write_are_exclusive() {
        for kind in [LockKind::Mutex, LockKind::Semaphore, LockKind::ReadWrite] {
            assert_eq!(LockKind::parse(kind.as_str()), Some(kind));
        }
        let exclusive: Vec<_> = [
            LockMode::Exclusive,
            LockMode::Permit { permits: 1 },
            LockMode::Read,
            LockMode::Write,
        ]
        .into_iter()
        .filter(|m| m.is_exclusive())
        .collect();
        assert_eq!(exclusive, [LockMode::Exclusive, LockMode::Write]);
    }
}

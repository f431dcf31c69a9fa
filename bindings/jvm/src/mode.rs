//! What a lock name is used as and how one lease holds it (the core's `mode.rs`,
//! docs/design.md §1.8), as the JVM sees them. The Kotlin layer shows `NativeLockMode` as its
//! `LockMode` enum (the permits go to `Lock.permits`) and `NativeLockKind` as `LockKind`.

use fencelock::{LockKind, LockMode, MAX_PERMITS};

use crate::error::{NativeError, invalid};

/// How a lease holds its name; the mode an acquire asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum NativeLockMode {
    /// The mutex's one holder.
    Exclusive,
    /// One of at most `permits` holders of a semaphore (an `Int` on the JVM; checked here).
    Permit { permits: i32 },
    /// One of the readers of a read-write lock.
    Read,
    /// The one writer of a read-write lock.
    Write,
}

/// The core's mode for a JVM one; permits outside 1 to 10,000 are INVALID_ARGUMENT.
pub(crate) fn lock_mode(mode: NativeLockMode) -> Result<LockMode, NativeError> {
    Ok(match mode {
        NativeLockMode::Exclusive => LockMode::Exclusive,
        NativeLockMode::Permit { permits } => {
            // A negative Int is out of range too: said as the JVM caller wrote it.
            let permits = u32::try_from(permits).map_err(|_| {
                invalid(format!("permits must be 1 to {MAX_PERMITS}, not {permits}"))
            })?;
            LockMode::permit(permits)?
        }
        NativeLockMode::Read => LockMode::Read,
        NativeLockMode::Write => LockMode::Write,
    })
}

/// A count of permits as the JVM's `Int` (the core's are at most 10,000).
pub(crate) fn permits_to_jvm(permits: u32) -> i32 {
    i32::try_from(permits).unwrap_or(i32::MAX)
}

impl From<LockMode> for NativeLockMode {
    fn from(mode: LockMode) -> Self {
        match mode {
            LockMode::Exclusive => NativeLockMode::Exclusive,
            LockMode::Permit { permits } => NativeLockMode::Permit {
                permits: permits_to_jvm(permits),
            },
            LockMode::Read => NativeLockMode::Read,
            LockMode::Write => NativeLockMode::Write,
        }
    }
}

/// What a lock name is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum NativeLockKind {
    Mutex,
    Semaphore,
    ReadWrite,
}

impl From<LockKind> for NativeLockKind {
    fn from(kind: LockKind) -> Self {
        match kind {
            LockKind::Mutex => NativeLockKind::Mutex,
            LockKind::Semaphore => NativeLockKind::Semaphore,
            LockKind::ReadWrite => NativeLockKind::ReadWrite,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_go_to_the_core_and_back() {
        for mode in [
            LockMode::Exclusive,
            LockMode::Permit { permits: 1 },
            LockMode::Permit {
                permits: MAX_PERMITS,
            },
            LockMode::Read,
            LockMode::Write,
        ] {
            assert_eq!(lock_mode(NativeLockMode::from(mode)).unwrap(), mode);
        }
    }

    #[test]
    fn permits_outside_1_to_10000_are_invalid_arguments() {
        for permits in [i32::MIN, -1, 0, MAX_PERMITS as i32 + 1, i32::MAX] {
            let Err(NativeError::Failure {
                spelling, detail, ..
            }) = lock_mode(NativeLockMode::Permit { permits })
            else {
                panic!("{permits} permits were accepted");
            };
            assert_eq!(spelling, "INVALID_ARGUMENT");
            assert!(detail.contains(&permits.to_string()), "{detail}");
        }
    }
}

//! Clocks the lock code relies on.
//!
//! Client deadlines run on CLOCK_BOOTTIME, which keeps counting while the machine or VM is
//! suspended: a holder frozen for a minute must wake up knowing a minute passed. The
//! monotonic clock (and so `std::time::Instant` and tokio's timers) stops during suspend on
//! Linux, which would let a resumed holder believe its lease were still valid.
//!
//! macOS has no CLOCK_BOOTTIME; there CLOCK_MONOTONIC is the clock that keeps counting while
//! the machine sleeps (Apple's clock_gettime(3); CLOCK_UPTIME_RAW is the one that stops). That
//! branch has never been compiled or run by this project's CI, which builds on Linux only. Any
//! other system stops the build here, naming the clock it lacks.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(any(target_os = "linux", target_os = "android"))]
const SUSPEND_COUNTING_CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
#[cfg(target_os = "macos")]
const SUSPEND_COUNTING_CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos")))]
compile_error!(
    "fencelock builds on Linux (and, never tested, macOS) only: its client deadlines need a \
     clock that keeps counting while the machine is suspended (CLOCK_BOOTTIME on Linux, \
     CLOCK_MONOTONIC on macOS), and core/src/clock.rs names none for this system"
);

/// A point on CLOCK_BOOTTIME (CLOCK_MONOTONIC on macOS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BootInstant(Duration);

impl BootInstant {
    pub fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own; CLOCK_BOOTTIME exists on
        // every Linux since 2.6.39. On failure we fall back to the monotonic clock.
        let rc = unsafe { libc::clock_gettime(SUSPEND_COUNTING_CLOCK, &mut ts) };
        if rc != 0 {
            // SAFETY: as above.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        }
        BootInstant(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    /// Time from `self` until `later`, zero if `later` is not after `self`.
    pub fn until(self, later: BootInstant) -> Duration {
        later.0.saturating_sub(self.0)
    }

    pub fn elapsed(self) -> Duration {
        self.until(BootInstant::now())
    }

    pub fn checked_add(self, d: Duration) -> Option<Self> {
        self.0.checked_add(d).map(BootInstant)
    }

    pub fn saturating_sub(self, d: Duration) -> Self {
        BootInstant(self.0.saturating_sub(d))
    }

    pub fn has_passed(self) -> bool {
        BootInstant::now() >= self
    }

    /// This instant on the wall clock, as the two clocks stand now (a later reading may differ
    /// if the wall clock is stepped meanwhile; CLOCK_BOOTTIME itself never is).
    pub fn to_system_time(self) -> SystemTime {
        let (boot_now, wall_now) = (BootInstant::now(), SystemTime::now());
        if self >= boot_now {
            wall_now + boot_now.until(self)
        } else {
            wall_now
                .checked_sub(self.until(boot_now))
                .unwrap_or(UNIX_EPOCH)
        }
    }

    /// The time since boot on CLOCK_BOOTTIME: an instant another process on the same machine
    /// can compare with its own clock (the `fencelock` command hands deadlines to its guardian
    /// process this way).
    pub fn since_boot(self) -> Duration {
        self.0
    }
}

/// Wall-clock microseconds since the Unix epoch (the SQLite backend's "server clock").
pub fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The margin the client deadline keeps below the server's expiry: 1% of the ttl plus 2 ms,
/// for clock rate drift between client and server, plus any configured maximum skew.
pub fn drift_margin(ttl: Duration, max_skew: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2) + max_skew
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_advances() {
        let a = BootInstant::now();
        std::thread::sleep(Duration::from_millis(5));
        let b = BootInstant::now();
        assert!(b > a);
        assert!(a.until(b) >= Duration::from_millis(5));
        assert_eq!(b.until(a), Duration::ZERO);
    }

    #[test]
    fn margin_is_one_percent_plus_two_ms() {
        assert_eq!(
            drift_margin(Duration::from_secs(30), Duration::ZERO),
            Duration::from_millis(302)
        );
        assert_eq!(
            drift_margin(Duration::from_secs(10), Duration::from_millis(500)),
            Duration::from_millis(602)
        );
    }
}

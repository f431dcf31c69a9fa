//! JVM option records to core options. Durations arrive as `java.time.Duration` (uniffi maps
//! them); the Kotlin layer refuses negative ones before they get here, and the ranges (ttl at
//! least 100 ms, …) are the core's, so every language agrees.

use std::time::Duration;

use fencelock::{LockOptionOverrides, LockOptions, LockerOptionOverrides, LockerOptions};

use crate::error::NativeError;

/// Options of one acquisition (the Kotlin `LockOptions`).
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeLockOptions {
    /// Absent: the core's default (30 s).
    pub ttl: Option<Duration>,
    /// Absent: wait forever; zero: try once.
    pub wait: Option<Duration>,
    pub auto_renew: bool,
    pub max_hold: Option<Duration>,
    pub reentrant: bool,
    pub holder: Option<String>,
    pub pipelined_release: bool,
}

pub(crate) fn lock_options(given: NativeLockOptions) -> Result<LockOptions, NativeError> {
    Ok(LockOptions::from_overrides(LockOptionOverrides {
        ttl: given.ttl,
        wait: given.wait,
        auto_renew: Some(given.auto_renew),
        max_hold: given.max_hold,
        reentrant: Some(given.reentrant),
        holder: given.holder,
        pipelined_release: Some(given.pipelined_release),
    })?)
}

/// Options of a Locker or a Fence (the Kotlin `ConnectOptions`); absent means the core's default.
#[derive(Debug, Clone, uniffi::Record)]
pub struct NativeConnectOptions {
    pub poll_interval: Option<Duration>,
    pub operation_timeout: Option<Duration>,
}

pub(crate) fn locker_options(given: NativeConnectOptions) -> Result<LockerOptions, NativeError> {
    let given = LockerOptionOverrides {
        poll_interval: given.poll_interval,
        operation_timeout: given.operation_timeout,
    };
    Ok(LockerOptions::from_overrides("jvm", given)?)
}

/// A token from the JVM (a `Long`): tokens are below 2^63, so a negative one is a mistake.
pub(crate) fn token_from_jvm(token: i64) -> Result<u64, NativeError> {
    u64::try_from(token).map_err(|_| {
        crate::error::invalid(format!("token must be between 0 and 2^63 - 1, got {token}"))
    })
}

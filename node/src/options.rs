//! JS option objects to core options. Durations are milliseconds as numbers.
//!
//! `index.js` checks the types of what users pass (and refuses unknown option names), so the
//! values reaching this file are numbers, booleans and strings; the numeric checks live here
//! (finite, not negative, at most 2^53) and the ranges (ttl at least 100 ms, …) are the core's,
//! so every language agrees.

use std::time::Duration;

use fencelock::{
    LockMode, LockOptionOverrides, LockOptions, LockerOptionOverrides, LockerOptions, MAX_PERMITS,
};
use napi_derive::napi;

use crate::error::{Result, invalid, to_js};

/// The largest integer a JS number holds exactly.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A duration in milliseconds; `what` names it in messages.
pub(crate) fn duration_ms(ms: f64, what: &str) -> Result<Duration> {
    if ms.is_nan() {
        return Err(invalid(format!(
            "{what} must be a number of milliseconds, not NaN"
        )));
    }
    if ms.is_infinite() {
        let hint = if what == "wait" {
            "; leave wait out (or null) to wait forever"
        } else {
            ""
        };
        return Err(invalid(format!(
            "{what} must be a finite number of milliseconds, not {ms}{hint}"
        )));
    }
    if ms < 0.0 {
        return Err(invalid(format!("{what} must not be negative, got {ms}")));
    }
    if ms > MAX_SAFE {
        return Err(invalid(format!(
            "{what} of {ms} ms is out of range (above 2^53)"
        )));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

fn optional_ms(ms: Option<f64>, what: &str) -> Result<Option<Duration>> {
    ms.map(|ms| duration_ms(ms, what)).transpose()
}

/// Options of one acquisition, as `index.js` passes them (milliseconds).
#[napi(object)]
#[derive(Default)]
pub struct AcquireOptions {
    pub ttl: Option<f64>,
    /// Absent: wait forever; 0: try once.
    pub wait: Option<f64>,
    pub auto_renew: Option<bool>,
    pub max_hold: Option<f64>,
    pub holder: Option<String>,
    pub reentrant: Option<bool>,
    pub pipelined_release: Option<bool>,
}

pub(crate) fn lock_options(given: Option<AcquireOptions>) -> Result<LockOptions> {
    let given = given.unwrap_or_default();
    LockOptions::from_overrides(LockOptionOverrides {
        ttl: optional_ms(given.ttl, "ttl")?,
        wait: optional_ms(given.wait, "wait")?,
        auto_renew: given.auto_renew,
        max_hold: optional_ms(given.max_hold, "maxHold")?,
        reentrant: given.reentrant,
        holder: given.holder,
        pipelined_release: given.pipelined_release,
    })
    .map_err(to_js)
}

/// How an acquisition holds its name, as `index.js` passes it: `mode` is the core's spelling
/// (`LockMode::as_str`: "exclusive", "permit", "read" or "write"), and a permit names its
/// semaphore's number of `permits`.
#[napi(object)]
pub struct NativeLockMode {
    pub mode: String,
    pub permits: Option<f64>,
}

pub(crate) fn lock_mode(given: &NativeLockMode) -> Result<LockMode> {
    match (given.mode.as_str(), given.permits) {
        ("exclusive", None) => Ok(LockMode::Exclusive),
        // The range (1 to MAX_PERMITS) is the core's check.
        ("permit", Some(permits)) => LockMode::permit(whole_permits(permits)?).map_err(to_js),
        ("read", None) => Ok(LockMode::Read),
        ("write", None) => Ok(LockMode::Write),
        (mode, permits) => Err(invalid(format!(
            "no lock mode {mode:?} with permits {permits:?}"
        ))),
    }
}

/// A JS number of permits as the core's u32: a whole number that fits, else INVALID_ARGUMENT
/// (napi's own conversion would wrap -1 to 4294967295 and truncate 2.5 to 2).
fn whole_permits(permits: f64) -> Result<u32> {
    if permits.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&permits) {
        return Ok(permits as u32);
    }
    Err(invalid(format!(
        "permits must be a whole number from 1 to {MAX_PERMITS}, not {permits}"
    )))
}

/// Options of a Locker or a Fence (milliseconds).
#[napi(object)]
#[derive(Default)]
pub struct ConnectOptions {
    pub poll_interval: Option<f64>,
    pub operation_timeout: Option<f64>,
}

pub(crate) fn locker_options(given: Option<ConnectOptions>) -> Result<LockerOptions> {
    let given = given.unwrap_or_default();
    let given = LockerOptionOverrides {
        poll_interval: optional_ms(given.poll_interval, "pollInterval")?,
        operation_timeout: optional_ms(given.operation_timeout, "operationTimeout")?,
    };
    LockerOptions::from_overrides("node", given).map_err(to_js)
}

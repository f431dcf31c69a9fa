//! JS option objects to core options. Durations are milliseconds as numbers.
//!
//! `index.js` checks the types of what users pass (and refuses unknown option names), so the
//! values reaching this file are numbers, booleans and strings; the numeric checks live here
//! (finite, not negative, at most 2^53) and the ranges (ttl at least 100 ms, …) are the core's,
//! so every language agrees.

use std::time::Duration;

use fencelock::{LockOptionOverrides, LockOptions, LockerOptionOverrides, LockerOptions};
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

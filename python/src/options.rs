//! Python arguments to core options: durations, names, URLs and keyword options.
//!
//! Every bad value is `fencelock.InvalidArgument` (a `ValueError`) with a message that names the
//! argument and says what is accepted. Durations are seconds as `int` or `float`, or a
//! `datetime.timedelta`; `bool`, NaN, infinities, negative values and strings are refused.
//! Ranges (ttl at least 100 ms, …) are the core's to check, so every language agrees.

use std::time::Duration;

use fencelock::{LockOptionOverrides, LockOptions, LockerOptionOverrides, LockerOptions};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyType};

use crate::error::{invalid, invalid_type};

/// The word Python users bring from redis-py (the ttl) and kazoo (the wait).
const TIMEOUT_MESSAGE: &str = "fencelock takes no timeout= argument, because it means the lease length \
     in redis-py and the time to wait in kazoo: pass ttl= (how long the lease lasts) and/or wait= \
     (how long acquire may block)";

static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

fn describe(value: &Bound<'_, PyAny>) -> String {
    let text = value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".to_string());
    if text.chars().count() > 40 {
        let short: String = text.chars().take(37).collect();
        format!("{short}...")
    } else {
        text
    }
}

/// A duration argument. `what` names it in messages (`ttl`, `wait`, …).
pub(crate) fn duration(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let py = value.py();
    let accepted = "a number of seconds (int or float) or a datetime.timedelta";
    if value.is_instance_of::<PyBool>() {
        return Err(invalid_type(format!(
            "{what} must be {accepted}, not a bool ({})",
            describe(value)
        )));
    }
    if value.is_instance_of::<PyInt>() {
        let seconds: i64 = value.extract().map_err(|_| {
            invalid(format!(
                "{what} of {} seconds is out of range",
                describe(value)
            ))
        })?;
        if seconds < 0 {
            return Err(invalid(format!(
                "{what} must not be negative, got {seconds}"
            )));
        }
        return Ok(Duration::from_secs(seconds as u64));
    }
    if value.is_instance_of::<PyFloat>() {
        let seconds: f64 = value.extract()?;
        if !seconds.is_finite() {
            return Err(invalid(format!(
                "{what} must be a finite number of seconds, not {seconds}"
            )));
        }
        if seconds < 0.0 {
            return Err(invalid(format!(
                "{what} must not be negative, got {seconds}"
            )));
        }
        return Duration::try_from_secs_f64(seconds)
            .map_err(|_| invalid(format!("{what} of {seconds} seconds is out of range")));
    }
    let timedelta = TIMEDELTA.import(py, "datetime", "timedelta")?;
    if value.is_instance(timedelta)? {
        let days: i64 = value.getattr("days")?.extract()?;
        let seconds: i64 = value.getattr("seconds")?.extract()?;
        let micros: i64 = value.getattr("microseconds")?.extract()?;
        // timedelta normalizes so that only `days` can be negative.
        if days < 0 {
            return Err(invalid(format!(
                "{what} must not be negative, got {}",
                describe(value)
            )));
        }
        let total = days as u64 * 86_400 + seconds as u64;
        return Ok(Duration::from_secs(total) + Duration::from_micros(micros as u64));
    }
    Err(invalid_type(format!(
        "{what} must be {accepted}, not {} ({})",
        type_name(value),
        describe(value)
    )))
}

/// A duration that may be `None`.
pub(crate) fn optional_duration(
    value: Option<&Bound<'_, PyAny>>,
    what: &str,
) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => duration(v, what).map(Some),
    }
}

/// A `str` argument (a lock name, a URL, a resource). Lone surrogates cannot be UTF-8.
pub(crate) fn text(value: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    if !value.is_instance_of::<PyString>() {
        // Only the type: the repr of a URL object (pydantic's RedisDsn, yarl.URL) shows its
        // password.
        return Err(invalid_type(format!(
            "{what} must be a str, got {}; pass str({what})",
            type_name(value)
        )));
    }
    value.extract::<String>().map_err(|_| {
        invalid(format!(
            "{what} is not valid Unicode text (it contains a lone surrogate)"
        ))
    })
}

/// A semaphore's number of permits: an `int` (not a `bool`). The core checks the range (1 to
/// `fencelock::MAX_PERMITS`); an int too large or too small for it to see gets the same answer
/// here.
pub(crate) fn permits(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(invalid_type(format!(
            "permits must be an int, got {} ({})",
            type_name(value),
            describe(value)
        )));
    }
    value
        .extract::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            invalid(format!(
                "permits must be 1 to {}, not {}",
                fencelock::MAX_PERMITS,
                describe(value)
            ))
        })
}

fn boolean(value: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    if !value.is_instance_of::<PyBool>() {
        return Err(invalid_type(format!(
            "{what} must be True or False, not {} ({})",
            type_name(value),
            describe(value)
        )));
    }
    value.extract()
}

/// Keyword options as given, checked against the names a call accepts.
pub(crate) struct Options<'a, 'py> {
    given: Option<&'a Bound<'py, PyDict>>,
}

impl<'a, 'py> Options<'a, 'py> {
    /// Refuses `timeout=` (with the message docs/design.md §4.1 describes) and any unknown name.
    pub(crate) fn check(
        given: Option<&'a Bound<'py, PyDict>>,
        known: &[&str],
        call: &str,
    ) -> PyResult<Self> {
        if let Some(dict) = given {
            for key in dict.keys() {
                let key: String = key.extract()?;
                // Python raises TypeError for a keyword a function does not take; these are
                // that, and fencelock.InvalidArgument too.
                if key == "timeout" {
                    return Err(invalid_type(TIMEOUT_MESSAGE));
                }
                if !known.contains(&key.as_str()) {
                    return Err(invalid_type(format!(
                        "{call}() got an unknown option {key:?}; it takes {}",
                        known.join(", ")
                    )));
                }
            }
        }
        Ok(Options { given })
    }

    pub(crate) fn get(&self, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.given {
            None => Ok(None),
            Some(dict) => dict.get_item(key),
        }
    }
}

pub(crate) const LOCK_OPTIONS: &[&str] = &[
    "ttl",
    "wait",
    "auto_renew",
    "max_hold",
    "holder",
    "reentrant",
    "pipelined_release",
];
pub(crate) const TRY_LOCK_OPTIONS: &[&str] = &[
    "ttl",
    "auto_renew",
    "max_hold",
    "holder",
    "reentrant",
    "pipelined_release",
];
/// An election's lock is never re-entered: a candidate that leads does not campaign again.
pub(crate) const LEADERSHIP_OPTIONS: &[&str] = &[
    "ttl",
    "wait",
    "auto_renew",
    "max_hold",
    "holder",
    "pipelined_release",
];
pub(crate) const LOCKER_OPTIONS: &[&str] =
    &["poll_interval", "operation_timeout", "metrics", "tracing"];
/// A fence takes no locks, so it has no metrics; its writes are spans.
pub(crate) const FENCE_OPTIONS: &[&str] = &["poll_interval", "operation_timeout", "tracing"];

/// Lock options from keywords (`ttl=30, wait=None, auto_renew=True, max_hold=None,
/// holder=None, reentrant=False`), checked by the core too.
pub(crate) fn lock_options(options: &Options<'_, '_>) -> PyResult<LockOptions> {
    let ttl = match options.get("ttl")? {
        Some(ttl) if ttl.is_none() => {
            return Err(invalid_type(
                "ttl must be a number of seconds or a datetime.timedelta, not None (the default is 30)",
            ));
        }
        Some(ttl) => Some(duration(&ttl, "ttl")?),
        None => None,
    };
    let flag = |name: &str| -> PyResult<Option<bool>> {
        options.get(name)?.map(|on| boolean(&on, name)).transpose()
    };
    let holder = match options.get("holder")? {
        Some(holder) if !holder.is_none() => Some(text(&holder, "holder")?),
        _ => None,
    };
    LockOptions::from_overrides(LockOptionOverrides {
        ttl,
        wait: optional_duration(options.get("wait")?.as_ref(), "wait")?,
        auto_renew: flag("auto_renew")?,
        max_hold: optional_duration(options.get("max_hold")?.as_ref(), "max_hold")?,
        reentrant: flag("reentrant")?,
        holder,
        pipelined_release: flag("pipelined_release")?,
    })
    .map_err(crate::error::to_py)
}

/// Locker options from keywords (`poll_interval=`, `operation_timeout=`, `metrics=`,
/// `tracing=`).
pub(crate) fn locker_options(py: Python<'_>, options: &Options<'_, '_>) -> PyResult<LockerOptions> {
    let given = LockerOptionOverrides {
        poll_interval: optional_duration(options.get("poll_interval")?.as_ref(), "poll_interval")?,
        operation_timeout: optional_duration(
            options.get("operation_timeout")?.as_ref(),
            "operation_timeout",
        )?,
    };
    let options_given =
        LockerOptions::from_overrides("python", given).map_err(crate::error::to_py)?;
    let with_metrics = match options.get("metrics")? {
        Some(on) if boolean(&on, "metrics")? => {
            options_given.with_metrics_sink(crate::metrics::host_sink(py)?)
        }
        _ => options_given,
    };
    match options.get("tracing")? {
        Some(on) if boolean(&on, "tracing")? => {
            Ok(with_metrics.with_span_sink(crate::spans::host_sink(py)?))
        }
        _ => Ok(with_metrics),
    }
}

/// A lock's options as given to `lock(...)`, `acquire(...)` and their kin: only `known` ones,
/// each checked, named after `call` in errors.
pub(crate) fn acquire_options(
    options: Option<&Bound<'_, PyDict>>,
    known: &[&str],
    call: &str,
) -> PyResult<LockOptions> {
    lock_options(&Options::check(options, known, call)?)
}

//! Durations as people write them, one grammar for every place that takes one as text: URL
//! options (docs/design.md §4.4) and the `fencelock` command's flags.
//!
//! A number (digits, with a fraction if wanted) and a unit: `ms`, `s` or `sec`, `m` or `min`,
//! `h`; a bare number is seconds. At most a year (366 days); never negative.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::options::MAX_WAIT;

const EXAMPLES: &str = "use e.g. 30s, 500ms, 2m or a number of seconds";

/// `text` as a duration: `30s`, `500ms`, `2m`, `1.5min`, `1h`, or a bare number of seconds.
///
/// # Errors
/// INVALID_ARGUMENT naming the text and what is wrong with it: negative, no number, an
/// unknown unit, longer than a year.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(fencelock::parse_duration("1.5min").unwrap(), Duration::from_secs(90));
/// assert_eq!(fencelock::parse_duration("250").unwrap(), Duration::from_secs(250));
/// assert!(fencelock::parse_duration("10 parsecs").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(Error::invalid(format!(
            "{text:?} is negative; durations must be 0 or more"
        )));
    }
    let not_a_duration = || Error::invalid(format!("{text:?} is not a duration; {EXAMPLES}"));
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = (t[..split].trim_end(), &t[split..]);
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(not_a_duration());
    }
    let value: f64 = number.parse().map_err(|_| not_a_duration())?;
    let scale = match unit {
        "" | "s" | "sec" => 1.0,
        "ms" => 0.001,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(Error::invalid(format!(
                "{text:?} has an unknown unit; use ms, s, sec, m, min or h (e.g. 30s, 500ms, 2m)"
            )));
        }
    };
    let seconds = value * scale;
    if !seconds.is_finite() || seconds > MAX_WAIT.as_secs_f64() {
        return Err(Error::invalid(format!("{text:?} is longer than a year")));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The value of an option named for milliseconds (`tick_ms`, `busy_timeout_ms`): a whole number
/// of milliseconds, as it always took, or any duration with its unit (`10s`).
pub(crate) fn parse_millis_or_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let ms: u64 = t
            .parse()
            .map_err(|_| Error::invalid(format!("{text:?} is longer than a year")))?;
        let duration = Duration::from_millis(ms);
        if duration > MAX_WAIT {
            return Err(Error::invalid(format!("{text:?} is longer than a year")));
        }
        return Ok(duration);
    }
    if !t.contains(|c: char| c.is_ascii_alphabetic()) {
        return Err(Error::invalid(format!(
            "{text:?} is neither a whole number of milliseconds nor a duration with its unit \
             (e.g. 1500 or 1.5s)"
        )));
    }
    parse_duration(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn accepted_forms() {
        let cases = [
            ("30s", 30_000),
            ("30 s", 30_000),
            ("500ms", 500),
            ("2m", 120_000),
            ("2min", 120_000),
            ("10sec", 10_000),
            ("1h", 3_600_000),
            ("45", 45_000),
            ("1.5", 1_500),
            (".5s", 500),
            ("0", 0),
        ];
        for (text, ms) in cases {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(ms),
                "{text}"
            );
        }
    }

    #[test]
    fn refused_forms_say_why() {
        let cases = [
            ("", "not a duration"),
            ("-1", "negative"),
            ("-5s", "negative"),
            ("abc", "not a duration"),
            ("s", "not a duration"),
            ("10x", "unknown unit"),
            ("1d", "unknown unit"),
            ("1e9", "unknown unit"),
            ("NaN", "not a duration"),
            ("inf", "not a duration"),
            ("1.2.3s", "not a duration"),
            ("5 s s", "unknown unit"),
            ("99999999999h", "longer than a year"),
            ("367d", "unknown unit"),
        ];
        for (text, why) in cases {
            let err = parse_duration(text).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{text}");
            assert!(err.message().contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn millisecond_options_take_whole_milliseconds_or_a_unit() {
        assert_eq!(
            parse_millis_or_duration("1500").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse_millis_or_duration("1.5s").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse_millis_or_duration("2min").unwrap(),
            Duration::from_secs(120)
        );
        for bad in ["1.5", "", "-3", "10x", "99999999999999999999"] {
            let err = parse_millis_or_duration(bad).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad}");
        }
    }
}

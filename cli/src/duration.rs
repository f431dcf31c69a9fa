//! Durations on the command line: `30s`, `500ms`, `2m`, `1h`, or a bare number of seconds.

use std::time::Duration;

/// The longest duration the command accepts anywhere.
const MAX: Duration = Duration::from_secs(366 * 24 * 3600);

pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!("{text:?} is negative; durations must be 0 or more"));
    }
    if !t.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "{text:?} is not a duration; use e.g. 30s, 500ms, 2m or a number of seconds"
        ));
    }
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "" | "s" | "sec" => 1.0,
        "ms" => 0.001,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit; use ms, s, m or h (e.g. 30s, 500ms, 2m)"
            ));
        }
    };
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "{text:?} is not a duration; use e.g. 30s, 500ms, 2m or a number of seconds"
        ));
    }
    let value: f64 = number.parse().map_err(|_| {
        format!("{text:?} is not a duration; use e.g. 30s, 500ms, 2m or a number of seconds")
    })?;
    let seconds = value * scale;
    if !seconds.is_finite() || seconds > MAX.as_secs_f64() {
        return Err(format!("{text:?} is longer than a year"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// `--wait`: a duration, or `forever`.
pub fn parse_wait(text: &str) -> Result<Option<Duration>, String> {
    match text.trim() {
        "forever" | "inf" | "infinite" => Ok(None),
        other => parse(other).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("45").unwrap(), Duration::from_secs(45));
        assert_eq!(parse("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_wait("forever").unwrap(), None);
    }

    #[test]
    fn refused_forms() {
        for bad in [
            "",
            "-1",
            "-5s",
            "abc",
            "10x",
            "1e9",
            "NaN",
            "inf",
            "99999999999h",
            "s",
            "1.2.3s",
            "5 s s",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}

//! Durations on the command line: the core's grammar ([`fencelock::parse_duration`]: `30s`,
//! `500ms`, `2m`, `1.5min`, `1h`, or a bare number of seconds), and `forever` for `--wait`.

use std::time::Duration;

pub fn parse(text: &str) -> Result<Duration, String> {
    fencelock::parse_duration(text).map_err(|e| e.message().to_string())
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

    // The grammar itself is the core's, tested there (core/src/duration.rs).
    #[test]
    fn wait_takes_forever_or_a_duration() {
        assert_eq!(parse_wait("forever").unwrap(), None);
        assert_eq!(parse_wait("1.5min").unwrap(), Some(Duration::from_secs(90)));
        assert!(
            parse_wait("10 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
    }
}

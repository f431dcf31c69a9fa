//! What a `redlock://` URL says: the masters, and the options of its query.

use std::collections::HashSet;
use std::time::Duration;

use crate::backend::redis::keys::{DEFAULT_PREFIX, validate_prefix};
use crate::error::{Error, Result};
use crate::options::{MAX_TTL, MIN_TTL};
use crate::url::LockerUrl;

/// The default longest lease (docs/design.md §3.3): what a restarted master waits out before it
/// votes.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(60);
/// The default maximum clock skew between masters.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_millis(500);
/// The default cap on one request to one master.
pub const DEFAULT_INSTANCE_TIMEOUT: Duration = Duration::from_millis(500);

const KNOWN: [&str; 10] = [
    "prefix",
    "max_ttl",
    "max_skew",
    "instance_timeout",
    "allow_eviction",
    "strict_checks",
    "tls",
    "ca",
    "cert",
    "key",
];

#[derive(Debug, Clone)]
pub struct RedlockSettings {
    pub prefix: String,
    /// The `max_ttl` this client would store if it is the first; the stored value wins.
    pub max_ttl: Duration,
    /// Masters whose clock is further than this from the others' are left out of quorums;
    /// also added to the client deadline's drift margin and to a restarted master's wait.
    pub max_skew: Duration,
    /// The longest one request to one master may take (capped further at a tenth of the ttl).
    pub instance_timeout: Duration,
    pub allow_eviction: bool,
    pub strict_checks: bool,
}

fn duration(url: &LockerUrl, key: &str, default: Duration) -> Result<Duration> {
    url.duration_option(key, default)
}

impl RedlockSettings {
    pub fn from_url(url: &LockerUrl) -> Result<Self> {
        url.refuse_unknown_options("redlock", &KNOWN)?;
        if url.hosts.is_empty() {
            return Err(Error::invalid(
                "a redlock URL needs at least one master: redlock://h1:p1,h2:p2,h3:p3",
            ));
        }
        let mut seen = HashSet::new();
        for host in &url.hosts {
            let key = (host.host.to_ascii_lowercase(), host.port.unwrap_or(6379));
            if !seen.insert(key) {
                return Err(Error::invalid(format!(
                    "redlock master {host} is listed twice in {url}: every master must be a different server, \
                     or one server would cast two votes"
                )));
            }
        }
        let prefix = url
            .query
            .get("prefix")
            .cloned()
            .unwrap_or_else(|| DEFAULT_PREFIX.to_string());
        validate_prefix(&prefix)?;
        let max_ttl = duration(url, "max_ttl", DEFAULT_MAX_TTL)?;
        if !(MIN_TTL..=MAX_TTL).contains(&max_ttl) {
            return Err(Error::invalid(format!(
                "max_ttl must be between {MIN_TTL:?} and 7 days, not {max_ttl:?}"
            )));
        }
        let max_skew = duration(url, "max_skew", DEFAULT_MAX_SKEW)?;
        if max_skew > Duration::from_secs(60) {
            return Err(Error::invalid(format!(
                "max_skew of {max_skew:?} is longer than a minute"
            )));
        }
        let instance_timeout = duration(url, "instance_timeout", DEFAULT_INSTANCE_TIMEOUT)?;
        if !(Duration::from_millis(5)..=Duration::from_secs(60)).contains(&instance_timeout) {
            return Err(Error::invalid(
                "instance_timeout must be between 5 ms and 60 s",
            ));
        }
        Ok(RedlockSettings {
            prefix,
            max_ttl,
            max_skew,
            instance_timeout,
            allow_eviction: url.bool_option("allow_eviction", false)?,
            strict_checks: url.bool_option("strict_checks", false)?,
        })
    }

    /// Majority of all configured masters: N/2 + 1.
    pub fn quorum(n: usize) -> usize {
        n / 2 + 1
    }

    /// The key that stores the deployment's `max_ttl` (milliseconds) on every master.
    pub fn max_ttl_key(&self) -> String {
        format!("{}:redlock:max_ttl", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<RedlockSettings> {
        RedlockSettings::from_url(&LockerUrl::parse(url)?)
    }

    #[test]
    fn durations() {
        assert_eq!(
            crate::parse_duration("60s").unwrap(),
            Duration::from_secs(60)
        );
        assert_eq!(
            crate::parse_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            crate::parse_duration("2m").unwrap(),
            Duration::from_secs(120)
        );
        assert_eq!(
            crate::parse_duration("1.5").unwrap(),
            Duration::from_millis(1500)
        );
        for bad in ["", "-1s", "1d", "abc", "nan"] {
            assert!(crate::parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_and_hosts() {
        let s = parse("redlock://a:1,b:2,c:3?max_ttl=2s&max_skew=100ms&prefix=t").unwrap();
        assert_eq!(s.max_ttl, Duration::from_secs(2));
        assert_eq!(s.max_skew, Duration::from_millis(100));
        assert_eq!(s.max_ttl_key(), "t:redlock:max_ttl");
        let d = parse("redlock://a:1,b:2,c:3").unwrap();
        assert_eq!((d.max_ttl, d.max_skew), (DEFAULT_MAX_TTL, DEFAULT_MAX_SKEW));
        assert_eq!(RedlockSettings::quorum(5), 3);
        assert_eq!(RedlockSettings::quorum(4), 3);
        assert_eq!(RedlockSettings::quorum(1), 1);
    }

    #[test]
    fn bad_urls_are_invalid_arguments() {
        for bad in [
            "redlock://",
            "redlock://a:1,a:1,b:2",
            "redlock://A:1,a:1,b:2",
            "redlock://a,a:6379",
            "redlock://a:1,,b:2",
            "redlock://a:1,b:2?bogus=1",
            "redlock://a:1,b:2?max_ttl=0s",
            "redlock://a:1,b:2?max_ttl=soon",
            "redlock://a:1,b:2?max_skew=2h",
            "redlock://a:1,b:2?prefix=x{y}",
            "redlock://a:1,b:2?allow_eviction=maybe",
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(
                err.code(),
                crate::error::ErrorCode::InvalidArgument,
                "{bad}: {err}"
            );
        }
    }
}

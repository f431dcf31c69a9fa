//! A URL's query options: the query string parsed, options read as durations or flags, and
//! unknown options refused by name.

use std::collections::BTreeMap;
use std::time::Duration;

use super::LockerUrl;
use super::percent::percent_decode;
use super::redact::unparsed;
use crate::duration::{parse_duration, parse_millis_or_duration};
use crate::error::{Error, Result};

impl LockerUrl {
    /// The query option `key` as a duration (`30s`, `500ms`, `2m`: docs/design.md §4.4), or `default` without it.
    pub fn duration_option(&self, key: &str, default: Duration) -> Result<Duration> {
        self.query.get(key).map_or(Ok(default), |v| {
            parse_duration(v).map_err(|e| Error::invalid(format!("{key}: {}", e.message())))
        })
    }

    /// The query option `key`, named for milliseconds (`tick_ms`), within `range`: a whole
    /// number of milliseconds or a duration with its unit (`10s`); `None` without it.
    pub fn millis_option(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<Duration>,
    ) -> Result<Option<Duration>> {
        let Some(text) = self.query.get(key) else {
            return Ok(None);
        };
        let value = parse_millis_or_duration(text)
            .map_err(|e| Error::invalid(format!("{key}: {}", e.message())))?;
        if !range.contains(&value) {
            return Err(Error::invalid(format!(
                "{key} must be {}-{} ms (or a duration with its unit), not {text:?}",
                range.start().as_millis(),
                range.end().as_millis()
            )));
        }
        Ok(Some(value))
    }

    /// The query option `key` as a boolean (`true`, `1` or `yes`; `false`, `0` or `no`; in any
    /// case), or `default` without it.
    pub fn bool_option(&self, key: &str, default: bool) -> Result<bool> {
        self.query
            .get(key)
            .map_or(Ok(default), |value| parse_flag(key, value))
    }

    /// Refuses a query option not in `known`, by name, listing the known ones:
    /// `unknown {what} URL option "x"; known: a, b, c`. `what` names the kind of URL
    /// (`Redis`, `ZooKeeper`, `Redis fence`, …).
    pub fn refuse_unknown_options(&self, what: &str, known: &[&str]) -> Result<()> {
        refuse_unknown_options(&self.query, what, known)
    }
}

/// [`LockerUrl::refuse_unknown_options`] on the options of a URL still being parsed.
pub(super) fn refuse_unknown_options(
    query: &BTreeMap<String, String>,
    what: &str,
    known: &[&str],
) -> Result<()> {
    match query.keys().find(|key| !known.contains(&key.as_str())) {
        None => Ok(()),
        Some(key) => {
            let mut known = known.to_vec();
            known.sort_unstable();
            Err(Error::invalid(format!(
                "unknown {what} URL option {key:?}; known: {}",
                known.join(", ")
            )))
        }
    }
}

/// The query string `query` of `url` (after the `?`) as options, each given once.
pub(super) fn parse_query(query: &str, url: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = percent_decode(k, url)?;
        if out.insert(k.clone(), percent_decode(v, url)?).is_some() {
            return Err(Error::invalid(format!(
                "URL option {k:?} given twice in {}",
                unparsed(url)
            )));
        }
    }
    Ok(out)
}

/// A flag option's value: `true`/`1`/`yes` or `false`/`0`/`no`, in any case.
pub(super) fn parse_flag(key: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        other => Err(Error::invalid(format!(
            "{key} must be true or false, not {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use crate::url::LockerUrl;

    #[test]
    fn boolean_options() {
        let url = LockerUrl::parse("redis://h?a=YES&b=0&c=True&d=maybe").unwrap();
        assert!(url.bool_option("a", false).unwrap());
        assert!(!url.bool_option("b", true).unwrap());
        assert!(url.bool_option("c", false).unwrap());
        assert!(url.bool_option("absent", true).unwrap());
        let err = url.bool_option("d", true).unwrap_err();
        assert_eq!(err.code(), crate::error::ErrorCode::InvalidArgument);
        assert_eq!(err.message(), r#"d must be true or false, not "maybe""#);
    }

    #[test]
    fn unknown_options_are_refused_by_name_with_the_known_ones() {
        let url = LockerUrl::parse("redis://h?prefix=p&colour=red").unwrap();
        url.refuse_unknown_options("Redis", &["prefix", "colour"])
            .unwrap();
        let err = url
            .refuse_unknown_options("Redis", &["tls", "prefix"])
            .unwrap_err();
        assert_eq!(err.code(), crate::error::ErrorCode::InvalidArgument);
        assert_eq!(
            err.message(),
            r#"unknown Redis URL option "colour"; known: prefix, tls"#
        );
        let err = LockerUrl::parse("sqlite:///x.db?colour=red").unwrap_err();
        assert_eq!(
            err.message(),
            r#"unknown sqlite URL option "colour"; known: busy_timeout_ms, create_table, mode, table"#
        );
    }
}

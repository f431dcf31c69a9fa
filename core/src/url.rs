//! fencelock's own URL parser.
//!
//! The multi-host forms (`redis+cluster://h1:p1,h2:p2`, `zk://h1,h2/chroot`) do not parse with
//! a generic URL parser, so the core parses every backend URL here. A parsed URL never prints
//! its password: `Display` and `Debug` both show the redacted form.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// Which algorithm and server family a URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Redis,
    RedisCluster,
    Redlock,
    ZooKeeper,
    Postgres,
    MySql,
    Sqlite,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Redis => "redis",
            BackendKind::RedisCluster => "redis-cluster",
            BackendKind::Redlock => "redlock",
            BackendKind::ZooKeeper => "zookeeper",
            BackendKind::Postgres => "postgres",
            BackendKind::MySql => "mysql",
            BackendKind::Sqlite => "sqlite",
        }
    }
}

/// One `host:port` of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: Option<u16>,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// A parsed backend URL. The password is kept private and never formatted.
#[derive(Clone, PartialEq, Eq)]
pub struct LockerUrl {
    pub kind: BackendKind,
    /// The scheme as written, lowercased (`rediss`, `postgresql`, …).
    pub scheme: String,
    pub tls: bool,
    pub user: Option<String>,
    password: Option<String>,
    pub hosts: Vec<HostPort>,
    /// The path after the hosts, without its leading `/` (db index, chroot, database name);
    /// for SQLite, the file path.
    pub path: String,
    pub query: BTreeMap<String, String>,
}

impl LockerUrl {
    /// The query option `key` as a duration (`30s`, `500ms`, `2m`: docs/design.md §4.4), or `default` without it.
    pub fn duration_option(&self, key: &str, default: Duration) -> Result<Duration> {
        self.query
            .get(key)
            .map_or(Ok(default), |v| parse_duration(key, v))
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

    /// Parses `url`, choosing the backend from its scheme.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an unknown scheme or a malformed URL; the message shows the
    /// URL redacted.
    pub fn parse(url: &str) -> Result<Self> {
        let url = url.trim();
        let Some((scheme, rest)) = url.split_once("://") else {
            // Without `://` there is no telling a password from the rest: show none of it.
            return Err(Error::invalid(
                "not a URL (expected scheme://…, for example redis://host:6379)",
            ));
        };
        let scheme = scheme.to_ascii_lowercase();
        let (kind, tls) = match scheme.as_str() {
            "redis" => (BackendKind::Redis, false),
            "rediss" => (BackendKind::Redis, true),
            "redis+cluster" => (BackendKind::RedisCluster, false),
            "rediss+cluster" => (BackendKind::RedisCluster, true),
            "redlock" => (BackendKind::Redlock, false),
            "zk" | "zookeeper" => (BackendKind::ZooKeeper, false),
            "postgres" | "postgresql" => (BackendKind::Postgres, false),
            "mysql" | "mariadb" => (BackendKind::MySql, false),
            "sqlite" => (BackendKind::Sqlite, false),
            other => {
                return Err(Error::invalid(format!(
                    "unknown URL scheme {other:?} in {}; expected one of redis, rediss, \
                     redis+cluster, redlock, zk, postgres, mysql, mariadb, sqlite",
                    unparsed(url)
                )));
            }
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, parse_query(query, url)?),
            None => (rest, BTreeMap::new()),
        };
        if rest.contains('#') {
            return Err(Error::invalid(format!(
                "URL fragments (#…) are not supported: {}",
                unparsed(url)
            )));
        }
        // `tls=yes` must not connect in plain text: the option reads like every other flag,
        // and a TLS scheme cannot be turned off by it.
        let tls = match query.get("tls").map(|v| parse_flag("tls", v)).transpose()? {
            Some(false) if tls => {
                return Err(Error::invalid(format!(
                    "{scheme}:// always uses TLS: leave out tls=false, or use the plain scheme"
                )));
            }
            Some(asked) => tls || asked,
            None => tls,
        };

        if kind == BackendKind::Sqlite {
            return parse_sqlite(scheme, rest, query, url);
        }

        // The userinfo ends at the last `@`: a password with a raw `/` (base64 has them) is read
        // as written instead of spilling into a port or a path. A raw `@` in a path (a database
        // name, a chroot) must be written `%40`.
        let (userinfo, after) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (hostlist, path) = match after.find('/') {
            Some(slash) => (&after[..slash], &after[slash + 1..]),
            None => (after, ""),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, password) = match info.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (info, None),
                };
                let user = percent_decode(user, url)?;
                let password = password.map(|p| percent_decode(p, url)).transpose()?;
                (if user.is_empty() { None } else { Some(user) }, password)
            }
        };
        if hostlist.is_empty() {
            return Err(Error::invalid(format!(
                "URL names no host: {}",
                unparsed(url)
            )));
        }
        let hosts = hostlist
            .split(',')
            .map(|h| parse_host_port(h, url))
            .collect::<Result<Vec<_>>>()?;
        if hosts.len() > 1
            && matches!(
                kind,
                BackendKind::Redis | BackendKind::Postgres | BackendKind::MySql
            )
        {
            return Err(Error::invalid(format!(
                "{scheme}:// takes one host; use redis+cluster:// or redlock:// for several: {}",
                unparsed(url)
            )));
        }
        Ok(LockerUrl {
            kind,
            scheme,
            tls,
            user,
            password,
            hosts,
            path: percent_decode(path, url)?,
            query,
        })
    }

    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The `redlock://` URL over the masters `urls` (`redis://` or `rediss://`, one host
    /// each), which must agree on credentials, database and options: a Redlock deployment has
    /// one of each. Pass the result to `Locker::connect`.
    ///
    /// ```
    /// let url = fencelock::LockerUrl::redlock_from(&["redis://:pw@a:7001", "redis://:pw@b:7002", "redis://:pw@c:7003"]).unwrap();
    /// assert_eq!(url, "redlock://:pw@a:7001,b:7002,c:7003");
    /// ```
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when a URL is not a single Redis, or they disagree.
    pub fn redlock_from(urls: &[&str]) -> Result<String> {
        let parsed = urls
            .iter()
            .map(|u| LockerUrl::parse(u))
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = parsed.first() else {
            return Err(Error::invalid(
                "a Redlock deployment needs at least one master URL",
            ));
        };
        for u in &parsed {
            if u.kind != BackendKind::Redis {
                return Err(Error::invalid(format!(
                    "{u} is not a single-Redis URL (redis:// or rediss://)"
                )));
            }
            if (u.tls, &u.user, &u.password, &u.path, &u.query)
                != (
                    first.tls,
                    &first.user,
                    &first.password,
                    &first.path,
                    &first.query,
                )
            {
                return Err(Error::invalid(format!(
                    "{u} and {first} differ in TLS, credentials, database or options; a redlock:// URL has one of each"
                )));
            }
        }
        let mut s = String::from("redlock://");
        if first.user.is_some() || first.password.is_some() {
            s.push_str(&percent_encode(first.user.as_deref().unwrap_or("")));
            if let Some(p) = &first.password {
                s.push(':');
                s.push_str(&percent_encode(p));
            }
            s.push('@');
        }
        let hosts: Vec<String> = parsed
            .iter()
            .flat_map(|u| u.hosts.iter().map(|h| h.to_string()))
            .collect();
        s.push_str(&hosts.join(","));
        if !first.path.is_empty() {
            s.push('/');
            s.push_str(&percent_encode(&first.path));
        }
        let mut query: Vec<String> = first
            .query
            .iter()
            .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
            .collect();
        if first.tls && !first.query.contains_key("tls") {
            query.push("tls=true".to_string());
        }
        if !query.is_empty() {
            s.push('?');
            s.push_str(&query.join("&"));
        }
        Ok(s)
    }

    /// The SQLite file path (`None` for other backends).
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        (self.kind == BackendKind::Sqlite).then(|| PathBuf::from(&self.path))
    }

    /// The URL with its password replaced by `***`, safe for messages and logs.
    pub fn redacted(&self) -> String {
        let mut s = format!("{}://", self.scheme);
        if self.kind == BackendKind::Sqlite {
            s.push_str(&self.path);
        } else {
            if self.user.is_some() || self.password.is_some() {
                s.push_str(self.user.as_deref().unwrap_or(""));
                if self.password.is_some() {
                    s.push_str(":***");
                }
                s.push('@');
            }
            let hosts: Vec<String> = self.hosts.iter().map(|h| h.to_string()).collect();
            s.push_str(&hosts.join(","));
            if !self.path.is_empty() {
                s.push('/');
                s.push_str(&self.path);
            }
        }
        if !self.query.is_empty() {
            let pairs: Vec<String> = self
                .query
                .iter()
                .map(|(k, v)| {
                    if is_secret_key(k) {
                        format!("{k}=***")
                    } else {
                        format!("{k}={v}")
                    }
                })
                .collect();
            s.push('?');
            s.push_str(&pairs.join("&"));
        }
        s
    }
}

impl fmt::Display for LockerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for LockerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockerUrl({})", self.redacted())
    }
}

fn parse_sqlite(
    scheme: String,
    rest: &str,
    query: BTreeMap<String, String>,
    url: &str,
) -> Result<LockerUrl> {
    // sqlite:///abs/path.db keeps the leading slash of an absolute path; sqlite://rel.db
    // is relative to the working folder. ':memory:' is refused: a lock nobody else can see
    // protects nothing.
    let path = percent_decode(rest, url)?;
    if path.is_empty() {
        return Err(Error::invalid(
            "sqlite URL names no file: use sqlite:///absolute/path.db or sqlite://relative/path.db",
        ));
    }
    if path == ":memory:" || query.get("mode").is_some_and(|m| m == "memory") {
        return Err(Error::invalid(
            "an in-memory SQLite database is private to one connection and cannot hold locks \
             for anyone else; name a file",
        ));
    }
    refuse_unknown_options(
        &query,
        "sqlite",
        &["mode", "table", "create_table", "busy_timeout_ms"],
    )?;
    Ok(LockerUrl {
        kind: BackendKind::Sqlite,
        scheme,
        tls: false,
        user: None,
        password: None,
        hosts: Vec::new(),
        path,
        query,
    })
}

fn parse_host_port(text: &str, url: &str) -> Result<HostPort> {
    let bad = |why: &str| Error::invalid(format!("{why} in {}", unparsed(url)));
    if text.is_empty() {
        return Err(bad("empty host"));
    }
    let (host, port) = if let Some(inner) = text.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return Err(bad("unclosed [ in an IPv6 host"));
        };
        let host = &inner[..close];
        let after = &inner[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(bad("junk after an IPv6 host")),
        };
        (host, port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '/' | '@' | '?' | '#'))
    {
        return Err(bad("invalid character in host"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            // The text is not quoted: it may be the start of a password with a raw `:`.
            Ok(0) | Err(_) => return Err(bad("invalid port (a number from 1 to 65535)")),
            Ok(n) => Some(n),
        },
    };
    Ok(HostPort {
        host: host.to_string(),
        port,
    })
}

fn refuse_unknown_options(
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

fn parse_query(query: &str, url: &str) -> Result<BTreeMap<String, String>> {
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

fn percent_decode(text: &str, url: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match byte {
                Some(b) => out.push(b),
                None => {
                    return Err(Error::invalid(format!(
                        "bad percent-escape in {}",
                        unparsed(url)
                    )));
                }
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| Error::invalid(format!("URL decodes to invalid UTF-8: {}", unparsed(url))))
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    // The TLS client key option names a file, not a secret, however it is spelled.
    let is_key_file = key.replace(['-', '_'], "") == "sslkey";
    ["pass", "secret", "token", "key", "auth"]
        .iter()
        .any(|s| key.contains(s))
        && !is_key_file
}

/// What a message may show of a URL that did not parse: its scheme and what follows the last
/// `@` (hosts, path, options, with secret-looking options masked), never what comes before that
/// `@`, where a password with a raw `/`, `?`, `#`, `:`, `'`, `"` or space would otherwise pass
/// for a port, a path or a query. Only called on input that contains `://`.
fn unparsed(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(a URL without scheme://)".to_string();
    };
    match rest.rfind('@') {
        Some(at) => redact_key_values(&format!("{scheme}://***@{}", &rest[at + 1..])),
        None => redact_key_values(&format!("{scheme}://{rest}")),
    }
}

/// Replaces anything that looks like a credential in free text (a URL's `user:password@`,
/// a `password=` option) with `***`. Used on URLs that failed to parse and on messages that
/// come back from backends, which sometimes echo the connection string.
pub fn redact_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // user:password@ after each scheme://
    while let Some(pos) = rest.find("://") {
        let (head, tail) = rest.split_at(pos + 3);
        out.push_str(head);
        // The URL runs to white space or a quote; its userinfo, if any, to its last `@` (a
        // password may hold a raw `/` or `?`).
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let info = &authority[..at];
                match info.split_once(':') {
                    Some((user, _)) => {
                        out.push_str(user);
                        out.push_str(":***");
                    }
                    None => out.push_str(info),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    redact_key_values(&out)
}

fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < bytes.len() {
        if bytes[i] == b'=' {
            let start = text[..i]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |p| p + 1);
            let key = &text[start..i];
            if !key.is_empty() && is_secret_key(key) {
                out.push_str("=***");
                let end = text[i + 1..]
                    .find(['&', ' ', ';', '"', '\'', ','])
                    .map_or(text.len(), |p| i + 1 + p);
                i = end;
                continue;
            }
        }
        let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8().max(1);
    }
    out
}

/// `60s`, `500ms`, `2m`, or a bare number of seconds (fractions allowed).
pub fn parse_duration(key: &str, text: &str) -> Result<Duration> {
    let bad = || {
        Error::invalid(format!(
            "{key} must be a duration like 60s, 500ms or 2m, not {text:?}"
        ))
    };
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => (&t[..at], &t[at..]),
        None => (t, "s"),
    };
    let n: f64 = number.trim().parse().map_err(|_| bad())?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    let secs = n * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A flag option's value: `true`/`1`/`yes` or `false`/`0`/`no`, in any case.
fn parse_flag(key: &str, value: &str) -> Result<bool> {
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
    use super::*;

    #[test]
    fn redis_forms() {
        let u = LockerUrl::parse("redis://alice:s3cr%40t@127.0.0.1:6379/2").unwrap();
        assert_eq!(u.kind, BackendKind::Redis);
        assert_eq!(u.user.as_deref(), Some("alice"));
        assert_eq!(u.password(), Some("s3cr@t"));
        assert_eq!(
            u.hosts,
            vec![HostPort {
                host: "127.0.0.1".into(),
                port: Some(6379)
            }]
        );
        assert_eq!(u.path, "2");
        assert_eq!(u.to_string(), "redis://alice:***@127.0.0.1:6379/2");
        assert!(!format!("{u:?}").contains("s3cr"));
        assert!(LockerUrl::parse("rediss://h:6380").unwrap().tls);
    }

    #[test]
    fn multi_host_forms() {
        let u = LockerUrl::parse("redis+cluster://:pw@h1:7101,h2:7102,[::1]:7103").unwrap();
        assert_eq!(u.kind, BackendKind::RedisCluster);
        assert_eq!(u.hosts.len(), 3);
        assert_eq!(u.hosts[2].host, "::1");
        assert_eq!(
            u.to_string(),
            "redis+cluster://:***@h1:7101,h2:7102,[::1]:7103"
        );
        let zk = LockerUrl::parse("zk://h1:2181,h2:2181/app/locks").unwrap();
        assert_eq!(zk.kind, BackendKind::ZooKeeper);
        assert_eq!(zk.path, "app/locks");
        let rl = LockerUrl::parse("redlock://a:7001,b:7002,c:7003?tls=true").unwrap();
        assert!(rl.tls);
    }

    #[test]
    fn redlock_from_redis_urls() {
        let url = LockerUrl::redlock_from(&[
            "rediss://u:p%40ss@a:1?ca=/x.pem",
            "rediss://u:p%40ss@b:2?ca=/x.pem",
        ])
        .unwrap();
        assert_eq!(url, "redlock://u:p%40ss@a:1,b:2?ca=%2Fx.pem&tls=true");
        let back = LockerUrl::parse(&url).unwrap();
        assert_eq!(
            (back.kind, back.tls, back.password(), back.hosts.len()),
            (BackendKind::Redlock, true, Some("p@ss"), 2)
        );
        for bad in [
            &["redis://a:1", "redis://:pw@b:2"][..],
            &["redis://a:1", "rediss://b:2"],
            &["redis+cluster://a:1"],
            &[],
        ] {
            assert_eq!(
                LockerUrl::redlock_from(bad).unwrap_err().code(),
                crate::ErrorCode::InvalidArgument,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn sqlite_forms() {
        let abs = LockerUrl::parse("sqlite:///var/lib/app/locks.db").unwrap();
        assert_eq!(
            abs.sqlite_path().unwrap(),
            PathBuf::from("/var/lib/app/locks.db")
        );
        let rel = LockerUrl::parse("sqlite://data/locks.db?mode=ro").unwrap();
        assert_eq!(rel.path, "data/locks.db");
        assert_eq!(rel.query.get("mode").map(String::as_str), Some("ro"));
        assert!(LockerUrl::parse("sqlite://").is_err());
        assert!(LockerUrl::parse("sqlite://:memory:").is_err());
        assert!(LockerUrl::parse("sqlite:///x.db?bogus=1").is_err());
    }

    #[test]
    fn boolean_options() {
        let url = LockerUrl::parse("redis://h?a=YES&b=0&c=True&d=maybe").unwrap();
        assert!(url.bool_option("a", false).unwrap());
        assert!(!url.bool_option("b", true).unwrap());
        assert!(url.bool_option("c", false).unwrap());
        assert!(url.bool_option("absent", true).unwrap());
        let err = url.bool_option("d", true).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
        assert_eq!(err.message(), r#"d must be true or false, not "maybe""#);
    }

    #[test]
    fn tls_is_a_flag_like_any_other_and_a_tls_scheme_cannot_be_turned_off() {
        // `tls=yes` once parsed and connected in plain text.
        assert!(LockerUrl::parse("redis://h?tls=yes").unwrap().tls);
        assert!(LockerUrl::parse("redis://h?tls=TRUE").unwrap().tls);
        assert!(!LockerUrl::parse("redis://h?tls=no").unwrap().tls);
        assert!(LockerUrl::parse("rediss://h").unwrap().tls);
        for bad in ["redis://h?tls=maybe", "rediss://h?tls=false"] {
            let err = LockerUrl::parse(bad).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn unknown_options_are_refused_by_name_with_the_known_ones() {
        let url = LockerUrl::parse("redis://h?prefix=p&colour=red").unwrap();
        url.refuse_unknown_options("Redis", &["prefix", "colour"])
            .unwrap();
        let err = url
            .refuse_unknown_options("Redis", &["tls", "prefix"])
            .unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
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

    #[test]
    fn malformed_urls_are_refused_without_secrets() {
        for bad in [
            "ftp://u:hunter2@h/x",
            "redis://u:hunter2@h:99999",
            "redis://u:hunter2@h:0",
            "redis://u:hunter2@",
            "redis://u:hunter2@h1:1,h2:2",
            "redis://u:hunter2@[::1:6379",
            "hunter2",
            "redis://u:hunter2@h:1/%zz",
        ] {
            let err = LockerUrl::parse(bad).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument, "{bad}");
            assert!(!err.message().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn a_password_with_raw_slashes_or_spaces_is_read_up_to_the_last_at() {
        let u = LockerUrl::parse("redis://app:Xy/9kQ+w@cache:6379/2").unwrap();
        assert_eq!(u.password(), Some("Xy/9kQ+w"));
        assert_eq!(u.hosts[0].to_string(), "cache:6379");
        assert_eq!(u.path, "2");
        let u = LockerUrl::parse("postgres://svc:p@ss w/rd@db/app").unwrap();
        assert_eq!(u.password(), Some("p@ss w/rd"));
        assert_eq!((u.hosts[0].host.as_str(), u.path.as_str()), ("db", "app"));
        assert_eq!(u.to_string(), "postgres://svc:***@db/app");
    }

    #[test]
    fn an_unparsed_url_shows_nothing_before_its_last_at() {
        for (bad, shown) in [
            (
                "redis://:ab?cd@cache:6379",
                "empty host in redis://***@cache:6379",
            ),
            (
                "redis://app:pa ss@cache:0",
                "invalid port (a number from 1 to 65535) in redis://***@cache:0",
            ),
            ("redis:/app:hunter2@cache", "not a URL"),
        ] {
            let err = LockerUrl::parse(bad).unwrap_err();
            assert!(err.message().starts_with(shown), "{bad}: {err}");
        }
        assert_eq!(
            redact_secrets("connect to redis://app:Xy/9kQ+w@cache:6379 failed"),
            "connect to redis://app:***@cache:6379 failed"
        );
    }

    #[test]
    fn the_tls_key_file_is_shown_however_spelled_and_secrets_are_not() {
        let u = LockerUrl::parse(
            "mysql://h/db?ssl-key=/k1.pem&ssl_key=/k2.pem&sslkey=/k3.pem&api_key=s3&sslpassword=s4",
        )
        .unwrap();
        assert_eq!(
            u.to_string(),
            "mysql://h/db?api_key=***&ssl-key=/k1.pem&ssl_key=/k2.pem&sslkey=/k3.pem&sslpassword=***"
        );
    }

    #[test]
    fn redact_free_text() {
        assert_eq!(
            redact_secrets("failed: postgres://bob:pw@db/x?password=pw2&sslmode=require"),
            "failed: postgres://bob:***@db/x?password=***&sslmode=require"
        );
        assert_eq!(redact_secrets("no secrets here"), "no secrets here");
        let u = LockerUrl::parse("postgres://h/db?password=zzz&sslmode=require").unwrap();
        assert_eq!(
            u.to_string(),
            "postgres://h/db?password=***&sslmode=require"
        );
    }
}

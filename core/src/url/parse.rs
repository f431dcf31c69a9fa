//! [`LockerUrl::parse`]: a URL's text into its scheme, credentials, hosts, path and options,
//! with the SQLite form (a file path instead of hosts) apart.

use std::collections::BTreeMap;

use super::host::parse_host_port;
use super::percent::percent_decode;
use super::query::{parse_flag, parse_query, refuse_unknown_options};
use super::redact::unparsed;
use super::{BackendKind, LockerUrl};
use crate::error::{Error, Result};

impl LockerUrl {
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
        let (kind, tls) = BackendKind::from_scheme(&scheme, url)?;
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::url::{BackendKind, HostPort, LockerUrl};

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
    fn tls_is_a_flag_like_any_other_and_a_tls_scheme_cannot_be_turned_off() {
        // `tls=yes` once parsed and connected in plain text.
        assert!(LockerUrl::parse("redis://h?tls=yes").unwrap().tls);
        assert!(LockerUrl::parse("redis://h?tls=TRUE").unwrap().tls);
        assert!(!LockerUrl::parse("redis://h?tls=no").unwrap().tls);
        assert!(LockerUrl::parse("rediss://h").unwrap().tls);
        for bad in ["redis://h?tls=maybe", "rediss://h?tls=false"] {
            let err = LockerUrl::parse(bad).unwrap_err();
            assert_eq!(
                err.code(),
                crate::error::ErrorCode::InvalidArgument,
                "{bad}"
            );
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
}

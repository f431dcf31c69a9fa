//! From a `zk://` URL to connection settings, and ACLs for what fencelock creates.

use std::fmt;
use std::time::Duration;

use zookeeper_client::{Acl, AuthId, Permission};

use crate::error::{Error, Result};
use crate::url::LockerUrl;

/// The session timeout asked of the server unless the URL says otherwise. The server clamps it
/// to its own [minSessionTimeout, maxSessionTimeout] (by default 2 and 20 ticks).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// The folder under the chroot that holds every lock (Curator users name the same path).
pub const DEFAULT_ROOT: &str = "/fencelock";
const DEFAULT_PORT: u16 = 2181;

/// The servers' tickTime assumed when the URL does not give `tick_ms`: ZooKeeper's own default
/// (its sample configurations use 2 s), and never more than half the negotiated session timeout
/// (a server grants at least two ticks unless its minSessionTimeout was lowered).
pub const DEFAULT_TICK: Duration = Duration::from_secs(3);

const KNOWN: [&str; 3] = ["session_timeout_ms", "root", "tick_ms"];

/// Settings read from a `zk://[user:password@]h1:p1,h2:p2[/chroot][?options]` URL.
#[derive(Clone)]
pub struct ZkSettings {
    /// `h1:p1,h2:p2`, without the chroot (it is applied after it has been made sure of).
    pub hosts: String,
    /// `""` or `/a/b`.
    pub chroot: String,
    /// The lock folder under the chroot, `/fencelock` by default.
    pub root: String,
    /// What to ask the server for; the negotiated value is what counts.
    pub session_timeout: Duration,
    /// The servers' tickTime, when the URL gives it (`tick_ms`); see [`ZkSettings::tick`].
    pub tick: Option<Duration>,
    /// `user:password` for the digest scheme. Private: never formatted.
    digest: Option<String>,
}

impl fmt::Debug for ZkSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkSettings")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("root", &self.root)
            .field("session_timeout", &self.session_timeout)
            .field("tick", &self.tick)
            .field("digest", &self.digest.as_ref().map(|_| "***"))
            .finish()
    }
}

impl ZkSettings {
    pub fn from_url(url: &LockerUrl) -> Result<Self> {
        url.refuse_unknown_options("ZooKeeper", &KNOWN)?;
        if url.tls {
            return Err(Error::invalid(
                "TLS to ZooKeeper is not supported by this version of fencelock",
            ));
        }
        let session_timeout = url
            .millis_option(
                "session_timeout_ms",
                Duration::from_millis(100)..=Duration::from_secs(600),
            )?
            .unwrap_or(DEFAULT_SESSION_TIMEOUT);
        let tick = url.millis_option(
            "tick_ms",
            Duration::from_millis(1)..=Duration::from_secs(60),
        )?;
        let chroot = match url.path.trim_end_matches('/') {
            "" => String::new(),
            path => {
                let path = format!("/{}", path.trim_start_matches('/'));
                validate_path("chroot", &path)?;
                path
            }
        };
        let root = url
            .query
            .get("root")
            .cloned()
            .unwrap_or_else(|| DEFAULT_ROOT.to_string());
        validate_path("root", &root)?;
        let hosts: Vec<String> = url
            .hosts
            .iter()
            .map(|h| {
                let host = if h.host.contains(':') {
                    format!("[{}]", h.host)
                } else {
                    h.host.clone()
                };
                format!("{host}:{}", h.port.unwrap_or(DEFAULT_PORT))
            })
            .collect();
        let digest = match (&url.user, url.password()) {
            (None, None) => None,
            (Some(user), Some(password)) => {
                if user.contains(':') {
                    return Err(Error::invalid(
                        "a ZooKeeper digest user name cannot contain ':'",
                    ));
                }
                Some(format!("{user}:{password}"))
            }
            _ => {
                return Err(Error::invalid(
                    "ZooKeeper credentials need both a user and a password (zk://user:password@hosts)",
                ));
            }
        };
        Ok(ZkSettings {
            hosts: hosts.join(","),
            chroot,
            root,
            session_timeout,
            tick,
            digest,
        })
    }

    /// The servers' tickTime the session heartbeat counts with, for a negotiated session
    /// timeout: `tick_ms` if given, else [`DEFAULT_TICK`] or half the timeout, if less.
    pub fn tick(&self, negotiated: Duration) -> Duration {
        self.tick
            .unwrap_or_else(|| DEFAULT_TICK.min(negotiated / 2))
    }

    /// The `user:password` credential for the digest scheme, if any.
    pub fn digest(&self) -> Option<&[u8]> {
        self.digest.as_deref().map(str::as_bytes)
    }

    pub fn has_credentials(&self) -> bool {
        self.digest.is_some()
    }

    /// ACLs of the folders fencelock creates (the chroot if missing, the root, one folder per
    /// lock). With credentials: read, create and delete for the participants' shared identity
    /// (the `auth` scheme names whatever identity the creating session authenticated as), no
    /// access for anybody else. Without: open, like Curator's default.
    pub fn folder_acls(&self) -> Vec<Acl> {
        if self.has_credentials() {
            vec![Acl::new(
                Permission::READ | Permission::CREATE | Permission::DELETE,
                AuthId::authed(),
            )]
        } else {
            vec![Acl::new(Permission::ALL, AuthId::anyone())]
        }
    }

    /// ACLs of lock nodes: read for the participants (deleting a node is a right on its
    /// parent, and lock nodes are never written after they are created).
    pub fn node_acls(&self) -> Vec<Acl> {
        if self.has_credentials() {
            vec![Acl::new(Permission::READ, AuthId::authed())]
        } else {
            vec![Acl::new(Permission::ALL, AuthId::anyone())]
        }
    }
}

/// An absolute ZooKeeper path: `/a/b`, no empty, `.` or `..` segment, no trailing `/`, no
/// control characters.
fn validate_path(what: &str, path: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("ZooKeeper {what} {path:?} {why}")));
    if !path.starts_with('/') || path.len() < 2 {
        return bad("must be an absolute path below /, like /fencelock");
    }
    if path.ends_with('/') {
        return bad("must not end with /");
    }
    for segment in path[1..].split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return bad("has an empty, . or .. segment");
        }
    }
    if path
        .chars()
        .any(|c| c.is_control() || ('\u{e000}'..='\u{f8ff}').contains(&c) || c >= '\u{fff0}')
    {
        return bad("contains characters ZooKeeper does not accept");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> Result<ZkSettings> {
        ZkSettings::from_url(&LockerUrl::parse(url)?)
    }

    #[test]
    fn urls_map_to_settings() {
        let s = settings("zk://h1:2281,h2/apps/x?session_timeout_ms=4000&root=/locks").unwrap();
        assert_eq!(s.hosts, "h1:2281,h2:2181");
        assert_eq!(s.chroot, "/apps/x");
        assert_eq!(s.root, "/locks");
        assert_eq!(s.session_timeout, Duration::from_millis(4000));
        assert!(!s.has_credentials());
        let s = settings("zk://fl:s3cret@127.0.0.1:2181").unwrap();
        assert_eq!(s.chroot, "");
        assert_eq!(s.root, DEFAULT_ROOT);
        assert_eq!(s.session_timeout, DEFAULT_SESSION_TIMEOUT);
        assert_eq!(s.digest(), Some(&b"fl:s3cret"[..]));
        assert!(!format!("{s:?}").contains("s3cret"));
        assert_eq!(s.folder_acls()[0].scheme(), "auth");
    }

    #[test]
    fn the_tick_is_given_or_at_most_half_the_session_timeout() {
        let given = settings("zk://h?tick_ms=500").unwrap();
        assert_eq!(
            given.tick(Duration::from_secs(10)),
            Duration::from_millis(500)
        );
        let with_unit = settings("zk://h?tick_ms=1.5s&session_timeout_ms=1min").unwrap();
        assert_eq!(
            with_unit.tick(Duration::from_secs(60)),
            Duration::from_millis(1500)
        );
        assert_eq!(with_unit.session_timeout, Duration::from_secs(60));
        let assumed = settings("zk://h").unwrap();
        assert_eq!(assumed.tick(Duration::from_secs(10)), DEFAULT_TICK);
        assert_eq!(assumed.tick(Duration::from_secs(2)), Duration::from_secs(1));
    }

    #[test]
    fn bad_urls_are_invalid_arguments() {
        for url in [
            "zk://h?bogus=1",
            "zk://h?session_timeout_ms=abc",
            "zk://h?session_timeout_ms=5",
            "zk://h?tick_ms=0",
            "zk://h?tick_ms=2x",
            "zk://h?tick_ms=1.5",
            "zk://h?tick_ms=61s",
            "zk://h?root=relative",
            "zk://h?root=/a/",
            "zk://h?root=/a/../b",
            "zk://h/a/./b",
            "zk://:pw@h",
            "zk://user@h",
            "zk://h?tls=true",
        ] {
            let err = settings(url).unwrap_err();
            assert_eq!(
                err.code(),
                crate::error::ErrorCode::InvalidArgument,
                "{url}: {err}"
            );
        }
    }
}

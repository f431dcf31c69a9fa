//! One `host:port` of a URL's host list (`h1:p1,h2:p2`, IPv6 hosts in brackets).

use std::fmt;

use super::redact::unparsed;
use crate::error::{Error, Result};

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

/// One entry `text` of the host list of `url` (which error messages show redacted).
pub(super) fn parse_host_port(text: &str, url: &str) -> Result<HostPort> {
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

#[cfg(test)]
mod tests {
    use crate::url::{BackendKind, LockerUrl};

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
}

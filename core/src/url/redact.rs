//! Secrets kept out of messages: the redacted form a [`LockerUrl`] displays, what a message may
//! show of a URL that did not parse, and [`redact_secrets`] for free text.

use std::fmt;

use super::{BackendKind, LockerUrl};

impl LockerUrl {
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
pub(super) fn unparsed(url: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::redact_secrets;
    use crate::url::LockerUrl;

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
            assert_eq!(
                err.code(),
                crate::error::ErrorCode::InvalidArgument,
                "{bad}"
            );
            assert!(!err.message().contains("hunter2"), "{err}");
        }
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

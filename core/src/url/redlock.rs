//! [`LockerUrl::redlock_from`]: one `redlock://` URL made from the `redis://` URLs of a
//! deployment's masters.

use super::percent::percent_encode;
use super::{BackendKind, LockerUrl};
use crate::error::{Error, Result};

impl LockerUrl {
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
}

#[cfg(test)]
mod tests {
    use crate::url::{BackendKind, LockerUrl};

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
                crate::error::ErrorCode::InvalidArgument,
                "{bad:?}"
            );
        }
    }
}

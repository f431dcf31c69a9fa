//! Key names: every key of one lock shares the hash tag `{ENC}`, the encoded name, which is
//! never empty and never contains `{` or `}`, so a Cluster keeps them in one slot.

use crate::error::{Error, Result};
use crate::name::LockName;

pub const DEFAULT_PREFIX: &str = "fencelock";

#[derive(Debug, Clone)]
pub struct Keys {
    pub lock: String,
    pub fence: String,
    /// The origin mark of the lock's stored data (see `mutex_scripts::ACQUIRE`).
    pub origin: String,
    /// The tombstone: the owner ids of the last releases (see `mutex_scripts::RELEASE`).
    pub gone: String,
    /// A semaphore's or read-write lock's kind and entries, its leases, its registered waiters
    /// and the writers among them (see `semaphore_rwlock_scripts`).
    pub shared: String,
    pub leases: String,
    pub waiters: String,
    pub writers: String,
    pub channel: String,
}

impl Keys {
    /// The tombstone of one shared lease's release (see `semaphore_rwlock_scripts::SHARED_RELEASE`).
    pub fn gone_of(&self, owner_hex: &str) -> String {
        format!("{}:{owner_hex}", self.gone)
    }
}

pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.len() > 64 {
        return Err(Error::invalid("the Redis key prefix must be 1 to 64 bytes"));
    }
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "the Redis key prefix {prefix:?} contains {{ or }}: it would change which hash slot the keys land in"
        )));
    }
    if prefix.chars().any(|c| c.is_control() || c == ' ') {
        return Err(Error::invalid(
            "the Redis key prefix may not contain spaces or control characters",
        ));
    }
    Ok(())
}

pub fn keys(prefix: &str, name: &LockName) -> Keys {
    let base = format!("{prefix}:{{{}}}", name.encoded());
    Keys {
        fence: format!("{base}:fence"),
        origin: format!("{base}:origin"),
        gone: format!("{base}:gone"),
        shared: format!("{base}:shared"),
        leases: format!("{base}:leases"),
        waiters: format!("{base}:waiters"),
        writers: format!("{base}:writers"),
        channel: format!("{base}:released"),
        lock: base,
    }
}

/// The `SCAN MATCH` pattern of the lock keys whose names start with `name_prefix`: the key
/// prefix is escaped (it may hold glob characters), the encoded name prefix needs no escape
/// (it only holds `A-Z a-z 0-9 - _ ~ %`), and the closing brace keeps `:fence` and `:gone`
/// keys out.
pub fn scan_pattern(prefix: &str, name_prefix: &str) -> String {
    scan_pattern_with(prefix, name_prefix, "")
}

/// The `SCAN MATCH` pattern of the shared hashes (`<prefix>:{ENC}:shared`) whose names start
/// with `name_prefix`, escaped as [`scan_pattern`]'s.
pub fn shared_scan_pattern(prefix: &str, name_prefix: &str) -> String {
    scan_pattern_with(prefix, name_prefix, SHARED_SUFFIX)
}

const SHARED_SUFFIX: &str = ":shared";

fn scan_pattern_with(prefix: &str, name_prefix: &str, suffix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + name_prefix.len() * 3 + 6);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^' | '-') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(":{");
    pattern.push_str(&crate::name::encode(name_prefix));
    pattern.push_str("*}");
    pattern.push_str(suffix);
    pattern
}

/// The lock name of a lock key (`<prefix>:{ENC}`); `None` for any other key.
pub fn name_of_lock_key(prefix: &str, key: &str) -> Option<LockName> {
    let encoded = key
        .strip_prefix(prefix)?
        .strip_prefix(":{")?
        .strip_suffix('}')?;
    LockName::new(crate::name::decode(encoded)?).ok()
}

/// The lock name of a shared hash (`<prefix>:{ENC}:shared`); `None` for any other key.
pub fn name_of_shared_key(prefix: &str, key: &str) -> Option<LockName> {
    name_of_lock_key(prefix, key.strip_suffix(SHARED_SUFFIX)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_patterns_treat_the_prefixes_as_data() {
        assert_eq!(scan_pattern("fencelock", "batch/"), "fencelock:{batch%2F*}");
        assert_eq!(scan_pattern("app*[x]", ""), "app\\*\\[x\\]:{*}");
        assert_eq!(scan_pattern("fencelock", "a*?"), "fencelock:{a%2A%3F*}");
        let name = LockName::new("batch/1").unwrap();
        assert_eq!(
            name_of_lock_key("fencelock", &keys("fencelock", &name).lock),
            Some(name.clone())
        );
        assert_eq!(name_of_lock_key("fencelock", "fencelock:{job}:fence"), None);
        assert_eq!(name_of_lock_key("fencelock", "fencelock:{job}:gone"), None);
        // The tombstone's name is the lock key's plus `:gone`: the release script derives it
        // so when a caller (Redlock) passes only the lock key.
        let k = keys("fencelock", &name);
        assert_eq!(k.gone, format!("{}:gone", k.lock));
        assert_eq!(name_of_lock_key("fencelock", "other:{job}"), None);
    }

    #[test]
    fn shared_hashes_are_found_by_their_own_pattern() {
        let name = LockName::new("batch/1").unwrap();
        let k = keys("fencelock", &name);
        assert_eq!(
            shared_scan_pattern("fencelock", "batch/"),
            "fencelock:{batch%2F*}:shared"
        );
        assert_eq!(name_of_shared_key("fencelock", &k.shared), Some(name));
        assert_eq!(name_of_shared_key("fencelock", &k.lock), None);
        assert_eq!(name_of_lock_key("fencelock", &k.shared), None);
        let gone = k.gone_of("00ff");
        assert_eq!(name_of_shared_key("fencelock", &gone), None);
        assert_eq!(name_of_lock_key("fencelock", &gone), None);
        assert_eq!(gone, format!("{}:00ff", k.gone));
    }

    #[test]
    fn every_key_of_a_lock_shares_one_nonempty_hash_tag() {
        for name in ["job", "}x", "a{b}c", "{}", "é/.."] {
            let k = keys("fencelock", &LockName::new(name).unwrap());
            let tag = |key: &str| {
                let open = key.find('{').unwrap();
                let close = open + key[open..].find('}').unwrap();
                key[open + 1..close].to_string()
            };
            assert!(!tag(&k.lock).is_empty());
            assert_eq!(tag(&k.lock), tag(&k.fence));
            assert_eq!(tag(&k.lock), tag(&k.gone));
            assert_eq!(tag(&k.lock), tag(&k.channel));
            for shared in [&k.shared, &k.leases, &k.waiters, &k.writers] {
                assert_eq!(tag(&k.lock), tag(shared));
            }
            assert_eq!(tag(&k.lock), tag(&k.gone_of("00ff")));
            assert_eq!(k.lock.matches('{').count(), 1, "{}", k.lock);
        }
        assert_eq!(
            keys("fencelock", &LockName::new("job").unwrap()).lock,
            "fencelock:{job}"
        );
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(validate_prefix("app{1}").is_err());
        assert!(validate_prefix("").is_err());
        validate_prefix("app:locks").unwrap();
    }
}

//! Key names: every key of one lock shares the hash tag `{ENC}`, the encoded name, which is
//! never empty and never contains `{` or `}`, so a Cluster keeps them in one slot.

use crate::error::{Error, Result};
use crate::name::LockName;

pub const DEFAULT_PREFIX: &str = "fencelock";

#[derive(Debug, Clone)]
pub struct Keys {
    pub lock: String,
    pub fence: String,
    pub channel: String,
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
        return Err(Error::invalid("the Redis key prefix may not contain spaces or control characters"));
    }
    Ok(())
}

pub fn keys(prefix: &str, name: &LockName) -> Keys {
    let base = format!("{prefix}:{{{}}}", name.encoded());
    Keys { fence: format!("{base}:fence"), channel: format!("{base}:released"), lock: base }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(tag(&k.lock), tag(&k.channel));
            assert_eq!(k.lock.matches('{').count(), 1, "{}", k.lock);
        }
        assert_eq!(keys("fencelock", &LockName::new("job").unwrap()).lock, "fencelock:{job}");
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(validate_prefix("app{1}").is_err());
        assert!(validate_prefix("").is_err());
        validate_prefix("app:locks").unwrap();
    }
}

//! Lock names: validation and the one encoding shared by Redis keys and ZooKeeper paths.
//!
//! A name is data: at most 255 bytes of UTF-8, not empty, no NUL. SQL binds it as a
//! parameter; Redis and ZooKeeper use [`LockName::encoded`], a percent-encoding of the UTF-8
//! bytes with uppercase hex that keeps only `A-Z a-z 0-9 - _ ~`. Every other byte, including
//! `.`, `/`, `{`, `}` and `%`, is encoded, so an encoded name is always one safe path segment
//! (never `.` or `..`) and a Redis hash tag around it is never empty or split.
//!
//! Test vectors (also in docs/names.md, for Curator users naming the same lock):
//!
//! | name | encoded |
//! |---|---|
//! | `reports` | `reports` |
//! | `batch/2024.nightly` | `batch%2F2024%2Enightly` |
//! | `{user}` | `%7Buser%7D` |
//! | `..` | `%2E%2E` |
//! | `zürich 1` | `z%C3%BCrich%201` |

use std::fmt;

use crate::error::{Error, Result};

/// The longest name accepted, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 255;

/// A validated lock name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(String);

impl LockName {
    /// Validates `name`: non-empty, at most 255 bytes of UTF-8, no NUL.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::invalid("lock name is empty"));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(Error::invalid(format!(
                "lock name is {} bytes of UTF-8; the limit is {MAX_NAME_BYTES}",
                name.len()
            )));
        }
        if name.contains('\0') {
            return Err(Error::invalid("lock name contains a NUL character"));
        }
        Ok(LockName(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The percent-encoded form used in Redis keys and ZooKeeper path segments.
    pub fn encoded(&self) -> String {
        encode(&self.0)
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Checks a prefix of lock names (`Locker::list`): the name rules, except that it may be
/// empty (every name starts with it).
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(format!(
            "name prefix is {} bytes of UTF-8; no lock name is longer than {MAX_NAME_BYTES}",
            prefix.len()
        )));
    }
    if prefix.contains('\0') {
        return Err(Error::invalid("name prefix contains a NUL character"));
    }
    Ok(())
}

/// Percent-encodes every byte outside `A-Z a-z 0-9 - _ ~`, with uppercase hex.
pub fn encode(name: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(name.len());
    for &byte in name.as_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(HEX[(byte >> 4) as usize] as char);
            out.push(HEX[(byte & 0xF) as usize] as char);
        }
    }
    out
}

/// Reverses [`encode`]; `None` when `encoded` is not something [`encode`] produces.
pub fn decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = encoded.get(i + 1..i + 3)?;
                if hex.bytes().any(|b| b.is_ascii_lowercase()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~') => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_vectors() {
        let vectors = [
            ("reports", "reports"),
            ("batch/2024.nightly", "batch%2F2024%2Enightly"),
            ("{user}", "%7Buser%7D"),
            ("..", "%2E%2E"),
            ("zürich 1", "z%C3%BCrich%201"),
            ("a-b_c~d", "a-b_c~d"),
            ("100%", "100%25"),
        ];
        for (name, encoded) in vectors {
            assert_eq!(encode(name), encoded, "encoding {name:?}");
            assert_eq!(
                decode(encoded).as_deref(),
                Some(name),
                "decoding {encoded:?}"
            );
        }
    }

    #[test]
    fn encoded_names_are_one_safe_segment() {
        for name in [".", "..", "/", "a/../b", "}{", "%2F"] {
            let e = LockName::new(name).unwrap().encoded();
            assert!(!e.contains(['/', '.', '{', '}']), "{e}");
            assert_ne!(e, ".");
        }
    }

    #[test]
    fn validation() {
        assert_eq!(
            LockName::new("").unwrap_err().code(),
            crate::error::ErrorCode::InvalidArgument
        );
        assert!(LockName::new("x".repeat(255)).is_ok());
        let long = LockName::new("x".repeat(256)).unwrap_err();
        assert!(long.message().contains("256 bytes"), "{long}");
        // 128 two-byte characters are 256 bytes: the limit counts bytes, not characters.
        assert!(LockName::new("é".repeat(128)).is_err());
        assert!(LockName::new("a\0b").unwrap_err().message().contains("NUL"));
    }

    #[test]
    fn prefixes_follow_the_name_rules_but_may_be_empty() {
        validate_prefix("").unwrap();
        validate_prefix("batch/").unwrap();
        assert!(
            validate_prefix("a\0")
                .unwrap_err()
                .message()
                .contains("NUL")
        );
        assert_eq!(
            validate_prefix(&"x".repeat(256)).unwrap_err().code(),
            crate::error::ErrorCode::InvalidArgument
        );
        // Encoding is byte by byte, so the encoded prefix is a prefix of every encoded name.
        assert!(encode("zürich 1").starts_with(&encode("zür")));
    }

    #[test]
    fn decode_rejects_foreign_forms() {
        assert_eq!(decode("%2f"), None);
        assert_eq!(decode("a.b"), None);
        assert_eq!(decode("%C3"), None);
        assert_eq!(decode("%"), None);
    }
}

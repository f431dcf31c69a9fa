//! Owner ids: 128 random bits from the OS CSPRNG for every acquisition.

use std::fmt;

use crate::error::{Error, Result};

/// A new origin mark for a Redis lock's stored data (see `backend::redis::mutex_scripts::ACQUIRE`).
pub(crate) fn random_origin() -> Result<u64> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::internal(format!("the OS random source failed: {e}")))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Identifies one acquisition. Release and extend compare it on the server, so nobody
/// releases or extends a lock they do not hold.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerId([u8; 16]);

impl OwnerId {
    pub fn random() -> Result<Self> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::internal(format!("the OS random source failed: {e}")))?;
        Ok(OwnerId(bytes))
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    #[cfg(test)]
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        OwnerId(bytes)
    }

    /// 32 lowercase hex digits (the Redis lock hash's `owner`).
    pub fn to_hex(self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = String::with_capacity(32);
        for b in self.0 {
            hex.push(char::from(DIGITS[usize::from(b >> 4)]));
            hex.push(char::from(DIGITS[usize::from(b & 0xf)]));
        }
        hex
    }

    /// The UUID spelling (used in ZooKeeper node names, Curator's protected form).
    pub fn to_uuid_string(self) -> String {
        let h = self.to_hex();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({})", self.to_uuid_string())
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_uuid_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_differ_and_spell_as_uuids() {
        let a = OwnerId::random().unwrap();
        let b = OwnerId::random().unwrap();
        assert_ne!(a, b);
        let s = a.to_uuid_string();
        assert_eq!(s.len(), 36);
        assert_eq!(s.matches('-').count(), 4);
    }

    #[test]
    fn hex_is_every_byte_in_two_lowercase_digits() {
        let id = OwnerId::from_bytes([
            0x00, 0x01, 0x0f, 0x10, 0xab, 0xcd, 0xef, 0xff, 0x7f, 0x80, 0x09, 0x90, 0x5a, 0xa5,
            0x3c, 0xc3,
        ]);
        assert_eq!(
            id.to_hex(),
            "00010f10abcdefff7f800990 5aa53cc3".replace(' ', "")
        );
        assert_eq!(id.to_uuid_string(), "00010f10-abcd-efff-7f80-09905aa53cc3");
    }
}

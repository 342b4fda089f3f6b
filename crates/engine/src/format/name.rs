//! File names, and the keyed hash that positions them in directories.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

use crate::error::{Error, Result};

/// Longest name, in bytes.
pub const NAME_MAX: usize = 255;

/// A validated name of a directory entry: 1 to 255 bytes, no `/`, no NUL,
/// and neither `.` nor `..`.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct FileName(Vec<u8>);

impl FileName {
    /// Validates a name.
    ///
    /// # Errors
    /// `NameTooLong` beyond 255 bytes; `Invalid` when empty, `.`, `..`, or
    /// containing `/` or NUL.
    pub fn new(name: &[u8]) -> Result<FileName> {
        if name.len() > NAME_MAX {
            return Err(Error::NameTooLong);
        }
        if name.is_empty() {
            return Err(Error::Invalid("empty name"));
        }
        if name == b"." || name == b".." {
            return Err(Error::Invalid("'.' and '..' cannot be created, removed or renamed"));
        }
        if name.iter().any(|&b| b == b'/' || b == 0) {
            return Err(Error::Invalid("name contains '/' or NUL"));
        }
        Ok(FileName(name.to_vec()))
    }

    /// The bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Position of the first slot a name may take in a hash-ordered tree
/// (directories, xattrs): 47 bits of a keyed SipHash, shifted to leave 16
/// bits for collisions. Positions are at least 65536 and below 2^63, so they
/// fit a signed directory offset and never meet the offsets of `.` and `..`.
#[must_use]
pub fn hash_position(key: &[u8; 16], name: &[u8]) -> u64 {
    let mut k0 = [0u8; 8];
    let mut k1 = [0u8; 8];
    k0.copy_from_slice(&key[..8]);
    k1.copy_from_slice(&key[8..]);
    let mut h = SipHasher13::new_with_keys(u64::from_le_bytes(k0), u64::from_le_bytes(k1));
    h.write(name);
    ((h.finish() >> 17) | 1) << 16
}

/// Slots per hash value: names whose hashes collide take consecutive slots.
pub const COLLISION_SLOTS: u64 = 1 << 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(FileName::new(b"ok").is_ok());
        assert!(matches!(FileName::new(&[b'a'; 256]), Err(Error::NameTooLong)));
        assert!(FileName::new(&[b'a'; 255]).is_ok());
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
            assert!(matches!(FileName::new(bad), Err(Error::Invalid(_))), "{bad:?}");
        }
        assert!(FileName::new(b"...").is_ok());
    }

    #[test]
    fn positions_leave_room_for_dot_entries_and_signed_offsets() {
        let key = [7u8; 16];
        for n in 0..10_000u32 {
            let p = hash_position(&key, &n.to_le_bytes());
            assert!((COLLISION_SLOTS..(1 << 63)).contains(&p) && p.is_multiple_of(COLLISION_SLOTS));
        }
        assert_ne!(hash_position(&key, b"a"), hash_position(&[8u8; 16], b"a"));
    }
}

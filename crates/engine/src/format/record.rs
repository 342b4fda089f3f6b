//! What the two whole-block records with a magic of their own (the
//! superblock, FORMAT.md 2, and a checkpoint slot, FORMAT.md 4) share:
//! `u32 magic`, `u32 crc32c` of the whole block (taken with the field
//! zeroed), `u16 major`, `u16 minor`, then the record's own fields, and zeros
//! to the end of the block.

use super::checksum;
use super::codec::{DecodeResult, Reader, bad};
use super::superblock::{FORMAT_MAJOR, FORMAT_MINOR};
use crate::types::BLOCK_SIZE;

/// Where the checksum sits.
const CRC_OFFSET: usize = 4;

/// Pads an encoded record to a block and stores its checksum.
#[must_use]
pub fn seal(mut block: Vec<u8>) -> Vec<u8> {
    block.resize(BLOCK_SIZE, 0);
    checksum::seal(&mut block, CRC_OFFSET);
    block
}

/// Checks a record's magic, checksum and major version, in that order;
/// returns a reader at its first own field, and the minor version.
/// `missing` names what a wrong magic means ("no DualFS superblock").
///
/// # Errors
/// A wrong magic (the message says "bad magic"), a checksum mismatch, or a
/// major version this library does not read.
pub fn open<'a>(block: &'a [u8], magic: u32, missing: &str) -> DecodeResult<(Reader<'a>, u16)> {
    let mut r = Reader::new(block);
    if r.u32()? != magic {
        bad!("{missing} (bad magic)");
    }
    if block.len() < BLOCK_SIZE || !checksum::verify(&block[..BLOCK_SIZE], CRC_OFFSET) {
        bad!("checksum mismatch (torn or damaged)");
    }
    r.u32()?;
    let major = r.u16()?;
    let minor = r.u16()?;
    if major != FORMAT_MAJOR {
        bad!("format version {major}.{minor} is not supported (this is {FORMAT_MAJOR}.{FORMAT_MINOR})");
    }
    Ok((r, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::codec::Writer;

    fn record(magic: u32, major: u16) -> Vec<u8> {
        let mut w = Writer::with_capacity(BLOCK_SIZE);
        w.u32(magic).u32(0).u16(major).u16(3).u64(42);
        seal(w.into_inner())
    }

    #[test]
    fn a_sealed_record_opens_past_its_version() {
        let block = record(7, FORMAT_MAJOR);
        let (mut r, minor) = open(&block, 7, "nothing").unwrap();
        assert_eq!((minor, r.u64().unwrap()), (3, 42));
    }

    #[test]
    fn magic_checksum_and_version_are_checked_in_that_order() {
        let e = open(&record(7, FORMAT_MAJOR + 1), 8, "no record").unwrap_err();
        assert_eq!(e.0, "no record (bad magic)");
        let mut torn = record(7, FORMAT_MAJOR + 1);
        torn[100] ^= 1;
        assert!(open(&torn, 7, "-").unwrap_err().0.contains("checksum"));
        assert!(open(&record(7, FORMAT_MAJOR + 1), 7, "-").unwrap_err().0.contains("not supported"));
        assert!(open(&record(7, FORMAT_MAJOR)[..100], 7, "-").is_err());
    }
}

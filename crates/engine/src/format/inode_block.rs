//! Inode blocks: as many inode records as fit, with a table in front.
//!
//! Payload: `u16` count, then per record `(u64 ino, u16 offset, u16 len)`,
//! then the records. Offsets are from the start of the payload.

use super::block::PAYLOAD_LEN;
use super::codec::{DecodeResult, Reader, Writer, bad, bounded};
use super::inode::{FIXED_LEN, InodeRecord};
use crate::types::InodeNo;

const TABLE_ENTRY_LEN: usize = 12;

/// Largest record an inode block can take.
pub const MAX_RECORD_LEN: usize = PAYLOAD_LEN - 2 - TABLE_ENTRY_LEN;

/// Payload bytes used by `records` records totalling `bytes` encoded bytes.
#[must_use]
pub fn packed_len(records: usize, bytes: usize) -> usize {
    2 + records * TABLE_ENTRY_LEN + bytes
}

/// Whether one more record of `len` bytes fits a block holding `records`
/// records of `bytes` bytes in total.
#[must_use]
pub fn fits(records: usize, bytes: usize, len: usize) -> bool {
    packed_len(records + 1, bytes + len) <= PAYLOAD_LEN
}

/// Encodes records into an inode-block payload.
///
/// # Panics
/// If they do not fit: the packer checks [`fits`] first.
#[must_use]
pub fn encode(records: &[&InodeRecord]) -> Vec<u8> {
    let total: usize = records.iter().map(|r| r.encoded_len()).sum();
    assert!(packed_len(records.len(), total) <= PAYLOAD_LEN, "inode block overfull");
    let mut w = Writer::with_capacity(PAYLOAD_LEN);
    w.u16(records.len() as u16);
    let mut offset = 2 + records.len() * TABLE_ENTRY_LEN;
    for r in records {
        let len = r.encoded_len();
        w.u64(r.ino.0).u16(offset as u16).u16(len as u16);
        offset += len;
    }
    for r in records {
        r.encode(&mut w);
    }
    w.into_inner()
}

/// The inode numbers in a payload, with each record's byte range.
///
/// # Errors
/// A table that does not describe disjoint records inside the payload.
pub fn table(payload: &[u8]) -> DecodeResult<Vec<(InodeNo, std::ops::Range<usize>)>> {
    let mut r = Reader::new(payload);
    let n = r.u16()?;
    let n = bounded(u64::from(n), "inode record", PAYLOAD_LEN / (TABLE_ENTRY_LEN + FIXED_LEN))?;
    let mut out = Vec::with_capacity(n);
    let mut next = 2 + n * TABLE_ENTRY_LEN;
    for _ in 0..n {
        let ino = InodeNo(r.u64()?);
        let offset = usize::from(r.u16()?);
        let len = usize::from(r.u16()?);
        if offset != next || len < FIXED_LEN || offset + len > payload.len() {
            bad!("record of inode {ino} at {offset}+{len} does not follow the previous one");
        }
        next = offset + len;
        out.push((ino, offset..offset + len));
    }
    if next != payload.len() {
        bad!("{} bytes after the last record", payload.len() - next.min(payload.len()));
    }
    Ok(out)
}

/// Decodes the record of `ino`, if the block holds one.
///
/// # Errors
/// A bad table, or a record that does not decode or names another inode.
pub fn find(payload: &[u8], ino: InodeNo) -> DecodeResult<Option<InodeRecord>> {
    for (i, range) in table(payload)? {
        if i == ino {
            let rec = InodeRecord::decode(&payload[range])?;
            if rec.ino != ino {
                bad!("table names inode {ino} but the record is of inode {}", rec.ino);
            }
            return Ok(Some(rec));
        }
    }
    Ok(None)
}

/// Decodes every record.
///
/// # Errors
/// As [`find`].
pub fn decode_all(payload: &[u8]) -> DecodeResult<Vec<InodeRecord>> {
    table(payload)?
        .into_iter()
        .map(|(ino, range)| {
            let rec = InodeRecord::decode(&payload[range])?;
            if rec.ino != ino {
                bad!("table names inode {ino} but the record is of inode {}", rec.ino);
            }
            Ok(rec)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::inode::tests::sample;
    use super::*;

    #[test]
    fn round_trip_and_find() {
        let recs: Vec<InodeRecord> = (1..=10).map(sample).collect();
        let refs: Vec<&InodeRecord> = recs.iter().collect();
        let p = encode(&refs);
        assert_eq!(decode_all(&p).unwrap(), recs);
        assert_eq!(find(&p, InodeNo(4)).unwrap(), Some(sample(4)));
        assert_eq!(find(&p, InodeNo(40)).unwrap(), None);
    }

    #[test]
    fn packing_fills_but_never_overflows() {
        let rec = sample(1);
        let len = rec.encoded_len();
        let mut n = 0;
        while fits(n, n * len, len) {
            n += 1;
        }
        let recs: Vec<InodeRecord> = (1..=n as u64).map(sample).collect();
        let refs: Vec<&InodeRecord> = recs.iter().collect();
        assert!(encode(&refs).len() <= PAYLOAD_LEN);
    }

    #[test]
    fn truncation_is_an_error() {
        let recs: Vec<InodeRecord> = (1..=3).map(sample).collect();
        let refs: Vec<&InodeRecord> = recs.iter().collect();
        let p = encode(&refs);
        for n in 0..p.len() {
            assert!(decode_all(&p[..n]).is_err(), "prefix {n}");
        }
    }
}

//! Bounds-checked little-endian reading and writing.
//!
//! Decoders never index a slice directly: every read goes through [`Reader`],
//! which reports running off the end as a [`DecodeError`] instead of panicking.

use std::fmt;

use crate::types::Timestamp;

/// Why a structure failed to decode. Callers attach the structure's name and
/// block address when they turn it into an [`crate::Error`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Shorthand for decoder results.
pub type DecodeResult<T> = Result<T, DecodeError>;

/// Returns a [`DecodeError`] built from a format string.
macro_rules! bad {
    ($($arg:tt)*) => {
        return Err($crate::format::codec::DecodeError(format!($($arg)*)))
    };
}
pub(crate) use bad;

/// A cursor over bytes being decoded.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    #[must_use]
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Current offset from the start.
    #[must_use]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Takes the next `n` bytes.
    ///
    /// # Errors
    /// Fewer than `n` bytes remain.
    pub fn bytes(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if n > self.remaining() {
            bad!("needs {n} bytes at offset {} but only {} remain", self.pos, self.remaining());
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Takes exactly `N` bytes as an array.
    ///
    /// # Errors
    /// Fewer than `N` bytes remain.
    pub fn array<const N: usize>(&mut self) -> DecodeResult<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    /// # Errors
    /// Out of bytes.
    pub fn u8(&mut self) -> DecodeResult<u8> {
        Ok(self.array::<1>()?[0])
    }
    /// # Errors
    /// Out of bytes.
    pub fn u16(&mut self) -> DecodeResult<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    /// # Errors
    /// Out of bytes.
    pub fn u32(&mut self) -> DecodeResult<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// # Errors
    /// Out of bytes.
    pub fn u64(&mut self) -> DecodeResult<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// # Errors
    /// Out of bytes.
    pub fn i64(&mut self) -> DecodeResult<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A timestamp: `i64` seconds then `u32` nanoseconds below one second.
    ///
    /// # Errors
    /// Out of bytes, or nanoseconds out of range.
    pub fn timestamp(&mut self) -> DecodeResult<Timestamp> {
        let sec = self.i64()?;
        let nsec = self.u32()?;
        if nsec >= 1_000_000_000 {
            bad!("timestamp nanoseconds {nsec} out of range");
        }
        Ok(Timestamp { sec, nsec })
    }

    /// Checks that the next `n` bytes are zero (reserved fields).
    ///
    /// # Errors
    /// Out of bytes, or a reserved byte is set.
    pub fn reserved(&mut self, n: usize) -> DecodeResult<()> {
        let at = self.pos;
        if self.bytes(n)?.iter().any(|&b| b != 0) {
            bad!("reserved bytes at offset {at} are not zero");
        }
        Ok(())
    }
}

/// A count that must not exceed `max`, so that a corrupt count cannot make a
/// decoder allocate or loop without bound.
///
/// # Errors
/// The count exceeds `max`.
pub fn bounded(value: u64, what: &str, max: usize) -> DecodeResult<usize> {
    match usize::try_from(value) {
        Ok(n) if n <= max => Ok(n),
        _ => bad!("{what} count {value} exceeds the limit of {max}"),
    }
}

/// Appends little-endian fields to a byte vector.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    #[must_use]
    pub fn new() -> Writer {
        Writer { buf: Vec::new() }
    }

    /// An empty writer with room for `n` bytes.
    #[must_use]
    pub fn with_capacity(n: usize) -> Writer {
        Writer { buf: Vec::with_capacity(n) }
    }

    /// Bytes written so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written.
    #[must_use]
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }
    /// Appends `n` zero bytes (reserved fields).
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.buf.resize(self.buf.len() + n, 0);
        self
    }
    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// Appends a little-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    /// Appends a little-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    /// Appends a little-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    /// Appends a little-endian `i64`.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    /// Appends a timestamp (12 bytes).
    pub fn timestamp(&mut self, t: Timestamp) -> &mut Self {
        self.i64(t.sec).u32(t.nsec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_reports_running_off_the_end() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16().unwrap(), 0x0201);
        assert!(r.u16().is_err());
        assert_eq!(r.u8().unwrap(), 3);
        assert!(r.u8().is_err());
    }

    #[test]
    fn reserved_bytes_must_be_zero() {
        assert!(Reader::new(&[0, 0]).reserved(2).is_ok());
        assert!(Reader::new(&[0, 1]).reserved(2).is_err());
    }

    #[test]
    fn round_trip_of_every_width() {
        let mut w = Writer::new();
        w.u8(1).u16(2).u32(3).u64(4).i64(-5).timestamp(Timestamp { sec: -6, nsec: 7 });
        let b = w.into_inner();
        let mut r = Reader::new(&b);
        assert_eq!(r.u8().unwrap(), 1);
        assert_eq!(r.u16().unwrap(), 2);
        assert_eq!(r.u32().unwrap(), 3);
        assert_eq!(r.u64().unwrap(), 4);
        assert_eq!(r.i64().unwrap(), -5);
        assert_eq!(r.timestamp().unwrap(), Timestamp { sec: -6, nsec: 7 });
        assert_eq!(r.remaining(), 0);
    }
}

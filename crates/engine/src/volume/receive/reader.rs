//! Reading a send stream's frames: each record decoded (checksum first),
//! counted, refused with the reason when malformed or cut short.

use std::io::Read;

use crate::error::{Error, Result};
use crate::format::stream::{self, FRAME_CRC_LEN, FRAME_HEAD_LEN, PRELUDE_LEN, Record, StreamCounts};

/// Reads records from a stream, counting them, refusing what is malformed.
pub(super) struct StreamReader<'a> {
    input: &'a mut dyn Read,
    /// What was read so far, as the end record counts it.
    pub(super) counts: StreamCounts,
    /// The stream's version, from its prelude.
    version: u32,
}

impl<'a> StreamReader<'a> {
    pub(super) fn new(input: &'a mut dyn Read) -> Self {
        StreamReader { input, counts: StreamCounts::default(), version: stream::VERSION }
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                Error::Stream(format!("the stream ends inside {what}: it was cut short (no end record)"))
            }
            _ => Error::Stream(format!("reading the stream: {e}")),
        })
    }

    pub(super) fn prelude(&mut self) -> Result<()> {
        let mut p = [0u8; PRELUDE_LEN];
        self.read_exact(&mut p, "its prelude")?;
        self.version = stream::check_prelude(&p).map_err(|e| Error::Stream(e.0))?;
        Ok(())
    }

    pub(super) fn next(&mut self) -> Result<Record> {
        let mut head = [0u8; FRAME_HEAD_LEN];
        self.read_exact(&mut head, "a record head")?;
        let len = stream::frame_len(&head).map_err(|e| self.bad(&e.0))?;
        let mut rest = vec![0u8; len + FRAME_CRC_LEN];
        self.read_exact(&mut rest, "a record")?;
        let rec = stream::decode(self.version, &head, &rest).map_err(|e| self.bad(&e.0))?;
        if !matches!(rec, Record::End(_)) {
            self.counts.records += 1;
            match &rec {
                Record::Inode(_) => self.counts.inodes += 1,
                Record::Gone(_) => self.counts.gone += 1,
                Record::Write { data, .. } => self.counts.data_bytes += data.len() as u64,
                _ => {}
            }
        }
        Ok(rec)
    }

    /// An error about the next record to be counted.
    pub(super) fn bad(&self, why: &str) -> Error {
        Error::Stream(format!("record {}: {why}", self.counts.records + 1))
    }

    /// An error about the record read last, named by its number.
    pub(super) fn at_last(&self, e: Error) -> Error {
        match e {
            Error::Stream(why) => Error::Stream(format!("record {}: {why}", self.counts.records)),
            e => e,
        }
    }

    /// After the end record: nothing may follow.
    pub(super) fn expect_eof(&mut self) -> Result<()> {
        let mut b = [0u8; 1];
        match self.input.read(&mut b) {
            Ok(0) => Ok(()),
            Ok(_) => Err(Error::Stream("bytes follow the end record".into())),
            Err(e) => Err(Error::Stream(format!("reading the stream: {e}"))),
        }
    }
}

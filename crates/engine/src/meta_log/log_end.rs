//! Where roll-forward stopped and why: the check a candidate partial
//! segment failed ([`Stop`]) at each place the log could have gone on
//! ([`LogEnd`]). Recovery, fsck, repair and `dualfs checkpoints` all say it.

use std::fmt;

use crate::format::codec::DecodeError;
use crate::types::{SegmentNo, Seq};

/// Why roll-forward took no partial segment at a place the log could go on:
/// one variant per check, in the order [`Log::read_descriptor`] and the
/// partial-segment read run them.
///
/// [`Stop::is_end_of_log`] tells the stops that mean "nothing of this lap of
/// the log was written here" (the clean end) from those where something was
/// written and failed a check (a torn tail, or damage). A new check gets a
/// new variant and a line in each `match` below; callers outside the crate
/// must allow for variants they do not know.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// The place is at the end of its segment: the segment is full.
    PastSegmentEnd {
        /// The segment.
        segment: SegmentNo,
        /// The offset, at or past its last block.
        offset: u32,
    },
    /// No descriptor starts at `block`: never written, or holding something
    /// else (no magic, another volume, another kind or address).
    Unwritten {
        /// Where the descriptor was expected.
        block: u64,
        /// What the block decoded as instead.
        detail: DecodeError,
    },
    /// The block carries the magic but fails its checksum: it was being
    /// written when the power failed.
    Torn {
        /// The torn block.
        block: u64,
        /// The failed check.
        detail: DecodeError,
    },
    /// An intact descriptor of another sequence number: an older lap of the log.
    WrongSequence {
        /// The descriptor's block.
        block: u64,
        /// Its sequence number.
        found: Seq,
        /// The one the log needs next (none when any would do).
        expected: Option<Seq>,
    },
    /// The block is a later block of some descriptor, not its first.
    MidDescriptor {
        /// The block.
        block: u64,
    },
    /// The descriptor claims more blocks than its segment has left, or
    /// names a next segment beyond the log.
    Overrun {
        /// The descriptor's first block.
        block: u64,
    },
    /// A later block of the descriptor belongs to another partial segment.
    ForeignDescriptorBlock {
        /// The foreign block.
        block: u64,
    },
    /// A later descriptor block, or the descriptor as a whole, does not
    /// decode (checksum, encoding).
    BadDescriptor {
        /// The block concerned.
        block: u64,
        /// The failed check.
        detail: DecodeError,
    },
    /// The descriptor was written for another segment or offset.
    Misplaced {
        /// The descriptor's first block.
        block: u64,
    },
    /// The descriptor does not name the previous descriptor's checksum: it
    /// does not continue this log.
    BrokenChain {
        /// The descriptor's first block.
        block: u64,
    },
    /// A body block of the partial segment does not decode (checksum,
    /// magic, address).
    BadBody {
        /// The body block.
        block: u64,
        /// The failed check.
        detail: DecodeError,
    },
    /// A body block is intact but not the one the descriptor lists: stale
    /// from an older write, or misplaced.
    StaleBody {
        /// The body block.
        block: u64,
    },
    /// The body blocks' checksums do not give the descriptor's body checksum.
    BodyChecksum {
        /// The descriptor's first block.
        block: u64,
    },
    /// The partial segments of a commit group stopped before its last one,
    /// for the reason inside: the whole group is dropped.
    GroupCutShort(Box<Stop>),
    /// The log after the checkpoint was not read (`-o norecovery`): what
    /// lies at `block` and after is neither applied nor judged.
    NotRead {
        /// Where the next partial segment would have been.
        block: u64,
    },
}

impl Stop {
    /// Whether the stop means that nothing of this lap of the log was
    /// written at the place (the log's clean end), rather than that
    /// something written there failed a check.
    #[must_use]
    pub fn is_end_of_log(&self) -> bool {
        match self {
            Stop::PastSegmentEnd { .. }
            | Stop::Unwritten { .. }
            | Stop::WrongSequence { .. }
            | Stop::MidDescriptor { .. }
            | Stop::NotRead { .. } => true,
            Stop::Torn { .. }
            | Stop::Overrun { .. }
            | Stop::ForeignDescriptorBlock { .. }
            | Stop::BadDescriptor { .. }
            | Stop::Misplaced { .. }
            | Stop::BrokenChain { .. }
            | Stop::BadBody { .. }
            | Stop::StaleBody { .. }
            | Stop::BodyChecksum { .. }
            | Stop::GroupCutShort(_) => false,
        }
    }

    /// A short name of the variant, for JSON and scripts.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Stop::PastSegmentEnd { .. } => "past-segment-end",
            Stop::Unwritten { .. } => "unwritten",
            Stop::Torn { .. } => "torn",
            Stop::WrongSequence { .. } => "wrong-sequence",
            Stop::MidDescriptor { .. } => "mid-descriptor",
            Stop::Overrun { .. } => "overrun",
            Stop::ForeignDescriptorBlock { .. } => "foreign-descriptor-block",
            Stop::BadDescriptor { .. } => "bad-descriptor",
            Stop::Misplaced { .. } => "misplaced",
            Stop::BrokenChain { .. } => "broken-chain",
            Stop::BadBody { .. } => "bad-body",
            Stop::StaleBody { .. } => "stale-body",
            Stop::BodyChecksum { .. } => "body-checksum",
            Stop::GroupCutShort(_) => "group-cut-short",
            Stop::NotRead { .. } => "not-read",
        }
    }

    /// The meta-data block the stop concerns, if it names one.
    #[must_use]
    pub fn block(&self) -> Option<u64> {
        match self {
            Stop::PastSegmentEnd { .. } => None,
            Stop::Unwritten { block, .. }
            | Stop::Torn { block, .. }
            | Stop::WrongSequence { block, .. }
            | Stop::MidDescriptor { block }
            | Stop::Overrun { block }
            | Stop::ForeignDescriptorBlock { block }
            | Stop::BadDescriptor { block, .. }
            | Stop::Misplaced { block }
            | Stop::BrokenChain { block }
            | Stop::BadBody { block, .. }
            | Stop::StaleBody { block }
            | Stop::BodyChecksum { block }
            | Stop::NotRead { block } => Some(*block),
            Stop::GroupCutShort(why) => why.block(),
        }
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::PastSegmentEnd { segment, offset } => {
                write!(f, "segment {} is full (offset {offset})", segment.0)
            }
            Stop::Unwritten { block, detail } => write!(f, "no partial segment at block {block}: {detail}"),
            Stop::Torn { block, detail } => write!(f, "torn descriptor at block {block}: {detail}"),
            Stop::WrongSequence { block, found, expected: Some(e) } => {
                write!(f, "block {block} holds sequence {} where {} was expected", found.0, e.0)
            }
            Stop::WrongSequence { block, found, expected: None } => {
                write!(f, "block {block} holds sequence {}", found.0)
            }
            Stop::MidDescriptor { block } => {
                write!(f, "block {block} is the middle of a descriptor, not its start")
            }
            Stop::Overrun { block } => write!(f, "descriptor at block {block} overruns its segment"),
            Stop::ForeignDescriptorBlock { block } => {
                write!(f, "descriptor block {block} belongs to another partial segment")
            }
            Stop::BadDescriptor { block, detail } => write!(f, "descriptor block {block} is bad: {detail}"),
            Stop::Misplaced { block } => write!(f, "descriptor at block {block} was written for another place"),
            Stop::BrokenChain { block } => {
                write!(f, "descriptor at block {block} does not continue the log (checksum chain)")
            }
            Stop::BadBody { block, detail } => write!(f, "body block {block} is bad: {detail}"),
            Stop::StaleBody { block } => {
                write!(f, "body block {block} does not match its descriptor (stale or misplaced)")
            }
            Stop::BodyChecksum { block } => write!(f, "partial segment at block {block}: body checksum mismatch"),
            Stop::GroupCutShort(why) => write!(f, "a commit group was cut short: {why}"),
            Stop::NotRead { block } => write!(f, "the log from block {block} on was not read (norecovery)"),
        }
    }
}

/// Where and why roll-forward stopped: what it found at each of the two
/// places the next partial segment could have been.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEnd {
    /// Why the partial segment expected where the log left off was not
    /// taken. This decides whether the end is clean.
    pub reason: Stop,
    /// Why the candidate at the start of the next segment was not taken
    /// either, when it was looked at.
    pub next_segment: Option<Stop>,
}

impl LogEnd {
    /// Whether no partial segment followed the last one (nothing torn, nothing
    /// failed a check, no commit group cut short).
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.reason.is_end_of_log()
    }
}

impl fmt::Display for LogEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_clean() { write!(f, "clean: {}", self.reason) } else { write!(f, "{}", self.reason) }
    }
}

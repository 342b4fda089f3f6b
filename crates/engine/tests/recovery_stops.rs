//! Every reason roll-forward gives for stopping ([`Stop`]), each shown by a
//! log that ends for that reason: a few commits after a checkpoint, then the
//! last partial segment (or the place after it) broken the one way a variant
//! names, resealed where the variant needs an otherwise intact block.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, MemoryDevice};
use dualfs_engine::format::block::{self, BlockHeader, BlockKind, HEADER_LEN};
use dualfs_engine::format::checkpoint::LogPosition;
use dualfs_engine::format::descriptor::{Change, Descriptor, PS_GROUP_END};
use dualfs_engine::format::superblock::Superblock;
use dualfs_engine::meta_log::Log;
use dualfs_engine::meta_log::recovery::{LogEnd, RecoveryReport, Stop};
use dualfs_engine::types::{BLOCK_SIZE, InodeNo, MetaBlock, NodeId, SegmentNo, Seq, Timestamp};
use dualfs_engine::volume::{Creds, MkfsOptions, MountOptions};

const SEGMENT_BLOCKS: u32 = 128;

/// A volume whose log holds partial segments after its checkpoint.
struct Rig {
    meta: Arc<MemoryDevice>,
    data: Arc<MemoryDevice>,
    sb: Superblock,
    /// Where the first partial segment after the checkpoint went.
    first: LogPosition,
}

/// One partial segment found in the log.
struct Ps {
    start: u64,
    desc: Descriptor,
    header: BlockHeader,
    desc_blocks: usize,
}

impl Rig {
    /// Formats, then makes, for each `n` of `commits`, `n` small files and
    /// commits them; the volume is dropped unclosed, as by a crash.
    fn new(commits: &[usize]) -> Rig {
        let (meta, data) = (Arc::new(MemoryDevice::new(8192)), Arc::new(MemoryDevice::new(16384)));
        let opts = MkfsOptions { segment_blocks: SEGMENT_BLOCKS, group_blocks: 8192, ..MkfsOptions::default() };
        Volume::format(meta.clone(), data.clone(), &opts).unwrap();
        let options = MountOptions { commit_interval: Duration::ZERO, ..MountOptions::default() };
        let vol =
            Volume::open_with_clock(meta.clone(), data.clone(), options, Arc::new(|| Timestamp::new(1_700_000_000, 0)))
                .unwrap();
        let (first, sb) = vol.with_fs(|fs| (fs.log.head(), fs.log.superblock().clone()));
        for (c, &n) in commits.iter().enumerate() {
            for i in 0..n {
                let f = vol.create(InodeNo::ROOT, format!("f{c}.{i}").as_bytes(), 0o644, Creds::ROOT).unwrap().ino;
                vol.write(f, 0, &[i as u8; 100]).unwrap();
            }
            vol.commit().unwrap();
        }
        drop(vol);
        Rig { meta, data, sb, first }
    }

    fn block_of(&self, seg: SegmentNo, off: u32) -> u64 {
        self.sb.first_segment_block + u64::from(seg.0) * u64::from(self.sb.segment_blocks) + u64::from(off)
    }

    fn read(&self, b: u64) -> Vec<u8> {
        let mut buf = vec![0u8; BLOCK_SIZE];
        self.meta.read_blocks(b, &mut buf).unwrap();
        buf
    }

    fn write(&self, b: u64, block: &[u8]) {
        self.meta.write_blocks(b, block).unwrap();
    }

    /// The partial segment of sequence `seq` at `seg`/`off`, if one is there.
    fn ps_at(&self, seg: SegmentNo, off: u32, seq: Seq) -> Option<Ps> {
        if off >= self.sb.segment_blocks {
            return None;
        }
        let start = self.block_of(seg, off);
        let first = self.read(start);
        let (header, payload) =
            block::open_block_of_kind(&first, MetaBlock(start), self.sb.volume_id(), BlockKind::Descriptor).ok()?;
        if header.seq != seq || header.aux != 0 {
            return None;
        }
        let (_, n) = Descriptor::peek(payload).ok()?;
        let raw: Vec<Vec<u8>> = (0..n as u64).map(|i| self.read(start + i)).collect();
        let payloads: Vec<&[u8]> = raw
            .iter()
            .enumerate()
            .map(|(i, r)| block::open_block(r, MetaBlock(start + i as u64), self.sb.volume_id()).map(|(_, p)| p))
            .collect::<Result<_, _>>()
            .ok()?;
        let (desc, _) = Descriptor::decode(&payloads, self.sb.segment_blocks as usize).ok()?;
        Some(Ps { start, desc, header, desc_blocks: n })
    }

    /// Every partial segment after the checkpoint, in log order.
    fn partial_segments(&self) -> Vec<Ps> {
        let mut out: Vec<Ps> = Vec::new();
        let (mut seg, mut off, mut next, mut seq) =
            (self.first.segment, self.first.offset, self.first.next_segment, self.first.seq);
        while let Some(ps) = self.ps_at(seg, off, seq).or_else(|| self.ps_at(next, 0, seq)) {
            (seg, off, next, seq) =
                (ps.desc.segment, ps.desc.offset + ps.desc.total_blocks() as u32, ps.desc.next_segment, seq.next());
            out.push(ps);
        }
        assert!(!out.is_empty(), "the rig wrote no partial segment after its checkpoint");
        out
    }

    fn last(&self) -> Ps {
        self.partial_segments().pop().unwrap()
    }

    /// Writes `desc` as the descriptor at `at.start`, sealed like the original.
    fn rewrite(&self, at: &Ps, desc: &Descriptor) {
        let (payloads, _) = desc.encode();
        for (i, p) in payloads.iter().enumerate() {
            let h = BlockHeader {
                aux: i as u16,
                payload_len: p.len() as u32,
                address: MetaBlock(at.start + i as u64),
                seq: desc.seq,
                ..at.header
            };
            self.write(at.start + i as u64, &block::seal_block(&h, p));
        }
    }

    /// Reseals block `b` with its header changed by `change`.
    fn reseal(&self, b: u64, change: impl FnOnce(&mut BlockHeader)) {
        let raw = self.read(b);
        let (mut h, payload) = block::open_block(&raw, MetaBlock(b), self.sb.volume_id()).unwrap();
        let payload = payload.to_vec();
        change(&mut h);
        self.write(b, &block::seal_block(&h, &payload));
    }

    /// Flips a payload byte of block `b`, leaving its stored checksum as it was.
    fn flip(&self, b: u64) {
        let mut raw = self.read(b);
        raw[HEADER_LEN] ^= 0x55;
        self.write(b, &raw);
    }

    fn recover(&self) -> RecoveryReport {
        Log::open(self.meta.clone(), self.data.clone()).unwrap().1.recovery
    }

    fn end(&self) -> LogEnd {
        self.recover().end
    }
}

/// A descriptor long enough to take more than one block.
fn long(desc: &Descriptor) -> Descriptor {
    let mut d = desc.clone();
    d.changes.extend((0..600).map(|i| Change::NodeFree(NodeId(1_000_000 + i))));
    assert!(d.desc_blocks() >= 2);
    d
}

#[test]
fn nothing_written_where_the_log_goes_on_is_its_clean_end() {
    let r = Rig::new(&[1, 1, 1]);
    let n = r.partial_segments().len() as u64;
    let rec = r.recover();
    assert!(matches!(rec.end.reason, Stop::Unwritten { .. }), "{:?}", rec.end);
    assert!(matches!(rec.end.next_segment, Some(Stop::Unwritten { .. })), "{:?}", rec.end);
    assert!(rec.end.is_clean());
    assert_eq!(rec.partial_segments, n);
}

#[test]
fn a_descriptor_that_fails_its_checksum_is_a_torn_tail() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    r.flip(last.start);
    let end = r.end();
    assert_eq!(end.reason.block(), Some(last.start));
    assert!(matches!(end.reason, Stop::Torn { .. }), "{end:?}");
    assert!(!end.is_clean());
}

#[test]
fn an_intact_descriptor_of_another_sequence_is_an_older_lap_and_a_clean_end() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    let mut d = last.desc.clone();
    d.seq = Seq(d.seq.0 + 7);
    r.rewrite(&last, &d);
    let end = r.end();
    assert_eq!(
        end.reason,
        Stop::WrongSequence { block: last.start, found: Seq(last.desc.seq.0 + 7), expected: Some(last.desc.seq) }
    );
    assert!(end.is_clean());
}

#[test]
fn a_later_descriptor_block_where_a_first_was_expected_is_no_start() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    r.reseal(last.start, |h| h.aux = 1);
    let end = r.end();
    assert_eq!(end.reason, Stop::MidDescriptor { block: last.start });
    assert!(end.is_clean());
}

#[test]
fn a_descriptor_naming_a_segment_beyond_the_log_overruns() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    let mut d = last.desc.clone();
    d.next_segment = SegmentNo(r.sb.segment_count);
    r.rewrite(&last, &d);
    let end = r.end();
    assert_eq!(end.reason, Stop::Overrun { block: last.start });
    assert!(!end.is_clean());
}

#[test]
fn a_descriptor_block_of_another_partial_segment_is_foreign() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    r.rewrite(&last, &long(&last.desc));
    r.reseal(last.start + 1, |h| h.seq = Seq(h.seq.0 + 1));
    let end = r.end();
    assert_eq!(end.reason, Stop::ForeignDescriptorBlock { block: last.start + 1 });
    assert!(!end.is_clean());
}

#[test]
fn a_later_descriptor_block_that_fails_its_checksum_is_a_bad_descriptor() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    r.rewrite(&last, &long(&last.desc));
    r.flip(last.start + 1);
    let end = r.end();
    assert!(matches!(end.reason, Stop::BadDescriptor { block, .. } if block == last.start + 1), "{end:?}");
    assert!(!end.is_clean());
}

#[test]
fn a_descriptor_written_for_another_place_is_misplaced() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    let mut d = last.desc.clone();
    d.offset += 1;
    r.rewrite(&last, &d);
    let end = r.end();
    assert_eq!(end.reason, Stop::Misplaced { block: last.start });
    assert!(!end.is_clean());
}

#[test]
fn a_descriptor_not_naming_its_predecessors_checksum_breaks_the_chain() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    let mut d = last.desc.clone();
    d.prev_crc ^= 1;
    r.rewrite(&last, &d);
    let end = r.end();
    assert_eq!(end.reason, Stop::BrokenChain { block: last.start });
    assert!(!end.is_clean());
}

#[test]
fn a_body_block_that_fails_its_checksum_is_bad() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    let body = last.start + last.desc_blocks as u64;
    r.flip(body);
    let end = r.end();
    assert!(matches!(end.reason, Stop::BadBody { block, .. } if block == body), "{end:?}");
    assert!(!end.is_clean());
}

#[test]
fn an_intact_body_block_of_another_write_is_stale() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    let body = last.start + last.desc_blocks as u64;
    r.reseal(body, |h| h.seq = Seq(h.seq.0 - 1));
    let end = r.end();
    assert_eq!(end.reason, Stop::StaleBody { block: body });
    assert!(!end.is_clean());
}

#[test]
fn body_blocks_that_do_not_give_the_body_checksum_fail_it() {
    let r = Rig::new(&[1, 1]);
    let last = r.last();
    let mut d = last.desc.clone();
    d.body_crc ^= 1;
    r.rewrite(&last, &d);
    let end = r.end();
    assert_eq!(end.reason, Stop::BodyChecksum { block: last.start });
    assert!(!end.is_clean());
}

#[test]
fn a_group_whose_last_partial_segment_is_missing_is_cut_short_and_dropped() {
    let r = Rig::new(&[1, 1]);
    let all = r.partial_segments();
    let last = all.last().unwrap();
    let mut d = last.desc.clone();
    d.flags &= !PS_GROUP_END;
    r.rewrite(last, &d);
    let rec = r.recover();
    assert!(
        matches!(&rec.end.reason, Stop::GroupCutShort(why) if matches!(**why, Stop::Unwritten { .. })),
        "{:?}",
        rec.end
    );
    assert!(!rec.end.is_clean());
    assert_eq!(rec.partial_segments, all.len() as u64 - 1, "the cut group was applied");
}

#[test]
fn a_full_segment_sends_the_log_on_to_the_next_one() {
    // Enough inodes in one commit that a group reaches past a segment's end.
    let r = Rig::new(&[1, 3000]);
    let all = r.partial_segments();
    let i = all
        .iter()
        .position(|p| p.desc.offset + p.desc.total_blocks() as u32 == r.sb.segment_blocks)
        .filter(|&i| i + 1 < all.len())
        .expect("no partial segment filled its segment");
    // Without the partial segment in the next segment, the log stops at the
    // end of the full one, whatever the group it was in.
    let next = &all[i + 1];
    r.write(next.start, &vec![0u8; BLOCK_SIZE]);
    let end = r.end();
    let reason = match &end.reason {
        Stop::GroupCutShort(why) => why.as_ref(),
        other => other,
    };
    assert_eq!(*reason, Stop::PastSegmentEnd { segment: all[i].desc.segment, offset: r.sb.segment_blocks });
    assert!(matches!(end.next_segment, Some(Stop::Unwritten { block, .. }) if block == next.start), "{end:?}");
}

#[test]
fn every_stop_reads_as_plain_words() {
    let stops = [
        Stop::PastSegmentEnd { segment: SegmentNo(3), offset: 128 },
        Stop::WrongSequence { block: 9, found: Seq(4), expected: Some(Seq(5)) },
        Stop::GroupCutShort(Box::new(Stop::BrokenChain { block: 9 })),
    ];
    let words: Vec<String> = stops.iter().map(ToString::to_string).collect();
    assert_eq!(words[0], "segment 3 is full (offset 128)");
    assert_eq!(words[1], "block 9 holds sequence 4 where 5 was expected");
    assert_eq!(
        words[2],
        "a commit group was cut short: descriptor at block 9 does not continue the log (checksum chain)"
    );
    let clean = LogEnd { reason: stops[1].clone(), next_segment: None };
    assert_eq!(clean.to_string(), "clean: block 9 holds sequence 4 where 5 was expected");
}

#[test]
fn norecovery_reads_nothing_after_the_checkpoint_and_is_never_written() {
    let r = Rig::new(&[2, 1]);
    let meta: Arc<dyn BlockDevice> = r.meta.clone();
    let data: Arc<dyn BlockDevice> = r.data.clone();
    let before = r.read(r.block_of(r.first.segment, r.first.offset));
    let ro = MountOptions { read_only: true, no_recovery: true, ..MountOptions::default() };
    let vol = Volume::open(meta.clone(), data.clone(), ro).unwrap();
    let rec = &vol.open_report().recovery;
    assert!(matches!(rec.end.reason, Stop::NotRead { .. }), "{:?}", rec.end);
    assert_eq!(rec.end.reason.block(), Some(r.block_of(r.first.segment, r.first.offset)));
    assert_eq!((rec.partial_segments, rec.blocks_scanned), (0, 0));
    assert!(rec.end.to_string().contains("not read (norecovery)"), "{}", rec.end);
    // The checkpoint's state: none of the files committed after it.
    assert!(vol.lookup(InodeNo::ROOT, b"f0.0").is_err(), "a commit after the checkpoint was applied");
    assert!(vol.lookup(InodeNo::ROOT, b"f1.0").is_err());
    assert!(vol.set_read_only(false).is_err(), "a volume not rolled forward became writable");
    assert!(vol.create(InodeNo::ROOT, b"x", 0o644, Creds::ROOT).is_err());
    drop(vol);
    assert_eq!(r.read(r.block_of(r.first.segment, r.first.offset)), before, "the log was written");
    // Writable with norecovery is refused; without it every commit is back.
    let rw = MountOptions { no_recovery: true, ..MountOptions::default() };
    assert!(Volume::open(meta.clone(), data.clone(), rw).is_err());
    let vol = Volume::open(meta, data, MountOptions::default()).unwrap();
    for name in [&b"f0.0"[..], b"f0.1", b"f1.0"] {
        assert!(vol.lookup(InodeNo::ROOT, name).is_ok(), "{}", String::from_utf8_lossy(name));
    }
}

//! Scrub of a mirrored meta-data device: every block read from each copy
//! alone ([`MirrorDevice::read_copy`]: the mirror's own reads take the
//! second copy only when the first fails, and mend the first as they go,
//! which would hide what each copy holds), each checked as an unmirrored
//! scrub checks it. A block bad on one copy and good on the other is
//! rewritten on the bad one by [`MirrorDevice::mend_copy`], under the
//! mirror's write lock and, on the live tree, the volume's locks after the
//! maps still name the block there: a block the log moved meanwhile is
//! never written over. A block bad on both is reported with its files.
//!
//! The superblock and the checkpoint slots are compared copy to copy; the
//! log after the checkpoint is walked on each copy as roll-forward reads
//! it, and a block the walk of one copy stops at, that differs on the other
//! copy and is not bad there, is taken from the other copy, and the walk
//! goes on.

use std::io;
use std::sync::Arc;

use super::{BadMeta, Loaded, Run, ScrubHost, Tree, bad_meta, keep, neighbour_runs};
use crate::device::{Healed, Mend, MirrorDevice, Verdict};
use crate::error::Result;
use crate::format::block::mirror_verdict;
use crate::format::superblock::{CHECKPOINT_SLOTS, Role, Superblock};
use crate::meta_log::Log;
use crate::meta_log::live::{Decoded, LiveBlock, TailDamage, Verifier};
use crate::types::{BLOCK_SIZE, InodeNo};

/// Times one copy's log is walked again after a block it stopped at was
/// mended (each walk stops at the first bad partial segment).
const TAIL_ROUNDS: usize = 64;

/// The copies, by index.
const COPIES: [usize; 2] = [0, 1];

/// The blocks the mirror's reads rewrote on the first copy while the live
/// blocks were listed (`healed`, from [`MirrorDevice::heals_during`]): bad
/// on copy 1, repaired from copy 2, each named as the trees list it and
/// with the files it serves (a block no tree lists, by its address).
pub(super) fn listed_heals(log: &Log, trees: &[Tree], mut healed: Vec<Healed>) -> Result<Vec<BadMeta>> {
    healed.sort_by_key(|h| h.at);
    healed.dedup_by_key(|h| h.at);
    let mut out = Vec::new();
    for h in healed {
        let error = format!("copy 1: {}; read from copy 2 and rewritten while the live blocks were listed", h.why);
        let found = trees.iter().find_map(|t| {
            let i = t.blocks.binary_search_by_key(&h.at, |b| b.at.0).ok()?;
            Some((t, &t.blocks[i]))
        });
        out.push(match found {
            Some((t, b)) => {
                let owners = match &t.image {
                    Some(image) => image.owners_of(b.at)?,
                    None => log.owners_of(b.at)?,
                };
                bad_meta(t, b, error, owners, true, vec![1])
            }
            None => BadMeta {
                block: h.at,
                structure: "meta-data block".into(),
                tree: "live".into(),
                error,
                inodes: Vec::new(),
                paths: Vec::new(),
                repaired: true,
                copies: vec![1],
            },
        });
    }
    Ok(out)
}

/// Reads one tree's blocks from both copies in runs of neighbours.
pub(super) fn read_tree<H: ScrubHost>(
    host: &H,
    m: &MirrorDevice,
    verifier: Verifier,
    t: &mut Tree,
    run: &mut Run<'_>,
    loaded: &mut Loaded,
) -> Result<()> {
    for r in neighbour_runs(&t.blocks) {
        let first = t.blocks[r.start].at.0;
        let count = (t.blocks[r.end - 1].at.0 - first + 1) as usize;
        let raws = COPIES.map(|c| {
            let mut raw = vec![0u8; count * BLOCK_SIZE];
            m.read_copy(c, first, &mut raw).map(|()| raw)
        });
        for b in &t.blocks[r] {
            let off = (b.at.0 - first) as usize * BLOCK_SIZE;
            let [a, z] = COPIES.map(|c| check_copy(m, c, &raws[c], off, b, verifier));
            match (a, z) {
                (Ok(d), Ok(_)) => keep(loaded, d),
                _ => look(host, m, verifier, t, b, run, loaded)?,
            }
        }
        let read = 2 * count as u64;
        run.report.meta_blocks += read;
        if !run.read(read) {
            break;
        }
    }
    Ok(())
}

/// The check of block `b` on copy `c`, from the run read (or, where the
/// run failed to read, read again alone).
fn check_copy(
    m: &MirrorDevice,
    c: usize,
    run: &io::Result<Vec<u8>>,
    off: usize,
    b: &LiveBlock,
    verifier: Verifier,
) -> std::result::Result<Decoded, String> {
    match run {
        Ok(raw) => verifier.verify(&raw[off..off + BLOCK_SIZE], b),
        Err(_) => {
            let mut one = vec![0u8; BLOCK_SIZE];
            match m.read_copy(c, b.at.0, &mut one) {
                Ok(()) => verifier.verify(&one, b),
                Err(e) => Err(format!("the device fails to read it: {e}")),
            }
        }
    }
}

/// What the second look at a block bad on a copy found.
enum Exam {
    /// The maps no longer name it there, or it reads right on both now.
    Moved(Option<Decoded>),
    /// Still bad on one copy or both.
    Found {
        /// What is wrong on each copy (None: good there).
        errors: [Option<String>; 2],
        /// Rewritten from the other copy.
        repaired: bool,
        /// What the good copy held.
        decoded: Option<Decoded>,
        /// The inodes it serves.
        owners: Vec<InodeNo>,
    },
}

/// Reads `b` from both copies again and, bad on one only, mends that one.
fn examine(
    m: &MirrorDevice,
    verifier: Verifier,
    b: &LiveBlock,
    owners: impl FnOnce() -> Result<Vec<InodeNo>>,
) -> Result<Exam> {
    let mut errors: [Option<String>; 2] = [None, None];
    let mut decoded = None;
    for c in COPIES {
        let mut raw = vec![0u8; BLOCK_SIZE];
        let verdict = match m.read_copy(c, b.at.0, &mut raw) {
            Ok(()) => verifier.verify(&raw, b),
            Err(e) => Err(format!("the device fails to read it: {e}")),
        };
        match verdict {
            Ok(d) if decoded.is_none() => decoded = Some(d),
            Ok(_) => {}
            Err(e) => errors[c] = Some(e),
        }
    }
    let bad: Vec<usize> = COPIES.into_iter().filter(|&c| errors[c].is_some()).collect();
    let mut repaired = false;
    match bad[..] {
        [] => return Ok(Exam::Moved(decoded)),
        [k] => match m.mend_copy(k, b.at.0, &|raw| verifier.verify(raw, b).is_ok()) {
            Ok(Mend::Mended) => repaired = true,
            Ok(Mend::AlreadyGood) => return Ok(Exam::Moved(decoded)),
            Ok(Mend::BothBad) => {}
            Err(e) => {
                if let Some(why) = &mut errors[k] {
                    why.push_str(&format!("; rewriting it from the other copy failed: {e}"));
                }
            }
        },
        _ => {}
    }
    Ok(Exam::Found { errors, repaired, decoded, owners: owners()? })
}

/// A block that failed on a copy: looked at again (on the live tree under
/// the volume's locks, and only while the maps still name it), mended
/// from the other copy if that one holds it good, reported either way.
fn look<H: ScrubHost>(
    host: &H,
    m: &MirrorDevice,
    verifier: Verifier,
    t: &Tree,
    b: &LiveBlock,
    run: &mut Run<'_>,
    loaded: &mut Loaded,
) -> Result<()> {
    let exam = match &t.image {
        // An image never changes: nothing moves it, nothing writes it.
        Some(image) => examine(m, verifier, b, || image.owners_of(b.at))?,
        None => host.with_log(true, |log| -> Result<Exam> {
            if !log.still_live(b)? {
                return Ok(Exam::Moved(None));
            }
            examine(m, verifier, b, || log.owners_of(b.at))
        })?,
    };
    match exam {
        Exam::Moved(d) => {
            run.report.moved += 1;
            if let Some(d) = d {
                keep(loaded, d);
            }
        }
        Exam::Found { errors, repaired, decoded, owners } => {
            if let Some(d) = decoded {
                keep(loaded, d);
            }
            run.report.bad_meta.push(bad_meta(t, b, per_copy(&errors), owners, repaired, on(&errors)));
        }
    }
    Ok(())
}

/// The copies (from 1) an error was found on.
fn on(errors: &[Option<String>; 2]) -> Vec<u32> {
    COPIES.into_iter().filter(|&c| errors[c].is_some()).map(|c| c as u32 + 1).collect()
}

/// "copy 1: …; copy 2: …", for the copies that failed.
fn per_copy(errors: &[Option<String>; 2]) -> String {
    COPIES
        .into_iter()
        .filter_map(|c| errors[c].as_ref().map(|e| format!("copy {}: {e}", c + 1)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The superblock and the log after the checkpoint, on each copy.
pub(super) fn tail<H: ScrubHost>(host: &H, m: &Arc<MirrorDevice>, run: &mut Run<'_>) -> Result<()> {
    let volume_id = host.with_log(false, |log| log.superblock().volume_id());
    fixed_blocks(host, m, volume_id, run);
    let walk = |c: usize| -> std::result::Result<(u64, Vec<TailDamage>), String> {
        host.with_log(true, |log| log.scrub_log_tail_on(m.copies()[c].clone())).map_err(|e| e.to_string())
    };
    let mut walks = COPIES.map(&walk);
    for c in COPIES {
        let mut mended: Vec<TailDamage> = Vec::new();
        for _ in 0..TAIL_ROUNDS {
            let (Ok((_, mine)), other) = (&walks[c], &walks[1 - c]) else { break };
            let other_bad = |at: u64| match other {
                Ok((_, o)) => o.iter().any(|d| d.0 == at),
                Err(_) => true,
            };
            let mut progress = false;
            for d in mine.clone() {
                // The superblock and the slots were compared already.
                let fixed = d.0 == 0 || CHECKPOINT_SLOTS.iter().any(|s| s.0 == d.0);
                if fixed || other_bad(d.0) || mended.iter().any(|x| x.0 == d.0) {
                    continue;
                }
                if mend_tail(host, m, c, d.0, volume_id) {
                    mended.push(d);
                    progress = true;
                }
            }
            if !progress {
                break;
            }
            walks[c] = walk(c);
        }
        for (block, structure, error) in mended {
            run.report.bad_meta.push(tail_bad(block, structure, format!("copy {}: {error}", c + 1), true, c));
        }
    }
    for c in COPIES {
        match &walks[c] {
            Ok((read, bad)) => {
                run.report.meta_blocks += read;
                run.read(*read);
                for (block, structure, error) in bad {
                    let both = walks[1 - c].as_ref().is_ok_and(|(_, o)| o.iter().any(|d| d.0 == *block));
                    if both && c == 1 {
                        // Reported once, with the first copy.
                        continue;
                    }
                    let mut b = tail_bad(*block, structure, format!("copy {}: {error}", c + 1), false, c);
                    if both {
                        b.copies = vec![1, 2];
                    }
                    run.report.bad_meta.push(b);
                }
            }
            Err(e) => run.report.bad_meta.push(tail_bad(
                0,
                "log after the checkpoint",
                format!("copy {}: the log cannot be walked: {e}", c + 1),
                false,
                c,
            )),
        }
    }
    Ok(())
}

fn tail_bad(block: u64, structure: &str, error: String, repaired: bool, copy: usize) -> BadMeta {
    BadMeta {
        block,
        structure: structure.into(),
        tree: "live".into(),
        error,
        inodes: Vec::new(),
        paths: Vec::new(),
        repaired,
        copies: vec![copy as u32 + 1],
    }
}

/// Takes block `at` of the log for copy `c` from the other copy, where the
/// other holds something different there that is not bad; with no commit
/// or checkpoint in flight. Whether it was rewritten.
fn mend_tail<H: ScrubHost>(host: &H, m: &MirrorDevice, c: usize, at: u64, volume_id: u64) -> bool {
    host.with_log(true, |_| {
        let mut other = vec![0u8; BLOCK_SIZE];
        if m.read_copy(1 - c, at, &mut other).is_err() || mirror_verdict(&other, at, volume_id) == Verdict::Bad {
            return false;
        }
        match m.mend_copy(c, at, &|raw| raw == other.as_slice()) {
            Ok(Mend::Mended) => true,
            Ok(_) => false,
            Err(e) => {
                log::error!("meta-data block {at} of copy {}: rewriting it failed: {e}", c + 1);
                false
            }
        }
    })
}

/// The blocks at fixed addresses, on each copy: the superblock (a
/// superblock of this volume's meta-data device) and the checkpoint slots
/// (a checkpoint whose checksum holds, where the copies differ: a slot
/// alike on both, written or not, is for the walk of the log to judge).
/// Bad on one copy and good on the other, a block is taken from the other.
fn fixed_blocks<H: ScrubHost>(host: &H, m: &MirrorDevice, volume_id: u64, run: &mut Run<'_>) {
    let addresses = std::iter::once(0).chain(CHECKPOINT_SLOTS.iter().map(|s| s.0));
    for at in addresses {
        let good = |raw: &[u8]| match at {
            0 => Superblock::decode(raw).is_ok_and(|s| s.role == Role::Meta && s.volume_id() == volume_id),
            _ => mirror_verdict(raw, at, volume_id) == Verdict::Good,
        };
        // No checkpoint is half written while the copies are compared.
        let (errors, repaired) = host.with_log(true, |_| {
            let raws = COPIES.map(|c| {
                let mut raw = vec![0u8; BLOCK_SIZE];
                m.read_copy(c, at, &mut raw).map(|()| raw)
            });
            let alike = matches!(&raws, [Ok(x), Ok(y)] if x == y);
            let errors = COPIES.map(|c| match &raws[c] {
                Err(e) => Some(format!("the device fails to read it: {e}")),
                Ok(raw) if good(raw) || (at != 0 && alike) => None,
                Ok(raw) if raw.iter().all(|&b| b == 0) => Some("it reads as zeros".to_string()),
                Ok(raw) => match Superblock::decode(raw) {
                    Err(e) if at == 0 => Some(e.0),
                    _ if at == 0 => Some("it is not this volume's meta-data superblock".to_string()),
                    _ => Some("its checksum or identity fails".to_string()),
                },
            });
            let mut repaired = false;
            if let [k] = on(&errors)[..] {
                repaired = matches!(m.mend_copy(k as usize - 1, at, &good), Ok(Mend::Mended));
            }
            (errors, repaired)
        });
        run.report.meta_blocks += 2;
        run.read(2);
        if errors.iter().any(Option::is_some) {
            run.report.bad_meta.push(BadMeta {
                block: at,
                structure: if at == 0 { "superblock" } else { "checkpoint slot" }.into(),
                tree: "live".into(),
                error: per_copy(&errors),
                inodes: Vec::new(),
                paths: Vec::new(),
                repaired,
                copies: on(&errors),
            });
        }
    }
}

//! `dualfs inspect`: what dumpe2fs and debugfs show ext4 users, for DualFS.
//! Every view is built once as JSON and printed either as JSON or as text,
//! so the two never disagree.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::Volume;
use dualfs_engine::device::BlockDevice;
use dualfs_engine::format::superblock::{Role, Superblock};
use dualfs_engine::meta_log::Log;

use dualfs_engine::types::{BLOCK_BYTES, FileKind, InodeNo, SegmentNo};
use dualfs_engine::volume::MountOptions;
use serde_json::{Value, json};

use crate::args::{Inspect, InspectArgs};
use crate::devices::{Access, open_pair};
use crate::find::Probed;
use crate::words::{date, uuid};

fn kind_name(k: FileKind) -> &'static str {
    match k {
        FileKind::Regular => "file",
        FileKind::Directory => "directory",
        FileKind::Symlink => "symlink",
        FileKind::Fifo => "fifo",
        FileKind::Socket => "socket",
        FileKind::CharDevice => "char-device",
        FileKind::BlockDevice => "block-device",
    }
}

fn superblock_json(sb: &Superblock) -> Value {
    json!({
        "role": match sb.role { Role::Meta => "meta", Role::Data => "data" },
        "format": format!("{}.{}", sb.major, sb.minor),
        "features": { "compat": sb.compat, "ro_compat": sb.ro_compat, "incompat": sb.incompat },
        "volume_uuid": uuid(&sb.volume_uuid),
        "meta_uuid": uuid(&sb.meta_uuid),
        "data_uuid": uuid(&sb.data_uuid),
        "label": sb.label_str(),
        "created": date(sb.created),
        "block_bytes": BLOCK_BYTES,
        "segment_blocks": sb.segment_blocks,
        "segment_count": sb.segment_count,
        "first_segment_block": sb.first_segment_block,
        "meta_blocks": sb.meta_blocks,
        "data_blocks": sb.data_blocks,
        "group_blocks": sb.group_blocks,
        "group_count": sb.group_count,
        "inline_max": sb.inline_max,
        "mirror": mirror_json(sb),
    })
}

/// The meta-data mirror as the superblock records it.
fn mirror_json(sb: &Superblock) -> Value {
    json!({
        "copies": if sb.mirrored() { 2 } else { 1 },
        "state": if !sb.mirrored() { "none" } else if sb.mirror_state == 0 { "in sync" } else { "degraded" },
        "generation": sb.mirror_generation,
    })
}

/// Each copy of a mirrored meta-data device as its own superblock has it:
/// the mirror generation it names and whether that is the volume's (the
/// data device's), in `mirror["devices"]`. The second copy is `second`, or
/// the one found among the block devices.
fn copies_json(mirror: &mut Value, meta: &Path, data: &Path, second: Option<&Path>) {
    let Ok(Probed::DualFs(d)) = crate::find::probe(data) else { return };
    if !d.mirrored() && second.is_none() {
        return;
    }
    let second = match second {
        Some(p) => Some(p.to_path_buf()),
        None => match crate::find::mirror_copy(meta, &d, "--meta-mirror DEV") {
            Ok(p) => Some(p),
            Err(e) => {
                mirror["second_copy"] = json!(format!("{e:#}"));
                None
            }
        },
    };
    let one = |path: &Path| -> Value {
        let (generation, state) = match crate::find::probe(path) {
            Ok(Probed::DualFs(sb))
                if sb.role == Role::Meta && sb.volume_uuid == d.volume_uuid && sb.meta_uuid == d.meta_uuid =>
            {
                let state = if sb.mirror_generation >= d.mirror_generation { "in sync" } else { "stale" };
                (Some(sb.mirror_generation), state.to_string())
            }
            Ok(Probed::DualFs(_)) => (None, "not a meta-data copy of this volume".into()),
            Ok(Probed::Damaged(why)) => (None, format!("its superblock is damaged ({why})")),
            Ok(Probed::Other) => (None, "not a DualFS device".into()),
            Err(e) => (None, format!("{e:#}")),
        };
        json!({ "device": path.display().to_string(), "generation": generation, "state": state })
    };
    let mut devices = vec![one(meta)];
    devices.extend(second.as_deref().map(one));
    mirror["devices"] = json!(devices);
}

fn log_json(vol: &Volume) -> Value {
    let r = vol.open_report();
    let (head, durable, since) = vol.with_fs(|fs| (fs.log.head(), fs.log.durable(), fs.log.blocks_since_checkpoint()));
    json!({
        "checkpoint": r.checkpoint,
        "fell_back": r.fell_back,
        "roll_forward": {
            "partial_segments": r.recovery.partial_segments,
            "blocks_scanned": r.recovery.blocks_scanned,
            "end": r.recovery.end.to_string(),
            "stop": crate::checkpoints::log_end_json(&r.recovery.end),
            "micros": r.recovery.micros,
            "fsync_pending": r.recovery.fsync_pending,
            "fsync_folded": r.recovery.fsync_folded,
        },
        "fsync_replay": {
            "partial_segments": vol.replay_report().partial_segments,
            "records": vol.replay_report().records,
            "inodes_created": vol.replay_report().inodes_created,
            "data_blocks": vol.replay_report().data_blocks,
        },
        "head": { "seq": head.seq.0, "segment": head.segment.0, "offset": head.offset, "next_segment": head.next_segment.0 },
        "durable_seq": durable.0,
        "blocks_since_checkpoint": since,
    })
}

fn summary_json(sb: &Superblock, vol: &Volume) -> Value {
    let s = vol.statfs();
    json!({
        "volume_uuid": uuid(&sb.volume_uuid),
        "label": sb.label_str(),
        "format": format!("{}.{}", sb.major, sb.minor),
        "created": date(sb.created),
        "mirror": mirror_json(sb),
        "meta": {
            "segments": s.meta_segments,
            "free_segments": s.meta_free_segments,
            "segment_bytes": u64::from(sb.segment_blocks) * BLOCK_BYTES,
        },
        "data": {
            "blocks": s.blocks,
            "free_blocks": s.bfree,
            "groups": sb.group_count,
            "group_bytes": u64::from(sb.group_blocks) * BLOCK_BYTES,
        },
        "inodes": { "used": s.files - s.ffree, "free": s.ffree },
        "log": log_json(vol),
    })
}

fn segments_json(vol: &Volume, all: bool) -> Result<Value> {
    vol.with_fs(|fs| {
        // A mount leaves the table on disk: every entry is read for this.
        fs.log.load_segment_usage().context("cannot read the segment usage table")?;
        let count = fs.log.superblock().segment_count;
        let seg_bytes = u64::from(fs.log.superblock().segment_blocks) * BLOCK_BYTES;
        let mut list = Vec::new();
        let mut free = 0u32;
        let mut live_total = 0u64;
        for s in 0..count {
            let u = fs.log.ifile().segment(SegmentNo(s));
            let is_free = fs.log.segment_is_free(SegmentNo(s));
            free += u32::from(is_free);
            live_total += u64::from(u.live_bytes);
            if all || !is_free {
                list.push(json!({
                    "segment": s,
                    "free": is_free,
                    "live_bytes": u.live_bytes,
                    "utilisation": u64::from(u.live_bytes) as f64 / seg_bytes as f64,
                    "ifile_blocks": u.ifile_blocks,
                    "last_seq": u.last_seq.0,
                }));
            }
        }
        Ok(json!({
            "segments": count,
            "free": free,
            "reserve": fs.log.reserve_segments(),
            "live_bytes": live_total,
            "segment_bytes": seg_bytes,
            "histogram": histogram_json(&fs.log),
            "list": list,
        }))
    })
}

/// Buckets of the utilisation histogram, each a tenth wide.
const HISTOGRAM_BUCKETS: usize = 10;

/// How many segments in use are how full, by the same live bytes as the
/// list: many nearly empty segments mean cleaning is cheap; most of them
/// nearly full means it is not worth it.
fn histogram_json(log: &Log) -> Value {
    let seg_bytes = (f64::from(log.superblock().segment_blocks) * BLOCK_BYTES as f64).max(1.0);
    let mut counts = [0u64; HISTOGRAM_BUCKETS];
    for s in (0..log.superblock().segment_count).map(SegmentNo).filter(|&s| !log.segment_is_free(s)) {
        let u = (f64::from(log.ifile().segment(s).live_bytes) / seg_bytes).clamp(0.0, 1.0);
        counts[((u * HISTOGRAM_BUCKETS as f64) as usize).min(HISTOGRAM_BUCKETS - 1)] += 1;
    }
    let step = 100 / HISTOGRAM_BUCKETS;
    Value::Array(
        counts
            .iter()
            .enumerate()
            .map(|(i, n)| json!({ "from_percent": i * step, "to_percent": (i + 1) * step, "segments": n }))
            .collect(),
    )
}

fn groups_json(vol: &Volume) -> Result<Value> {
    vol.with_fs(|fs| {
        fs.log.space_mut().load_all().context("cannot read the data-group descriptor table")?;
        let total = fs.log.space().total_blocks();
        let per = u64::from(fs.log.space().group_blocks());
        let list: Vec<Value> = fs
            .log
            .space()
            .groups
            .entries()
            .enumerate()
            .map(|(g, d)| {
                let start = g as u64 * per;
                json!({
                    "group": g,
                    "blocks": per.min(total.saturating_sub(start)),
                    "free_blocks": d.free_blocks,
                    "directories": d.directories,
                })
            })
            .collect();
        Ok(json!({ "group_blocks": per, "groups": list }))
    })
}

/// An inode number, or a '/'-rooted path resolved inside the volume.
///
/// # Errors
/// Neither a number nor a '/'-rooted path, or a name on the way is missing.
pub fn resolve(vol: &Volume, spec: &str) -> Result<InodeNo> {
    if let Ok(n) = spec.parse::<u64>() {
        return Ok(InodeNo(n));
    }
    let Some(path) = spec.strip_prefix('/') else {
        bail!("{spec:?}: give an inode number or a path starting with '/'");
    };
    let mut ino = InodeNo::ROOT;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = vol.lookup(ino, part.as_bytes()).map_err(|e| anyhow!("{spec}: {part}: {e}"))?.ino;
    }
    Ok(ino)
}

fn printable(v: &[u8]) -> Value {
    match std::str::from_utf8(v) {
        Ok(s) if !s.chars().any(char::is_control) => json!(s),
        _ => json!(format!("0x{}", v.iter().map(|b| format!("{b:02x}")).collect::<String>())),
    }
}

fn inode_json(vol: &Volume, ino: InodeNo) -> Result<Value> {
    let a = vol.getattr(ino).map_err(|e| anyhow!("inode {ino}: {e}"))?;
    let mut xattrs = serde_json::Map::new();
    for name in vol.listxattr(ino).map_err(|e| anyhow!("inode {ino}: {e}"))? {
        let v = vol.getxattr(ino, &name).map_err(|e| anyhow!("inode {ino}: {e}"))?;
        xattrs.insert(String::from_utf8_lossy(&name).into_owned(), printable(&v));
    }
    let mut v = json!({
        "ino": a.ino.0, "generation": a.generation, "kind": kind_name(a.kind),
        "mode": format!("{:04o}", a.perm), "nlink": a.nlink, "uid": a.uid, "gid": a.gid,
        "rdev": a.rdev, "size": a.size, "blocks_512": a.blocks,
        "atime": date(a.atime), "mtime": date(a.mtime), "ctime": date(a.ctime), "crtime": date(a.crtime),
        "flags": dualfs_engine::format::inode::flag_letters(a.flags), "project": a.project,
        "xattrs": xattrs,
    });
    if a.kind == FileKind::Regular {
        v["inline"] = json!(vol.is_inline(ino).map_err(|e| anyhow!("inode {ino}: {e}"))?);
    }
    // Where its record is on the meta-data device (to find it with dd).
    if let Some(entry) = vol.with_fs(|fs| fs.log.map_entry(ino)).ok().flatten() {
        v["record_block"] = json!(entry.address.0);
    }
    if a.kind == FileKind::Symlink {
        let t = vol.readlink(ino).map_err(|e| anyhow!("inode {ino}: {e}"))?;
        v["target"] = json!(String::from_utf8_lossy(&t));
    }
    Ok(v)
}

fn dir_json(vol: &Volume, ino: InodeNo) -> Result<Value> {
    let mut list = Vec::new();
    vol.readdir(ino, 0, &mut |l| {
        list.push(json!({
            "name": String::from_utf8_lossy(&l.name),
            "ino": l.ino.0,
            "kind": kind_name(l.kind),
        }));
        true
    })
    .map_err(|e| anyhow!("directory {ino}: {e}"))?;
    Ok(json!({ "ino": ino.0, "entries": list }))
}

/// Runs `dualfs inspect`.
///
/// # Errors
/// The devices are not a DualFS pair, are corrupt, or the inode is unknown.
pub fn run(args: &InspectArgs) -> Result<()> {
    let (meta_path, data_path) = crate::devices::named(&args.meta, Some(&args.data))?;
    let (meta, data) = open_pair(&meta_path, &data_path, Access::Shared)?;
    let sb = Log::read_superblocks(meta.as_ref(), data.as_ref()).context("cannot read the superblocks")?;
    let what = args.what.clone().unwrap_or(Inspect::Summary);
    // The superblock needs no checkpoint: it can be shown when the rest is
    // broken, and so can the checkpoint slots.
    let value = if let Inspect::Superblock = what {
        superblock_json(&sb)
    } else if let Inspect::Checkpoints = what {
        let options = MountOptions { read_only: true, ..MountOptions::default() };
        let opened = Volume::open(meta.clone(), data, options);
        if let Err(e) = &opened {
            eprintln!("dualfs: the volume cannot be opened: {e}");
        }
        crate::checkpoints::checkpoints_json(meta.as_ref(), opened.as_ref().ok().map(Volume::open_report))
    } else {
        let options = MountOptions { read_only: true, ..MountOptions::default() };
        let vol = Volume::open(meta.clone(), data, options).context("cannot open the volume")?;
        volume_view(&what, &sb, &vol, meta.as_ref())?
    };
    let mut value = value;
    if matches!(what, Inspect::Summary | Inspect::Superblock)
        && let Some(m) = value.get_mut("mirror")
    {
        copies_json(m, &meta_path, &data_path, args.meta_mirror.as_deref());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", crate::inspect_text::render(&what, &value));
    }
    Ok(())
}

fn volume_view(what: &Inspect, sb: &Superblock, vol: &Volume, meta: &dyn BlockDevice) -> Result<Value> {
    Ok(match what {
        Inspect::Summary => summary_json(sb, vol),
        Inspect::Superblock => superblock_json(sb),
        Inspect::Log => log_json(vol),
        Inspect::Segments { all } => segments_json(vol, *all)?,
        Inspect::Groups => groups_json(vol)?,
        Inspect::Inode { inode } => inode_json(vol, resolve(vol, inode)?)?,
        Inspect::Dir { dir } => dir_json(vol, resolve(vol, dir)?)?,
        Inspect::Extents { file } => crate::extent_map::extents_json(vol, resolve(vol, file)?)?,
        Inspect::Checkpoints => crate::checkpoints::checkpoints_json(meta, Some(vol.open_report())),
    })
}

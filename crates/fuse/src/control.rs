//! The control interface of a mounted volume: virtual extended attributes
//! of the mount's root directory, answered here before the engine sees
//! them (the engine refuses names outside the xattr namespaces it stores,
//! so no stored attribute can be shadowed or listed by them).
//!
//! | request on the root | name | what it does |
//! |---|---|---|
//! | setxattr | `dualfs.clean` | starts a cleaning run in the background with the [`CleanOrder`] in the value (EBUSY while one runs) |
//! | getxattr | `dualfs.clean` | the state of the latest run, as JSON |
//! | removexattr | `dualfs.clean` | asks a running clean to stop after its current pass |
//! | getxattr | `dualfs.stats` | the log's and the cleaner's counters, as JSON |
//! | setxattr | `dualfs.sync` | commits everything and writes a checkpoint; returns once durable |
//! | getxattr | `dualfs.remount.ro` | commits, checkpoints and refuses changes from now on (EROFS); answers [`mode_json`] |
//! | getxattr | `dualfs.remount.rw` | accepts changes again; answers [`mode_json`] |
//! | getxattr | `dualfs.mode` | [`mode_json`]: whether the volume is read-only |
//! | setxattr | `dualfs.resize` | resizes the volume to the [`parse_resize`] request in the value (`meta=BLOCKS data=BLOCKS`); returns once durable |
//! | getxattr | `dualfs.resize` | the latest resize's outcome, as JSON ([`resize_json`]) |
//! | setxattr | `dualfs.migrate` | moves the meta-data or data device to the one in the value (`meta=PATH`, `data=PATH`; `crate::migrate`); returns once the new device is the volume's |
//! | getxattr | `dualfs.migrate` | the progress or outcome of the latest migration, as JSON |
//! | setxattr | `dualfs.mirror` | adds, removes or replaces a copy of the meta-data mirror (`crate::mirror`); returns once done |
//! | getxattr | `dualfs.mirror` | the progress or outcome of the latest change of the mirror, as JSON |
//! | setxattr | `dualfs.receive` | receives the send stream in the file the value names, in the background (EBUSY while one runs; `crate::receive`) |
//! | getxattr | `dualfs.receive` | the state of the latest receive, as JSON |
//! | setxattr | `dualfs.scrub` | scrubs the volume in the background with the order in the value (`crate::scrub`; EBUSY while one runs) |
//! | getxattr | `dualfs.scrub` | the progress, then the report, of the latest scrub, as JSON |
//! | removexattr | `dualfs.scrub` | stops a running scrub |
//! | setxattr | `dualfs.quota` | turns quotas on, sets limits or grace times ([`QuotaRequest`]); returns once durable |
//! | getxattr | `dualfs.quota` | usage, limits and grace times of every id, as JSON ([`quota_json`]) |
//!
//! The remount requests are reads because a read is what still reaches the
//! volume once the kernel has made the mount read-only: a remount to
//! read-only goes to the kernel first (it refuses while files are open for
//! writing, and writes its cached pages back while the volume still takes
//! them), and from then on the kernel refuses setxattr with EROFS.
//!
//! Only root and the user who mounted the volume may use `clean` and
//! `stats` (EPERM for others): cleaning costs I/O, and the mounting user
//! could as well unmount and clean offline. `sync` is anyone's who may
//! write the root directory (the kernel checks), as sync(1) is anyone's.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dualfs_engine::Volume;
use dualfs_engine::volume::{CleanReport, CleanRequest, Policy, ResizeReport, ResizeRequest, WHOLE_DEVICE};

use crate::Errno;
use crate::job::Job;
use serde_json::{Value, json};

/// The prefix of every control attribute.
pub const PREFIX: &str = "dualfs.";
/// Set to start a clean, read for its state, removed to stop it.
pub const CLEAN: &str = "dualfs.clean";
/// Read for the counters.
pub const STATS: &str = "dualfs.stats";
/// Read to make the volume read-only (a remount's second half).
pub const REMOUNT_RO: &str = "dualfs.remount.ro";
/// Read to make the volume writable again (a remount's first half).
pub const REMOUNT_RW: &str = "dualfs.remount.rw";
/// Read for whether the volume is read-only.
pub const MODE: &str = "dualfs.mode";

/// Set to change quotas, read for the report (`dualfs quota`).
pub const QUOTA: &str = "dualfs.quota";

/// A change of quotas, as text: `on`, `set KIND ID BSOFT BHARD ISOFT
/// IHARD` (blocks of 4 KiB and inodes, 0 for none) or `grace KIND BSECS
/// ISECS`, KIND one of `user`, `group`, `project`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaRequest {
    /// Turn quotas on.
    On,
    /// Set one id's limits.
    Set(dualfs_engine::volume::quota::Kind, u32, dualfs_engine::volume::quota::QuotaLimits),
    /// Set a kind's grace times.
    Grace(dualfs_engine::volume::quota::Kind, u64, u64),
}

impl fmt::Display for QuotaRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaRequest::On => f.write_str("on"),
            QuotaRequest::Set(k, id, l) => {
                write!(f, "set {} {id} {} {} {} {}", k.name(), l.block_soft, l.block_hard, l.inode_soft, l.inode_hard)
            }
            QuotaRequest::Grace(k, b, i) => write!(f, "grace {} {b} {i}", k.name()),
        }
    }
}

impl QuotaRequest {
    /// Reads what [`QuotaRequest`]'s `Display` writes.
    ///
    /// # Errors
    /// Anything else, in words.
    pub fn parse(s: &str) -> Result<QuotaRequest, String> {
        use dualfs_engine::volume::quota::{Kind, QuotaLimits};
        let words: Vec<&str> = s.split_whitespace().collect();
        let kind = |w: &str| match w {
            "user" => Ok(Kind::User),
            "group" => Ok(Kind::Group),
            "project" => Ok(Kind::Project),
            _ => Err(format!("'{w}' is not user, group or project")),
        };
        let num = |w: &str| w.parse::<u64>().map_err(|_| format!("'{w}' is not a number"));
        match words.as_slice() {
            ["on"] => Ok(QuotaRequest::On),
            ["set", k, id, bs, bh, is, ih] => {
                let id = u32::try_from(num(id)?).map_err(|_| format!("'{id}' is not an id"))?;
                let l = QuotaLimits {
                    block_soft: num(bs)?,
                    block_hard: num(bh)?,
                    inode_soft: num(is)?,
                    inode_hard: num(ih)?,
                };
                Ok(QuotaRequest::Set(kind(k)?, id, l))
            }
            ["grace", k, b, i] => Ok(QuotaRequest::Grace(kind(k)?, num(b)?, num(i)?)),
            _ => Err(format!("'{s}' is not a quota request")),
        }
    }

    /// Applies the request to `vol`.
    ///
    /// # Errors
    /// The volume's.
    pub fn apply(self, vol: &Volume) -> Result<(), dualfs_engine::Error> {
        match self {
            QuotaRequest::On => vol.enable_quotas(),
            QuotaRequest::Set(k, id, l) => vol.set_quota(k, id, l),
            QuotaRequest::Grace(k, b, i) => vol.set_quota_grace(k, b, i),
        }
    }
}

/// Usage, limits and grace times as JSON: `{"on": false}` on a volume
/// without quotas, else `grace` per kind and one row per id.
#[must_use]
pub fn quota_json(vol: &Volume) -> Value {
    let Ok(r) = vol.quota_report() else { return json!({ "on": false }) };
    let kinds = ["user", "group", "project"];
    let grace: serde_json::Map<String, Value> =
        kinds.iter().zip(r.grace).map(|(k, (b, i))| ((*k).to_string(), json!({ "blocks": b, "inodes": i }))).collect();
    let rows: Vec<Value> = r
        .rows
        .iter()
        .map(|row| {
            let l = row.entry.limits;
            json!({
                "kind": row.kind.name(), "id": row.id,
                "blocks": row.used.blocks, "block_soft": l.block_soft, "block_hard": l.block_hard,
                "block_grace_end": row.entry.block_grace_end,
                "inodes": row.used.inodes, "inode_soft": l.inode_soft, "inode_hard": l.inode_hard,
                "inode_grace_end": row.entry.inode_grace_end,
            })
        })
        .collect();
    json!({ "on": true, "grace": grace, "rows": rows })
}

/// What a user who is neither root nor the mounter may read of the quotas,
/// as quotactl's `Q_GETQUOTA` lets them: their own user's row and the rows
/// of the groups they are in, never another user's or a project's. The
/// answer says whose rows it holds (`only`).
#[must_use]
pub fn own_quota_json(vol: &Volume, uid: u32, gids: &[u32]) -> Value {
    let mut v = quota_json(vol);
    if let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) {
        rows.retain(|r| {
            let id = r["id"].as_u64().and_then(|i| u32::try_from(i).ok());
            match (r["kind"].as_str(), id) {
                (Some("user"), Some(id)) => id == uid,
                (Some("group"), Some(id)) => gids.contains(&id),
                _ => false,
            }
        });
    }
    if v["on"] == Value::Bool(true) {
        v["only"] = json!({ "uid": uid, "gids": gids });
    }
    v
}

/// `{"read_only": bool}`: the answer of the remount and mode attributes.
#[must_use]
pub fn mode_json(vol: &Volume) -> Value {
    json!({ "read_only": vol.is_read_only() })
}
/// Set to grow the volume (`dualfs resize MOUNTPOINT`); read for how the
/// latest resize went.
pub const RESIZE: &str = "dualfs.resize";

/// A resize request as text: `meta=BLOCKS data=BLOCKS`, each optional
/// (a device left out keeps its size), `max` for the whole device,
/// separated by spaces or commas.
///
/// # Errors
/// An unknown key or a number that does not parse.
pub fn parse_resize(s: &str) -> Result<ResizeRequest, String> {
    let mut req = ResizeRequest::default();
    for part in s.split([' ', ',']).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| format!("'{part}' is not key=value"))?;
        let n: u64 = if v == "max" {
            WHOLE_DEVICE
        } else {
            v.parse().map_err(|_| format!("'{v}' is not a number of blocks"))?
        };
        match k {
            "meta" => req.meta_blocks = Some(n),
            "data" => req.data_blocks = Some(n),
            _ => return Err(format!("unknown resize key '{k}' (meta, data)")),
        }
    }
    Ok(req)
}

/// The request text [`parse_resize`] reads.
#[must_use]
pub fn resize_order(req: &ResizeRequest) -> String {
    let mut v = Vec::new();
    let n = |b: u64| if b == WHOLE_DEVICE { "max".to_string() } else { b.to_string() };
    if let Some(m) = req.meta_blocks {
        v.push(format!("meta={}", n(m)));
    }
    if let Some(d) = req.data_blocks {
        v.push(format!("data={}", n(d)));
    }
    v.join(" ")
}

/// A resize's outcome as `dualfs resize --json` prints it, mounted or not.
#[must_use]
pub fn resize_json(r: &Result<ResizeReport, String>) -> Value {
    match r {
        Ok(r) => json!({
            "state": "done",
            "error": null,
            "segments_before": r.before.segment_count,
            "segments_after": r.after.segment_count,
            "data_blocks_before": r.before.data_blocks,
            "data_blocks_after": r.after.data_blocks,
            "meta_blocks": r.meta_blocks,
            "meta_blocks_written": r.meta_blocks_written,
            "data_files_moved": r.moved.files,
            "data_blocks_moved": r.moved.blocks,
            "data_scan_ms": r.moved.scan_ms,
        }),
        Err(e) => json!({ "state": "failed", "error": e }),
    }
}

/// Set (any value) to make everything durable: `dualfs sync`.
pub const SYNC: &str = "dualfs.sync";

/// Segments at least this full are left by an on-demand clean: moving one
/// costs four blocks written for each block it frees.
pub const DEFAULT_MAX_UTILIZATION: f64 = 0.8;

/// What `dualfs clean` asks for, as text: `segments=N policy=greedy
/// max_utilization=F`, each optional, separated by spaces or commas.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CleanOrder {
    /// At most this many victims (None: every segment worth cleaning).
    pub segments: Option<usize>,
    /// How victims are chosen.
    pub policy: Policy,
    /// Segments at least this full (0 to 1) are left alone.
    pub max_utilization: f64,
}

impl Default for CleanOrder {
    fn default() -> Self {
        CleanOrder { segments: None, policy: Policy::CostBenefit, max_utilization: DEFAULT_MAX_UTILIZATION }
    }
}

/// The name of a policy on the command line and in requests.
#[must_use]
pub fn policy_name(p: Policy) -> &'static str {
    match p {
        Policy::CostBenefit => "cost-benefit",
        Policy::Greedy => "greedy",
    }
}

/// A policy from its name.
///
/// # Errors
/// An unknown name.
pub fn parse_policy(s: &str) -> Result<Policy, String> {
    match s {
        "cost-benefit" => Ok(Policy::CostBenefit),
        "greedy" => Ok(Policy::Greedy),
        _ => Err(format!("unknown policy {s:?} (cost-benefit or greedy)")),
    }
}

impl CleanOrder {
    /// Reads a request.
    ///
    /// # Errors
    /// An unknown key, a value out of range, or not `key=value`.
    pub fn parse(s: &str) -> Result<CleanOrder, String> {
        let mut o = CleanOrder::default();
        for item in s.split([' ', ',', '\n']).filter(|i| !i.is_empty()) {
            let Some((k, v)) = item.split_once('=') else {
                return Err(format!("{item:?} is not key=value"));
            };
            match k {
                "segments" => o.segments = Some(v.parse().map_err(|_| format!("segments={v}: not a count"))?),
                "policy" => o.policy = parse_policy(v)?,
                "max_utilization" => {
                    let f: f64 = v.parse().map_err(|_| format!("max_utilization={v}: not a number"))?;
                    if !(0.0..=1.0).contains(&f) {
                        return Err(format!("max_utilization={v}: must be between 0 and 1"));
                    }
                    o.max_utilization = f;
                }
                _ => return Err(format!("unknown key {k:?} (segments, policy, max_utilization)")),
            }
        }
        Ok(o)
    }

    /// The engine's request.
    #[must_use]
    pub fn request(&self) -> CleanRequest {
        CleanRequest {
            max_segments: self.segments.unwrap_or(usize::MAX),
            policy: self.policy,
            max_utilization: self.max_utilization,
            free_now: true,
        }
    }
}

impl fmt::Display for CleanOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = self.segments {
            write!(f, "segments={n} ")?;
        }
        write!(f, "policy={} max_utilization={}", policy_name(self.policy), self.max_utilization)
    }
}

/// A report as `dualfs clean --json` prints it, mounted or not.
#[must_use]
pub fn report_json(r: &CleanReport) -> Value {
    json!({
        "segments_read": r.cleaner.segments_read,
        "descriptor_blocks_read": r.cleaner.blocks_read,
        "nodes_moved": r.cleaner.nodes_moved,
        "inodes_moved": r.cleaner.inodes_moved,
        "ifile_blocks_moved": r.cleaner.ifile_blocks_moved,
        "segments_freed": r.cleaner.segments_freed,
        "bytes_written": r.blocks_written * dualfs_engine::types::BLOCK_BYTES,
        "micros": r.micros,
    })
}

/// Set to a name: makes a snapshot of the mounted volume by that name.
pub const SNAPSHOT_CREATE: &str = "dualfs.snapshot.create";
/// Set to a name: deletes that snapshot.
pub const SNAPSHOT_DELETE: &str = "dualfs.snapshot.delete";
/// Read: the snapshots, as [`snapshots_json`] writes them.
pub const SNAPSHOTS: &str = "dualfs.snapshots";
/// Set to `SOURCE/NAME` (`/` is in no snapshot name): makes `NAME` a
/// writable clone of snapshot `SOURCE`.
pub const CLONE_CREATE: &str = "dualfs.clone.create";
/// Read: the live tree's name, as a JSON string.
pub const TREE: &str = "dualfs.tree";
/// Read: the data space each tree and snapshot holds, as [`trees_json`]
/// writes it.
pub const TREES: &str = "dualfs.trees";

/// The snapshots as `dualfs snapshot list --json` prints them (one shape
/// whether the volume is mounted or not).
#[must_use]
pub fn snapshots_json(list: &[dualfs_engine::volume::SnapshotView]) -> Value {
    Value::Array(
        list.iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "name": s.name,
                    "created": s.created.sec,
                    "created_nsec": s.created.nsec,
                    "checkpoint": s.checkpoint,
                    "data_only_bytes": s.data_only_bytes,
                    "data_shared_bytes": s.data_shared_bytes,
                    "meta_only_bytes": s.meta_only_bytes,
                    "meta_blocks": s.meta_blocks,
                    "kind": if s.writable { "clone" } else { "snapshot" },
                })
            })
            .collect(),
    )
}

/// The live tree, then every snapshot and kept tree, with the data space
/// only it holds and the space it shares (`Volume::tree_spaces`).
#[must_use]
pub fn trees_json(trees: &[dualfs_engine::volume::TreeSpace]) -> Value {
    use dualfs_engine::volume::TreeKind;
    Value::Array(
        trees
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "kind": match t.kind {
                        TreeKind::Live => "live",
                        TreeKind::Clone => "clone",
                        TreeKind::Snapshot => "snapshot",
                    },
                    "data_only_bytes": t.only_bytes,
                    "data_shared_bytes": t.shared_bytes,
                    "referenced_bytes": t.referenced_bytes(),
                })
            })
            .collect(),
    )
}

/// The engine's counters as a JSON object, and the adapter's requests
/// per opcode under `fuse_requests`.
#[must_use]
pub fn stats_json(vol: &Volume, requests: &crate::requests::RequestStats) -> Value {
    let mut map: serde_json::Map<String, Value> =
        vol.stats().into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    // Why the volume refuses changes, when a device error made it so.
    map.insert("failed".into(), json!(vol.failure()));
    // A device running low, a receive under way, in words (empty when none is).
    let mut warnings = vol.space_warnings();
    if let Some(mark) = vol.receive_pending() {
        warnings.push(format!(
            "a receive is under way ({}): the tree is incomplete until it is finished (receive the same stream \
             again) or abandoned (`dualfs receive --abort`)",
            dualfs_engine::volume::describe_mark(&mark)
        ));
    }
    map.insert("warnings".into(), json!(warnings));
    map.insert("fuse_requests".into(), requests.json());
    Value::Object(map)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The control attributes' state: at most one cleaning run at a time.
#[derive(Debug)]
pub struct Control {
    cleaning: Job<CleanReport>,
    owner_uid: u32,
    /// The latest resize's outcome ([`resize_json`]); null before one.
    resized: Mutex<Value>,
}

impl Control {
    /// Control of a volume mounted by `owner_uid`.
    #[must_use]
    pub fn new(owner_uid: u32) -> Control {
        Control { cleaning: Job::new("cleaning", "clean"), owner_uid, resized: Mutex::new(Value::Null) }
    }

    /// Resizes the volume as the request text `value` says, synchronously
    /// (a grow writes a few superblocks and checkpoints), and keeps the
    /// outcome for [`Control::resize_status`].
    ///
    /// # Errors
    /// EINVAL for a bad request or a resize that cannot be done (the
    /// reason is in the status), the errno of a device failure.
    pub fn resize(&self, vol: &Volume, value: &[u8]) -> Result<(), Errno> {
        let text = std::str::from_utf8(value).map_err(|_| Errno::EINVAL)?;
        let (out, errno) = match parse_resize(text) {
            Err(e) => (Err(e), Some(Errno::EINVAL)),
            Ok(req) => match vol.resize_with_progress(req, &mut |done, total| {
                *lock(&self.resized) = json!({ "state": "running", "done": done, "total": total });
            }) {
                Ok(r) => (Ok(r), None),
                Err(e) => {
                    log::warn!("resize {text}: {e}");
                    (Err(e.to_string()), Some(Errno::from_i32(e.errno())))
                }
            },
        };
        *lock(&self.resized) = resize_json(&out);
        errno.map_or(Ok(()), Err)
    }

    /// The latest resize's outcome, as JSON bytes.
    #[must_use]
    pub fn resize_status(&self) -> Vec<u8> {
        lock(&self.resized).to_string().into_bytes()
    }

    /// Whether `uid` may use the control attributes.
    #[must_use]
    pub fn allowed(&self, uid: u32) -> bool {
        uid == 0 || uid == self.owner_uid
    }

    /// Starts a cleaning run in the background.
    ///
    /// # Errors
    /// EBUSY while a run goes on, EINVAL for a bad request, EAGAIN if no
    /// thread can be started.
    pub fn start_clean(&self, vol: &Arc<Volume>, value: &[u8]) -> Result<(), Errno> {
        let text = std::str::from_utf8(value).map_err(|_| Errno::EINVAL)?;
        let order = CleanOrder::parse(text).map_err(|e| {
            log::warn!("{CLEAN}: {e}");
            Errno::EINVAL
        })?;
        let req = order.request();
        // (A usage table that cannot be read fails the run itself.)
        let total = vol.cleanable_segments(&req).unwrap_or(0) as u64;
        let vol = vol.clone();
        self.cleaning.start(order.to_string(), total, move |progress| {
            log::info!("cleaning: {order}");
            let report = vol
                .clean_in_passes(req, &mut |done, total| progress(done as u64, total as u64))
                .map_err(|e| e.to_string())?;
            log::info!("cleaned {} segments, freed {}", report.cleaner.segments_read, report.cleaner.segments_freed);
            Ok(report)
        })
    }

    /// The state of the latest run, as JSON text.
    #[must_use]
    pub fn clean_status(&self) -> Vec<u8> {
        self.cleaning.json(|r| report_json(r.unwrap_or(&CleanReport::default())))
    }

    /// Asks a running clean to stop after its current pass.
    pub fn stop_clean(&self) {
        self.cleaning.stop();
    }

    /// Remounts the volume read-only or read-write. A clean that runs is
    /// stopped first: it is a change like any other.
    ///
    /// # Errors
    /// EROFS when the volume cannot become writable (`writable` says the
    /// devices were opened read-only, or the engine refuses), EIO when the
    /// final commit fails.
    pub fn remount(&self, vol: &Volume, read_only: bool, writable: bool) -> Result<Vec<u8>, Errno> {
        if read_only {
            self.shutdown();
        } else if !writable {
            log::warn!("cannot remount read-write: the devices were opened read-only");
            return Err(Errno::EROFS);
        }
        match vol.set_read_only(read_only) {
            Ok(()) => {
                log::info!("remounted {}", if read_only { "read-only" } else { "read-write" });
                Ok(mode_json(vol).to_string().into_bytes())
            }
            Err(e) => {
                log::error!("remount {}: {e}", if read_only { "read-only" } else { "read-write" });
                Err(Errno::from_i32(e.errno()))
            }
        }
    }

    /// Stops a running clean and waits for it, so that the volume can be
    /// closed (at unmount).
    pub fn shutdown(&self) {
        self.cleaning.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_requests_round_trip_through_their_text() {
        for req in [
            ResizeRequest::default(),
            ResizeRequest { meta_blocks: Some(4096), data_blocks: None },
            ResizeRequest { meta_blocks: Some(WHOLE_DEVICE), data_blocks: Some(1 << 20) },
        ] {
            assert_eq!(parse_resize(&resize_order(&req)), Ok(req));
        }
        assert!(parse_resize("meta=lots").is_err());
        assert!(parse_resize("size=1").is_err());
    }

    #[test]
    fn a_clean_order_reads_back_what_it_prints() {
        let o = CleanOrder { segments: Some(4), policy: Policy::Greedy, max_utilization: 0.5 };
        assert_eq!(CleanOrder::parse(&o.to_string()), Ok(o));
        assert_eq!(CleanOrder::parse(""), Ok(CleanOrder::default()));
        assert_eq!(CleanOrder::parse("segments=3,policy=cost-benefit").map(|o| o.segments), Ok(Some(3)));
        assert!(CleanOrder::parse("segments=x").is_err());
        assert!(CleanOrder::parse("max_utilization=1.5").is_err());
        assert!(CleanOrder::parse("colour=blue").is_err());
        assert!(CleanOrder::parse("greedy").is_err());
    }
}

/// The control attributes as requests: the adapter's side.
mod requests {
    use dualfs_engine::types::InodeNo;

    use crate::answers::{Caller, Errno};
    use crate::control;
    use crate::ops::report;

    impl crate::DualFs {
        /// Whether a request is for a control attribute: a `dualfs.` name on
        /// the root directory.
        pub(crate) fn is_control(node: u64, n: &[u8]) -> bool {
            InodeNo(node) == InodeNo::ROOT && n.starts_with(control::PREFIX.as_bytes())
        }

        pub(crate) fn control_get(&self, caller: Caller, n: &[u8]) -> Result<Vec<u8>, Errno> {
            if !self.control.allowed(caller.uid) {
                if n == control::QUOTA.as_bytes() {
                    let gids = crate::caller::groups(caller);
                    return Ok(control::own_quota_json(&self.vol, caller.uid, &gids).to_string().into_bytes());
                }
                return Err(Errno::EPERM);
            }
            match n {
                b if b == control::CLEAN.as_bytes() => Ok(self.control.clean_status()),
                b if b == control::STATS.as_bytes() => {
                    Ok(control::stats_json(&self.vol, &self.requests).to_string().into_bytes())
                }
                b if b == control::MODE.as_bytes() => Ok(control::mode_json(&self.vol).to_string().into_bytes()),
                b if b == control::SNAPSHOTS.as_bytes() => {
                    Ok(control::snapshots_json(&self.vol.snapshot_list()).to_string().into_bytes())
                }
                b if b == control::RESIZE.as_bytes() => Ok(self.control.resize_status()),
                b if b == control::QUOTA.as_bytes() => Ok(control::quota_json(&self.vol).to_string().into_bytes()),
                b if b == crate::receive::RECEIVE.as_bytes() => Ok(self.receiver.status()),
                b if b == crate::migrate::MIGRATE.as_bytes() => Ok(self.migrator.status()),
                b if b == crate::mirror::MIRROR.as_bytes() => Ok(self.mirrorer.status()),
                b if b == crate::scrub::SCRUB.as_bytes() => Ok(self.scrubber.status()),
                b if b == control::TREES.as_bytes() => {
                    Ok(control::trees_json(&self.vol.tree_spaces()).to_string().into_bytes())
                }
                b if b == control::TREE.as_bytes() => {
                    Ok(serde_json::json!(self.vol.live_tree()).to_string().into_bytes())
                }
                b if b == control::REMOUNT_RO.as_bytes() => self.control.remount(&self.vol, true, true),
                b if b == control::REMOUNT_RW.as_bytes() => {
                    self.control.remount(&self.vol, false, self.options.devices_writable)
                }
                _ => Err(Errno::NO_XATTR),
            }
        }

        pub(crate) fn control_set(&self, caller: Caller, n: &[u8], value: Option<&[u8]>) -> Result<(), Errno> {
            if n == control::SYNC.as_bytes() && value.is_some() {
                // sync(2) never reaches a FUSE server (FUSE_SYNCFS is sent to
                // virtiofs only): this is its stand-in, as open to users as it.
                return self.vol.sync().map_err(|e| report("sync", &e));
            }
            if !self.control.allowed(caller.uid) {
                return Err(Errno::EPERM);
            }
            match (n, value) {
                (b, Some(v)) if b == control::CLEAN.as_bytes() => self.control.start_clean(&self.vol, v),
                (b, Some(v)) if b == control::RESIZE.as_bytes() => self.control.resize(&self.vol, v),
                (b, Some(v)) if b == control::QUOTA.as_bytes() => {
                    let text = std::str::from_utf8(v).map_err(|_| Errno::EINVAL)?;
                    let req = control::QuotaRequest::parse(text).map_err(|_| Errno::EINVAL)?;
                    req.apply(&self.vol).map_err(|e| report("quota", &e))
                }
                (b, Some(v)) if b == crate::migrate::MIGRATE.as_bytes() => self.migrator.migrate(&self.vol, v),
                (b, Some(v)) if b == crate::mirror::MIRROR.as_bytes() => self.mirrorer.change(&self.vol, v),
                (b, Some(v)) if b == crate::receive::RECEIVE.as_bytes() => {
                    self.receiver.start(&self.vol, self.tree.as_ref().map(|(t, _)| t.as_str()), &self.notifier, v)
                }
                (b, None) if b == control::CLEAN.as_bytes() => {
                    self.control.stop_clean();
                    Ok(())
                }
                (b, Some(v)) if b == crate::scrub::SCRUB.as_bytes() => self.scrubber.start(&self.vol, v),
                (b, None) if b == crate::scrub::SCRUB.as_bytes() => {
                    self.scrubber.stop();
                    Ok(())
                }
                (b, Some(v))
                    if b == control::SNAPSHOT_CREATE.as_bytes() || b == control::SNAPSHOT_DELETE.as_bytes() =>
                {
                    let name = std::str::from_utf8(v).map_err(|_| Errno::EINVAL)?;
                    let done = if b == control::SNAPSHOT_CREATE.as_bytes() {
                        self.vol.snapshot_create(name).map(|_| ())
                    } else {
                        self.vol.snapshot_delete(name)
                    };
                    done.map_err(|e| report("snapshot", &e))
                }
                (b, Some(v)) if b == control::CLONE_CREATE.as_bytes() => {
                    let text = std::str::from_utf8(v).map_err(|_| Errno::EINVAL)?;
                    let (source, name) = text.split_once('/').ok_or(Errno::EINVAL)?;
                    self.vol.clone_create(source, name).map(|_| ()).map_err(|e| report("clone", &e))
                }
                // Read-only attributes, and names that are not there.
                (b, _)
                    if [
                        control::STATS,
                        control::MODE,
                        control::REMOUNT_RO,
                        control::REMOUNT_RW,
                        control::SNAPSHOTS,
                        control::TREE,
                        control::TREES,
                    ]
                    .iter()
                    .any(|n| n.as_bytes() == b) =>
                {
                    Err(Errno::EPERM)
                }
                _ => Err(Errno::NO_XATTR),
            }
        }
    }
}

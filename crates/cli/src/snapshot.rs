//! `dualfs snapshot create|list|delete|show`: on a mounted volume through
//! its control attributes (the serving process makes the snapshot), on an
//! unmounted one in this process. Both answer with the same JSON.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use dualfs_engine::Volume;
use dualfs_engine::format::snapshot::DEFAULT_TREE;
use dualfs_engine::types::Timestamp;
use dualfs_engine::volume::MountOptions;
use dualfs_fuse::control;
use rustix::fs::XattrFlags;
use serde_json::Value;

use crate::args::{CloneArgs, SnapshotAction, SnapshotArgs};
use crate::control::Mounted;
use crate::devices::Access;
use crate::words::human_bytes;

/// Where the command is to act.
pub(crate) enum Target {
    Mounted(Mounted),
    Devices(PathBuf, PathBuf),
}

/// Splits the positional words: `MOUNTPOINT`, `META DATA` or `META#DATA`,
/// then the snapshot's name when the action takes one.
pub(crate) fn target(words: &[PathBuf], takes_name: bool) -> Result<(Target, Option<String>)> {
    let (place, name) = if takes_name {
        let Some((name, place)) = words.split_last() else { bail!("give the volume and the snapshot's name") };
        (place, Some(name.to_string_lossy().into_owned()))
    } else {
        (words, None)
    };
    if let [one] = place {
        crate::itself::refuse_dead_mount(one)?;
    }
    let t = match place {
        [one] if one.is_dir() => Target::Mounted(Mounted::find(one)?),
        [one] => {
            let (m, d) = crate::devices::split_source(&one.to_string_lossy(), None)?;
            Target::Devices(m, d)
        }
        [m, d] => {
            let (m, d) = crate::devices::named(m, Some(d))?;
            Target::Devices(m, d)
        }
        _ => bail!("give a mount point, or the meta-data and data devices (META DATA or META#DATA)"),
    };
    Ok((t, name))
}

fn open(meta: &Path, data: &Path, write: bool) -> Result<Volume> {
    let access = if write { Access::Exclusive } else { Access::Shared };
    let options = MountOptions { read_only: !write, ..MountOptions::default() };
    crate::devices::open_volume(meta, data, access, options)
}

fn list(t: &Target) -> Result<Value> {
    Ok(listing(t, false)?.0)
}

/// The snapshots and kept trees, the live tree's name and, when `space`,
/// the data space each tree holds (none from a serving process that does
/// not say).
fn listing(t: &Target, space: bool) -> Result<(Value, String, Option<Value>)> {
    match t {
        Target::Mounted(mnt) => {
            let tree = mnt.get(control::TREE)?.as_str().unwrap_or(DEFAULT_TREE).to_string();
            let trees = if space { mnt.get(control::TREES).ok() } else { None };
            Ok((mnt.get(control::SNAPSHOTS)?, tree, trees))
        }
        Target::Devices(m, d) => {
            let vol = open(m, d, false)?;
            let trees = space.then(|| control::trees_json(&vol.tree_spaces()));
            Ok((control::snapshots_json(&vol.snapshot_list()), vol.live_tree(), trees))
        }
    }
}

/// What `snapshot list` shows: the live tree first (kind `live`, with the
/// data only it holds and what it shares), then each snapshot and kept
/// tree, each with every byte of data it reaches (`referenced_bytes`).
fn with_live_tree(snapshots: Value, trees: Option<&Value>) -> Value {
    let mut rows: Vec<Value> =
        trees.and_then(Value::as_array).into_iter().flatten().filter(|t| t["kind"] == "live").cloned().collect();
    for mut s in snapshots.as_array().cloned().unwrap_or_default() {
        let referenced = s["data_only_bytes"].as_u64().unwrap_or(0) + s["data_shared_bytes"].as_u64().unwrap_or(0);
        if let Some(o) = s.as_object_mut() {
            o.insert("referenced_bytes".into(), referenced.into());
        }
        rows.push(s);
    }
    Value::Array(rows)
}

/// Makes or deletes a snapshot. A mounted volume's serving process says
/// only an errno: the reasons it may give are checked here first.
fn change(t: &Target, name: &str, create: bool) -> Result<()> {
    if let Some(why) = dualfs_engine::format::snapshot::bad_name(name) {
        bail!("{why}");
    }
    let devices = match t {
        Target::Mounted(mnt) => crate::mountinfo::devices_of(mnt.root()),
        Target::Devices(m, d) => Some((m.clone(), d.clone())),
    };
    if !create
        && let Some((m, d)) = devices
        && let Some(at) = snapshot_mount(&m, &d, name)
    {
        bail!("snapshot {name} is mounted on {}: unmount it first", at.display());
    }
    match t {
        Target::Mounted(mnt) => {
            let known = list(t)?;
            refuse_while_receiving(mnt.root(), &known, name, create)?;
            let exists = known.as_array().into_iter().flatten().any(|s| s["name"] == name);
            if create && exists {
                bail!("a snapshot named {name} exists already on {}", mnt.root().display());
            }
            if !create && !exists {
                bail!("no snapshot named {name} on {}", mnt.root().display());
            }
            if create {
                // The kernel's cached writes go to the volume first, as
                // `dualfs sync` has them: the snapshot holds every write
                // made before the command.
                let dir = std::fs::File::open(mnt.root())?;
                rustix::fs::syncfs(std::os::fd::AsFd::as_fd(&dir))
                    .map_err(|e| anyhow!("writing the kernel's cached data of {}: {e}", mnt.root().display()))?;
            }
            let attr = if create { control::SNAPSHOT_CREATE } else { control::SNAPSHOT_DELETE };
            rustix::fs::setxattr(mnt.root(), attr, name.as_bytes(), XattrFlags::empty()).map_err(|e| {
                anyhow!(
                    "{} snapshot {name} on {}: {}",
                    if create { "making" } else { "deleting" },
                    mnt.root().display(),
                    std::io::Error::from(e)
                )
            })
        }
        Target::Devices(m, d) => {
            let vol = open(m, d, true)?;
            let done = if create { vol.snapshot_create(name).map(|_| ()) } else { vol.snapshot_delete(name) };
            done.map_err(|e| anyhow!("{e}"))?;
            vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))
        }
    }
}

/// What the serving process would refuse with EINVAL while a receive is
/// under way on the mount (its root's mark, readable by root), said plainly.
fn refuse_while_receiving(root: &Path, known: &Value, name: &str, create: bool) -> Result<()> {
    let mut buf = vec![0u8; 4096];
    let Ok(n) = rustix::fs::getxattr(root, "trusted.dualfs.receiving", &mut buf[..]) else { return Ok(()) };
    let mark = &buf[..n];
    let what = dualfs_engine::format::stream::describe_mark(mark);
    if create {
        bail!(
            "a receive is under way on {} ({what}) and its tree is incomplete: receive the same stream again to \
             finish it, or `dualfs receive --abort {}`, then make the snapshot",
            root.display(),
            root.display()
        );
    }
    let base = dualfs_engine::format::stream::mark_base(mark).ok().flatten();
    if base.is_some() && known.as_array().into_iter().flatten().any(|s| s["name"] == name && s["id"].as_u64() == base) {
        bail!(
            "{name} is the base of the receive under way on {} ({what}): finish or abandon the receive first",
            root.display()
        );
    }
    Ok(())
}

/// The same file or device, whatever path names it.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino(), x.rdev()) == (y.dev(), y.ino(), y.rdev()),
        _ => false,
    }
}

/// Where snapshot `name` of the volume on `meta` and `data` is mounted, if
/// it is (`dualfs mount -o snapshot=` names its source `META#DATA@NAME`):
/// deleting it would pull its blocks from under the mount.
fn snapshot_mount(meta: &Path, data: &Path, name: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    crate::mountinfo::parse_mountinfo(&text).into_iter().find_map(|e| {
        let (pair, snap) = e.source.rsplit_once('@')?;
        let (m, d) = pair.split_once('#')?;
        (e.fstype == "fuse.dualfs" && snap == name && same_file(Path::new(m), meta) && same_file(Path::new(d), data))
            .then_some(e.mountpoint)
    })
}

fn created(s: &Value) -> String {
    let t = Timestamp::new(s["created"].as_i64().unwrap_or(0), 0);
    // To the second: enough to tell snapshots apart in a table.
    crate::words::date(t).replace(".000000000", "")
}

/// `zfs list`'s columns: the space only it holds (what deleting it gives
/// back) and the space it shares, the live tree first.
fn table(v: &Value, tree: &str) -> String {
    let mut o = String::new();
    if tree != DEFAULT_TREE {
        let _ = writeln!(o, "live tree: {tree}");
    }
    let rows = v.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        o.push_str("no snapshots\n");
        return o;
    }
    let width = rows.iter().filter_map(|s| s["name"].as_str()).map(str::len).max().unwrap_or(4).max(4);
    let _ = writeln!(o, "{:<width$}  {:<8}  {:<23}  {:>12}  {:>12}", "NAME", "KIND", "CREATED", "ONLY IT", "SHARED");
    for s in rows {
        let only = s["data_only_bytes"].as_u64().unwrap_or(0) + s["meta_only_bytes"].as_u64().unwrap_or(0);
        let _ = writeln!(
            o,
            "{:<width$}  {:<8}  {:<23}  {:>12}  {:>12}",
            s["name"].as_str().unwrap_or("?"),
            s["kind"].as_str().unwrap_or("?"),
            if s["kind"] == "live" { "-".to_string() } else { created(&s) },
            human_bytes(only),
            human_bytes(s["data_shared_bytes"].as_u64().unwrap_or(0)),
        );
    }
    o
}

fn show(s: &Value) -> String {
    format!(
        "name            {}\nkind            {}\nid              {}\ncreated         {}\ncheckpoint      {}\nonly it holds   {} of data, {} of \
         meta-data segments\nshared          {} of data\nmeta-data       {} blocks reached\n",
        s["name"].as_str().unwrap_or("?"),
        s["kind"].as_str().unwrap_or("?"),
        s["id"],
        created(s),
        s["checkpoint"],
        human_bytes(s["data_only_bytes"].as_u64().unwrap_or(0)),
        human_bytes(s["meta_only_bytes"].as_u64().unwrap_or(0)),
        human_bytes(s["data_shared_bytes"].as_u64().unwrap_or(0)),
        s["meta_blocks"],
    )
}

/// Runs `dualfs snapshot`.
///
/// # Errors
/// The volume cannot be reached or opened, the name is bad or taken (or
/// unknown), or a device fails.
pub fn run(args: &SnapshotArgs) -> Result<()> {
    match &args.action {
        SnapshotAction::List { target: words, json } => {
            let (t, _) = target(words, false)?;
            let (v, tree, trees) = listing(&t, true)?;
            let v = with_live_tree(v, trees.as_ref());
            if *json {
                println!("{v}");
            } else {
                print!("{}", table(&v, &tree));
            }
        }
        SnapshotAction::Show { target: words, json } => {
            let (t, name) = target(words, true)?;
            let name = name.unwrap_or_default();
            let v = list(&t)?;
            let Some(s) = v.as_array().into_iter().flatten().find(|s| s["name"] == name.as_str()).cloned() else {
                bail!("no snapshot named {name}");
            };
            if *json {
                println!("{s}");
            } else {
                print!("{}", show(&s));
            }
        }
        SnapshotAction::Create { target: words } | SnapshotAction::Delete { target: words } => {
            let create = matches!(args.action, SnapshotAction::Create { .. });
            let (t, name) = target(words, true)?;
            let name = name.unwrap_or_default();
            change(&t, &name, create)?;
            println!("{} snapshot {name}", if create { "made" } else { "deleted" });
        }
    }
    Ok(())
}

/// Runs `dualfs clone VOLUME SNAPSHOT NAME`.
///
/// # Errors
/// The volume cannot be reached or opened, a name is bad or taken, there
/// is no such snapshot, or a device fails.
pub fn clone(args: &CloneArgs) -> Result<()> {
    let Some((names, place)) = args.target.split_last_chunk::<2>().map(|(p, n)| (n, p)) else {
        bail!("give the volume, the snapshot and the clone's name");
    };
    let [source, name] = names.each_ref().map(|p| p.to_string_lossy().into_owned());
    if let Some(why) = dualfs_engine::format::snapshot::bad_name(&name) {
        bail!("{why}");
    }
    let (t, _) = target(place, false)?;
    match &t {
        Target::Mounted(mnt) => {
            let known = list(&t)?;
            if !known.as_array().into_iter().flatten().any(|s| s["name"] == source.as_str()) {
                bail!("no snapshot named {source} on {}", mnt.root().display());
            }
            if known.as_array().into_iter().flatten().any(|s| s["name"] == name.as_str()) {
                bail!("a snapshot or tree named {name} exists already on {}", mnt.root().display());
            }
            let order = format!("{source}/{name}");
            rustix::fs::setxattr(mnt.root(), control::CLONE_CREATE, order.as_bytes(), XattrFlags::empty()).map_err(
                |e| anyhow!("making clone {name} of {source} on {}: {}", mnt.root().display(), std::io::Error::from(e)),
            )?;
        }
        Target::Devices(m, d) => {
            let vol = open(m, d, true)?;
            vol.clone_create(&source, &name).map_err(|e| anyhow!("{e}"))?;
            vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))?;
        }
    }
    println!("made clone {name} of {source}: mount it with -o clone={name}");
    Ok(())
}

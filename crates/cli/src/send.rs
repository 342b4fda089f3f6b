//! `dualfs send` and `dualfs receive`: a snapshot, or what changed between
//! two, as a stream on standard output; and that stream applied to another
//! volume, mounted (through the serving process's control attribute
//! `dualfs.receive`) or not.

use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use dualfs_engine::volume::{AbortReport, MountOptions, ReceiveReport, Touched};
use dualfs_fuse::receive::{ABORT, RECEIVE, abort_json, report_json};
use rustix::fs::XattrFlags;
use serde_json::Value;

use crate::args::{ReceiveArgs, SendArgs};
use crate::devices::{Access, open_pair};
use crate::mountinfo::devices_of;
use crate::snapshot::{Target, target};
use crate::words::human_bytes;

/// Runs `dualfs send`.
///
/// # Errors
/// No such snapshot or volume, a device fails, the output cannot be written.
pub fn send(args: &SendArgs) -> Result<()> {
    let Some((snap, place)) = args.target.split_first() else { bail!("give the snapshot and the volume") };
    let snap = snap.to_string_lossy().into_owned();
    let (meta, data) = match target(place, false)?.0 {
        Target::Mounted(m) => devices_of(m.root())
            .ok_or_else(|| anyhow!("cannot tell the devices of the volume mounted on {}", m.root().display()))?,
        Target::Devices(m, d) => (m, d),
    };
    if let Some(f) = &args.file {
        crate::itself::Itself::devices(&meta, &data).refuse(f, "the stream file")?;
    }
    let (m, d) = open_pair(&meta, &data, Access::Shared)?;
    let mut out: Box<dyn Write> = match &args.file {
        Some(p) => Box::new(File::create(p).with_context(|| format!("cannot create {}", p.display()))?),
        None if std::io::stdout().is_terminal() => {
            bail!("the stream is binary: send it to a file (--file) or a pipe, not a terminal")
        }
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, &mut out);
    let start = Instant::now();
    let r = dualfs_engine::volume::send(m, d, args.from.as_deref(), &snap, &mut out)
        .map_err(|e| anyhow!("sending snapshot {snap}: {e}"))?;
    out.flush().context("writing the stream")?;
    eprintln!(
        "sent {}{snap}: {} inodes changed, {} gone, {} of data, {} of stream in {:.2} s ({} inode-map blocks and {} \
         inodes compared)",
        args.from.as_ref().map(|f| format!("{f} -> ")).unwrap_or_default(),
        r.counts.inodes,
        r.counts.gone,
        human_bytes(r.counts.data_bytes),
        human_bytes(r.stream_bytes),
        start.elapsed().as_secs_f64(),
        r.map_blocks_compared,
        r.inodes_compared,
    );
    Ok(())
}

fn describe(v: &Value) -> String {
    format!(
        "received snapshot {}{}: {} inodes changed, {} gone, {} of data",
        v["snapshot"].as_str().unwrap_or("?"),
        if v["resumed"] == true { " (an interrupted receive finished)" } else { "" },
        v["inodes"],
        v["gone"],
        human_bytes(v["data_bytes"].as_u64().unwrap_or(0)),
    )
}

fn describe_abort(v: &Value) -> String {
    let back = match v["base"].as_str() {
        Some(b) => format!("snapshot {b}"),
        None => "the empty volume it started from".to_string(),
    };
    format!(
        "abandoned the receive under way ({}): the tree is back to {back} ({} inodes brought back)",
        v["aborted"].as_str().unwrap_or("?"),
        v["inodes"]
    )
}

/// Runs `dualfs receive --abort`.
fn abort(args: &ReceiveArgs) -> Result<()> {
    let v = match target(&args.target, false)?.0 {
        Target::Mounted(m) => hand_over(m.root(), ABORT)?,
        Target::Devices(meta, data) => {
            let vol = crate::devices::open_volume(&meta, &data, Access::Exclusive, MountOptions::default())?;
            let out: Result<AbortReport, String> =
                vol.receive_abort(&mut Touched::default()).map_err(|e| e.to_string());
            vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))?;
            abort_json(&out)
        }
    };
    if v["state"] != "done" {
        bail!("{}", v["error"].as_str().unwrap_or("the abort failed"));
    }
    if args.json {
        say!("{v}");
    } else {
        say!("{}", describe_abort(&v));
    }
    Ok(())
}

/// Runs `dualfs receive`.
///
/// # Errors
/// The stream is refused or malformed, the volume cannot be reached, a
/// device fails.
pub fn receive(args: &ReceiveArgs) -> Result<()> {
    if args.abort {
        return abort(args);
    }
    if args.file.is_none() && std::io::stdin().is_terminal() {
        bail!("the stream comes from standard input (a pipe or a file), or from --file");
    }
    let v = match target(&args.target, false)?.0 {
        Target::Mounted(m) => receive_mounted(m.root(), args.file.as_deref())?,
        Target::Devices(meta, data) => {
            if let Some(f) = &args.file {
                crate::itself::Itself::devices(&meta, &data).refuse(f, "the stream file")?;
            }
            let vol = crate::devices::open_volume(&meta, &data, Access::Exclusive, MountOptions::default())?;
            let mut input: Box<dyn Read> = match &args.file {
                Some(p) => Box::new(File::open(p).with_context(|| format!("cannot open {}", p.display()))?),
                None => Box::new(std::io::stdin().lock()),
            };
            let out: Result<ReceiveReport, String> =
                vol.receive(&mut BufReader::with_capacity(1 << 20, &mut input)).map_err(|e| e.to_string());
            vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))?;
            report_json(&out)
        }
    };
    if v["state"] != "done" {
        bail!("{}", v["error"].as_str().unwrap_or("the receive failed"));
    }
    if args.json {
        say!("{v}");
    } else {
        say!("{}", describe(&v));
    }
    Ok(())
}

/// A file only this user may read, removed when dropped.
struct Spool(PathBuf);

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Hands the stream to the serving process: spooled to a file (unless it
/// is one already), named in the control attribute, then waited for.
fn receive_mounted(root: &Path, file: Option<&Path>) -> Result<Value> {
    let mut spool = None;
    let itself = crate::itself::Itself::mounted(root);
    let path = match file {
        Some(p) => {
            itself.refuse(p, "the stream file")?;
            std::fs::canonicalize(p).with_context(|| format!("cannot resolve {}", p.display()))?
        }
        None => {
            itself.refuse(&std::env::temp_dir().join("dualfs-receive"), "the spool file (in $TMPDIR)")?;
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let p = std::env::temp_dir().join(format!("dualfs-receive-{}-{}", std::process::id(), nanos.as_nanos()));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&p)
                .with_context(|| format!("cannot create {}", p.display()))?;
            spool = Some(Spool(p.clone()));
            std::io::copy(&mut std::io::stdin().lock(), &mut f).context("spooling the stream")?;
            f.sync_all().ok();
            p
        }
    };
    let v = hand_over(root, path.as_os_str().as_encoded_bytes())?;
    drop(spool);
    Ok(v)
}

/// Sets the control attribute to `value` (a stream's path, or `abort`) and
/// waits for the serving process's outcome.
fn hand_over(root: &Path, value: &[u8]) -> Result<Value> {
    rustix::fs::setxattr(root, RECEIVE, value, XattrFlags::empty()).map_err(|e| match e {
        rustix::io::Errno::BUSY => anyhow!("a receive is already running on {}", root.display()),
        rustix::io::Errno::PERM => {
            anyhow!("receiving on {}: only root and the user who mounted the volume may", root.display())
        }
        e => anyhow!("receiving on {}: {}", root.display(), std::io::Error::from(e)),
    })?;
    let mounted = crate::control::Mounted::find(root)?;
    loop {
        let v = mounted.get(RECEIVE)?;
        if v["state"] != "running" {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

//! `dualfs migrate`: move a volume's meta-data or data device to another,
//! unmounted in this process or mounted through its control attribute.
//! Both print the same report, built once as JSON.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use dualfs_engine::device::{BlockDevice, FileDevice};
use dualfs_engine::error::DeviceRole;
use dualfs_engine::types::BLOCK_BYTES;
use dualfs_engine::volume::MountOptions;
use dualfs_fuse::migrate::{DeviceOpener, MIGRATE, migrate_json, migrate_order};
use rustix::fs::XattrFlags;
use serde_json::{Value, json};

use crate::args::MigrateArgs;
use crate::control::Mounted;
use crate::devices::{Access, open_volume, split_source};
use crate::progress::unit_bar;
use crate::words::human_bytes;

/// Opens a device for the volume to move to: read-write, claimed against
/// every other writer (as a mount claims its devices), never waiting.
fn open_new(path: &Path, role: DeviceRole) -> Result<Arc<dyn BlockDevice>, String> {
    // As a mount opens its devices: the data device bypasses the page cache.
    let opened = match role {
        DeviceRole::Data => FileDevice::open_direct(path, false, true),
        DeviceRole::Meta => FileDevice::open(path, false, true),
    };
    let dev = opened.map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock => {
            format!("{} is in use: by this volume, or by another DualFS process", path.display())
        }
        io::ErrorKind::NotFound => format!("{}: no such file or device", path.display()),
        _ => format!("cannot open {} (the new {role}): {e}", path.display()),
    })?;
    crate::claim::claim(path, Arc::new(dev)).map_err(|e| format!("{}: {e}", path.display()))
}

/// The opener the mounting code gives the serving process of the mount on
/// `mountpoint` (canonical): it refuses a new device on that very volume,
/// which the process would write through its own mount.
pub fn opener(mountpoint: PathBuf) -> DeviceOpener {
    Arc::new(move |path: &Path, role: DeviceRole| {
        crate::itself::Itself::mounted(&mountpoint)
            .refuse(path, &format!("the new {} device", role_word(role)))
            .map_err(|e| format!("{e:#}"))?;
        open_new(path, role)
    })
}

fn role_word(role: DeviceRole) -> &'static str {
    match role {
        DeviceRole::Meta => "meta-data",
        DeviceRole::Data => "data",
    }
}

fn request(args: &MigrateArgs) -> Result<(DeviceRole, PathBuf)> {
    let (role, path) = match (&args.meta, &args.data) {
        (Some(m), None) => (DeviceRole::Meta, m),
        (None, Some(d)) => (DeviceRole::Data, d),
        _ => bail!("give one of --meta NEWDEV and --data NEWDEV: one device moves at a time"),
    };
    let path = std::fs::canonicalize(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok((role, path))
}

/// Migrates an unmounted volume; refuses one that is mounted (locked).
fn offline(meta: &Path, data: &Path, role: DeviceRole, new: &Path) -> Result<Value> {
    crate::itself::Itself::devices(meta, data).refuse(new, &format!("the new {} device", role_word(role)))?;
    let target = open_new(new, role).map_err(|e| anyhow!(e))?;
    let vol = open_volume(meta, data, Access::Exclusive, MountOptions::default())?;
    let bar = unit_bar("copying to the new device", 0, "MiB");
    let out = vol
        .migrate(role, target, &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })
        .map_err(|e| e.to_string());
    bar.finish_and_clear();
    vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))?;
    let (m, d) = match role {
        DeviceRole::Meta => (new, data),
        DeviceRole::Data => (meta, new),
    };
    let mut result = migrate_json(role, new, &out);
    result["meta_device"] = json!(m.display().to_string());
    result["data_device"] = json!(d.display().to_string());
    Ok(json!({ "mounted": false, "request": migrate_order(role, new), "result": result }))
}

/// Asks the mount's process to migrate, and waits.
fn mounted(target: &Path, role: DeviceRole, new: &Path) -> Result<Value> {
    let mnt = Mounted::find(target)?;
    crate::itself::Itself::mounted(mnt.root()).refuse(new, &format!("the new {} device", role_word(role)))?;
    let order = migrate_order(role, new);
    let root = mnt.root().to_path_buf();
    let value = order.clone();
    let worker = thread::spawn(move || rustix::fs::setxattr(&root, MIGRATE, value.as_bytes(), XattrFlags::empty()));
    let bar = unit_bar("copying to the new device", 0, "MiB");
    while !worker.is_finished() {
        if let Ok(s) = mnt.get(MIGRATE)
            && s["state"] == "running"
        {
            bar.set_length(s["total"].as_u64().unwrap_or(0));
            bar.set_position(s["done"].as_u64().unwrap_or(0));
        }
        // Short: the answer is waited for here, and a migration may take well
        // under a second.
        thread::sleep(Duration::from_millis(20));
    }
    bar.finish_and_clear();
    let r = worker.join().map_err(|_| anyhow!("the migrate request's thread panicked"))?;
    let status = mnt.get(MIGRATE)?;
    if let Err(e) = r
        && status["error"].is_null()
    {
        if e == rustix::io::Errno::BUSY {
            bail!("a migration is already running on {}", mnt.root().display());
        }
        bail!("migrating {}: {}", mnt.root().display(), io::Error::from(e));
    }
    Ok(json!({ "mounted": true, "request": order, "result": status }))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The report in plain words.
fn text(r: &Value, mounted: bool) -> String {
    let which = if r["device"] == "meta" { "meta-data" } else { "data" };
    let mut o = format!("migrated the {which} device to {}:\n", r["new_device"].as_str().unwrap_or("?"));
    o.push_str(&format!("  copied     {}\n", human_bytes(u(&r["copied_blocks"]) * BLOCK_BYTES)));
    o.push_str(&format!(
        "  mirrored   {} written to both devices while the copy ran\n",
        human_bytes(u(&r["mirrored_blocks"]) * BLOCK_BYTES)
    ));
    o.push_str(&format!("  took       {:.1} s\n", u(&r["micros"]) as f64 / 1e6));
    o.push_str(&format!("  new uuid   {}\n", r["new_uuid"].as_str().unwrap_or("?")));
    if mounted {
        o.push_str(&format!(
            "the old {which} device no longer pairs with the volume; after unmounting, mount with the new one"
        ));
    } else {
        o.push_str(&format!(
            "the volume is now {} and {}; the old {which} device no longer pairs with it",
            r["meta_device"].as_str().unwrap_or("?"),
            r["data_device"].as_str().unwrap_or("?")
        ));
    }
    o
}

/// Runs `dualfs migrate`.
///
/// # Errors
/// The volume or new device cannot be opened or reached, the migration
/// cannot be done (the reason said plainly), or a device fails.
pub fn run(args: &MigrateArgs) -> Result<()> {
    crate::itself::refuse_dead_mount(&args.target)?;
    let (role, new) = request(args)?;
    let value = match &args.data_device {
        Some(data) => offline(&args.target, data, role, &new)?,
        None if args.target.is_dir() => mounted(&args.target, role, &new)?,
        None => {
            let (meta, data): (PathBuf, PathBuf) = split_source(&args.target.to_string_lossy(), None)?;
            offline(&meta, &data, role, &new)?
        }
    };
    if let Some(e) = value["result"]["error"].as_str() {
        bail!("{e}");
    }
    if args.json {
        say!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        say!("{}", text(&value["result"], value["mounted"] == true));
    }
    Ok(())
}

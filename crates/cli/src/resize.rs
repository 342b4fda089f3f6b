//! `dualfs resize`: grow a volume after its devices grew, unmounted in this
//! process or mounted through its control attribute. Both print the same
//! report, built once as JSON.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use dualfs_engine::types::BLOCK_BYTES;
use dualfs_engine::volume::{MountOptions, ResizeRequest, WHOLE_DEVICE};
use dualfs_fuse::control::{self, parse_resize, resize_json, resize_order};
use rustix::fs::XattrFlags;
use serde_json::{Value, json};

use crate::args::ResizeArgs;
use crate::control::Mounted;
use crate::devices::{Access, open_volume, split_source};
use crate::progress::unit_bar;
use crate::words::human_bytes;

/// Resizes an unmounted volume; refuses one that is mounted (locked).
fn offline(meta: &Path, data: &Path, req: ResizeRequest) -> Result<Value> {
    let vol = open_volume(meta, data, Access::Exclusive, MountOptions::default())?;
    let bar = unit_bar("moving what lies past the new end", 0, units(&req));
    let out = vol
        .resize_with_progress(req, &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })
        .map_err(|e| e.to_string());
    bar.finish_and_clear();
    vol.close().map_err(|e| anyhow!("cannot close the volume cleanly: {e}"))?;
    Ok(json!({ "mounted": false, "request": resize_order(&req), "result": resize_json(&out) }))
}

/// Asks the mount's process to resize, and waits.
fn mounted(target: &Path, req: ResizeRequest) -> Result<Value> {
    let mnt = Mounted::find(target)?;
    let order = resize_order(&req);
    // The request answers when the resize is done; meanwhile its progress
    // (segments a shrink empties) is read from the same attribute.
    let root = mnt.root().to_path_buf();
    let value = order.clone();
    let worker =
        thread::spawn(move || rustix::fs::setxattr(&root, control::RESIZE, value.as_bytes(), XattrFlags::empty()));
    let bar = unit_bar("moving what lies past the new end", 0, units(&req));
    while !worker.is_finished() {
        if let Ok(s) = mnt.get(control::RESIZE)
            && s["state"] == "running"
        {
            bar.set_length(s["total"].as_u64().unwrap_or(0));
            bar.set_position(s["done"].as_u64().unwrap_or(0));
        }
        thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
    let r = worker.join().map_err(|_| anyhow!("the resize request's thread panicked"))?;
    let status = mnt.get(control::RESIZE)?;
    if let Err(e) = r
        && status["error"].is_null()
    {
        bail!("resizing {}: {}", mnt.root().display(), std::io::Error::from(e));
    }
    Ok(json!({ "mounted": true, "request": order, "result": status }))
}

/// What the progress bar counts: segments of a log shrink, then MiB of a
/// data shrink.
fn units(req: &ResizeRequest) -> &'static str {
    match (req.meta_blocks.is_some(), req.data_blocks.is_some()) {
        (true, true) => "segments, then MiB",
        (false, true) => "MiB",
        _ => "segments",
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The report in plain words.
fn text(r: &Value) -> String {
    let (s0, s1) = (u(&r["segments_before"]), u(&r["segments_after"]));
    let (d0, d1) = (u(&r["data_blocks_before"]), u(&r["data_blocks_after"]));
    if s0 == s1 && d0 == d1 {
        return format!(
            "nothing to do: the volume already uses {} segments and {} of data",
            s0,
            human_bytes(d0 * BLOCK_BYTES)
        );
    }
    let mut o = String::from("resized:\n");
    o.push_str(&format!("  log          {s0} to {s1} segments\n"));
    o.push_str(&format!("  data space   {} to {}\n", human_bytes(d0 * BLOCK_BYTES), human_bytes(d1 * BLOCK_BYTES)));
    o.push_str(&format!("  written      {}", human_bytes(u(&r["meta_blocks_written"]) * BLOCK_BYTES)));
    if s1 < s0 {
        o.push_str(&format!(
            "\nthe meta-data device may now be cut to {} ({} bytes)",
            human_bytes(u(&r["meta_blocks"]) * BLOCK_BYTES),
            u(&r["meta_blocks"]) * BLOCK_BYTES
        ));
    }
    if u(&r["data_blocks_moved"]) > 0 {
        o.push_str(&format!(
            "\n  moved        {} of file data ({} files; finding them took {} ms)",
            human_bytes(u(&r["data_blocks_moved"]) * BLOCK_BYTES),
            u(&r["data_files_moved"]),
            u(&r["data_scan_ms"])
        ));
    }
    if d1 < d0 {
        o.push_str(&format!(
            "\nthe data device may now be cut to {} ({} bytes)",
            human_bytes(d1 * BLOCK_BYTES),
            d1 * BLOCK_BYTES
        ));
    }
    o
}

/// Runs `dualfs resize`.
///
/// # Errors
/// The volume cannot be opened or reached, the resize cannot be done (the
/// reason said plainly), or a device fails.
pub fn run(args: &ResizeArgs) -> Result<()> {
    let req = if args.meta.is_none() && args.data.is_none() {
        ResizeRequest { meta_blocks: Some(WHOLE_DEVICE), data_blocks: Some(WHOLE_DEVICE) }
    } else {
        ResizeRequest { meta_blocks: args.meta, data_blocks: args.data }
    };
    debug_assert_eq!(parse_resize(&resize_order(&req)), Ok(req));
    crate::itself::refuse_dead_mount(&args.target)?;
    let value = match &args.data_device {
        Some(data) => offline(&args.target, data, req)?,
        None if args.target.is_dir() => mounted(&args.target, req)?,
        None => {
            let (meta, data): (PathBuf, PathBuf) = split_source(&args.target.to_string_lossy(), None)?;
            offline(&meta, &data, req)?
        }
    };
    if let Some(e) = value["result"]["error"].as_str() {
        bail!("{e}");
    }
    if args.json {
        say!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        say!("{}", text(&value["result"]));
    }
    Ok(())
}

//! The DualFS mounts of this machine, from /proc/self/mountinfo: what
//! umount, sync, the control attributes and snapshots look up.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// One line of /proc/self/mountinfo.
#[derive(Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// File-system type, e.g. `fuse.dualfs`.
    pub fstype: String,
    /// The source, e.g. `/v/meta.img#/v/data.img`.
    pub source: String,
    /// The device number of the file system, `MAJOR:MINOR`: the same for
    /// every mount of one FUSE connection (a second mount of a volume).
    pub dev: String,
    /// Whether the file system is read-only (its super options say `ro`).
    pub read_only: bool,
}

/// Undoes the octal escapes (`\040` for a space) of /proc mount tables.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses the text of /proc/self/mountinfo.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let dev = left.split(' ').nth(2)?.to_string();
            let mountpoint = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let source = r.next()?;
            let read_only = r.next().is_some_and(|o| o.split(',').any(|w| w == "ro"));
            Some(MountEntry {
                mountpoint: PathBuf::from(unescape(mountpoint)),
                fstype: unescape(fstype),
                source: unescape(source),
                dev,
                read_only,
            })
        })
        .collect()
}

/// The meta-data device named by a `META#DATA` source.
pub fn meta_of_source(source: &str) -> Option<PathBuf> {
    let (meta, _) = source.split_once('#')?;
    Some(PathBuf::from(meta))
}

/// The data device named by a `META#DATA` source.
pub fn data_of_source(source: &str) -> Option<PathBuf> {
    let (_, data) = source.split_once('#')?;
    Some(PathBuf::from(data))
}

/// The devices of the volume mounted at `root`, from its source.
pub fn devices_of(root: &Path) -> Option<(PathBuf, PathBuf)> {
    let e = find(root).ok()?;
    let (m, d) = e.source.split_once('#')?;
    Some((PathBuf::from(m), PathBuf::from(d)))
}

/// The DualFS mount at `mountpoint` (an absolute path).
///
/// # Errors
/// Nothing is mounted there, or something other than DualFS is.
pub fn find(mountpoint: &Path) -> Result<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").context("cannot read /proc/self/mountinfo")?;
    // The last match is the mount on top.
    let Some(e) = parse_mountinfo(&text).into_iter().rev().find(|e| e.mountpoint == mountpoint) else {
        bail!("{} is not a mount point", mountpoint.display());
    };
    if e.fstype != "fuse.dualfs" {
        bail!("{} is a {} mount, not DualFS", mountpoint.display(), e.fstype);
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_mountpoint_type_and_source() {
        let text = "36 35 98:0 / /mnt/my\\040disk rw,noatime master:1 - fuse.dualfs /v/meta.img#/v/data.img rw,user_id=0\n\
                    25 1 8:1 / / rw - ext4 /dev/sda1 rw\n";
        let v = parse_mountinfo(text);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].mountpoint, PathBuf::from("/mnt/my disk"));
        assert_eq!(v[0].fstype, "fuse.dualfs");
        assert_eq!(meta_of_source(&v[0].source), Some(PathBuf::from("/v/meta.img")));
        assert_eq!(v[1].source, "/dev/sda1");
    }
}

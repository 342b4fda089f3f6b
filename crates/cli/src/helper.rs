//! Being called by other programs' conventions rather than by subcommand:
//!
//! - `mkfs.dualfs ARGS` is `dualfs mkfs ARGS` (mkfs(8) runs `mkfs.TYPE`),
//!   and `fsck.dualfs ARGS` is `dualfs fsck ARGS` (fsck(8) runs `fsck.TYPE`);
//! - `mount.fuse.dualfs SOURCE MOUNTPOINT [-o OPTS]` is what mount(8) runs
//!   for `mount -t fuse.dualfs` and for an fstab line of type `fuse.dualfs`;
//! - `dualfs SOURCE MOUNTPOINT -o OPTS` is what mount.fuse3 runs when it
//!   dispatches type `fuse.dualfs` (or the old `dualfs#SOURCE` form of type
//!   `fuse`) to a program named `dualfs`.
//!
//! SOURCE names both devices: `META#DATA`, or `META:DATA` when neither
//! path contains a colon, or just `META` with `-o data=DATA`. Either side
//! may be `UUID=…` or `LABEL=…`, and SOURCE may be one tag or one device
//! alone, whose partner is then looked for among the block devices.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use anyhow::{Result, bail};

use crate::args::MountArgs;

/// Whether `word` is one of `dualfs`'s own subcommands (taken from the
/// command line's definition, so that a new one is never mistaken for a
/// mount helper's SOURCE): anything else in first position makes the
/// command line a mount helper's.
fn is_own_word(word: &str) -> bool {
    use clap::CommandFactory;
    word == "help" || crate::args::Cli::command().get_subcommands().any(|c| c.get_name() == word)
}

/// How the program was called, from `argv[0]` and the first argument.
#[derive(Debug, PartialEq, Eq)]
pub enum Personality {
    /// The ordinary `dualfs SUBCOMMAND ...`.
    Dualfs,
    /// `mkfs.dualfs` or `fsck.dualfs`: the rest is that subcommand's arguments.
    Tool(&'static str),
    /// A mount helper: SOURCE MOUNTPOINT and mount(8)-style flags.
    MountHelper,
}

/// Decides the personality.
pub fn personality(argv: &[OsString]) -> Personality {
    let prog = argv.first().map(PathBuf::from).and_then(|p| p.file_name().map(OsStr::to_os_string)).unwrap_or_default();
    let prog = prog.to_string_lossy();
    if prog.starts_with("mkfs.") {
        return Personality::Tool("mkfs");
    }
    if prog.starts_with("fsck.") {
        return Personality::Tool("fsck");
    }
    if prog.starts_with("mount.") {
        return Personality::MountHelper;
    }
    match argv.get(1).map(|a| a.to_string_lossy()) {
        Some(first) if argv.len() >= 3 && !first.starts_with('-') && !is_own_word(&first) => Personality::MountHelper,
        _ => Personality::Dualfs,
    }
}

/// Reads a mount helper's command line: `SOURCE MOUNTPOINT` and the flags
/// mount(8) may add (`-o OPTS`, `-t TYPE`, `-n`, `-s`, `-v`, `-f`, `-N NS`).
///
/// # Errors
/// Missing SOURCE or MOUNTPOINT, or a SOURCE that does not name both devices.
pub fn mount_args(argv: &[OsString]) -> Result<MountArgs> {
    let mut positional: Vec<String> = Vec::new();
    let mut options: Vec<String> = Vec::new();
    let mut it = argv.iter().skip(1).map(|a| a.to_string_lossy().into_owned());
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => options.extend(it.next()),
            // The type is ours by construction; a namespace is not supported.
            "-t" | "-N" => {
                it.next();
            }
            // Sloppy, no-mtab, verbose; "fake" is not honoured: mount(8)
            // only passes it with -f, which users do not give to helpers.
            "-s" | "-n" | "-v" | "-f" => {}
            s if s.starts_with("-o") => options.push(s[2..].to_string()),
            _ => positional.push(a),
        }
    }
    let [source, mountpoint] = &positional[..] else {
        bail!("usage: mount.fuse.dualfs META#DATA MOUNTPOINT [-o OPTIONS]");
    };
    let data_option =
        options.iter().flat_map(|o| o.split(',')).find_map(|o| o.strip_prefix("data=")).map(str::to_string);
    let (meta, data) = crate::devices::split_source(source, data_option.as_deref())?;
    Ok(MountArgs { meta, data, mountpoint: PathBuf::from(mountpoint), foreground: false, options, daemon_child: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn argv0_and_first_argument_choose_the_personality() {
        assert_eq!(personality(&argv(&["/sbin/mkfs.dualfs", "a", "b"])), Personality::Tool("mkfs"));
        assert_eq!(personality(&argv(&["/sbin/fsck.dualfs", "-a", "a#b"])), Personality::Tool("fsck"));
        assert_eq!(personality(&argv(&["/sbin/mount.fuse.dualfs", "a#b", "/mnt"])), Personality::MountHelper);
        assert_eq!(personality(&argv(&["dualfs", "/v/m#/v/d", "/mnt", "-o", "rw"])), Personality::MountHelper);
        assert_eq!(personality(&argv(&["dualfs", "mount", "a", "b", "c"])), Personality::Dualfs);
        assert_eq!(personality(&argv(&["dualfs", "clean", "/mnt"])), Personality::Dualfs);
        assert_eq!(personality(&argv(&["dualfs", "stats", "/mnt"])), Personality::Dualfs);
        assert_eq!(personality(&argv(&["dualfs", "--help"])), Personality::Dualfs);
        assert_eq!(personality(&argv(&["dualfs"])), Personality::Dualfs);
    }

    #[test]
    fn mount_helper_command_lines_are_read() {
        let a = mount_args(&argv(&[
            "mount.fuse.dualfs",
            "/v/m#/v/d",
            "/mnt",
            "-n",
            "-o",
            "rw,noatime,dev,suid",
            "-t",
            "fuse.dualfs",
        ]))
        .unwrap();
        assert_eq!(a.meta, PathBuf::from("/v/m"));
        assert_eq!(a.data, PathBuf::from("/v/d"));
        assert_eq!(a.mountpoint, PathBuf::from("/mnt"));
        assert_eq!(a.options, vec!["rw,noatime,dev,suid".to_string()]);
        assert!(!a.foreground);
        assert!(mount_args(&argv(&["dualfs", "/v/m#/v/d"])).is_err());
    }
}

//! The manual pages and shell completions, generated from the command
//! line's definition (`args`) by clap_mangen and clap_complete, so that
//! they say what `--help` says: dualfs(8) and a page per subcommand,
//! the helpers mount(8), mkfs(8) and fsck(8) run (`mount.fuse.dualfs`,
//! `mkfs.dualfs`, `fsck.dualfs`), and dualfs(5) for the mount options and
//! the on-disk layout in brief. They are kept in `crates/cli/man` and
//! `crates/cli/completions`, which `make install` installs; the test here
//! fails when they differ from what the definition gives, and
//! `make manuals` writes them again.

use std::path::{Path, PathBuf};

use clap::{Command, CommandFactory};

use crate::args::Cli;

/// Who the pages are for, in their header.
const MANUAL: &str = "DualFS";

/// What mount(8) gives the helper: SOURCE names both devices.
const HELPER_ABOUT: &str = "\
Mount a DualFS volume: the helper mount(8) runs for `mount -t fuse.dualfs`
and for an fstab line of type fuse.dualfs.

SOURCE names both devices: META#DATA, or META:DATA when neither path
contains a colon, or META alone with -o data=DATA. Either side may be
UUID=... or LABEL=..., and SOURCE may be one tag or one device alone, whose
partner is then looked for among the block devices (blkid does not know the
format; `dualfs probe` does). The two copies of a mirrored meta-data device
are one device to a tag: the copy naming the newest mirror generation is
META, and the other is found as its mirror.

  mount -t fuse.dualfs /dev/sdb1#/dev/sdc1 /mnt
  LABEL=home#LABEL=home-data /home fuse.dualfs noatime 0 0   (fstab)

The options are those of `dualfs mount` (below, and dualfs(5)).";

/// dualfs(5): the on-disk layout in brief (docs/FORMAT.md has every byte).
const LAYOUT: &str = "\
A volume is two devices (or image files). The data device holds file
contents only, written in place; every piece of meta-data lives once, in a
log on the meta-data device.

Meta-data device: block 0 is the superblock; blocks 1 and 2 are the two
checkpoint slots, written in turn; then segments (one segment long each, a
few MiB), each holding partial segments written back to back. A partial
segment is a descriptor (its kind, sequence number, the checksum of the one
before, what its blocks are) and the blocks it lists: inode blocks, B-tree
nodes (directories, extents, extended attributes), blobs of long values,
and the IFile's tables (inode map, segment usage, group descriptors and
bitmaps), which a checkpoint writes and indexes. Mount reads the newest
valid checkpoint and rolls the log forward from it.

Every meta-data block starts with a 56-byte header: the magic DFSM, a
CRC32C of the block, its kind, its own address, the volume it belongs to,
the partial segment that wrote it, its owner and its name. A block that
fails any of these is refused, with its own message.

Data device: block 0 is a copy of the superblock; the rest is divided into
groups whose descriptors and bitmaps live in the IFile.

All integers are little-endian; blocks are 4096 bytes. Features a reader
must know are bits of the superblock's incompat word: a dualfs that does
not know one refuses the volume, naming it.";

fn render(cmd: Command, section: &str) -> Vec<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).section(section).manual(MANUAL).render(&mut out).expect("rendering to memory");
    out
}

/// Text for a no-fill roff block: backslashes and control characters at
/// the start of a line escaped.
fn roff_text(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = line.replace('\\', "\\e");
        if line.starts_with('.') || line.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// dualfs(5): the mount options as `dualfs mount --help` gives them, and
/// the layout in brief.
fn page5(cli: &Command) -> Vec<u8> {
    let mount = cli.find_subcommand("mount").expect("a mount subcommand");
    let options = mount.get_after_help().map(ToString::to_string).unwrap_or_default();
    let version = cli.get_version().unwrap_or_default();
    let mut p = format!(".TH dualfs 5 \"\" \"dualfs {version}\" \"{MANUAL}\"\n");
    p.push_str(".SH NAME\ndualfs \\- the DualFS file system: mount options and on-disk layout\n");
    p.push_str(".SH DESCRIPTION\n.nf\n");
    p.push_str(&roff_text(LAYOUT.split("\n\n").next().unwrap_or_default()));
    p.push_str(
        ".fi\n.SH MOUNT OPTIONS\nGiven to dualfs mount, mount.fuse.dualfs or an fstab line with \\-o.\n.PP\n.nf\n",
    );
    p.push_str(&roff_text(&options));
    p.push_str(".fi\n.SH ON-DISK LAYOUT\n.nf\n");
    p.push_str(&roff_text(LAYOUT.split_once("\n\n").map_or("", |(_, rest)| rest)));
    p.push_str(".fi\n.SH SEE ALSO\ndualfs(8), mount.fuse.dualfs(8), mkfs.dualfs(8), fsck.dualfs(8)\n");
    p.into_bytes()
}

/// Every page: file name and contents.
pub fn pages() -> Vec<(String, Vec<u8>)> {
    let cli = Cli::command();
    let mut out = vec![("dualfs.8".to_string(), render(cli.clone(), "8")), ("dualfs.5".to_string(), page5(&cli))];
    let sub = |name: &str| cli.find_subcommand(name).expect("a subcommand").clone();
    for s in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("dualfs-{}", s.get_name());
        out.push((format!("{name}.8"), render(s.clone().name(name), "8")));
    }
    out.push(("mkfs.dualfs.8".to_string(), render(sub("mkfs").name("mkfs.dualfs"), "8")));
    out.push(("fsck.dualfs.8".to_string(), render(sub("fsck").name("fsck.dualfs"), "8")));
    out.push(("mount.fuse.dualfs.8".to_string(), render(helper(&cli), "8")));
    out
}

/// The mount helper's command line, as `helper::mount_args` reads it (a
/// test below holds the two together), with `dualfs mount`'s options.
fn helper(cli: &Command) -> Command {
    use clap::{Arg, ArgAction};
    let flag = |short: char, help: &'static str| {
        Arg::new(short.to_string()).short(short).action(ArgAction::SetTrue).help(help)
    };
    let mount = cli.find_subcommand("mount").expect("a mount subcommand");
    Command::new("mount.fuse.dualfs")
        .version(cli.get_version().unwrap_or_default().to_string())
        .about("Mount a DualFS volume (the helper mount(8) runs)")
        .disable_help_flag(true)
        .disable_version_flag(true)
        .long_about(HELPER_ABOUT)
        .arg(Arg::new("SOURCE").required(true).help("The volume's two devices: META#DATA, UUID=..., LABEL=..."))
        .arg(Arg::new("MOUNTPOINT").required(true).help("An existing directory to mount on"))
        .arg(Arg::new("options").short('o').value_name("OPTIONS").help("Mount options, comma-separated (below)"))
        .arg(Arg::new("type").short('t').value_name("TYPE").help("fuse.dualfs, as mount(8) passes it"))
        .arg(flag('n', "Do not write /etc/mtab (accepted: there is none to write)"))
        .arg(flag('s', "Sloppy: accepted"))
        .arg(flag('v', "Verbose: accepted"))
        .arg(flag('f', "Fake: accepted, not honoured (mount(8) does not run helpers with it)"))
        .after_help(mount.get_after_help().map(ToString::to_string).unwrap_or_default())
}

/// The bash and zsh completions: file name and contents.
pub fn completions() -> Vec<(String, Vec<u8>)> {
    use clap_complete::{Shell, generate};
    [(Shell::Bash, "dualfs.bash"), (Shell::Zsh, "_dualfs")]
        .into_iter()
        .map(|(shell, file)| {
            let mut out = Vec::new();
            generate(shell, &mut Cli::command(), "dualfs", &mut out);
            (file.to_string(), out)
        })
        .collect()
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compares (or, with `DUALFS_WRITE_MANUALS=1`, writes) the files of `dir`
/// with `files`; the names of those that differ.
fn check(dir: &Path, files: &[(String, Vec<u8>)]) -> Vec<String> {
    let write = std::env::var_os("DUALFS_WRITE_MANUALS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        if std::fs::read(&path).ok().as_ref() == Some(text) {
            continue;
        }
        if write {
            std::fs::create_dir_all(dir).expect("the directory");
            std::fs::write(&path, text).expect("the file");
        } else {
            stale.push(name.clone());
        }
    }
    // A page the definition no longer gives (a removed subcommand) is stale too.
    let wanted: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !wanted.contains(&name.as_str()) {
            if write {
                std::fs::remove_file(entry.path()).expect("a stale file");
            } else {
                stale.push(name);
            }
        }
    }
    stale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manual_pages_and_completions_are_what_the_command_line_gives() {
        let mut stale = check(&crate_dir().join("man"), &pages());
        stale.extend(check(&crate_dir().join("completions"), &completions()));
        assert!(stale.is_empty(), "out of date (run `make manuals`): {stale:?}");
    }

    #[test]
    fn the_helpers_pages_name_the_helpers_and_every_option() {
        let pages = pages();
        let page = |name: &str| {
            let (_, text) = pages.iter().find(|(n, _)| n == name).expect("the page");
            String::from_utf8(text.clone()).expect("text")
        };
        for (file, title) in [("mkfs.dualfs.8", "mkfs.dualfs"), ("fsck.dualfs.8", "fsck.dualfs")] {
            let p = page(file);
            assert!(p.starts_with(&format!(".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH {title} 8")), "{p}");
        }
        let mkfs = page("mkfs.dualfs.8");
        assert!(mkfs.contains("inline\\-max"), "every option of mkfs: {mkfs}");
        let helper = page("mount.fuse.dualfs.8");
        assert!(helper.contains("META#DATA") && helper.contains("commit=SECONDS"), "{helper}");
        let five = page("dualfs.5");
        assert!(five.contains(".SH MOUNT OPTIONS") && five.contains("cache=SIZE") && five.contains("DFSM"));
        assert!(page("dualfs.8").contains("metadump"));
        assert_eq!(roff_text(".x\n\\y\n'z"), "\\&.x\n\\ey\n\\&'z\n");
    }

    #[test]
    fn the_helpers_page_says_what_its_parser_reads() {
        let h = helper(&Cli::command());
        let mut argv = vec!["mount.fuse.dualfs".to_string(), "/v/m#/v/d".into(), "/mnt".into()];
        for a in h.get_arguments().filter(|a| !a.is_positional()) {
            let short = a.get_short().expect("a short option");
            argv.push(format!("-{short}"));
            if a.get_action().takes_values() {
                argv.push(if short == 'o' { "noatime".into() } else { "fuse.dualfs".into() });
            }
        }
        let argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
        h.clone().try_get_matches_from(&argv).expect("the page's definition takes it");
        let a = crate::helper::mount_args(&argv).expect("the parser takes it");
        assert_eq!(a.options, ["noatime"]);
        assert_eq!(a.mountpoint, std::path::PathBuf::from("/mnt"));
    }
}

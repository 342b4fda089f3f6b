//! Arguments of `dualfs quota`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

pub(super) const QUOTA_HELP: &str = "\
VOLUME is the mount point of a mounted volume, or its devices: META DATA, or
META#DATA. The kernel's quotactl(2) does not reach a FUSE file system, so
quota(1), setquota(8), repquota(8) and xfs_quota cannot work on a DualFS
mount: dualfs quota does their work, in their shape.

Limits bound the data blocks (in KiB as setquota's, or with a unit: 512M,
2G) and the inodes of a user, a group or a project (the project id chattr -p
sets; chattr +P makes a directory hand it down). A soft limit may be passed
for the grace time (7 days unless set), after which it is refused as the hard
limit is: EDQUOT, \"Disk quota exceeded\". 0 is no limit. Id 0 (root, the
root group, no project) is never limited. Users and groups are named as the
system names them, projects by /etc/projid, or by number.

Examples: dualfs quota on /mnt
          dualfs quota set -u alice 900M 1G 0 0 /mnt
          dualfs quota set -p 42 0 10G 0 100000 meta.img data.img
          dualfs quota grace -u 1d 1d /mnt
          dualfs quota report -h /mnt";

/// Arguments of `dualfs quota`.
#[derive(Args, Debug)]
pub struct QuotaArgs {
    #[command(subcommand)]
    pub action: QuotaAction,
}

/// Which id a limit is for: one of -u, -g, -p.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct QuotaWho {
    /// A user (name or uid).
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,
    /// A group (name or gid).
    #[arg(short = 'g', long = "group", value_name = "GROUP")]
    pub group: Option<String>,
    /// A project (name in /etc/projid, or id).
    #[arg(short = 'p', long = "project", value_name = "PROJECT")]
    pub project: Option<String>,
}

/// Which kind grace times are for: one of -u, -g, -p.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct QuotaKindArg {
    /// Users.
    #[arg(short = 'u', long = "user")]
    pub user: bool,
    /// Groups.
    #[arg(short = 'g', long = "group")]
    pub group: bool,
    /// Projects.
    #[arg(short = 'p', long = "project")]
    pub project: bool,
}

#[derive(Subcommand, Debug)]
pub enum QuotaAction {
    /// Turn quotas on (counts what every user, group and project uses).
    On {
        /// VOLUME: mount point, META DATA or META#DATA.
        #[arg(num_args = 1..=2, required = true, value_name = "VOLUME")]
        target: Vec<PathBuf>,
    },
    /// Set limits, as setquota: BLOCK-SOFT BLOCK-HARD INODE-SOFT INODE-HARD.
    Set {
        #[command(flatten)]
        who: QuotaWho,
        /// Blocks past which the grace time runs (KiB, or 512M, 2G...).
        block_soft: String,
        /// Blocks never passed.
        block_hard: String,
        /// Inodes past which the grace time runs.
        inode_soft: u64,
        /// Inodes never passed.
        inode_hard: u64,
        /// VOLUME: mount point, META DATA or META#DATA.
        #[arg(num_args = 1..=2, required = true, value_name = "VOLUME")]
        target: Vec<PathBuf>,
    },
    /// Set the grace times of users, groups or projects, as setquota -t
    /// (seconds, or 90m, 12h, 7d).
    Grace {
        #[command(flatten)]
        kind: QuotaKindArg,
        /// How long a block soft limit may be passed.
        block_grace: String,
        /// How long an inode soft limit may be passed.
        inode_grace: String,
        /// VOLUME: mount point, META DATA or META#DATA.
        #[arg(num_args = 1..=2, required = true, value_name = "VOLUME")]
        target: Vec<PathBuf>,
    },
    /// Usage, limits and grace times, as repquota (every kind unless -u, -g
    /// or -p).
    #[command(disable_help_flag = true)]
    Report {
        /// Print help.
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
        /// Users.
        #[arg(short = 'u', long = "user")]
        user: bool,
        /// Groups.
        #[arg(short = 'g', long = "group")]
        group: bool,
        /// Projects.
        #[arg(short = 'p', long = "project")]
        project: bool,
        /// Sizes in KiB, MiB, GiB, and times in days, hours, minutes.
        #[arg(short = 'h', long = "human-readable", visible_short_alias = 's')]
        human: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// VOLUME: mount point, META DATA or META#DATA.
        #[arg(num_args = 1..=2, required = true, value_name = "VOLUME")]
        target: Vec<PathBuf>,
    },
}

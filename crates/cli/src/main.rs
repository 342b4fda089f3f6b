//! `dualfs`: create, mount, unmount, check, clean and inspect DualFS volumes.
//!
//! One binary with subcommands; it also answers to the names mount(8) and
//! mkfs(8) use for helpers (see [`helper`]).

mod args;
mod claim;
mod clean;
mod control;
mod devices;
mod fsck;
mod helper;
mod inspect;
mod inspect_text;
mod mkfs;
mod mount;
mod options;
mod progress;
mod stats;
mod sync;
mod trace;
mod umount;

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use crate::args::{Cli, Command};
use crate::helper::Personality;

/// Logs go to standard error (a background mount redirects it to its log
/// file); RUST_LOG overrides the default of informational messages from
/// DualFS and warnings from everything else.
fn init_logging() {
    env_logger::Builder::from_env(
        env_logger::Env::default()
            .default_filter_or("warn,fuser::session=error,dualfs=info,dualfs_fuse=info,dualfs_engine=info"),
    )
    .format_timestamp_millis()
    .init();
}

fn run(argv: Vec<OsString>) -> Result<()> {
    let cli = match helper::personality(&argv) {
        Personality::MountHelper => return mount::run(&helper::mount_args(&argv)?),
        Personality::Tool(sub) => {
            let mut v: Vec<OsString> = vec!["dualfs".into(), sub.into()];
            v.extend(argv.into_iter().skip(1));
            Cli::parse_from(v)
        }
        Personality::Dualfs => Cli::parse_from(argv),
    };
    match &cli.command {
        Command::Mkfs(a) => mkfs::run(a),
        Command::Mount(a) => mount::run(a),
        Command::Umount(a) => umount::run(a),
        Command::Fsck(a) => fsck::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Clean(a) => clean::run(a),
        Command::Stats(a) => stats::run(a),
        Command::Sync(a) => sync::run(a),
        Command::Trace(a) => trace::run(a),
    }
}

fn main() -> ExitCode {
    init_logging();
    match run(std::env::args_os().collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(mount::Exit(code)) = e.downcast_ref::<mount::Exit>() {
                return ExitCode::from(u8::try_from(*code).unwrap_or(1));
            }
            eprintln!("dualfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

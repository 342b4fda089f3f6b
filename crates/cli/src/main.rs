//! `dualfs`: create, mount, unmount, check, clean and inspect DualFS volumes.
//!
//! One binary with subcommands; it also answers to the names mount(8) and
//! mkfs(8) use for helpers (see [`helper`]).

/// `println!` that never fails: for commands that write to a volume, whose
/// work must not stop (nor panic) because their reader has gone away.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod args;
mod bdi;
mod checkpoints;
mod claim;
mod clean;
mod control;
mod devices;
mod exit;
mod extent_map;
mod extract;
mod find;
mod fsck;
mod helper;
mod holder;
mod iflags;
mod inspect;
mod inspect_text;
mod itself;
mod join;
#[cfg(test)]
mod manual;
mod metadump;
mod migrate;
mod mirror;
mod mkfs;
mod mount;
mod mountinfo;
mod obfuscate;
mod options;
mod probe;
mod progress;
mod quota;
mod remount;
mod resize;
mod scrub;
mod send;
mod snapshot;
mod stats;
mod sync;
mod trace;
mod transport;
mod trim;
mod tune;
mod umount;
mod words;

use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use clap::Parser;

use crate::args::{Cli, Command};
use crate::helper::Personality;

/// An allocator that gives freed memory back: with glibc's, a mount that
/// created and deleted 50,000 small files kept 250-440 MB it no longer used
/// (DESIGN.md, "Tried and not kept").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Whether log lines carry a timestamp, level and source: yes in a log
/// file and in a foreground mount's stream, which are read later; no on
/// the terminal of a command a person is waiting for, where a message is
/// one plain line like any other of the command's.
static LOG_TIMESTAMPS: AtomicBool = AtomicBool::new(false);

/// From now on, log lines are for a log file (see [`LOG_TIMESTAMPS`]).
pub fn log_to_file() {
    LOG_TIMESTAMPS.store(true, Ordering::Relaxed);
}

/// Logs go to standard error (a background mount redirects it to its log
/// file); RUST_LOG overrides the default of informational messages from
/// DualFS and warnings from everything else.
fn init_logging() {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,dualfs=info,dualfs_fuse=info,dualfs_engine=info"),
    )
    .format(|buf, record| {
        if LOG_TIMESTAMPS.load(Ordering::Relaxed) {
            let ts = buf.timestamp_millis();
            writeln!(buf, "[{ts} {:<5} {}] {}", record.level(), record.target(), record.args())
        } else {
            match record.level() {
                log::Level::Info => writeln!(buf, "dualfs: {}", record.args()),
                level => writeln!(buf, "dualfs: {}: {}", level.as_str().to_lowercase(), record.args()),
            }
        }
    })
    .init();
}

/// Commands that only report die quietly of SIGPIPE when their reader goes
/// away (`dualfs inspect ... | head`), as cat and dumpe2fs do: the default
/// from the start (help and usage included). Rust ignores SIGPIPE, which
/// makes `println!` panic on a closed pipe instead; commands that write to
/// a volume or serve one go back to ignoring it once the command line is
/// read, and print with [`say!`], which never fails.
#[allow(unsafe_code)]
fn die_of_sigpipe(die: bool) {
    use nix::sys::signal::{SigHandler, Signal, signal};
    let handler = if die { SigHandler::SigDfl } else { SigHandler::SigIgn };
    // SAFETY: neither disposition installs handler code, and no other
    // thread exists yet whose signal disposition could race with the change.
    if let Err(e) = unsafe { signal(Signal::SIGPIPE, handler) } {
        log::debug!("SIGPIPE disposition unchanged: {e}");
    }
}

/// Reads the command line; a usage error is printed and ends the program
/// with clap's status (2), or fsck(8)'s (16) for fsck.
fn parse_cli(argv: Vec<OsString>, fsck: bool) -> std::result::Result<Cli, ExitCode> {
    Cli::try_parse_from(argv).map_err(|e| {
        // Help and version go to standard output, and may meet a closed pipe.
        let _ = e.print();
        if e.use_stderr() && fsck { ExitCode::from(fsck::EXIT_USAGE) } else { ExitCode::from(e.exit_code() as u8) }
    })
}

/// Runs what the command line asks for.
fn run(cli: &Cli) -> Result<()> {
    match &cli.command {
        Command::Mkfs(a) => mkfs::run(a),
        Command::Mount(a) => mount::run(a),
        Command::Umount(a) => umount::run(a),
        Command::Fsck(a) => fsck::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Clean(a) => clean::run(a),
        Command::Stats(a) => stats::run(a),
        Command::Sync(a) => sync::run(a),
        Command::Snapshot(a) => snapshot::run(a),
        Command::Send(a) => send::send(a),
        Command::Receive(a) => send::receive(a),
        Command::Clone(a) => snapshot::clone(a),
        Command::Resize(a) => resize::run(a),
        Command::Migrate(a) => migrate::run(a),
        Command::Mirror(a) => mirror::run(a),
        Command::Trace(a) => trace::run(a),
        Command::Probe(a) => probe::run(a),
        Command::Tune(a) => tune::run(a),
        Command::Cat(a) => extract::cat(a),
        Command::Get(a) => extract::get(a),
        Command::Metadump(a) => metadump::metadump(a),
        Command::Metarestore(a) => metadump::metarestore(a),
        Command::Trim(a) => trim::run(a),
        Command::Scrub(a) => scrub::run(a),
        Command::Quota(a) => quota::run(a),
    }
}

fn exit_code(r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(exit::Exit(code)) = e.downcast_ref::<exit::Exit>() {
                return ExitCode::from(u8::try_from(*code).unwrap_or(1));
            }
            eprintln!("dualfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    init_logging();
    let argv: Vec<OsString> = std::env::args_os().collect();
    let argv = match helper::personality(&argv) {
        Personality::MountHelper => return exit_code(helper::mount_args(&argv).and_then(|a| mount::run_helper(&a))),
        Personality::Tool(sub) => {
            let mut v: Vec<OsString> = vec!["dualfs".into(), sub.into()];
            v.extend(argv.into_iter().skip(1));
            v
        }
        Personality::Dualfs => argv,
    };
    let fsck = argv.get(1).is_some_and(|a| a == "fsck");
    die_of_sigpipe(true);
    let cli = match parse_cli(argv, fsck) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !cli.command.only_reports() {
        die_of_sigpipe(false);
    }
    exit_code(run(&cli))
}

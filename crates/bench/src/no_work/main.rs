//! `no-work-server MOUNTPOINT [--transport uring|dev] [--threads N]
//! [--queue-threads N] [--default-permissions]`: a FUSE server that does no
//! work (an in-memory tree of names and sizes, no data; see `tree`), the
//! floor under any FUSE file system's times on this machine (bench/suite.py's
//! `floor` configuration, bench/uring_rt.py). Mounts it (root only) over
//! DualFS's own transports (crate `dualfs-wire`), prints one JSON line
//! saying which transport it got, serves until the mount is unmounted, then prints the requests it
//! served by opcode, by the CPU that served them and on the ring as a
//! second JSON line. `--queue-threads` sets the threads per io_uring queue
//! (each with one entry; default 8). `--default-permissions` has the kernel
//! check permissions, as DualFS's mount does (POSIX ACLs need it): the
//! kernel then asks for a directory's attributes again after each change
//! in it, before the next path walk through it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use dualfs_wire::{Handler, Report, Server, Transport, Transports};

mod tree;

use tree::Fs;

fn usage() -> ExitCode {
    eprintln!(
        "usage: no-work-server MOUNTPOINT [--transport uring|dev] [--threads N] [--queue-threads N] [--default-permissions]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut mnt, mut uring, mut threads, mut perms) = (None, true, None, false);
    let mut transports = Transports::default();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--transport" => match args.next().as_deref() {
                Some("uring") => uring = true,
                Some("dev") => uring = false,
                _ => return usage(),
            },
            "--threads" => match args.next().and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => threads = Some(n),
                None => return usage(),
            },
            "--queue-threads" => match args.next().and_then(|n| n.parse::<u16>().ok()) {
                Some(n) if n > 0 => transports.queue_threads = n,
                _ => return usage(),
            },
            "--default-permissions" => perms = true,
            _ if mnt.is_none() && !a.starts_with('-') => mnt = Some(PathBuf::from(a)),
            _ => return usage(),
        }
    }
    let Some(mnt) = mnt else { return usage() };
    // /dev/fuse alone: one reader per CPU, as many as the kernel can wake.
    // With the ring: one reader for FORGET and INTERRUPT.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = threads.unwrap_or(if uring { 1 } else { cpus });
    let mut options = vec!["fsname=no-work", "subtype=no-work", "allow_other"];
    if perms {
        options.push("default_permissions");
    }
    transports.uring = uring;
    transports.dev_threads = threads;
    let served = serve(Server::start(&mnt, &options, Arc::new(Fs::new()), transports), threads);
    match served {
        Ok(report) => {
            let body: Vec<String> = report.counts.iter().map(|(op, n)| format!("\"{op}\":{n}")).collect();
            let cpus: Vec<String> = report.by_cpu.iter().map(u64::to_string).collect();
            println!(
                "{{\"requests\":{{{}}},\"served_on_cpu\":[{}],\"on_ring\":{}}}",
                body.join(","),
                cpus.join(","),
                report.ring_requests
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("no-work-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Says which transport the mount got, then serves until it is unmounted.
fn serve<H: Handler>(
    started: Result<Server<H>, dualfs_wire::Error>,
    threads: usize,
) -> Result<Report, dualfs_wire::Error> {
    let server = started?;
    let detail = match &server.transport {
        Transport::Uring { queues } => format!("\"queues\":{queues}"),
        Transport::DevFuse { why } => format!("\"threads\":{threads},\"why\":\"{}\"", why.replace('"', "'")),
    };
    println!("{{\"transport\":\"{}\",{detail},\"pid\":{}}}", server.transport.name(), std::process::id());
    let _ = std::io::stdout().flush();
    server.wait()
}

//! `uring-proto MOUNTPOINT [--transport uring|dev] [--threads N]`: mounts
//! the prototype (root only), prints one JSON line saying which transport
//! it got, serves until the mount is unmounted, then prints the requests it
//! served by opcode, by the CPU that served them and on the ring as a
//! second JSON line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use dualfs_wire::{Fs, Server, Transport, Transports};

fn usage() -> ExitCode {
    eprintln!("usage: uring-proto MOUNTPOINT [--transport uring|dev] [--threads N]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut mnt, mut uring, mut threads) = (None, true, None);
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
            _ if mnt.is_none() && !a.starts_with('-') => mnt = Some(PathBuf::from(a)),
            _ => return usage(),
        }
    }
    let Some(mnt) = mnt else { return usage() };
    // /dev/fuse alone: one reader per CPU, as many as the kernel can wake.
    // With the ring: one reader for FORGET and INTERRUPT.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = threads.unwrap_or(if uring { 1 } else { cpus });
    let options = ["fsname=uring-proto", "subtype=uring-proto", "allow_other"];
    let transports = Transports { uring, dev_threads: threads, ..Transports::default() };
    let server = match Server::start(&mnt, &options, Arc::new(Fs::new()), transports) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("uring-proto: {e}");
            return ExitCode::FAILURE;
        }
    };
    let detail = match &server.transport {
        Transport::Uring { queues } => format!("\"queues\":{queues}"),
        Transport::DevFuse { why } => format!("\"threads\":{threads},\"why\":\"{}\"", why.replace('"', "'")),
    };
    println!("{{\"transport\":\"{}\",{detail},\"pid\":{}}}", server.transport.name(), std::process::id());
    let _ = std::io::stdout().flush();
    match server.wait() {
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
            eprintln!("uring-proto: {e}");
            ExitCode::FAILURE
        }
    }
}

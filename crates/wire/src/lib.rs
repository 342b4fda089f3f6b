//! The FUSE wire protocol and its two transports, which DualFS's adapter
//! serves over (docs/DESIGN.md, "FUSE adapter"): per-CPU io_uring
//! queues where the kernel allows them, /dev/fuse otherwise.
//!
//! Layers, top down: [`Server`] mounts and starts the serving threads;
//! [`Handler`] is what they call (DualFS's adapter; the benchmarks'
//! no-work server); [`devfuse`] serves read/write on /dev/fuse and
//! [`ring`] the per-CPU io_uring queues; [`Session`] mounts and negotiates INIT; [`Notifier`]
//! writes notifications; [`abi`] decodes requests and encodes replies.
//! The engine never sees any of it.

pub mod abi;
pub mod devfuse;
mod fusermount;
pub mod handler;
pub mod notify;
pub mod ring;
pub mod server;
pub mod session;

pub use abi::ReplyBuf;
pub use handler::{Handler, Outcome};
pub use notify::Notifier;
pub use server::{Report, Server, Stats, Transport, Transports};
pub use session::{Error, MountArgs, Session, uring_enabled};

/// Threads (each with one ring entry) per io_uring queue by default: eight
/// let seven requests of one CPU wait on the device while the eighth is
/// answered, and cost 8 MiB of payload buffers per CPU with 1 MiB writes.
pub const QUEUE_THREADS: u16 = 8;

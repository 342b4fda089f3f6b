//! DualFS over FUSE: [`DualFs`] answers the kernel's requests with calls to
//! the engine's [`Volume`].
//!
//! The adapter keeps no state of its own beyond the volume: file handles are
//! all zero, directory streams are resumed from the engine's offsets, and
//! the lifetime of an inode is the engine's reference count, which mirrors
//! the kernel's lookup count (every reply that makes the kernel take a
//! lookup reference is matched by one `remember`, every FORGET by `forget`).
//! Nothing here takes a lock: requests run on several threads at once (the
//! transport's, see [`dualfs_wire`]) and the engine decides what may go on
//! while a partial segment is written.
//!
//! What the kernel does for us, by choice:
//! - permission checks (`default_permissions`), including clearing set-id
//!   bits on write, truncate and chown by sending a `setattr` of the mode,
//!   and POSIX ACLs (FUSE_POSIX_ACL), which it reads from the engine's
//!   `system.posix_acl_*` xattrs and caches;
//! - POSIX record locks and `flock`: FUSE_POSIX_LOCKS and FUSE_FLOCK_LOCKS
//!   are not negotiated, so the kernel keeps locks locally, which is exact
//!   for a file system that only this kernel mounts;
//! - the page cache, in writeback mode: `write()` returns once the kernel
//!   has the bytes, and the kernel owns size and mtime while pages are dirty.
//!
//! Errors: every reply carries [`dualfs_engine::Error::errno`]; the adapter
//! chooses an errno only for requests the engine never sees (unknown flag
//! bits, which it refuses before calling the engine).

pub mod answers;
mod caller;
pub mod clock;
pub mod control;
mod convert;
mod job;
pub mod migrate;
pub mod mirror;
mod names;
mod ops;
pub mod receive;
pub mod requests;
pub mod scrub;
mod space;
pub mod window;
mod wire;
mod writers;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dualfs_engine::Volume;

pub use answers::{Caller, Entry, Errno, NotifierSlot, Notify, Opened, Xattr};
pub use convert::errno;
pub use ops::SetAttrIn;

/// How long the kernel may trust what the adapter tells it.
///
/// Caching attributes and names for long is safe because every change to
/// the volume comes through this kernel mount: the kernel invalidates what
/// its own operations change (and, after a read, the access time the
/// engine may have changed). Where the volume changes something the kernel
/// cached on its own (the mode when an ACL is set, set-id bits a write
/// drops), the adapter tells the kernel with a notification
/// ([`DualFs::notifier_slot`]). The block count does not move at
/// write-back: it counts the blocks dirty data has reserved.
#[derive(Clone, Copy, Debug)]
pub struct AdapterOptions {
    /// Lifetime of attributes in replies.
    pub attr_ttl: Duration,
    /// Lifetime of name-to-inode entries in replies, and of negative
    /// entries (a name looked up and not found).
    pub entry_ttl: Duration,
    /// Largest write request (bytes) the kernel may send.
    pub max_write: u32,
    /// Let the kernel cache writes (and own mtime/ctime while it does).
    /// Off, every write(2) is a request and the engine stamps the times.
    pub writeback_cache: bool,
    /// The user who mounted the volume: besides root, the only one who may
    /// use the control attributes ([`control`]).
    pub owner_uid: u32,
    /// Whether the devices were opened for writing, so that a volume
    /// mounted read-only may be remounted read-write.
    pub devices_writable: bool,
    /// Most LSEEKs that may wait at once for the kernel to write back a
    /// file's dirty pages: each holds a serving thread, and the writes it
    /// waits for need another, so fewer than the threads that serve one
    /// queue (0: never wait, let the kernel answer instead).
    pub lseek_flushes: usize,
    /// Serve the `security.*` extended attributes (`nosecurity_xattr`
    /// turns them off: each is EOPNOTSUPP and listings leave them out,
    /// what stays on the volume is kept). Off, `ls -l` stops asking for
    /// `security.selinux` after the first file (coreutils remembers a
    /// device without support); see DESIGN.md, "Requests the kernel sends".
    pub security_xattrs: bool,
}

/// Default lifetime of attributes and entries: an hour. Each request the
/// kernel can answer from its cache is a round trip saved (`ls -l` of a
/// listed directory, `stat` of a file seen a second ago, a path walked
/// again); what the volume changes on its own is invalidated explicitly.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

impl Default for AdapterOptions {
    fn default() -> Self {
        AdapterOptions {
            attr_ttl: DEFAULT_TTL,
            entry_ttl: DEFAULT_TTL,
            max_write: 1 << 20,
            writeback_cache: true,
            owner_uid: 0,
            devices_writable: true,
            lseek_flushes: 1,
            security_xattrs: true,
        }
    }
}

/// A mounted DualFS volume: the requests' work as methods (crate `ops`) in
/// no transport's types, and the `dualfs_wire::Handler` that decodes each
/// request, calls them and encodes the answer (`wire.rs`).
#[derive(Debug)]
pub struct DualFs {
    vol: Arc<Volume>,
    options: AdapterOptions,
    /// The kernel agreed to FUSE_POSIX_ACL (known after INIT).
    acl: AtomicBool,
    /// The kernel caches writes: the writeback cache was asked for and
    /// granted (known after INIT).
    writeback: AtomicBool,
    control: control::Control,
    /// A receive through the control attribute `dualfs.receive`.
    receiver: receive::Receiver,
    /// A migration through the control attribute `dualfs.migrate`.
    migrator: migrate::Migrator,
    /// A change of the meta-data mirror through `dualfs.mirror`.
    mirrorer: mirror::Mirrorer,
    /// A scrub through the control attribute `dualfs.scrub`.
    scrubber: scrub::Scrubber,
    /// Requests served, per opcode (`dualfs stats`).
    requests: requests::RequestStats,
    /// How to tell the kernel that cached attributes changed; set by the
    /// mounting code once the session exists ([`DualFs::notifier_slot`]).
    notifier: NotifierSlot,
    /// The kernel's dirty window for this mount, set by the mounting code
    /// once the mount exists ([`DualFs::window_slot`]); none: left as is.
    window: Arc<OnceLock<window::DirtyWindow>>,
    /// The volume's clock, told the change times the kernel stamps.
    clock: Option<Arc<clock::KernelClock>>,
    /// Which files the kernel holds open for writing.
    writers: writers::Writers,
    /// The names the kernel knows regular files by, under the writeback cache.
    names: names::KnownNames,
    /// The writable tree this connection serves, entered before each
    /// request (`Volume::enter_tree`), and its place among the trees the
    /// volume serves; none: the live tree, never left.
    tree: Option<(String, dualfs_engine::volume::TreeServed)>,
}

impl DualFs {
    /// Serves `vol` to the kernel.
    #[must_use]
    pub fn new(vol: Arc<Volume>, options: AdapterOptions) -> DualFs {
        DualFs {
            vol,
            options,
            acl: AtomicBool::new(false),
            writeback: AtomicBool::new(options.writeback_cache),
            control: control::Control::new(options.owner_uid),
            receiver: receive::Receiver::default(),
            migrator: migrate::Migrator::default(),
            mirrorer: mirror::Mirrorer::new(migrate::default_opener(), Vec::new()),
            scrubber: scrub::Scrubber::default(),
            requests: requests::RequestStats::default(),
            notifier: Arc::default(),
            window: Arc::default(),
            clock: None,
            writers: writers::Writers::default(),
            names: names::KnownNames::default(),
            tree: None,
        }
    }

    /// Serves writable tree `name` (the live one or a clone), registered
    /// with the volume as served at `at`: each request enters it first,
    /// so that several trees are served by one volume, one at a time.
    ///
    /// # Errors
    /// No such tree, or a read-only snapshot.
    pub fn with_tree(mut self, name: &str, at: &str) -> Result<DualFs, dualfs_engine::error::Error> {
        let served = self.vol.serve_tree(name, at)?;
        self.tree = Some((name.to_string(), served));
        Ok(self)
    }

    /// Tells `clock` (the volume's, see [`clock`]) every change time the
    /// kernel hands over, so that the volume never stamps below one.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<clock::KernelClock>) -> DualFs {
        self.clock = Some(clock);
        self
    }

    /// Opens the devices a migration moves to with `opener` (the mounting
    /// code's claims on them) rather than with the path's lock alone.
    #[must_use]
    pub fn with_device_opener(mut self, opener: migrate::DeviceOpener) -> DualFs {
        self.migrator = migrate::Migrator::new(opener.clone());
        self.mirrorer = mirror::Mirrorer::new(opener, Vec::new());
        self
    }

    /// Names the meta-data devices the volume runs on (the device it was
    /// mounted with, then its mirror), so that `dualfs mirror` can name
    /// them; with [`DualFs::with_device_opener`] first.
    #[must_use]
    pub fn with_meta_paths(mut self, opener: migrate::DeviceOpener, paths: Vec<std::path::PathBuf>) -> DualFs {
        self.mirrorer = mirror::Mirrorer::new(opener, paths);
        self
    }

    /// Where the mounting code puts the session's notifier
    /// (`Session::notifier`), which exists only once the adapter has been
    /// handed to the session.
    #[must_use]
    pub fn notifier_slot(&self) -> NotifierSlot {
        self.notifier.clone()
    }

    /// Where the mounting code puts the mount's dirty window
    /// ([`window`]), which exists only once the kernel has mounted.
    #[must_use]
    pub fn window_slot(&self) -> Arc<OnceLock<window::DirtyWindow>> {
        self.window.clone()
    }

    /// The mount options the adapter relies on: the kernel must check
    /// permissions, and the type should read `fuse.dualfs`.
    #[must_use]
    pub fn required_mount_options() -> &'static [&'static str] {
        &["default_permissions", "subtype=dualfs"]
    }
}

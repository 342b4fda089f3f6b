//! A mount through fusermount3, the set-uid helper of libfuse, for who may
//! not call mount(2) (every user but root) and for `auto_unmount`.
//!
//! The protocol is libfuse's: `fusermount3 -o OPTIONS -- MOUNTPOINT` runs
//! with `_FUSE_COMMFD` naming its end of a socket pair; it opens /dev/fuse,
//! mounts it and sends the descriptor back as SCM_RIGHTS. Without
//! `auto_unmount` it then exits. With it, it stays, waiting on the socket:
//! when the socket closes (this process ended, however) it unmounts, so a
//! server that dies leaves no dead mount behind. Unmounting as a user is
//! `fusermount3 -u` too: umount(2) is root's.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::Mutex;

use rustix::io::FdFlags;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

use crate::session::Error;

/// The helper, found on PATH (libfuse installs it set-uid root in /usr/bin).
const FUSERMOUNT: &str = "fusermount3";
/// The environment variable that names the helper's end of the socket.
const COMMFD: &str = "_FUSE_COMMFD";

/// Held from clearing close-on-exec on the helper's end of the socket to
/// closing it once the helper runs, so that two mounts of one process
/// never hand their ends to each other's helper.
static SPAWNING: Mutex<()> = Mutex::new(());

/// What an `auto_unmount` mount keeps: the socket whose end is the
/// helper's signal to unmount, and the helper, reaped when it goes.
#[derive(Debug)]
pub(crate) struct Watcher {
    _socket: UnixStream,
    helper: Child,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // The socket closes after this: the helper unmounts (if anything
        // is left mounted) and exits. Reaped without waiting for it.
        let _ = self.helper.try_wait();
    }
}

/// Mounts /dev/fuse on `mountpoint` through fusermount3 with `options`
/// (the helper's syntax: mount flags, `fsname=`, `subtype=`,
/// `allow_other`, `default_permissions`, `max_read=`, `auto_unmount`).
/// Returns the descriptor and, for `auto_unmount`, what keeps the helper
/// waiting.
///
/// # Errors
///
/// [`Error::Fusermount`] with the helper's own message when it refuses or
/// fails, [`Error::Io`] when it cannot be started.
pub(crate) fn mount(mountpoint: &Path, options: &str, auto_unmount: bool) -> Result<(File, Option<Watcher>), Error> {
    let (ours, theirs) = UnixStream::pair()?;
    // The helper's end must survive exec; ours must not. A program another
    // thread starts meanwhile inherits it too, and only holds it: the
    // dualfs mount starts none then, and its own mounts take turns.
    let turn = SPAWNING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    rustix::io::fcntl_setfd(&theirs, FdFlags::empty()).map_err(io::Error::from)?;
    let mut cmd = Command::new(FUSERMOUNT);
    if !options.is_empty() {
        cmd.arg("-o").arg(options);
    }
    cmd.arg("--")
        .arg(mountpoint)
        .env(COMMFD, rustix::fd::AsRawFd::as_raw_fd(&theirs).to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let spawned = cmd.spawn();
    drop(theirs);
    drop(turn);
    let mut helper = spawned.map_err(|e| Error::Fusermount(format!("cannot run {FUSERMOUNT}: {e}")))?;
    let received = receive_fd(&ours);
    let stderr = helper.stderr.take();
    let dev = match received {
        Ok(dev) => dev,
        Err(e) => {
            // The helper failed and said why on its standard error.
            drop(ours);
            let said = read_all(stderr);
            let status = helper.wait()?;
            let why = if said.trim().is_empty() { format!("{e} ({status})") } else { said.trim().to_string() };
            return Err(Error::Fusermount(why));
        }
    };
    if auto_unmount {
        // The helper stays until the socket closes; what it says later
        // (a failed unmount) goes to the log.
        if let Some(stderr) = stderr {
            forward(stderr);
        }
        return Ok((dev, Some(Watcher { _socket: ours, helper })));
    }
    drop(ours);
    let said = read_all(stderr);
    let status = helper.wait()?;
    if !status.success() {
        return Err(Error::Fusermount(format!("{FUSERMOUNT} sent the descriptor but failed: {}", said.trim())));
    }
    Ok((dev, None))
}

/// Receives the /dev/fuse descriptor the helper sends.
fn receive_fd(socket: &UnixStream) -> io::Result<File> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        match rustix::net::recvmsg(
            socket.as_fd(),
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(m) => break m,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    if msg.bytes == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "fusermount3 sent nothing"));
    }
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = m
            && let Some(fd) = fds.next()
        {
            return Ok(File::from(fd));
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "fusermount3 sent no descriptor"))
}

fn read_all(stderr: Option<ChildStderr>) -> String {
    let mut s = String::new();
    if let Some(mut e) = stderr {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Copies what the helper writes later to this process's standard error
/// (a mount's log), from a thread of its own.
fn forward(mut stderr: ChildStderr) {
    let _ = std::thread::Builder::new().name("fusermount3".into()).spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        for line in s.lines().filter(|l| !l.trim().is_empty()) {
            eprintln!("fusermount3: {line}");
        }
    });
}

/// Unmounts `mountpoint` through fusermount3 (`-z`: lazily).
///
/// # Errors
///
/// The helper's message, as [`Error::Unmount`] with EBUSY when the mount
/// is in use, EPERM otherwise.
pub(crate) fn unmount(mountpoint: &Path, lazy: bool) -> Result<(), Error> {
    let mut cmd = Command::new(FUSERMOUNT);
    cmd.arg("-u").arg("-q");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg("--")
        .arg(OsStr::new(mountpoint))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Fusermount(format!("cannot run {FUSERMOUNT}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let errno = if said.contains("busy") {
        nix::errno::Errno::EBUSY
    } else if said.contains("not found") || said.contains("not mounted") {
        nix::errno::Errno::EINVAL
    } else {
        nix::errno::Errno::EPERM
    };
    Err(Error::Unmount(mountpoint.to_path_buf(), errno))
}

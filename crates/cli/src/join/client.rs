//! The joining side: `dualfs mount` and `dualfs remount` asking the
//! process that serves the volume, over its socket.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use super::{ANSWER_WAIT, holder, socket_name, unheld};

/// `p` made absolute, as the serving process (another working directory) needs it.
fn abs(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))
}

/// Sends `req` to the serving process on `conn` and reads its one-line answer.
///
/// # Errors
/// The request cannot be sent, or no answer comes within [`ANSWER_WAIT`].
fn ask(conn: &mut UnixStream, req: &Value) -> Result<Value> {
    writeln!(conn, "{req}").context("cannot ask the serving process")?;
    conn.set_read_timeout(Some(ANSWER_WAIT)).context("cannot set a timeout")?;
    let mut line = String::new();
    BufReader::new(&*conn).read_line(&mut line).context("the serving process did not answer")?;
    serde_json::from_str(&line).map_err(|_| anyhow!("the serving process did not answer"))
}

/// Asks the process serving the volume on `meta` and `data` whether a
/// remount's volume option `words` ask what it serves already (a remount
/// changes the kernel's flags of a mount, never a volume setting).
///
/// # Errors
/// A word asks another value (the message names it), or no serving
/// process answers.
pub fn check_remount(meta: &Path, data: &Path, mountpoint: &Path, words: &[String]) -> Result<()> {
    if words.is_empty() {
        return Ok(());
    }
    let h = holder(meta).ok_or_else(|| anyhow!("cannot check option {}: no process holds the volume", words[0]))?;
    let addr = SocketAddr::from_abstract_name(socket_name(h.pid)).context("the serving process's socket")?;
    let mut conn = UnixStream::connect_addr(&addr).with_context(|| {
        format!("cannot check option {}: the serving process (pid {}) does not answer", words[0], h.pid)
    })?;
    let req = json!({
        "remount": true,
        "mountpoint": abs(mountpoint)?,
        "meta": abs(meta)?,
        "data": abs(data)?,
        "options": words,
    });
    let reply = ask(&mut conn, &req)?;
    if let Some(e) = reply["error"].as_str() {
        bail!("{e}");
    }
    if reply["closing"].as_bool() == Some(true) {
        bail!("the volume is closing");
    }
    Ok(())
}

/// Joins the process serving the volume on `meta` and `data`, if one does:
/// true once the volume is also mounted on `mountpoint`; false when no
/// process serves it (or the one that did is closing), so that the caller
/// mounts as usual (and waits for a closing one, or is refused).
///
/// # Errors
/// The serving process refuses (the message says why), or does not answer.
pub fn try_join(meta: &Path, data: &Path, mountpoint: &Path, options: &[String]) -> Result<bool> {
    crate::options::parse(options)?;
    if unheld(meta) {
        return Ok(false);
    }
    let Some(h) = holder(meta) else { return Ok(false) };
    if h.name.as_bytes() == crate::holder::CLOSING_NAME.to_bytes() {
        return Ok(false);
    }
    let Ok(addr) = SocketAddr::from_abstract_name(socket_name(h.pid)) else { return Ok(false) };
    // No listener: the holder is no serving process (an fsck, a clean), or
    // one that does not take second mounts.
    let Ok(mut conn) = UnixStream::connect_addr(&addr) else { return Ok(false) };
    let peer = nix::sys::socket::getsockopt(&conn, nix::sys::socket::sockopt::PeerCredentials)
        .context("cannot tell who serves the volume")?;
    if u32::try_from(peer.pid()).ok() != Some(h.pid) {
        bail!("the process answering for the volume (pid {}) is not the one holding it (pid {})", peer.pid(), h.pid);
    }
    let req = json!({
        "mountpoint": abs(mountpoint)?,
        "meta": abs(meta)?,
        "data": abs(data)?,
        "options": options,
    });
    let reply = ask(&mut conn, &req)?;
    if reply["closing"].as_bool() == Some(true) {
        return Ok(false);
    }
    if let Some(e) = reply["error"].as_str() {
        bail!(
            "cannot mount {} on {} (the volume is served by pid {}): {e}",
            meta.display(),
            mountpoint.display(),
            h.pid
        );
    }
    log::debug!("joined pid {}: a bind of {}", h.pid, reply["source"].as_str().unwrap_or("?"));
    Ok(true)
}

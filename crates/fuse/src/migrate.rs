//! `dualfs migrate MOUNTPOINT`: the serving process moves the mounted
//! volume's meta-data or data device to another. The client sets the
//! control attribute `dualfs.migrate` to `meta=PATH` or `data=PATH` (an
//! absolute path); the serving process opens the device (with the claims
//! the mounting code gives it, [`DeviceOpener`]) and migrates, answering
//! when the new device is the volume's; meanwhile `getxattr
//! dualfs.migrate` reads the progress, and after, the outcome.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::Errno;
use dualfs_engine::Volume;
use dualfs_engine::device::{BlockDevice, FileDevice};
use dualfs_engine::error::DeviceRole;
use dualfs_engine::volume::MigrateReport;
use serde_json::{Value, json};

/// Set to `meta=PATH` or `data=PATH` to migrate; read for progress and outcome.
pub const MIGRATE: &str = "dualfs.migrate";

/// Opens a new device for the volume, read-write and claimed against
/// other writers; the error in words.
pub type DeviceOpener = Arc<dyn Fn(&Path, DeviceRole) -> Result<Arc<dyn BlockDevice>, String> + Send + Sync>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The name of a device role in requests.
#[must_use]
pub fn role_name(role: DeviceRole) -> &'static str {
    match role {
        DeviceRole::Meta => "meta",
        DeviceRole::Data => "data",
    }
}

/// A request as text: `meta=PATH` or `data=PATH`.
#[must_use]
pub fn migrate_order(role: DeviceRole, path: &Path) -> String {
    format!("{}={}", role_name(role), path.display())
}

/// Reads a request.
///
/// # Errors
/// Not `meta=` or `data=` followed by an absolute path.
pub fn parse_migrate(s: &str) -> Result<(DeviceRole, PathBuf), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("'{s}' is not meta=PATH or data=PATH"))?;
    let role = match k {
        "meta" => DeviceRole::Meta,
        "data" => DeviceRole::Data,
        _ => return Err(format!("unknown device '{k}' (meta, data)")),
    };
    let path = PathBuf::from(v);
    if !path.is_absolute() {
        return Err(format!("{v} is not an absolute path"));
    }
    Ok((role, path))
}

/// A migration's outcome as `dualfs migrate --json` prints it, mounted or not.
#[must_use]
pub fn migrate_json(role: DeviceRole, path: &Path, r: &Result<MigrateReport, String>) -> Value {
    match r {
        Ok(r) => json!({
            "state": "done",
            "error": null,
            "device": role_name(role),
            "new_device": path.display().to_string(),
            "needed_blocks": r.needed_blocks,
            "copied_blocks": r.copied_blocks,
            "mirrored_blocks": r.mirrored_blocks,
            "old_uuid": uuid_text(r.old_uuid),
            "new_uuid": uuid_text(r.new_uuid),
            "micros": r.micros,
        }),
        Err(e) => {
            json!({ "state": "failed", "error": e, "device": role_name(role), "new_device": path.display().to_string() })
        }
    }
}

fn uuid_text(b: [u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// The migration running or last run through the control attribute.
pub struct Migrator {
    state: Mutex<Value>,
    /// One at a time.
    running: Mutex<()>,
    opener: DeviceOpener,
}

impl std::fmt::Debug for Migrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migrator").field("state", &self.state).finish_non_exhaustive()
    }
}

/// Opens a device without the mounting code's claims: the path's advisory
/// lock alone.
#[must_use]
pub fn default_opener() -> DeviceOpener {
    Arc::new(|path: &Path, _role: DeviceRole| {
        FileDevice::open(path, false, true)
            .map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))
    })
}

impl Default for Migrator {
    fn default() -> Self {
        Migrator::new(default_opener())
    }
}

impl Migrator {
    /// A migrator opening devices with `opener`.
    #[must_use]
    pub fn new(opener: DeviceOpener) -> Migrator {
        Migrator { state: Mutex::new(Value::Null), running: Mutex::new(()), opener }
    }

    /// Migrates as the request text `value` says, synchronously, and keeps
    /// the outcome for [`Migrator::status`].
    ///
    /// # Errors
    /// EBUSY while one runs; EINVAL for a bad request or a migration that
    /// cannot be done (the reason is in the status); the errno of a device
    /// failure.
    pub fn migrate(&self, vol: &Volume, value: &[u8]) -> Result<(), Errno> {
        let Ok(_one) = self.running.try_lock() else { return Err(Errno::EBUSY) };
        let text = std::str::from_utf8(value).map_err(|_| Errno::EINVAL)?;
        let (role, path) = match parse_migrate(text) {
            Ok(r) => r,
            Err(e) => {
                *lock(&self.state) = json!({ "state": "failed", "error": e });
                return Err(Errno::EINVAL);
            }
        };
        let new = match (self.opener)(&path, role) {
            Ok(d) => d,
            Err(e) => {
                *lock(&self.state) = migrate_json(role, &path, &Err(e));
                return Err(Errno::EINVAL);
            }
        };
        *lock(&self.state) = json!({ "state": "running", "done": 0, "total": 0 });
        let r = vol.migrate(role, new, &mut |done, total| {
            *lock(&self.state) = json!({ "state": "running", "done": done, "total": total });
        });
        let errno = r.as_ref().err().map(|e| {
            log::warn!("migrate {text}: {e}");
            Errno::from_i32(e.errno())
        });
        *lock(&self.state) = migrate_json(role, &path, &r.map_err(|e| e.to_string()));
        errno.map_or(Ok(()), Err)
    }

    /// The latest migration's state, as JSON bytes.
    #[must_use]
    pub fn status(&self) -> Vec<u8> {
        lock(&self.state).to_string().into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_migrate_order_reads_back_what_it_prints() {
        let p = Path::new("/dev/vg/new");
        assert_eq!(parse_migrate(&migrate_order(DeviceRole::Data, p)), Ok((DeviceRole::Data, p.to_path_buf())));
        assert!(parse_migrate("meta=relative.img").is_err());
        assert!(parse_migrate("both=/x").is_err());
        assert!(parse_migrate("/x").is_err());
    }
}

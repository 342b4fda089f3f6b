//! A device backed by an image file or a block device, with positional I/O.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{BlockDevice, check_range};
use crate::types::BLOCK_BYTES;

/// An image file or a block device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    /// Whole blocks the file or device holds; read again by
    /// [`BlockDevice::refresh_block_count`] after it grew.
    blocks: AtomicU64,
}

impl FileDevice {
    /// Opens `path` for reading and, unless `read_only`, writing.
    ///
    /// With `exclusive`, takes an advisory lock on the file so that a second
    /// mount of the same volume is refused while this one lives.
    ///
    /// # Errors
    /// The open or lock fails; `WouldBlock` means another process holds the lock.
    pub fn open(path: &Path, read_only: bool, exclusive: bool) -> io::Result<FileDevice> {
        let mut file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        if exclusive {
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("{} is in use by another DualFS process", path.display()),
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        // Seeking to the end gives the size of block devices as well as files.
        let bytes = file.seek(SeekFrom::End(0))?;
        Ok(FileDevice { file, path: path.to_path_buf(), blocks: AtomicU64::new(bytes / BLOCK_BYTES) })
    }

    /// The path this device was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl BlockDevice for FileDevice {
    fn block_count(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }

    fn refresh_block_count(&self) -> io::Result<u64> {
        let bytes = (&self.file).seek(SeekFrom::End(0))?;
        self.blocks.store(bytes / BLOCK_BYTES, Ordering::Release);
        Ok(bytes / BLOCK_BYTES)
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.block_count(), first, buf.len())?;
        self.file.read_exact_at(buf, first * BLOCK_BYTES)
    }

    fn write_blocks(&self, first: u64, buf: &[u8]) -> io::Result<()> {
        check_range(self.block_count(), first, buf.len())?;
        self.file.write_all_at(buf, first * BLOCK_BYTES)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

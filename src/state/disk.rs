//! Keeping RocksDB off a full disk.
//!
//! RocksDB that fails to append to its write-ahead log stops accepting
//! writes until it is reopened. So weir refuses writes itself, with 53100,
//! while the disk holding the data directory has less free space than a
//! reserve, and accepts them again as soon as space is freed: the server
//! never has to restart, and nothing committed is at risk.

use std::path::PathBuf;

use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct DiskGuard {
    path: PathBuf,
    /// Bytes that must stay free.
    reserve: u64,
}

impl DiskGuard {
    pub fn new(path: PathBuf, reserve: u64) -> DiskGuard {
        DiskGuard { path, reserve }
    }

    /// Fails with 53100 while free space is below the reserve.
    pub fn check(&self) -> Result<()> {
        let free = self.free()?;
        if free >= self.reserve {
            return Ok(());
        }
        Err(Error::DiskFull(format!(
            "could not write: the disk holding {} has {} MiB free, less than the {} MiB weir keeps free; free space on it (or lower --min-free-disk-mb) and retry; nothing of this statement was written",
            self.path.display(),
            free >> 20,
            self.reserve >> 20
        )))
    }

    fn free(&self) -> Result<u64> {
        let stats = rustix::fs::statvfs(&self.path).map_err(std::io::Error::from)?;
        Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
    }
}

/// Whether a storage error means the disk is full.
pub fn is_disk_full(error: &Error) -> bool {
    match error {
        Error::DiskFull(_) => true,
        Error::Storage(e) => e.to_string().contains("No space left on device"),
        Error::Io(e) => e.raw_os_error() == Some(28),
        _ => false,
    }
}

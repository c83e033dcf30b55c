//! Keeping RocksDB off a full disk.
//!
//! RocksDB that fails to append to its write-ahead log stops accepting
//! writes until it is reopened. So weir refuses writes itself, with 53100,
//! while the disk holding the data directory has less free space than a
//! reserve, and accepts them again as soon as space is freed: the server
//! never has to restart, and nothing committed is at risk.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long a reading of free space that left ample room is trusted: a
/// `statvfs` per commit group was a measurable part of a one-row INSERT.
const TRUSTED_FOR: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct DiskGuard {
    path: PathBuf,
    /// Bytes that must stay free.
    reserve: u64,
    /// When free space was last read, and whether it was ample then.
    last: Arc<Mutex<Option<(Instant, bool)>>>,
}

impl DiskGuard {
    pub fn new(path: PathBuf, reserve: u64) -> DiskGuard {
        DiskGuard {
            path,
            reserve,
            last: Default::default(),
        }
    }

    /// Fails with 53100 while free space is below the reserve. Space is read
    /// again on every call once it is within twice the reserve, so a disk
    /// filling up or freed is seen at once.
    pub fn check(&self) -> Result<()> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, true)) = *last
            && at.elapsed() < TRUSTED_FOR
        {
            return Ok(());
        }
        let free = self.free()?;
        *last = Some((Instant::now(), free / 2 >= self.reserve));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_disk_is_refused_on_every_check_not_only_the_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let guard = DiskGuard::new(dir.path().to_path_buf(), u64::MAX);
        for _ in 0..3 {
            assert!(matches!(guard.check(), Err(Error::DiskFull(_))));
        }
        let ample = DiskGuard::new(dir.path().to_path_buf(), 1);
        for _ in 0..3 {
            ample.check().expect("a disk with room accepts writes");
        }
    }
}

//! Backups: a RocksDB checkpoint of the whole store, which holds the
//! catalog, every table's rows and log, and every view's state and input
//! offsets. Every family flushes at once (`atomic_flush`), so the
//! checkpoint is one cut through every write RocksDB had applied: each
//! view's state and the offsets it read up to come from the same epoch.
//!
//! A backup directory holds `db/` (RocksDB's files, hard-linked where the
//! backup is on the same file system, else copied) and [`MANIFEST`], which
//! says what made it. Restoring copies `db/` into a new data directory.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::{Error, Result};

/// The file that marks a directory as a weir backup.
pub const MANIFEST: &str = "weir-backup.json";

/// What a backup says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The weir version that wrote it.
    pub version: String,
    /// Seconds since 1970 when it was made.
    pub created: u64,
    /// Files and bytes of its `db/`.
    pub files: u64,
    pub bytes: u64,
}

impl Store {
    /// Back the store up into `to`, a directory that must not exist or be
    /// empty. Writes acknowledged before the call are in it.
    pub fn backup(&self, to: &Path) -> Result<Manifest> {
        prepare_empty(to, "back up into")?;
        self.unapplied.settle(&self.db)?;
        let db = to.join("db");
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(&db)?;
        let (files, bytes) = size_of(&db)?;
        let manifest = Manifest {
            version: env!("CARGO_PKG_VERSION").to_string(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default(),
            files,
            bytes,
        };
        let json = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| Error::Internal(format!("cannot write the backup manifest: {e}")))?;
        std::fs::write(to.join(MANIFEST), json)?;
        Ok(manifest)
    }
}

/// Copy the backup in `from` to `db_path`, the RocksDB directory of a new
/// data directory, which must not exist or be empty.
pub fn restore(from: &Path, db_path: &Path) -> Result<Manifest> {
    let manifest = read_manifest(from)?;
    prepare_empty(db_path, "restore into")?;
    for entry in std::fs::read_dir(from.join("db"))? {
        let entry = entry?;
        std::fs::copy(entry.path(), db_path.join(entry.file_name()))?;
    }
    // The copies must be on disk before the node that starts on them
    // acknowledges anything.
    for entry in std::fs::read_dir(db_path)? {
        std::fs::File::open(entry?.path())?.sync_all()?;
    }
    std::fs::File::open(db_path)?.sync_all()?;
    Ok(manifest)
}

pub fn read_manifest(from: &Path) -> Result<Manifest> {
    let path = from.join(MANIFEST);
    let bytes = std::fs::read(&path).map_err(|e| {
        Error::Config(format!(
            "{} is not a weir backup (no {MANIFEST}: {e})",
            from.display()
        ))
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::Config(format!("{} is unreadable: {e}", path.display())))
}

/// Make sure `dir` exists and is empty, creating it (and its parents)
/// when missing; an error when it holds anything, so that nothing is ever
/// overwritten.
fn prepare_empty(dir: &Path, doing: &str) -> Result<()> {
    match std::fs::read_dir(dir).map(|mut entries| entries.next().is_none()) {
        Ok(false) => Err(Error::DuplicateFile(format!(
            "cannot {doing} {}: the directory is not empty",
            dir.display()
        ))),
        Ok(true) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(std::fs::create_dir_all(dir)?),
        Err(e) => Err(e.into()),
    }
}

fn size_of(dir: &Path) -> Result<(u64, u64)> {
    let mut files = 0;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        files += 1;
        bytes += entry?.metadata()?.len();
    }
    Ok((files, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_restores_every_family() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("db")).expect("open");
        for family in super::super::FAMILIES {
            let cf = store.db.cf_handle(family).expect("family");
            store
                .db
                .put_cf(&cf, b"key", family.as_bytes())
                .expect("put");
        }
        let backup = dir.path().join("backup");
        let manifest = store.backup(&backup).expect("backup");
        assert!(manifest.files > 0 && manifest.bytes > 0, "{manifest:?}");
        // Later writes are not in it.
        let cf = store.db.cf_handle("rows").expect("family");
        store.db.put_cf(&cf, b"later", b"x").expect("put");
        drop(store);

        let restored = dir.path().join("restored/db");
        assert_eq!(restore(&backup, &restored).expect("restore"), manifest);
        let store = Store::open(&restored).expect("open restored");
        for family in super::super::FAMILIES {
            let cf = store.db.cf_handle(family).expect("family");
            let value = store.db.get_cf(&cf, b"key").expect("get");
            assert_eq!(value.as_deref(), Some(family.as_bytes()));
        }
        let cf = store.db.cf_handle("rows").expect("family");
        assert_eq!(store.db.get_cf(&cf, b"later").expect("get"), None);
    }

    #[test]
    fn nothing_is_overwritten() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("db")).expect("open");
        std::fs::write(dir.path().join("full"), b"").expect("write");
        let e = store.backup(dir.path()).expect_err("not empty");
        assert_eq!(e.sqlstate(), "58P02", "{e}");
        let e = restore(&dir.path().join("nothing"), &dir.path().join("x")).expect_err("no backup");
        assert!(e.to_string().contains("is not a weir backup"), "{e}");
    }
}

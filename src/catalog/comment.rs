//! Comments (`COMMENT ON`): text attached to an object or one of its
//! columns, kept in the catalog family beside the definitions and shown
//! by `pg_description` (psql's `\d+`, `\dt+`).

use std::collections::BTreeMap;

use rocksdb::DB;

use crate::error::{Error, Result};
use crate::state::{CF_CATALOG, cf};

/// What a comment is on: an object id, and 0 for the object itself or a
/// column's 1-based position (PostgreSQL's `objsubid`).
pub type CommentKey = (u64, i32);

const PREFIX: &[u8] = b"comment\x00";

/// Where a comment is kept in the catalog family.
pub fn key(on: CommentKey) -> Vec<u8> {
    [PREFIX, &on.0.to_be_bytes(), &on.1.to_be_bytes()].concat()
}

/// Every persisted comment.
pub fn load(db: &DB) -> Result<BTreeMap<CommentKey, String>> {
    let mut comments = BTreeMap::new();
    for entry in db.prefix_iterator_cf(cf(db, CF_CATALOG), PREFIX) {
        let (key, value) = entry?;
        let Some(rest) = key.strip_prefix(PREFIX) else {
            break;
        };
        let (id, sub) = rest
            .split_at_checked(8)
            .and_then(|(id, sub)| Some((id.try_into().ok()?, sub.try_into().ok()?)))
            .ok_or_else(|| Error::Internal("malformed comment key".into()))?;
        let text = String::from_utf8(value.to_vec())
            .map_err(|_| Error::Internal("comment is not UTF-8".into()))?;
        comments.insert((u64::from_be_bytes(id), i32::from_be_bytes(sub)), text);
    }
    Ok(comments)
}

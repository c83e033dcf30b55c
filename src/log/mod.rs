//! Log topics: the inputs and outputs of every dataflow.
//!
//! Every accepted write is appended to its table's topic before the statement
//! returns. A topic has partitions; a partition is a sequence of records
//! addressed by offset. Records are stored in chunks (like Kafka's record
//! batches): one RocksDB entry per chunk, keyed by the chunk's first offset.

pub mod chunk;
pub mod embedded;
pub mod writer;

pub use embedded::{Chunk, ChunkEntry};

use crate::state::{CF_CHANGELOG, CF_LOG};

/// A topic and the column family that stores its chunks.
///
/// Tables' logs and views' changelogs grow side by side. In one family
/// every memtable flush would hold both, so each flushed file would
/// overlap the next and RocksDB would rewrite them all as they move down;
/// each in a family of its own, one stream's flushed files follow one
/// another and move down as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Topic {
    pub id: u64,
    pub family: &'static str,
}

impl Topic {
    /// The log of a table or source: what writes to it append.
    pub fn table(id: u64) -> Topic {
        Topic { id, family: CF_LOG }
    }

    /// A materialized view's changelog: what its dataflow appends.
    pub fn changelog(id: u64) -> Topic {
        Topic {
            id,
            family: CF_CHANGELOG,
        }
    }
}

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

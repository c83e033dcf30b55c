//! Idempotent producers: a session or connector tags each write with its
//! id and a sequence number, and the sequence commits in the same batch as
//! the rows. A retry after a lost acknowledgement, or a connector re-reading
//! after a crash, then finds its sequence committed and writes nothing twice.

use std::collections::HashMap;

use rocksdb::{DB, WriteBatch};

use crate::error::{Error, Result};
use crate::state::keys::producer_key;
use crate::state::{CF_STATE, cf};

/// An idempotent publisher's id and the sequence number of one write.
pub type Producer = (String, u64);

tokio::task_local! {
    /// The producer id and sequence number of the statement being run, when
    /// its session set them (`SET weir.producer_id`, `SET weir.producer_seq`).
    pub static PRODUCER: Option<Producer>;
}

/// The producer of the statement this task runs, if any.
pub fn current_producer() -> Option<Producer> {
    PRODUCER.try_with(Clone::clone).ok().flatten()
}

/// The last sequence number `id` committed: for a connector, where it resumes.
pub fn producer_seq(db: &DB, id: &str) -> Result<Option<u64>> {
    crate::state::read_u64(db, &producer_key(id))
}

/// The last sequence number of each producer that wrote in one group.
#[derive(Default)]
pub(super) struct Sequences(HashMap<String, u64>);

impl Sequences {
    /// Whether the write of these positions has committed already: they
    /// commit together, so any one of them tells.
    pub(super) fn all_committed(&self, db: &DB, producers: &[Producer]) -> Result<bool> {
        for (id, seq) in producers {
            match self.last_seq(db, id)? {
                Some(last) if *seq <= last => {}
                _ => return Ok(false),
            }
        }
        Ok(!producers.is_empty())
    }

    /// The last sequence number `id` committed, in this group or before.
    fn last_seq(&self, db: &DB, id: &str) -> Result<Option<u64>> {
        if let Some(seq) = self.0.get(id) {
            return Ok(Some(*seq));
        }
        let Some(bytes) = db.get_cf(cf(db, CF_STATE), producer_key(id))? else {
            return Ok(None);
        };
        let raw: [u8; 8] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| Error::Internal("malformed producer sequence in state".into()))?;
        Ok(Some(u64::from_be_bytes(raw)))
    }

    pub(super) fn extend(&mut self, producers: Vec<Producer>) {
        self.0.extend(producers);
    }

    /// About what the sequences add to a `WriteBatch`.
    pub(super) fn batch_bytes(&self) -> usize {
        self.0.keys().map(|id| id.len() + 40).sum()
    }

    /// A producer's sequence commits in the same write as its rows.
    pub(super) fn put(&self, db: &DB, batch: &mut WriteBatch) {
        put_sequences(
            db,
            batch,
            self.0.iter().map(|(id, seq)| (id.as_str(), *seq)),
        );
    }
}

/// Put producers' sequences into a batch.
pub(super) fn put_sequences<'a>(
    db: &DB,
    batch: &mut WriteBatch,
    producers: impl IntoIterator<Item = (&'a str, u64)>,
) {
    for (id, seq) in producers {
        batch.put_cf(cf(db, CF_STATE), producer_key(id), seq.to_be_bytes());
    }
}

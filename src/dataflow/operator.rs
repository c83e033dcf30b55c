//! The operator trait: synchronous state machines over change batches.

use crate::dataflow::change::{Barrier, ChangeBatch, Watermark};
use crate::dataflow::state::EpochState;
use crate::error::Result;

/// What an operator may touch while handling a message.
pub struct Context<'a> {
    /// Reads of committed state and this epoch's pending writes.
    pub state: &'a mut EpochState,
    /// The operator's own key prefix in the state family.
    pub prefix: &'a [u8],
    output: Vec<ChangeBatch>,
}

impl<'a> Context<'a> {
    pub fn new(state: &'a mut EpochState, prefix: &'a [u8]) -> Context<'a> {
        Context {
            state,
            prefix,
            output: Vec::new(),
        }
    }

    /// Send changes downstream.
    pub fn emit(&mut self, batch: ChangeBatch) {
        if !batch.is_empty() {
            self.output.push(batch);
        }
    }

    pub fn take_output(&mut self) -> Vec<ChangeBatch> {
        std::mem::take(&mut self.output)
    }

    /// A key in this operator's part of the state family.
    pub fn key(&self, suffix: &[u8]) -> Vec<u8> {
        let mut key = self.prefix.to_vec();
        key.extend_from_slice(suffix);
        key
    }
}

/// An incremental operator.
///
/// The runtime calls the methods from one thread, in message order. An
/// operator keeps whatever it must remember in the state family through
/// [`Context::state`]; writes made during an epoch commit atomically with the
/// epoch, so after a restart the operator sees exactly the committed epochs.
pub trait Operator: Send + 'static {
    /// A short name, shown by EXPLAIN.
    fn name(&self) -> &'static str;

    /// Details shown by EXPLAIN, e.g. the predicate of a filter.
    fn describe(&self) -> String {
        String::new()
    }

    /// Called with changes arriving on input `input`; may emit changes.
    fn on_changes(&mut self, input: usize, batch: ChangeBatch, cx: &mut Context<'_>) -> Result<()>;

    /// Called when event time advances; returns the watermark to forward.
    fn on_watermark(&mut self, wm: Watermark, _cx: &mut Context<'_>) -> Result<Option<Watermark>> {
        Ok(Some(wm))
    }

    /// Called at the end of an epoch, after every change of the epoch;
    /// operators that consolidate emit here and write their state.
    fn on_barrier(&mut self, _barrier: Barrier, _cx: &mut Context<'_>) -> Result<()> {
        Ok(())
    }
}

//! Changes: what flows between incremental operators.

pub mod change;

pub use change::{Barrier, ChangeBatch, Message, Watermark};

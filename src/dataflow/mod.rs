//! Changes: what flows between incremental operators.

pub mod asof;
pub mod change;
pub mod clock;
pub mod errors;
pub mod gap_fill;
pub mod graph;
pub mod index_read;
pub mod late;
pub mod node;
pub mod operator;
pub mod operators;
pub mod partition;
pub mod profile;
pub mod runtime;
pub mod state;
pub mod subscribe;
pub mod task;
pub mod window;

pub use change::{Barrier, ChangeBatch, Message, Watermark};

//! The part of `datafusion` the connector formats use: arrow.

pub use arrow;

//! weir: a streaming SQL database server that speaks the Postgres wire protocol.
//!
//! # Layout
//!
//! **server = bytes · session = statements · sql = plans · catalog = names ·
//! dataflow = changes · log = inputs and outputs · state = storage**
//!
//! ```text
//!  psql / drivers --pgwire--> server --> session --> sql (parse, bind, plan) --> catalog
//!                                            |                 |
//!                                            |       DataFusion LogicalPlan
//!                                            v                 v
//!                  pull query: DataFusion over a        writes: state::Writer (group commit)
//!                  RocksDB snapshot (state::ReadView)       |            |
//!                                                           v            v
//!                                              table rows (state)   log topics (log)
//! ```
//!
//! - [`server`]: pgwire only; turns bytes into calls on a [`session::Session`].
//! - [`session`]: per-connection settings and the [`session::Engine`] that owns
//!   the catalog, the store and the DataFusion context.
//! - [`sql`]: our statements on top of `sqlparser`, one handler per statement.
//! - [`catalog`]: tables and their definitions, persisted in RocksDB.
//! - [`dataflow`]: the change model that flows between operators.
//! - [`log`]: the embedded, partitioned, offset-addressed log every write goes to.
//! - [`state`]: RocksDB, key layout, row encoding and the group-commit writer.

pub mod catalog;
pub mod config;
pub mod dataflow;
pub mod error;
pub mod log;
pub mod server;
pub mod session;
pub mod sql;
pub mod state;
pub mod telemetry;

pub use config::Config;
pub use error::{Error, Result};

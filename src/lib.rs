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
//!   the catalog, the store and the DataFusion context; change streams
//!   (`SUBSCRIBE`) that tail a relation's log topic at the reader's pace.
//! - [`sql`]: our statements on top of `sqlparser`, one handler per statement.
//! - [`catalog`]: tables and their definitions, persisted in RocksDB.
//! - [`dataflow`]: the change model that flows between operators.
//! - [`log`]: the embedded, partitioned, offset-addressed log every write goes to.
//! - [`state`]: RocksDB, key layout, row encoding and the group-commit writer.

pub mod catalog;
pub mod config;
pub mod connector;
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

#[cfg(test)]
mod layout {
    //! Dependencies point down: nothing below the server imports it, and the
    //! storage layers import nothing that plans or serves.

    fn sources(dir: &str) -> Vec<(String, String)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src")
            .join(dir);
        let mut out = Vec::new();
        let mut stack = vec![root];
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                for entry in std::fs::read_dir(&path)
                    .expect("readable source dir")
                    .flatten()
                {
                    stack.push(entry.path());
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("readable source");
                out.push((path.display().to_string(), text));
            }
        }
        out
    }

    fn assert_no_imports(dirs: &[&str], forbidden: &[&str]) {
        for dir in dirs {
            for (path, text) in sources(dir) {
                for module in forbidden {
                    assert!(
                        !text.contains(&format!("crate::{module}::"))
                            && !text.contains(&format!("crate::{module}}}")),
                        "{path} imports crate::{module}, which sits above it"
                    );
                }
            }
        }
    }

    #[test]
    fn nothing_below_the_server_imports_it() {
        assert_no_imports(
            &["session", "sql", "catalog", "dataflow", "state", "log"],
            &["server"],
        );
    }

    #[test]
    fn storage_imports_no_planning_or_sessions() {
        assert_no_imports(
            &["state", "log"],
            &["server", "session", "sql", "dataflow", "catalog"],
        );
    }
}

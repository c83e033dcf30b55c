//! weir: a streaming SQL database server that speaks the Postgres wire protocol.
//!
//! # Layout
//!
//! **server = bytes · session = statements · sql = plans · catalog = names ·
//! dataflow = changes · log = inputs and outputs · state = storage**
//!
//! Data takes two paths. A statement takes the table path; a materialized
//! view's changes take the dataflow path. The log joins them: writes end in
//! a table's log, and views start from it.
//!
//! ```text
//!  TABLE PATH (a statement)
//!  psql / drivers --pgwire--> server --> session --> sql: parse, plan (names: catalog)
//!    writes: sql --> log::writer: checks, log offsets, group commit, one sync
//!                --> RocksDB: rows family (live rows) + log family (the table's topic)
//!    reads:  sql --> DataFusion over one RocksDB snapshot (state::ReadView)
//!
//!  DATAFLOW PATH (a materialized view)
//!  table log / view changelog    (Kafka and generator sources write via the writer)
//!    --> source task --> operator tasks --> Materialize         (dataflow::task)
//!        Changes, Watermark, Idle, Barrier on bounded channels; barriers aligned
//!    --> coordinator: one WriteBatch per epoch: state, view rows,
//!        changelog, source offsets                               (dataflow::runtime)
//!    --> the changelog's readers: SUBSCRIBE and cursors (session::subscribe),
//!        Kafka sinks (connector), views on views
//! ```
//!
//! - [`server`]: pgwire only; frames and checks bytes, calls a [`session::Session`].
//! - [`session`]: per-connection state and the shared [`session::Engine`];
//!   change streams (`SUBSCRIBE`) that tail a log at the reader's pace.
//! - [`sql`]: our statements on top of `sqlparser`, planning through
//!   DataFusion, one handler per statement.
//! - [`catalog`]: every object's definition and dependencies, in RocksDB.
//! - [`dataflow`]: the change model, the operators, and the epoch runtime.
//! - [`connector`]: Kafka sources and sinks, and generators.
//! - [`log`]: topics of chunked, offset-addressed records: every write's and
//!   every view's changes; the group-commit writer that appends a table's writes.
//! - [`state`]: RocksDB, key layout, row encoding, the commit log.
//!
//! `docs/architecture.md` is the longer map.

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

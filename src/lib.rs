//! weir: a streaming SQL database server that speaks the Postgres wire protocol.
//!
//! # Layout
//!
//! **server = bytes · session = statements · sql = plans · connector =
//! sources and sinks · dataflow = changes · catalog = names · log = inputs
//! and outputs · state = storage**, each importing only the ones after it
//! (the `layout` test below holds the table of allowed imports).
//!
//! Data takes two paths. A statement takes the table path; a materialized
//! view's changes take the dataflow path. The log joins them: writes end in
//! a table's log, and views start from it.
//!
//! ```text
//!  TABLE PATH (a statement)
//!  psql / drivers --pgwire--> server --session::wire--> session: a handler per statement
//!    --> sql: parse, plan through DataFusion (names: catalog)
//!    writes: handler --> log::writer: checks, log offsets, group commit, one sync
//!                    --> RocksDB: rows family (live rows) + log family (the table's topic)
//!    reads:  handler --> DataFusion over one RocksDB snapshot (state::ReadView)
//!
//!  DATAFLOW PATH (a materialized view)
//!  CREATE MATERIALIZED VIEW --> sql::plan: LogicalPlan -> operator graph
//!  table log / view changelog    (Kafka and generator sources write via the writer)
//!    --> source task --> operator tasks --> Materialize         (dataflow::task)
//!        Changes, Watermark, Idle, Barrier on bounded channels; barriers aligned
//!    --> coordinator: one WriteBatch per epoch: state, view rows,
//!        changelog, source offsets                               (dataflow::runtime)
//!    --> the changelog's readers (dataflow::subscribe): SUBSCRIBE and cursors
//!        (session), Kafka sinks (connector), views on views
//! ```
//!
//! - [`server`]: pgwire only; frames and checks bytes, and reaches statements
//!   through [`session::wire`] and the [`session::Engine`]'s methods.
//! - [`session`]: per-connection state, the shared [`session::Engine`], and
//!   one handler per statement.
//! - [`sql`]: our statements on top of `sqlparser`, planning through
//!   DataFusion, and the view planner that turns a plan into operators.
//! - [`connector`]: Kafka sources and sinks, and generators, given a
//!   [`dataflow::node::Node`] (store, catalog, writer, clock), not the Engine.
//! - [`dataflow`]: the change model, the operators, the epoch runtime, and
//!   change streams that tail a log at the reader's pace.
//! - [`catalog`]: every object's definition and dependencies, in RocksDB.
//! - [`log`]: topics of chunked, offset-addressed records, and the
//!   group-commit writer that appends every table write to them.
//! - [`state`]: RocksDB, key layout, row encoding, backups.
//! - [`cluster`]: a node's membership of a cluster through Kafka: its
//!   group, its partitions, the address book and the catalog log's topic.
//! - [`admin`]: `weir backup` and `weir restore`, run beside a node.
//!
//! `docs/architecture.md` is the longer map.

pub mod admin;
pub mod catalog;
pub mod cluster;
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
    //! Dependencies point down the layers the module doc draws. Each
    //! top-level module names the modules it may import; an import of any
    //! other, outside tests and comments, fails here.

    use std::collections::BTreeSet;
    use std::path::Path;

    const ALLOWED: &[(&str, &[&str])] = &[
        (
            "server",
            &["session", "catalog", "config", "error", "telemetry"],
        ),
        (
            "session",
            &[
                "sql",
                "connector",
                "dataflow",
                "catalog",
                "cluster",
                "log",
                "state",
                "config",
                "error",
                "telemetry",
            ],
        ),
        (
            "sql",
            &["dataflow", "catalog", "log", "state", "config", "error"],
        ),
        (
            "connector",
            &["dataflow", "catalog", "cluster", "log", "state", "error"],
        ),
        ("dataflow", &["catalog", "log", "state", "config", "error"]),
        ("catalog", &["log", "state", "error"]),
        ("log", &["state", "error"]),
        ("state", &["error"]),
        ("admin", &["catalog", "log", "state", "error"]),
        ("cluster", &["error"]),
        ("config", &["error"]),
        ("telemetry", &[]),
        ("error", &[]),
    ];

    /// The text of every source file under `dir`, test modules and
    /// comments left out.
    fn sources(dir: &Path) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                let entries = std::fs::read_dir(&path).expect("readable source dir");
                stack.extend(entries.flatten().map(|e| e.path()));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("readable source");
                out.push((path.display().to_string(), code_outside_tests(&text)));
            }
        }
        out
    }

    fn code_outside_tests(text: &str) -> String {
        let body = text.split("#[cfg(test)]\nmod ").next().unwrap_or_default();
        body.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The top-level modules a file's code names as `crate::m`.
    fn imported(text: &str) -> BTreeSet<String> {
        text.match_indices("crate::")
            .map(|(at, _)| {
                text[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .filter(|m| m.chars().next().is_some_and(char::is_lowercase))
            .collect()
    }

    /// Every import between top-level modules that the table does not allow.
    fn violations(src: &Path) -> Vec<String> {
        let mut found = Vec::new();
        for (module, allowed) in ALLOWED {
            let file = src.join(format!("{module}.rs"));
            let files = if file.is_file() {
                vec![(
                    file.display().to_string(),
                    code_outside_tests(&std::fs::read_to_string(&file).expect("readable source")),
                )]
            } else {
                sources(&src.join(module))
            };
            for (path, text) in files {
                for target in imported(&text) {
                    if target != *module && !allowed.contains(&target.as_str()) {
                        found.push(format!("{path}: {module} -> {target}"));
                    }
                }
            }
        }
        found
    }

    #[test]
    fn imports_point_down_the_layers() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let found = violations(&src);
        assert!(
            found.is_empty(),
            "imports outside the layer table:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn every_top_level_module_is_in_the_table() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for entry in std::fs::read_dir(&src).expect("src").flatten() {
            let name = entry.file_name().to_string_lossy().replace(".rs", "");
            if name == "lib" || name == "main" {
                continue;
            }
            assert!(
                ALLOWED.iter().any(|(m, _)| *m == name),
                "src/{name} has no row in the layer table"
            );
        }
    }

    #[test]
    fn an_upward_import_is_found() {
        assert_eq!(
            imported(&code_outside_tests(
                "use crate::session::Engine;\n// crate::server\nfn f() { crate::sql::x() }"
            )),
            ["session", "sql"].map(String::from).into_iter().collect()
        );
        assert_eq!(
            code_outside_tests("use a;\n#[cfg(test)]\nmod tests { use crate::server; }"),
            "use a;"
        );
    }
}

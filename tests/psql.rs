//! psql 15's meta-commands against a real weir server: every one answers,
//! and its answer matches PostgreSQL 15's on the same objects as closely as
//! `tests/psql/commands.txt` says (the expected answers come from
//! `tests/psql/regenerate.sh`, run against PostgreSQL; this test needs no
//! PostgreSQL server, only psql).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TestServer;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/psql")
}

/// psql's answer to `command` (`-c`) or to a file (`-f`): stdout and
/// stderr together, and whether it succeeded.
fn psql(server: &TestServer, args: &[&str]) -> (bool, String) {
    let output = Command::new("psql")
        .args([
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-U",
            "weir",
            "-d",
            "weir",
        ])
        .arg("-p")
        .arg(server.port.to_string())
        .args(args)
        .output()
        .expect("psql runs (scripts/install-deps.sh installs postgresql-client)");
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success() && !text.contains("ERROR:"), text)
}

/// How an answer is compared with PostgreSQL's.
enum Mode {
    Exact,
    Lines(usize),
    Columns(usize),
    /// The title and the column names.
    Header,
    Ok,
}

fn parse_mode(text: &str) -> Mode {
    let mut words = text.split_whitespace();
    let word = words.next().unwrap_or_default();
    let n = || {
        words
            .clone()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    match word {
        "exact" => Mode::Exact,
        "lines" => Mode::Lines(n()),
        "columns" => Mode::Columns(n()),
        "header" => Mode::Header,
        "ok" => Mode::Ok,
        other => panic!("unknown comparison {other} in commands.txt"),
    }
}

/// The title, the header and the first `n` cells of each row, and the
/// row count: what a listing says, without the columns weir cannot match
/// (sizes).
fn columns(answer: &str, n: usize) -> Vec<String> {
    answer
        .lines()
        .map(|line| match line.contains('|') {
            true => line
                .split('|')
                .take(n)
                .map(str::trim)
                .collect::<Vec<_>>()
                .join("|"),
            false if line.starts_with('-') => String::new(),
            false => line.trim().to_string(),
        })
        .collect()
}

fn matches(mode: &Mode, expected: &str, got: &str) -> bool {
    match mode {
        Mode::Exact => expected == got,
        Mode::Lines(n) => {
            let first = |s: &str| s.lines().take(*n).map(str::to_string).collect::<Vec<_>>();
            first(expected) == first(got)
        }
        Mode::Columns(n) => columns(expected, *n) == columns(got, *n),
        Mode::Header => {
            let head = |s: &str| {
                let lines = columns(s, usize::MAX);
                let header = lines.iter().position(|l| l.contains('|')).unwrap_or(0);
                lines[..=header.min(lines.len().saturating_sub(1))].to_vec()
            };
            head(expected) == head(got)
        }
        Mode::Ok => true,
    }
}

#[test]
fn psql_meta_commands_answer_as_postgresql_does() {
    let server = TestServer::start();
    let ddl = dir().join("ddl.sql");
    let (ok, text) = psql(&server, &["-q", "-f", &ddl.to_string_lossy()]);
    assert!(ok, "ddl.sql failed:\n{text}");
    let commands = std::fs::read_to_string(dir().join("commands.txt")).expect("commands.txt");
    let mut failures = Vec::new();
    let mut count = 0;
    for line in commands
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        count += 1;
        let (mode, command) = line.split_once('\t').expect("mode<TAB>command");
        let expected_path = dir().join(format!("expected/{count:02}.out"));
        let expected = std::fs::read_to_string(&expected_path).expect("an expected answer");
        let (ok, got) = psql(&server, &["-c", command]);
        if !ok {
            failures.push(format!("{command} failed:\n{got}"));
        } else if !matches(&parse_mode(mode), &expected, &got) {
            failures.push(format!(
                "{command} ({mode}) differs from PostgreSQL's:\n--- PostgreSQL 15\n{expected}--- weir\n{got}"
            ));
        }
    }
    assert!(count >= 34, "commands.txt lists {count} meta-commands");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn psql_describes_sources_watermarks_and_emit_policies() {
    let server = TestServer::start();
    let setup = [
        "CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'Bid', nexmark.event.num = '10')",
        "CREATE TABLE clicks (url VARCHAR, at TIMESTAMP, WATERMARK FOR at AS at - INTERVAL '4' SECOND) APPEND ONLY",
        "CREATE MATERIALIZED VIEW w AS SELECT window_start, count(*) AS n \
         FROM TUMBLE(clicks, at, INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE",
        "COMMENT ON SOURCE bid IS 'auction bids'",
    ];
    for statement in setup {
        let (ok, text) = psql(&server, &["-c", statement]);
        assert!(ok, "{statement}:\n{text}");
    }
    let (_, bid) = psql(&server, &["-c", "\\d+ bid"]);
    assert!(
        bid.contains("Options: connector=nexmark, nexmark.event.num=10, nexmark.table.type=Bid"),
        "{bid}"
    );
    let (_, clicks) = psql(&server, &["-c", "\\d+ clicks"]);
    assert!(
        clicks.contains("Options: append_only=true, watermark=at AS at - INTERVAL '4' SECOND"),
        "{clicks}"
    );
    let (_, w) = psql(&server, &["-c", "\\d+ w"]);
    assert!(w.contains("Materialized view \"public.w\""), "{w}");
    assert!(w.contains("Options: emit=on window close"), "{w}");
    let (_, tables) = psql(&server, &["-c", "\\dt+"]);
    assert!(tables.contains("| auction bids"), "{tables}");
    let (_, views) = psql(&server, &["-c", "\\dm"]);
    assert!(
        views.contains("public | w    | materialized view"),
        "{views}"
    );
}

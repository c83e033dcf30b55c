//! The Nexmark queries of `benches/nexmark/` as materialized views over the
//! built-in generator, each checked against the same query run as a batch
//! (DataFusion) over the same events. The views exist before the events
//! arrive, so they are maintained incrementally, epoch by epoch.

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, text_rows};

/// Events of the whole stream: 18,400 bids, 1,200 auctions, 400 people.
const EVENTS: u64 = 20_000;

/// Each source's columns with the watermark the benchmark declares, so that
/// the views are planned as there: q4 and q7 as interval joins.
const SOURCES: [(&str, &str, &str); 3] = [
    (
        "person",
        "Person",
        "id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, \
         city VARCHAR, state VARCHAR, date_time TIMESTAMP, extra VARCHAR",
    ),
    (
        "auction",
        "Auction",
        "id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, \
         reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, \
         category BIGINT, extra VARCHAR",
    ),
    (
        "bid",
        "Bid",
        "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
         date_time TIMESTAMP, extra VARCHAR",
    ),
];

/// Generated at 10,000 events a second: about two seconds of arrivals.
async fn create_sources(client: &tokio_postgres::Client) {
    for (name, kind, columns) in SOURCES {
        client
            .batch_execute(&format!(
                "CREATE SOURCE {name} ({columns}, \
                 WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
                 WITH (connector = 'nexmark', \
                 nexmark.table.type = '{kind}', nexmark.event.num = '{EVENTS}', \
                 nexmark.event.rate = '10000')"
            ))
            .await
            .expect("create source");
    }
}

async fn wait_finished(client: &tokio_postgres::Client) {
    let done = [
        "auction|nexmark|finished",
        "bid|nexmark|finished",
        "person|nexmark|finished",
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    while text_rows(client, "SHOW SOURCES").await != done {
        assert!(Instant::now() < deadline, "the generators never finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each file's `CREATE MATERIALIZED VIEW name AS <query>`, comments dropped.
fn queries() -> Vec<(String, String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/nexmark");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("benches/nexmark")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read");
            let create: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            let (head, query) = create.split_once(" AS\n").expect("CREATE ... AS <newline>");
            // The batch query is the view's without its emit policy.
            let query: Vec<&str> = query.lines().filter(|l| !l.starts_with("EMIT ")).collect();
            let name = head
                .split_whitespace()
                .last()
                .expect("a view name")
                .to_string();
            (name, create.clone(), query.join("\n"))
        })
        .collect()
}

async fn sorted(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let mut rows = text_rows(client, sql).await;
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_queries_as_views_equal_their_batch_results() {
    let server = TestServer::start();
    let client = server.connect().await;
    create_sources(&client).await;
    let mut failures = Vec::new();
    let mut created = Vec::new();
    for (name, create, _) in queries().iter().filter(|(n, ..)| n == "q4" || n == "q7") {
        // Interval joins: state bounded by the watermark, as Flink's is not.
        let plan = text_rows(&client, &format!("EXPLAIN {create}")).await;
        if !plan.iter().any(|line| line.contains(" expires left at ")) {
            failures.push(format!(
                "{name}: not planned as an interval join: {plan:#?}"
            ));
        }
    }
    for (name, create, query) in queries() {
        match client.batch_execute(&create).await {
            Ok(()) => created.push((name, query)),
            Err(e) => failures.push(format!("{name}: {e:?}")),
        }
    }
    wait_finished(&client).await;
    client.batch_execute("FLUSH").await.expect("flush");
    for (name, query) in created {
        let view = sorted(&client, &format!("SELECT * FROM {name}")).await;
        let batch = sorted(&client, &query).await;
        eprintln!("{name}: {} rows", view.len());
        if view.is_empty() || view != batch {
            failures.push(format!(
                "{name}: view has {} rows, batch {}; first differing: {:?}",
                view.len(),
                batch.len(),
                view.iter().zip(&batch).find(|(v, b)| v != b)
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

//! Built-in generator sources: `nexmark` (the Nexmark benchmark's events,
//! through the `nexmark` crate) and `datagen` (rows for demos).
//!
//! A generator's rows are a function of its options and a position: the
//! same options give the same rows, and row n does not depend on how the
//! rows before it were batched. So a generator resumes the way a Kafka
//! source does. Each write commits, together with its rows, the position
//! every split has reached (producer `gen:<table id>:<split>`), and a
//! restarted task continues from there: every row lands in the log once.
//!
//! Each round, every split makes up to a batch of rows on the blocking
//! pool, in parallel, and the round is written as one write that carries
//! all the splits' positions. The splits therefore advance together, which
//! keeps the table's watermark honest: a round covers one contiguous stretch
//! of the stream, so no split can fall behind a watermark that another
//! split has raised.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use ::nexmark::EventGenerator;
use ::nexmark::config::NexmarkConfig;
use ::nexmark::event::{Auction, Bid, Event, EventType, Person};
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use tokio::time::Instant;

use super::{Failure, Handle, Progress, Status, refuse_unknown};
use crate::catalog::{ConnectorDef, ConnectorKind, Table, TableDef};
use crate::dataflow::node::Node;
use crate::error::{Error, Result};
use crate::log::writer::{self, WriteOp};

mod datagen;
mod nexmark;

use self::nexmark::*;
use datagen::*;

/// Rows a split makes per round at most: enough to amortise a write,
/// few enough that a round stays small in memory.
const BATCH: usize = 4096;

/// More splits than cores only adds rounds that wait for each other.
const MAX_SPLITS: u64 = 64;

/// Event time of the first Nexmark event, 2015-07-15 00:00:00 UTC, as
/// RisingWave pins it for its Nexmark tables: pinned, so that the same
/// options give the same rows on every run.
const BASE_TIME: u64 = 1_436_918_400_000;

/// Where datagen's timestamps start unless told.
const DATAGEN_EPOCH: &str = "2024-01-01 00:00:00";

const NEXMARK_OPTIONS: &[&str] = &[
    "nexmark.table.type",
    "nexmark.event.num",
    "nexmark.event.rate",
    "nexmark.split.num",
    "nexmark.base.time",
];

const DATAGEN_OPTIONS: &[&str] = &["datagen.rows.per.second", "datagen.rows.total"];

/// The columns a generator defines when `CREATE SOURCE` gives none, as the
/// text of a column list (`id BIGINT, ...`). Datagen has no columns of its
/// own and says so; other connectors are not ours (`None`).
pub fn columns(connector: &ConnectorDef) -> Result<Option<String>> {
    match connector.connector {
        ConnectorKind::Nexmark => {
            let kind = event_type(connector)?;
            let list: Vec<String> = generated(kind)
                .iter()
                .map(|(name, ty)| format!("{name} {}", ty.sql()))
                .collect();
            Ok(Some(list.join(", ")))
        }
        ConnectorKind::Datagen => Err(Error::InvalidParameter(
            "connector 'datagen' generates the columns it is given; \
             declare them: CREATE SOURCE s (id BIGINT, ...) WITH (connector = 'datagen')"
                .into(),
        )),
        _ => Ok(None),
    }
}

/// Check a generator source's options against its columns, at CREATE.
pub fn check(connector: &ConnectorDef, table: &TableDef) -> Result<()> {
    Options::parse(connector, table).map(|_| ())
}

/// Generate rows into `table` until the configured count, or forever.
pub async fn source(
    node: &Node,
    table: &Arc<Table>,
    handle: Handle,
) -> std::result::Result<(), Failure> {
    let fatal = |e: Error| Failure::Fatal(e.to_string());
    let connector = table
        .def
        .connector
        .as_ref()
        .ok_or_else(|| Failure::Fatal("the table has no connector".into()))?;
    let options = Options::parse(connector, &table.def).map_err(fatal)?;
    let mut rounds = Rounds::resume(node, table, &options)?;
    let pace = Pace::new(options.rate(), rounds.reached());
    handle.progress.set(Status::Running);
    loop {
        let round = rounds.next().await?;
        if round.rows.is_empty() {
            return end_event_time(node, table).await;
        }
        pace.wait(rounds.reached()).await;
        let op = match table.def.contents_in_log() {
            true => WriteOp::Append { rows: round.rows },
            false => WriteOp::InsertUnkeyed { rows: round.rows },
        };
        let written = node
            .writer
            .write_from(table.target(), op, round.mark, rounds.positions())
            .await?;
        Progress::count(&handle.progress.messages, written);
    }
}

/// A bounded generator that is done makes no more rows, so its watermark
/// goes to the end of time and every window over it closes, as windows do
/// at the end of a bounded input in Flink. A restarted one that was done
/// already commits an empty write: the watermark is there, and stays.
async fn end_event_time(node: &Node, table: &Arc<Table>) -> std::result::Result<(), Failure> {
    if table.def.watermark.is_none() {
        return Ok(());
    }
    let op = WriteOp::Append { rows: Vec::new() };
    node.writer
        .write_from(table.target(), op, Some(Table::END_OF_TIME), Vec::new())
        .await?;
    Ok(())
}

/// The producer id under which a split's position commits.
fn position_id(table: u64, split: u64) -> String {
    format!("gen:{table}:{split}")
}

/// A generator source's options, checked.
enum Options {
    Nexmark(NexmarkOptions),
    Datagen(DatagenOptions),
}

impl Options {
    fn parse(connector: &ConnectorDef, table: &TableDef) -> Result<Options> {
        let name = &connector.connector;
        if connector.format.is_some() || connector.encode.is_some() {
            return Err(Error::InvalidParameter(format!(
                "connector '{name}' makes its own rows; leave out FORMAT and ENCODE"
            )));
        }
        if table.is_keyed() {
            return Err(Error::NotSupported(format!(
                "connector '{name}' cannot feed a table with a primary key; leave the key out"
            )));
        }
        match name {
            ConnectorKind::Nexmark => NexmarkOptions::parse(connector, table).map(Options::Nexmark),
            ConnectorKind::Datagen => DatagenOptions::parse(connector, table).map(Options::Datagen),
            other => Err(Error::Internal(format!(
                "connector '{other}' is not a generator; this is a bug"
            ))),
        }
    }

    fn split_count(&self) -> u64 {
        match self {
            Options::Nexmark(n) => n.splits,
            Options::Datagen(_) => 1,
        }
    }

    /// Events (nexmark) or rows (datagen) a second; `None` for as fast as possible.
    fn rate(&self) -> Option<u64> {
        match self {
            Options::Nexmark(n) => n.rate,
            Options::Datagen(d) => Some(d.rate),
        }
    }

    /// A round's rows per split: a tenth of a second's worth when throttled,
    /// so that rows arrive smoothly rather than in bursts.
    fn rows_per_split(&self) -> usize {
        let Some(rate) = self.rate() else {
            return BATCH;
        };
        let share = match self {
            Options::Nexmark(n) => n.share(),
            Options::Datagen(_) => 1.0,
        };
        let rows = (rate as f64 * share / 10.0 / self.split_count() as f64).ceil();
        (rows as usize).clamp(1, BATCH)
    }

    /// The splits, each resumed where it committed (`None`: from the start).
    fn splits(&self, committed: &[Option<u64>]) -> Vec<Split> {
        match self {
            Options::Nexmark(n) => (0..n.splits)
                .map(|split| {
                    let at = committed.get(split as usize).copied().flatten();
                    Split::Nexmark(Box::new(n.split(split, at)))
                })
                .collect(),
            Options::Datagen(d) => {
                let at = committed.first().copied().flatten();
                vec![Split::Datagen(d.split(at))]
            }
        }
    }
}

/// A whole number option; `None` when absent.
fn number(connector: &ConnectorDef, key: &str) -> Result<Option<u64>> {
    let Some(text) = connector.option(key) else {
        return Ok(None);
    };
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| Error::InvalidParameter(format!("{key} must be a whole number, not '{text}'")))
}

/// The column types generators make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Int,
    Bigint,
    Double,
    Varchar,
    Boolean,
    Timestamp,
}

impl Type {
    fn of(data_type: &DataType) -> Option<Type> {
        Some(match data_type {
            DataType::Int32 => Type::Int,
            DataType::Int64 => Type::Bigint,
            DataType::Float64 => Type::Double,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Type::Varchar,
            DataType::Boolean => Type::Boolean,
            DataType::Timestamp(_, None) => Type::Timestamp,
            _ => return None,
        })
    }

    fn sql(self) -> &'static str {
        match self {
            Type::Int => "INT",
            Type::Bigint => "BIGINT",
            Type::Double => "DOUBLE",
            Type::Varchar => "VARCHAR",
            Type::Boolean => "BOOLEAN",
            Type::Timestamp => "TIMESTAMP",
        }
    }
}

/// An array in the type the table stores: generators build in one type
/// per kind (microsecond timestamps, `Utf8`), the table may say another.
fn fit(array: ArrayRef, field: &Field) -> Result<ArrayRef> {
    if array.data_type() == field.data_type() {
        return Ok(array);
    }
    Ok(cast(&array, field.data_type())?)
}

/// Sleeps so that a source does not outrun its rate.
struct Pace {
    rate: Option<u64>,
    start: Instant,
    /// Where the stream stood when the pace started.
    from: u64,
}

impl Pace {
    fn new(rate: Option<u64>, from: u64) -> Pace {
        Pace {
            rate,
            start: Instant::now(),
            from,
        }
    }

    /// Wait until the stream may have reached `reached`.
    async fn wait(&self, reached: u64) {
        let Some(rate) = self.rate.filter(|r| *r > 0) else {
            return;
        };
        let seconds = reached.saturating_sub(self.from) as f64 / rate as f64;
        tokio::time::sleep_until(self.start + Duration::from_secs_f64(seconds)).await;
    }
}

/// One stream of rows with a position to resume from.
enum Split {
    /// Boxed: a Nexmark generator carries its whole configuration.
    Nexmark(Box<NexmarkSplit>),
    Datagen(DatagenSplit),
}

impl Split {
    /// Up to `max` more rows in `schema`; none when the split is done.
    fn next_batch(&mut self, max: usize, schema: &SchemaRef) -> Result<RecordBatch> {
        match self {
            Split::Nexmark(s) => s.next_batch(max, schema),
            Split::Datagen(s) => s.next_batch(max, schema),
        }
    }

    /// The position to resume from, as committed with the rows.
    fn position(&self) -> u64 {
        match self {
            Split::Nexmark(s) => s.generator.offset(),
            Split::Datagen(s) => s.next,
        }
    }

    /// How far into the whole stream the split is, in what the rate counts.
    fn reached(&self) -> u64 {
        match self {
            Split::Nexmark(s) => s.generator.global_offset(),
            Split::Datagen(s) => s.next,
        }
    }
}

/// The splits of a source, advanced a round at a time.
struct Rounds {
    table: Arc<Table>,
    splits: Vec<Split>,
    /// The producer id of each split, in split order.
    ids: Vec<String>,
    batch: usize,
}

/// A round's rows, encoded for the table, and the watermark they imply.
#[derive(Default)]
struct Round {
    rows: Vec<Vec<u8>>,
    mark: Option<i64>,
}

impl Rounds {
    /// Every split where its last write committed, or at its start.
    fn resume(node: &Node, table: &Arc<Table>, options: &Options) -> Result<Rounds> {
        let ids: Vec<String> = (0..options.split_count())
            .map(|split| position_id(table.def.id, split))
            .collect();
        let db = node.store.db();
        let committed = ids
            .iter()
            .map(|id| writer::producer_seq(db, id))
            .collect::<Result<Vec<_>>>()?;
        Ok(Rounds {
            table: table.clone(),
            splits: options.splits(&committed),
            ids,
            batch: options.rows_per_split(),
        })
    }

    /// The next round: every split's next batch, made in parallel.
    async fn next(&mut self) -> std::result::Result<Round, Failure> {
        let tasks = self.splits.drain(..).map(|mut split| {
            let table = self.table.clone();
            let max = self.batch;
            tokio::task::spawn_blocking(move || {
                let made = make(&mut split, max, &table);
                (split, made)
            })
        });
        let mut round = Round::default();
        for joined in futures::future::join_all(tasks).await {
            let (split, made) =
                joined.map_err(|e| Failure::Fatal(format!("a generator task failed: {e}")))?;
            self.splits.push(split);
            let made = made.map_err(|e| Failure::Fatal(e.to_string()))?;
            round.rows.extend(made.rows);
            round.mark = round.mark.max(made.mark);
        }
        Ok(round)
    }

    fn positions(&self) -> Vec<(String, u64)> {
        self.ids
            .iter()
            .cloned()
            .zip(self.splits.iter().map(Split::position))
            .collect()
    }

    fn reached(&self) -> u64 {
        self.splits.iter().map(Split::reached).max().unwrap_or(0)
    }
}

/// A split's next batch, encoded as the table stores rows.
fn make(split: &mut Split, max: usize, table: &Table) -> Result<Round> {
    let batch = split.next_batch(max, &table.nullable_schema)?;
    let mark = table.watermark_of(std::slice::from_ref(&batch))?;
    let encoded = table.codec.encode_rows(&batch)?;
    let rows = encoded.iter().map(|row| row.data().to_vec()).collect();
    Ok(Round { rows, mark })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Int64Type, TimeUnit};

    use super::*;
    use crate::catalog::ColumnDef;

    fn connector(name: &str, pairs: &[(&str, &str)]) -> ConnectorDef {
        ConnectorDef {
            connector: ConnectorKind::from(name.to_string()),
            options: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            format: None,
            encode: None,
            encode_options: BTreeMap::new(),
            include: Vec::new(),
            source: true,
        }
    }

    fn table(columns: &[(&str, DataType)]) -> TableDef {
        let columns = columns
            .iter()
            .map(|(name, data_type)| ColumnDef {
                name: name.to_string(),
                data_type: data_type.clone(),
                sql_type: data_type.to_string().to_lowercase(),
                nullable: true,
            })
            .collect();
        TableDef::append_only(7, "s", columns, String::new())
    }

    fn timestamp() -> DataType {
        DataType::Timestamp(TimeUnit::Nanosecond, None)
    }

    /// The table a source gets when CREATE SOURCE gives no columns.
    fn nexmark_table(kind: EventType) -> TableDef {
        let columns: Vec<(&str, DataType)> = generated(kind)
            .iter()
            .map(|(name, ty)| {
                let data_type = match ty {
                    Type::Bigint => DataType::Int64,
                    Type::Varchar => DataType::Utf8,
                    _ => timestamp(),
                };
                (*name, data_type)
            })
            .collect();
        table(&columns)
    }

    fn schema(def: &TableDef) -> SchemaRef {
        crate::catalog::nullable(&def.arrow_schema())
    }

    /// Every batch the source would write, rounds as the task runs them,
    /// starting from `committed`, at most `rounds` of them.
    fn run(
        options: &Options,
        def: &TableDef,
        committed: &[Option<u64>],
        rounds: usize,
    ) -> (Vec<RecordBatch>, Vec<u64>) {
        let schema = schema(def);
        let mut splits = options.splits(committed);
        let mut out = Vec::new();
        for _ in 0..rounds {
            let batches: Vec<RecordBatch> = splits
                .iter_mut()
                .map(|s| {
                    s.next_batch(options.rows_per_split(), &schema)
                        .expect("batch")
                })
                .collect();
            if batches.iter().all(|b| b.num_rows() == 0) {
                break;
            }
            out.extend(batches);
        }
        (out, splits.iter().map(Split::position).collect())
    }

    fn parse(name: &str, pairs: &[(&str, &str)], def: &TableDef) -> Result<Options> {
        Options::parse(&connector(name, pairs), def)
    }

    /// Rows as sorted text, to compare row sets whatever their batching.
    fn rows(batches: &[RecordBatch]) -> Vec<String> {
        let mut out = Vec::new();
        for batch in batches {
            let options = datafusion::arrow::util::display::FormatOptions::default();
            let formatters: Vec<_> = batch
                .columns()
                .iter()
                .map(|c| {
                    datafusion::arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options)
                        .expect("formatter")
                })
                .collect();
            for row in 0..batch.num_rows() {
                let cells: Vec<String> = formatters
                    .iter()
                    .map(|f| f.value(row).to_string())
                    .collect();
                out.push(cells.join("|"));
            }
        }
        out.sort();
        out
    }

    fn int64s(batches: &[RecordBatch], column: usize) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                b.column(column)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    #[test]
    fn nexmark_options_are_checked_with_messages_that_say_what_to_fix() {
        let bid = nexmark_table(EventType::Bid);
        let base = [("nexmark.table.type", "Bid")];
        assert!(parse("nexmark", &base, &bid).is_ok());
        assert!(parse("nexmark", &[("nexmark.table.type", "bID")], &bid).is_ok());
        for (extra, needle) in [
            (
                ("nexmark.table.type", "Bids"),
                "'Bid', 'Auction' or 'Person', not 'Bids'",
            ),
            (
                ("nexmark.event.num", "many"),
                "nexmark.event.num must be a whole number",
            ),
            (
                ("nexmark.event.rate", "-1"),
                "nexmark.event.rate must be a whole number",
            ),
            (("nexmark.split.num", "0"), "between 1 and 64"),
            (("nexmark.split.num", "65"), "between 1 and 64"),
            (
                ("nexmark.base.time", "yesterday"),
                "nexmark.base.time must be",
            ),
            (
                ("nexmark.events", "1"),
                "option nexmark.events is not known",
            ),
            (
                ("topic", "t"),
                "option topic is not known to connector 'nexmark'",
            ),
        ] {
            let mut pairs = base.to_vec();
            pairs.retain(|(k, _)| *k != extra.0);
            pairs.push(extra);
            let e = parse("nexmark", &pairs, &bid).err().expect(extra.0);
            assert!(matches!(e, Error::InvalidParameter(_)), "{e:?}");
            assert!(e.to_string().contains(needle), "{e}");
        }
        let e = parse("nexmark", &[], &bid).err().expect("no table type");
        assert_eq!(e.sqlstate(), "22023");
        assert!(e.to_string().contains("needs nexmark.table.type"), "{e}");
        let e = columns(&connector("nexmark", &[])).expect_err("no table type");
        assert_eq!(e.sqlstate(), "22023");
        let mut encoded = connector("nexmark", &base);
        encoded.encode = Some(crate::catalog::Encoding::Json);
        let e = Options::parse(&encoded, &bid).err().expect("ENCODE");
        assert!(e.to_string().contains("leave out FORMAT and ENCODE"), "{e}");
        let mut keyed = bid.clone();
        keyed.primary_key = vec![0];
        let e = parse("nexmark", &base, &keyed).err().expect("keyed");
        assert_eq!(e.sqlstate(), "0A000");
    }

    #[test]
    fn nexmark_columns_are_those_risingwave_generates() {
        let text = |kind: &str| {
            columns(&connector("nexmark", &[("nexmark.table.type", kind)]))
                .expect("columns")
                .expect("nexmark has columns")
        };
        assert_eq!(
            text("bid"),
            "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
             date_time TIMESTAMP, extra VARCHAR"
        );
        assert_eq!(
            text("Auction"),
            "id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, \
             reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, \
             category BIGINT, extra VARCHAR"
        );
        assert_eq!(
            text("PERSON"),
            "id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, \
             city VARCHAR, state VARCHAR, date_time TIMESTAMP, extra VARCHAR"
        );
        assert_eq!(columns(&connector("kafka", &[])).expect("not ours"), None);
        let e = columns(&connector("datagen", &[])).expect_err("datagen needs columns");
        assert_eq!(e.sqlstate(), "22023");
    }

    #[test]
    fn every_nexmark_column_is_generated() {
        for kind in [EventType::Bid, EventType::Auction, EventType::Person] {
            let def = nexmark_table(kind);
            let options = parse(
                "nexmark",
                &[
                    ("nexmark.table.type", type_name(kind)),
                    ("nexmark.event.num", "500"),
                ],
                &def,
            )
            .expect("options");
            let (batches, _) = run(&options, &def, &[None], 10);
            let batch = &batches[0];
            assert!(batch.num_rows() > 0);
            for column in batch.columns() {
                assert_eq!(column.null_count(), 0);
            }
        }
    }

    #[test]
    fn declared_nexmark_columns_are_a_subset_by_name_and_type() {
        let pairs = [("nexmark.table.type", "Bid"), ("nexmark.event.num", "100")];
        let def = table(&[("price", DataType::Int64), ("date_time", timestamp())]);
        let options = parse("nexmark", &pairs, &def).expect("a subset");
        let (batches, _) = run(&options, &def, &[None], 10);
        assert_eq!(batches[0].num_columns(), 2);
        assert_eq!(batches[0].schema().field(1).data_type(), &timestamp());

        let e = parse("nexmark", &pairs, &table(&[("cost", DataType::Int64)]))
            .err()
            .expect("not generated");
        assert_eq!(e.sqlstate(), "42703");
        assert!(e.to_string().contains("auction, bidder, price"), "{e}");
        let e = parse("nexmark", &pairs, &table(&[("price", DataType::Int32)]))
            .err()
            .expect("wrong type");
        assert_eq!(e.sqlstate(), "42804");
        assert!(e.to_string().contains("is BIGINT, not int32"), "{e}");
    }

    /// `nexmark.event.num` counts all event types: 1000 events hold 920
    /// bids, 60 auctions and 20 people. The figures the .slt checks.
    #[test]
    fn nexmark_event_num_counts_the_whole_stream() {
        for (kind, expected) in [
            (EventType::Bid, 920),
            (EventType::Auction, 60),
            (EventType::Person, 20),
        ] {
            let def = nexmark_table(kind);
            let pairs = [
                ("nexmark.table.type", type_name(kind)),
                ("nexmark.event.num", "1000"),
            ];
            let options = parse("nexmark", &pairs, &def).expect("options");
            let (batches, _) = run(&options, &def, &[None], 100);
            let count: usize = batches.iter().map(RecordBatch::num_rows).sum();
            assert_eq!(count, expected, "{}", type_name(kind));
        }
        let def = nexmark_table(EventType::Bid);
        let pairs = [("nexmark.table.type", "Bid"), ("nexmark.event.num", "1000")];
        let (batches, _) = run(
            &parse("nexmark", &pairs, &def).expect("options"),
            &def,
            &[None],
            100,
        );
        let auctions: std::collections::BTreeSet<i64> = int64s(&batches, 0).into_iter().collect();
        let bidders: std::collections::BTreeSet<i64> = int64s(&batches, 1).into_iter().collect();
        let prices = int64s(&batches, 2);
        let summary = (
            auctions.len(),
            bidders.len(),
            prices.iter().min().copied(),
            prices.iter().max().copied(),
            prices.iter().sum::<i64>(),
        );
        assert_eq!(
            summary,
            (65, 26, Some(101), Some(97_685_160), 7_533_204_539)
        );
    }

    #[test]
    fn same_options_make_the_same_rows_however_split() {
        let def = nexmark_table(EventType::Bid);
        let pairs = |splits| {
            [
                ("nexmark.table.type", "Bid"),
                ("nexmark.event.num", "20000"),
                ("nexmark.split.num", splits),
            ]
        };
        let one = parse("nexmark", &pairs("1"), &def).expect("options");
        let three = parse("nexmark", &pairs("3"), &def).expect("options");
        let (a, _) = run(&one, &def, &[None], 100);
        let (b, _) = run(&one, &def, &[None], 100);
        let (c, _) = run(&three, &def, &[None, None, None], 100);
        assert_eq!(rows(&a), rows(&b));
        assert_eq!(rows(&a), rows(&c));
        assert_eq!(rows(&a).len(), 18_400);
    }

    #[test]
    fn a_resumed_nexmark_source_continues_where_it_committed() {
        let def = nexmark_table(EventType::Auction);
        let pairs = [
            ("nexmark.table.type", "Auction"),
            ("nexmark.event.num", "300000"),
            ("nexmark.split.num", "2"),
        ];
        let options = parse("nexmark", &pairs, &def).expect("options");
        let (whole, _) = run(&options, &def, &[None, None], 100);
        let (first, positions) = run(&options, &def, &[None, None], 1);
        let committed: Vec<Option<u64>> = positions.into_iter().map(Some).collect();
        let (rest, _) = run(&options, &def, &committed, 100);
        let mut resumed = first;
        resumed.extend(rest);
        assert_eq!(rows(&whole).len(), 18_000);
        assert_eq!(rows(&resumed), rows(&whole));
    }

    #[test]
    fn nexmark_event_times_start_at_the_base_time_and_follow_the_rate() {
        let def = table(&[("date_time", timestamp())]);
        let options = |rate| {
            let pairs = [
                ("nexmark.table.type", "Person"),
                ("nexmark.base.time", "1700000000000"),
                ("nexmark.event.rate", rate),
            ];
            parse("nexmark", &pairs, &def).expect("options")
        };
        let first_two = |options: &Options| {
            let (batches, _) = run(options, &def, &[None], 1);
            let times = cast(batches[0].column(0), &DataType::Int64).expect("cast");
            let times = times.as_primitive::<Int64Type>();
            (times.value(0), times.value(1))
        };
        // People are 1 in 50 events: 5 ms apart at 10 000 events a second.
        assert_eq!(
            first_two(&options("0")),
            (1_700_000_000_000_000_000, 1_700_000_000_005_000_000)
        );
        assert_eq!(first_two(&options("1000")).1, 1_700_000_000_050_000_000);
        // A tenth of a second's people a round, at least one.
        assert_eq!(options("1000").rows_per_split(), 2);
        assert_eq!(options("0").rows_per_split(), BATCH);
    }

    fn datagen_table() -> TableDef {
        table(&[
            ("id", DataType::Int64),
            ("n", DataType::Int32),
            ("x", DataType::Float64),
            ("s", DataType::Utf8),
            ("b", DataType::Boolean),
            ("t", timestamp()),
        ])
    }

    #[test]
    fn datagen_options_are_checked_with_messages_that_say_what_to_fix() {
        let def = datagen_table();
        assert!(parse("datagen", &[], &def).is_ok());
        for (pair, needle) in [
            (("datagen.rows.per.second", "0"), "at least 1"),
            (
                ("datagen.rows.total", "all"),
                "datagen.rows.total must be a whole number",
            ),
            (("datagen.rows", "1"), "option datagen.rows is not known"),
            (("fields.nope.kind", "random"), "names no column"),
            (
                ("fields.id.kind", "counter"),
                "'sequence' or 'random', not 'counter'",
            ),
            (("fields.b.kind", "sequence"), "cannot be a sequence"),
            (
                ("fields.id.start", "1"),
                "does not apply to a random BIGINT column",
            ),
            (
                ("fields.s.min", "1"),
                "use fields.s.kind, fields.s.length, fields.s.seed",
            ),
            (
                ("fields.id.min", "2000"),
                "fields.id.min must not exceed fields.id.max",
            ),
            (
                ("fields.n.max", "3000000000"),
                "within -2147483648 and 2147483647",
            ),
            (("fields.x.max", "NaN"), "fields.x.max must be a number"),
            (
                ("fields.s.length", "-1"),
                "fields.s.length must be a whole number",
            ),
            (("fields.t.min", "noon"), "fields.t.min must be a timestamp"),
            (("fields", "x"), "option fields is not known"),
        ] {
            let e = parse("datagen", &[pair], &def).err().expect(pair.0);
            assert_eq!(e.sqlstate(), "22023", "{e}");
            assert!(e.to_string().contains(needle), "{e}");
        }
        let e = parse(
            "datagen",
            &[
                ("fields.id.kind", "sequence"),
                ("fields.id.start", "5"),
                ("fields.id.end", "4"),
            ],
            &def,
        )
        .err()
        .expect("end before start");
        assert!(e.to_string().contains("start <= end"), "{e}");
        let e = parse("datagen", &[], &table(&[("d", DataType::Date32)]))
            .err()
            .expect("a type datagen does not make");
        assert_eq!(e.sqlstate(), "0A000");
    }

    #[test]
    fn datagen_sequences_count_and_end_the_source() {
        let def = table(&[
            ("id", DataType::Int64),
            ("label", DataType::Utf8),
            ("t", timestamp()),
        ]);
        let pairs = [
            ("fields.id.kind", "sequence"),
            ("fields.id.start", "10"),
            ("fields.id.end", "14"),
            ("fields.label.kind", "sequence"),
            ("fields.t.kind", "sequence"),
            ("fields.t.start", "2024-03-01 12:00:00"),
            ("datagen.rows.per.second", "2"),
        ];
        let options = parse("datagen", &pairs, &def).expect("options");
        let (batches, positions) = run(&options, &def, &[None], 100);
        assert_eq!(int64s(&batches, 0), [10, 11, 12, 13, 14]);
        assert_eq!(positions, [5]);
        assert_eq!(
            rows(&batches)[..2],
            [
                "10|0|2024-03-01T12:00:00".to_string(),
                "11|1|2024-03-01T12:00:00.500".to_string()
            ]
        );
        let total = [("datagen.rows.total", "3"), ("fields.id.kind", "sequence")];
        let (batches, _) = run(
            &parse("datagen", &total, &def).expect("options"),
            &def,
            &[None],
            100,
        );
        assert_eq!(int64s(&batches, 0), [0, 1, 2]);
    }

    #[test]
    fn datagen_random_values_are_in_range_and_resume_exactly() {
        let def = datagen_table();
        let pairs = [
            ("datagen.rows.total", "1000"),
            ("datagen.rows.per.second", "100"),
            ("fields.id.min", "-5"),
            ("fields.id.max", "5"),
            ("fields.n.seed", "42"),
            ("fields.x.min", "1.5"),
            ("fields.x.max", "2.5"),
            ("fields.s.length", "4"),
            ("fields.t.min", "2024-06-01"),
            ("fields.t.max", "2024-06-02"),
        ];
        let options = parse("datagen", &pairs, &def).expect("options");
        let (whole, _) = run(&options, &def, &[None], 1000);
        let ids = int64s(&whole, 0);
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|v| (-5..=5).contains(v)));
        assert_eq!(
            ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
            11
        );
        for batch in &whole {
            let x = batch
                .column(2)
                .as_primitive::<datafusion::arrow::datatypes::Float64Type>();
            assert!(x.values().iter().all(|v| (1.5..2.5).contains(v)));
            let s = batch.column(3).as_string::<i32>();
            assert!(s.iter().flatten().all(|v| v.len() == 4));
        }
        let (first, positions) = run(&options, &def, &[None], 3);
        assert_eq!(positions, [30]);
        let (rest, _) = run(&options, &def, &[Some(30)], 1000);
        let mut resumed = first;
        resumed.extend(rest);
        assert_eq!(rows(&resumed), rows(&whole));
        // Another seed, other values.
        let reseeded = [("datagen.rows.total", "1000"), ("fields.n.seed", "43")];
        let (other, _) = run(
            &parse("datagen", &reseeded, &def).expect("options"),
            &def,
            &[None],
            1000,
        );
        let n = |b: &[RecordBatch]| {
            b[0].column(1)
                .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
                .value(0)
        };
        assert_ne!(n(&whole), n(&other));
    }

    #[test]
    fn timestamps_parse_in_the_forms_people_write() {
        let at = parse_timestamp("2024-01-01 00:00:00").expect("plain");
        assert_eq!(at, 1_704_067_200_000_000);
        assert_eq!(parse_timestamp("2024-01-01"), Some(at));
        assert_eq!(parse_timestamp("2024-01-01T00:00:00.5"), Some(at + 500_000));
        assert_eq!(
            parse_timestamp("2024-01-01 00:00:00.25"),
            Some(at + 250_000)
        );
        assert_eq!(parse_timestamp("soon"), None);
    }
}

//! Change streams of partitioned views, merged from every node.
//!
//! Each node keeps only its own partitions' groups of a partitioned view,
//! so its changelog holds only their changes. A `SUBSCRIBE` of such a view
//! opens a leg on every node that owns partitions: an ordinary
//! subscription to that node's part, run where the part lives, sending its
//! snapshot and then its changes as they commit (the node's own leg runs
//! in this process; the others answer over their HTTP ports). The client
//! gets every leg's snapshot first, then the changes in the order they
//! arrive. A group's changes all come from its owner, in that node's epoch
//! order, so each group's history is whole and in order; `_epoch` is the
//! owner's epoch, and epochs of two nodes are not comparable.
//!
//! When partitions move (a node dies, leaves or joins), the nodes that
//! gain them build their parts again from their sources, and a leg over a
//! part built again would repeat or miss changes: the stream ends with
//! 55000 instead, and the client subscribes again once the parts are built.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::Engine;
use super::partitioned::{self, PEER_TIMEOUT};
use super::subscribe::{
    Encoder, LineCache, Options, Pace, Subscription, check_pace, output_schema,
};
use crate::catalog::View;
use crate::dataflow::node::Node;
use crate::error::{Error, Result};
use crate::sql::partition::{self, Owned};

/// Where a node serves its partitions' changes of a partitioned view (HTTP).
pub const PARTITION_CHANGES: &str = "/internal/changes/";

/// How long a leg with nothing to send waits before it says it is alive.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long a leg may stay silent before its node counts as gone.
const SILENCE: Duration = Duration::from_secs(10);

/// Rows a leg sends at most in one frame.
const FRAME_ROWS: usize = 8192;

/// Frames the legs may send ahead of the client.
const AHEAD: usize = 16;

/// Rows handed to a COPY stream's encoder at once.
const ENCODE_ROWS: usize = 4096;

/// What a leg sends.
#[derive(Debug)]
pub enum Frame {
    Rows(RecordBatch),
    /// The leg's snapshot has all been sent.
    Ready,
    /// Nothing new, and the leg is still there.
    Alive,
    /// The leg ended: its part cannot be followed any further.
    Failed(Error),
}

/// A change stream: one relation's, or a partitioned view's merged from
/// every node.
#[derive(Debug)]
pub enum ChangeStream {
    Local(Subscription),
    Merged(Merged),
}

impl ChangeStream {
    pub fn schema(&self) -> &SchemaRef {
        match self {
            ChangeStream::Local(s) => s.schema(),
            ChangeStream::Merged(m) => &m.schema,
        }
    }

    /// Up to `max` rows; waits for the first at most `timeout` (forever
    /// when `None`), and an empty batch means none came.
    pub async fn fetch(
        &mut self,
        node: &Node,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<RecordBatch> {
        match self {
            ChangeStream::Local(s) => s.fetch(node, max, timeout).await,
            ChangeStream::Merged(m) => m.fetch(max, timeout).await,
        }
    }

    /// For a COPY stream: the next changes as encoded text.
    pub async fn fetch_encoded(
        &mut self,
        node: &Node,
        cache: &LineCache,
        encoder: &Encoder<'_>,
    ) -> Result<Vec<Bytes>> {
        match self {
            ChangeStream::Local(s) => s.fetch_encoded(node, cache, encoder).await,
            ChangeStream::Merged(m) => {
                let batch = m.fetch(ENCODE_ROWS, None).await?;
                Ok(vec![(encoder.encode)(batch)?])
            }
        }
    }
}

/// A partitioned view's changes from every node that owns partitions.
pub struct Merged {
    schema: SchemaRef,
    frames: mpsc::Receiver<(usize, Frame)>,
    ready: VecDeque<RecordBatch>,
    legs: Vec<tokio::task::JoinHandle<()>>,
    /// Why the stream ended: it stays ended, though other legs could go on.
    ended: Option<String>,
}

impl std::fmt::Debug for Merged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merged")
            .field("legs", &self.legs.len())
            .finish()
    }
}

impl Drop for Merged {
    fn drop(&mut self) {
        self.stop_legs();
    }
}

impl Merged {
    /// Opens a leg on every node that owns partitions and waits for all
    /// their snapshots: a stream that cannot cover every partition fails
    /// here, before the client gets a row.
    pub async fn open(engine: &Arc<Engine>, view: Arc<View>, options: Options) -> Result<Merged> {
        refuse_options(&view, &options)?;
        check_pace(&view.table, &options.pace)?;
        let replication = engine
            .cluster()
            .ok_or_else(|| Error::Internal("a merged change stream outside a cluster".into()))?;
        let count = replication.cluster.partitions;
        let members = replication.cluster.members();
        partitioned::covered(&members, count, None, &view.def.table.name)?;
        let (tx, frames) = mpsc::channel(AHEAD);
        let mut legs = Vec::new();
        let owners = members.iter().filter(|m| !m.partitions.is_empty());
        for (index, member) in owners.enumerate() {
            let owned = Owned {
                count,
                partitions: partitioned::sorted(&member.partitions),
            };
            let tx = tx.clone();
            let leg = if member.info.node == replication.cluster.me.node {
                let (engine, view, options) = (engine.clone(), view.clone(), options.clone());
                engine
                    .background
                    .clone()
                    .spawn(async move { run_leg(&engine, &view, owned, options, index, tx).await })
            } else {
                let leg = Remote {
                    node: member.info.node.clone(),
                    address: member.info.http_address.clone(),
                    target: remote_target(&view, &member.info.token, &owned, &options),
                };
                engine.background.spawn(leg.run(index, tx))
            };
            legs.push(leg);
        }
        let mut merged = Merged {
            schema: output_schema(&view.table),
            frames,
            ready: VecDeque::new(),
            legs,
            ended: None,
        };
        merged.snapshots().await?;
        Ok(merged)
    }

    /// Every leg's snapshot first, then what came meanwhile after them.
    async fn snapshots(&mut self) -> Result<()> {
        let mut done = vec![false; self.legs.len()];
        let mut later = VecDeque::new();
        let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
        while done.contains(&false) {
            let (leg, frame) = tokio::time::timeout_at(deadline, self.frames.recv())
                .await
                .map_err(|_| {
                    Error::PrerequisiteState(
                        "not every node sent its part of the view in time; subscribe again".into(),
                    )
                })?
                .ok_or(Error::ShuttingDown)?;
            match frame {
                Frame::Rows(rows) if done[leg] => later.push_back(rows),
                Frame::Rows(rows) => self.ready.push_back(rows),
                Frame::Ready => done[leg] = true,
                Frame::Alive => {}
                Frame::Failed(e) => return Err(e),
            }
        }
        self.ready.extend(later);
        Ok(())
    }

    async fn fetch(&mut self, max: usize, timeout: Option<Duration>) -> Result<RecordBatch> {
        if let Some(why) = &self.ended {
            return Err(Error::PrerequisiteState(why.clone()));
        }
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        while self.ready.is_empty() {
            let next = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, self.frames.recv()).await
                {
                    Ok(next) => next,
                    Err(_) => break,
                },
                None => self.frames.recv().await,
            };
            match next.ok_or(Error::ShuttingDown)?.1 {
                Frame::Rows(rows) => self.ready.push_back(rows),
                Frame::Failed(e) => {
                    self.ended = Some(e.to_string());
                    self.stop_legs();
                    return Err(e);
                }
                Frame::Ready | Frame::Alive => {}
            }
        }
        self.take(max)
    }

    /// A remote leg's node stops when its connection goes.
    fn stop_legs(&self) {
        for leg in &self.legs {
            leg.abort();
        }
    }

    fn take(&mut self, max: usize) -> Result<RecordBatch> {
        super::handlers::subscribe::take_rows(&self.schema, &mut self.ready, max.max(1))
    }
}

/// A merged stream has no one epoch to resume after or report progress
/// of: every node counts its own.
fn refuse_options(view: &View, options: &Options) -> Result<()> {
    let name = &view.def.table.name;
    let refused = match (options.as_of, options.progress) {
        (Some(_), _) => "AS OF",
        (_, true) => "WITH (progress = true)",
        _ => return Ok(()),
    };
    Err(Error::NotSupported(format!(
        "SUBSCRIBE ... {refused} is not supported for partitioned view \"{name}\": its \
         partitions live on several nodes, each with its own epochs; subscribe without it"
    )))
}

/// Follows this node's part of `view` for the partitions in `owned`,
/// sending frames to `tx` tagged `index`, until the part is built again,
/// the view goes, or nobody listens.
pub async fn run_leg(
    engine: &Arc<Engine>,
    view: &View,
    owned: Owned,
    options: Options,
    index: usize,
    tx: mpsc::Sender<(usize, Frame)>,
) {
    let built = partitioned::builds(engine, view.def.table.id);
    // The part holds other partitions' groups only while the address book
    // lags the group; a build since ends the leg, so this holds throughout.
    let key = match partitioned::built_for(engine, view.def.table.id) {
        Ok(Some(all)) if all.partitions == owned.partitions => None,
        _ => Some(partitioned::partition_key(engine, view)),
    };
    let keep = |batch: Result<RecordBatch>| -> Result<RecordBatch> {
        let batch = batch?;
        partitioned::still_built(engine, view, &owned.partitions, built)?;
        match &key {
            Some(key) => keep_owned_changes(&batch, key, &owned),
            None => Ok(batch),
        }
    };
    let opened = partitioned::still_built(engine, view, &owned.partitions, built)
        .and_then(|()| Subscription::open(&engine.node, view.table.clone(), options));
    let mut subscription = match opened {
        Ok(subscription) => subscription,
        Err(e) => {
            let _ = tx.send((index, Frame::Failed(e))).await;
            return;
        }
    };
    // The snapshot is queued whole at open: taking everything queued
    // sends it, and whatever else is there is after it anyway.
    let snapshot = subscription.fetch(&engine.node, usize::MAX, Some(Duration::ZERO));
    let frames = match keep(snapshot.await) {
        Ok(rows) => {
            let mut frames = split(rows).map(Frame::Rows).collect::<Vec<_>>();
            frames.push(Frame::Ready);
            frames
        }
        Err(e) => vec![Frame::Failed(e)],
    };
    for frame in frames {
        if tx.send((index, frame)).await.is_err() {
            return;
        }
    }
    loop {
        let fetched = subscription.fetch(&engine.node, FRAME_ROWS, Some(HEARTBEAT));
        let (frame, last) = match keep(fetched.await) {
            Ok(rows) if rows.num_rows() == 0 => (Frame::Alive, false),
            Ok(rows) => (Frame::Rows(rows), false),
            Err(e) => (Frame::Failed(e), true),
        };
        if tx.send((index, frame)).await.is_err() || last {
            return;
        }
    }
}

fn split(rows: RecordBatch) -> impl Iterator<Item = RecordBatch> {
    let total = rows.num_rows();
    (0..total)
        .step_by(FRAME_ROWS)
        .map(move |start| rows.slice(start, FRAME_ROWS.min(total - start)))
}

/// Change rows of the groups in `owned`: progress rows have no group and
/// are not sent. The view's columns start after `_epoch` and `_diff`.
fn keep_owned_changes(batch: &RecordBatch, key: &[usize], owned: &Owned) -> Result<RecordBatch> {
    if batch.num_rows() == 0 {
        return Ok(batch.clone());
    }
    let shifted: Vec<usize> = key.iter().map(|k| k + 2).collect();
    partition::keep_owned(batch, &shifted, owned)
}

/// The request for a leg on another node.
fn remote_target(view: &View, token: &str, owned: &Owned, options: &Options) -> String {
    let partitions: Vec<String> = owned.partitions.iter().map(u32::to_string).collect();
    let pace = match options.pace {
        Pace::Changes => "changes".to_string(),
        Pace::OnWindowClose => "close".to_string(),
        Pace::Every(micros) => format!("every:{micros}"),
    };
    format!(
        "{PARTITION_CHANGES}{}?token={token}&p={}&snapshot={}&pace={pace}",
        view.def.table.id,
        partitions.join(","),
        options.snapshot
    )
}

/// A leg on another node, read over its HTTP port.
struct Remote {
    node: String,
    address: String,
    target: String,
}

impl Remote {
    async fn run(self, index: usize, tx: mpsc::Sender<(usize, Frame)>) {
        let failed = match self.follow(index, &tx).await {
            Ok(()) => return,
            Err(e) => e,
        };
        let _ = tx.send((index, Frame::Failed(failed))).await;
    }

    /// Frames until the node stops sending; `Ok` once nobody listens.
    async fn follow(&self, index: usize, tx: &mpsc::Sender<(usize, Frame)>) -> Result<()> {
        let gone = |why: String| {
            Error::PrerequisiteState(format!(
                "node \"{}\" stopped sending its partitions' changes ({why}); when a node \
                 goes, the others take its partitions over: subscribe again in a moment",
                self.node
            ))
        };
        let mut socket = tokio::time::timeout(PEER_TIMEOUT, self.connect())
            .await
            .map_err(|_| gone("no answer in time".into()))??;
        loop {
            let frame = tokio::time::timeout(SILENCE, read_frame(&mut socket))
                .await
                .map_err(|_| gone(format!("silent for {} s", SILENCE.as_secs())))?
                .map_err(|e| gone(e.to_string()))?;
            let last = matches!(frame, Frame::Failed(_));
            if tx.send((index, frame)).await.is_err() || last {
                return Ok(());
            }
        }
    }

    /// Connected, request sent, and an answer of 200 read up to its body.
    async fn connect(&self) -> Result<BufReader<tokio::net::TcpStream>> {
        let failed = |e: std::io::Error| partitioned::peer_error(&self.node, e);
        let mut socket = tokio::net::TcpStream::connect(&self.address)
            .await
            .map_err(failed)?;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.target, self.address
        );
        socket.write_all(request.as_bytes()).await.map_err(failed)?;
        let mut reader = BufReader::new(socket);
        let mut status = String::new();
        reader.read_line(&mut status).await.map_err(failed)?;
        loop {
            let mut line = String::new();
            let n = reader.read_line(&mut line).await.map_err(failed)?;
            if n == 0 || line == "\r\n" {
                break;
            }
        }
        let code = status.split_whitespace().nth(1).unwrap_or_default();
        if code == "200" {
            return Ok(reader);
        }
        let mut said = String::new();
        let _ = reader.read_to_string(&mut said).await;
        let said = said.trim().to_string();
        Err(match code {
            "503" => Error::PrerequisiteState(said),
            _ => partitioned::peer_error(&self.node, format!("{}: {said}", status.trim())),
        })
    }
}

const ROWS: u8 = b'R';
const READY: u8 = b'S';
const ALIVE: u8 = b'A';
const FAILED: u8 = b'E';

/// One frame on the wire: its kind, its length, its body (an Arrow
/// stream of one batch, or `SQLSTATE<TAB>message`).
pub fn encode_frame(frame: &Frame) -> Result<Vec<u8>> {
    let (kind, body) = match frame {
        Frame::Rows(rows) => {
            let mut body = Vec::new();
            let mut writer = StreamWriter::try_new(&mut body, &rows.schema())?;
            writer.write(rows)?;
            writer.finish()?;
            drop(writer);
            (ROWS, body)
        }
        Frame::Ready => (READY, Vec::new()),
        Frame::Alive => (ALIVE, Vec::new()),
        Frame::Failed(e) => (FAILED, format!("{}\t{e}", e.sqlstate()).into_bytes()),
    };
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(kind);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

async fn read_frame<R: tokio::io::AsyncRead + Unpin>(socket: &mut R) -> Result<Frame> {
    let mut head = [0u8; 5];
    socket.read_exact(&mut head).await?;
    let length = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut body = vec![0u8; length];
    socket.read_exact(&mut body).await?;
    match head[0] {
        ROWS => {
            let mut reader = StreamReader::try_new(std::io::Cursor::new(body), None)?;
            let rows = reader
                .next()
                .transpose()?
                .ok_or_else(|| Error::Internal("an empty frame of rows".into()))?;
            Ok(Frame::Rows(rows))
        }
        READY => Ok(Frame::Ready),
        ALIVE => Ok(Frame::Alive),
        FAILED => Ok(Frame::Failed(remote_error(&String::from_utf8_lossy(&body)))),
        other => Err(Error::Internal(format!("a frame of unknown kind {other}"))),
    }
}

/// A leg's error as the node sent it: "try again" (55000) kept as such,
/// since the client acts on it; the options were checked here before any
/// leg opened, so anything else is the node's trouble.
fn remote_error(said: &str) -> Error {
    let (code, message) = said.split_once('\t').unwrap_or(("", said));
    let message = message.to_string();
    match code {
        "55000" => Error::PrerequisiteState(message),
        _ => Error::ConnectionFailure(format!("{message} (SQLSTATE {code} on the node)")),
    }
}

/// For a peer's request `token=T&p=0,1&snapshot=true&pace=changes`: the
/// frames of this node's leg over view `id`, checked before any is sent.
pub fn changes_for_peer(
    engine: &Arc<Engine>,
    id: &str,
    query: &str,
) -> Result<mpsc::Receiver<(usize, Frame)>> {
    let (view, owned) = partitioned::peer_request(engine, id, query)?;
    let options = Options {
        snapshot: partitioned::param(query, "snapshot").is_none_or(|v| v == "true"),
        pace: pace(partitioned::param(query, "pace").unwrap_or("changes"))?,
        ..Options::default()
    };
    let (tx, rx) = mpsc::channel(AHEAD);
    let engine = engine.clone();
    engine
        .background
        .clone()
        .spawn(async move { run_leg(&engine, &view, owned, options, 0, tx).await });
    Ok(rx)
}

fn pace(value: &str) -> Result<Pace> {
    match value {
        "changes" => Ok(Pace::Changes),
        "close" => Ok(Pace::OnWindowClose),
        _ => value
            .strip_prefix("every:")
            .and_then(|m| m.parse().ok())
            .map(Pace::Every)
            .ok_or_else(|| Error::InvalidParameter(format!("pace: {value}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    async fn round_trip(frame: Frame) -> Frame {
        let bytes = encode_frame(&frame).expect("encoded");
        read_frame(&mut std::io::Cursor::new(bytes))
            .await
            .expect("read back")
    }

    #[tokio::test]
    async fn frames_come_back_as_they_were_sent() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let rows = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))])
            .expect("a batch");
        match round_trip(Frame::Rows(rows.clone())).await {
            Frame::Rows(back) => assert_eq!(back, rows),
            other => panic!("{other:?}"),
        }
        assert!(matches!(round_trip(Frame::Ready).await, Frame::Ready));
        assert!(matches!(round_trip(Frame::Alive).await, Frame::Alive));
        let failed = Frame::Failed(Error::PrerequisiteState("moved".into()));
        match round_trip(failed).await {
            Frame::Failed(e) => {
                assert_eq!(e.sqlstate(), "55000");
                assert!(e.to_string().contains("moved"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_truncated_frame_is_an_error_not_a_frame() {
        let mut bytes = encode_frame(&Frame::Failed(Error::Internal("x".into()))).expect("encoded");
        bytes.pop();
        assert!(read_frame(&mut std::io::Cursor::new(bytes)).await.is_err());
    }

    #[test]
    fn paces_read_back_as_written() {
        assert_eq!(pace("changes").expect("a pace"), Pace::Changes);
        assert_eq!(pace("close").expect("a pace"), Pace::OnWindowClose);
        assert_eq!(
            pace("every:5000000").expect("a pace"),
            Pace::Every(5_000_000)
        );
        assert!(pace("every:soon").is_err());
    }
}

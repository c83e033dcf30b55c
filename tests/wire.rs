//! Malformed frames against a real server: each ends its own connection
//! with a FATAL 08P01, and the node and its other sessions carry on.

mod common;

use std::time::Duration;

use common::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A typed message: type byte, length, body.
fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn startup_packet() -> Vec<u8> {
    let body = [
        &0x0003_0000u32.to_be_bytes()[..],
        b"user\0weir\0database\0weir\0\0",
    ]
    .concat();
    let mut p = (body.len() as i32 + 4).to_be_bytes().to_vec();
    p.extend_from_slice(&body);
    p
}

/// One backend message: its type and body; `None` at the end of the stream.
async fn read_message(socket: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0; 5];
    socket.read_exact(&mut head).await.ok()?;
    let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    let mut body = vec![0; usize::try_from(len - 4).expect("a sane length")];
    socket.read_exact(&mut body).await.ok()?;
    Some((head[0], body))
}

/// A raw connection past its startup: ReadyForQuery received.
async fn started(server: &TestServer) -> TcpStream {
    let mut socket = TcpStream::connect(("127.0.0.1", server.port))
        .await
        .expect("connect");
    socket.write_all(&startup_packet()).await.expect("startup");
    loop {
        match read_message(&mut socket).await {
            Some((b'Z', _)) => return socket,
            Some(_) => {}
            None => panic!("the server closed during startup"),
        }
    }
}

/// An ErrorResponse's fields by their codes.
fn fields(body: &[u8]) -> Vec<(u8, String)> {
    body.split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| (f[0], String::from_utf8_lossy(&f[1..]).into_owned()))
        .collect()
}

fn field(fields: &[(u8, String)], code: u8) -> &str {
    fields
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("", |(_, v)| v.as_str())
}

/// Send `bytes`, expect a FATAL 08P01 and then the end of the connection;
/// returns the error's message.
async fn refused(mut socket: TcpStream, bytes: &[u8]) -> String {
    socket.write_all(bytes).await.expect("send");
    let reply = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match read_message(&mut socket).await {
                Some((b'E', body)) => return fields(&body),
                Some(_) => {}
                None => panic!("closed without an ErrorResponse"),
            }
        }
    })
    .await
    .expect("an ErrorResponse within 10 s");
    assert_eq!(field(&reply, b'S'), "FATAL", "{reply:?}");
    assert_eq!(field(&reply, b'C'), "08P01", "{reply:?}");
    let mut rest = [0; 64];
    let closed = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut rest))
        .await
        .expect("closed within 10 s");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    field(&reply, b'M').to_string()
}

async fn select_one(client: &tokio_postgres::Client) {
    let one: i32 = client
        .query_one("SELECT 1::INT", &[])
        .await
        .expect("SELECT 1")
        .get(0);
    assert_eq!(one, 1);
}

/// Run an attack with a session open beside it; both that session and a
/// new one work afterwards.
async fn survives(attack: impl AsyncFnOnce(&TestServer) -> String, expected: &str) {
    let server = TestServer::start();
    let before = server.connect().await;
    select_one(&before).await;
    let message = attack(&server).await;
    assert!(message.contains(expected), "{message}");
    select_one(&before).await;
    select_one(&server.connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parse_declaring_more_types_than_it_carries() {
    let mut body = b"\0SELECT 1\0".to_vec();
    body.extend_from_slice(&u16::MAX.to_be_bytes());
    body.extend_from_slice(&[0; 12]);
    let mut bytes = message(b'P', &body);
    bytes.extend(message(b'S', b""));
    let attack = async |server: &TestServer| refused(started(server).await, &bytes).await;
    survives(attack, "insufficient data left in message").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_parameter_running_past_the_frame() {
    let mut body = b"\0\0".to_vec();
    body.extend_from_slice(&0u16.to_be_bytes());
    body.extend_from_slice(&1u16.to_be_bytes());
    body.extend_from_slice(&1000i32.to_be_bytes());
    body.extend_from_slice(b"abc");
    body.extend_from_slice(&0u16.to_be_bytes());
    let mut bytes = message(b'P', b"\0SELECT $1::TEXT\0\0\0");
    bytes.extend(message(b'B', &body));
    bytes.extend(message(b'S', b""));
    let attack = async |server: &TestServer| refused(started(server).await, &bytes).await;
    survives(attack, "insufficient data left in message").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_length_under_four() {
    let bytes = [&b"Q"[..], &3i32.to_be_bytes(), b"SELECT 1\0"].concat();
    let attack = async |server: &TestServer| refused(started(server).await, &bytes).await;
    survives(attack, "invalid message length").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_message_type() {
    let bytes = message(b'!', b"whatever");
    let attack = async |server: &TestServer| refused(started(server).await, &bytes).await;
    survives(attack, "invalid frontend message type 33").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_before_startup() {
    let attack = async |server: &TestServer| {
        let socket = TcpStream::connect(("127.0.0.1", server.port))
            .await
            .expect("connect");
        refused(socket, b"GET / HTTP/1.1\r\nHost: weir\r\n\r\n").await
    };
    survives(attack, "invalid length of startup packet").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_packet_with_a_huge_length() {
    let attack = async |server: &TestServer| {
        let socket = TcpStream::connect(("127.0.0.1", server.port))
            .await
            .expect("connect");
        let bytes = [
            &0x7fff_fff0i32.to_be_bytes()[..],
            &0x0003_0000u32.to_be_bytes(),
        ]
        .concat();
        refused(socket, &bytes).await
    };
    survives(attack, "invalid length of startup packet").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_request_is_refused_and_startup_goes_on_in_plain_text() {
    let server = TestServer::start();
    let mut socket = TcpStream::connect(("127.0.0.1", server.port))
        .await
        .expect("connect");
    let ssl = [8i32.to_be_bytes(), 80_877_103i32.to_be_bytes()].concat();
    socket.write_all(&ssl).await.expect("SSLRequest");
    let mut answer = [0; 1];
    socket.read_exact(&mut answer).await.expect("answer");
    assert_eq!(&answer, b"N");
    socket.write_all(&startup_packet()).await.expect("startup");
    loop {
        match read_message(&mut socket).await {
            Some((b'Z', _)) => break,
            Some((b'E', body)) => panic!("{:?}", fields(&body)),
            Some(_) => {}
            None => panic!("closed during startup"),
        }
    }
    socket
        .write_all(&message(b'Q', b"SELECT 1\0"))
        .await
        .expect("query");
    let mut kinds = Vec::new();
    while let Some((kind, _)) = read_message(&mut socket).await {
        kinds.push(kind);
        if kind == b'Z' {
            break;
        }
    }
    assert_eq!(kinds, b"TDCZ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_passes_through_the_guard() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE t (k BIGINT, v VARCHAR)")
        .await
        .expect("create");
    let rows: String = (0..50_000).map(|i| format!("{i},value {i}\n")).collect();
    let sink = client
        .copy_in::<_, bytes::Bytes>("COPY t FROM STDIN WITH (FORMAT csv)")
        .await
        .expect("copy in");
    futures::pin_mut!(sink);
    use futures::SinkExt;
    for chunk in rows.as_bytes().chunks(100_000) {
        sink.send(bytes::Bytes::copy_from_slice(chunk))
            .await
            .expect("send");
    }
    assert_eq!(sink.finish().await.expect("finish"), 50_000);
    let count: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(count, 50_000);
}

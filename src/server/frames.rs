//! The frame guard: frames the client's bytes before pgwire sees them and
//! checks each message's body against its declared length and counts.
//!
//! pgwire's decoders read a message's body straight from the connection's
//! read buffer rather than from the frame alone: a body that lies about its
//! counts (a Parse declaring 65,535 parameter types and carrying three)
//! makes a decoder panic or read the next message's bytes. [`FrameGuard`]
//! sits between the socket and pgwire's `Framed` and hands on only frames
//! that [`next`] accepted, so every decoder finds exactly what its frame
//! promised. A frame that fails ends its connection: the connection loop
//! (`server/mod.rs`) sends a FATAL ErrorResponse with [`Malformed`]'s
//! SQLSTATE and message, then closes.
//!
//! Bytes are copied once, from the guard's buffer into pgwire's; the body of
//! a CopyData, which needs no check, is handed on as it arrives and, when it
//! fills pgwire's buffer, read there directly.
//!
//! This module uses nothing else of weir, so the fuzz target under `fuzz/`
//! compiles it alone.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// pgwire's limits on a frame's length field (`messages/mod.rs`): it refuses
/// larger frames, so the guard refuses them first and never buffers one.
const STARTUP_LIMIT: usize = 10_000;
const SMALL_LIMIT: usize = 10_000;
const LARGE_LIMIT: usize = 0x3fff_ffff - 1;

/// The codes an untyped packet of the startup phase carries instead of a
/// protocol version.
const CANCEL_REQUEST: u32 = 80_877_102;
const SSL_REQUEST: u32 = 80_877_103;
const GSS_ENC_REQUEST: u32 = 80_877_104;

/// A cancel request's length: its own, the code, a process id and a secret
/// key of 4 to 256 bytes (protocol 3.2 lengthened the key).
const CANCEL_LEN: std::ops::RangeInclusive<usize> = 4 + 4 + 4 + 4..=4 + 4 + 4 + 256;

/// How much the guard asks of the socket at a time.
const READ_SIZE: usize = 16 * 1024;

/// What went wrong in a frame, in PostgreSQL's words where it has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("invalid length of startup packet")]
    StartupLength,
    #[error("invalid length of query cancel packet")]
    CancelLength,
    #[error("unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.2")]
    UnsupportedProtocol { major: u16, minor: u16 },
    #[error("invalid startup packet layout: expected terminator as last byte")]
    StartupLayout,
    #[error("invalid frontend message type {0}")]
    UnknownType(u8),
    #[error("invalid message length {0}")]
    Length(i32),
    #[error("insufficient data left in message")]
    Insufficient,
    #[error("invalid string in message")]
    InvalidString,
    #[error("invalid message format")]
    Format,
    #[error("invalid {message} message subtype {subtype}")]
    Subtype { message: &'static str, subtype: u8 },
    #[error("{message} message has {formats} {what} formats but {count} {what}s")]
    FormatCount {
        message: &'static str,
        what: &'static str,
        formats: u16,
        count: u16,
    },
}

impl FrameError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            FrameError::UnsupportedProtocol { .. } => "0A000",
            FrameError::StartupLength
            | FrameError::CancelLength
            | FrameError::StartupLayout
            | FrameError::UnknownType(_)
            | FrameError::Length(_)
            | FrameError::Insufficient
            | FrameError::InvalidString
            | FrameError::Format
            | FrameError::Subtype { .. }
            | FrameError::FormatCount { .. } => "08P01",
        }
    }
}

/// A frame the guard refused: what was wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct Malformed {
    /// The message's type byte; `None` for a packet of the startup phase.
    pub kind: Option<u8>,
    pub error: FrameError,
}

impl Malformed {
    pub fn sqlstate(&self) -> &'static str {
        self.error.sqlstate()
    }

    /// Which message it was, for the ErrorResponse's detail.
    pub fn detail(&self) -> String {
        match self.kind {
            None => "in a startup packet".to_string(),
            Some(kind) => match name(kind) {
                Some(name) => format!("in a {name} message"),
                None => format!("in a message of type {kind}"),
            },
        }
    }
}

/// The untyped packets of the startup phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet {
    SslRequest,
    GssEncRequest,
    CancelRequest,
    Startup,
}

/// What the next frame is: before the startup packet, frames carry no type
/// byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Startup,
    Messages,
}

/// The frame at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A startup-phase packet of `len` bytes, checked.
    Packet { len: usize, packet: Packet },
    /// A typed message of `len` bytes (type byte included), checked.
    Message { len: usize, kind: u8 },
    /// A CopyData: its header of `head` bytes is checked and its `body`
    /// bytes need no check, so they may be handed on as they arrive.
    Stream { head: usize, body: usize },
    /// Too few bytes to tell: the frame needs at least `need` in all.
    Partial { need: usize },
}

/// The frame at the front of `bytes`, checked as far as it has arrived.
pub fn next(phase: Phase, bytes: &[u8]) -> Result<Next, Malformed> {
    match phase {
        Phase::Startup => next_packet(bytes).map_err(|error| Malformed { kind: None, error }),
        Phase::Messages => next_message(bytes),
    }
}

fn next_packet(bytes: &[u8]) -> Result<Next, FrameError> {
    let Some(len) = length_at(bytes, 0) else {
        return Ok(Next::Partial { need: 4 });
    };
    let len = usize::try_from(len)
        .ok()
        .filter(|len| (8..=STARTUP_LIMIT).contains(len))
        .ok_or(FrameError::StartupLength)?;
    let Some(packet) = bytes.get(..len) else {
        return Ok(Next::Partial { need: len });
    };
    let packet = check_packet(&packet[4..])?;
    Ok(Next::Packet { len, packet })
}

fn next_message(bytes: &[u8]) -> Result<Next, Malformed> {
    let Some(&kind) = bytes.first() else {
        return Ok(Next::Partial { need: 5 });
    };
    let refuse = |error| Malformed {
        kind: Some(kind),
        error,
    };
    let limit = limit(kind).map_err(refuse)?;
    let Some(declared) = length_at(bytes, 1) else {
        return Ok(Next::Partial { need: 5 });
    };
    let len = usize::try_from(declared)
        .ok()
        .filter(|len| (4..=limit).contains(len))
        .ok_or(refuse(FrameError::Length(declared)))?;
    if kind == b'd' {
        return Ok(Next::Stream {
            head: 5,
            body: len - 4,
        });
    }
    let Some(frame) = bytes.get(..1 + len) else {
        return Ok(Next::Partial { need: 1 + len });
    };
    check(kind, &frame[5..]).map_err(refuse)?;
    Ok(Next::Message { len: 1 + len, kind })
}

/// The big-endian i32 at `at`, when it has arrived.
fn length_at(bytes: &[u8], at: usize) -> Option<i32> {
    let field = bytes.get(at..at + 4)?;
    Some(i32::from_be_bytes([field[0], field[1], field[2], field[3]]))
}

/// The largest length field pgwire accepts for a message type; an error for
/// a type no frontend sends.
pub fn limit(kind: u8) -> Result<usize, FrameError> {
    match kind {
        b'Q' | b'P' | b'B' | b'd' | b'F' => Ok(LARGE_LIMIT),
        b'D' | b'E' | b'C' | b'S' | b'H' | b'X' | b'c' | b'f' | b'p' => Ok(SMALL_LIMIT),
        other => Err(FrameError::UnknownType(other)),
    }
}

fn name(kind: u8) -> Option<&'static str> {
    Some(match kind {
        b'Q' => "Query",
        b'P' => "Parse",
        b'B' => "Bind",
        b'D' => "Describe",
        b'E' => "Execute",
        b'C' => "Close",
        b'S' => "Sync",
        b'H' => "Flush",
        b'X' => "Terminate",
        b'd' => "CopyData",
        b'c' => "CopyDone",
        b'f' => "CopyFail",
        b'p' => "password",
        b'F' => "FunctionCall",
        _ => return None,
    })
}

/// Check the body of a startup-phase packet (what follows its length).
pub fn check_packet(body: &[u8]) -> Result<Packet, FrameError> {
    let mut body = Reader(body);
    let code = body.u32().map_err(|_| FrameError::StartupLength)?;
    match code {
        SSL_REQUEST | GSS_ENC_REQUEST => {
            // pgwire consumes eight bytes whatever the length says.
            if !body.0.is_empty() {
                return Err(FrameError::StartupLength);
            }
            Ok(if code == SSL_REQUEST {
                Packet::SslRequest
            } else {
                Packet::GssEncRequest
            })
        }
        CANCEL_REQUEST if CANCEL_LEN.contains(&(body.0.len() + 8)) => Ok(Packet::CancelRequest),
        CANCEL_REQUEST => Err(FrameError::CancelLength),
        version => {
            let (major, minor) = ((version >> 16) as u16, version as u16);
            if major != 3 {
                return Err(FrameError::UnsupportedProtocol { major, minor });
            }
            check_parameters(body)?;
            Ok(Packet::Startup)
        }
    }
}

/// Name and value pairs, then an empty name as the packet's last byte:
/// pgwire reads names until an empty one, wherever it lies.
fn check_parameters(mut body: Reader<'_>) -> Result<(), FrameError> {
    let layout = |_| FrameError::StartupLayout;
    loop {
        let name = body.cstring().map_err(layout)?;
        if name.is_empty() {
            return body.end().map_err(layout);
        }
        body.cstring().map_err(layout)?;
    }
}

/// Check a typed message's body (what follows its length) against what its
/// type promises: every string terminated, every count covered, nothing
/// left over.
pub fn check(kind: u8, body: &[u8]) -> Result<(), FrameError> {
    let mut body = Reader(body);
    match kind {
        // Their bodies are opaque bytes (a password message's layout depends
        // on the authentication under way; pgwire keeps it as it came).
        b'd' | b'p' => return Ok(()),
        b'Q' | b'f' => {
            body.cstring()?;
        }
        b'P' => {
            body.cstring()?;
            body.cstring()?;
            let types = body.u16()?;
            body.skip(4 * usize::from(types))?;
        }
        b'B' => check_bind(&mut body)?,
        b'D' => check_target(&mut body, "DESCRIBE")?,
        b'C' => check_target(&mut body, "CLOSE")?,
        b'E' => {
            body.cstring()?;
            body.skip(4)?;
        }
        b'S' | b'H' | b'X' | b'c' => {}
        b'F' => check_function_call(&mut body)?,
        other => return Err(FrameError::UnknownType(other)),
    }
    body.end()
}

fn check_bind(body: &mut Reader<'_>) -> Result<(), FrameError> {
    body.cstring()?;
    body.cstring()?;
    check_values(body, "bind", "parameter")?;
    let results = body.u16()?;
    body.skip(2 * usize::from(results))
}

fn check_function_call(body: &mut Reader<'_>) -> Result<(), FrameError> {
    body.skip(4)?;
    check_values(body, "function call", "argument")?;
    body.skip(2)
}

/// Format codes, then values each with its length (-1 for NULL): as many
/// codes as values, or one for all, or none.
fn check_values(
    body: &mut Reader<'_>,
    message: &'static str,
    what: &'static str,
) -> Result<(), FrameError> {
    let formats = body.u16()?;
    body.skip(2 * usize::from(formats))?;
    let count = body.u16()?;
    if formats > 1 && formats != count {
        return Err(FrameError::FormatCount {
            message,
            what,
            formats,
            count,
        });
    }
    for _ in 0..count {
        match body.i32()? {
            -1 => {}
            len => body.skip(usize::try_from(len).map_err(|_| FrameError::Insufficient)?)?,
        }
    }
    Ok(())
}

/// Describe and Close name a statement ('S') or a portal ('P').
fn check_target(body: &mut Reader<'_>, message: &'static str) -> Result<(), FrameError> {
    match body.u8()? {
        b'S' | b'P' => {}
        subtype => return Err(FrameError::Subtype { message, subtype }),
    }
    body.cstring()?;
    Ok(())
}

/// Reads a body front to back, refusing to read past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if n > self.0.len() {
            return Err(FrameError::Insufficient);
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn skip(&mut self, n: usize) -> Result<(), FrameError> {
        self.take(n).map(|_| ())
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i32(&mut self) -> Result<i32, FrameError> {
        self.u32().map(|v| v as i32)
    }

    /// A string up to its terminating zero, which is consumed.
    fn cstring(&mut self) -> Result<&'a [u8], FrameError> {
        let end = memchr::memchr(0, self.0).ok_or(FrameError::InvalidString)?;
        let s = &self.0[..end];
        self.0 = &self.0[end + 1..];
        Ok(s)
    }

    fn end(&self) -> Result<(), FrameError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Format)
        }
    }
}

/// The client's side of a connection, read frame by frame: only whole,
/// checked frames (and CopyData bodies as they arrive) come out of
/// `poll_read`. Writes pass through.
pub struct FrameGuard<S> {
    inner: S,
    /// Bytes read from the client and not yet handed on; the first
    /// `checked` of them may be.
    buf: BytesMut,
    checked: usize,
    /// Bytes of a CopyData body still to come, handed on unchecked.
    passing: usize,
    /// Bytes the frame after `checked` still lacks, when known.
    need: usize,
    phase: Phase,
    /// The frame after `checked` was refused; the error is returned once
    /// the frames before it have been handed on.
    refusal: Option<Malformed>,
    /// A frame was refused: nothing more is read.
    refused: bool,
}

impl<S> FrameGuard<S> {
    pub fn new(inner: S) -> FrameGuard<S> {
        FrameGuard {
            inner,
            buf: BytesMut::new(),
            checked: 0,
            passing: 0,
            need: 0,
            phase: Phase::Startup,
            refusal: None,
            refused: false,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The stream back, when no byte the client sent waits here: at a
    /// switch to TLS, bytes sent before it must not be read as if sent
    /// after it (CVE-2021-23214).
    pub fn into_drained(self) -> Option<S> {
        self.buf.is_empty().then_some(self.inner)
    }

    /// Extend `checked` over every frame that has arrived whole, up to one
    /// that is refused.
    fn scan(&mut self) {
        if let Err(refusal) = self.try_scan() {
            self.refusal = Some(refusal);
        }
    }

    fn try_scan(&mut self) -> Result<(), Malformed> {
        if self.refusal.is_some() {
            return Ok(());
        }
        loop {
            let rest = &self.buf[self.checked..];
            if self.passing > 0 {
                let n = self.passing.min(rest.len());
                if n == 0 {
                    return Ok(());
                }
                self.checked += n;
                self.passing -= n;
                continue;
            }
            match next(self.phase, rest)? {
                Next::Packet { len, packet } => {
                    self.checked += len;
                    if packet == Packet::Startup {
                        self.phase = Phase::Messages;
                    }
                }
                Next::Message { len, .. } => self.checked += len,
                Next::Stream { head, body } => {
                    self.checked += head;
                    self.passing = body;
                }
                Next::Partial { need } => {
                    self.need = need.saturating_sub(rest.len());
                    return Ok(());
                }
            }
        }
    }

    /// Hand checked bytes to `out`.
    fn hand_on(&mut self, out: &mut ReadBuf<'_>) {
        let n = self.checked.min(out.remaining());
        out.put_slice(&self.buf[..n]);
        self.buf.advance(n);
        self.checked -= n;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FrameGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.refused {
                return Poll::Ready(Ok(()));
            }
            this.scan();
            if this.checked > 0 {
                this.hand_on(out);
                return Poll::Ready(Ok(()));
            }
            if let Some(refusal) = this.refusal.take() {
                this.refused = true;
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, refusal)));
            }
            if this.passing >= out.remaining() && this.buf.is_empty() {
                // The CopyData body fills `out`: read it there, saving a copy.
                let before = out.filled().len();
                ready!(Pin::new(&mut this.inner).poll_read(cx, out))?;
                this.passing -= out.filled().len() - before;
                return Poll::Ready(Ok(()));
            }
            this.buf.reserve(this.need.max(READ_SIZE));
            let read = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut this.inner),
                cx,
                &mut this.buf
            ))?;
            if read == 0 {
                // The client closed; a frame it left unfinished is dropped.
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FrameGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A typed message: type byte, length, body.
    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// An untyped packet: length, body.
    fn packet(body: &[u8]) -> Vec<u8> {
        let mut p = (body.len() as i32 + 4).to_be_bytes().to_vec();
        p.extend_from_slice(body);
        p
    }

    fn startup_body(params: &[u8]) -> Vec<u8> {
        let mut b = 0x0003_0000u32.to_be_bytes().to_vec();
        b.extend_from_slice(params);
        b
    }

    /// Concatenate big-endian fields and raw bytes.
    fn body(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn refused(kind: u8, body: &[u8]) -> FrameError {
        check(kind, body).expect_err("refused")
    }

    #[test]
    fn startup_packets() {
        let ok = startup_body(b"user\0weir\0database\0weir\0\0");
        assert_eq!(check_packet(&ok), Ok(Packet::Startup));
        assert_eq!(check_packet(&startup_body(b"\0")), Ok(Packet::Startup));
        for bad in [
            &b"user\0weir\0"[..],
            b"user\0weir",
            b"user\0",
            b"",
            b"\0\0",
            b"\0x",
        ] {
            assert_eq!(
                check_packet(&startup_body(bad)),
                Err(FrameError::StartupLayout),
                "{bad:?}"
            );
        }
        let v2 = 0x0002_0000u32.to_be_bytes();
        assert_eq!(
            check_packet(&body(&[&v2, b"\0"])),
            Err(FrameError::UnsupportedProtocol { major: 2, minor: 0 })
        );
        assert_eq!(check_packet(b"\0\0"), Err(FrameError::StartupLength));
    }

    #[test]
    fn negotiation_and_cancel_packets() {
        let ssl = SSL_REQUEST.to_be_bytes();
        let gss = GSS_ENC_REQUEST.to_be_bytes();
        let cancel = CANCEL_REQUEST.to_be_bytes();
        assert_eq!(check_packet(&ssl), Ok(Packet::SslRequest));
        assert_eq!(check_packet(&gss), Ok(Packet::GssEncRequest));
        assert_eq!(
            check_packet(&body(&[&ssl, b"more"])),
            Err(FrameError::StartupLength)
        );
        assert_eq!(
            check_packet(&body(&[&cancel, &[0; 8]])),
            Ok(Packet::CancelRequest)
        );
        assert_eq!(
            check_packet(&body(&[&cancel, &[0; 260]])),
            Ok(Packet::CancelRequest)
        );
        assert_eq!(
            check_packet(&body(&[&cancel, &[0; 7]])),
            Err(FrameError::CancelLength)
        );
        assert_eq!(
            check_packet(&body(&[&cancel, &[0; 261]])),
            Err(FrameError::CancelLength)
        );
    }

    #[test]
    fn packet_lengths() {
        assert_eq!(next(Phase::Startup, &[0, 0]), Ok(Next::Partial { need: 4 }));
        for len in [0i32, 7, 10_001, i32::MAX, -1] {
            let err = next(Phase::Startup, &len.to_be_bytes()).expect_err("length");
            assert_eq!(err.error, FrameError::StartupLength, "{len}");
            assert_eq!(err.kind, None);
        }
        let ssl = packet(&SSL_REQUEST.to_be_bytes());
        assert_eq!(
            next(Phase::Startup, &ssl[..6]),
            Ok(Next::Partial { need: 8 })
        );
        assert_eq!(
            next(Phase::Startup, &ssl),
            Ok(Next::Packet {
                len: 8,
                packet: Packet::SslRequest
            })
        );
        let garbage = b"GET / HTTP/1.1\r\n\r\n";
        assert!(next(Phase::Startup, garbage).is_err());
    }

    #[test]
    fn simple_messages() {
        assert_eq!(check(b'Q', b"SELECT 1\0"), Ok(()));
        assert_eq!(check(b'Q', b"\0"), Ok(()));
        assert_eq!(refused(b'Q', b"SELECT 1"), FrameError::InvalidString);
        assert_eq!(refused(b'Q', b""), FrameError::InvalidString);
        assert_eq!(refused(b'Q', b"SELECT 1\0S"), FrameError::Format);
        assert_eq!(check(b'f', b"broken\0"), Ok(()));
        assert_eq!(refused(b'f', b"broken"), FrameError::InvalidString);
        for kind in [b'S', b'H', b'X', b'c'] {
            assert_eq!(check(kind, b""), Ok(()));
            assert_eq!(refused(kind, b"\0"), FrameError::Format);
        }
        for kind in [b'd', b'p'] {
            assert_eq!(check(kind, b""), Ok(()));
            assert_eq!(check(kind, b"anything \xff"), Ok(()));
        }
        assert_eq!(refused(b'!', b""), FrameError::UnknownType(b'!'));
    }

    #[test]
    fn parse_messages() {
        let types = |n: u16| n.to_be_bytes();
        let ok = body(&[b"s1\0SELECT $1\0", &types(1), &23u32.to_be_bytes()]);
        assert_eq!(check(b'P', &ok), Ok(()));
        assert_eq!(check(b'P', &body(&[b"\0\0", &types(0)])), Ok(()));
        // The outside test's frame: 65,535 types declared, three carried.
        let lying = body(&[b"\0SELECT 1\0", &types(u16::MAX), &[0; 12]]);
        assert_eq!(refused(b'P', &lying), FrameError::Insufficient);
        assert_eq!(
            refused(b'P', &body(&[b"\0SELECT 1\0", &[0]])),
            FrameError::Insufficient
        );
        assert_eq!(refused(b'P', b"\0SELECT 1"), FrameError::InvalidString);
        assert_eq!(
            refused(b'P', &body(&[b"\0\0", &types(0), b"x"])),
            FrameError::Format
        );
    }

    /// A Bind: portal and statement names, then the given tail.
    fn bind(tail: &[&[u8]]) -> Vec<u8> {
        let mut b = b"p\0s\0".to_vec();
        b.extend_from_slice(&tail.concat());
        b
    }

    #[test]
    fn bind_messages() {
        let n = |v: u16| v.to_be_bytes();
        let len = |v: i32| v.to_be_bytes();
        let ok = bind(&[&n(1), &n(1), &n(2), &len(3), b"abc", &len(-1), &n(1), &n(0)]);
        assert_eq!(check(b'B', &ok), Ok(()));
        assert_eq!(check(b'B', &bind(&[&n(0), &n(0), &n(0)])), Ok(()));
        let past_the_end = bind(&[&n(0), &n(1), &len(1000), b"abc", &n(0)]);
        assert_eq!(refused(b'B', &past_the_end), FrameError::Insufficient);
        let negative = bind(&[&n(0), &n(1), &len(-2), &n(0)]);
        assert_eq!(refused(b'B', &negative), FrameError::Insufficient);
        let formats = bind(&[&n(2), &n(0), &n(0), &n(3)]);
        assert_eq!(
            refused(b'B', &formats).to_string(),
            "bind message has 2 parameter formats but 3 parameters"
        );
        let results = bind(&[&n(0), &n(0), &n(5), &n(0)]);
        assert_eq!(refused(b'B', &results), FrameError::Insufficient);
        let extra = bind(&[&n(0), &n(0), &n(0), b"?"]);
        assert_eq!(refused(b'B', &extra), FrameError::Format);
        assert_eq!(refused(b'B', b"p\0s"), FrameError::InvalidString);
    }

    #[test]
    fn describe_close_execute() {
        for kind in [b'D', b'C'] {
            assert_eq!(check(kind, b"Sname\0"), Ok(()));
            assert_eq!(check(kind, b"P\0"), Ok(()));
            assert!(matches!(
                refused(kind, b"Xname\0"),
                FrameError::Subtype { subtype: b'X', .. }
            ));
            assert_eq!(refused(kind, b""), FrameError::Insufficient);
            assert_eq!(refused(kind, b"Sname"), FrameError::InvalidString);
            assert_eq!(refused(kind, b"S\0\0"), FrameError::Format);
        }
        assert_eq!(check(b'E', b"\0\0\0\0\0"), Ok(()));
        assert_eq!(refused(b'E', b"\0\0\0"), FrameError::Insufficient);
        assert_eq!(refused(b'E', b"portal"), FrameError::InvalidString);
        assert_eq!(refused(b'E', b"\0\0\0\0\0\0"), FrameError::Format);
    }

    #[test]
    fn function_calls() {
        let n = |v: u16| v.to_be_bytes();
        let oid = 1234u32.to_be_bytes();
        let ok = body(&[&oid, &n(1), &n(0), &n(1), &2i32.to_be_bytes(), b"ab", &n(0)]);
        assert_eq!(check(b'F', &ok), Ok(()));
        let short = body(&[&oid, &n(0), &n(1), &9i32.to_be_bytes(), b"ab", &n(0)]);
        assert_eq!(refused(b'F', &short), FrameError::Insufficient);
        assert_eq!(refused(b'F', &oid), FrameError::Insufficient);
    }

    #[test]
    fn message_headers() {
        assert_eq!(next(Phase::Messages, b""), Ok(Next::Partial { need: 5 }));
        // An unknown type is refused before its length arrives.
        let unknown = next(Phase::Messages, b"!").expect_err("type");
        assert_eq!(unknown.error, FrameError::UnknownType(b'!'));
        assert_eq!(unknown.sqlstate(), "08P01");
        for len in [0i32, 3, -1, i32::MIN] {
            let frame = body(&[b"Q", &len.to_be_bytes()]);
            let err = next(Phase::Messages, &frame).expect_err("length");
            assert_eq!(err.error, FrameError::Length(len));
            assert_eq!(err.detail(), "in a Query message");
        }
        let too_big = body(&[b"S", &10_001i32.to_be_bytes()]);
        assert!(next(Phase::Messages, &too_big).is_err());
        let big_query = body(&[b"Q", &10_001i32.to_be_bytes()]);
        assert_eq!(
            next(Phase::Messages, &big_query),
            Ok(Next::Partial { need: 10_002 })
        );
        let copy = body(&[b"d", &1_000_004i32.to_be_bytes()]);
        assert_eq!(
            next(Phase::Messages, &copy),
            Ok(Next::Stream {
                head: 5,
                body: 1_000_000
            })
        );
        let sync = message(b'S', b"");
        assert_eq!(
            next(Phase::Messages, &sync),
            Ok(Next::Message { len: 5, kind: b'S' })
        );
    }

    /// A client that delivers its bytes in the given chunks, one per read.
    struct Chunks(std::collections::VecDeque<Vec<u8>>);

    impl AsyncRead for Chunks {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let chunks = &mut self.get_mut().0;
            if let Some(mut chunk) = chunks.pop_front() {
                let n = chunk.len().min(out.remaining());
                out.put_slice(&chunk[..n]);
                if n < chunk.len() {
                    chunks.push_front(chunk.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    /// Everything the guard hands on, read `at_most` bytes at a time, and
    /// the error that ended it, if any.
    async fn through_guard(chunks: Vec<Vec<u8>>, at_most: usize) -> (Vec<u8>, Option<Malformed>) {
        let mut guard = FrameGuard::new(Chunks(chunks.into()));
        let mut out = Vec::new();
        let mut buf = vec![0; at_most];
        loop {
            match guard.read(&mut buf).await {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => {
                    let malformed = e
                        .get_ref()
                        .and_then(|e| e.downcast_ref::<Malformed>())
                        .cloned();
                    return (out, Some(malformed.expect("a Malformed")));
                }
            }
        }
    }

    fn session() -> Vec<u8> {
        let mut bytes = packet(&SSL_REQUEST.to_be_bytes());
        bytes.extend(packet(&startup_body(b"user\0weir\0\0")));
        bytes.extend(message(b'Q', b"COPY t FROM STDIN\0"));
        bytes.extend(message(b'd', &vec![7; 100_000]));
        bytes.extend(message(b'd', b"1\n"));
        bytes.extend(message(b'c', b""));
        bytes.extend(message(b'P', b"\0SELECT 1\0\0\0"));
        bytes.extend(message(b'S', b""));
        bytes
    }

    #[tokio::test]
    async fn valid_frames_pass_unchanged_however_they_arrive() {
        let bytes = session();
        for chunk in [1, 3, 7, 4096, 1 << 20] {
            for at_most in [1, 5, 1000, 64 * 1024] {
                let chunks = bytes.chunks(chunk).map(<[u8]>::to_vec).collect();
                let (out, error) = through_guard(chunks, at_most).await;
                assert_eq!(error, None, "chunk {chunk}, read {at_most}");
                assert!(out == bytes, "chunk {chunk}, read {at_most}");
            }
        }
    }

    #[tokio::test]
    async fn frames_before_a_bad_one_pass_and_nothing_after_it() {
        let mut bytes = session();
        let good = bytes.len();
        bytes.extend(message(
            b'P',
            &body(&[b"\0SELECT 1\0", &[0xff, 0xff], &[0; 12]]),
        ));
        bytes.extend(message(b'S', b""));
        for chunk in [1, 13, 1 << 20] {
            let chunks = bytes.chunks(chunk).map(<[u8]>::to_vec).collect();
            let (out, error) = through_guard(chunks, 8192).await;
            assert_eq!(out.len(), good);
            let error = error.expect("refused");
            assert_eq!(error.kind, Some(b'P'));
            assert_eq!(error.error, FrameError::Insufficient);
        }
    }

    #[tokio::test]
    async fn an_unfinished_frame_is_dropped_at_the_end() {
        let mut bytes = packet(&startup_body(b"\0"));
        let good = bytes.len();
        bytes.extend(&message(b'Q', b"SELECT 1\0")[..7]);
        let (out, error) = through_guard(vec![bytes], 100).await;
        assert_eq!((out.len(), error), (good, None));
    }
}

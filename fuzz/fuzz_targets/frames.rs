//! Arbitrary client bytes through the frame guard and pgwire's decoder.
//!
//! Every frame the guard accepts must decode without a panic and consume
//! exactly its own bytes (pgwire's decoders read the shared read buffer, so
//! a frame they overran would take the next message's bytes), and the
//! guard's reader must hand on exactly the accepted frames, however the
//! bytes arrive.

#![no_main]

#[allow(dead_code)]
#[path = "../../src/server/frames.rs"]
mod frames;

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use frames::{FrameGuard, Next, Packet, Phase};
use libfuzzer_sys::fuzz_target;
use pgwire::messages::{DecodeContext, PgWireFrontendMessage, ProtocolVersion};
use tokio::io::{AsyncRead, ReadBuf};

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, data)) = data.split_first() else {
        return;
    };
    // The low bit starts past the startup packet, so that typed messages
    // are reached without one; the rest chooses how the bytes arrive.
    let phase = if knobs & 1 == 0 {
        Phase::Startup
    } else {
        Phase::Messages
    };
    decode_accepted(phase, data);
    if phase == Phase::Startup {
        let chunk = usize::from(knobs >> 1) + 1;
        let read = usize::from(knobs >> 3) * 7 + 1;
        assert_eq!(through_guard(data, chunk, read), &data[..accepted(data)]);
    }
});

/// How many bytes of `data` the guard accepts from the start of a connection.
fn accepted(data: &[u8]) -> usize {
    let (mut phase, mut at) = (Phase::Startup, 0);
    loop {
        match frames::next(phase, &data[at..]) {
            Err(_) | Ok(Next::Partial { .. }) => return at,
            Ok(Next::Packet { len, packet }) => {
                at += len;
                if packet == Packet::Startup {
                    phase = Phase::Messages;
                }
            }
            Ok(Next::Message { len, .. }) => at += len,
            Ok(Next::Stream { head, body }) => at = (at + head + body).min(data.len()),
        }
    }
}

/// Decode each frame the guard accepts as pgwire's server would, in its
/// state, until the guard or pgwire refuses one or the bytes run out.
fn decode_accepted(mut phase: Phase, data: &[u8]) {
    let mut buf = BytesMut::from(data);
    let mut negotiating = phase == Phase::Startup;
    loop {
        let offset = data.len() - buf.len();
        let (len, packet) = match frames::next(phase, &buf) {
            Err(_) | Ok(Next::Partial { .. }) => return,
            Ok(Next::Packet { len, packet }) => (len, Some(packet)),
            Ok(Next::Message { len, .. }) => (len, None),
            // pgwire waits for the rest of the CopyData.
            Ok(Next::Stream { head, body }) if buf.len() < head + body => return,
            Ok(Next::Stream { head, body }) => (head + body, None),
        };
        let mut context = DecodeContext::new(ProtocolVersion::PROTOCOL3_2);
        match packet {
            Some(Packet::SslRequest | Packet::GssEncRequest) if negotiating => {}
            Some(_) => {
                if negotiating {
                    // pgwire looks at the packet while negotiating and
                    // leaves it for the startup state.
                    match PgWireFrontendMessage::decode(&mut buf, &context) {
                        Ok(Some(PgWireFrontendMessage::SslNegotiation(_))) => {}
                        other => panic!("not a negotiation step: {other:?}"),
                    }
                    assert_eq!(data.len() - buf.len(), offset, "negotiation consumed bytes");
                    negotiating = false;
                }
                context.awaiting_frontend_ssl = false;
            }
            None => {
                context.awaiting_frontend_ssl = false;
                context.awaiting_frontend_startup = false;
            }
        }
        match PgWireFrontendMessage::decode(&mut buf, &context) {
            Ok(Some(message)) => {
                let consumed = data.len() - buf.len() - offset;
                assert_eq!(
                    consumed, len,
                    "{message:?} consumed other bytes than its frame"
                );
                if let PgWireFrontendMessage::PasswordMessageFamily(password) = message {
                    let _ = password.into_password();
                }
            }
            Ok(None) => panic!("a whole frame of {len} bytes was not decoded"),
            // pgwire refused it: the connection ends here.
            Err(_) => return,
        }
        match packet {
            Some(Packet::Startup) => phase = Phase::Messages,
            Some(Packet::CancelRequest) => return,
            _ => {}
        }
    }
}

/// What the guard's reader hands on when `data` arrives `chunk` bytes at a
/// time and is read `read` bytes at a time.
fn through_guard(data: &[u8], chunk: usize, read: usize) -> Vec<u8> {
    let mut guard = FrameGuard::new(Chunks { data, chunk });
    let mut context = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut buf = vec![0; read];
    loop {
        let mut window = ReadBuf::new(&mut buf);
        match Pin::new(&mut guard).poll_read(&mut context, &mut window) {
            Poll::Ready(Ok(())) if window.filled().is_empty() => return out,
            Poll::Ready(Ok(())) => out.extend_from_slice(window.filled()),
            Poll::Ready(Err(_)) => return out,
            Poll::Pending => panic!("the client never blocks"),
        }
    }
}

struct Chunks<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl AsyncRead for Chunks<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let n = this.chunk.min(out.remaining()).min(this.data.len());
        out.put_slice(&this.data[..n]);
        this.data = &this.data[n..];
        Poll::Ready(Ok(()))
    }
}

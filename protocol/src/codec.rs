//! `tokio-util` [`Decoder`]/[`Encoder`] adapters: thin wrappers over the sans-IO functions.
//!
//! * [`ServerCodec`] decodes requests into [`Decoded`] (enforcing the HELLO-first rule)
//!   and encodes [`Response`]s, or raw ID slices without building a `Vec`.
//! * [`ClientCodec`] encodes [`Request`]s and decodes owned [`Response`]s; it raises its
//!   response frame limit to [`max_response_frame`]`(max_batch)` when HELLO_OK arrives.
//!
//! After a decode error the stream is broken: a server sends an ERROR frame with
//! [`CodecError::status`] and closes (`FramedRead` yields nothing more after an error).

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::{
    decode_request_for, decode_response, encode_ids, encode_request, max_response_frame,
    max_response_frame_for, Decoded, FrameError, Limits, Request, Response, ResponseRef,
    ServerConnState, Status, WorkersBeyondWire,
};

/// Error of both codecs.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The frame stream is broken.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A HELLO_OK whose worker range the wire cannot carry: nothing was encoded.
    #[error(transparent)]
    Workers(#[from] WorkersBeyondWire),
}

impl CodecError {
    /// The wire status to answer with: a frame fault's, `INTERNAL` for a HELLO_OK this side
    /// could not encode, `None` for I/O errors, where nothing can be sent.
    pub fn status(&self) -> Option<Status> {
        match self {
            CodecError::Frame(e) => Some(e.status()),
            CodecError::Workers(_) => Some(Status::INTERNAL),
            CodecError::Io(_) => None,
        }
    }
}

/// Server side: requests in, responses out.
#[derive(Debug, Clone, Default)]
pub struct ServerCodec {
    limits: Limits,
    state: ServerConnState,
}

impl ServerCodec {
    /// A codec for a fresh connection with the given limits.
    pub const fn new(limits: Limits) -> Self {
        ServerCodec {
            limits,
            state: ServerConnState::new(),
        }
    }

    /// The limits in force.
    pub const fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The negotiated protocol version, once a HELLO was accepted. Answer that HELLO with
    /// a HELLO_OK carrying this version.
    pub const fn version(&self) -> Option<u16> {
        self.state.version()
    }
}

impl Decoder for ServerCodec {
    type Item = Decoded;
    type Error = CodecError;

    /// Yields `Decoded::Request(Request::Hello { .. })` only for an accepted HELLO (read
    /// [`ServerCodec::version`]), then GET_IDS/PING requests and `Decoded::Reject`s to be
    /// answered with a non-closing ERROR frame.
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Decoded>, CodecError> {
        match decode_request_for(src, &self.limits, self.state.version().unwrap_or(1))? {
            None => Ok(None),
            Some((decoded, consumed)) => {
                src.advance(consumed);
                self.state.check(&decoded)?;
                Ok(Some(decoded))
            }
        }
    }
}

impl Encoder<Response> for ServerCodec {
    type Error = CodecError;
    fn encode(&mut self, item: Response, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(item.encode(dst)?)
    }
}

impl Encoder<&Response> for ServerCodec {
    type Error = CodecError;
    fn encode(&mut self, item: &Response, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(item.encode(dst)?)
    }
}

/// An IDS frame straight from a slice (no `Vec` per request).
impl Encoder<&[u64]> for ServerCodec {
    type Error = CodecError;
    fn encode(&mut self, ids: &[u64], dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.reserve(9 + 8 * ids.len());
        encode_ids(ids, dst);
        Ok(())
    }
}

/// Client side: requests out, responses in.
#[derive(Debug, Clone)]
pub struct ClientCodec {
    max_frame: u32,
}

impl Default for ClientCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientCodec {
    /// A codec accepting responses up to `max_response_frame(Limits::default().max_batch)`
    /// until HELLO_OK announces the server's `max_batch`.
    pub const fn new() -> Self {
        ClientCodec {
            max_frame: max_response_frame(crate::DEFAULT_MAX_BATCH),
        }
    }

    /// A codec with a fixed initial response frame limit.
    pub const fn with_max_frame(max_frame: u32) -> Self {
        ClientCodec { max_frame }
    }

    /// The response frame limit in force.
    pub const fn max_frame(&self) -> u32 {
        self.max_frame
    }
}

impl Encoder<Request> for ClientCodec {
    type Error = CodecError;
    fn encode(&mut self, item: Request, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.reserve(item.encoded_len());
        encode_request(&item, dst);
        Ok(())
    }
}

impl Decoder for ClientCodec {
    type Item = Response;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Response>, CodecError> {
        match decode_response(src, self.max_frame)? {
            None => {
                // The length was accepted (or is not yet readable): make room for the body.
                if let Some(&[a, b, c, d]) = src.get(..4) {
                    let total = 4 + u32::from_be_bytes([a, b, c, d]) as usize;
                    src.reserve(total.saturating_sub(src.len()));
                }
                Ok(None)
            }
            Some((response, consumed)) => {
                if let ResponseRef::HelloOk(h) = response {
                    self.max_frame = max_response_frame_for(h.version, h.max_batch);
                }
                let owned = response.into_owned();
                src.advance(consumed);
                Ok(Some(owned))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerHello;
    use bytes::BufMut;
    use idgen_id::WorkerRange;

    fn hello_ok() -> ServerHello {
        ServerHello {
            version: 1,
            epoch_ms: 0,
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            region_bits: 0,
            max_batch: 4,
            max_request_frame: 64,
            workers: WorkerRange::new(0, 1024),
            shard: 0,
        }
    }

    #[test]
    fn client_server_pipeline() {
        let mut client = ClientCodec::new();
        let mut server = ServerCodec::new(Limits::default());
        let mut wire = BytesMut::new();
        for r in [
            Request::Hello {
                min_version: 1,
                max_version: 3,
            },
            Request::GetIds { count: 2 },
            Request::Ping { token: 9 },
            Request::GetIds { count: 0 },
        ] {
            client.encode(r, &mut wire).unwrap();
        }
        // Feed the server one byte at a time.
        let mut inbuf = BytesMut::new();
        let mut got = Vec::new();
        for byte in wire.iter() {
            inbuf.put_u8(*byte);
            while let Some(d) = server.decode(&mut inbuf).unwrap() {
                got.push(d);
            }
        }
        assert!(inbuf.is_empty());
        assert_eq!(server.version(), Some(3), "1..=3 picks version 3");
        assert_eq!(got.len(), 4);
        assert_eq!(got[1], Decoded::Request(Request::GetIds { count: 2 }));
        assert!(
            matches!(got[3], Decoded::Reject { status, .. } if status == Status::INVALID_COUNT)
        );

        let mut out = BytesMut::new();
        server
            .encode(Response::HelloOk(hello_ok()), &mut out)
            .unwrap();
        server.encode(&[7u64, 8][..], &mut out).unwrap();
        server.encode(&Response::Pong(9), &mut out).unwrap();
        server
            .encode(
                Response::Error {
                    status: Status::INVALID_COUNT,
                    message: "count 0".into(),
                },
                &mut out,
            )
            .unwrap();
        let mut responses = Vec::new();
        while let Some(r) = client.decode(&mut out).unwrap() {
            responses.push(r);
        }
        assert_eq!(client.max_frame(), 258); // max(6 + 8 * 4, 258)
        assert_eq!(
            responses,
            [
                Response::HelloOk(hello_ok()),
                Response::Ids(vec![7, 8]),
                Response::Pong(9),
                Response::Error {
                    status: Status::INVALID_COUNT,
                    message: "count 0".into()
                }
            ]
        );
    }

    #[test]
    fn server_codec_requires_hello_first() {
        let mut server = ServerCodec::new(Limits::default());
        let mut buf = BytesMut::new();
        Request::Ping { token: 1 }.encode(&mut buf);
        let e = server.decode(&mut buf).unwrap_err();
        assert_eq!(e.status(), Some(Status::HANDSHAKE_REQUIRED));
    }

    #[test]
    fn server_codec_frame_errors_have_status() {
        let mut server = ServerCodec::new(Limits::default());
        let mut buf = BytesMut::from(&[0xFFu8, 0xFF, 0xFF, 0xFF][..]);
        let e = server.decode(&mut buf).unwrap_err();
        assert_eq!(e.status(), Some(Status::FRAME_TOO_LARGE));
        let io = CodecError::from(std::io::Error::other("x"));
        assert_eq!(io.status(), None);
    }

    #[test]
    fn client_codec_reserves_for_large_frames() {
        let mut client = ClientCodec::new();
        let mut buf = BytesMut::new();
        buf.put_slice(&[0, 0, 0x10, 0x05, 0x82]); // 4101 = 5 + 8 * 512
        assert!(client.decode(&mut buf).unwrap().is_none());
        assert!(buf.capacity() >= 4105);
        let mut small = ClientCodec::with_max_frame(100);
        let e = small.decode(&mut buf).unwrap_err();
        assert_eq!(e.status(), Some(Status::FRAME_TOO_LARGE));
    }
}

//! The client side of a connection, sans-IO: the handshake, then requests and their answers
//! in order, with one reading of every ERROR status.
//!
//! [`Handshake`] produces the HELLO bytes and consumes bytes until HELLO_OK (or a refusal);
//! it yields a [`ClientConn`], which encodes requests, remembers what each one expects, and
//! decodes each answer against it. Every ERROR comes back as a [`Refusal`] whose [`After`]
//! says, from [`Status::TABLE`], what the caller does next, so every client reads a `3xx`
//! (and every other status) the same way. The I/O (sockets, timeouts, reconnects, which node
//! next) stays with the caller.
//!
//! ```
//! use idgen_protocol::client::{After, Answer, Handshake};
//! use idgen_protocol::{
//!     encode_error, encode_hello_ok, encode_ids, ServerHello, Status, WorkerRange,
//! };
//!
//! let hs = Handshake::new();
//! let hello = hs.hello(); // write these 13 bytes first
//! assert_eq!(&hello[..5], &[0, 0, 0, 9, 0x01]);
//!
//! // The server's answer, as read from the socket (here: made up).
//! let announced = ServerHello {
//!     version: 1, epoch_ms: 1_704_067_200_000, timestamp_bits: 41, worker_bits: 10,
//!     sequence_bits: 12, region_bits: 0, max_batch: 1000, max_request_frame: 64,
//!     workers: WorkerRange::new(0, 1024), shard: 0,
//! };
//! let mut wire = Vec::new();
//! encode_hello_ok(&announced, &mut wire).unwrap();
//! assert_eq!(hs.receive(&wire[..10]), Ok(None)); // not complete yet
//! let (mut conn, used) = hs.receive(&wire).unwrap().unwrap();
//! assert_eq!(used, wire.len());
//! assert_eq!(conn.hello().max_batch, 1000);
//!
//! // Two pipelined requests; the answers come in order.
//! let mut out = Vec::new();
//! conn.get_ids(2, &mut out);
//! conn.get_ids(3, &mut out);
//! let mut answers = Vec::new();
//! encode_ids(&[7, 8], &mut answers);
//! encode_error(Status::UNAVAILABLE_LEASE, "no lease", &mut answers);
//! let (first, n) = conn.decode(&answers).unwrap().unwrap();
//! assert!(matches!(first, Answer::Ids(ids) if ids.to_vec() == [7, 8]));
//! let (second, _) = conn.decode(&answers[n..]).unwrap().unwrap();
//! let Answer::Refused(refusal) = second else { unreachable!() };
//! // 300: this node cannot serve now; the connection stays usable; ask another node.
//! assert_eq!(refusal.after, After::RetryElsewhere);
//! assert_eq!(conn.outstanding(), 0);
//! ```

use std::collections::VecDeque;

use bytes::BufMut;
use idgen_id::Layout;

use crate::{
    decode_response, encode_request, max_response_frame, max_response_frame_for, FrameError,
    IdsOptions, IdsRef, MaskedIdsRef, RangesRef, Request, ResponseRef, SeqName, ServerHello,
    Status, UuidsRef, ValuesRef, MAX_SUPPORTED_VERSION, MIN_SUPPORTED_VERSION,
};

/// Bytes of a HELLO frame (length prefix included).
pub const HELLO_FRAME_LEN: usize = 4 + crate::HELLO_LEN as usize;

/// What the caller does after an ERROR, read from [`Status::TABLE`] (the `closes` and
/// `retry elsewhere` columns); unknown codes follow their class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum After {
    /// The request is refused and another node would refuse it too (`2xx`, `EXHAUSTED`);
    /// the connection stays usable.
    Fail,
    /// This node cannot serve now (`UNAVAILABLE_LEASE`, `UNAVAILABLE_CLOCK`): retry the
    /// request on another node. The connection stays usable (a later request may succeed).
    RetryElsewhere,
    /// The server closes the connection and the request may succeed elsewhere
    /// (`SHUTTING_DOWN`, `OVERLOADED`, `RANGE_CHANGED`): drop the connection, then retry on
    /// another node or on a new connection (a new HELLO learns the new worker range).
    CloseRetryElsewhere,
    /// The server closes the connection and a retry would not help (`1xx`, `5xx`).
    Close,
}

impl After {
    /// The reading of `status`.
    pub const fn of(status: Status) -> After {
        match (status.closes_connection(), status.retry_elsewhere()) {
            (false, false) => After::Fail,
            (false, true) => After::RetryElsewhere,
            (true, true) => After::CloseRetryElsewhere,
            (true, false) => After::Close,
        }
    }

    /// Whether the connection is over (the server closes it after this status).
    pub const fn closes(self) -> bool {
        matches!(self, After::CloseRetryElsewhere | After::Close)
    }

    /// Whether the request may succeed on another node.
    pub const fn retry_elsewhere(self) -> bool {
        matches!(self, After::RetryElsewhere | After::CloseRetryElsewhere)
    }
}

/// An ERROR answer, with what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Refusal<'a> {
    /// The wire status.
    pub status: Status,
    /// The server's message (for logs; act on `status` only).
    pub message: &'a str,
    /// What the caller does next.
    pub after: After,
}

impl<'a> Refusal<'a> {
    fn new(status: Status, message: &'a str) -> Refusal<'a> {
        Refusal {
            status,
            message,
            after: After::of(status),
        }
    }
}

/// Why the handshake failed. Every case ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The server refused the HELLO with an ERROR (e.g. `OVERLOADED`, `UNSUPPORTED_VERSION`).
    #[error("the server refused the handshake: {status}: {message}")]
    Refused {
        /// The wire status.
        status: Status,
        /// The server's message.
        message: String,
        /// What to do next: [`After::CloseRetryElsewhere`] for `OVERLOADED` and
        /// `SHUTTING_DOWN`, for instance.
        after: After,
    },
    /// The answer was not a well-formed frame (or announced an invalid layout).
    #[error("bad frame from the server: {0}")]
    Frame(#[from] FrameError),
    /// A well-formed frame other than HELLO_OK or ERROR.
    #[error("{0} in answer to HELLO")]
    Unexpected(&'static str),
    /// HELLO_OK picked a version outside the offered range.
    #[error("the server picked protocol version {picked}, offered {min}..={max}")]
    Version {
        /// The version HELLO_OK announced.
        picked: u16,
        /// Lowest version offered.
        min: u16,
        /// Highest version offered.
        max: u16,
    },
}

/// The opening of a connection: the HELLO to send and the reading of its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handshake {
    min_version: u16,
    max_version: u16,
}

impl Default for Handshake {
    fn default() -> Self {
        Handshake::new()
    }
}

impl Handshake {
    /// Offers every version this crate speaks.
    pub const fn new() -> Handshake {
        Handshake::offering(MIN_SUPPORTED_VERSION, MAX_SUPPORTED_VERSION)
    }

    /// Offers `min_version..=max_version` (e.g. `1..=1` to speak version 1 only).
    pub const fn offering(min_version: u16, max_version: u16) -> Handshake {
        Handshake {
            min_version,
            max_version,
        }
    }

    /// The HELLO frame to send first.
    pub fn hello(&self) -> [u8; HELLO_FRAME_LEN] {
        let mut frame = [0u8; HELLO_FRAME_LEN];
        encode_request(
            &Request::Hello {
                min_version: self.min_version,
                max_version: self.max_version,
            },
            &mut &mut frame[..],
        );
        frame
    }

    /// Reads the answer from the start of `buf`: `Ok(None)` while it is incomplete, else the
    /// connection and the bytes it used (bytes after them are answers to later requests).
    ///
    /// Before HELLO_OK only HELLO_OK or ERROR may arrive, so frames above
    /// [`max_response_frame`]`(0)` (258 bytes) are refused at once.
    pub fn receive(&self, buf: &[u8]) -> Result<Option<(ClientConn, usize)>, HandshakeError> {
        let Some((response, used)) = decode_response(buf, max_response_frame(0))? else {
            return Ok(None);
        };
        let hello = match response {
            ResponseRef::HelloOk(h) => h,
            ResponseRef::Error { status, message } => {
                return Err(HandshakeError::Refused {
                    status,
                    message: message.to_owned(),
                    after: After::of(status),
                })
            }
            other => return Err(HandshakeError::Unexpected(response_name(&other))),
        };
        if !(self.min_version..=self.max_version).contains(&hello.version) {
            return Err(HandshakeError::Version {
                picked: hello.version,
                min: self.min_version,
                max: self.max_version,
            });
        }
        let layout = hello.layout()?;
        Ok(Some((ClientConn::new(hello, layout), used)))
    }
}

/// Why an answer cannot be taken: the stream or the conversation is broken, so the caller
/// drops the connection (and fails every request still outstanding on it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Not a well-formed frame.
    #[error("bad frame from the server: {0}")]
    Frame(#[from] FrameError),
    /// A well-formed frame that does not answer the oldest outstanding request (a PONG for
    /// GET_IDS, a wrong ID count or token, HELLO_OK after the handshake), or arrives with no
    /// request outstanding or after a closing ERROR.
    #[error("{got} {expected}")]
    Unexpected {
        /// The frame, e.g. `"IDS of 3"`.
        got: String,
        /// What was awaited, e.g. `"in answer to GET_IDS of 2"`.
        expected: String,
    },
}

/// What one outstanding request awaits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Awaits {
    /// IDS of exactly this many IDs.
    Ids(u32),
    /// RANGES totalling exactly this many IDs.
    Ranges(u32),
    /// PONG with this token.
    Pong(u64),
    /// VALUES of exactly this many values of the named sequence (version 3).
    Values(u32, SeqName),
    /// UUIDS of exactly this many UUIDs (version 4).
    Uuids(u32),
    /// IDS, or MASKED_IDS if masked, of exactly the options' count (version 5).
    IdsWith(IdsOptions),
    /// VALUES of exactly this many values, asked with GET_VALUES_HERE (node to node).
    ValuesHere(u32, SeqName),
}

impl Awaits {
    /// What `request` awaits; `None` for HELLO (a second one is a protocol error the server
    /// answers with a closing ERROR).
    pub const fn of(request: &Request) -> Option<Awaits> {
        match *request {
            Request::GetIds { count } => Some(Awaits::Ids(count)),
            Request::GetRanges { count } => Some(Awaits::Ranges(count)),
            Request::Ping { token } => Some(Awaits::Pong(token)),
            Request::GetValues { count, name } => Some(Awaits::Values(count, name)),
            Request::GetUuids { count } => Some(Awaits::Uuids(count)),
            Request::GetIdsWith(o) => Some(Awaits::IdsWith(o)),
            Request::GetValuesHere { count, name } => Some(Awaits::ValuesHere(count, name)),
            Request::Hello { .. } => None,
        }
    }

    fn describe(self) -> String {
        match self {
            Awaits::Ids(n) => format!("in answer to GET_IDS of {n}"),
            Awaits::Ranges(n) => format!("in answer to GET_RANGES of {n}"),
            Awaits::Pong(t) => format!("in answer to PING {t}"),
            Awaits::Values(n, name) => format!("in answer to GET_VALUES of {n} of {name}"),
            Awaits::ValuesHere(n, name) => {
                format!("in answer to GET_VALUES_HERE of {n} of {name}")
            }
            Awaits::Uuids(n) => format!("in answer to GET_UUIDS of {n}"),
            Awaits::IdsWith(o) => format!(
                "in answer to GET_IDS_WITH of {}{}",
                o.count,
                if o.masked { " (masked)" } else { "" }
            ),
        }
    }
}

/// One answer, matched to the oldest outstanding request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Answer<'a> {
    /// The IDs asked for with GET_IDS (exactly the requested count).
    Ids(IdsRef<'a>),
    /// The IDs asked for with GET_RANGES (exactly the requested total).
    Ranges(RangesRef<'a>),
    /// The PONG of a PING (its token checked).
    Pong(u64),
    /// The values asked for with GET_VALUES (exactly the requested count, strictly
    /// increasing).
    Values(ValuesRef<'a>),
    /// The UUIDs asked for with GET_UUIDS (exactly the requested count, strictly increasing).
    Uuids(UuidsRef<'a>),
    /// The masked IDs asked for with GET_IDS_WITH's masked option (exactly the requested
    /// count), and the key ID that masked them.
    MaskedIds(MaskedIdsRef<'a>),
    /// An ERROR, with what to do next. After one that [closes](After::closes), nothing more
    /// is answered on the connection.
    Refused(Refusal<'a>),
}

/// An open connection after HELLO_OK: the announced limits and layout, and the requests sent
/// but not answered yet, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConn {
    hello: ServerHello,
    layout: Layout,
    max_frame: u32,
    outstanding: VecDeque<Awaits>,
    /// Set by a closing ERROR: the server answers nothing after it.
    closed: bool,
    /// Whether an IDS or RANGES answer must carry exactly the requested count.
    exact_counts: bool,
}

impl ClientConn {
    fn new(hello: ServerHello, layout: Layout) -> ClientConn {
        ClientConn {
            hello,
            layout,
            max_frame: max_response_frame_for(hello.version, hello.max_batch),
            outstanding: VecDeque::new(),
            closed: false,
            exact_counts: true,
        }
    }

    /// Takes IDS and RANGES answers of any count instead of refusing a count other than the
    /// requested one. For a tool that measures a server and counts wrong answers itself (the
    /// load tester); a client that hands IDs out keeps the check.
    pub fn accept_any_count(&mut self) {
        self.exact_counts = false;
    }

    /// The server's HELLO_OK: version, layout, limits, worker range, shard.
    pub const fn hello(&self) -> &ServerHello {
        &self.hello
    }

    /// The announced ID layout.
    pub const fn layout(&self) -> Layout {
        self.layout
    }

    /// Whether GET_RANGES may be sent (protocol version 2 or later).
    pub const fn ranges(&self) -> bool {
        self.hello.version >= 2
    }

    /// Whether GET_VALUES may be sent (protocol version 3 or later).
    pub const fn values(&self) -> bool {
        self.hello.version >= 3
    }

    /// Whether GET_UUIDS may be sent (protocol version 4 or later).
    pub const fn uuids(&self) -> bool {
        self.hello.version >= 4
    }

    /// Whether GET_IDS_WITH may be sent (protocol version 5 or later).
    pub const fn ids_with(&self) -> bool {
        self.hello.version >= 5
    }

    /// The largest response frame accepted (from the announced `max_batch`).
    pub const fn max_frame(&self) -> u32 {
        self.max_frame
    }

    /// Requests sent and not answered yet.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Whether a closing ERROR has arrived (the caller drops the connection).
    pub const fn is_closed(&self) -> bool {
        self.closed
    }

    /// Encodes GET_IDS of `count` and awaits its IDS.
    pub fn get_ids<B: BufMut + ?Sized>(&mut self, count: u32, buf: &mut B) {
        self.encode(Awaits::Ids(count), buf);
    }

    /// Encodes GET_RANGES of `count` (version 2) and awaits its RANGES.
    pub fn get_ranges<B: BufMut + ?Sized>(&mut self, count: u32, buf: &mut B) {
        self.encode(Awaits::Ranges(count), buf);
    }

    /// Encodes GET_VALUES of `count` values of sequence `name` (version 3) and awaits its
    /// VALUES.
    pub fn get_values<B: BufMut + ?Sized>(&mut self, name: SeqName, count: u32, buf: &mut B) {
        self.encode(Awaits::Values(count, name), buf);
    }

    /// Encodes GET_VALUES_HERE of `count` values of sequence `name` (node to node: the
    /// receiving node answers from its own reservations) and awaits its VALUES.
    pub fn get_values_here<B: BufMut + ?Sized>(&mut self, name: SeqName, count: u32, buf: &mut B) {
        self.encode(Awaits::ValuesHere(count, name), buf);
    }

    /// Encodes GET_UUIDS of `count` (version 4) and awaits its UUIDS.
    pub fn get_uuids<B: BufMut + ?Sized>(&mut self, count: u32, buf: &mut B) {
        self.encode(Awaits::Uuids(count), buf);
    }

    /// Encodes GET_IDS_WITH with `options` (version 5) and awaits its IDS (MASKED_IDS when
    /// masked).
    pub fn get_ids_with<B: BufMut + ?Sized>(&mut self, options: IdsOptions, buf: &mut B) {
        self.encode(Awaits::IdsWith(options), buf);
    }

    /// Encodes PING with `token` and awaits its PONG.
    pub fn ping<B: BufMut + ?Sized>(&mut self, token: u64, buf: &mut B) {
        self.encode(Awaits::Pong(token), buf);
    }

    /// Encodes the request that awaits `awaits`.
    pub fn encode<B: BufMut + ?Sized>(&mut self, awaits: Awaits, buf: &mut B) {
        let request = match awaits {
            Awaits::Ids(count) => Request::GetIds { count },
            Awaits::Ranges(count) => Request::GetRanges { count },
            Awaits::Pong(token) => Request::Ping { token },
            Awaits::Values(count, name) => Request::GetValues { count, name },
            Awaits::Uuids(count) => Request::GetUuids { count },
            Awaits::IdsWith(o) => Request::GetIdsWith(o),
            Awaits::ValuesHere(count, name) => Request::GetValuesHere { count, name },
        };
        encode_request(&request, buf);
        self.sent(awaits);
    }

    /// Records a request the caller encoded itself (a load generator writes the same
    /// pre-encoded frame again and again). Call it before the bytes can reach the server.
    pub fn sent(&mut self, awaits: Awaits) {
        self.outstanding.push_back(awaits);
    }

    /// Decodes one answer from the start of `buf`: `Ok(None)` while it is incomplete, else the
    /// answer to the oldest outstanding request and the bytes it used.
    pub fn decode<'a>(
        &mut self,
        buf: &'a [u8],
    ) -> Result<Option<(Answer<'a>, usize)>, ClientError> {
        let Some((response, used)) = decode_response(buf, self.max_frame)? else {
            return Ok(None);
        };
        let unexpected = |expected: String| ClientError::Unexpected {
            got: describe(&response),
            expected,
        };
        if self.closed {
            return Err(unexpected("after a closing ERROR".into()));
        }
        let Some(&awaits) = self.outstanding.front() else {
            return Err(unexpected("with no request outstanding".into()));
        };
        let answer = match (awaits, response) {
            (Awaits::Ids(n), ResponseRef::Ids(ids))
                if ids.len() == n as usize || !self.exact_counts =>
            {
                Answer::Ids(ids)
            }
            (Awaits::Ranges(n), ResponseRef::Ranges(runs))
                if runs.total() == n || !self.exact_counts =>
            {
                Answer::Ranges(runs)
            }
            (Awaits::Pong(t), ResponseRef::Pong(got)) if got == t => Answer::Pong(got),
            (Awaits::Values(n, _) | Awaits::ValuesHere(n, _), ResponseRef::Values(values))
                if values.len() == n as usize || !self.exact_counts =>
            {
                Answer::Values(values)
            }
            (Awaits::Uuids(n), ResponseRef::Uuids(uuids))
                if uuids.len() == n as usize || !self.exact_counts =>
            {
                Answer::Uuids(uuids)
            }
            (Awaits::IdsWith(o), ResponseRef::Ids(ids))
                if !o.masked && (ids.len() == o.count as usize || !self.exact_counts) =>
            {
                Answer::Ids(ids)
            }
            (Awaits::IdsWith(o), ResponseRef::MaskedIds(m))
                if o.masked && (m.ids().len() == o.count as usize || !self.exact_counts) =>
            {
                Answer::MaskedIds(m)
            }
            (_, ResponseRef::Error { status, message }) => {
                let refusal = Refusal::new(status, message);
                self.closed = refusal.after.closes();
                Answer::Refused(refusal)
            }
            (awaits, _) => return Err(unexpected(awaits.describe())),
        };
        self.outstanding.pop_front();
        Ok(Some((answer, used)))
    }
}

/// The frame's name, e.g. `"IDS"`.
pub const fn response_name(response: &ResponseRef<'_>) -> &'static str {
    match response {
        ResponseRef::HelloOk(_) => "HELLO_OK",
        ResponseRef::Ids(_) => "IDS",
        ResponseRef::Pong(_) => "PONG",
        ResponseRef::Error { .. } => "ERROR",
        ResponseRef::Ranges(_) => "RANGES",
        ResponseRef::Values(_) => "VALUES",
        ResponseRef::Uuids(_) => "UUIDS",
        ResponseRef::MaskedIds(_) => "MASKED_IDS",
    }
}

fn describe(response: &ResponseRef<'_>) -> String {
    match response {
        ResponseRef::Ids(ids) => format!("IDS of {}", ids.len()),
        ResponseRef::Ranges(runs) => format!("RANGES of {}", runs.total()),
        ResponseRef::Values(v) => format!("VALUES of {}", v.len()),
        ResponseRef::Uuids(u) => format!("UUIDS of {}", u.len()),
        ResponseRef::MaskedIds(m) => format!("MASKED_IDS of {}", m.ids().len()),
        ResponseRef::Pong(t) => format!("PONG {t}"),
        ResponseRef::Error { status, .. } => format!("ERROR {status}"),
        ResponseRef::HelloOk(_) => "HELLO_OK".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode_error, encode_hello_ok, encode_ids, encode_pong, encode_ranges};
    use idgen_id::WorkerRange;

    fn announced(version: u16) -> ServerHello {
        ServerHello {
            version,
            epoch_ms: 1_704_067_200_000,
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            region_bits: 0,
            max_batch: 100,
            max_request_frame: 64,
            workers: WorkerRange::new(512, 512),
            shard: 1,
        }
    }

    fn open(version: u16) -> ClientConn {
        let mut wire = Vec::new();
        encode_hello_ok(&announced(version), &mut wire).unwrap();
        let (conn, used) = Handshake::new().receive(&wire).unwrap().unwrap();
        assert_eq!(used, wire.len());
        conn
    }

    #[test]
    fn hello_bytes_are_the_spec_vector() {
        // PROTOCOL.md / vectors.json "hello_v1": length 9, HELLO, "IDGN", 1..=1.
        assert_eq!(
            Handshake::offering(1, 1).hello(),
            [0, 0, 0, 9, 0x01, b'I', b'D', b'G', b'N', 0, 1, 0, 1]
        );
        assert_eq!(
            Handshake::new().hello()[9..],
            [
                0,
                MIN_SUPPORTED_VERSION as u8,
                0,
                MAX_SUPPORTED_VERSION as u8
            ]
        );
        assert_eq!(Handshake::default(), Handshake::new());
    }

    #[test]
    fn handshake_reads_hello_ok_and_leaves_what_follows() {
        let mut wire = Vec::new();
        encode_hello_ok(&announced(2), &mut wire).unwrap();
        let hello_len = wire.len();
        encode_pong(9, &mut wire);
        for cut in 0..hello_len {
            assert_eq!(
                Handshake::new().receive(&wire[..cut]),
                Ok(None),
                "cut {cut}"
            );
        }
        let (conn, used) = Handshake::new().receive(&wire).unwrap().unwrap();
        assert_eq!(used, hello_len);
        assert_eq!(conn.hello(), &announced(2));
        assert_eq!(conn.layout(), announced(2).layout().unwrap());
        assert!(conn.ranges());
        assert_eq!(conn.max_frame(), max_response_frame(100));
        assert_eq!((conn.outstanding(), conn.is_closed()), (0, false));
    }

    #[test]
    fn handshake_failures() {
        let mut wire = Vec::new();
        encode_error(Status::OVERLOADED, "full", &mut wire);
        assert_eq!(
            Handshake::new().receive(&wire),
            Err(HandshakeError::Refused {
                status: Status::OVERLOADED,
                message: "full".into(),
                after: After::CloseRetryElsewhere,
            })
        );
        let mut wire = Vec::new();
        encode_ids(&[1], &mut wire);
        assert_eq!(
            Handshake::new().receive(&wire),
            Err(HandshakeError::Unexpected("IDS"))
        );
        // Version 2 to a client offering only version 1.
        let mut wire = Vec::new();
        encode_hello_ok(&announced(2), &mut wire).unwrap();
        assert_eq!(
            Handshake::offering(1, 1).receive(&wire),
            Err(HandshakeError::Version {
                picked: 2,
                min: 1,
                max: 1
            })
        );
        // An IDS frame longer than any HELLO_OK or ERROR is refused from its length alone.
        let e = Handshake::new().receive(&[0, 0, 1, 3, 0x82]).unwrap_err();
        assert!(matches!(
            e,
            HandshakeError::Frame(FrameError::TooLarge { .. })
        ));
        let msg = HandshakeError::Unexpected("PONG").to_string();
        assert_eq!(msg, "PONG in answer to HELLO");
    }

    #[test]
    fn answers_are_matched_in_order() {
        let mut conn = open(4);
        assert!(conn.values() && conn.uuids());
        let orders: SeqName = "orders".parse().unwrap();
        let mut out = Vec::new();
        conn.get_ids(2, &mut out);
        conn.get_ranges(5, &mut out);
        conn.ping(77, &mut out);
        conn.get_values(orders, 3, &mut out);
        conn.get_uuids(2, &mut out);
        assert_eq!(conn.outstanding(), 5);
        let mut expected = Vec::new();
        encode_request(&Request::GetIds { count: 2 }, &mut expected);
        encode_request(&Request::GetRanges { count: 5 }, &mut expected);
        encode_request(&Request::Ping { token: 77 }, &mut expected);
        encode_request(
            &Request::GetValues {
                count: 3,
                name: orders,
            },
            &mut expected,
        );
        encode_request(&Request::GetUuids { count: 2 }, &mut expected);
        assert_eq!(out, expected);

        let mut wire = Vec::new();
        encode_ids(&[10, 11], &mut wire);
        encode_ranges(&[(100, 3), (200, 2)], &mut wire);
        encode_pong(77, &mut wire);
        crate::encode_values(crate::SeqMode::Dense, &[5, 6, 7], &mut wire);
        let layout = Layout::default();
        let uuids = [
            layout.uuid_v7(1u64, 9).unwrap(),
            layout.uuid_v7(2u64, 3).unwrap(),
        ];
        crate::encode_uuids(&uuids, &mut wire);
        let mut at = 0;
        let mut got = Vec::new();
        while let Some((answer, used)) = conn.decode(&wire[at..]).unwrap() {
            got.push(match answer {
                Answer::Ids(ids) => format!("ids {:?}", ids.to_vec()),
                Answer::Ranges(r) => format!("ranges {}", r.total()),
                Answer::Pong(t) => format!("pong {t}"),
                Answer::Values(v) => format!("values {:?}", v.to_vec()),
                Answer::Uuids(u) => format!("uuids {}", u.len()),
                Answer::MaskedIds(m) => format!("masked {} {:?}", m.key_id(), m.ids().to_vec()),
                Answer::Refused(r) => format!("refused {}", r.status),
            });
            at += used;
        }
        assert_eq!(
            got,
            [
                "ids [10, 11]",
                "ranges 5",
                "pong 77",
                "values [5, 6, 7]",
                "uuids 2"
            ]
        );
        assert_eq!((at, conn.outstanding()), (wire.len(), 0));
    }

    #[test]
    fn answers_that_do_not_fit_break_the_conversation() {
        let frame = |f: fn(&mut Vec<u8>)| {
            let mut b = Vec::new();
            f(&mut b);
            b
        };
        let orders: SeqName = "orders".parse().unwrap();
        let cases: [(Awaits, Vec<u8>, &str); 7] = [
            (
                Awaits::Values(2, orders),
                frame(|b| crate::encode_values(crate::SeqMode::Dense, &[1, 2, 3], b)),
                "VALUES of 3 in answer to GET_VALUES of 2 of orders",
            ),
            (
                Awaits::Values(2, orders),
                frame(|b| encode_ids(&[1, 2], b)),
                "IDS of 2 in answer to GET_VALUES of 2 of orders",
            ),
            (
                Awaits::Ids(2),
                frame(|b| encode_ids(&[1, 2, 3], b)),
                "IDS of 3 in answer to GET_IDS of 2",
            ),
            (
                Awaits::Ids(2),
                frame(|b| encode_pong(1, b)),
                "PONG 1 in answer to GET_IDS of 2",
            ),
            (
                Awaits::Ranges(4),
                frame(|b| encode_ranges(&[(1, 3)], b)),
                "RANGES of 3 in answer to GET_RANGES of 4",
            ),
            (
                Awaits::Pong(5),
                frame(|b| encode_pong(6, b)),
                "PONG 6 in answer to PING 5",
            ),
            (
                Awaits::Pong(5),
                frame(|b| encode_hello_ok(&announced(1), b).unwrap()),
                "HELLO_OK in answer to PING 5",
            ),
        ];
        for (awaits, wire, message) in cases {
            let mut conn = open(2);
            conn.sent(awaits);
            let e = conn.decode(&wire).unwrap_err();
            assert_eq!(e.to_string(), message);
            assert_eq!(conn.outstanding(), 1, "{message}: nothing is consumed");
        }
        // A measuring tool takes any count, never another kind of answer.
        let mut conn = open(2);
        conn.accept_any_count();
        let mut out = Vec::new();
        conn.get_ids(2, &mut out);
        conn.get_ranges(4, &mut out);
        conn.ping(5, &mut out);
        let three = frame(|b| encode_ids(&[1, 2, 3], b));
        let (a, _) = conn.decode(&three).unwrap().unwrap();
        assert!(matches!(a, Answer::Ids(ids) if ids.len() == 3));
        let run = frame(|b| encode_ranges(&[(1, 3)], b));
        let (a, _) = conn.decode(&run).unwrap().unwrap();
        assert!(matches!(a, Answer::Ranges(r) if r.total() == 3));
        let e = conn.decode(&frame(|b| encode_pong(6, b))).unwrap_err();
        assert_eq!(e.to_string(), "PONG 6 in answer to PING 5");

        let mut conn = open(1);
        let e = conn.decode(&frame(|b| encode_pong(1, b))).unwrap_err();
        assert_eq!(e.to_string(), "PONG 1 with no request outstanding");
        let e = conn.decode(&[0, 0, 0, 0]).unwrap_err();
        assert_eq!(e, ClientError::Frame(FrameError::EmptyFrame));
    }

    #[test]
    fn every_status_has_one_reading() {
        for info in Status::TABLE {
            let after = After::of(info.status);
            assert_eq!(after.closes(), info.closes_connection, "{}", info.name);
            assert_eq!(
                after.retry_elsewhere(),
                info.retry_elsewhere,
                "{}",
                info.name
            );
        }
        assert_eq!(After::of(Status::UNAVAILABLE_LEASE), After::RetryElsewhere);
        assert_eq!(After::of(Status::UNAVAILABLE_CLOCK), After::RetryElsewhere);
        assert_eq!(After::of(Status::RANGE_CHANGED), After::CloseRetryElsewhere);
        assert_eq!(After::of(Status::SHUTTING_DOWN), After::CloseRetryElsewhere);
        assert_eq!(After::of(Status::EXHAUSTED), After::Fail);
        assert_eq!(After::of(Status::BATCH_TOO_LARGE), After::Fail);
        assert_eq!(After::of(Status::BAD_FRAME), After::Close);
        assert_eq!(After::of(Status::INTERNAL), After::Close);
        // Unknown codes follow their class.
        assert_eq!(After::of(Status(299)), After::Fail);
        assert_eq!(After::of(Status(399)), After::RetryElsewhere);
        assert_eq!(After::of(Status(499)), After::Close);
    }

    #[test]
    fn an_error_answers_any_request_and_a_closing_one_ends_the_conversation() {
        let mut conn = open(1);
        let mut out = Vec::new();
        conn.ping(1, &mut out);
        conn.get_ids(0, &mut out);
        conn.get_ids(3, &mut out);
        conn.get_ids(3, &mut out);
        let mut wire = Vec::new();
        encode_error(Status::UNAVAILABLE_CLOCK, "behind", &mut wire);
        encode_error(Status::INVALID_COUNT, "count 0", &mut wire);
        encode_error(Status::RANGE_CHANGED, "reconnect", &mut wire);
        encode_ids(&[1, 2, 3], &mut wire);
        let mut at = 0;
        let mut afters = Vec::new();
        for _ in 0..3 {
            let (answer, used) = conn.decode(&wire[at..]).unwrap().unwrap();
            let Answer::Refused(r) = answer else {
                panic!("{answer:?}")
            };
            afters.push((r.status, r.after));
            at += used;
        }
        assert_eq!(
            afters,
            [
                (Status::UNAVAILABLE_CLOCK, After::RetryElsewhere),
                (Status::INVALID_COUNT, After::Fail),
                (Status::RANGE_CHANGED, After::CloseRetryElsewhere),
            ]
        );
        assert!(conn.is_closed());
        assert_eq!(conn.outstanding(), 1);
        let e = conn.decode(&wire[at..]).unwrap_err();
        assert_eq!(e.to_string(), "IDS of 3 after a closing ERROR");
    }

    #[test]
    fn hello_awaits_nothing() {
        assert_eq!(
            Awaits::of(&Request::Hello {
                min_version: 1,
                max_version: 2
            }),
            None
        );
        assert_eq!(
            Awaits::of(&Request::GetIds { count: 4 }),
            Some(Awaits::Ids(4))
        );
    }
}

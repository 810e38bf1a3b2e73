//! What a request of the ID protocol does, without the socket. A connection's [`Responder`]
//! decodes every complete request its I/O loop (`super::conn`) has read, draws the IDs of
//! GET_IDS and GET_RANGES from the shard's issuer, encodes each answer into the output the loop
//! writes, and counts the requests: per operation, per error status, batch sizes, and the
//! durations once the loop says the answers are written. It never touches the socket, a timer
//! or the shutdown signal: when a request must wait for the clock or for its turn in the
//! shard's line, it says until when ([`Next::Wait`]) and the loop waits.
//!
//! One read's requests are answered on one clock reading (the issuer's clock is held for the
//! call), and their counts are tallied in plain fields and added to the shard's counters once
//! per call (one store per counter, not per request).

use std::mem::MaybeUninit;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use idgen_core::sequence::holder::HoldError;
use idgen_core::sequence::{Mode, SequenceError};
use idgen_protocol::{
    decode_request, decode_request_for, encode_error, encode_hello_ok, encode_ids_header,
    encode_masked_ids_header, encode_pong, encode_ranges, encode_uuids_header,
    encode_values_header, Decoded, IdsOptions, Limits, Request, SeqMode, SeqName, ServerConnState,
    ServerHello, Status, DEFAULT_MAX_REQUEST_FRAME, MAX_VALUES_PER_CALL,
};
use idgen_protocol::{SINGLE_ID_HEADER, SINGLE_ID_REQUEST};

use super::conn::ConnCtx;
use super::idempotency;
use super::issuer::{refusal, ClockHold, IssueError};
use super::telemetry::{bump, Op, ShardStats, BATCH_BUCKETS};
use idgen_core::clock::{Clock, SystemClock};
use idgen_core::generator::{Fill, Progress};
use idgen_core::histogram::bucket_of;
use idgen_core::member::Announced;
use idgen_id::mask::Keyring;
use idgen_id::{Layout, UuidError};
use rand::RngExt;

/// A one-ID answer: the protocol's [`SINGLE_ID_HEADER`], then the ID's 8 bytes.
const SINGLE_ID_ANSWER_LEN: usize = SINGLE_ID_HEADER.len() + 8;
/// The most one-ID requests answered by one draw.
const MAX_SINGLE_ID_RUN: usize = 4096;

/// An `after` further ahead of this node's clock than this is refused outright
/// (INVALID_OPTION) rather than with a retry status: no clock the cluster trusts issued it.
const AFTER_FUTURE_LIMIT_MS: u64 = 60_000;

/// The most GET_VALUES frames of one sequence answered by one call to the holder.
const MAX_VALUES_RUN: usize = 4096;

/// Stop decoding requests once this much output is waiting to be written: what bounds the
/// memory of a client that does not read (the loop reads nothing more until it is written).
pub(super) const OUTPUT_HIGH_WATER: usize = 256 * 1024;

/// What the connection does next, once the buffered requests were answered.
#[derive(PartialEq, Eq)]
pub(super) enum Next {
    /// Read more.
    Read,
    /// Requests are still buffered (output high-water mark): write, then answer them.
    More,
    /// A closing error was answered: write it, then close.
    Close,
    /// A request waits for the clock: resume it at this monotonic time, then go on.
    Wait(u64),
    /// GET_VALUES requests wait for their sequence's values: write what is answered, ask the
    /// holder for [`Responder::values_call`]'s values, answer them with
    /// [`Responder::values_answered`], then go on.
    Values,
}

/// Consecutive GET_VALUES requests of one sequence, read together: handed to the node's
/// holder at once, which answers each on its own and in order (pipelined calls of a strict
/// sequence share one commit).
pub(super) struct ValuesCall {
    pub name: SeqName,
    /// Each request's count, in order.
    pub counts: Vec<u64>,
    /// Their sum (at most [`MAX_VALUES_PER_CALL`]).
    total: u64,
    /// GET_VALUES_HERE (another node forwarded them): answered from this node's own
    /// reservations, never forwarded again.
    pub here: bool,
}

/// What a waiting request answers with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// GET_IDS: one IDS frame of `count` IDs.
    Ids,
    /// GET_RANGES: one RANGES frame.
    Ranges,
    /// GET_UUIDS: one UUIDS frame of `count` UUIDs, one per ID.
    Uuids,
    /// A run of `count` one-ID GET_IDS requests, still in the input: one IDS frame each.
    SingleIds,
    /// GET_IDS_WITH: one IDS (or MASKED_IDS) frame of `count` IDs, under [`Pending::with`].
    IdsWith,
}

/// What a GET_IDS_WITH carries beyond its count, while it is answered.
struct With {
    /// The ID every answered ID must be above, and its Unix time (ms).
    after: Option<(u64, u64)>,
    /// When (the issuer's monotonic ns) the wait for `after` ends: set at the first wait.
    deadline: u64,
    /// The keyring and width that mask the answer (the frame's header already names the key).
    mask: Option<(Arc<Keyring>, u32)>,
    /// The right to keep the answer under its idempotency key.
    ticket: Option<idempotency::Ticket>,
}

/// A request for IDs that is waiting for the clock or its turn.
struct Pending {
    kind: Kind,
    count: u32,
    /// Where this request's answer starts in the output buffer.
    mark: usize,
    fill: Fill,
    /// GET_IDS_WITH's options (`None` for the other kinds).
    with: Option<Box<With>>,
}

/// What [`Responder::single_id_run`] did.
enum Run {
    /// Nothing: the general path takes the input, one request at a time.
    No,
    /// Answered a run of requests (with IDs or with the draw's error).
    Answered,
    /// The run waits (pending) for the clock or its turn: resume it at this monotonic time.
    Wait(u64),
}

/// The ID protocol's side of one connection: its handshake state, the request in progress and
/// the counts not yet added to the shard's.
pub(super) struct Responder {
    ctx: Rc<ConnCtx>,
    limits: Limits,
    state: ServerConnState,
    /// Scratch for the runs of a GET_RANGES answer (reused: no allocation per request).
    runs: Vec<(u64, u32)>,
    /// The worker range announced in HELLO_OK: IDs from any other range (the node's lease
    /// changed since) are not handed out on this connection (PROTOCOL.md §4.1).
    announced: Announced,
    /// The layout announced in HELLO_OK: that of the announced range's layout generation.
    announced_layout: Layout,
    /// A closing status was answered: close once it is written.
    closing: bool,
    /// The request in progress, waiting for the clock (nothing after it is decoded meanwhile).
    pending: Option<Pending>,
    /// GET_VALUES requests waiting for their values (nothing after them is decoded meanwhile).
    values: Option<ValuesCall>,
    /// What was answered, not yet added to the shard's counters.
    tally: Tally,
}

impl Drop for Responder {
    /// A connection that ends while a request of it waits (the client closed, the node stops)
    /// gives up that request's place in the shard's line, so the requests behind it move up.
    fn drop(&mut self) {
        if let Some(pending) = self.pending.as_mut() {
            // Never borrowed across an await, so free whenever a connection ends.
            if let Ok(mut gen) = self.ctx.gen.try_borrow_mut() {
                gen.abandon(&mut pending.fill);
            }
        }
    }
}

/// The accounting of one connection's requests, in plain fields until it is added to the
/// shard's counters (one store per counter, not per request): the requests and batch sizes of
/// one [`Responder::answer`] call, added at its end, and the requests answered since the last
/// write, by kind, whose durations are recorded once they are written.
#[derive(Default)]
struct Tally {
    requests: u64,
    /// `(requests, IDs)` by bucket of [`BATCH_BUCKETS`] (the last: above every bound).
    batches: [(u64, u64); BATCH_BUCKETS.len() + 1],
    /// Requests answered in the output since the last write.
    unwritten: u64,
    /// The same by kind (`Op::ALL`'s protocol kinds; unknown opcodes are in `unwritten` only).
    unwritten_by_op: [u64; Op::PROTOCOL],
}

impl Tally {
    /// `n` requests answered, of kind `op` (`None`: an opcode the protocol does not know).
    #[inline]
    fn answered(&mut self, op: Option<Op>, n: u64) {
        self.requests += n;
        self.unwritten += n;
        if let Some(op) = op {
            self.unwritten_by_op[op as usize] += n;
        }
    }

    /// A request answered with `count` IDs.
    #[inline]
    fn served(&mut self, count: u64) {
        // One ID, the commonest size, is bucket 0 without the search.
        let bucket = if count == 1 {
            0
        } else {
            bucket_of(&BATCH_BUCKETS, count)
        };
        let b = &mut self.batches[bucket];
        b.0 += 1;
        b.1 += count;
    }

    /// `n` requests answered with one ID each.
    #[inline]
    fn single_ids(&mut self, n: u64) {
        let b = &mut self.batches[0];
        b.0 += n;
        b.1 += n;
    }

    /// Adds the requests and batch sizes to the shard's counters and starts them again.
    fn flush(&mut self, stats: &ShardStats) {
        if self.requests != 0 {
            bump(&stats.requests, self.requests);
        }
        for (bucket, (n, ids)) in self.batches.iter().enumerate() {
            if *n != 0 {
                stats.served_n(bucket, *n, *ids);
            }
        }
        self.requests = 0;
        self.batches = Default::default();
    }

    /// Records the requests answered since the last write, now written, as having taken `us`
    /// each, and starts them again.
    fn written(&mut self, stats: &ShardStats, us: u64) {
        stats.protocol_durations(us, &self.unwritten_by_op);
        self.unwritten = 0;
        self.unwritten_by_op = [0; Op::PROTOCOL];
    }
}

impl Responder {
    pub(super) fn new(ctx: Rc<ConnCtx>) -> Self {
        let layout = ctx.layout;
        Responder {
            limits: Limits {
                max_request_frame: DEFAULT_MAX_REQUEST_FRAME,
                max_batch: ctx.listen.max_batch,
            },
            ctx,
            state: ServerConnState::new(),
            runs: Vec::new(),
            announced: Announced::default(),
            announced_layout: layout,
            closing: false,
            pending: None,
            values: None,
            tally: Tally::default(),
        }
    }

    /// Whether the client's HELLO was answered (until then the handshake timeout applies).
    pub(super) fn greeted(&self) -> bool {
        self.state.version().is_some()
    }

    /// Requests answered in the output since the last write.
    pub(super) fn answered(&self) -> u64 {
        self.tally.unwritten
    }

    /// Records the requests answered since the last write, now written, as having taken `us`
    /// each (from the read that brought them in): one measurement for all of them.
    pub(super) fn written(&mut self, us: u64) {
        self.tally.written(&self.ctx.stats, us);
    }

    /// On shutdown, after everything read before was answered: a request that has arrived
    /// since is answered SHUTTING_DOWN. Whether one was (the output then holds its answer).
    pub(super) fn answer_draining(&self, input: &[u8], out: &mut BytesMut) -> bool {
        if !matches!(decode_request(input, &self.limits), Ok(Some(_))) {
            return false;
        }
        encode_error(
            Status::SHUTTING_DOWN,
            "server shutting down; resend unanswered requests to another node",
            out,
        );
        self.ctx.stats.error(Status::SHUTTING_DOWN);
        true
    }

    /// Decodes and answers every complete request in `input` into `out`, on one clock reading:
    /// they arrived together, and one reading serves them all (a wait for the next millisecond
    /// ends this call, and the next call reads again).
    pub(super) fn answer(&mut self, input: &mut BytesMut, out: &mut BytesMut) -> Next {
        let next = {
            let _held = ClockHold::new(Rc::clone(&self.ctx.gen));
            self.answer_held(input, out)
        };
        self.tally.flush(&self.ctx.stats);
        next
    }

    fn answer_held(&mut self, input: &mut BytesMut, out: &mut BytesMut) -> Next {
        // An Rc clone (not an atomic Arc clone) to keep the counters at hand.
        let ctx = Rc::clone(&self.ctx);
        let stats = &ctx.stats;
        loop {
            if let Some(pending) = self.pending.take() {
                if let Some(at) = self.resume(pending, input, out) {
                    return Next::Wait(at);
                }
                if self.closing {
                    return Next::Close;
                }
                continue;
            }
            if out.len() >= OUTPUT_HIGH_WATER {
                return Next::More;
            }
            match self.single_id_run(input, out) {
                Run::Answered => continue,
                Run::Wait(at) => return Next::Wait(at),
                Run::No => {}
            }
            let version = self.state.version().unwrap_or(1);
            let (decoded, used) = match decode_request_for(input, &self.limits, version) {
                Ok(None) => return Next::Read,
                Ok(Some(frame)) => frame,
                Err(e) => {
                    encode_error(e.status(), &e.to_string(), out);
                    stats.error(e.status());
                    // A request, timed under no kind: the frame did not decode.
                    self.tally.answered(None, 1);
                    return Next::Close;
                }
            };
            let op = match decoded {
                Decoded::Request(Request::GetIds { .. }) => Some(Op::GetIds),
                Decoded::Request(Request::GetRanges { .. }) => Some(Op::GetRanges),
                Decoded::Request(Request::Hello { .. }) => Some(Op::Hello),
                Decoded::Request(Request::Ping { .. }) => Some(Op::Ping),
                Decoded::Request(Request::GetValues { .. } | Request::GetValuesHere { .. }) => {
                    Some(Op::GetValues)
                }
                Decoded::Request(Request::GetUuids { .. }) => Some(Op::GetUuids),
                // Timed and counted as GET_IDS: the same IDs, with options.
                Decoded::Request(Request::GetIdsWith(_)) => Some(Op::GetIds),
                // A refused frame (a count out of bounds) counts under its opcode.
                Decoded::Reject { .. } => input.get(4).copied().and_then(Op::of_opcode),
            };
            input.advance(used);
            self.tally.answered(op, 1);
            if let Err(e) = self.state.check(&decoded) {
                encode_error(e.status(), &e.to_string(), out);
                stats.error(e.status());
                return Next::Close;
            }
            match decoded {
                Decoded::Request(Request::Hello { .. }) => self.hello(out),
                Decoded::Request(Request::GetIds { count }) => {
                    let mark = out.len();
                    encode_ids_header(count, out);
                    out.reserve(count as usize * 8);
                    // Served at once (not through `self.pending`, which only a wait needs).
                    let pending = Pending {
                        kind: Kind::Ids,
                        count,
                        mark,
                        fill: Fill::new(u64::from(count)),
                        with: None,
                    };
                    if let Some(at) = self.resume(pending, input, out) {
                        return Next::Wait(at);
                    }
                }
                Decoded::Request(Request::GetRanges { count }) => {
                    self.runs.clear();
                    let pending = Pending {
                        kind: Kind::Ranges,
                        count,
                        mark: out.len(),
                        fill: Fill::new(u64::from(count)),
                        with: None,
                    };
                    if let Some(at) = self.resume(pending, input, out) {
                        return Next::Wait(at);
                    }
                }
                Decoded::Request(Request::GetUuids { count }) => {
                    let mark = out.len();
                    encode_uuids_header(count, out);
                    out.reserve(count as usize * 16);
                    let pending = Pending {
                        kind: Kind::Uuids,
                        count,
                        mark,
                        fill: Fill::new(u64::from(count)),
                        with: None,
                    };
                    if let Some(at) = self.resume(pending, input, out) {
                        return Next::Wait(at);
                    }
                }
                Decoded::Request(Request::GetIdsWith(options)) => {
                    if let Some(at) = self.ids_with(options, out) {
                        return Next::Wait(at);
                    }
                }
                Decoded::Request(Request::Ping { token }) => encode_pong(token, out),
                Decoded::Request(Request::GetValues { count, name }) => {
                    self.gather_values(name, count, false, input, version);
                    return Next::Values;
                }
                Decoded::Request(Request::GetValuesHere { count, name }) => {
                    self.gather_values(name, count, true, input, version);
                    return Next::Values;
                }
                Decoded::Reject { status, message } => {
                    encode_error(status, message, out);
                    stats.error(status);
                }
            }
            if self.closing {
                // Nothing is answered after a closing status (PROTOCOL.md §8).
                return Next::Close;
            }
        }
    }

    /// Starts a [`ValuesCall`] with a GET_VALUES just decoded, and adds the GET_VALUES frames
    /// of the same sequence that follow it in the input (until another request, another
    /// sequence, [`MAX_VALUES_RUN`] requests or [`MAX_VALUES_PER_CALL`] values).
    fn gather_values(
        &mut self,
        name: SeqName,
        count: u32,
        here: bool,
        input: &mut BytesMut,
        version: u16,
    ) {
        let mut call = ValuesCall {
            name,
            counts: vec![u64::from(count)],
            total: u64::from(count),
            here,
        };
        while call.counts.len() < MAX_VALUES_RUN {
            let (count, next, used) = match decode_request_for(input, &self.limits, version) {
                Ok(Some((Decoded::Request(Request::GetValues { count, name }), used))) if !here => {
                    (count, name, used)
                }
                Ok(Some((Decoded::Request(Request::GetValuesHere { count, name }), used)))
                    if here =>
                {
                    (count, name, used)
                }
                _ => break,
            };
            if next != name || call.total + u64::from(count) > u64::from(MAX_VALUES_PER_CALL) {
                break;
            }
            input.advance(used);
            self.tally.answered(Some(Op::GetValues), 1);
            call.counts.push(u64::from(count));
            call.total += u64::from(count);
        }
        self.values = Some(call);
    }

    /// The GET_VALUES requests waiting for values ([`Next::Values`]).
    pub(super) fn values_call(&self) -> Option<&ValuesCall> {
        self.values.as_ref()
    }

    /// Answers the waiting GET_VALUES requests with what the holder said for each, in order:
    /// a VALUES frame, or the ERROR of its refusal.
    pub(super) fn values_answered(
        &mut self,
        got: Vec<Result<(Mode, Vec<u64>), HoldError>>,
        out: &mut BytesMut,
    ) {
        let Some(call) = self.values.take() else {
            return;
        };
        debug_assert_eq!(got.len(), call.counts.len());
        out.reserve(call.counts.len() * 10 + call.total as usize * 8);
        for (&count, answer) in call.counts.iter().zip(got) {
            match answer {
                // `count <= MAX_VALUES_PER_CALL`: fits a u32.
                Ok((mode, values)) if values.len() as u64 == count => {
                    let mode = match mode {
                        Mode::Dense => SeqMode::Dense,
                        Mode::Strict => SeqMode::Strict,
                    };
                    encode_values_header(mode, count as u32, out);
                    for v in &values {
                        out.extend_from_slice(&v.to_be_bytes());
                    }
                }
                Ok((_, values)) => {
                    // Never: the holder answers exactly what was asked. Refused, not sent.
                    let message = format!(
                        "the node's sequence holder answered {} values for {count}",
                        values.len()
                    );
                    encode_error(Status::INTERNAL, &message, out);
                    self.ctx.stats.error(Status::INTERNAL);
                    self.closing = true;
                    return;
                }
                Err(e) => {
                    let status = values_refusal(&e);
                    encode_error(status, &e.to_string(), out);
                    self.ctx.stats.error(status);
                }
            }
        }
    }

    /// A run of `GET_IDS` requests for one ID each, the commonest pipelined traffic, answered
    /// with one draw from the generator: the requests are counted in the input (a byte compare
    /// each), their IDs come as one batch (one pass through the generator's fences instead of
    /// one per request), and each request gets its own IDS frame, in order. A run that must
    /// wait before its first ID (the millisecond used up, others before it in the shard's
    /// line) waits as one request, taking one turn ([`Run::Wait`]); a draw that fails answers
    /// every request of the run with its error, as it would have answered each of them (but a
    /// closing status only the first). Anything else (a handshake not yet done, fewer than two
    /// such requests) leaves the input as it was for the general path, one request at a time.
    /// IDs drawn by a draw that failed are burned (never issued), as the generator does for
    /// any request that fails part-way.
    fn single_id_run(&mut self, input: &mut BytesMut, out: &mut BytesMut) -> Run {
        if self.state.version().is_none() || self.closing {
            return Run::No;
        }
        let room = OUTPUT_HIGH_WATER.saturating_sub(out.len()) / SINGLE_ID_ANSWER_LEN + 1;
        let n = input
            .chunks_exact(SINGLE_ID_REQUEST.len())
            .take(room.min(MAX_SINGLE_ID_RUN))
            .take_while(|frame| *frame == SINGLE_ID_REQUEST)
            .count();
        if n < 2 {
            return Run::No;
        }
        out.reserve(n * SINGLE_ID_ANSWER_LEN);
        let run = Pending {
            kind: Kind::SingleIds,
            // At most MAX_SINGLE_ID_RUN.
            count: n as u32,
            mark: out.len(),
            fill: Fill::new(n as u64),
            with: None,
        };
        match self.resume_single_ids(run, input, out) {
            Some(at) => Run::Wait(at),
            None => Run::Answered,
        }
    }

    /// Draws what the generator can now for a run of one-ID requests (see
    /// [`single_id_run`](Self::single_id_run)) and answers that many of them. `Some(at)`:
    /// nothing drawn yet, the run waits (pending) until `at`; `None`: answered (with IDs, or
    /// with the error of a draw that failed).
    fn resume_single_ids(
        &mut self,
        mut p: Pending,
        input: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Option<u64> {
        let result = {
            let mut gen = self.ctx.gen.borrow_mut();
            let result = gen.issue(self.announced, &mut p.fill, |first, count| {
                put_single_id_answers(out, first, count);
            });
            if matches!(result, Ok(Progress::RetryAt(_))) && p.fill.emitted() > 0 {
                // The millisecond ran out part-way: the run ends with what it drew (the rest
                // go on in a later run, which takes its own turn), so it leaves the line.
                gen.abandon(&mut p.fill);
            }
            result
        };
        let served = result.is_ok();
        let answered = match result {
            Ok(Progress::Done) => p.fill.emitted(),
            // The IDs drawn so far answer as many requests (each ID passed the fences).
            Ok(Progress::RetryAt(_)) if p.fill.emitted() > 0 => {
                bump(&self.ctx.stats.generator.issued, p.fill.emitted());
                p.fill.emitted()
            }
            Ok(Progress::RetryAt(at)) => {
                self.pending = Some(p);
                return Some(at);
            }
            Err(e) => {
                out.truncate(p.mark);
                let mut refused = 0;
                while refused < u64::from(p.count) && !self.closing {
                    self.refuse(&e, out);
                    refused += 1;
                }
                refused
            }
        };
        // `answered <= count`: the draw asked for `count` IDs.
        input.advance(answered as usize * SINGLE_ID_REQUEST.len());
        self.tally.answered(Some(Op::GetIds), answered);
        if served {
            self.tally.single_ids(answered);
        }
        None
    }

    fn hello(&mut self, out: &mut BytesMut) {
        let mut gen = self.ctx.gen.borrow_mut();
        let announced = gen.announce();
        self.announced = announced;
        let layout = gen.layout();
        self.announced_layout = layout;
        let hello = ServerHello {
            version: self
                .state
                .version()
                .unwrap_or(idgen_protocol::PROTOCOL_VERSION),
            epoch_ms: layout.epoch_ms(),
            timestamp_bits: layout.timestamp_bits(),
            worker_bits: layout.worker_bits(),
            sequence_bits: layout.sequence_bits(),
            region_bits: layout.region_bits(),
            max_batch: self.limits.max_batch,
            max_request_frame: self.limits.max_request_frame,
            workers: announced.range,
            shard: u16::try_from(gen.index()).unwrap_or(u16::MAX),
        };
        // A range HELLO_OK cannot carry (past the wire's u32s: a layout of more than 32 worker
        // bits) is not announced as another: the connection is refused and closed.
        if let Err(e) = encode_hello_ok(&hello, out) {
            encode_error(Status::INTERNAL, &e.to_string(), out);
            self.ctx.stats.error(Status::INTERNAL);
            self.closing = true;
        }
    }

    /// Issues what the generator can of a GET_IDS or GET_RANGES request now. `Some(at)`: the
    /// rest needs the clock at monotonic time `at` (the request stays pending). GET_IDS writes
    /// its IDs straight into the output; GET_RANGES (version 2) collects the runs, one per
    /// millisecond of work, and answers them once whole.
    fn resume(&mut self, mut p: Pending, input: &mut BytesMut, out: &mut BytesMut) -> Option<u64> {
        if p.kind == Kind::SingleIds {
            return self.resume_single_ids(p, input, out);
        }
        if p.kind == Kind::IdsWith {
            return self.resume_with(p, out);
        }
        let ranges = p.kind == Kind::Ranges;
        // GET_UUIDS: the thread's CSPRNG (ChaCha, reseeded from the OS) for the random bits.
        let mut uuids = (p.kind == Kind::Uuids).then(rand::rng);
        let mut beyond_uuids = None;
        let layout = self.announced_layout;
        let result = {
            let runs = &mut self.runs;
            let mut gen = self.ctx.gen.borrow_mut();
            gen.issue(self.announced, &mut p.fill, |first, n| {
                if ranges {
                    // Each run is part of one request, so its length fits its u32 count.
                    runs.push((first, n as u32));
                } else if let Some(rng) = uuids.as_mut() {
                    if let Err(e) = put_uuids(out, &layout, rng, first, n) {
                        beyond_uuids = Some(e);
                    }
                } else {
                    put_run(out, first, n);
                }
            })
        };
        match result {
            Ok(_) if beyond_uuids.is_some() => {
                // The layout's time is past what a UUIDv7 holds: no node of the cluster can
                // make one (PROTOCOL.md §3.7). Not a partial batch, and no place kept in line.
                self.ctx.gen.borrow_mut().abandon(&mut p.fill);
                out.truncate(p.mark);
                let message = beyond_uuids.map(|e| e.to_string()).unwrap_or_default();
                encode_error(Status::EXHAUSTED, &message, out);
                self.ctx.stats.error(Status::EXHAUSTED);
                None
            }
            Ok(Progress::Done) => {
                if ranges {
                    encode_ranges(&self.runs, out);
                }
                self.tally.served(u64::from(p.count));
                None
            }
            Ok(Progress::RetryAt(at)) => {
                self.pending = Some(p);
                Some(at)
            }
            Err(e) => {
                // Never a partial batch: drop whatever was written for this request.
                out.truncate(p.mark);
                self.refuse(&e, out);
                None
            }
        }
    }

    /// Starts a GET_IDS_WITH (PROTOCOL.md §3.8): the options the node must have enabled, the
    /// kept answer of its idempotency key if there is one, the time of `after`; then the
    /// frame's header and the IDs, as [`resume_with`](Self::resume_with) issues them.
    fn ids_with(&mut self, o: IdsOptions, out: &mut BytesMut) -> Option<u64> {
        let mask = match (o.masked, &self.ctx.mask) {
            (false, _) => None,
            (true, Some(keys)) => Some((
                Arc::clone(keys),
                idgen_id::mask::layout_width(&self.announced_layout),
            )),
            (true, None) => {
                self.reject(
                    Status::INVALID_OPTION,
                    "masking is not configured on this node (mask_keys_file or IDGEN_MASK_KEYS)",
                    out,
                );
                return None;
            }
        };
        let after = match o.after {
            None => None,
            Some(a) => {
                let time = self.ctx.gen.borrow().time_to_pass(a);
                match time {
                    Ok(unix_ms) => Some((a, unix_ms)),
                    Err(e) => {
                        let message = format!("after={a}: not an ID of this cluster: {e}");
                        self.reject(Status::INVALID_OPTION, &message, out);
                        return None;
                    }
                }
            }
        };
        let ticket = match o.key {
            None => None,
            Some(key) => {
                let Some(table) = &self.ctx.idempotency else {
                    self.reject(
                        Status::INVALID_OPTION,
                        "idempotency keys are not enabled on this node (idempotency_window is 0): a retry would get new IDs",
                        out,
                    );
                    return None;
                };
                let request = format!(
                    "protocol GET_IDS_WITH count={} after={:?} masked={}",
                    o.count, o.after, o.masked
                );
                let bytes = o.count as usize * 8 + 16;
                let refusal = match table.begin(key.as_str(), &request, bytes, Instant::now()) {
                    idempotency::Begin::Fresh(t) => Ok(t),
                    idempotency::Begin::Replay(kept) => {
                        out.extend_from_slice(&kept.body);
                        self.tally.served(u64::from(o.count));
                        return None;
                    }
                    idempotency::Begin::InFlight => Err((
                        Status::IDEMPOTENCY_KEY_IN_FLIGHT,
                        "the first request with this idempotency key is still being answered: retry shortly",
                    )),
                    idempotency::Begin::Mismatch => Err((
                        Status::IDEMPOTENCY_KEY_REUSED,
                        "this idempotency key came with another request (count or options): use a new key",
                    )),
                    idempotency::Begin::Full => Err((
                        Status::BUSY,
                        "the node's table of idempotency keys is full (idempotency_max_bytes): retry later",
                    )),
                };
                match refusal {
                    Ok(t) => Some(t),
                    Err((status, message)) => {
                        self.reject(status, message, out);
                        return None;
                    }
                }
            }
        };
        let mark = out.len();
        match &mask {
            Some((keys, _)) => encode_masked_ids_header(keys.current_key_id(), o.count, out),
            None => encode_ids_header(o.count, out),
        }
        out.reserve(o.count as usize * 8);
        let pending = Pending {
            kind: Kind::IdsWith,
            count: o.count,
            mark,
            fill: Fill::new(u64::from(o.count)),
            with: Some(Box::new(With {
                after,
                deadline: 0,
                mask,
                ticket,
            })),
        };
        self.resume_with(pending, out)
    }

    /// Issues what it can of a GET_IDS_WITH now, after waiting (within the cluster's
    /// `max_drift`) for the clock to pass its `after`; `Some(at)`: call again then.
    fn resume_with(&mut self, mut p: Pending, out: &mut BytesMut) -> Option<u64> {
        let mut with = p.with.take()?;
        let header = if with.mask.is_some() { 10 } else { 9 };
        if let Some((after, after_ms)) = with.after.filter(|_| p.fill.emitted() == 0) {
            let now_ms = SystemClock::new().wall_ms();
            let mono = self.ctx.gen.borrow().mono_ns();
            if with.deadline == 0 {
                with.deadline = mono.saturating_add(
                    u64::try_from(self.ctx.max_after_wait.as_nanos()).unwrap_or(u64::MAX),
                );
            }
            if now_ms <= after_ms {
                let ahead = after_ms + 1 - now_ms;
                let at = mono.saturating_add(ahead * 1_000_000);
                if ahead > AFTER_FUTURE_LIMIT_MS || at > with.deadline {
                    out.truncate(p.mark);
                    let (status, message) = if ahead > AFTER_FUTURE_LIMIT_MS {
                        (
                            Status::INVALID_OPTION,
                            format!("after={after} lies {ahead} ms ahead of this node's clock: not an ID a trusted clock of this cluster issued"),
                        )
                    } else {
                        (
                            Status::UNAVAILABLE_CLOCK,
                            format!("after={after} lies {ahead} ms ahead of this node's clock, more than it waits (max_drift): retry later, or on the node that issued it"),
                        )
                    };
                    self.reject(status, &message, out);
                    return None;
                }
                p.with = Some(with);
                self.pending = Some(p);
                return Some(at);
            }
        }
        let after = with.after.map(|(a, _)| a);
        let mut below_after = false;
        let mut mask_failed = None;
        let result = {
            let mut gen = self.ctx.gen.borrow_mut();
            let first_call = p.fill.emitted() == 0;
            let mask = with.mask.as_ref();
            let mut first_run = first_call;
            gen.issue(self.announced, &mut p.fill, |first, n| {
                if first_run {
                    // IDs of one answer increase: the first is the smallest.
                    below_after = after.is_some_and(|a| first <= a);
                    first_run = false;
                }
                match mask {
                    None => put_run(out, first, n),
                    Some((keys, width)) => {
                        for id in first..first + n {
                            match keys.mask(id, *width) {
                                Ok(m) => out.extend_from_slice(&m.to_be_bytes()),
                                Err(e) => mask_failed = Some(e),
                            }
                        }
                    }
                }
            })
        };
        if let Some(e) = mask_failed {
            self.ctx.gen.borrow_mut().abandon(&mut p.fill);
            out.truncate(p.mark);
            // INTERNAL closes the connection: `reject` marks it.
            self.reject(
                Status::INTERNAL,
                &format!("cannot mask an issued ID: {e}"),
                out,
            );
            return None;
        }
        if below_after {
            // Drawn before this shard's clock passed `after` (a node behind in its layout, a
            // clock read just before): those IDs stay unused; draw again a millisecond later.
            self.ctx.gen.borrow_mut().abandon(&mut p.fill);
            out.truncate(p.mark + header);
            p.fill = Fill::new(u64::from(p.count));
            let mono = self.ctx.gen.borrow().mono_ns();
            if mono >= with.deadline {
                out.truncate(p.mark);
                let message = format!(
                    "cannot issue above after={} yet: retry later, or on the node that issued it",
                    after.unwrap_or(0)
                );
                self.reject(Status::UNAVAILABLE_CLOCK, &message, out);
                return None;
            }
            p.with = Some(with);
            self.pending = Some(p);
            return Some(mono + 1_000_000);
        }
        match result {
            Ok(Progress::Done) => {
                if let Some(ticket) = with.ticket.take() {
                    ticket.keep(
                        idempotency::Kept {
                            status: 200,
                            body: out[p.mark..].to_vec(),
                        },
                        Instant::now(),
                    );
                }
                self.tally.served(u64::from(p.count));
                None
            }
            Ok(Progress::RetryAt(at)) => {
                p.with = Some(with);
                self.pending = Some(p);
                Some(at)
            }
            Err(e) => {
                out.truncate(p.mark);
                self.refuse(&e, out);
                None
            }
        }
    }

    /// Answers a request refused before it drew IDs with an ERROR frame of `status` (one
    /// that keeps the connection).
    fn reject(&mut self, status: Status, message: &str, out: &mut BytesMut) {
        encode_error(status, message, out);
        self.ctx.stats.error(status);
        if status.closes_connection() {
            self.closing = true;
        }
    }

    /// Answers a request that got no IDs with its ERROR frame; a status that closes the
    /// connection (RANGE_CHANGED) ends it after this answer.
    fn refuse(&mut self, e: &IssueError, out: &mut BytesMut) {
        let (status, message) = refusal(e, &self.ctx.stats);
        encode_error(status, &message, out);
        if status.closes_connection() {
            self.closing = true;
        }
    }
}

/// The status that answers a GET_VALUES which got no values (PROTOCOL.md §3.5): the
/// sequence's own refusals are final (no node would answer otherwise); a store that did not
/// answer in time, contention, or a record this node cannot read are "retry later or
/// elsewhere"; too many calls waiting here is BUSY.
pub(super) fn values_refusal(e: &HoldError) -> Status {
    match e {
        HoldError::Sequence(SequenceError::NotFound(_)) => Status::UNKNOWN_SEQUENCE,
        HoldError::Sequence(SequenceError::BadName { .. }) => Status::INVALID_SEQUENCE_NAME,
        HoldError::Sequence(SequenceError::Exhausted { .. }) => Status::SEQUENCE_USED_UP,
        HoldError::Sequence(SequenceError::BadSpec(_)) => Status::BATCH_TOO_LARGE,
        HoldError::Busy => Status::BUSY,
        HoldError::Sequence(_) | HoldError::Timeout(_) => Status::SEQUENCE_UNAVAILABLE,
    }
}

/// Appends the version 7 UUIDs of the IDs `first .. first + n` (`idgen_id`'s mapping: the
/// IDs' time, worker and sequence, then random bits from `rng`), 16 bytes each, into room
/// reserved once: no allocation per UUID.
#[inline]
fn put_uuids(
    out: &mut BytesMut,
    layout: &Layout,
    rng: &mut rand::rngs::ThreadRng,
    first: u64,
    n: u64,
) -> Result<(), UuidError> {
    out.reserve(n as usize * 16);
    for id in first..first + n {
        out.extend_from_slice(&layout.uuid_v7(id, rng.random::<u128>())?);
    }
    Ok(())
}

/// Appends the IDs `first .. first + n` big-endian, written straight into the buffer's spare
/// capacity: one pass, no zero-fill first and no copy through a scratch buffer (either showed
/// in profiles of big batches: `docs/PERFORMANCE.md`).
#[inline]
fn put_run(out: &mut BytesMut, first: u64, n: u64) {
    let bytes = n as usize * 8;
    out.reserve(bytes);
    write_be_run(&mut out.spare_capacity_mut()[..bytes], first);
    let len = out.len() + bytes;
    // SAFETY: `write_be_run` initialised the `bytes` bytes after the current length (all of
    // the slice it was given), and `reserve` made room for them.
    unsafe { out.set_len(len) };
}

/// Writes `first, first + 1, …` big-endian into `dst` (a multiple of 8 bytes long). The byte
/// swap is the loop's whole cost: x86-64's baseline (SSE2) has no byte shuffle, so the loop
/// the compiler makes of it dominates a big batch's CPU; with AVX2, checked once at run time,
/// the same loop becomes 32 bytes per shuffle (the profiles and figures are in
/// `docs/PERFORMANCE.md`, "Less per read, AVX2 for batches").
#[inline]
fn write_be_run(dst: &mut [MaybeUninit<u8>], first: u64) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: this CPU has AVX2 (checked just above).
        return unsafe { write_be_run_avx2(dst, first) };
    }
    write_be_run_portable(dst, first);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn write_be_run_avx2(dst: &mut [MaybeUninit<u8>], first: u64) {
    write_be_run_portable(dst, first);
}

#[inline(always)]
fn write_be_run_portable(dst: &mut [MaybeUninit<u8>], first: u64) {
    for (i, chunk) in dst.chunks_exact_mut(8).enumerate() {
        for (dst, byte) in chunk.iter_mut().zip((first + i as u64).to_be_bytes()) {
            dst.write(byte);
        }
    }
}

/// Appends one IDS frame of one ID for each of `first .. first + n`, written straight into the
/// buffer's spare capacity (a profile of runs of one-ID requests showed the two appends per
/// answer, each reloading the buffer's length and checking its room, as the loop's cost).
#[inline]
fn put_single_id_answers(out: &mut BytesMut, first: u64, n: u64) {
    let bytes = n as usize * SINGLE_ID_ANSWER_LEN;
    out.reserve(bytes);
    let spare = &mut out.spare_capacity_mut()[..bytes];
    for (i, answer) in spare.chunks_exact_mut(SINGLE_ID_ANSWER_LEN).enumerate() {
        let (header, id) = answer.split_at_mut(SINGLE_ID_HEADER.len());
        for (dst, byte) in header.iter_mut().zip(SINGLE_ID_HEADER) {
            dst.write(byte);
        }
        for (dst, byte) in id.iter_mut().zip((first + i as u64).to_be_bytes()) {
            dst.write(byte);
        }
    }
    let len = out.len() + bytes;
    // SAFETY: the loop above initialised the `bytes` bytes after the current length, and
    // `reserve` made room for them.
    unsafe { out.set_len(len) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_run_writes_every_id_big_endian_across_steps() {
        for n in [1u64, 63, 64, 65, 128, 130, 4096] {
            let mut out = BytesMut::from(&b"hdr"[..]);
            put_run(&mut out, 1 << 40, n);
            assert_eq!(out.len(), 3 + 8 * n as usize, "n = {n}");
            let ids: Vec<u64> = out[3..]
                .chunks_exact(8)
                .map(|c| u64::from_be_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(ids, ((1 << 40)..(1 << 40) + n).collect::<Vec<_>>());
        }
    }

    type WriteRun = fn(&mut [MaybeUninit<u8>], u64);

    #[test]
    fn every_way_of_writing_a_run_writes_the_same_bytes() {
        for (first, n) in [
            (0u64, 1usize),
            (0x0102_0304_0506_0708, 3),
            ((1 << 40) - 2, 4096),
        ] {
            let expected: Vec<u8> = (first..first + n as u64)
                .flat_map(u64::to_be_bytes)
                .collect();
            let mut writers: Vec<(&str, WriteRun)> = vec![
                ("portable", write_be_run_portable),
                ("dispatched", write_be_run),
            ];
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: this CPU has AVX2.
                writers.push(("avx2", |dst, first| unsafe {
                    write_be_run_avx2(dst, first)
                }));
            }
            for (name, write) in writers {
                let mut buf = vec![MaybeUninit::new(0xAAu8); 8 * n];
                write(&mut buf, first);
                // SAFETY: every byte was initialised above.
                let got: Vec<u8> = buf.iter().map(|b| unsafe { b.assume_init() }).collect();
                assert_eq!(got, expected, "{name}, first {first:#x}, n {n}");
            }
        }
    }

    #[test]
    fn put_single_id_answers_writes_one_ids_frame_per_id() {
        for n in [1u64, 2, 63, 64, 65, 4096] {
            let mut out = BytesMut::from(&b"hdr"[..]);
            put_single_id_answers(&mut out, (1 << 40) - 1, n);
            assert_eq!(out.len(), 3 + SINGLE_ID_ANSWER_LEN * n as usize, "n = {n}");
            let mut expected = b"hdr".to_vec();
            for id in (1 << 40) - 1..(1 << 40) - 1 + n {
                idgen_protocol::encode_ids_header(1, &mut expected);
                expected.extend_from_slice(&id.to_be_bytes());
            }
            assert_eq!(&out[..], &expected[..], "n = {n}");
        }
    }
}

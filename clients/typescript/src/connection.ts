/**
 * One TCP (or TLS) connection to one node, with many requests in flight.
 *
 * Pipelining: a FIFO of outstanding requests. A call appends one slot per request frame and
 * writes the frames (writes within one tick are corked into one); the `data` handler decodes
 * answers as they arrive and gives each to the slot at the head of the FIFO (the server
 * answers strictly in request order, PROTOCOL.md section 8). IDs are decoded straight into
 * the caller's `BigUint64Array`, at the slot's offset, so a batch split over several frames
 * is assembled without copies. A caller that stops waiting (its deadline ran out, or another
 * part of its batch failed) leaves its slots in the FIFO: their answers are matched by
 * position and dropped, so the order is never lost.
 *
 * A watchdog fails the connection when its oldest request has had no answer for
 * `timeoutMs`: a node that stalls is treated as down and every request in flight on it
 * fails over.
 */

import * as net from "node:net";
import * as tls from "node:tls";

import { ClientClosedError, IdgenError, ProtocolError, ServerError, TlsError, UnavailableError, type TlsErrorKind } from "./errors.js";
import {
  encodeGetIds,
  encodeGetRanges,
  encodeGetUuids,
  encodeGetValues,
  encodeHello,
  encodePing,
  frameSize,
  MIN_VERSION,
  OP_ERROR,
  OP_HELLO_OK,
  OP_IDS,
  OP_PONG,
  OP_RANGES,
  OP_UUIDS,
  OP_VALUES,
  RangesView,
  readIdsInto,
  readUuidsInto,
  readValuesInto,
  SEQUENCES_VERSION,
  UUIDS_VERSION,
  IDS_WITH_VERSION,
  OP_MASKED_IDS,
  encodeGetIdsWith,
  type IdsWithOptions,
  responseFrameLimit,
  u32,
  decodeResponse,
  type HelloOk,
  type SequenceMode,
} from "./protocol.js";
import { BAD_FRAME, RANGE_CHANGED } from "./status.js";

/** TLS settings of a client: PEM contents (or file paths, read once by the client). */
export interface TlsSettings {
  /** CA bundle (PEM) that node certificates must chain to; Node's default roots if absent. */
  readonly ca?: string | Buffer | ReadonlyArray<string | Buffer> | undefined;
  /** Client certificate chain (PEM), for mutual TLS. */
  readonly cert?: string | Buffer | undefined;
  /** Client private key (PEM), for mutual TLS. */
  readonly key?: string | Buffer | undefined;
  /** The name the node's certificate must carry, instead of the host dialled. */
  readonly serverName?: string | undefined;
}

export const ALPN = "idgen/1";

/** A pending batch: the caller's output array and how many of its frames are unanswered. */
export interface Batch {
  readonly out: BigUint64Array;
  remaining: number;
  settled: boolean;
  resolve(ids: BigUint64Array): void;
  reject(err: Error): void;
}

/** The answer to one GET_VALUES: the sequence's mode and exactly the values asked for. */
export interface Values {
  readonly mode: SequenceMode;
  readonly values: BigUint64Array;
}

/** A pending UUID batch: the caller's output array and how many of its frames are
 * unanswered. */
interface UuidBatch {
  readonly out: string[];
  remaining: number;
  settled: boolean;
  resolve(uuids: string[]): void;
  reject(err: Error): void;
}

/** The answer to one GET_IDS_WITH: the IDs (masked ones when `keyId` is not null: the
 * masking key's ID, 0..=61). */
export interface IdsWith {
  readonly keyId: number | null;
  readonly ids: BigUint64Array;
}

interface WithCall {
  readonly masked: boolean;
  readonly keyed: boolean;
  settled: boolean;
  resolve(v: IdsWith): void;
  reject(err: Error): void;
}

interface ValuesCall {
  settled: boolean;
  resolve(v: Values): void;
  reject(err: Error): void;
}

const KIND_IDS = 0;
const KIND_RANGES = 1;
const KIND_PING = 2;
const KIND_VALUES = 3;
const KIND_UUIDS = 4;
const KIND_WITH = 5;

interface Slot {
  readonly kind: number;
  /** IDs or values asked for (GET_IDS/GET_RANGES/GET_VALUES). */
  readonly count: number;
  /** Where this frame's IDs go in the batch's array. */
  readonly at: number;
  readonly batch: Batch | null;
  readonly token: bigint;
  readonly ping: { resolve(rtt: number): void; reject(err: Error): void; settled: boolean } | null;
  readonly values: ValuesCall | null;
  /** GET_UUIDS: the call's batch (where this frame's UUIDs go: `at`). */
  readonly uuids?: UuidBatch;
  /** GET_IDS_WITH: the call. */
  readonly withCall?: WithCall;
  readonly sentAt: number;
}

export interface ConnectOptions {
  readonly host: string;
  readonly port: number;
  readonly node: string;
  readonly connectTimeoutMs: number;
  readonly timeoutMs: number;
  readonly tls: TlsSettings | null;
  readonly maxVersion: number;
}

/** Node's/OpenSSL's TLS error codes, sorted into the kinds TlsError reports. */
export function tlsErrorKind(code: string, message: string): TlsErrorKind {
  switch (code) {
    case "UNABLE_TO_VERIFY_LEAF_SIGNATURE":
    case "UNABLE_TO_GET_ISSUER_CERT":
    case "UNABLE_TO_GET_ISSUER_CERT_LOCALLY":
    case "SELF_SIGNED_CERT_IN_CHAIN":
    case "DEPTH_ZERO_SELF_SIGNED_CERT":
    case "CERT_SIGNATURE_FAILURE":
      return "unknown_issuer";
    case "ERR_TLS_CERT_ALTNAME_INVALID":
    case "HOSTNAME_MISMATCH":
      return "name_mismatch";
    case "CERT_HAS_EXPIRED":
      return "expired";
    case "CERT_NOT_YET_VALID":
      return "not_yet_valid";
    case "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED":
      return "client_certificate_required";
    case "ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE":
    case "ERR_SSL_TLSV1_ALERT_UNKNOWN_CA":
    case "ERR_SSL_SSLV3_ALERT_CERTIFICATE_EXPIRED":
    case "ERR_SSL_TLSV1_ALERT_DECRYPT_ERROR":
    case "ERR_SSL_SSLV3_ALERT_CERTIFICATE_UNKNOWN":
    case "ERR_SSL_TLSV1_ALERT_ACCESS_DENIED":
    case "ERR_SSL_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE":
      return "client_certificate_rejected";
    default:
      if (/^(CERT_|INVALID_CA|INVALID_PURPOSE|PATH_LENGTH)/.test(code)) return "bad_certificate";
      if (/certificate required/i.test(message)) return "client_certificate_required";
      return "handshake";
  }
}

const TLS_KIND_TEXT: Record<TlsErrorKind, string> = {
  unknown_issuer: "the node's certificate is not signed by a trusted authority",
  name_mismatch: "the node's certificate does not name the server name",
  expired: "the node's certificate has expired",
  not_yet_valid: "the node's certificate is not valid yet",
  bad_certificate: "the node's certificate is unacceptable",
  client_certificate_required: "the node requires a client certificate",
  client_certificate_rejected: "the node refused the client certificate",
  handshake: "handshake failed",
};

function isTlsError(err: NodeJS.ErrnoException): boolean {
  const code = err.code ?? "";
  return code.startsWith("ERR_SSL_") || code.startsWith("ERR_TLS_") || /^(CERT_|UNABLE_TO_|SELF_SIGNED|DEPTH_ZERO|HOSTNAME_MISMATCH|INVALID_CA)/.test(code) || (err as { library?: string }).library === "SSL routines";
}

function toTlsError(err: NodeJS.ErrnoException, node: string): TlsError {
  const code = err.code ?? "";
  const kind = tlsErrorKind(code, err.message);
  return new TlsError(kind, `${TLS_KIND_TEXT[kind]} (${code || "no code"}: ${err.message})`, code, node, err);
}

/**
 * An open connection (handshake done). Created by {@link Connection.open}; used by the client
 * only.
 */
export class Connection {
  readonly node: string;
  readonly hello: HelloOk;
  /** The TLS protocol version and ALPN protocol, for a TLS connection. */
  readonly tlsVersion: string | null;
  readonly alpn: string | null;
  /** Called once when the connection fails or is closed. */
  onClose: ((err: Error) => void) | null = null;

  private readonly socket: net.Socket;
  private readonly timeoutMs: number;
  private readonly maxFrame: number;
  private readonly ranges: boolean;
  private pending: Slot[] = [];
  private head = 0;
  private error: Error | null = null;
  private lastId = -1n;
  private lastUuid: string | null = null;
  /** Received bytes not yet decoded: `chunks` in order, `buffered` bytes in total. */
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** Bytes the frame at the start of the buffer needs (0: not known yet). */
  private need = 0;
  private corked = false;
  private watchdog: NodeJS.Timeout;

  private constructor(node: string, socket: net.Socket, hello: HelloOk, rest: Buffer, timeoutMs: number, tlsInfo: [string | null, string | null]) {
    this.node = node;
    this.socket = socket;
    this.hello = hello;
    this.timeoutMs = timeoutMs;
    this.maxFrame = responseFrameLimit(hello.maxBatch, hello.version);
    this.ranges = hello.version >= 2;
    [this.tlsVersion, this.alpn] = tlsInfo;
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (e: NodeJS.ErrnoException) => {
      if (this.socket instanceof tls.TLSSocket && isTlsError(e)) this.fail(toTlsError(e, this.node));
      else this.fail(new UnavailableError(`connection failed: ${e.message}`, this.node, e, true));
    });
    socket.on("close", () => {
      const idle = this.inFlight() === 0 && this.buffered === 0;
      this.fail(new UnavailableError(idle ? "connection closed by the server (idle)" : "connection closed by the server with requests unanswered", this.node, undefined, true));
    });
    const every = Math.max(5, Math.min(this.timeoutMs / 4, 250));
    this.watchdog = setInterval(() => this.checkStalled(), every);
    this.watchdog.unref();
    if (rest.length > 0) this.onData(rest);
  }

  /**
   * Connect, run TLS if configured, HELLO, and wait for HELLO_OK (all within connectTimeoutMs).
   *
   * `autoSelectFamily: true` is set, not left to Node's default (which an application can turn
   * off with `net.setDefaultAutoSelectFamily(false)` or `--no-network-family-autoselection`):
   * with it Node tries every address the host name resolves to (a user's `localhost` is ::1
   * and 127.0.0.1; a node listens on 127.0.0.1 by default), abandoning one that does not answer
   * after `autoSelectFamilyAttemptTimeout`; without it Node dials the first address only.
   * TLS still verifies the host name given (or `serverName`), never the address that answered.
   */
  static open(o: ConnectOptions): Promise<Connection> {
    return new Promise<Connection>((resolve, reject) => {
      let done = false;
      let socket: net.Socket;
      let buf: Buffer = Buffer.alloc(0);
      const finish = (err: Error | null, conn?: Connection) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        socket.removeListener("data", onData);
        socket.removeListener("error", onError);
        socket.removeListener("close", onClose);
        if (err) {
          socket.destroy();
          reject(err);
        } else {
          resolve(conn!);
        }
      };
      const timer = setTimeout(() => finish(new UnavailableError(`no HELLO_OK within ${o.connectTimeoutMs} ms (connect timeout)`, o.node)), o.connectTimeoutMs);
      const onError = (e: NodeJS.ErrnoException) => {
        if (o.tls && isTlsError(e)) finish(toTlsError(e, o.node));
        else finish(new UnavailableError(`cannot connect: ${connectErrorMessage(e)}`, o.node, e));
      };
      const onClose = () => finish(new UnavailableError("connection closed during the handshake", o.node));
      const onData = (chunk: Buffer) => {
        buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
        let decoded;
        try {
          // Before HELLO_OK only HELLO_OK or an ERROR may arrive: 258 bytes are enough.
          decoded = decodeResponse(buf, responseFrameLimit(0));
        } catch (e) {
          finish(e instanceof ProtocolError ? e.withNode(o.node) : (e as Error));
          return;
        }
        if (decoded === null) return;
        const { frame, consumed } = decoded;
        if (frame.op === "ERROR") {
          finish(new ServerError(frame.status, frame.message, o.node));
          return;
        }
        if (frame.op !== "HELLO_OK") {
          finish(new ProtocolError(`expected HELLO_OK, got ${frame.op}`, null, o.node));
          return;
        }
        const v = frame.hello.version;
        if (v < MIN_VERSION || v > o.maxVersion) {
          finish(new ProtocolError(`the server picked protocol version ${v}, offered ${MIN_VERSION}..=${o.maxVersion}`, null, o.node));
          return;
        }
        const s = socket as net.Socket;
        const tlsInfo: [string | null, string | null] = s instanceof tls.TLSSocket ? [s.getProtocol(), s.alpnProtocol || null] : [null, null];
        socket.removeListener("data", onData);
        let conn: Connection;
        try {
          conn = new Connection(o.node, socket, frame.hello, buf.subarray(consumed), o.timeoutMs, tlsInfo);
        } catch (e) {
          finish(e as Error);
          return;
        }
        finish(null, conn);
      };
      const hello = encodeHello(MIN_VERSION, o.maxVersion);
      if (o.tls) {
        const t = o.tls;
        const serverName = t.serverName ?? o.host;
        const ip = net.isIP(serverName) !== 0;
        // tls.connect hands `autoSelectFamily` to its TCP connect (@types/node omits it here).
        const opts: tls.ConnectionOptions & Pick<net.TcpNetConnectOpts, "autoSelectFamily"> = {
          host: o.host,
          port: o.port,
          autoSelectFamily: true,
          ALPNProtocols: [ALPN],
          minVersion: "TLSv1.2",
          rejectUnauthorized: true,
        };
        if (t.ca !== undefined) opts.ca = t.ca as tls.ConnectionOptions["ca"];
        if (t.cert !== undefined) opts.cert = t.cert;
        if (t.key !== undefined) opts.key = t.key;
        // RFC 6066 forbids an IP address as SNI: a name goes in `servername`; an address is
        // checked against the certificate's IP SANs by the same default check.
        if (!ip) opts.servername = serverName;
        else if (t.serverName !== undefined) opts.checkServerIdentity = (_host, cert) => tls.checkServerIdentity(serverName, cert);
        socket = tls.connect(opts, () => {
          socket.setNoDelay(true);
          socket.write(hello);
        });
      } else {
        socket = net.connect({ host: o.host, port: o.port, autoSelectFamily: true }, () => {
          socket.setNoDelay(true);
          socket.write(hello);
        });
      }
      socket.on("data", onData);
      socket.on("error", onError);
      socket.on("close", onClose);
    });
  }

  /** The address that accepted the connection, `ip:port` (`[v6]:port`), if known. */
  get remoteAddress(): string | null {
    const a = this.socket.remoteAddress;
    if (a === undefined) return null;
    return a.includes(":") ? `[${a}]:${this.socket.remotePort}` : `${a}:${this.socket.remotePort}`;
  }

  /** Whether the connection can take requests. */
  get alive(): boolean {
    return this.error === null;
  }

  /** Requests in flight (answers not yet received, including abandoned ones). */
  inFlight(): number {
    return this.pending.length - this.head;
  }

  /**
   * Ask for `n` IDs: GET_RANGES on a version 2 connection, else GET_IDS, split into
   * max_batch-sized frames written at once. Resolves with all `n` IDs (increasing) or rejects
   * with the first part's error.
   */
  fetch(n: number): Promise<BigUint64Array> {
    return new Promise<BigUint64Array>((resolve, reject) => {
      if (this.error !== null) {
        reject(this.error);
        return;
      }
      // Not zero-filled: every element is written by the answers before the array is handed
      // out (a batch is all or nothing; a failed one is dropped).
      const out = n === 0 ? new BigUint64Array(0) : new BigUint64Array(Buffer.allocUnsafeSlow(n * 8).buffer, 0, n);
      const batch: Batch = { out, remaining: 0, settled: false, resolve, reject };
      const maxBatch = this.hello.maxBatch;
      const kind = this.ranges ? KIND_RANGES : KIND_IDS;
      const encode = this.ranges ? encodeGetRanges : encodeGetIds;
      const now = performance.now();
      if (n === 0) {
        batch.remaining = 1; // sent as is: the server answers INVALID_COUNT
        this.send(encode(0), { kind, count: 0, at: 0, batch, token: 0n, ping: null, values: null, sentAt: now });
        return;
      }
      for (let at = 0; at < n; at += maxBatch) {
        const count = Math.min(maxBatch, n - at);
        batch.remaining++;
        this.send(encode(count), { kind, count, at, batch, token: 0n, ping: null, values: null, sentAt: now });
      }
    });
  }

  /** PING with `token`; resolves with the round-trip time in ms. */
  ping(token: bigint): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      if (this.error !== null) {
        reject(this.error);
        return;
      }
      const ping = { resolve, reject, settled: false };
      this.send(encodePing(token), { kind: KIND_PING, count: 0, at: 0, batch: null, token, ping, values: null, sentAt: performance.now() });
    });
  }

  /** Whether named sequences (GET_VALUES) may be sent: the connection negotiated version 3
   * or later. */
  get sequences(): boolean {
    return this.hello.version >= SEQUENCES_VERSION;
  }

  /**
   * GET_VALUES of `count` values of the sequence `name` (version 3; the caller checked the
   * name, the count and the version). Resolves with exactly `count` values, strictly
   * increasing, and the sequence's mode; rejects with the ERROR's ServerError or the
   * connection's failure.
   */
  fetchValues(name: string, count: number): Promise<Values> {
    return new Promise<Values>((resolve, reject) => {
      if (this.error !== null) {
        reject(this.error);
        return;
      }
      if (!this.sequences) {
        reject(new Error(`internal: GET_VALUES on a version ${this.hello.version} connection`));
        return;
      }
      const frame = encodeGetValues(count, name);
      const values: ValuesCall = { settled: false, resolve, reject };
      this.send(frame, { kind: KIND_VALUES, count, at: 0, batch: null, token: 0n, ping: null, values, sentAt: performance.now() });
    });
  }

  /** Whether UUIDs (GET_UUIDS) may be sent: the connection negotiated version 4 or later. */
  get uuids(): boolean {
    return this.hello.version >= UUIDS_VERSION;
  }

  /**
   * GET_UUIDS for `n` (>= 1) version 7 UUIDs (version 4; the caller checked `n` and the
   * version), split into max_batch-sized frames written at once. Resolves with all `n` in
   * canonical text form, strictly increasing, or rejects with the first part's error.
   */
  fetchUuids(n: number): Promise<string[]> {
    return new Promise<string[]>((resolve, reject) => {
      if (this.error !== null) {
        reject(this.error);
        return;
      }
      if (!this.uuids) {
        reject(new Error(`internal: GET_UUIDS on a version ${this.hello.version} connection`));
        return;
      }
      const uuids: UuidBatch = { out: new Array<string>(n), remaining: 0, settled: false, resolve, reject };
      const now = performance.now();
      for (let at = 0; at < n; at += this.hello.maxBatch) {
        const count = Math.min(this.hello.maxBatch, n - at);
        uuids.remaining++;
        this.send(encodeGetUuids(count), { kind: KIND_UUIDS, count, at, batch: null, token: 0n, ping: null, values: null, uuids, sentAt: now });
      }
    });
  }

  /** Whether GET_IDS_WITH (after, idempotency keys, masked IDs) may be sent: the connection
   * negotiated version 5 or later. */
  get idsWith(): boolean {
    return this.hello.version >= IDS_WITH_VERSION;
  }

  /**
   * One GET_IDS_WITH frame for `count` (1..=max_batch) IDs with `opts` (version 5; the
   * caller checked the count, the options and the version). Resolves with exactly `count`
   * IDs (IDS), or masked values and their key ID (MASKED_IDS) when `opts.masked`.
   */
  fetchIdsWith(count: number, opts: IdsWithOptions): Promise<IdsWith> {
    return new Promise<IdsWith>((resolve, reject) => {
      if (this.error !== null) {
        reject(this.error);
        return;
      }
      if (!this.idsWith) {
        reject(new Error(`internal: GET_IDS_WITH on a version ${this.hello.version} connection`));
        return;
      }
      const frame = encodeGetIdsWith(count, opts);
      const withCall: WithCall = { masked: opts.masked === true, keyed: (opts.key ?? null) !== null, settled: false, resolve, reject };
      this.send(frame, { kind: KIND_WITH, count, at: 0, batch: null, token: 0n, ping: null, values: null, withCall, sentAt: performance.now() });
    });
  }

  private send(frame: Buffer, slot: Slot): void {
    this.pending.push(slot);
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(() => {
        this.corked = false;
        this.socket.uncork();
      });
    }
    this.socket.write(frame);
  }

  /** Break the connection with `err`: every waiting request fails with it, later calls fail
   * at once, and the socket is destroyed. */
  fail(err: Error): void {
    if (this.error !== null) return;
    this.error = err;
    clearInterval(this.watchdog);
    const pending = this.pending;
    const head = this.head;
    this.pending = [];
    this.head = 0;
    for (let i = head; i < pending.length; i++) settleError(pending[i]!, err);
    this.socket.destroy();
    const cb = this.onClose;
    this.onClose = null;
    if (cb) cb(err);
  }

  /** Close the connection (requests in flight fail with ClientClosedError). */
  close(): void {
    this.fail(new ClientClosedError(`${this.node}: connection closed by the client`));
  }

  private checkStalled(): void {
    if (this.head >= this.pending.length) return;
    const oldest = this.pending[this.head]!;
    if (performance.now() - oldest.sentAt > this.timeoutMs) {
      this.fail(new UnavailableError(`no answer within ${this.timeoutMs} ms`, this.node));
    }
  }

  // -- receiving ---------------------------------------------------------------------------

  private onData(chunk: Buffer): void {
    if (this.error !== null) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    if (this.need !== 0 && this.buffered < this.need) return; // a big frame still arriving
    let buf = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.buffered);
    let off = 0;
    try {
      while (this.error === null) {
        const size = frameSize(buf, off, buf.length - off, this.maxFrame);
        if (size === null || buf.length - off < Math.max(size, 5)) {
          this.need = size === null ? 0 : size;
          break;
        }
        this.dispatch(buf, off, size);
        off += size;
        this.need = 0;
      }
    } catch (e) {
      const err = e instanceof ProtocolError ? e.withNode(this.node) : new ProtocolError(`reader failed: ${String(e)}`, null, this.node);
      this.fail(err);
      return;
    }
    if (this.error !== null) return;
    if (off >= buf.length) {
      this.chunks = [];
      this.buffered = 0;
    } else {
      buf = buf.subarray(off);
      this.chunks = [buf];
      this.buffered = buf.length;
    }
  }

  private shift(): Slot | null {
    if (this.head >= this.pending.length) return null;
    const slot = this.pending[this.head++]!;
    if (this.head === this.pending.length) {
      this.pending = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.pending.length) {
      this.pending = this.pending.slice(this.head);
      this.head = 0;
    }
    return slot;
  }

  /** One complete frame at `buf[off..off + size]`: the answer to the oldest request. */
  private dispatch(buf: Buffer, off: number, size: number): void {
    const opcode = buf[off + 4]!;
    const slot = this.shift();
    if (slot === null) throw new ProtocolError(`frame 0x${opcode.toString(16)} with no request outstanding`);
    try {
      this.answer(slot, opcode, buf, off, size);
    } catch (e) {
      // The slot has left the FIFO: it gets the fault itself (fail() settles the others).
      const err = e instanceof ProtocolError ? e.withNode(this.node) : new ProtocolError(`reader failed: ${String(e)}`, null, this.node);
      settleError(slot, err);
      throw err;
    }
  }

  /** The answer `buf[off..off + size]` (opcode `opcode`) to `slot`'s request. */
  private answer(slot: Slot, opcode: number, buf: Buffer, off: number, size: number): void {
    const p = off + 5;
    if (opcode === OP_ERROR) {
      const decoded = decodeResponse(buf.subarray(off, off + size), this.maxFrame);
      const frame = decoded!.frame as { status: number; message: string };
      const err = new ServerError(frame.status, frame.message, this.node);
      settleError(slot, err);
      if (err.code === RANGE_CHANGED) {
        // Every request still in flight gets the 305 too: this connection is dead, the
        // node is not, so they reconnect rather than count the node as down.
        this.fail(err);
      } else if (err.closes) {
        this.fail(new UnavailableError(`server closed the connection after ERROR ${err.code} ${err.statusName ?? "UNKNOWN"}`, this.node));
      }
      return;
    }
    if (slot.kind === KIND_PING) {
      if (opcode !== OP_PONG) throw mismatch(slot, opcode);
      const token = (BigInt(u32(buf, p)) << 32n) | BigInt(u32(buf, p + 4));
      if (token !== slot.token) throw new ProtocolError(`PING ${slot.token} answered with PONG ${token}`);
      const ping = slot.ping!;
      if (!ping.settled) {
        ping.settled = true;
        ping.resolve(performance.now() - slot.sentAt);
      }
      return;
    }
    if (slot.kind === KIND_VALUES) {
      if (opcode !== OP_VALUES) throw mismatch(slot, opcode);
      // frameSize checked the mode byte and that the count agrees with the length.
      const count = u32(buf, p + 1);
      if (count !== slot.count) throw new ProtocolError(`asked for ${slot.count} values, got VALUES of ${count}`);
      const values = new BigUint64Array(count);
      readValuesInto(buf, p + 5, count, values, 0);
      const call = slot.values!;
      if (!call.settled) {
        call.settled = true;
        call.resolve({ mode: buf[p] === 1 ? "strict" : "dense", values });
      }
      return;
    }
    if (slot.kind === KIND_UUIDS) {
      if (opcode !== OP_UUIDS) throw mismatch(slot, opcode);
      // frameSize checked that the count agrees with the length.
      const count = u32(buf, p);
      if (count !== slot.count) throw new ProtocolError(`asked for ${slot.count} UUIDs, got UUIDS of ${count}`);
      const call = slot.uuids!;
      this.lastUuid = readUuidsInto(buf, p + 4, count, call.out, slot.at, this.lastUuid);
      if (!call.settled && --call.remaining === 0) {
        call.settled = true;
        call.resolve(call.out);
      }
      return;
    }
    if (slot.kind === KIND_WITH) {
      const call = slot.withCall!;
      let result: IdsWith;
      if (call.masked) {
        if (opcode !== OP_MASKED_IDS) throw mismatch(slot, opcode);
        // frameSize checked the key ID and that the count agrees with the length.
        const count = u32(buf, p + 1);
        if (count !== slot.count) throw new ProtocolError(`asked for ${slot.count} masked IDs, got MASKED_IDS of ${count}`);
        const ids = new BigUint64Array(count);
        readIdsInto(buf, p + 5, count, ids, 0);
        result = { keyId: buf[p]!, ids };
      } else {
        if (opcode !== OP_IDS) throw mismatch(slot, opcode);
        const count = u32(buf, p);
        if (count !== slot.count) throw new ProtocolError(`asked for ${slot.count} IDs, got ${count}`);
        const ids = new BigUint64Array(count);
        readIdsInto(buf, p + 4, count, ids, 0);
        // A keyed retry may answer IDs kept from an earlier request: the order check holds
        // within the frame only then; otherwise they continue the connection's order.
        for (let i = 1; i < count; i++) {
          if (ids[i]! <= ids[i - 1]!) throw new ProtocolError("IDs in one IDS frame are not increasing");
        }
        if (!call.keyed && ids[0]! <= this.lastId) throw new ProtocolError("IDs on one connection are not increasing");
        if (ids[count - 1]! > this.lastId) this.lastId = ids[count - 1]!;
        result = { keyId: null, ids };
      }
      if (!call.settled) {
        call.settled = true;
        call.resolve(result);
      }
      return;
    }
    const batch = slot.batch!;
    const out = batch.out;
    if (slot.kind === KIND_IDS) {
      if (opcode !== OP_IDS) throw mismatch(slot, opcode);
      const count = u32(buf, p);
      if (count !== slot.count) throw new ProtocolError(`asked for ${slot.count} IDs, got ${count}`);
      readIdsInto(buf, p + 4, count, out, slot.at);
    } else {
      if (opcode !== OP_RANGES) throw mismatch(slot, opcode);
      const total = u32(buf, p);
      const runs = u32(buf, p + 4);
      if (runs !== (size - 13) / 12) throw new ProtocolError(`RANGES run count ${runs} disagrees with the frame length`, BAD_FRAME);
      if (total !== slot.count) throw new ProtocolError(`asked for ${slot.count} IDs, got RANGES of ${total}`);
      const view = new RangesView(buf, p + 8, runs, total);
      view.validate();
      view.expandInto(out, slot.at);
    }
    const first = out[slot.at]!;
    if (first <= this.lastId) throw new ProtocolError("IDs on one connection are not increasing");
    this.lastId = out[slot.at + slot.count - 1]!;
    if (!batch.settled && --batch.remaining === 0) {
      batch.settled = true;
      batch.resolve(out);
    }
  }
}

function mismatch(slot: Slot, opcode: number): ProtocolError {
  const asked = slot.kind === KIND_WITH ? "GET_IDS_WITH" : slot.kind === KIND_PING ? "PING" : slot.kind === KIND_IDS ? "GET_IDS" : slot.kind === KIND_VALUES ? "GET_VALUES" : slot.kind === KIND_UUIDS ? "GET_UUIDS" : "GET_RANGES";
  const names: Record<number, string> = { [OP_HELLO_OK]: "HELLO_OK", [OP_IDS]: "IDS", [OP_PONG]: "PONG", [OP_RANGES]: "RANGES", [OP_VALUES]: "VALUES", [OP_UUIDS]: "UUIDS", [OP_MASKED_IDS]: "MASKED_IDS" };
  return new ProtocolError(`${asked} answered with ${names[opcode] ?? `opcode 0x${opcode.toString(16)}`}`);
}

function settleError(slot: Slot, err: Error): void {
  if (slot.batch !== null) {
    if (!slot.batch.settled) {
      slot.batch.settled = true;
      slot.batch.reject(err);
    }
  } else if (slot.ping !== null && !slot.ping.settled) {
    slot.ping.settled = true;
    slot.ping.reject(err);
  } else if (slot.values !== null && !slot.values.settled) {
    slot.values.settled = true;
    slot.values.reject(err);
  } else if (slot.uuids !== undefined && !slot.uuids.settled) {
    slot.uuids.settled = true;
    slot.uuids.reject(err);
  } else if (slot.withCall !== undefined && !slot.withCall.settled) {
    slot.withCall.settled = true;
    slot.withCall.reject(err);
  }
}

/** Whether `err` is one of this package's errors. */
export function isIdgenError(err: unknown): err is IdgenError {
  return err instanceof IdgenError;
}

/**
 * A connect error's message. With `autoSelectFamily` a failure on every address is an
 * AggregateError whose own message is empty; its `errors` say what happened at each address.
 */
function connectErrorMessage(e: Error): string {
  if (e instanceof AggregateError && e.errors.length > 0) {
    return e.errors.map((x: unknown) => (x instanceof Error ? x.message : String(x))).join("; ");
  }
  return e.message;
}

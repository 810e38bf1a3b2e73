/**
 * The idgen client: pipelined connections, failover across nodes, per-call deadlines.
 *
 * Failover: a node that answers `3xx` (except `304 EXHAUSTED`), does not answer within
 * `timeoutMs`, refuses or drops the connection, fails its TLS handshake or sends a bad frame
 * is marked down for an exponential backoff (`backoffMinMs`, doubling per consecutive
 * failure, capped at `backoffMaxMs`), and the whole call is retried on the next node, each
 * node at most once per call; nodes backing off are skipped. A `3xx` that keeps the
 * connection open keeps it for the next try. A connection closed or reset under a call, and
 * a status that closes the connection (`1xx`, `5xx`), are node failures like the others: the
 * call moves on to the next node. `305 RANGE_CHANGED` is not a node failure: the
 * connection is dropped and the call retried at once on a new connection to the same node
 * (whose HELLO_OK announces the new range), once per call; then the next node. `2xx` and
 * `304` are thrown at once (every node would answer the same). The shared behaviour
 * scenarios (clients/vectors/SCENARIOS.md) say all this as data. Retrying cannot duplicate
 * an ID: a server never sends an ID twice, so the IDs of a failed or abandoned request are
 * only ever lost (a gap).
 *
 * Ordering: IDs from one connection are strictly increasing; after a failover they come from
 * another node and are unique but not ordered against the earlier ones.
 *
 * Errors: when a call tried exactly one node, that node's error is thrown as it is
 * (UnavailableError, TlsError, ProtocolError or ServerError); when it tried several, or none
 * could be tried, NoNodeAvailableError lists each node's last error.
 *
 * Named sequences (protocol version 3, clients/vectors/SEQUENCES.md): `nextValue` and
 * `nextValues` send GET_VALUES through the same failover: `308 SEQUENCE_UNAVAILABLE` and the
 * other retry-elsewhere statuses fail over like a GET_IDS; `203 UNKNOWN_SEQUENCE`,
 * `204 INVALID_SEQUENCE_NAME`, `307 SEQUENCE_USED_UP`, `200` and `201` are thrown at once. A
 * node that negotiated version 1 or 2 fails the call with SequencesUnsupportedError, nothing
 * sent and no other node tried. A retry asks again: values are never re-sent, so it cannot
 * duplicate one.
 */

import { promises as dns } from "node:dns";
import { readFileSync } from "node:fs";
import * as net from "node:net";

import { ConfigError, configFromEnv, givenSettings, parseUrl, type IdgenConfig } from "./config.js";
import { Observer, checkHooks, type HooksOption, type IdgenOp } from "./events.js";

import { Connection, type IdsWith, type TlsSettings, type Values } from "./connection.js";
import { Deadline, checkCall } from "./deadline.js";
import { ClientClosedError, DeadlineError, IdempotencyKeyNodeError, IdsWithUnsupportedError, NoNodeAvailableError, ProtocolError, SequencesUnsupportedError, ServerError, UnavailableError, UuidsUnsupportedError } from "./errors.js";
import { checkId, toBase32, toBase62, toDecimal } from "./forms.js";
import { MAX_SEQUENCE_NAME_BYTES, MAX_VALUES_PER_CALL, MAX_VERSION, MIN_VERSION, isIdempotencyKey, isSequenceName, type HelloOk, type IdsWithOptions } from "./protocol.js";
import { SequencePrefetch, type SequenceBufferState } from "./sequences.js";
import { RANGE_CHANGED } from "./status.js";
import { maskedString } from "./mask.js";

/** An ID taken apart (PROTOCOL.md section 10). */
export interface IdParts {
  /** Unix time in ms of the ID's timestamp. */
  readonly unixMs: number;
  /** The same instant as a Date. */
  readonly date: Date;
  /** Milliseconds since the layout's epoch. */
  readonly timestamp: number;
  /** The full worker field (region bits included). */
  readonly worker: number;
  /** The top `regionBits` of the worker field (0 without regions). */
  readonly region: number;
  /** The sequence within the millisecond. */
  readonly sequence: number;
}

/** A version 7 UUID of idgen taken apart (PROTOCOL.md section 10.1): the ID it was made from
 * and that ID's fields. */
export interface UuidParts extends IdParts {
  /** The ID the UUID was made from. */
  readonly id: bigint;
}

const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Why a time or interval has no IDs in a layout (clients/vectors/BOUNDS.md). */
export type TimeBoundsKind = "before_epoch" | "after_last" | "empty";

/**
 * A time or interval without IDs in a layout ({@link Layout.bounds}, {@link Layout.minIdAt},
 * {@link Layout.maxIdAt}): a time before the epoch, after the last timestamp, or an empty
 * interval; `kind` says which.
 */
export class TimeBoundsError extends RangeError {
  readonly kind: TimeBoundsKind;

  constructor(kind: TimeBoundsKind, message: string) {
    super(message);
    this.name = "TimeBoundsError";
    this.kind = kind;
  }
}

/** A time in ms since the Unix epoch as a bigint; a number must be an integer. */
function unixMs(name: string, value: bigint | number): bigint {
  if (typeof value === "bigint") return value;
  if (typeof value === "number" && Number.isSafeInteger(value)) return BigInt(value);
  throw new TypeError(`${name} must be an integer number of ms since the Unix epoch (number or bigint), not ${String(value)}`);
}

/** The ID layout a cluster announces in HELLO_OK. */
export class Layout {
  readonly epochMs: bigint;
  readonly timestampBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;
  readonly regionBits: number;

  constructor(hello: Pick<HelloOk, "epochMs" | "timestampBits" | "workerBits" | "sequenceBits" | "regionBits">) {
    this.epochMs = hello.epochMs;
    this.timestampBits = hello.timestampBits;
    this.workerBits = hello.workerBits;
    this.sequenceBits = hello.sequenceBits;
    this.regionBits = hello.regionBits;
  }

  /** Whether both describe the same ID format. */
  equals(other: Layout): boolean {
    return (
      this.epochMs === other.epochMs &&
      this.timestampBits === other.timestampBits &&
      this.workerBits === other.workerBits &&
      this.sequenceBits === other.sequenceBits &&
      this.regionBits === other.regionBits
    );
  }

  /** The layout's width, timestamp + worker + sequence bits (at most 63): every ID is below
   * `2n ** BigInt(idBits)`. */
  get idBits(): number {
    return this.timestampBits + this.workerBits + this.sequenceBits;
  }

  /** The layout's largest ID, `2^idBits - 1`. */
  get maxId(): bigint {
    return (1n << BigInt(this.idBits)) - 1n;
  }

  /** Whether every ID is an exact JavaScript number: the layout is at most 53 bits wide, so no
   * ID exceeds `Number.MAX_SAFE_INTEGER` (and `Number(id)` loses nothing). */
  get jsSafe(): boolean {
    return this.idBits <= 53;
  }

  /** Take an ID apart: timestamp, worker, region and sequence. Throws a RangeError for a value
   * outside `0 .. 2^63`, or at or above `2^idBits` (not an ID of this layout). */
  decode(id: bigint): IdParts {
    checkId(id);
    if (id > this.maxId) {
      throw new RangeError(`${id} is not an ID of this layout: its IDs are ${this.idBits} bits wide, below 2^${this.idBits}`);
    }
    const s = BigInt(this.sequenceBits);
    const w = BigInt(this.workerBits);
    const sequence = Number(id & ((1n << s) - 1n));
    const worker = Number((id >> s) & ((1n << w) - 1n));
    const region = this.regionBits > 0 ? worker >> (this.workerBits - this.regionBits) : 0;
    const timestamp = id >> (w + s);
    const unixMs = Number(this.epochMs + timestamp);
    return { unixMs, date: new Date(unixMs), timestamp: Number(timestamp), worker, region, sequence };
  }

  /**
   * Take a version 7 UUID made by a node of this layout apart (its canonical text form, either
   * case): the ID it was made from and its fields. A string that is not a UUID is a TypeError;
   * another version, another variant, or a time before the epoch or past the layout's last
   * millisecond a RangeError that says which.
   */
  decodeUuid(uuid: string): UuidParts {
    if (typeof uuid !== "string" || !UUID_TEXT.test(uuid)) {
      throw new TypeError(`${JSON.stringify(uuid)} is not a UUID in canonical form (8-4-4-4-12 hex digits)`);
    }
    const u = BigInt(`0x${uuid.replace(/-/g, "")}`);
    const version = Number((u >> 76n) & 0xfn);
    if (version !== 7) throw new RangeError(`UUID ${uuid} is of version ${version}, not 7`);
    if (((u >> 62n) & 0b11n) !== 0b10n) throw new RangeError(`UUID ${uuid} is not of RFC 9562's variant (bits 10)`);
    const unixMs = u >> 80n;
    if (unixMs < this.epochMs) throw new RangeError(`UUID ${uuid}: its time ${unixMs} ms is before the epoch ${this.epochMs} ms`);
    if (unixMs > this.lastUnixMs) throw new RangeError(`UUID ${uuid}: its time ${unixMs} ms is past the layout's last millisecond ${this.lastUnixMs}`);
    const payload = (((u >> 64n) & 0xfffn) << 62n) | (u & ((1n << 62n) - 1n));
    const lowBits = BigInt(this.workerBits + this.sequenceBits);
    const id = ((unixMs - this.epochMs) << lowBits) | (payload >> (74n - lowBits));
    return { id, ...this.decode(id) };
  }

  /** The last Unix millisecond an ID of this layout can hold. */
  get lastUnixMs(): bigint {
    return this.epochMs + (1n << BigInt(this.timestampBits)) - 1n;
  }

  private timestampAt(name: string, value: bigint | number): bigint {
    const t = unixMs(name, value);
    if (t < this.epochMs) {
      throw new TimeBoundsError("before_epoch", `${name} ${t} ms is before the layout's epoch ${this.epochMs} ms: no ID has that time`);
    }
    if (t > this.lastUnixMs) {
      throw new TimeBoundsError(
        "after_last",
        `${name} ${t} ms is after the layout's last timestamp ${this.lastUnixMs} ms: no ID has that time`,
      );
    }
    return t - this.epochMs;
  }

  /** The smallest ID at `unixMs` (ms since the Unix epoch): worker 0, sequence 0. Throws a
   * {@link TimeBoundsError} for a time the layout cannot hold. */
  minIdAt(unixMs: bigint | number): bigint {
    return this.timestampAt("time", unixMs) << BigInt(this.workerBits + this.sequenceBits);
  }

  /** The largest ID at `unixMs`: the last worker of the last region, the last sequence. */
  maxIdAt(unixMs: bigint | number): bigint {
    const shift = BigInt(this.workerBits + this.sequenceBits);
    return (this.timestampAt("time", unixMs) << shift) | ((1n << shift) - 1n);
  }

  /**
   * The IDs of the interval `[fromMs, toMs)`: every ID whose time lies in it, and no other,
   * satisfies `lo <= id < hi` (for SQL: `WHERE id >= lo AND id < hi`; the largest is `hi - 1n`).
   * `toMs` may be at most {@link lastUnixMs}, so `hi` fits a signed 64-bit column. Throws a
   * {@link TimeBoundsError} (before_epoch, after_last, empty).
   */
  bounds(fromMs: bigint | number, toMs: bigint | number): { lo: bigint; hi: bigint } {
    const shift = BigInt(this.workerBits + this.sequenceBits);
    const from = unixMs("fromMs", fromMs);
    const lo = this.timestampAt("fromMs", from) << shift;
    const to = unixMs("toMs", toMs);
    if (to <= from) {
      throw new TimeBoundsError("empty", `the interval [${from}, ${to}) ms is empty: the end must be after the start`);
    }
    return { lo, hi: this.timestampAt("toMs", to) << shift };
  }

  toString(): string {
    return `Layout(epoch ${this.epochMs} ms, ${this.timestampBits}/${this.workerBits}/${this.sequenceBits} bits, ${this.regionBits} region bits)`;
  }
}

/** Options of a {@link Client}. Times in milliseconds. */
export interface ClientOptions {
  /** How long to wait for each answer (and a node's whole answer to a call's frames)
   * before the node counts as stalled and the call fails over. Default 1000. */
  timeoutMs?: number;
  /** Bound on TCP connect + TLS handshake + HELLO_OK. Default 1000. */
  connectTimeoutMs?: number;
  /** First backoff of a failed node; doubles per consecutive failure. Default 200. */
  backoffMinMs?: number;
  /** Longest backoff. Default 10000. */
  backoffMaxMs?: number;
  /** TLS (and mutual TLS): every connection speaks TLS, verified (no switch to turn that off). */
  tls?: TlsOptions;
  /** Highest protocol version offered (1 to 3; default 3: batches answered as runs from
   * version 2, named sequences from version 3). */
  maxVersion?: number;
  /**
   * Sequence prefetch `K` (clients/vectors/SEQUENCES.md): with `K > 0` the client keeps, per
   * dense sequence, a buffer of values fetched `max(K, n)` at a time and answers later calls
   * from it; strict sequences are never buffered. Values still buffered when the client
   * closes or the process ends are never handed out (gaps, up to `K` per name). Default 0
   * (off); at most 1048576.
   */
  sequencePrefetch?: number;
  /**
   * Each address a node's name resolves to is a node of its own (CONFIG.md, "Names with
   * several addresses"): `"idgen-headless.ids.svc:7420"` is every ready pod of a Kubernetes
   * headless Service. Resolved when the client starts and again when a node fails (at most
   * once a second); TLS still verifies the name given. Default false.
   */
  expand?: boolean;
  /** The resolver `expand` uses: a host name's addresses, in order (default `dns.lookup` with
   * `all: true` in the resolver's order). */
  lookup?: (host: string) => Promise<readonly string[]>;
  /** Called synchronously with each event (`connect`, `connect_failed`, `request`, `refused`,
   * `failover`, `node_down`, `node_up`) and its fields; see `events.ts`. A hook that throws is
   * reported once (`process.emitWarning`) and otherwise ignored. */
  hooks?: HooksOption;
}

/** TLS settings: PEM contents, or paths to PEM files (read once, when the client is made). */
export interface TlsOptions extends TlsSettings {
  readonly caFile?: string;
  readonly certFile?: string;
  readonly keyFile?: string;
}

/** Per-call options: a deadline for the whole call (failover included). */
export interface CallOptions {
  /** Give up after this many ms (DeadlineError); the request's IDs, if they come, are dropped. */
  timeoutMs?: number;
  /** Give up when this signal aborts (DeadlineError, with the signal's reason as cause). */
  signal?: AbortSignal;
}

/**
 * A call's options for IDs (protocol version 5, GET_IDS_WITH) besides its deadline. With
 * either set, the call needs a node of version 5 (IdsWithUnsupportedError otherwise).
 */
export interface IdOptions extends CallOptions {
  /** Every ID answered is greater than this one: pass an ID you have seen (from any node of
   * the cluster) to get read-your-writes order. The node may wait up to its max_drift for its
   * clock; beyond that `301 UNAVAILABLE_CLOCK`; a non-ID or far-future one `205`. */
  after?: bigint | null;
  /** An idempotency key (1 to 64 visible ASCII characters): on a node with idempotency keys
   * enabled, the same call with the same key within the node's window gets the same IDs
   * again. The key picks the node (FNV-1a 64 of its bytes, modulo the number of nodes) and the
   * call is never retried on another node (IdempotencyKeyNodeError instead). */
  idempotencyKey?: string | null;
}

/** Masked IDs answered by a node (`nextMaskedIds`). */
export interface MaskedIds {
  /** The ID (0..61) of the node's masking key that masked them. */
  readonly keyId: number;
  /** The masked integers, in the IDs' order (masked values themselves are not in order). */
  readonly values: BigUint64Array;
  /** Their 12-character string forms: the key ID's base62 character + 11 base62 digits. */
  readonly strings: string[];
}

/** FNV-1a 64 of `key`'s bytes (latin1: an idempotency key is ASCII). */
export function fnv1a64(key: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (let i = 0; i < key.length; i++) {
    h ^= BigInt(key.charCodeAt(i) & 0xff);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h;
}

/** The index (in the order given) of the node an idempotency key goes to among `count`
 * configured nodes: FNV-1a 64 of the key's bytes, modulo `count`. */
export function keyNodeIndex(key: string, count: number): number {
  return Number(fnv1a64(key) % BigInt(count));
}

/** The state of one node, as {@link Client.nodes} reports it. */
export interface NodeState {
  readonly node: string;
  readonly connected: boolean;
  /** Backing off now. */
  readonly down: boolean;
  readonly retryInMs: number;
  /** Consecutive failures. */
  readonly failures: number;
  readonly lastError: Error | null;
  /** The live connection's HELLO_OK. */
  readonly hello: HelloOk | null;
  readonly tlsVersion: string | null;
  readonly alpn: string | null;
}

/** Counters of a client. */
export interface ClientStats {
  connects: number;
  /** Calls sent to a node (one or more request frames each). */
  requests: number;
  ids: number;
  pings: number;
  /** A node marked down. */
  nodeFailures: number;
  /** A call moved on to another node. */
  failovers: number;
  /** GET_UUIDS requests sent (calls: one or more frames each). */
  uuidRequests: number;
  /** UUIDs received. */
  uuids: number;
  /** GET_VALUES requests sent (named sequences). */
  valueRequests: number;
  /** Sequence values received from nodes (including values prefetched into buffers). */
  values: number;
  /** A connection dropped after RANGE_CHANGED and reopened. */
  rangeChanges: number;
  /** A call retried on a new connection to the same node after its connection was closed
   * or reset under it. Always 0 now: such a call moves on to the next node (a node failure,
   * clients/vectors/SCENARIOS.md); kept so that code reading it still compiles. */
  reconnects: number;
}

/** The string forms of an ID (clients/vectors/FORMS.md). */
export type IdForm = "decimal" | "base62" | "base32";

const MAX_IDS_PER_CALL = 1 << 24; // a guard against accidental huge requests (16 Mi IDs)

class Node {
  readonly addr: string;
  readonly host: string;
  readonly port: number;
  /** With `expand`: the name this address came from, which TLS verifies (null: `host`). */
  readonly tlsName: string | null;
  conn: Connection | null = null;
  connecting: Promise<Connection> | null = null;
  failures = 0;
  downUntil = 0;
  lastError: Error | null = null;
  /** With `expand`: no longer among the name's addresses; dropped when its connection fails. */
  gone = false;

  constructor(addr: string, tlsName: string | null = null) {
    this.addr = addr;
    [this.host, this.port] = parseNode(addr);
    this.tlsName = tlsName;
  }
}

/** What a call reports in its `request` event: the operation and the node that answered. */
interface CallRecord {
  op: IdgenOp | null;
  node: string | null;
}

function addressNode(address: string, port: number): string {
  return address.includes(":") ? `[${address}]:${port}` : `${address}:${port}`;
}

async function defaultLookup(host: string): Promise<readonly string[]> {
  const found = await dns.lookup(host, { all: true, verbatim: true });
  return found.map((a) => a.address);
}

/** The least time between two resolutions of the names of an `expand` client. */
const RESOLVE_INTERVAL_MS = 1000;

/** Split `"host:port"` (IPv6 as `"[::1]:7420"`). */
export function parseNode(node: string): [string, number] {
  if (typeof node !== "string") throw new TypeError(`a node is a "host:port" string, not ${typeof node}`);
  const i = node.lastIndexOf(":");
  let host = i > 0 ? node.slice(0, i) : "";
  const port = i > 0 ? node.slice(i + 1) : "";
  if (host.startsWith("[") && host.endsWith("]")) host = host.slice(1, -1);
  if (!host || !/^[0-9]+$/.test(port) || Number(port) < 1 || Number(port) > 65535 || (host.includes(":") && net.isIPv6(host) === false)) {
    throw new RangeError(`node ${JSON.stringify(node)} is not "host:port"`);
  }
  return [host, Number(port)];
}

function positive(v: number | undefined, dflt: number, what: string): number {
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) throw new RangeError(`${what} must be a positive number of ms`);
  return v;
}

function loadTls(t: TlsOptions): TlsSettings {
  const read = (path: string | undefined, what: string) => {
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (e) {
      throw new Error(`cannot read the TLS ${what} ${path}: ${(e as Error).message}`);
    }
  };
  for (const [a, b] of [["ca", "caFile"], ["cert", "certFile"], ["key", "keyFile"]] as const) {
    if (t[a] !== undefined && t[b] !== undefined) throw new TypeError(`tls: give ${a} or ${b}, not both`);
  }
  const settings: TlsSettings = {
    ca: t.ca ?? read(t.caFile, "CA bundle"),
    cert: t.cert ?? read(t.certFile, "certificate"),
    key: t.key ?? read(t.keyFile, "key"),
    serverName: t.serverName,
  };
  if ((settings.cert === undefined) !== (settings.key === undefined)) throw new TypeError("tls: a client certificate needs its key, and a key its certificate");
  if (settings.serverName !== undefined && (typeof settings.serverName !== "string" || settings.serverName === "")) {
    throw new TypeError("tls.serverName must be a non-empty string");
  }
  return settings;
}

/**
 * A client for a cluster of idgen nodes, safe for any number of concurrent async callers.
 *
 * `nodes` are `"host:port"` strings, tried in that order (the client sticks to the node that
 * last answered). IDs are `bigint`; `nextIds` returns a `BigUint64Array` (its elements are
 * `bigint`). See the module documentation for failover.
 *
 * ```ts
 * const client = new Client(["127.0.0.1:7420"]);
 * const id: bigint = await client.nextId();
 * await client.close();
 * ```
 */
export class Client {
  /** The nodes; replaced as a whole (never changed in place) when `expand` re-resolves. */
  private nodeList: Node[];
  /** The nodes as configured (with `expand`, the names resolved into `nodeList`). */
  private readonly entries: readonly Node[];
  private readonly expand: boolean;
  private readonly lookup: (host: string) => Promise<readonly string[]>;
  private firstResolve: Promise<void> | null = null;
  private resolving = false;
  private lastResolve = -Infinity;
  private readonly observer: Observer;
  private readonly timeoutMs: number;
  private readonly connectTimeoutMs: number;
  private readonly backoffMinMs: number;
  private readonly backoffMaxMs: number;
  private readonly tls: TlsSettings | null;
  private readonly maxVersion: number;
  private preferred: Node | null = null;
  private cachedLayout: Layout | null = null;
  private closed = false;
  private token = 0n;
  private readonly prefetch: SequencePrefetch | null;
  private readonly counters: ClientStats = { connects: 0, requests: 0, ids: 0, pings: 0, uuidRequests: 0, uuids: 0, valueRequests: 0, values: 0, nodeFailures: 0, failovers: 0, rangeChanges: 0, reconnects: 0 };

  constructor(nodes: string | readonly string[], options: ClientOptions = {}) {
    const list = typeof nodes === "string" ? [nodes] : [...nodes];
    if (list.length === 0) throw new RangeError("at least one node is required");
    if (new Set(list).size !== list.length) throw new RangeError("nodes must be distinct");
    this.nodeList = list.map((n) => new Node(n));
    this.entries = this.nodeList;
    this.timeoutMs = positive(options.timeoutMs, 1000, "timeoutMs");
    this.connectTimeoutMs = positive(options.connectTimeoutMs, 1000, "connectTimeoutMs");
    this.backoffMinMs = positive(options.backoffMinMs, 200, "backoffMinMs");
    this.backoffMaxMs = positive(options.backoffMaxMs, 10000, "backoffMaxMs");
    if (this.backoffMinMs > this.backoffMaxMs) throw new RangeError("need backoffMinMs <= backoffMaxMs");
    const v = options.maxVersion ?? MAX_VERSION;
    if (!Number.isInteger(v) || v < MIN_VERSION || v > MAX_VERSION) throw new RangeError(`maxVersion must be ${MIN_VERSION}..${MAX_VERSION}`);
    this.maxVersion = v;
    const k = options.sequencePrefetch ?? 0;
    if (typeof k !== "number" || !Number.isInteger(k) || k < 0 || k > MAX_VALUES_PER_CALL) {
      throw new RangeError(`sequencePrefetch must be an integer in 0..=${MAX_VALUES_PER_CALL}`);
    }
    this.prefetch = k > 0 ? new SequencePrefetch(k, (name, n, ask, o) => this.requestValues(name, n, ask, o)) : null;
    this.tls = options.tls !== undefined ? loadTls(options.tls) : null;
    if (options.expand !== undefined && typeof options.expand !== "boolean") throw new TypeError("expand must be true or false");
    this.expand = options.expand ?? false;
    if (options.lookup !== undefined && typeof options.lookup !== "function") throw new TypeError("lookup must be a function (host) => Promise<string[]>");
    this.lookup = options.lookup ?? defaultLookup;
    this.observer = new Observer(checkHooks(options.hooks));
    if (this.expand) {
      this.firstResolve = this.resolve().catch(() => undefined).finally(() => {
        this.firstResolve = null;
      });
    }
  }

  /**
   * A client configured by an `idgen://` / `idgens://` URL (clients/vectors/CONFIG.md; see
   * {@link parseUrl}). `options` add what a URL does not hold (hooks, backoff, prefetch, ...); a
   * setting given both in `options` and in the URL is a ConfigError, never a silent precedence.
   *
   * ```ts
   * const client = Client.fromUrl("idgens://n1:7420,n2:7420?ca=/etc/idgen/ca.crt&timeout_ms=500");
   * ```
   */
  static fromUrl(url: string, options: ClientOptions = {}): Client {
    return Client.fromConfig(parseUrl(url), options);
  }

  /**
   * A client configured by the environment: `IDGEN_NODES` (a URL or `host:port,host:port`) and
   * the `IDGEN_CLIENT_*` variables (see {@link configFromEnv}). `env` defaults to `process.env`.
   */
  static fromEnv(options: ClientOptions = {}, env: Readonly<Record<string, string | undefined>> = process.env): Client {
    return Client.fromConfig(configFromEnv(env), options);
  }

  /** A client from a parsed configuration ({@link parseUrl}, {@link configFromEnv}) and the
   * options it does not hold; a setting given both ways is a ConfigError. */
  static fromConfig(config: IdgenConfig, options: ClientOptions = {}): Client {
    const given = givenSettings(config);
    const both = (setting: keyof IdgenConfig, option: string, inCode: boolean) => {
      if (given.has(setting) && inCode) {
        throw new ConfigError(`${option} is given both in code and in the URL or environment (${setting}): each setting has one source`);
      }
    };
    both("timeoutMs", "timeoutMs", options.timeoutMs !== undefined);
    both("connectTimeoutMs", "connectTimeoutMs", options.connectTimeoutMs !== undefined);
    both("expand", "expand", options.expand !== undefined);
    let tls = options.tls;
    if (config.tls) {
      const t: TlsOptions = options.tls ?? {};
      both("ca", "tls.ca / tls.caFile", t.ca !== undefined || t.caFile !== undefined);
      both("cert", "tls.cert / tls.certFile", t.cert !== undefined || t.certFile !== undefined);
      both("key", "tls.key / tls.keyFile", t.key !== undefined || t.keyFile !== undefined);
      both("serverName", "tls.serverName", t.serverName !== undefined);
      tls = {
        ...t,
        ...(config.ca !== null ? { caFile: config.ca } : {}),
        ...(config.cert !== null ? { certFile: config.cert } : {}),
        ...(config.key !== null ? { keyFile: config.key } : {}),
        ...(config.serverName !== null ? { serverName: config.serverName } : {}),
      };
    } else if (options.tls !== undefined) {
      throw new ConfigError("options.tls is given, but the URL or environment configures plain TCP (idgen://, no IDGEN_CLIENT_* TLS variable): use idgens://");
    }
    const merged: ClientOptions = { ...options };
    if (tls !== undefined) merged.tls = tls;
    if (config.timeoutMs !== null) merged.timeoutMs = config.timeoutMs;
    if (config.connectTimeoutMs !== null) merged.connectTimeoutMs = config.connectTimeoutMs;
    if (given.has("expand")) merged.expand = config.expand;
    return new Client(config.nodes, merged);
  }

  // -- public API ----------------------------------------------------------------------------

  /** One ID. With `after` or `idempotencyKey` see {@link nextIds}. */
  async nextId(options?: IdOptions): Promise<bigint> {
    const ids = await this.nextIds(1, options);
    return ids[0]!;
  }

  /** One ID in one of its string forms (default decimal). */
  async nextIdString(form: IdForm = "decimal", options?: CallOptions): Promise<string> {
    const id = await this.nextId(options);
    return formatId(id, form);
  }

  /**
   * `n` IDs, increasing, from one node (all or nothing), as a `BigUint64Array` (elements are
   * `bigint`; `Array.from(ids)` gives a `bigint[]`). Above the node's max_batch the request is
   * split into pipelined frames and re-joined. `n` is an integer in `1 ..= 16777216`: `0`, like
   * a negative count, is refused with a RangeError before anything is sent (CONFIG.md, "Count
   * 0"); a call never returns an empty batch.
   *
   * With `options.after` or `options.idempotencyKey` (protocol version 5, GET_IDS_WITH; see
   * {@link IdOptions}) the call is one frame: `1 <= n <= max_batch`. It needs a node of
   * version 5 (IdsWithUnsupportedError, never a silent fallback that drops the options). A
   * keyed call goes to the node the key hashes to and is not retried on another one.
   */
  nextIds(n: number, options?: IdOptions): Promise<BigUint64Array> {
    if (options !== undefined && ((options.after ?? null) !== null || (options.idempotencyKey ?? null) !== null)) {
      return this.observed("ids_with", n, (record) => this.idsWith(n, options, false, record).then((r) => r.ids));
    }
    return this.observed("ids", n, (record) => {
      if (typeof n !== "number" || !Number.isInteger(n)) return Promise.reject(new TypeError(`n must be an integer, not ${String(n)}`));
      if (n < 1 || n > MAX_IDS_PER_CALL) return Promise.reject(new RangeError(`n must be 1..=${MAX_IDS_PER_CALL}, not ${n} (a count of 0 is refused, nothing sent)`));
      return this.withFailover(
        (conn) => {
          this.counters.requests++;
          record.op = conn.hello.version >= 2 ? "ranges" : "ids";
          return conn.fetch(n).then((ids) => {
            this.counters.ids += ids.length;
            return ids;
          });
        },
        options,
        record,
      );
    });
  }

  /**
   * `n` IDs masked by the node with its current masking key (protocol version 5, GET_IDS_WITH
   * masked; the node runs with `IDGEN_MASK_KEYS`, else `205 INVALID_OPTION`): the key's ID,
   * the masked integers and their 12-character string forms (built here, without the key).
   * `after` and `idempotencyKey` as for {@link nextIds}; `1 <= n <= max_batch`.
   */
  nextMaskedIds(n: number, options?: IdOptions): Promise<MaskedIds> {
    return this.observed("masked_ids", n, (record) =>
      this.idsWith(n, options ?? {}, true, record).then((r) => {
        const keyId = r.keyId!;
        return { keyId, values: r.ids, strings: Array.from(r.ids, (v) => maskedString(keyId, v)) };
      }),
    );
  }

  /** One GET_IDS_WITH call: checks, the key's node, failover only without a key. */
  private idsWith(n: number, options: IdOptions, masked: boolean, record: CallRecord): Promise<IdsWith> {
    if (typeof n !== "number" || !Number.isInteger(n)) return Promise.reject(new TypeError(`n must be an integer, not ${String(n)}`));
    if (n < 1) return Promise.reject(new RangeError(`n must be >= 1, not ${n}`));
    const after = options.after ?? null;
    const key = options.idempotencyKey ?? null;
    if (after !== null && (typeof after !== "bigint" || after < 0n || after >= 1n << 63n)) {
      return Promise.reject(new RangeError(`after must be an ID (a bigint in 0..2^63), not ${String(after)}`));
    }
    if (key !== null && !isIdempotencyKey(key)) {
      return Promise.reject(new RangeError("an idempotency key is 1 to 64 visible ASCII characters (! to ~)"));
    }
    const opts: IdsWithOptions = { after, key, masked };
    return this.withFailover(
      (conn) => {
        if (!conn.idsWith) throw new IdsWithUnsupportedError(conn.hello.version, conn.node);
        if (n > conn.hello.maxBatch) throw new RangeError(`n ${n} is above the node's max_batch ${conn.hello.maxBatch} (a call with options is one request)`);
        this.counters.requests++;
        return conn.fetchIdsWith(n, opts).then((r) => {
          this.counters.ids += r.ids.length;
          return r;
        });
      },
      options,
      record,
      key,
    );
  }

  /** One version 7 UUID, in canonical text form. See {@link nextUuids}. */
  async nextUuid(options?: CallOptions): Promise<string> {
    const uuids = await this.nextUuids(1, options);
    return uuids[0]!;
  }

  /**
   * `n` RFC 9562 version 7 UUIDs from one node, strictly increasing, all or nothing (protocol
   * version 4, GET_UUIDS), each as a string in canonical form: lowercase, 8-4-4-4-12 hex
   * digits (`"019b71b4-4c7b-7800-8000-123456789abc"`). JavaScript has no UUID type; this is the
   * form `crypto.randomUUID()` returns, databases and JSON take, and that sorts (as strings)
   * exactly as the UUIDs' bytes do. The node makes each from one ID it issues (the ID's
   * millisecond, worker and sequence, then random bits), so they are unique across the
   * cluster as its IDs are; {@link Layout.decodeUuid} takes one apart.
   *
   * `n` is an integer in `1 ..= 16777216` (else TypeError or RangeError, nothing sent). Above
   * the node's max_batch the request is split into pipelined frames and re-joined; failover
   * as for {@link nextIds}. Every answer is checked (count, version 7, variant, increasing on
   * the connection): a ProtocolError otherwise. A node that negotiated a version below 4 gives
   * UuidsUnsupportedError: nothing sent, no other node tried.
   */
  nextUuids(n: number, options?: CallOptions): Promise<string[]> {
    return this.observed("uuids", n, (record) => {
      if (typeof n !== "number" || !Number.isInteger(n)) return Promise.reject(new TypeError(`n must be an integer, not ${String(n)}`));
      if (n < 1 || n > MAX_IDS_PER_CALL) return Promise.reject(new RangeError(`n must be 1..=${MAX_IDS_PER_CALL}, not ${n}`));
      return this.withFailover(
        (conn) => {
          if (!conn.uuids) throw new UuidsUnsupportedError(conn.hello.version, conn.node);
          this.counters.uuidRequests++;
          return conn.fetchUuids(n).then((uuids) => {
            this.counters.uuids += uuids.length;
            return uuids;
          });
        },
        options,
        record,
      );
    });
  }

  /** Take a version 7 UUID apart with the cluster's layout (connects if needed). */
  async decodeUuid(uuid: string): Promise<UuidParts> {
    return (await this.layout()).decodeUuid(uuid);
  }

  /**
   * One value of the named sequence `name` (protocol version 3): a positive `bigint` below
   * 2^63. See {@link nextValues}.
   */
  async nextValue(name: string, options?: CallOptions): Promise<bigint> {
    const values = await this.nextValues(name, 1, options);
    return values[0]!;
  }

  /**
   * `n` values of the named sequence `name` (created by an operator with `idgen seq create`),
   * strictly increasing, as a `BigUint64Array` (elements are `bigint`, in `1 ..= 2^63 - 1`).
   * `name` is 1 to 64 bytes of `a-z`, `0-9`, `.`, `_` and `-` starting with a letter or a
   * digit, and `1 <= n <= max_batch` of the node (and at most 1048576): else TypeError or
   * RangeError, and nothing is sent.
   *
   * Rejects with ServerError `203 UNKNOWN_SEQUENCE`, `204 INVALID_SEQUENCE_NAME` or
   * `307 SEQUENCE_USED_UP` at once (every node would answer the same); `308
   * SEQUENCE_UNAVAILABLE` fails over like any retry-elsewhere status; a node that speaks
   * version 1 or 2 gives SequencesUnsupportedError. With `sequencePrefetch` set, calls on a
   * dense sequence are answered from a buffer (see {@link ClientOptions.sequencePrefetch}).
   */
  nextValues(name: string, n: number, options?: CallOptions): Promise<BigUint64Array> {
    return this.observed("values", n, (record) => {
      const bad = checkSequenceArgs(name, n);
      if (bad !== null) return Promise.reject(bad);
      if (options !== undefined) {
        try {
          checkCall(options);
        } catch (e) {
          return Promise.reject(e);
        }
      }
      if (this.closed) return Promise.reject(new ClientClosedError());
      if (this.prefetch !== null) return this.prefetch.take(name, n, options);
      return this.requestValues(name, n, n, options, record).then((v) => v.values);
    });
  }

  /** What the sequence prefetch holds for `name`: its learnt mode, the values buffered and the
   * calls waiting (`null`: nothing, or prefetch is off). */
  sequenceState(name: string): SequenceBufferState | null {
    return this.prefetch?.state(name) ?? null;
  }

  /** PING a node (with failover); resolves with the round-trip time in ms. */
  ping(options?: CallOptions): Promise<number> {
    return this.observed("ping", 1, (record) =>
      this.withFailover(
        (conn) => {
          this.counters.pings++;
          this.token = (this.token + 1n) & 0xffff_ffff_ffff_ffffn;
          return conn.ping(this.token);
        },
        options,
        record,
      ),
    );
  }

  /** The cluster's ID layout (from the first HELLO_OK; connects if needed). */
  async layout(options?: CallOptions): Promise<Layout> {
    if (this.cachedLayout === null) await this.withFailover(async () => undefined, options, { op: null, node: null });
    return this.cachedLayout!;
  }

  /** Take an ID apart with the cluster's layout (connects if needed). */
  async decode(id: bigint): Promise<IdParts> {
    return (await this.layout()).decode(id);
  }

  /** Counters (a copy). */
  stats(): ClientStats {
    return { ...this.counters };
  }

  /** Each node's state. */
  nodes(): NodeState[] {
    const now = performance.now();
    return this.nodeList.map((n) => ({
      node: n.addr,
      connected: n.conn !== null && n.conn.alive,
      down: n.downUntil > now,
      retryInMs: Math.max(0, n.downUntil - now),
      failures: n.failures,
      lastError: n.lastError,
      hello: n.conn?.hello ?? null,
      tlsVersion: n.conn?.tlsVersion ?? null,
      alpn: n.conn?.alpn ?? null,
    }));
  }

  /** Whether {@link close} was called. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Close every connection. Waiting calls fail with ClientClosedError. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.prefetch?.clear(new ClientClosedError());
    for (const node of this.nodeList) {
      const conn = node.conn;
      node.conn = null;
      conn?.close();
      node.connecting?.then((c) => c.close(), () => undefined);
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * One GET_VALUES for at least `n` (the call's need) and up to `ask` values of `name`, capped
   * at what the node accepts (`min(max_batch, 2^20)`), with failover. Refused before sending
   * on a node below version 3 (SequencesUnsupportedError) and for `n` above the node's limit
   * (RangeError).
   */
  private requestValues(name: string, n: number, ask: number, options?: CallOptions, record: CallRecord = { op: "values", node: null }): Promise<Values> {
    return this.withFailover((conn) => {
      if (!conn.sequences) throw new SequencesUnsupportedError(conn.hello.version, conn.node);
      const cap = Math.min(conn.hello.maxBatch, MAX_VALUES_PER_CALL);
      if (n > cap) throw new RangeError(`n ${n} is above the node's max_batch ${conn.hello.maxBatch}${cap < conn.hello.maxBatch ? " (or 1048576)" : ""}`);
      const length = 5 + Buffer.byteLength(name, "utf8");
      if (length > conn.hello.maxRequestFrame) {
        throw new RangeError(`GET_VALUES for ${JSON.stringify(name)} is a ${length}-byte frame, above the node's max_request_frame ${conn.hello.maxRequestFrame}`);
      }
      const count = Math.max(n, Math.min(ask, cap));
      this.counters.requests++;
      this.counters.valueRequests++;
      return conn.fetchValues(name, count).then((v) => {
        this.counters.values += v.values.length;
        return v;
      });
    }, options, record);
  }

  /** Runs one user call and reports it as a `request` event (when anyone listens). */
  private observed<T>(op: IdgenOp, count: number, call: (record: CallRecord) => Promise<T>): Promise<T> {
    const record: CallRecord = { op, node: null };
    if (!this.observer.wants("request")) return call(record);
    const started = performance.now();
    const report = (error: Error | null) => {
      const outcome = error === null ? "ok" : error instanceof ServerError ? (error.statusName ?? `STATUS_${error.code}`) : error.name;
      this.observer.emit("request", { op: record.op ?? op, count, node: record.node, durationMs: performance.now() - started, outcome, error });
    };
    let p: Promise<T>;
    try {
      p = call(record);
    } catch (e) {
      p = Promise.reject(e);
    }
    return p.then(
      (r) => {
        report(null);
        return r;
      },
      (e: unknown) => {
        report(e instanceof Error ? e : new Error(String(e)));
        throw e;
      },
    );
  }

  // -- names with several addresses (expand) ------------------------------------------------

  /**
   * Resolve every configured name and rebuild the node list: the entries in order, each
   * replaced by its addresses (duplicates removed). A known address keeps its node (connection,
   * backoff); a name that resolves to nothing stays a node of its own (down: its connects
   * fail); an address that is gone is kept while its connection lives.
   */
  private async resolve(): Promise<void> {
    this.resolving = true;
    this.lastResolve = performance.now();
    try {
      const found = await Promise.all(
        this.entries.map((e) =>
          net.isIP(e.host) !== 0
            ? Promise.resolve([e.host])
            : this.lookup(e.host).then(
                (a) => [...a],
                () => [] as string[],
              ),
        ),
      );
      if (this.closed) return;
      const old = new Map(this.nodeList.map((n) => [n.addr, n]));
      const next: Node[] = [];
      const seen = new Set<string>();
      const add = (addr: string, make: () => Node) => {
        if (seen.has(addr)) return;
        const known = old.get(addr);
        let node: Node;
        try {
          node = known ?? make();
        } catch {
          return; // not an address (a custom lookup's answer): skipped
        }
        seen.add(addr);
        node.gone = false;
        next.push(node);
      };
      this.entries.forEach((entry, i) => {
        let usable = 0;
        for (const a of found[i]!) {
          if (typeof a !== "string" || a === "") continue;
          const addr = addressNode(a, entry.port);
          add(addr, () => new Node(addr, entry.host));
          if (seen.has(addr)) usable++;
        }
        // A name that resolves to nothing stays a node of its own: down, its connects fail.
        if (usable === 0) add(entry.addr, () => new Node(entry.addr));
      });
      for (const n of this.nodeList) {
        if (seen.has(n.addr)) continue;
        if (n.conn !== null && n.conn.alive) {
          n.gone = true;
          next.push(n);
        } else {
          n.connecting?.then((c) => c.close(), () => undefined);
        }
      }
      this.nodeList = next;
    } finally {
      this.resolving = false;
    }
  }

  /** After a node failed: resolve the names again, at most once a second. */
  private reresolve(): void {
    if (!this.expand || this.closed || this.resolving || performance.now() - this.lastResolve < RESOLVE_INTERVAL_MS) return;
    void this.resolve().catch(() => undefined);
  }

  /** Drop a node whose address is gone from its name (its connection failed). */
  private forget(node: Node): void {
    if (node.gone) this.nodeList = this.nodeList.filter((n) => n !== node);
  }

  // -- failover ----------------------------------------------------------------------------

  /**
   * `pinKey`: an idempotency key; the one node to use is the one it hashes to in the node list
   * as it is now: it is tried even while backing off, never another node; a failure that would
   * go elsewhere is thrown as IdempotencyKeyNodeError.
   */
  private async withFailover<T>(run: (conn: Connection) => Promise<T>, options: CallOptions | undefined, record: CallRecord, pinKey: string | null = null): Promise<T> {
    if (this.closed) throw new ClientClosedError();
    const deadline = options !== undefined && (options.timeoutMs !== undefined || options.signal !== undefined) ? new Deadline(checkCall(options)) : null;
    try {
      if (this.firstResolve !== null) {
        await (deadline ? deadline.race(this.firstResolve) : this.firstResolve);
        if (this.closed) throw new ClientClosedError();
      }
      const list = this.nodeList;
      const count = list.length;
      const pinned = pinKey !== null ? list[keyNodeIndex(pinKey, count)]! : null;
      const order: Node[] = [];
      if (pinned !== null) order.push(pinned);
      else {
        const start = this.preferred !== null ? Math.max(0, list.indexOf(this.preferred)) : 0;
        for (let k = 0; k < count; k++) order.push(list[(start + k) % count]!);
      }
      const tried: Error[] = [];
      const reconnected = new Set<Node>();
      let moving: { from: string; reason: string } | null = null;
      while (order.length > 0) {
        const node = order.shift()!;
        if (pinned === null && node.downUntil > performance.now()) continue;
        if (moving !== null) {
          this.counters.failovers++;
          this.observer.emit("failover", { from: moving.from, to: node.addr, reason: moving.reason });
          moving = null;
        }
        let conn: Connection | null = null;
        try {
          const c = node.conn !== null && node.conn.alive ? node.conn : deadline ? await deadline.race(this.connection(node)) : await this.connection(node);
          conn = c;
          const result = deadline ? await deadline.race(run(c)) : await run(c);
          if (node.failures !== 0) {
            node.failures = 0;
            this.observer.emit("node_up", { node: node.addr, reason: "answered a call" });
          }
          if (pinned === null) this.preferred = node;
          record.node = node.addr;
          return result;
        } catch (e) {
          if (e instanceof DeadlineError || e instanceof ClientClosedError) throw e;
          if (this.closed) throw new ClientClosedError();
          if (e instanceof ServerError) {
            this.observer.emit("refused", { node: node.addr, op: conn === null || record.op === null ? "hello" : record.op, status: e.code, statusName: e.statusName ?? `STATUS_${e.code}`, message: e.serverMessage });
            if (e.code === RANGE_CHANGED && !reconnected.has(node)) {
              // The node took another worker range and closed this connection. The node is
              // fine: reconnect at once and retry the whole call there, once.
              reconnected.add(node);
              this.counters.rangeChanges++;
              this.drop(node, conn);
              order.unshift(node);
              continue;
            }
            if (!e.retryElsewhere && !e.closes) {
              // A 2xx or 304 (or 307): every node would say the same.
              record.node = node.addr; // the node answered: with this status
              throw e;
            }
            // A 3xx, or a status that closes the connection (1xx, 5xx): a node failure. Back
            // the node off; keep a connection the status leaves open.
            this.markDown(node, conn, e, !e.closes);
            tried.push(e);
            moving = { from: node.addr, reason: `${e.code} ${e.statusName ?? "UNKNOWN"}` };
            continue;
          }
          if (e instanceof UnavailableError || e instanceof ProtocolError) {
            this.markDown(node, conn, e, false);
            tried.push(e);
            moving = { from: node.addr, reason: e.message };
            continue;
          }
          throw e;
        }
      }
      if (pinned !== null && tried.length > 0) throw new IdempotencyKeyNodeError(pinned.addr, tried[tried.length - 1]!);
      if (tried.length === 1) throw tried[0]!;
      const now = performance.now();
      const errors = new Map<string, Error | null>(list.map((n) => [n.addr, n.lastError]));
      const retry = new Map<string, number>();
      for (const n of list) if (n.downUntil > now) retry.set(n.addr, n.downUntil - now);
      throw new NoNodeAvailableError(errors, retry);
    } finally {
      deadline?.dispose();
    }
  }

  /** The node's live connection, or a new one (one connect at a time per node). */
  private connection(node: Node): Promise<Connection> {
    if (node.conn !== null && node.conn.alive) return Promise.resolve(node.conn);
    if (node.connecting !== null) return node.connecting;
    const started = performance.now();
    // With expand, TLS verifies (and sends as SNI) the name the address came from.
    const tls = this.tls !== null && node.tlsName !== null && this.tls.serverName === undefined ? { ...this.tls, serverName: node.tlsName } : this.tls;
    const p = Connection.open({
      host: node.host,
      port: node.port,
      node: node.addr,
      connectTimeoutMs: this.connectTimeoutMs,
      timeoutMs: this.timeoutMs,
      tls,
      maxVersion: this.maxVersion,
    }).then((conn) => {
      if (this.closed) {
        conn.close();
        throw new ClientClosedError();
      }
      const layout = new Layout(conn.hello);
      if (this.cachedLayout === null) {
        this.cachedLayout = layout;
      } else if (!this.cachedLayout.equals(layout)) {
        conn.close();
        throw new ProtocolError(`node's ID layout ${layout} differs from the cluster's ${this.cachedLayout}`, null, node.addr);
      }
      this.counters.connects++;
      node.conn = conn;
      conn.onClose = () => {
        if (node.conn === conn) node.conn = null;
        this.forget(node);
      };
      if (this.observer.wants("connect")) {
        this.observer.emit("connect", { node: node.addr, address: conn.remoteAddress, version: conn.hello.version, durationMs: performance.now() - started });
      }
      return conn;
    });
    p.then(undefined, (e: unknown) => {
      if (!(e instanceof ClientClosedError) && this.observer.wants("connect_failed")) {
        this.observer.emit("connect_failed", { node: node.addr, error: e instanceof Error ? e : new Error(String(e)), durationMs: performance.now() - started });
      }
    });
    node.connecting = p;
    const clear = () => {
      if (node.connecting === p) node.connecting = null;
    };
    p.then(clear, clear);
    return p;
  }

  private drop(node: Node, conn: Connection | null): void {
    if (conn === null) return;
    if (node.conn === conn) node.conn = null;
    conn.fail(new UnavailableError("connection dropped", node.addr));
  }

  /**
   * Back a node off. Only the first report of one failure counts: reports about an older
   * connection, or while the node is already backing off, do not extend it. `keep`: the node
   * answered with a status that leaves `conn` usable.
   */
  private markDown(node: Node, conn: Connection | null, err: Error, keep: boolean): void {
    const now = performance.now();
    const stale = conn !== null && node.conn !== null && node.conn !== conn;
    if (conn !== null && node.conn === conn && !keep) node.conn = null;
    if (stale || node.downUntil > now) {
      node.lastError = node.lastError ?? err;
    } else {
      node.failures++;
      const delay = Math.min(this.backoffMaxMs, this.backoffMinMs * 2 ** (node.failures - 1));
      node.downUntil = now + delay;
      node.lastError = err;
      this.counters.nodeFailures++;
      this.observer.emit("node_down", { node: node.addr, reason: err.message, retryInMs: delay });
    }
    if (conn !== null && !keep) conn.fail(err);
    if (!keep) this.forget(node);
    this.reresolve();
  }
}

const MAX_NAME = MAX_SEQUENCE_NAME_BYTES;

/** The invalid-argument error for a sequence call's `name` and `n`, or null. */
function checkSequenceArgs(name: unknown, n: unknown): Error | null {
  if (typeof name !== "string") return new TypeError(`a sequence name is a string, not ${typeof name}`);
  if (!isSequenceName(name)) {
    const shown = name.length > 80 ? `${JSON.stringify(name.slice(0, 80))}...` : JSON.stringify(name);
    return new RangeError(`sequence name ${shown} is not 1 to ${MAX_NAME} bytes of a-z, 0-9, '.', '_' and '-' starting with a letter or a digit`);
  }
  if (typeof n !== "number" || !Number.isInteger(n)) return new TypeError(`n must be an integer, not ${String(n)}`);
  if (n < 1 || n > MAX_VALUES_PER_CALL) return new RangeError(`n must be 1..=${MAX_VALUES_PER_CALL} (and at most the node's max_batch), not ${n}`);
  return null;
}

/** An ID in one of its string forms. */
export function formatId(id: bigint, form: IdForm): string {
  switch (form) {
    case "decimal":
      return toDecimal(id);
    case "base62":
      return toBase62(id);
    case "base32":
      return toBase32(id);
    default:
      throw new RangeError(`unknown ID form ${JSON.stringify(form)}`);
  }
}

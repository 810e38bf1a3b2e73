/**
 * Frame encoder and decoder for the idgen wire protocol, versions 1 to 5
 * (protocol/PROTOCOL.md). Pure functions, no I/O. Framing faults throw ProtocolError with
 * `status` 100 (BAD_FRAME) or 101 (FRAME_TOO_LARGE), exactly as the shared vectors expect.
 *
 * IDs are `bigint` (or elements of a `BigUint64Array`, which are `bigint` too), never
 * `number`: an idgen ID needs up to 63 bits and a JavaScript number holds 53 exactly.
 */

import { ProtocolError } from "./errors.js";
import { BAD_FRAME, FRAME_TOO_LARGE } from "./status.js";

export const MAGIC = Buffer.from("IDGN", "latin1");
/** The versions this client speaks: 1 (GET_IDS), 2 (GET_RANGES), 3 (GET_VALUES, named
 * sequences), 4 (GET_UUIDS, version 7 UUIDs) and 5 (GET_IDS_WITH, MASKED_IDS). */
export const MIN_VERSION = 1;
export const MAX_VERSION = 5;
/** The first version with named sequences (GET_VALUES/VALUES). */
export const SEQUENCES_VERSION = 3;
/** The first version with UUIDs (GET_UUIDS/UUIDS). */
export const UUIDS_VERSION = 4;
/** The first version with GET_IDS_WITH/MASKED_IDS (after, idempotency keys, masked IDs). */
export const IDS_WITH_VERSION = 5;

export const OP_HELLO = 0x01;
export const OP_GET_IDS = 0x02;
export const OP_PING = 0x03;
export const OP_GET_RANGES = 0x04;
export const OP_GET_VALUES = 0x05;
export const OP_GET_UUIDS = 0x06;
export const OP_GET_IDS_WITH = 0x07;
export const OP_HELLO_OK = 0x81;
export const OP_IDS = 0x82;
export const OP_PONG = 0x83;
export const OP_RANGES = 0x84;
export const OP_VALUES = 0x85;
export const OP_UUIDS = 0x86;
export const OP_MASKED_IDS = 0x87;
export const OP_ERROR = 0xff;

const HELLO_OK_LENGTH = 33;
const PONG_LENGTH = 9;
const ERROR_MIN_LENGTH = 3;
const ERROR_MAX_LENGTH = 258; // 3 + 255 bytes of message
const MAX_U32 = 0xffff_ffff;
const MAX_U64 = (1n << 64n) - 1n;

/** The longest sequence name GET_VALUES carries, in bytes. */
export const MAX_SEQUENCE_NAME_BYTES = 64;
/** The most values one GET_VALUES may ask for, whatever the node's max_batch (2^20). */
export const MAX_VALUES_PER_CALL = 1 << 20;

export const DEFAULT_MAX_BATCH = 65536;
/** Response frame limit before HELLO_OK has arrived (section 7): 6 + 8 * 65536, a VALUES
 * frame of 65536 values (an IDS frame is one byte shorter). */
export const DEFAULT_MAX_RESPONSE_FRAME = 6 + 8 * DEFAULT_MAX_BATCH;

/** HELLO_OK (0x81): negotiated version, ID layout and the connection's limits. */
export interface HelloOk {
  readonly version: number;
  /** Unix time in ms of the ID epoch (a u64 on the wire). */
  readonly epochMs: bigint;
  readonly timestampBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;
  readonly regionBits: number;
  readonly maxBatch: number;
  readonly maxRequestFrame: number;
  readonly workerFirst: number;
  readonly workerCount: number;
  readonly shard: number;
}

/** A run of consecutive IDs in a RANGES frame. */
export interface Run {
  readonly first: bigint;
  readonly count: number;
}

/** A named sequence's mode, as VALUES says it: `0` dense, `1` strict. */
export type SequenceMode = "dense" | "strict";

export type Response =
  | { readonly op: "HELLO_OK"; readonly hello: HelloOk }
  | { readonly op: "IDS"; readonly ids: BigUint64Array }
  | { readonly op: "RANGES"; readonly total: number; readonly runs: RangesView }
  | { readonly op: "VALUES"; readonly mode: SequenceMode; readonly values: BigUint64Array }
  | { readonly op: "UUIDS"; readonly uuids: string[] }
  | { readonly op: "MASKED_IDS"; readonly keyId: number; readonly ids: BigUint64Array }
  | { readonly op: "PONG"; readonly token: bigint }
  | { readonly op: "ERROR"; readonly status: number; readonly message: string };

/** A decoded frame and the bytes it used (the rest belongs to the next frame). */
export interface Decoded {
  readonly frame: Response;
  readonly consumed: number;
}

// ---------------------------------------------------------------------------------------
// Requests

/** HELLO (0x01): magic `IDGN` and the inclusive range of versions offered. */
export function encodeHello(minVersion: number = MIN_VERSION, maxVersion: number = MAX_VERSION): Buffer {
  checkUint(minVersion, 0xffff, "min_version");
  checkUint(maxVersion, 0xffff, "max_version");
  const b = Buffer.allocUnsafe(13);
  b.writeUInt32BE(9, 0);
  b[4] = OP_HELLO;
  MAGIC.copy(b, 5);
  b.writeUInt16BE(minVersion, 9);
  b.writeUInt16BE(maxVersion, 11);
  return b;
}

/** GET_IDS (0x02) for `count` IDs. Any u32 is encoded (the server answers 0 and counts above
 * max_batch with an ERROR that keeps the connection open). */
export function encodeGetIds(count: number): Buffer {
  return encodeCount(OP_GET_IDS, count);
}

/** GET_RANGES (0x04, version 2) for `count` IDs, answered as runs. */
export function encodeGetRanges(count: number): Buffer {
  return encodeCount(OP_GET_RANGES, count);
}

/** Whether `name` is a sequence name: 1 to 64 bytes of `a-z`, `0-9`, `.`, `_` and `-`, the
 * first a letter or a digit (PROTOCOL.md section 3.5). */
export function isSequenceName(name: unknown): boolean {
  return typeof name === "string" && SEQUENCE_NAME.test(name);
}

const SEQUENCE_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/**
 * GET_VALUES (0x05, version 3) for `count` values of the sequence `name`. Any u32 count and
 * any name of 1 to 64 bytes (UTF-8) is encoded, so that a server's refusals can be exercised;
 * the client checks names with {@link isSequenceName} before it sends one.
 */
export function encodeGetValues(count: number, name: string): Buffer {
  checkUint(count, MAX_U32, "count");
  if (typeof name !== "string") throw new TypeError(`a sequence name is a string, not ${typeof name}`);
  const bytes = Buffer.from(name, "utf8");
  if (bytes.length < 1 || bytes.length > MAX_SEQUENCE_NAME_BYTES) {
    throw new RangeError(`a sequence name is 1 to ${MAX_SEQUENCE_NAME_BYTES} bytes, not ${bytes.length}`);
  }
  const b = Buffer.allocUnsafe(9 + bytes.length);
  b.writeUInt32BE(5 + bytes.length, 0);
  b[4] = OP_GET_VALUES;
  b.writeUInt32BE(count, 5);
  bytes.copy(b, 9);
  return b;
}

function encodeCount(op: number, count: number): Buffer {
  checkUint(count, MAX_U32, "count");
  const b = Buffer.allocUnsafe(9);
  b.writeUInt32BE(5, 0);
  b[4] = op;
  b.writeUInt32BE(count, 5);
  return b;
}

/** GET_UUIDS (0x06, version 4) for `count` version 7 UUIDs, answered with UUIDS. */
export function encodeGetUuids(count: number): Buffer {
  return encodeCount(OP_GET_UUIDS, count);
}

/** GET_IDS_WITH's options (version 5). */
export interface IdsWithOptions {
  /** Every ID answered is greater than this one (an ID the caller has seen). */
  readonly after?: bigint | null;
  /** An idempotency key: 1 to 64 visible ASCII bytes (`!` to `~`). */
  readonly key?: string | null;
  /** Answer MASKED_IDS: the IDs masked with the node's current key. */
  readonly masked?: boolean;
}

export const IDS_WITH_AFTER = 0x01;
export const IDS_WITH_KEY = 0x02;
export const IDS_WITH_MASKED = 0x04;
export const MAX_IDEMPOTENCY_KEY_BYTES = 64;

/** Whether `key` is an idempotency key: 1 to 64 visible ASCII characters. */
export function isIdempotencyKey(key: unknown): key is string {
  return typeof key === "string" && /^[!-~]{1,64}$/.test(key);
}

/** GET_IDS_WITH (0x07, version 5) for `count` IDs with options (PROTOCOL.md 3.8). */
export function encodeGetIdsWith(count: number, opts: IdsWithOptions = {}): Buffer {
  checkUint(count, MAX_U32, "count");
  const after = opts.after ?? null;
  const key = opts.key ?? null;
  if (after !== null && (typeof after !== "bigint" || after < 0n || after > MAX_U64 >> 1n)) {
    throw new RangeError(`after ${String(after)} is not an ID (a u63 bigint)`);
  }
  if (key !== null && !isIdempotencyKey(key)) {
    throw new RangeError("an idempotency key is 1 to 64 visible ASCII characters (! to ~)");
  }
  let flags = 0;
  if (after !== null) flags |= IDS_WITH_AFTER;
  if (key !== null) flags |= IDS_WITH_KEY;
  if (opts.masked) flags |= IDS_WITH_MASKED;
  const length = 6 + (after !== null ? 8 : 0) + (key !== null ? 1 + key.length : 0);
  const b = Buffer.allocUnsafe(4 + length);
  b.writeUInt32BE(length, 0);
  b[4] = OP_GET_IDS_WITH;
  b.writeUInt32BE(count, 5);
  b[9] = flags;
  let i = 10;
  if (after !== null) {
    b.writeBigUInt64BE(after, i);
    i += 8;
  }
  if (key !== null) {
    b[i] = key.length;
    b.write(key, i + 1, "latin1");
  }
  return b;
}

/** PING (0x03) with a u64 token. */
export function encodePing(token: bigint): Buffer {
  if (typeof token !== "bigint" || token < 0n || token > MAX_U64) {
    throw new RangeError(`PING token ${String(token)} is not a u64 bigint`);
  }
  const b = Buffer.allocUnsafe(13);
  b.writeUInt32BE(9, 0);
  b[4] = OP_PING;
  b.writeBigUInt64BE(token, 5);
  return b;
}

function checkUint(v: number, max: number, what: string): void {
  if (!Number.isInteger(v) || v < 0 || v > max) {
    throw new RangeError(`${what} ${v} is not an integer in 0..=${max}`);
  }
}

// ---------------------------------------------------------------------------------------
// Responses

/**
 * The client's response frame limit once max_batch is known: max(6 + 8 * max_batch, 258)
 * (PROTOCOL.md section 7): room for a VALUES frame of max_batch values (its mode byte makes it
 * one byte longer than an IDS frame of max_batch IDs) and any ERROR; from version 4
 * max(5 + 16 * max_batch, 258), a UUIDS frame of max_batch UUIDs.
 */
export function responseFrameLimit(maxBatch: number, version = 1): number {
  const frame = version >= UUIDS_VERSION ? 5 + 16 * maxBatch : 6 + 8 * maxBatch;
  return Math.min(Math.max(frame, ERROR_MAX_LENGTH), MAX_U32);
}

function bad(detail: string): ProtocolError {
  return new ProtocolError(detail, BAD_FRAME);
}

/** How many bytes the frame at `offset` needs in total (header plus body), once its 4-byte
 * length is there; checks the length against `maxFrame` (and the opcode once present). */
function checkHeader(buf: Uint8Array, offset: number, available: number, maxFrame: number): number | null {
  if (available < 4) return null;
  const length = ((buf[offset]! << 24) | (buf[offset + 1]! << 16) | (buf[offset + 2]! << 8) | buf[offset + 3]!) >>> 0;
  if (length === 0) throw bad("frame length 0");
  if (length > maxFrame) {
    throw new ProtocolError(`frame length ${length} exceeds limit ${maxFrame}`, FRAME_TOO_LARGE);
  }
  if (available < 5) return 4 + length;
  const opcode = buf[offset + 4]!;
  switch (opcode) {
    case OP_HELLO_OK:
      if (length !== HELLO_OK_LENGTH) throw bad(`HELLO_OK length ${length}, expected ${HELLO_OK_LENGTH}`);
      break;
    case OP_PONG:
      if (length !== PONG_LENGTH) throw bad(`PONG length ${length}, expected ${PONG_LENGTH}`);
      break;
    case OP_IDS:
      if (length < 13 || (length - 5) % 8 !== 0) throw bad(`IDS length ${length} is not 5 + 8 * count with count >= 1`);
      if (available >= 9) {
        const count = u32(buf, offset + 5);
        if (count !== (length - 5) / 8) throw bad(`IDS count ${count} disagrees with frame length ${length}`);
      }
      break;
    case OP_RANGES:
      if (length < 21 || (length - 9) % 12 !== 0) throw bad(`RANGES length ${length} is not 9 + 12 * runs with runs >= 1`);
      break;
    case OP_VALUES:
      if (length < 14 || (length - 6) % 8 !== 0) throw bad(`VALUES length ${length} is not 6 + 8 * count with count >= 1`);
      // The mode and the count as soon as they have arrived, before the (possibly large) body.
      if (available >= 6) {
        const mode = buf[offset + 5]!;
        if (mode > 1) throw bad(`VALUES mode ${mode} is neither 0 (dense) nor 1 (strict)`);
      }
      if (available >= 10) {
        const count = u32(buf, offset + 6);
        if (count !== (length - 6) / 8) throw bad(`VALUES count ${count} disagrees with frame length ${length}`);
      }
      break;
    case OP_UUIDS:
      if (length < 21 || (length - 5) % 16 !== 0) throw bad(`UUIDS length ${length} is not 5 + 16 * count with count >= 1`);
      if (available >= 9) {
        const count = u32(buf, offset + 5);
        if (count !== (length - 5) / 16) throw bad(`UUIDS count ${count} disagrees with frame length ${length}`);
      }
      break;
    case OP_MASKED_IDS:
      if (length < 14 || (length - 6) % 8 !== 0) throw bad(`MASKED_IDS length ${length} is not 6 + 8 * count with count >= 1`);
      if (available >= 6) {
        const keyId = buf[offset + 5]!;
        if (keyId > 61) throw bad(`MASKED_IDS key_id ${keyId} is above 61`);
      }
      if (available >= 10) {
        const count = u32(buf, offset + 6);
        if (count !== (length - 6) / 8) throw bad(`MASKED_IDS count ${count} disagrees with frame length ${length}`);
      }
      break;
    case OP_ERROR:
      if (length < ERROR_MIN_LENGTH || length > ERROR_MAX_LENGTH) {
        throw bad(`ERROR length ${length} outside ${ERROR_MIN_LENGTH}..=${ERROR_MAX_LENGTH}`);
      }
      break;
    default:
      throw bad(`unknown response opcode 0x${opcode.toString(16).padStart(2, "0")}`);
  }
  return 4 + length;
}

export function u32(buf: Uint8Array, i: number): number {
  return ((buf[i]! << 24) | (buf[i + 1]! << 16) | (buf[i + 2]! << 8) | buf[i + 3]!) >>> 0;
}

function u64(buf: Uint8Array, i: number): bigint {
  return (BigInt(u32(buf, i)) << 32n) | BigInt(u32(buf, i + 4));
}

/**
 * How many bytes the first frame of `buf[offset..offset+available]` needs in total, or
 * `null` while even its length is missing. Throws for a length or opcode that is already
 * known to be bad (as early as the bytes show it).
 */
export function frameSize(buf: Uint8Array, offset = 0, available = buf.length - offset, maxFrame = DEFAULT_MAX_RESPONSE_FRAME): number | null {
  return checkHeader(buf, offset, available, maxFrame);
}

/**
 * Decode the first response frame of `buf` (from `offset`). Returns `null` when more bytes
 * are needed, else the frame and the bytes it used. Throws ProtocolError (status 100 or 101)
 * for a malformed frame, as early as the bytes present show it.
 *
 * An IDS frame's IDs are copied out; a RANGES frame is validated and returned as a view of
 * its runs (expand it with `RangesView.expandInto` or `RangesView.toArray`).
 */
export function decodeResponse(buf: Uint8Array, maxFrame: number = DEFAULT_MAX_RESPONSE_FRAME, offset = 0): Decoded | null {
  const available = buf.length - offset;
  const size = checkHeader(buf, offset, available, maxFrame);
  if (size === null || available < 5 || available < size) return null;
  const opcode = buf[offset + 4]!;
  const p = offset + 5; // the payload
  const end = offset + size;
  let frame: Response;
  switch (opcode) {
    case OP_IDS: {
      const count = u32(buf, p);
      const ids = new BigUint64Array(count);
      readIdsInto(buf, p + 4, count, ids, 0);
      frame = { op: "IDS", ids };
      break;
    }
    case OP_RANGES: {
      const total = u32(buf, p);
      const runs = u32(buf, p + 4);
      if (runs !== (end - (p + 8)) / 12) throw bad(`RANGES run count ${runs} disagrees with the frame length`);
      const view = new RangesView(buf, p + 8, runs, total);
      view.validate();
      frame = { op: "RANGES", total, runs: view };
      break;
    }
    case OP_VALUES: {
      const count = u32(buf, p + 1);
      const values = new BigUint64Array(count);
      readValuesInto(buf, p + 5, count, values, 0);
      frame = { op: "VALUES", mode: buf[p] === 1 ? "strict" : "dense", values };
      break;
    }
    case OP_UUIDS: {
      const count = u32(buf, p);
      const uuids = new Array<string>(count);
      readUuidsInto(buf, p + 4, count, uuids, 0, null);
      frame = { op: "UUIDS", uuids };
      break;
    }
    case OP_MASKED_IDS: {
      const count = u32(buf, p + 1);
      const ids = new BigUint64Array(count);
      readIdsInto(buf, p + 5, count, ids, 0);
      frame = { op: "MASKED_IDS", keyId: buf[p]!, ids };
      break;
    }
    case OP_PONG:
      frame = { op: "PONG", token: u64(buf, p) };
      break;
    case OP_ERROR: {
      const status = (buf[p]! << 8) | buf[p + 1]!;
      let message: string;
      try {
        message = UTF8.decode(buf.subarray(p + 2, end));
      } catch {
        throw bad("ERROR message is not UTF-8");
      }
      frame = { op: "ERROR", status, message };
      break;
    }
    default: {
      // OP_HELLO_OK (checkHeader let only known opcodes through).
      const hello: HelloOk = {
        version: (buf[p]! << 8) | buf[p + 1]!,
        epochMs: u64(buf, p + 2),
        timestampBits: buf[p + 10]!,
        workerBits: buf[p + 11]!,
        sequenceBits: buf[p + 12]!,
        regionBits: buf[p + 13]!,
        maxBatch: u32(buf, p + 14),
        maxRequestFrame: u32(buf, p + 18),
        workerFirst: u32(buf, p + 22),
        workerCount: u32(buf, p + 26),
        shard: (buf[p + 30]! << 8) | buf[p + 31]!,
      };
      if (hello.timestampBits + hello.workerBits + hello.sequenceBits > 63) {
        throw bad(`HELLO_OK layout bits ${hello.timestampBits}+${hello.workerBits}+${hello.sequenceBits} > 63`);
      }
      if (hello.regionBits > hello.workerBits) {
        throw bad(`HELLO_OK region_bits ${hello.regionBits} > worker_bits ${hello.workerBits}`);
      }
      frame = { op: "HELLO_OK", hello };
    }
  }
  return { frame, consumed: size };
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Copy `count` UUIDs (16 bytes each) from `buf[at..]` into `out[outAt..]` in their canonical
 * text form (lowercase 8-4-4-4-12 hex digits), rejecting any that is not of version 7 and
 * RFC 9562's variant (bits 10) or does not increase on the one before (on `after`, the
 * connection's last UUID, for the first; `null` when there is none). The canonical forms of
 * two UUIDs compare as strings exactly as their bytes do. Returns the last UUID.
 */
export function readUuidsInto(buf: Uint8Array, at: number, count: number, out: string[], outAt: number, after: string | null): string | null {
  const b = Buffer.isBuffer(buf) ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  let last = after;
  for (let k = 0; k < count; k++) {
    const i = at + 16 * k;
    const version = b[i + 6]! >> 4;
    if (version !== 7) throw bad(`UUIDS holds a UUID of version ${version}, not 7`);
    if (b[i + 8]! >> 6 !== 0b10) throw bad(`UUIDS holds a UUID whose variant bits are ${(b[i + 8]! >> 6).toString(2).padStart(2, "0")}, not 10`);
    const u = uuidText(b, i);
    if (last !== null && u <= last) throw bad(`UUIDS: UUID ${u} does not increase on ${last}`);
    out[outAt + k] = u;
    last = u;
  }
  return last;
}

/** The canonical text form of the 16 bytes at `buf[i..]`. */
export function uuidText(buf: Buffer, i: number): string {
  return `${buf.toString("hex", i, i + 4)}-${buf.toString("hex", i + 4, i + 6)}-${buf.toString("hex", i + 6, i + 8)}-${buf.toString("hex", i + 8, i + 10)}-${buf.toString("hex", i + 10, i + 16)}`;
}
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Copy `count` big-endian u64 IDs from `buf[at..]` into `out[outAt..]`, rejecting any with
 * the top bit set. */
export function readIdsInto(buf: Uint8Array, at: number, count: number, out: BigUint64Array, outAt: number): void {
  if (LITTLE_ENDIAN) {
    // DataView's big-endian reads compile to a load and a byte swap.
    const words = new Int32Array(out.buffer, out.byteOffset + outAt * 8, count * 2);
    const view = new DataView(buf.buffer, buf.byteOffset + at, count * 8);
    let sign = 0;
    for (let i = 0; i < count; i++) {
      const hi = view.getInt32(8 * i, false);
      sign |= hi;
      words[2 * i] = view.getInt32(8 * i + 4, false);
      words[2 * i + 1] = hi;
    }
    if (sign < 0) {
      for (let i = 0; i < count; i++) {
        if (view.getInt32(8 * i, false) < 0) throw bad(`IDS holds an ID with the top bit set (index ${i})`);
      }
    }
  } else {
    for (let i = 0, j = at; i < count; i++, j += 8) {
      if (buf[j]! >= 0x80) throw bad(`IDS holds an ID with the top bit set (index ${i})`);
      out[outAt + i] = u64(buf, j);
    }
  }
}

/**
 * Copy the `count` big-endian u64 values of a VALUES frame from `buf[at..]` into
 * `out[outAt..]`, rejecting (BAD_FRAME) a value of 0, one with the top bit set, or values
 * that are not strictly increasing.
 */
export function readValuesInto(buf: Uint8Array, at: number, count: number, out: BigUint64Array, outAt: number): void {
  let previous = 0n;
  for (let i = 0, j = at; i < count; i++, j += 8) {
    if (buf[j]! >= 0x80) throw bad(`VALUES holds a value with the top bit set (index ${i})`);
    const v = u64(buf, j);
    if (v === 0n) throw bad(`VALUES holds the value 0 (index ${i}); values are 1 ..= 2^63 - 1`);
    if (v <= previous) throw bad(`VALUES are not strictly increasing (index ${i}: ${v} after ${previous})`);
    out[outAt + i] = v;
    previous = v;
  }
}

/** The validated runs of a RANGES frame (version 2), over the frame's bytes. */
export class RangesView {
  constructor(
    private readonly buf: Uint8Array,
    private readonly at: number,
    /** Number of runs. */
    readonly length: number,
    /** Number of IDs (the sum of the runs' counts). */
    readonly total: number,
  ) {}

  /** Run `i`: its first ID and count. */
  run(i: number): Run {
    const j = this.at + 12 * i;
    return { first: u64(this.buf, j), count: u32(this.buf, j + 8) };
  }

  /** Every run, in order. */
  toRuns(): Run[] {
    const out: Run[] = [];
    for (let i = 0; i < this.length; i++) out.push(this.run(i));
    return out;
  }

  /** Each run non-empty, strictly increasing and disjoint, below 2^63, summing to `total`. */
  validate(): void {
    let sum = 0;
    let nextFree = 0n;
    for (let i = 0; i < this.length; i++) {
      const { first, count } = this.run(i);
      if (count === 0) throw bad("RANGES run is empty");
      if (first < nextFree) throw bad("RANGES runs overlap or are not increasing");
      const last = first + BigInt(count - 1);
      if (last >= 1n << 63n) throw bad("RANGES run reaches the sign bit");
      nextFree = last + 1n;
      sum += count;
    }
    if (sum !== this.total) throw bad(`RANGES run counts sum to ${sum}, not the total ${this.total}`);
  }

  /** Write the IDs, expanded in order, into `out[outAt..outAt + total]`. */
  expandInto(out: BigUint64Array, outAt = 0): void {
    if (LITTLE_ENDIAN) {
      // Two int32 words per ID (low, high), kept in int32 range so that V8 stays on small
      // integers: a u32 above 2^31 would be a heap number and many times slower.
      const words = new Int32Array(out.buffer, out.byteOffset + outAt * 8, this.total * 2);
      const buf = this.buf;
      let w = 0;
      for (let i = 0; i < this.length; i++) {
        const j = this.at + 12 * i;
        let hi = (buf[j]! << 24) | (buf[j + 1]! << 16) | (buf[j + 2]! << 8) | buf[j + 3]!;
        let lo = (buf[j + 4]! << 24) | (buf[j + 5]! << 16) | (buf[j + 6]! << 8) | buf[j + 7]!;
        let count = u32(buf, j + 8);
        while (count > 0) {
          // IDs up to the next carry into the high word: lo runs to -1 (0xFFFFFFFF) at most.
          const room = lo < 0 ? -lo : 0x1_0000_0000 - lo;
          const n = count < room ? count : room;
          for (let k = 0; k < n; k++) {
            words[w] = (lo + k) | 0;
            words[w + 1] = hi;
            w += 2;
          }
          count -= n;
          lo = (lo + n) | 0;
          if (lo === 0 && n === room) hi = (hi + 1) | 0;
        }
      }
      return;
    }
    let k = outAt;
    for (let i = 0; i < this.length; i++) {
      const { first, count } = this.run(i);
      for (let n = 0; n < count; n++) out[k++] = first + BigInt(n);
    }
  }

  /** The IDs, expanded. */
  toArray(): BigUint64Array {
    const out = new BigUint64Array(this.total);
    this.expandInto(out, 0);
    return out;
  }
}

/** Encode a RANGES frame (for tests and fake servers). */
export function encodeRanges(runs: readonly Run[]): Buffer {
  const b = Buffer.alloc(4 + 9 + 12 * runs.length);
  b.writeUInt32BE(9 + 12 * runs.length, 0);
  b[4] = OP_RANGES;
  b.writeUInt32BE(runs.reduce((s, r) => s + r.count, 0), 5);
  b.writeUInt32BE(runs.length, 9);
  runs.forEach((r, i) => {
    b.writeBigUInt64BE(r.first, 13 + 12 * i);
    b.writeUInt32BE(r.count, 21 + 12 * i);
  });
  return b;
}

/** Encode an IDS frame (for tests and fake servers). */
export function encodeIds(ids: ArrayLike<bigint>): Buffer {
  const b = Buffer.alloc(9 + 8 * ids.length);
  b.writeUInt32BE(5 + 8 * ids.length, 0);
  b[4] = OP_IDS;
  b.writeUInt32BE(ids.length, 5);
  for (let i = 0; i < ids.length; i++) b.writeBigUInt64BE(ids[i]!, 9 + 8 * i);
  return b;
}

/** Encode a VALUES frame (for tests and fake servers). */
export function encodeValues(mode: SequenceMode | number, values: ArrayLike<bigint>): Buffer {
  const b = Buffer.alloc(10 + 8 * values.length);
  b.writeUInt32BE(6 + 8 * values.length, 0);
  b[4] = OP_VALUES;
  b[5] = mode === "dense" ? 0 : mode === "strict" ? 1 : mode;
  b.writeUInt32BE(values.length, 6);
  for (let i = 0; i < values.length; i++) b.writeBigUInt64BE(values[i]!, 10 + 8 * i);
  return b;
}

/** Encode a HELLO_OK frame (for tests and fake servers). */
export function encodeHelloOk(h: HelloOk): Buffer {
  const b = Buffer.alloc(37);
  b.writeUInt32BE(33, 0);
  b[4] = OP_HELLO_OK;
  b.writeUInt16BE(h.version, 5);
  b.writeBigUInt64BE(h.epochMs, 7);
  b[15] = h.timestampBits;
  b[16] = h.workerBits;
  b[17] = h.sequenceBits;
  b[18] = h.regionBits;
  b.writeUInt32BE(h.maxBatch, 19);
  b.writeUInt32BE(h.maxRequestFrame, 23);
  b.writeUInt32BE(h.workerFirst, 27);
  b.writeUInt32BE(h.workerCount, 31);
  b.writeUInt16BE(h.shard, 35);
  return b;
}

/** Encode an ERROR frame (for tests and fake servers). */
export function encodeError(status: number, message: string): Buffer {
  const msg = Buffer.from(message, "utf8");
  const b = Buffer.alloc(7 + msg.length);
  b.writeUInt32BE(3 + msg.length, 0);
  b[4] = OP_ERROR;
  b.writeUInt16BE(status, 5);
  msg.copy(b, 7);
  return b;
}

/** Encode a PONG frame (for tests and fake servers). */
export function encodePong(token: bigint): Buffer {
  const b = Buffer.alloc(13);
  b.writeUInt32BE(9, 0);
  b[4] = OP_PONG;
  b.writeBigUInt64BE(token, 5);
  return b;
}

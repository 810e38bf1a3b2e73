// The shared wire vectors of protocol/tests/vectors.json, vectors_v4.json (version 4: GET_UUIDS,
// UUIDS) and vectors_v5.json (version 5: GET_IDS_WITH, MASKED_IDS), through the client's codec.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";

import { ProtocolError } from "../errors.js";
import * as protocol from "../protocol.js";
import { STATUSES, closesConnection, retryElsewhere, statusName } from "../status.js";
import { FrameFault, REPO, decodeRequest, handshakeRule, loadJson, negotiate } from "./support.js";

interface Case {
  name: string;
  direction: "request" | "response";
  hex: string;
  decoded?: Record<string, unknown>;
  error?: { status: number; name: string; closes: boolean };
  incomplete?: boolean;
  consumed?: number;
  max_frame?: number;
  connection?: "new" | "established";
  /** The version an established connection negotiated (1 when absent). */
  version?: number;
  limits?: { max_request_frame: number; max_batch: number };
  negotiated_version?: number;
}

const VECTORS = [
  ...(loadJson("protocol/tests/vectors.json") as Case[]), ...(loadJson("protocol/tests/vectors_v4.json") as Case[]),
  ...(loadJson("protocol/tests/vectors_v5.json") as Case[]),
];

function encodeRequest(d: Record<string, unknown>): Buffer {
  switch (d["op"]) {
    case "HELLO":
      return protocol.encodeHello(d["min_version"] as number, d["max_version"] as number);
    case "GET_IDS":
      return protocol.encodeGetIds(d["count"] as number);
    case "PING":
      return protocol.encodePing(BigInt(d["token"] as string));
    case "GET_VALUES":
      return protocol.encodeGetValues(d["count"] as number, d["name"] as string);
    case "GET_UUIDS":
      return protocol.encodeGetUuids(d["count"] as number);
    case "GET_IDS_WITH":
      return protocol.encodeGetIdsWith(d["count"] as number, {
        after: d["after"] === undefined ? null : BigInt(d["after"] as string),
        key: (d["key"] as string | undefined) ?? null,
        masked: d["masked"] as boolean,
      });
    default:
      throw new Error(`unknown request op ${String(d["op"])}`);
  }
}

/** The client's decoded frame in the vectors' JSON shape. */
function asDecoded(frame: protocol.Response): Record<string, unknown> {
  switch (frame.op) {
    case "HELLO_OK": {
      const h = frame.hello;
      return {
        op: "HELLO_OK",
        version: h.version,
        epoch_ms: h.epochMs.toString(),
        timestamp_bits: h.timestampBits,
        worker_bits: h.workerBits,
        sequence_bits: h.sequenceBits,
        region_bits: h.regionBits,
        max_batch: h.maxBatch,
        max_request_frame: h.maxRequestFrame,
        worker_first: h.workerFirst,
        worker_count: h.workerCount,
        shard: h.shard,
      };
    }
    case "IDS":
      return { op: "IDS", ids: Array.from(frame.ids, (i) => i.toString()) };
    case "PONG":
      return { op: "PONG", token: frame.token.toString() };
    case "ERROR":
      return {
        op: "ERROR",
        status: frame.status,
        name: statusName(frame.status),
        message: frame.message,
        closes: closesConnection(frame.status),
        retry_elsewhere: retryElsewhere(frame.status),
      };
    case "RANGES":
      return { op: "RANGES", runs: frame.runs.toRuns().map((r) => [r.first.toString(), r.count]) };
    case "VALUES":
      return { op: "VALUES", mode: frame.mode, values: Array.from(frame.values, (v) => v.toString()) };
    case "UUIDS":
      return { op: "UUIDS", uuids: frame.uuids.map((u) => u.replace(/-/g, "")) };
    case "MASKED_IDS":
      return { op: "MASKED_IDS", key_id: frame.keyId, ids: Array.from(frame.ids, (i) => i.toString()) };
  }
}

const hex = (s: string) => Buffer.from(s, "hex");

describe("request vectors", () => {
  const cases = VECTORS.filter((c) => c.direction === "request" && c.decoded);
  test("there are enough of them", () => assert.ok(cases.length >= 10, `${cases.length}`));
  for (const c of cases) {
    test(`encodes ${c.name} byte-exact`, () => {
      const raw = hex(c.hex);
      const consumed = c.consumed ?? raw.length;
      assert.equal(encodeRequest(c.decoded!).toString("hex"), raw.subarray(0, consumed).toString("hex"));
    });
  }
});

/**
 * Every request vector through a server's decoder (the one the fake nodes use), with the
 * case's limits, connection state and negotiated version: the decoded request, the refusal
 * status, the closing fault or a request for more bytes, exactly.
 */
describe("request vectors, decoded as a server does", () => {
  const cases = VECTORS.filter((c) => c.direction === "request");
  test("there are enough of them, with GET_VALUES cases on version 3 connections", () => {
    assert.ok(cases.length >= 50, `${cases.length}`);
    assert.ok(cases.filter((c) => c.version === 3).length >= 15);
  });
  for (const c of cases) {
    test(`${c.name} (${c.connection}${c.version !== undefined ? `, version ${c.version}` : ""})`, () => {
      const raw = hex(c.hex);
      const established = c.connection === "established";
      const version = established ? (c.version ?? 1) : 1;
      let out;
      try {
        out = decodeRequest(raw, c.limits!, version);
      } catch (e) {
        assert.ok(e instanceof FrameFault, String(e));
        assert.ok(c.error, `unexpected fault ${e.status}: ${e.message}`);
        assert.equal(e.status, c.error.status);
        assert.equal(c.error.closes, true);
        return;
      }
      if (c.incomplete) {
        assert.equal(out, null);
        return;
      }
      assert.ok(out !== null, "decoder asked for more bytes");
      assert.equal(out.consumed, c.consumed ?? raw.length);
      const closing = handshakeRule(out, established);
      if (c.decoded) {
        assert.equal(closing, null);
        assert.deepEqual(out.request, c.decoded);
        if (c.negotiated_version !== undefined) {
          const h = c.decoded as { min_version: number; max_version: number };
          assert.equal(negotiate(h.min_version, h.max_version), c.negotiated_version);
        }
        return;
      }
      assert.ok(c.error, "a case is decoded, an error or incomplete");
      if (closing !== null) {
        assert.equal(closing, c.error.status);
        assert.equal(c.error.closes, true);
      } else {
        assert.equal(out.reject, c.error.status);
        assert.equal(c.error.closes, false);
        assert.equal(closesConnection(out.reject!), false);
      }
    });
  }
  test("the client's own name check agrees with every GET_VALUES vector", () => {
    let checked = 0;
    for (const c of cases.filter((c) => c.version === 3)) {
      const raw = hex(c.hex);
      if (raw.length < 9 || raw[4] !== 0x05) continue;
      const length = raw.readUInt32BE(0);
      if (length < 6 || length > 69 || raw.length < 4 + length) continue;
      const name = raw.subarray(9, 4 + length).toString("utf8");
      if (c.decoded) assert.ok(protocol.isSequenceName(name), `${c.name}: ${name}`);
      else if (c.error?.status === 204) assert.ok(!protocol.isSequenceName(name), `${c.name}: ${name}`);
      else continue;
      checked++;
    }
    assert.ok(checked >= 8, `${checked}`);
  });
});

describe("response vectors", () => {
  const decoded = VECTORS.filter((c) => c.direction === "response" && c.decoded);
  const errors = VECTORS.filter((c) => c.direction === "response" && c.error);
  const incomplete = VECTORS.filter((c) => c.direction === "response" && c.incomplete);
  test("there are enough of them, VALUES among them", () => {
    assert.ok(decoded.length >= 15 && errors.length >= 10 && incomplete.length >= 2);
    const values = VECTORS.filter((c) => c.direction === "response" && c.hex.slice(8, 10) === "85");
    assert.ok(values.filter((c) => c.decoded).length >= 3 && values.filter((c) => c.error).length >= 7 && values.some((c) => c.incomplete));
  });
  for (const c of decoded) {
    test(`decodes ${c.name}`, () => {
      const raw = hex(c.hex);
      const out = protocol.decodeResponse(raw, c.max_frame!);
      assert.ok(out !== null, "decoder asked for more bytes");
      assert.equal(out.consumed, c.consumed ?? raw.length);
      assert.deepEqual(asDecoded(out.frame), c.decoded);
    });
    test(`${c.name} fed one byte at a time decodes only once complete`, () => {
      const raw = hex(c.hex);
      const size = c.consumed ?? raw.length; // bytes after the frame belong to the next one
      for (let cut = 0; cut < size; cut++) assert.equal(protocol.decodeResponse(raw.subarray(0, cut), c.max_frame!), null, `cut ${cut}`);
    });
  }
  for (const c of errors) {
    test(`rejects ${c.name} with ${c.error!.name}`, () => {
      assert.ok(c.error!.closes, "response faults always close");
      assert.throws(
        () => protocol.decodeResponse(hex(c.hex), c.max_frame!),
        (e: unknown) => e instanceof ProtocolError && e.status === c.error!.status,
      );
    });
  }
  for (const c of incomplete) {
    test(`${c.name} asks for more bytes`, () => assert.equal(protocol.decodeResponse(hex(c.hex), c.max_frame!), null));
  }
  test("UUIDS vectors are among them: decoded, rejected and incomplete", () => {
    const uuids = VECTORS.filter((c) => c.direction === "response" && c.hex.slice(8, 10) === "86");
    assert.ok(uuids.filter((c) => c.decoded).length >= 2 && uuids.filter((c) => c.error).length >= 5 && uuids.some((c) => c.incomplete));
  });
  test("a UUIDS count is checked as soon as it arrives", () => {
    const head = Buffer.alloc(9);
    head.writeUInt32BE(5 + 16 * 1000, 0);
    head[4] = 0x86;
    head.writeUInt32BE(999, 5);
    assert.throws(() => protocol.decodeResponse(head, 1 << 20), (e: unknown) => e instanceof ProtocolError && e.status === 100);
    head.writeUInt32BE(1000, 5);
    assert.equal(protocol.decodeResponse(head, 1 << 20), null);
  });
  test("from version 4 the frame limit holds a UUIDS frame of max_batch UUIDs", () => {
    assert.equal(protocol.responseFrameLimit(65536, 4), 5 + 16 * 65536);
    assert.equal(protocol.responseFrameLimit(65536, 3), 6 + 8 * 65536);
    assert.equal(protocol.responseFrameLimit(1, 4), 258);
  });
  test("an oversized length is rejected from the 4-byte prefix alone", () => {
    assert.throws(() => protocol.decodeResponse(hex("ffffffff")), (e: unknown) => e instanceof ProtocolError && e.status === 101);
  });
});

describe("RANGES (version 2)", () => {
  test("GET_RANGES encodes as opcode 0x04 with a u32 count", () => {
    assert.equal(protocol.encodeGetRanges(4096).toString("hex"), "000000050400001000");
  });
  test("the PROTOCOL.md example: 8192 IDs in one run", () => {
    const raw = hex("00000015840000200000000001000000000000000000002000");
    const out = protocol.decodeResponse(raw);
    assert.ok(out && out.frame.op === "RANGES");
    const ids = out.frame.runs.toArray();
    assert.equal(ids.length, 8192);
    assert.equal(ids[0], 0n);
    assert.equal(ids[8191], 8191n);
  });
  test("runs expand in order, across a carry into the high 32 bits", () => {
    const runs = [
      { first: 0xffff_fffdn, count: 5 },
      { first: (5n << 32n) - 1n, count: 2 },
      { first: 0x7fff_ffff_ffff_fff0n, count: 16 },
    ];
    const out = protocol.decodeResponse(protocol.encodeRanges(runs));
    assert.ok(out && out.frame.op === "RANGES");
    const want: bigint[] = [];
    for (const r of runs) for (let i = 0n; i < BigInt(r.count); i++) want.push(r.first + i);
    assert.deepEqual(Array.from(out.frame.runs.toArray()), want);
    assert.equal(out.frame.total, 23);
  });
  const bad: [string, Buffer][] = [
    ["an empty run", protocol.encodeRanges([{ first: 1n, count: 0 }])],
    ["overlapping runs", protocol.encodeRanges([{ first: 10n, count: 5 }, { first: 14n, count: 1 }])],
    ["decreasing runs", protocol.encodeRanges([{ first: 10n, count: 1 }, { first: 5n, count: 1 }])],
    ["a run reaching the sign bit", protocol.encodeRanges([{ first: (1n << 63n) - 1n, count: 2 }])],
  ];
  for (const [what, frame] of bad) {
    test(`rejects ${what} as BAD_FRAME`, () => {
      assert.throws(() => protocol.decodeResponse(frame), (e: unknown) => e instanceof ProtocolError && e.status === 100);
    });
  }
  test("rejects a total that disagrees with the runs, and a run count that disagrees with the length", () => {
    const f = protocol.encodeRanges([{ first: 1n, count: 3 }]);
    const wrongTotal = Buffer.from(f);
    wrongTotal.writeUInt32BE(4, 5);
    assert.throws(() => protocol.decodeResponse(wrongTotal), (e: unknown) => e instanceof ProtocolError && e.status === 100);
    const wrongRuns = Buffer.from(f);
    wrongRuns.writeUInt32BE(2, 9);
    assert.throws(() => protocol.decodeResponse(wrongRuns), (e: unknown) => e instanceof ProtocolError && e.status === 100);
  });
});

describe("status table", () => {
  test("unknown codes follow their class", () => {
    assert.equal(closesConnection(299) || retryElsewhere(299), false);
    assert.ok(retryElsewhere(399) && !closesConnection(399));
    assert.ok(closesConnection(499) && !retryElsewhere(499));
    assert.equal(retryElsewhere(304), false);
    assert.equal(statusName(499), null);
  });
  test("every row of PROTOCOL.md's table agrees with the client's", () => {
    const text = readFileSync(path.join(REPO, "protocol", "PROTOCOL.md"), "utf8");
    const table = text.split("<!-- status-table:begin -->")[1]!.split("<!-- status-table:end -->")[0]!;
    const rows = table.split("\n").filter((r) => r.startsWith("| `"));
    assert.equal(rows.length, STATUSES.size);
    for (const r of rows) {
      const cells = r.replace(/^\||\|$/g, "").split("|").map((c) => c.trim().replace(/`/g, ""));
      const info = STATUSES.get(Number(cells[0]));
      assert.ok(info, r);
      assert.deepEqual([info.name, info.closes, info.retryElsewhere], [cells[1], cells[2] === "yes", cells[3] === "yes"], r);
    }
  });
});

describe("encoders refuse values that do not fit", () => {
  test("counts, versions and tokens", () => {
    assert.throws(() => protocol.encodeGetIds(-1), RangeError);
    assert.throws(() => protocol.encodeGetIds(2 ** 32), RangeError);
    assert.throws(() => protocol.encodeGetIds(1.5), RangeError);
    assert.throws(() => protocol.encodeHello(0, 65536), RangeError);
    assert.throws(() => protocol.encodePing(1n << 64n), RangeError);
    assert.throws(() => protocol.encodePing(5 as unknown as bigint), RangeError);
  });
  test("GET_VALUES: names of 1 to 64 bytes, a u32 count", () => {
    assert.throws(() => protocol.encodeGetValues(1, ""), RangeError);
    assert.throws(() => protocol.encodeGetValues(1, "a".repeat(65)), RangeError);
    assert.throws(() => protocol.encodeGetValues(1, "é".repeat(33)), RangeError); // 66 bytes
    assert.throws(() => protocol.encodeGetValues(-1, "a"), RangeError);
    assert.throws(() => protocol.encodeGetValues(2 ** 32, "a"), RangeError);
    assert.throws(() => protocol.encodeGetValues(1, 7 as unknown as string), TypeError);
    assert.equal(protocol.encodeGetValues(1, "a".repeat(64)).length, 73);
  });
});

describe("VALUES (version 3)", () => {
  test("the response frame limit, max(6 + 8 * max_batch, 258), admits a VALUES of max_batch values", () => {
    assert.equal(protocol.responseFrameLimit(65536), 6 + 8 * 65536);
    assert.equal(protocol.DEFAULT_MAX_RESPONSE_FRAME, 524294);
    assert.equal(protocol.responseFrameLimit(0), 258);
    assert.equal(protocol.responseFrameLimit(2 ** 32), 0xffff_ffff);
    const values = Array.from({ length: 65536 }, (_, i) => BigInt(i + 1));
    const frame = protocol.encodeValues("dense", values);
    assert.throws(() => protocol.decodeResponse(frame, 5 + 8 * 65536), (e: unknown) => e instanceof ProtocolError && e.status === 101);
    const out = protocol.decodeResponse(frame, protocol.responseFrameLimit(65536));
    assert.ok(out && out.frame.op === "VALUES");
    assert.equal(out.frame.values.length, 65536);
    assert.equal(out.frame.values[65535], 65536n);
  });
  test("encodeValues and the decoder agree, at the largest value and with a step", () => {
    const values = [1n, 1000n, (1n << 63n) - 1n];
    for (const mode of ["dense", "strict"] as const) {
      const out = protocol.decodeResponse(protocol.encodeValues(mode, values));
      assert.ok(out && out.frame.op === "VALUES");
      assert.equal(out.frame.mode, mode);
      assert.deepEqual(Array.from(out.frame.values), values);
    }
  });
  test("a sequence name: a-z, 0-9, '.', '_', '-', starting with a letter or a digit, 1 to 64 bytes", () => {
    for (const ok of ["a", "0", "orders", "invoice.tenant-42", "a_b", "9-", "z".repeat(64)]) assert.ok(protocol.isSequenceName(ok), ok);
    for (const no of ["", ".a", "_a", "-a", "A", "orDers", "a/b", "a b", "café", "z".repeat(65), 5, null, undefined]) {
      assert.ok(!protocol.isSequenceName(no), String(no));
    }
  });
});

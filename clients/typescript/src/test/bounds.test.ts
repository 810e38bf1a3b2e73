// Time bounds for range queries: every case of clients/vectors/bounds.json, and the bounds
// recomputed by a search over IDs with Layout.decode on random layouts.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Layout, TimeBoundsError } from "../client.js";
import { loadJson } from "./support.js";

interface Bounds {
  layouts: {
    name: string;
    layout: { epoch_ms: string; timestamp_bits: number; worker_bits: number; sequence_bits: number; region_bits: number };
    last_unix_ms: string;
    at: { unix_ms: string; min?: string; max?: string; error?: string }[];
    bounds: { from_ms: string; to_ms: string; lo?: string; hi?: string; last?: string; error?: string }[];
  }[];
}

const V = loadJson("clients/vectors/bounds.json") as Bounds;

function layoutOf(l: Bounds["layouts"][number]["layout"]): Layout {
  return new Layout({
    epochMs: BigInt(l.epoch_ms),
    timestampBits: l.timestamp_bits,
    workerBits: l.worker_bits,
    sequenceBits: l.sequence_bits,
    regionBits: l.region_bits,
  });
}

function throwsKind(f: () => unknown, kind: string, what: string): void {
  assert.throws(f, (e: unknown) => e instanceof TimeBoundsError && e instanceof RangeError && e.kind === kind, what);
}

/** The smallest ID whose time is at or after `unixMs`: bisection with decode. */
function firstIdAtOrAfter(layout: Layout, unixMs: bigint): bigint {
  let lo = 0n;
  let hi = 1n << BigInt(layout.idBits);
  for (let i = 0; i < 64 && lo < hi; i++) {
    const mid = (lo + hi) >> 1n;
    if (BigInt(layout.decode(mid).unixMs) >= unixMs) hi = mid;
    else lo = mid + 1n;
  }
  return lo;
}

describe("JavaScript-safe layouts", () => {
  test("a 53-bit layout's IDs are exact numbers, and 2^53 is not one of its IDs", () => {
    let seen = 0;
    for (const lv of V.layouts) {
      const layout = layoutOf(lv.layout);
      assert.equal(layout.maxIdAt(layout.lastUnixMs), layout.maxId, lv.name);
      assert.equal(BigInt(layout.decode(layout.maxId).unixMs), layout.lastUnixMs, lv.name);
      if (layout.idBits < 63) {
        assert.throws(() => layout.decode(layout.maxId + 1n), /not an ID of this layout/, lv.name);
      }
      if (layout.idBits !== 53) continue;
      seen++;
      assert.ok(layout.jsSafe, lv.name);
      assert.equal(layout.maxId, BigInt(Number.MAX_SAFE_INTEGER), lv.name);
      // Every bound of the layout survives a trip through a JSON number.
      for (const c of lv.bounds) {
        if (c.hi === undefined) continue;
        const hi = BigInt(c.hi);
        assert.equal(BigInt(JSON.parse(JSON.stringify({ hi: Number(hi) })).hi), hi, `${lv.name} ${c.hi}`);
      }
    }
    assert.ok(seen >= 2, `${seen} JavaScript-safe layouts in the vectors`);
    assert.equal(layoutOf(V.layouts[0]!.layout).jsSafe, false);
  });
});

describe("time bounds", () => {
  test("every bounds vector holds", () => {
    assert.ok(V.layouts.length >= 5);
    let answers = 0;
    let errors = 0;
    for (const lv of V.layouts) {
      const layout = layoutOf(lv.layout);
      assert.equal(layout.lastUnixMs, BigInt(lv.last_unix_ms), lv.name);
      for (const c of lv.at) {
        const t = BigInt(c.unix_ms);
        const what = `${lv.name} at ${c.unix_ms}`;
        if (c.error !== undefined) {
          throwsKind(() => layout.minIdAt(t), c.error, what);
          throwsKind(() => layout.maxIdAt(t), c.error, what);
          errors++;
        } else {
          assert.equal(layout.minIdAt(t), BigInt(c.min!), what);
          assert.equal(layout.maxIdAt(t), BigInt(c.max!), what);
          answers++;
        }
      }
      for (const c of lv.bounds) {
        const what = `${lv.name} [${c.from_ms}, ${c.to_ms})`;
        const [f, t] = [BigInt(c.from_ms), BigInt(c.to_ms)];
        if (c.error !== undefined) {
          throwsKind(() => layout.bounds(f, t), c.error, what);
          errors++;
        } else {
          const b = layout.bounds(f, t);
          assert.deepEqual([b.lo, b.hi, b.hi - 1n], [BigInt(c.lo!), BigInt(c.hi!), BigInt(c.last!)], what);
          answers++;
        }
      }
    }
    assert.ok(answers >= 20 && errors >= 20, `${answers} answers, ${errors} errors`);
  });

  test("times as numbers, and bad arguments", () => {
    const layout = layoutOf(V.layouts[0]!.layout);
    const epoch = Number(layout.epochMs);
    assert.deepEqual(layout.bounds(epoch, epoch + 2), layout.bounds(BigInt(epoch), BigInt(epoch + 2)));
    assert.throws(() => layout.minIdAt(1.5), TypeError);
    assert.throws(() => layout.bounds(Number.NaN, 5), TypeError);
    assert.throws(() => layout.minIdAt(epoch - 1), /before the layout's epoch/);
  });

  test("random layouts agree with a search over IDs", () => {
    // A seeded generator (xorshift), so a failure repeats.
    let x = 30n;
    const next = (bound: bigint): bigint => {
      x ^= (x << 13n) & 0xffffffffffffffffn;
      x ^= x >> 7n;
      x ^= (x << 17n) & 0xffffffffffffffffn;
      return x % bound;
    };
    for (let i = 0; i < 300; i++) {
      const tb = 1 + Number(next(40n));
      // Any width from 32 (or tb + 2) to 63 bits.
      const width = Math.max(tb + 2, 63 - Number(next(32n)));
      const wb = 1 + Number(next(BigInt(width - 1 - tb)));
      const sb = width - tb - wb;
      const layout = new Layout({ epochMs: next(1n << 44n), timestampBits: tb, workerBits: wb, sequenceBits: sb, regionBits: Number(next(BigInt(wb + 1))) });
      const span = layout.lastUnixMs - layout.epochMs;
      const [a, b] = [next(span + 1n), next(span + 1n)];
      if (a === b) continue;
      const from = layout.epochMs + (a < b ? a : b);
      const to = layout.epochMs + (a < b ? b : a);
      const what = `${layout} [${from}, ${to})`;
      const bounds = layout.bounds(from, to);
      assert.equal(bounds.lo, firstIdAtOrAfter(layout, from), what);
      assert.equal(bounds.hi, firstIdAtOrAfter(layout, to), what);
      assert.equal(layout.maxIdAt(to - 1n), bounds.hi - 1n, what);
      for (const when of [from, to - 1n, from - 1n, to]) {
        if (when < layout.epochMs || when > layout.lastUnixMs) continue;
        const w = next(1n << BigInt(wb));
        const s = next(1n << BigInt(sb));
        const id = ((when - layout.epochMs) << BigInt(wb + sb)) | (w << BigInt(sb)) | s;
        assert.equal(bounds.lo <= id && id < bounds.hi, from <= when && when < to, `${what} ID ${id}`);
      }
    }
  });
});

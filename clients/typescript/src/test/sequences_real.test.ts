// Named sequences against a real `idgen serve` node (clients/vectors/SEQUENCES.md, "Tests each
// client runs"): the sequences are created with `idgen seq create ... --data-dir DIR` before
// `idgen serve --data-dir DIR` starts on that embedded store (the default store). Fails, never
// skips, without the server binary.

import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import { Client } from "../client.js";
import { SequencesUnsupportedError, ServerError } from "../errors.js";
import { NodeProc, allDistinct, runIdgen, tmpDir } from "./support.js";

function increasing(values: ArrayLike<bigint>): boolean {
  for (let i = 1; i < values.length; i++) if (values[i]! <= values[i - 1]!) return false;
  return true;
}

describe("named sequences on a real node", () => {
  let dir: string;
  let node: NodeProc;
  before(async () => {
    dir = tmpDir("idgen-tstest-seq-");
    runIdgen(["seq", "create", "orders", "--data-dir", dir]);
    runIdgen(["seq", "create", "ledger", "--mode", "strict", "--data-dir", dir]);
    runIdgen(["seq", "create", "tiny", "--max", "5", "--data-dir", dir]);
    runIdgen(["seq", "create", "prefetched", "--data-dir", dir]);
    runIdgen(["seq", "create", "strictly", "--mode", "strict", "--data-dir", dir]);
    node = await NodeProc.start([], { store: null, dir });
  });
  after(async () => {
    await node?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  test("a dense sequence gives unique, increasing values over version 3", async () => {
    const client = new Client([node.addr], { timeoutMs: 5000 });
    try {
      const first = await client.nextValue("orders");
      assert.equal(typeof first, "bigint");
      assert.ok(first >= 1n);
      const batch = await client.nextValues("orders", 1000);
      assert.ok(batch instanceof BigUint64Array);
      assert.equal(batch.length, 1000);
      assert.ok(increasing(batch));
      assert.ok(batch[0]! > first, "increasing across calls on one connection");
      const one = await client.nextValue("orders");
      assert.ok(one > batch[999]!);
      assert.equal(client.nodes()[0]!.hello?.version, 5); // version 5 has the sequences of version 3
      // Many concurrent calls on the one connection: all distinct.
      const calls = await Promise.all(Array.from({ length: 300 }, (_, i) => client.nextValues("orders", 1 + (i % 4))));
      const all = [first, ...batch, one, ...calls.flatMap((c) => Array.from(c))];
      assert.ok(allDistinct(all));
      assert.ok(calls.every(increasing));
      assert.equal(client.stats().valueRequests, 303);
    } finally {
      await client.close();
    }
  });

  test("a whole max_batch of values in one call", async () => {
    const client = new Client([node.addr], { timeoutMs: 10_000 });
    try {
      const maxBatch = (await client.layout(), client.nodes()[0]!.hello!.maxBatch);
      const values = await client.nextValues("orders", maxBatch);
      assert.equal(values.length, maxBatch);
      assert.ok(increasing(values));
      await assert.rejects(client.nextValues("orders", maxBatch + 1), RangeError);
    } finally {
      await client.close();
    }
  });

  test("a strict sequence gives unique values, each call's above the last one answered, across connections", async () => {
    const a = new Client([node.addr], { timeoutMs: 5000 });
    const b = new Client([node.addr], { timeoutMs: 5000 });
    try {
      const got: bigint[] = [];
      for (let i = 0; i < 100; i++) got.push(await (i % 2 === 0 ? a : b).nextValue("ledger"));
      assert.ok(increasing(got), "real-time order across two connections");
      const batch = await a.nextValues("ledger", 50);
      assert.ok(increasing(batch));
      assert.ok(batch[0]! > got[got.length - 1]!);
      const concurrent = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? a : b).nextValues("ledger", 2)));
      const all = [...got, ...batch, ...concurrent.flatMap((c) => Array.from(c))];
      assert.ok(allDistinct(all));
      assert.ok(concurrent.every(increasing));
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("an unknown name fails with UNKNOWN_SEQUENCE and the connection stays usable", async () => {
    const client = new Client([node.addr], { timeoutMs: 5000 });
    try {
      await assert.rejects(client.nextValue("nope"), (e: unknown) => e instanceof ServerError && e.code === 203 && e.statusName === "UNKNOWN_SEQUENCE" && !e.closes && !e.retryElsewhere);
      await assert.rejects(client.nextValues("no.such-sequence_42", 3), (e: unknown) => e instanceof ServerError && e.code === 203);
      assert.equal(typeof (await client.nextValue("orders")), "bigint");
      assert.equal(typeof (await client.nextId()), "bigint");
      assert.equal(client.stats().connects, 1);
    } finally {
      await client.close();
    }
  });

  test("a bad name or count fails before sending", async () => {
    const client = new Client([node.addr], { timeoutMs: 5000 });
    try {
      for (const name of ["Orders", "", ".orders", "a/b", "x".repeat(65)]) await assert.rejects(client.nextValue(name), RangeError, name);
      await assert.rejects(client.nextValue(42 as unknown as string), TypeError);
      await assert.rejects(client.nextValues("orders", 0), RangeError);
      await assert.rejects(client.nextValues("orders", 2.5), TypeError);
      const s = client.stats();
      assert.deepEqual([s.connects, s.valueRequests], [0, 0], "nothing was sent, not even a HELLO");
    } finally {
      await client.close();
    }
  });

  test("a sequence created with --max 5 fails with SEQUENCE_USED_UP once used up", async () => {
    const client = new Client([node.addr], { timeoutMs: 5000 });
    try {
      const got: bigint[] = [];
      let err: unknown = null;
      for (let i = 0; i < 10 && err === null; i++) {
        try {
          got.push(await client.nextValue("tiny"));
        } catch (e) {
          err = e;
        }
      }
      assert.ok(err instanceof ServerError && err.code === 307 && err.statusName === "SEQUENCE_USED_UP" && !err.retryElsewhere, String(err));
      assert.ok(got.length >= 1 && got.length <= 5, `${got.length} values`);
      assert.ok(got.every((v) => v >= 1n && v <= 5n));
      assert.ok(increasing(got));
      await assert.rejects(client.nextValue("tiny"), (e: unknown) => e instanceof ServerError && e.code === 307);
      await assert.rejects(client.nextValues("tiny", 2), (e: unknown) => e instanceof ServerError && e.code === 307);
      assert.equal(client.nodes()[0]!.down, false, "no node is at fault");
    } finally {
      await client.close();
    }
  });

  test("a client offering versions up to 2 is told the node speaks version 2, unsent", async () => {
    const client = new Client([node.addr], { maxVersion: 2 });
    try {
      await assert.rejects(client.nextValue("orders"), (e: unknown) => e instanceof SequencesUnsupportedError && e.version === 2 && /named sequences need version 3/.test(e.message));
      assert.equal(client.stats().valueRequests, 0);
      assert.equal(typeof (await client.nextId()), "bigint");
    } finally {
      await client.close();
    }
  });

  test("prefetch: 1000 calls on a dense sequence cost about calls / K requests, values unique and increasing", async () => {
    const client = new Client([node.addr], { sequencePrefetch: 100, timeoutMs: 5000 });
    try {
      const got: bigint[] = [];
      for (let i = 0; i < 1000; i++) got.push(await client.nextValue("prefetched"));
      assert.ok(increasing(got));
      assert.equal(client.stats().valueRequests, 1 + 10, "the first call's own, then one per 100 calls");
      assert.equal(client.stats().values, 1 + 10 * 100);
      assert.equal(client.sequenceState("prefetched")!.mode, "dense");
      // Concurrent calls: distinct, in the order they called, sharing requests.
      const before = client.stats().valueRequests;
      const calls = await Promise.all(Array.from({ length: 1000 }, () => client.nextValue("prefetched")));
      assert.ok(increasing(calls));
      assert.ok(allDistinct([...got, ...calls]));
      const spent = client.stats().valueRequests - before;
      assert.ok(spent >= 9 && spent <= 11, `${spent} requests for 1000 concurrent calls`);
    } finally {
      await client.close();
    }
  });

  test("prefetch: a strict sequence's calls each send a request and nothing is kept", async () => {
    const client = new Client([node.addr], { sequencePrefetch: 100, timeoutMs: 5000 });
    try {
      const got: bigint[] = [];
      for (let i = 0; i < 100; i++) got.push(await client.nextValue("strictly"));
      assert.ok(increasing(got));
      assert.equal(client.stats().valueRequests, 100);
      assert.equal(client.stats().values, 100, "exactly what the calls needed");
      assert.deepEqual(client.sequenceState("strictly"), { mode: "strict", buffered: 0, waiting: 0 });
      const calls = await Promise.all(Array.from({ length: 50 }, () => client.nextValues("strictly", 3)));
      assert.equal(client.stats().valueRequests, 150);
      assert.ok(allDistinct([...got, ...calls.flatMap((c) => Array.from(c))]));
      assert.equal(client.sequenceState("strictly")!.buffered, 0);
    } finally {
      await client.close();
    }
  });
});

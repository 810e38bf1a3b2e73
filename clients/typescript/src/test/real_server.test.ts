// Against a real `idgen serve` node (memory store): IDs, batches, versions, pipelining,
// deadlines, concurrent callers, the prefetch pool.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client } from "../client.js";
import { DeadlineError } from "../errors.js";
import { PrefetchPool } from "../prefetch.js";
import { FakeNode, NodeProc, allDistinct, defaultHello, sleep } from "./support.js";

function increasing(ids: ArrayLike<bigint>): boolean {
  for (let i = 1; i < ids.length; i++) if (ids[i]! <= ids[i - 1]!) return false;
  return true;
}

describe("a real node", () => {
  let node: NodeProc;
  let small: NodeProc; // --max-batch 100
  before(async () => {
    node = await NodeProc.start();
    small = await NodeProc.start(["--max-batch", "100"]);
  });
  after(async () => {
    await node?.stop();
    await small?.stop();
  });

  test("IDs, a ping and the layout over protocol version 3", async () => {
    const client = new Client([node.addr]);
    try {
      const id = await client.nextId();
      assert.equal(typeof id, "bigint");
      const ids = await client.nextIds(1000);
      assert.ok(ids instanceof BigUint64Array);
      assert.equal(ids.length, 1000);
      assert.ok(increasing(ids));
      assert.ok(ids[0]! > id);
      const rtt = await client.ping();
      assert.ok(rtt >= 0);
      const state = client.nodes()[0]!;
      assert.equal(state.hello?.version, 5, "a version 5 node answers HELLO 1..5 with 5");
      const layout = await client.layout();
      assert.equal(layout.timestampBits + layout.workerBits + layout.sequenceBits, 63);
      const parts = layout.decode(ids[0]!);
      assert.ok(Math.abs(parts.unixMs - Date.now()) < 60_000, `timestamp ${parts.date.toISOString()}`);
      const hello = state.hello!;
      assert.ok(parts.worker >= hello.workerFirst && parts.worker < hello.workerFirst + hello.workerCount);
      assert.match(await client.nextIdString("base62"), /^[0-9A-Za-z]{11}$/);
      assert.match(await client.nextIdString("base32"), /^[0-9A-HJKMNP-TV-Z]{13}$/);
      assert.match(await client.nextIdString(), /^[1-9][0-9]*$/);
    } finally {
      await client.close();
    }
  });

  test("version 2 offered: the node answers 2 (GET_RANGES, no sequences)", async () => {
    const client = new Client([node.addr], { maxVersion: 2 });
    try {
      const ids = await client.nextIds(5000);
      assert.equal(ids.length, 5000);
      assert.ok(increasing(ids));
      assert.equal(client.nodes()[0]!.hello?.version, 2);
    } finally {
      await client.close();
    }
  });

  test("version 1 only: GET_IDS", async () => {
    const client = new Client([node.addr], { maxVersion: 1 });
    try {
      const ids = await client.nextIds(5000);
      assert.equal(ids.length, 5000);
      assert.ok(increasing(ids));
      assert.equal(client.nodes()[0]!.hello?.version, 1);
    } finally {
      await client.close();
    }
  });

  test("a batch above max_batch is split into pipelined frames and re-joined, on every version", async () => {
    for (const maxVersion of [1, 2, 3]) {
      const client = new Client([small.addr], { maxVersion });
      try {
        const ids = await client.nextIds(1234);
        assert.equal(ids.length, 1234);
        assert.ok(increasing(ids));
        assert.equal(client.nodes()[0]!.hello?.maxBatch, 100);
      } finally {
        await client.close();
      }
    }
  });

  test("count 0 is refused locally in every call that takes a count, nothing sent", async () => {
    const client = new Client([node.addr]);
    try {
      await assert.rejects(client.nextIds(0), (e: unknown) => e instanceof RangeError && /0/.test(e.message));
      await assert.rejects(client.nextUuids(0), RangeError);
      await assert.rejects(client.nextValues("orders", 0), RangeError);
      await assert.rejects(client.nextMaskedIds(0), RangeError);
      await assert.rejects(client.nextIds(0, { after: 1n }), RangeError);
      await assert.rejects(client.nextIds(0, { idempotencyKey: "k" }), RangeError);
      const before = client.stats();
      assert.equal(before.connects, 0, "nothing was sent: not even a connection opened");
      assert.equal(before.requests, 0);
      assert.equal(typeof (await client.nextId()), "bigint");
      assert.equal(client.stats().connects, 1);
      await assert.rejects(client.nextIds(-1), RangeError);
      await assert.rejects(client.nextIds(1.5), TypeError);
    } finally {
      await client.close();
    }
  });

  test("many concurrent callers on one connection get distinct IDs, increasing per call", async () => {
    const client = new Client([node.addr]);
    try {
      const calls = await Promise.all(Array.from({ length: 2000 }, (_, i) => client.nextIds(1 + (i % 7))));
      const all = calls.flatMap((ids) => Array.from(ids));
      assert.equal(all.length, calls.reduce((s, ids) => s + ids.length, 0));
      assert.ok(allDistinct(all));
      assert.ok(calls.every(increasing));
      assert.equal(client.stats().connects, 1, "one pipelined connection");
    } finally {
      await client.close();
    }
  });

  test("the prefetch pool never hands out an ID twice under concurrent callers", async () => {
    const client = new Client([node.addr]);
    const pool = new PrefetchPool(client, { size: 500, lowWater: 100 });
    try {
      const got: bigint[] = [];
      await Promise.all(
        Array.from({ length: 20 }, async () => {
          for (let i = 0; i < 300; i++) got.push(await pool.next());
        }),
      );
      got.push(...(await Promise.all(Array.from({ length: 3000 }, () => pool.next()))));
      assert.equal(got.length, 9000);
      assert.ok(got.every((id) => typeof id === "bigint"));
      assert.ok(allDistinct(got));
      // Also distinct from IDs the client fetches directly beside the pool.
      const direct = Array.from(await client.nextIds(1000));
      assert.ok(allDistinct([...got, ...direct]));
      const s = pool.stats();
      assert.equal(s.served, 9000);
      assert.ok(s.refills >= 18, `refills ${s.refills}`);
    } finally {
      pool.close();
      await client.close();
    }
  });
});

describe("pipelining and deadlines (fake nodes)", () => {
  test("many requests are in flight on one connection at once", async () => {
    // The fake answers nothing until 50 requests have arrived: lock-step would hang.
    const fake = await FakeNode.start(defaultHello(), "serve", { holdUntil: 50 });
    const client = new Client([fake.addr], { timeoutMs: 5000 });
    try {
      const calls = await Promise.all(Array.from({ length: 50 }, () => client.nextIds(3)));
      assert.ok(allDistinct(calls.flatMap((c) => Array.from(c))));
      assert.equal(fake.connections, 1);
      assert.equal(fake.requests, 50);
    } finally {
      await client.close();
      await fake.close();
    }
  });

  test("RANGES with several runs are expanded, on a version 2 connection", async () => {
    const fake = await FakeNode.start(defaultHello({ version: 2 }), "serve", { runLength: 7 });
    const client = new Client([fake.addr]);
    try {
      const ids = await client.nextIds(100);
      assert.deepEqual(Array.from(ids), fake.idsByConnection[0]);
      assert.ok(increasing(ids));
      assert.ok(ids[7]! - ids[6]! === 2n, "a gap between runs");
    } finally {
      await client.close();
      await fake.close();
    }
  });

  test("a call's timeoutMs and AbortSignal give DeadlineError without failing the node", async () => {
    const silent = await FakeNode.start(defaultHello(), "silent");
    const client = new Client([silent.addr], { timeoutMs: 60_000 });
    try {
      const start = performance.now();
      await assert.rejects(client.nextId({ timeoutMs: 200 }), DeadlineError);
      assert.ok(performance.now() - start < 2000);
      const ac = new AbortController();
      const p = client.nextIds(10, { signal: ac.signal });
      setTimeout(() => ac.abort(new Error("caller gave up")), 50);
      await assert.rejects(p, (e: unknown) => e instanceof DeadlineError && (e.cause as Error).message === "caller gave up");
      await assert.rejects(client.ping({ signal: AbortSignal.abort() }), DeadlineError);
      const state = client.nodes()[0]!;
      assert.equal(state.down, false, "a caller's deadline is not a node failure");
      assert.equal(state.connected, true);
    } finally {
      await client.close();
      await silent.close();
    }
  });

  test("an abandoned request's answer is dropped and later calls get their own", async () => {
    const fake = await FakeNode.start(defaultHello(), "serve", { holdUntil: 2 });
    const client = new Client([fake.addr], { timeoutMs: 5000 });
    try {
      const ac = new AbortController();
      const first = client.nextIds(5, { signal: ac.signal });
      for (let i = 0; i < 500 && fake.requests < 1; i++) await sleep(5); // it is on the wire
      assert.equal(fake.requests, 1);
      ac.abort();
      await assert.rejects(first, DeadlineError);
      const second = await client.nextIds(3);
      assert.deepEqual(Array.from(second), fake.idsByConnection[0]!.slice(5));
    } finally {
      await client.close();
      await fake.close();
    }
  });
});

// Failover details the shared behaviour scenarios (scenarios.test.ts, clients/vectors/
// scenarios.json) cannot say: connections kept by a 3xx, 305 under split batches and
// concurrent callers, the errors NoNodeAvailableError lists, backoff timing, a node with
// another layout, bad arguments. Which status fails over, 2xx/304 thrown at once, 305
// reconnects, drop/hang/garbage failover, the sticky node and every node down are scenarios.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client } from "../client.js";
import { ClientClosedError, NoNodeAvailableError, ProtocolError, ServerError, UnavailableError } from "../errors.js";
import { FakeNode, NodeProc, allDistinct, defaultHello, sleep, unusedPort } from "./support.js";

function state(client: Client, addr: string) {
  const s = client.nodes().find((n) => n.node === addr);
  assert.ok(s, addr);
  return s;
}

let real: NodeProc;
let epochMs: bigint;
before(async () => {
  real = await NodeProc.start();
  const probe = new Client([real.addr]);
  epochMs = (await probe.layout()).epochMs;
  await probe.close();
});
after(async () => {
  await real?.stop();
});

describe("statuses: connection and concurrency details", () => {
  test("300 keeps the connection, backs the node off and fails over", async () => {
    const fake = await FakeNode.start(defaultHello({ epochMs }), "unavailable", { status: 300 });
    const client = new Client([fake.addr, real.addr], { backoffMinMs: 300 });
    try {
      assert.equal((await client.nextIds(5)).length, 5);
      const s = state(client, fake.addr);
      assert.ok(s.down);
      assert.ok(s.connected, "300 does not close: the connection is kept");
      assert.ok(s.lastError instanceof ServerError && s.lastError.code === 300 && s.lastError.retryElsewhere);
      assert.equal(client.stats().failovers, 1);
    } finally {
      await client.close();
    }
    const only = new Client([fake.addr], { backoffMinMs: 200, backoffMaxMs: 200 });
    try {
      const before = fake.connections;
      for (let i = 0; i < 3; i++) {
        await assert.rejects(only.nextId(), (e: unknown) => e instanceof ServerError && e.code === 300);
        assert.ok(state(only, fake.addr).connected);
        await sleep(250); // past the backoff: the same connection is used again
      }
      assert.equal(fake.connections - before, 1);
    } finally {
      await only.close();
      await fake.close();
    }
  });

  test("305 in a split batch never hands out the answered part", async () => {
    const fake = await FakeNode.start(defaultHello({ maxBatch: 10 }), "range_changed", { serveBefore: 1 });
    const client = new Client([fake.addr], { backoffMinMs: 5000 });
    try {
      const ids = Array.from(await client.nextIds(25)); // 10 + 10 + 5: the first answered, then 305
      const partial = fake.idsByConnection[0]!;
      assert.equal(partial.length, 10);
      assert.equal(ids.length, 25);
      assert.ok(!ids.some((id) => partial.includes(id)), "IDs of the partly answered batch");
      assert.deepEqual(ids, fake.idsByConnection[1]);
    } finally {
      await client.close();
      await fake.close();
    }
  });

  test("305 with many requests in flight from concurrent callers", async () => {
    const fake = await FakeNode.start(defaultHello(), "range_changed", { serveBefore: 10 });
    const client = new Client([fake.addr], { backoffMinMs: 5000 });
    try {
      const results = await Promise.all(
        Array.from({ length: 4 }, async () => {
          const got: bigint[] = [];
          for (let i = 0; i < 25; i++) got.push(...(await client.nextIds(2)));
          return got;
        }),
      );
      const all = results.flat();
      assert.equal(all.length, 200);
      assert.ok(allDistinct(all));
      assert.equal(fake.connections, 2);
      assert.equal(client.stats().nodeFailures, 0);
    } finally {
      await client.close();
      await fake.close();
    }
  });

});

describe("broken and unreachable nodes", () => {
  test("all nodes down: NoNodeAvailableError lists each node's error, then fails fast while they back off", async () => {
    const a = `127.0.0.1:${await unusedPort()}`;
    const b = `127.0.0.1:${await unusedPort()}`;
    const client = new Client([a, b], { connectTimeoutMs: 500, backoffMinMs: 5000 });
    try {
      const e1 = await client.nextId().then(
        () => assert.fail("served"),
        (e: unknown) => e,
      );
      assert.ok(e1 instanceof NoNodeAvailableError && e1 instanceof UnavailableError);
      assert.deepEqual([...e1.errors.keys()].sort(), [a, b].sort());
      for (const err of e1.errors.values()) assert.ok(err instanceof UnavailableError);
      const start = performance.now();
      const e2 = await client.nextId().then(
        () => assert.fail("served"),
        (e: unknown) => e,
      );
      assert.ok(performance.now() - start < 200);
      assert.ok(e2 instanceof NoNodeAvailableError);
      assert.deepEqual([...e2.retryInMs.keys()].sort(), [a, b].sort());
      assert.match(e2.message, /retried in/);
    } finally {
      await client.close();
    }
  });

  test("backoff doubles per failure and is capped", async () => {
    const dead = `127.0.0.1:${await unusedPort()}`;
    const client = new Client([dead], { backoffMinMs: 300, backoffMaxMs: 900 });
    try {
      for (const [k, delay] of [300, 600, 900, 900].entries()) {
        await assert.rejects(client.nextId(), UnavailableError);
        const s = state(client, dead);
        assert.equal(s.failures, k + 1);
        assert.ok(s.retryInMs <= delay + 10 && s.retryInMs > delay - 250, `${s.retryInMs} for ${delay}`);
        await assert.rejects(client.nextId(), NoNodeAvailableError); // skipped while backing off
        await sleep(delay + 50);
      }
    } finally {
      await client.close();
    }
  });

  test("a node with another ID layout is refused", async () => {
    const first = await FakeNode.start(defaultHello({ epochMs }), "serve");
    const odd = await FakeNode.start(defaultHello({ epochMs: 12345n }), "serve");
    const client = new Client([first.addr, odd.addr], { backoffMinMs: 5000 });
    try {
      await client.nextId(); // learns the cluster's layout from the first node
      await first.close(); // then it goes away: the call moves on to the odd node
      const err = await client.nextId().then(
        () => assert.fail("served by a node with another layout"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NoNodeAvailableError);
      assert.match(String(err.errors.get(odd.addr)), /layout/);
      assert.ok(err.errors.get(odd.addr) instanceof ProtocolError);
    } finally {
      await client.close();
      await odd.close();
    }
  });

  test("bad constructor arguments and a closed client", async () => {
    for (const o of [{ timeoutMs: 0 }, { backoffMinMs: 2, backoffMaxMs: 1 }, { maxVersion: 0 }, { maxVersion: 6 }, { sequencePrefetch: -1 }]) {
      assert.throws(() => new Client(["127.0.0.1:1"], o), RangeError);
    }
    for (const nodes of [[], ["nohost"], ["h:0"], ["a:1", "a:1"], ["h:65536"]]) {
      assert.throws(() => new Client(nodes), RangeError, JSON.stringify(nodes));
    }
    assert.throws(() => new Client(["h:1"], { tls: { certFile: "/nonexistent" } }), /cannot read/);
    const client = new Client([real.addr]);
    await client.nextId();
    await client.close();
    await assert.rejects(client.nextId(), ClientClosedError);
  });
});

// Named sequences (protocol version 3) against fake nodes: what is sent, how each answer
// maps (clients/vectors/SEQUENCES.md), version refusal, and prefetch for dense sequences only.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Client } from "../client.js";
import { ClientClosedError, DeadlineError, NoNodeAvailableError, ProtocolError, SequencesUnsupportedError, ServerError, UnavailableError } from "../errors.js";
import { FakeNode, allDistinct, defaultHello, type FakeOptions, type FakeSequence } from "./support.js";

const V3 = defaultHello({ version: 3 });

function increasing(values: ArrayLike<bigint>): boolean {
  for (let i = 1; i < values.length; i++) if (values[i]! <= values[i - 1]!) return false;
  return true;
}

function range(from: bigint, n: number): bigint[] {
  return Array.from({ length: n }, (_, i) => from + BigInt(i));
}

async function withFake<T>(o: FakeOptions, body: (fake: FakeNode) => Promise<T>, hello = V3): Promise<T> {
  const fake = await FakeNode.start(hello, "serve", o);
  try {
    return await body(fake);
  } finally {
    await fake.close();
  }
}

function seqs(entries: Record<string, FakeSequence["mode"] | FakeSequence>): Record<string, FakeSequence> {
  const out: Record<string, FakeSequence> = {};
  for (const [name, v] of Object.entries(entries)) out[name] = typeof v === "string" ? { mode: v } : v;
  return out;
}

describe("GET_VALUES and VALUES", () => {
  test("nextValue and nextValues send GET_VALUES with the name and count, and give the values as bigint", async () => {
    await withFake({ sequences: seqs({ orders: { mode: "dense", next: 42n }, "invoice.tenant-42": "strict" }) }, async (fake) => {
      const client = new Client([fake.addr]);
      try {
        const one = await client.nextValue("orders");
        assert.equal(typeof one, "bigint");
        assert.equal(one, 42n);
        const many = await client.nextValues("orders", 5);
        assert.ok(many instanceof BigUint64Array);
        assert.deepEqual(Array.from(many), range(43n, 5));
        assert.deepEqual(Array.from(await client.nextValues("invoice.tenant-42", 3)), [1n, 2n, 3n]);
        assert.deepEqual(fake.valueRequests(), [
          { count: 1, name: "orders" },
          { count: 5, name: "orders" },
          { count: 3, name: "invoice.tenant-42" },
        ]);
        assert.equal(client.nodes()[0]!.hello?.version, 3, "the client offers 1..=3");
        const st = client.stats();
        assert.deepEqual([st.valueRequests, st.values, st.connects], [3, 9, 1]);
      } finally {
        await client.close();
      }
    });
  });

  test("IDs and values share one pipelined connection, answered in order", async () => {
    await withFake({ sequences: seqs({ a: "dense", b: "strict" }), holdUntil: 30 }, async (fake) => {
      const client = new Client([fake.addr], { timeoutMs: 5000 });
      try {
        const calls = await Promise.all(
          Array.from({ length: 30 }, (_, i) => (i % 3 === 0 ? client.nextIds(2) : i % 3 === 1 ? client.nextValues("a", 2) : client.nextValues("b", 1))),
        );
        assert.equal(fake.connections, 1);
        assert.deepEqual(Array.from(calls[1]!), [1n, 2n]);
        assert.deepEqual(Array.from(calls[4]!), [3n, 4n]);
        assert.deepEqual(Array.from(calls[2]!), [1n]);
        assert.deepEqual(Array.from(calls[29]!), [10n]);
        assert.ok(calls[0]![0]! > 1n << 39n, "IDs from the ID counter");
      } finally {
        await client.close();
      }
    });
  });

  test("bad names and counts are TypeError or RangeError, and nothing is sent", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr]);
      try {
        for (const name of [5, null, undefined, {}, Symbol("x")]) {
          await assert.rejects(client.nextValue(name as unknown as string), TypeError, String(name));
        }
        for (const name of ["", "Orders", ".orders", "-a", "_a", "a/b", "a b", "café", "o".repeat(65)]) {
          await assert.rejects(client.nextValue(name), RangeError, name);
          await assert.rejects(client.nextValues(name, 1), RangeError, name);
        }
        for (const n of [1.5, NaN, "2", 2n]) await assert.rejects(client.nextValues("orders", n as unknown as number), TypeError, String(n));
        for (const n of [0, -1, 1048577, Infinity]) await assert.rejects(client.nextValues("orders", n), n === Infinity ? TypeError : RangeError, String(n));
        for (const sequencePrefetch of [0, 10]) {
          const c = new Client([fake.addr], { sequencePrefetch });
          await assert.rejects(c.nextValue("orders", { timeoutMs: 0 }), RangeError);
          await assert.rejects(c.nextValue("orders", { signal: "soon" as unknown as AbortSignal }), TypeError);
          await c.close();
        }
        assert.equal(fake.connections, 0, "nothing sent, not even a HELLO");
        assert.equal(client.stats().valueRequests, 0);
        assert.equal(await client.nextValue("o".repeat(64)).catch((e: unknown) => e instanceof ServerError && e.code), 203, "64 bytes are a name");
      } finally {
        await client.close();
      }
    });
  });

  test("n above the node's max_batch, or a name above its max_request_frame, is a RangeError before sending", async () => {
    await withFake({ sequences: seqs({ orders: "dense", ["o".repeat(20)]: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr]);
      try {
        await assert.rejects(client.nextValues("orders", 11), (e: unknown) => e instanceof RangeError && /max_batch 10/.test(e.message));
        assert.equal((await client.nextValues("orders", 10)).length, 10);
        await assert.rejects(client.nextValue("o".repeat(20)), (e: unknown) => e instanceof RangeError && /max_request_frame 24/.test(e.message));
        assert.equal(await client.nextValue("o".repeat(19)).catch((e: unknown) => e instanceof ServerError && e.code), 203);
        assert.deepEqual(fake.valueRequests(), [
          { count: 10, name: "orders" },
          { count: 1, name: "o".repeat(19) },
        ]);
        assert.equal(client.nodes()[0]!.down, false, "the node is not at fault");
      } finally {
        await client.close();
      }
    }, defaultHello({ version: 3, maxBatch: 10, maxRequestFrame: 24 }));
  });

  test("a node that negotiated version 1 or 2 is refused without sending, and no other node is tried", async () => {
    for (const version of [1, 2]) {
      const old = await FakeNode.start(defaultHello({ version }), "serve", { sequences: seqs({ orders: "dense" }) });
      const other = await FakeNode.start(V3, "serve", { sequences: seqs({ orders: "dense" }) });
      const client = new Client([old.addr, other.addr], { sequencePrefetch: 100 });
      try {
        const err = await client.nextValue("orders").then(
          () => assert.fail("served by a version " + version + " node"),
          (e: unknown) => e,
        );
        assert.ok(err instanceof SequencesUnsupportedError, String(err));
        assert.equal(err.version, version);
        assert.equal(err.node, old.addr);
        assert.match(err.message, new RegExp(`speaks protocol version ${version}; named sequences need version 3`));
        assert.equal(old.received.length, 0, "no GET_VALUES (nor anything else) after the HELLO");
        assert.equal(other.connections, 0, "the other node was not tried");
        const s = client.nodes()[0]!;
        assert.ok(s.connected && !s.down, "the node is not marked down");
        assert.equal((await client.nextIds(3)).length, 3, "IDs still come from it");
      } finally {
        await client.close();
        await old.close();
        await other.close();
      }
    }
  });

  test("a client limited to maxVersion 2 says the node speaks version 2", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr], { maxVersion: 2 });
      try {
        await assert.rejects(client.nextValue("orders"), (e: unknown) => e instanceof SequencesUnsupportedError && e.version === 2);
        assert.equal(fake.valueRequests().length, 0);
      } finally {
        await client.close();
      }
    });
  });

  test("broken VALUES frames are ProtocolErrors and the node is marked down", async () => {
    for (const [bad, status] of [["count", null], ["order", 100], ["mode", 100]] as const) {
      await withFake({ sequences: seqs({ orders: "dense" }), badValues: bad }, async (fake) => {
        const client = new Client([fake.addr], { backoffMinMs: 5000 });
        try {
          await assert.rejects(client.nextValues("orders", 3), (e: unknown) => e instanceof ProtocolError && e.status === status, bad);
          const s = client.nodes()[0]!;
          assert.ok(s.down && !s.connected, bad);
        } finally {
          await client.close();
        }
      });
    }
  });

  test("a VALUES frame in answer to GET_RANGES, or IDS to GET_VALUES, is a ProtocolError", async () => {
    // A node that answers GET_VALUES with IDS and everything else with VALUES (one frame per
    // data chunk: the client waits for each answer).
    const { encodeHelloOk, encodeIds, encodeValues } = await import("../protocol.js");
    const net = await import("node:net");
    const server = net.createServer((sock) => {
      sock.on("error", () => undefined);
      let greeted = false;
      sock.on("data", (chunk: Buffer) => {
        if (!greeted) {
          greeted = true;
          sock.write(encodeHelloOk(V3));
          return;
        }
        sock.write(chunk[4] === 0x05 ? encodeIds([1n]) : encodeValues("dense", [1n]));
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    const addr = `127.0.0.1:${(server.address() as { port: number }).port}`;
    const client = new Client([addr], { backoffMinMs: 1, backoffMaxMs: 1 });
    try {
      await client.layout();
      await assert.rejects(client.nextId(), (e: unknown) => e instanceof ProtocolError && /GET_RANGES answered with VALUES/.test(e.message));
      await new Promise((r) => setTimeout(r, 10)); // past the backoff
      await assert.rejects(client.nextValue("orders"), (e: unknown) => e instanceof ProtocolError && /GET_VALUES answered with IDS/.test(e.message));
    } finally {
      await client.close();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

describe("answers that fail a sequence call", () => {
  const atOnce = [
    [203, "UNKNOWN_SEQUENCE"],
    [204, "INVALID_SEQUENCE_NAME"],
    [307, "SEQUENCE_USED_UP"],
    [200, "INVALID_COUNT"],
    [201, "BATCH_TOO_LARGE"],
  ] as const;
  for (const [status, name] of atOnce) {
    test(`${status} ${name} fails at once with the status, no other node tried`, async () => {
      const fake = await FakeNode.start(V3, "unavailable", { status });
      const other = await FakeNode.start(V3, "serve", { sequences: seqs({ orders: "dense" }) });
      const client = new Client([fake.addr, other.addr]);
      try {
        for (let i = 0; i < 2; i++) {
          await assert.rejects(client.nextValue("orders"), (e: unknown) => e instanceof ServerError && e.code === status && e.statusName === name && !e.closes && !e.retryElsewhere);
        }
        assert.equal(other.connections, 0);
        const s = client.nodes()[0]!;
        assert.ok(s.connected && !s.down, "the connection stays usable");
        assert.equal(fake.connections, 1);
        assert.equal(client.stats().failovers, 0);
      } finally {
        await client.close();
        await fake.close();
        await other.close();
      }
    });
  }

  test("the fake's own answers: unknown name 203, used up 307", async () => {
    await withFake({ sequences: seqs({ tiny: { mode: "dense", max: 5n } }) }, async (fake) => {
      const client = new Client([fake.addr]);
      try {
        await assert.rejects(client.nextValue("nope"), (e: unknown) => e instanceof ServerError && e.code === 203);
        assert.deepEqual(Array.from(await client.nextValues("tiny", 4)), [1n, 2n, 3n, 4n]);
        await assert.rejects(client.nextValues("tiny", 2), (e: unknown) => e instanceof ServerError && e.code === 307);
        assert.equal(await client.nextValue("tiny"), 5n);
        await assert.rejects(client.nextValue("tiny"), (e: unknown) => e instanceof ServerError && e.code === 307 && e.statusName === "SEQUENCE_USED_UP");
      } finally {
        await client.close();
      }
    });
  });

  for (const status of [308, 306, 300]) {
    test(`${status} is retried on the next node like a GET_IDS, keeping the connection`, async () => {
      const fake = await FakeNode.start(V3, "unavailable", { status });
      const other = await FakeNode.start(V3, "serve", { sequences: seqs({ orders: { mode: "dense", next: 7n } }) });
      const client = new Client([fake.addr, other.addr], { backoffMinMs: 5000 });
      try {
        assert.deepEqual(Array.from(await client.nextValues("orders", 2)), [7n, 8n]);
        const s = client.nodes()[0]!;
        assert.ok(s.down && s.connected, "backed off, the connection kept");
        assert.ok(s.lastError instanceof ServerError && s.lastError.code === status && s.lastError.retryElsewhere);
        assert.equal(client.stats().failovers, 1);
        assert.deepEqual(other.valueRequests(), [{ count: 2, name: "orders" }], "asked again, on the other node");
      } finally {
        await client.close();
        await fake.close();
        await other.close();
      }
    });
  }

  test("308 on the only node is thrown with its status", async () => {
    const fake = await FakeNode.start(V3, "unavailable", { status: 308 });
    const client = new Client([fake.addr]);
    try {
      await assert.rejects(client.nextValue("orders"), (e: unknown) => e instanceof ServerError && e.code === 308 && e.statusName === "SEQUENCE_UNAVAILABLE" && e.retryElsewhere);
      await assert.rejects(client.nextValue("orders"), NoNodeAvailableError, "backing off");
    } finally {
      await client.close();
      await fake.close();
    }
  });

  test("closing statuses drop the connection and fail over: 302 and 500", async () => {
    const shutting = await FakeNode.start(V3, "unavailable", { status: 302 });
    const internal = await FakeNode.start(V3, "unavailable", { status: 500 });
    const other = await FakeNode.start(V3, "serve", { sequences: seqs({ orders: "dense" }) });
    const a = new Client([shutting.addr, other.addr], { backoffMinMs: 5000 });
    const b = new Client([internal.addr, other.addr]);
    try {
      assert.equal(await a.nextValue("orders"), 1n);
      assert.ok(!a.nodes()[0]!.connected && a.nodes()[0]!.down);
      assert.equal(await b.nextValue("orders"), 2n);
      assert.ok(!b.nodes()[0]!.connected && b.nodes()[0]!.down);
      const last = b.nodes()[0]!.lastError;
      assert.ok(last instanceof ServerError && last.code === 500 && last.closes);
    } finally {
      await a.close();
      await b.close();
      await shutting.close();
      await internal.close();
      await other.close();
    }
  });

  test("a broken stream under a call is retried on a new connection (values never re-sent)", async () => {
    const fake = await FakeNode.start(V3, "range_changed", { serveBefore: 1, sequences: seqs({ orders: "dense" }) });
    const client = new Client([fake.addr], { backoffMinMs: 5000 });
    try {
      assert.equal(await client.nextValue("orders"), 1n);
      assert.equal(await client.nextValue("orders"), 2n); // 305 and a close, then asked again
      assert.equal(fake.connections, 2);
      assert.equal(client.stats().rangeChanges, 1);
    } finally {
      await client.close();
      await fake.close();
    }
  });

  test("deadlines and a closed client", async () => {
    const silent = await FakeNode.start(V3, "silent");
    for (const sequencePrefetch of [0, 10]) {
      const client = new Client([silent.addr], { timeoutMs: 60_000, sequencePrefetch });
      try {
        const start = performance.now();
        await assert.rejects(client.nextValue("orders", { timeoutMs: 100 }), DeadlineError);
        await assert.rejects(client.nextValues("orders", 3, { signal: AbortSignal.abort() }), DeadlineError);
        assert.ok(performance.now() - start < 3000);
        assert.equal(client.nodes()[0]!.down, false);
        const waiting = client.nextValue("orders");
        await client.close();
        await assert.rejects(waiting, ClientClosedError);
        await assert.rejects(client.nextValue("orders"), ClientClosedError);
      } finally {
        await client.close();
      }
    }
    await silent.close();
  });
});

describe("sequence prefetch (dense sequences only)", () => {
  test("off by default: every call sends its own request", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr]);
      try {
        for (let i = 0; i < 20; i++) await client.nextValue("orders");
        assert.equal(fake.valueRequests().length, 20);
        assert.equal(client.sequenceState("orders"), null);
      } finally {
        await client.close();
      }
    });
  });

  test("with K = 100, 1000 calls on a dense sequence send 1 + 1000/K requests, values unique and increasing", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 100 });
      try {
        const got: bigint[] = [];
        for (let i = 0; i < 1000; i++) got.push(await client.nextValue("orders"));
        assert.deepEqual(got, range(1n, 1000), "every value, in order, none lost");
        const asked = fake.valueRequests().map((r) => r.count);
        assert.equal(asked[0], 1, "the first call asks for exactly what it needs");
        assert.ok(asked.slice(1).every((c) => c === 100), JSON.stringify(asked));
        assert.equal(asked.length, 11);
        assert.equal(client.stats().valueRequests, 11);
        // The last refill (at call 902) brought 902..1001: one left.
        assert.deepEqual(client.sequenceState("orders"), { mode: "dense", buffered: 1, waiting: 0 });
      } finally {
        await client.close();
      }
    });
  });

  test("concurrent calls each get distinct values, in the order they called, sharing requests", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 64 });
      try {
        const calls = await Promise.all(Array.from({ length: 2000 }, (_, i) => (i % 5 === 4 ? client.nextValues("orders", 3) : client.nextValues("orders", 1))));
        const flat = calls.flatMap((c) => Array.from(c));
        assert.equal(flat.length, 2000 + 400 * 2);
        assert.ok(allDistinct(flat));
        assert.ok(increasing(flat), "first come, first served, in increasing order");
        assert.ok(calls.every(increasing));
        const n = fake.valueRequests().length;
        assert.ok(n <= 1 + Math.ceil(2800 / 64) + 1, `${n} requests`);
        // And beside them, a second burst while values are buffered.
        const more = await Promise.all(Array.from({ length: 500 }, () => client.nextValue("orders")));
        assert.ok(allDistinct([...flat, ...more]));
      } finally {
        await client.close();
      }
    });
  });

  test("n above K asks for n; the buffer answers calls while it holds enough", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 10 });
      try {
        assert.deepEqual(Array.from(await client.nextValues("orders", 2)), [1n, 2n]); // learns the mode
        assert.deepEqual(Array.from(await client.nextValues("orders", 25)), range(3n, 25)); // asks max(10, 25)
        assert.deepEqual(Array.from(await client.nextValues("orders", 4)), range(28n, 4)); // asks 10, keeps 6
        assert.deepEqual(Array.from(await client.nextValues("orders", 6)), range(32n, 6)); // from the buffer
        assert.deepEqual(Array.from(await client.nextValues("orders", 1)), [38n]); // asks 10, keeps 39..47
        assert.deepEqual(Array.from(await client.nextValues("orders", 6)), range(39n, 6)); // from the buffer
        // 45..47 left over cannot answer 5: asks max(10, 5) = 48..57; the 3 go first.
        assert.deepEqual(Array.from(await client.nextValues("orders", 5)), range(45n, 5));
        assert.deepEqual(fake.valueRequests().map((r) => r.count), [2, 25, 10, 10, 10]);
        assert.equal(client.sequenceState("orders")!.buffered, 8, "values 50..57 left");
        assert.deepEqual(Array.from(await client.nextValues("orders", 8)), range(50n, 8));
      } finally {
        await client.close();
      }
    });
  });

  test("K above the node's max_batch asks for max_batch", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 1000 });
      try {
        for (let i = 0; i < 30; i++) await client.nextValue("orders");
        assert.deepEqual(fake.valueRequests().map((r) => r.count), [1, 10, 10, 10]);
      } finally {
        await client.close();
      }
    }, defaultHello({ version: 3, maxBatch: 10 }));
  });

  test("a strict sequence is never buffered: every call sends one request for exactly its need", async () => {
    await withFake({ sequences: seqs({ ledger: "strict" }) }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 100 });
      try {
        const got: bigint[] = [];
        for (let i = 0; i < 50; i++) got.push(await client.nextValue("ledger"));
        assert.deepEqual(got, range(1n, 50));
        assert.deepEqual(fake.valueRequests().map((r) => r.count), Array(50).fill(1));
        assert.deepEqual(client.sequenceState("ledger"), { mode: "strict", buffered: 0, waiting: 0 });
        // Concurrent calls too, and batches: one request each, exactly n.
        const calls = await Promise.all(Array.from({ length: 40 }, (_, i) => client.nextValues("ledger", 1 + (i % 3))));
        assert.ok(allDistinct(calls.flatMap((c) => Array.from(c))));
        assert.deepEqual(fake.valueRequests().slice(50).map((r) => r.count), Array.from({ length: 40 }, (_, i) => 1 + (i % 3)));
        assert.equal(client.sequenceState("ledger")!.buffered, 0);
      } finally {
        await client.close();
      }
    });
  });

  test("concurrent first calls on a strict sequence wait for the mode, then each asks for its own", async () => {
    await withFake({ sequences: seqs({ ledger: "strict" }) }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 100 });
      try {
        const calls = await Promise.all(Array.from({ length: 20 }, () => client.nextValues("ledger", 2)));
        assert.ok(allDistinct(calls.flatMap((c) => Array.from(c))));
        assert.deepEqual(fake.valueRequests().map((r) => r.count), Array(20).fill(2));
        assert.equal(client.sequenceState("ledger")!.buffered, 0);
      } finally {
        await client.close();
      }
    });
  });

  test("a strict answer to a refill is not kept, and the mode is learnt again from it", async () => {
    const orders: FakeSequence = { mode: "dense" };
    await withFake({ sequences: { orders } }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 10 });
      try {
        assert.equal(await client.nextValue("orders"), 1n);
        assert.equal(await client.nextValue("orders"), 2n); // asks 10, keeps 3..11
        for (let i = 3n; i <= 11n; i++) assert.equal(await client.nextValue("orders"), i);
        orders.mode = "strict"; // (dropped and created again as strict, say)
        assert.equal(await client.nextValue("orders"), 12n); // the refill of 10 answered strict
        assert.deepEqual(client.sequenceState("orders"), { mode: "strict", buffered: 0, waiting: 0 });
        assert.equal(await client.nextValue("orders"), 22n, "the other 9 were a gap, never kept");
        assert.deepEqual(fake.valueRequests().map((r) => r.count), [1, 10, 10, 1]);
      } finally {
        await client.close();
      }
    });
  });

  test("UNKNOWN_SEQUENCE empties the name's buffer and forgets its mode", async () => {
    const sequences: Record<string, FakeSequence> = { orders: { mode: "dense" } };
    await withFake({ sequences }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 10 });
      try {
        await client.nextValue("orders"); // 1, learns dense
        await client.nextValues("orders", 2); // asks 10: 2, 3 answered, 4..11 kept
        assert.equal(client.sequenceState("orders")!.buffered, 8);
        delete sequences["orders"]; // dropped
        await assert.rejects(client.nextValues("orders", 9), (e: unknown) => e instanceof ServerError && e.code === 203);
        assert.equal(client.sequenceState("orders"), null, "buffer and mode forgotten");
        sequences["orders"] = { mode: "strict", next: 1000n }; // created again, strict
        assert.equal(await client.nextValue("orders"), 1000n, "not 4 from the old buffer");
        assert.deepEqual(fake.valueRequests().map((r) => r.count), [1, 10, 10, 1], "the first call after it asks for exactly its need");
        assert.equal(client.sequenceState("orders")!.mode, "strict");
      } finally {
        await client.close();
      }
    });
  });

  test("near the maximum, a refill refused SEQUENCE_USED_UP is asked again for exactly the call's need", async () => {
    const sequences: Record<string, FakeSequence> = { orders: { mode: "dense", max: 12n } };
    await withFake({ sequences }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 10 });
      try {
        assert.equal(await client.nextValue("orders"), 1n);
        const waiting = await Promise.allSettled(Array.from({ length: 5 }, () => client.nextValue("orders")));
        // The refill of 10 (2..11) serves all five.
        assert.deepEqual(waiting.map((r) => r.status === "fulfilled" && r.value), [2n, 3n, 4n, 5n, 6n]);
        for (let i = 7n; i <= 11n; i++) assert.equal(await client.nextValue("orders"), i);
        // One value is left below the maximum: 10 do not fit, 1 does; then none.
        const last = await Promise.allSettled(Array.from({ length: 3 }, () => client.nextValue("orders")));
        assert.ok(last[0]!.status === "fulfilled" && last[0]!.value === 12n);
        for (const r of last.slice(1)) assert.ok(r.status === "rejected" && r.reason instanceof ServerError && r.reason.code === 307);
        assert.deepEqual(fake.valueRequests().map((r) => r.count), [1, 10, 10, 1, 10, 1, 10, 1]);
        assert.equal(client.sequenceState("orders")!.waiting, 0);
      } finally {
        await client.close();
      }
    });
  });

  test("calls waiting for a refill that fails all fail with its error; the next call asks again", async () => {
    const fake = await FakeNode.start(V3, "serve", { sequences: seqs({ orders: "dense" }), holdUntil: 1000 });
    const client = new Client([fake.addr], { sequencePrefetch: 10, timeoutMs: 300, backoffMinMs: 50, backoffMaxMs: 50 });
    try {
      // The node never answers (it holds everything): the probe times out, the node is down.
      const calls = await Promise.allSettled(Array.from({ length: 4 }, () => client.nextValue("orders")));
      assert.equal(fake.valueRequests().length, 1, "one request for the line");
      for (const r of calls) assert.ok(r.status === "rejected" && r.reason instanceof UnavailableError, String(r.status === "rejected" && r.reason));
      assert.equal(client.sequenceState("orders")!.waiting, 0);
    } finally {
      await client.close();
      await fake.close();
    }
  });

  test("a call above the node's max_batch fails alone; the calls behind it are served", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }) }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 5 });
      try {
        const [a, b, c] = await Promise.allSettled([client.nextValues("orders", 2), client.nextValues("orders", 11), client.nextValues("orders", 3)]);
        assert.ok(a.status === "fulfilled" && a.value.length === 2);
        assert.ok(b.status === "rejected" && b.reason instanceof RangeError);
        assert.ok(c.status === "fulfilled" && c.value.length === 3);
      } finally {
        await client.close();
      }
    }, defaultHello({ version: 3, maxBatch: 10 }));
  });

  test("a caller whose deadline ran out leaves the line; its values go to the next call", async () => {
    await withFake({ sequences: seqs({ orders: "dense" }), holdUntil: 2 }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 10, timeoutMs: 5000 });
      try {
        // The fake holds its answers until a second request arrives.
        const first = client.nextValue("orders", { timeoutMs: 100 });
        const second = client.nextValue("orders");
        await assert.rejects(first, DeadlineError);
        await client.nextIds(1); // the second request: the fake answers both
        assert.equal(await second, 1n, "the abandoned call's value, handed to the next in line");
      } finally {
        await client.close();
      }
    });
  });

  test("buffers for at most 1024 names, the least recently used forgotten first", async () => {
    const names = Array.from({ length: 1030 }, (_, i) => `s${i}`);
    const sequences: Record<string, FakeSequence> = {};
    for (const n of names) sequences[n] = { mode: "dense" };
    await withFake({ sequences }, async (fake) => {
      const client = new Client([fake.addr], { sequencePrefetch: 4 });
      try {
        for (const n of names.slice(0, 1024)) await client.nextValues(n, 2); // mode learnt, nothing kept
        for (const n of names.slice(0, 1024)) await client.nextValue(n); // asks 4, keeps 3
        await client.nextValue("s0"); // s0 is now the most recently used
        for (const n of names.slice(1024)) await client.nextValues(n, 1);
        assert.ok(client.sequenceState("s0") !== null, "recently used: kept");
        for (const n of names.slice(1, 7)) assert.equal(client.sequenceState(n), null, `${n} forgotten`);
        for (const n of names.slice(7)) assert.ok(client.sequenceState(n) !== null, n);
        const before = fake.valueRequests().length;
        assert.equal(await client.nextValue("s1"), 1n + 2n + 4n, "a forgotten name's buffered values are a gap");
        assert.equal(fake.valueRequests().length, before + 1);
        assert.deepEqual(fake.valueRequests().at(-1), { count: 1, name: "s1" }, "and its mode is learnt again");
        const s2 = await client.nextValue("s2000").catch((e: unknown) => e);
        assert.ok(s2 instanceof ServerError && s2.code === 203);
      } finally {
        await client.close();
      }
    });
  });

  test("sequencePrefetch must be an integer in 0..=1048576", () => {
    for (const k of [-1, 1.5, 1048577, NaN]) assert.throws(() => new Client(["127.0.0.1:1"], { sequencePrefetch: k }), RangeError, String(k));
    assert.ok(new Client(["127.0.0.1:1"], { sequencePrefetch: 1048576 }));
  });
});

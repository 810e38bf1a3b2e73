// Version 7 UUIDs (protocol version 4, GET_UUIDS) against fake nodes and a real one: the calls,
// the pre-send checks, the checks of each UUIDS answer, failover, and taking a UUID apart.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Client, Layout } from "../client.js";
import { ProtocolError, ServerError, UuidsUnsupportedError } from "../errors.js";
import { FakeNode, NodeProc, defaultHello, uuidOf, uuidString, uuidsBytes, withTimeout, type FakeOptions } from "./support.js";

const V4 = defaultHello({ version: 4 });
const CANONICAL = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function withFake<T>(o: FakeOptions, body: (fake: FakeNode) => Promise<T>, hello = V4): Promise<T> {
  const fake = await FakeNode.start(hello, "serve", o);
  try {
    return await body(fake);
  } finally {
    await fake.close();
  }
}

function increasing(values: string[]): boolean {
  for (let i = 1; i < values.length; i++) if (values[i]! <= values[i - 1]!) return false;
  return true;
}

describe("GET_UUIDS and UUIDS (fake nodes)", () => {
  test("nextUuid and nextUuids give canonical lowercase strings made from the IDs the node sent", async () => {
    const hello = defaultHello({ version: 4, maxBatch: 10 });
    await withFake(
      {},
      async (fake) => {
        const client = new Client([fake.addr]);
        try {
          const one = await client.nextUuid();
          const many = await client.nextUuids(25); // above max_batch: 10 + 10 + 5, pipelined
          const all = [one, ...many];
          assert.equal(many.length, 25);
          for (const u of all) assert.match(u, CANONICAL);
          assert.ok(increasing(all), "strictly increasing");
          const sent = fake.idsByConnection[0]!;
          assert.deepEqual(all, sent.map((id) => uuidString(uuidOf(hello, id, id * 0x9e3779b97f4a7c15n))));
          const layout = await client.layout();
          assert.deepEqual(all.map((u) => layout.decodeUuid(u).id), sent);
          assert.deepEqual(
            fake.received.map((r) => r.op),
            ["GET_UUIDS", "GET_UUIDS", "GET_UUIDS", "GET_UUIDS"],
          );
          const stats = client.stats();
          assert.equal(stats.uuidRequests, 2);
          assert.equal(stats.uuids, 26);
          // IDs still flow on the same version 4 connection.
          assert.equal((await client.nextIds(3)).length, 3);
          assert.equal(client.stats().connects, 1);
        } finally {
          await client.close();
        }
      },
      hello,
    );
  });

  test("a node below version 4 is refused before sending, and no other node is tried", async () => {
    for (const version of [1, 2, 3]) {
      const old = await FakeNode.start(defaultHello({ version }), "serve");
      const other = await FakeNode.start(V4, "serve");
      const client = new Client([old.addr, other.addr]);
      try {
        for (const call of [() => client.nextUuid(), () => client.nextUuids(5)]) {
          await assert.rejects(call(), (e: unknown) => {
            assert.ok(e instanceof UuidsUnsupportedError, String(e));
            assert.equal(e.version, version);
            assert.equal(e.node, old.addr);
            assert.match(e.message, new RegExp(`protocol version ${version}; UUIDs need protocol version 4`));
            return true;
          });
        }
        assert.equal(old.requests, 0, "nothing sent after the HELLO");
        assert.equal(other.connections, 0, "no other node tried");
        assert.equal(client.stats().failovers, 0);
        assert.equal((await client.nextIds(3)).length, 3, "the node still serves IDs");
      } finally {
        await client.close();
        await old.close();
        await other.close();
      }
    }
  });

  test("a client limited to version 3 gets UuidsUnsupportedError from a version 4 node", async () => {
    await withFake({}, async (fake) => {
      const client = new Client([fake.addr], { maxVersion: 3 });
      try {
        await assert.rejects(client.nextUuid(), (e: unknown) => e instanceof UuidsUnsupportedError && e.version === 3);
        assert.equal(fake.requests, 0);
      } finally {
        await client.close();
      }
    });
  });

  test("bad counts are refused before anything is sent", async () => {
    await withFake({}, async (fake) => {
      const client = new Client([fake.addr]);
      try {
        for (const n of [0, -1, (1 << 24) + 1]) await assert.rejects(client.nextUuids(n), RangeError, String(n));
        for (const n of [1.5, NaN, "3" as unknown as number]) await assert.rejects(client.nextUuids(n), TypeError, String(n));
        assert.equal(fake.connections, 0);
      } finally {
        await client.close();
      }
    });
  });

  const good = [0n, 1n, 2n].map((k) => uuidOf(V4, (1n << 40n) + k, 5n));
  const version4 = Buffer.from(good[0]!);
  version4[6] = (version4[6]! & 0x0f) | 0x40;
  const variant11 = Buffer.from(good[0]!);
  variant11[8] = variant11[8]! | 0xc0;
  const bad: Record<string, (n: number) => Buffer> = {
    "too few": (n) => uuidsBytes(good.slice(0, n - 1)),
    "too many": (n) => uuidsBytes(good.slice(0, n + 1)),
    "version 4": (n) => uuidsBytes([version4, ...good.slice(1, n)]),
    "variant 11": (n) => uuidsBytes([variant11, ...good.slice(1, n)]),
    decreasing: (n) => uuidsBytes(good.slice(0, n).reverse()),
    "IDS instead": (n) => {
      const b = Buffer.alloc(9 + 8 * n);
      b.writeUInt32BE(5 + 8 * n, 0);
      b[4] = 0x82;
      b.writeUInt32BE(n, 5);
      for (let i = 0; i < n; i++) b.writeBigUInt64BE(BigInt(i + 1), 9 + 8 * i);
      return b;
    },
    "count disagrees with length": (n) => {
      const b = uuidsBytes(good.slice(0, n));
      b.writeUInt32BE(n + 1, 5);
      return b;
    },
  };
  for (const [what, uuidAnswer] of Object.entries(bad)) {
    test(`an answer with ${what} is a ProtocolError, and the call fails over`, async () => {
      const broken = await FakeNode.start(V4, "serve", { uuidAnswer });
      const healthy = await FakeNode.start(V4, "serve");
      const alone = new Client([broken.addr]);
      const both = new Client([broken.addr, healthy.addr]);
      try {
        await assert.rejects(alone.nextUuids(2), (e: unknown) => e instanceof ProtocolError && e.node === broken.addr);
        assert.ok(alone.nodes()[0]!.down, "the node is marked down");
        assert.equal((await both.nextUuids(2)).length, 2);
        assert.equal(both.stats().failovers, 1);
      } finally {
        await alone.close();
        await both.close();
        await broken.close();
        await healthy.close();
      }
    });
  }

  test("UUIDs must increase across the frames of one connection", async () => {
    const same = uuidOf(V4, 1n << 40n);
    await withFake({ uuidAnswer: () => uuidsBytes([same]) }, async (fake) => {
      const client = new Client([fake.addr]);
      try {
        assert.equal(await client.nextUuid(), uuidString(same));
        await assert.rejects(client.nextUuid(), (e: unknown) => e instanceof ProtocolError && /does not increase/.test(e.message));
      } finally {
        await client.close();
      }
    });
  });

  test("a refusal is thrown like one for IDs", async () => {
    const fake = await FakeNode.start(V4, "unavailable", { status: 304 });
    const client = new Client([fake.addr]);
    try {
      await assert.rejects(client.nextUuids(3), (e: unknown) => e instanceof ServerError && e.code === 304);
    } finally {
      await client.close();
      await fake.close();
    }
  });
});

describe("Layout.decodeUuid", () => {
  // PROTOCOL.md 11.1 and 11.6: the layout of the worked examples and its UUIDs.
  const layout = new Layout({ epochMs: 1704067200000n, timestampBits: 41, workerBits: 10, sequenceBits: 12, regionBits: 0 });

  test("the worked example decodes to its IDs", () => {
    const first = layout.decodeUuid("019b71b4-4c7b-7800-8000-123456789abc");
    assert.equal(first.id, 264543142405996544n);
    assert.equal(first.unixMs, 1767139200123);
    assert.equal(first.worker, 512);
    assert.equal(first.sequence, 0);
    const second = layout.decodeUuid("019B71B4-4C7B-7800-801F-EDCBA9876543");
    assert.equal(second.id, 264543142405996545n);
    assert.equal(second.sequence, 1);
  });

  test("every failed check says which", () => {
    const cases: [string, RegExp][] = [
      ["019b71b4-4c7b-4800-8000-123456789abc", /version 4/],
      ["019b71b4-4c7b-7800-c000-123456789abc", /variant/],
      ["00000000-0001-7000-8000-000000000000", /before the epoch/],
      ["ffffffff-ffff-7000-8000-000000000000", /past the layout/],
    ];
    for (const [u, why] of cases) assert.throws(() => layout.decodeUuid(u), (e: unknown) => e instanceof RangeError && why.test(e.message), u);
    for (const u of ["019b71b44c7b78008000123456789abc", "{019b71b4-4c7b-7800-8000-123456789abc}", "", 7 as unknown as string]) {
      assert.throws(() => layout.decodeUuid(u), TypeError, String(u));
    }
  });

  test("it inverts the mapping over several layouts", () => {
    for (const [t, w, s] of [[41, 10, 12], [39, 8, 16], [31, 16, 16], [1, 31, 31], [55, 4, 4]] as const) {
      const l = new Layout({ epochMs: 1767225600000n, timestampBits: t, workerBits: w, sequenceBits: s, regionBits: 0 });
      // Times within 2^40 ms of the epoch: a UUID's 48-bit time holds them.
      const keep = (1n << BigInt(w + s + 40)) - 1n;
      for (const id of [0n, 1n, ((1n << 63n) - 1n) & keep, 0x0123456789abcdefn & keep]) {
        const u = uuidString(uuidOf({ epochMs: l.epochMs, workerBits: w, sequenceBits: s }, id, (1n << 74n) - 1n));
        const parts = l.decodeUuid(u);
        assert.equal(parts.id, id, `${t}/${w}/${s} ${id}`);
        assert.deepEqual({ ...parts, id: undefined }, { ...l.decode(id), id: undefined });
      }
    }
  });
});

describe("a real node", () => {
  test("UUIDs are version 7, increasing, and made from the connection's next IDs", async () => {
    const node = await NodeProc.start(["--max-batch", "1000"]);
    const client = new Client([node.addr]);
    try {
      await withTimeout(
        (async () => {
          const before = await client.nextId();
          const one = await client.nextUuid();
          const many = await client.nextUuids(2500); // three GET_UUIDS, joined
          const after = await client.nextId();
          const all = [one, ...many];
          assert.equal(all.length, 2501);
          for (const u of all) assert.match(u, CANONICAL);
          assert.ok(increasing(all));
          assert.equal(client.nodes()[0]!.hello?.version, 5);
          const layout = await client.layout();
          const ids = all.map((u) => layout.decodeUuid(u).id);
          assert.ok(ids[0]! > before && after > ids[ids.length - 1]!, "they continue the connection's IDs");
          for (let i = 1; i < ids.length; i++) assert.ok(ids[i]! > ids[i - 1]!);
          const parts = await client.decodeUuid(one);
          assert.ok(Math.abs(parts.unixMs - Date.now()) < 60_000, "made now");
          assert.equal(client.stats().uuids, 2501);
        })(),
        60_000,
        "UUIDs from a real node",
      );
    } finally {
      await client.close();
      await node.stop();
    }
  });
});

// Protocol version 5 (GET_IDS_WITH, MASKED_IDS): the encoding, the key -> node hash, and the
// calls against real nodes: `after`, idempotency keys, masked IDs, and a node without them.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, fnv1a64, keyNodeIndex } from "../client.js";
import { IdempotencyKeyNodeError, IdsWithUnsupportedError, ServerError } from "../errors.js";
import { MaskKeyring, maskedString } from "../mask.js";
import * as protocol from "../protocol.js";
import { statusName } from "../status.js";
import { NodeProc, unusedPort } from "./support.js";

const KEYS = "1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

function increasing(ids: ArrayLike<bigint>): boolean {
  for (let i = 1; i < ids.length; i++) if (ids[i]! <= ids[i - 1]!) return false;
  return true;
}

describe("GET_IDS_WITH encoding", () => {
  test("options, lengths and refusals before sending", () => {
    assert.equal(protocol.encodeGetIdsWith(3).toString("hex"), "00000006070000000300");
    assert.equal(protocol.encodeGetIdsWith(2, { after: 4196401153n }).toString("hex"), "0000000e07000000020100000000fa200001");
    assert.equal(protocol.encodeGetIdsWith(5, { key: "order-42" }).toString("hex"), "0000000f070000000502086f726465722d3432");
    assert.equal(protocol.encodeGetIdsWith(1, { masked: true }).toString("hex"), "00000006070000000104");
    assert.equal(protocol.encodeGetIdsWith(1, { after: 1n, key: "k".repeat(64), masked: true }).length, 4 + 79);
    assert.throws(() => protocol.encodeGetIdsWith(1, { key: "" }), RangeError);
    assert.throws(() => protocol.encodeGetIdsWith(1, { key: "a b" }), RangeError);
    assert.throws(() => protocol.encodeGetIdsWith(1, { key: "k".repeat(65) }), RangeError);
    assert.throws(() => protocol.encodeGetIdsWith(1, { after: 1n << 63n }), RangeError);
    assert.equal(protocol.MAX_VERSION, 5);
    assert.equal(statusName(205), "INVALID_OPTION");
    assert.equal(statusName(206), "IDEMPOTENCY_KEY_REUSED");
    assert.equal(statusName(207), "IDEMPOTENCY_KEY_IN_FLIGHT");
  });

  test("masked string form needs no key and matches the keyring's", () => {
    const ring = MaskKeyring.parse(KEYS);
    const id = 123456789012345n;
    const m = ring.mask(id);
    assert.equal(maskedString(ring.currentKeyId(), m), ring.maskString(id));
    assert.equal(maskedString(1, 7n), "100000000007");
  });
});

describe("the key -> node hash (FNV-1a 64)", () => {
  test("fixed expectations", () => {
    // FNV-1a 64 reference values.
    assert.equal(fnv1a64(""), 0xcbf29ce484222325n);
    assert.equal(fnv1a64("a"), 0xaf63dc4c8601ec8cn);
    assert.equal(fnv1a64("foobar"), 0x85944171f73967e8n);
    assert.equal(keyNodeIndex("a", 3), Number(0xaf63dc4c8601ec8cn % 3n));
    assert.equal(keyNodeIndex("foobar", 2), 0);
    assert.equal(keyNodeIndex("a", 1), 0);
  });
});

describe("version 5 against real nodes", () => {
  let plain: NodeProc;
  let keyed: NodeProc;
  let masked: NodeProc;
  before(async () => {
    plain = await NodeProc.start();
    keyed = await NodeProc.start(["--idempotency-window", "30s"]);
    masked = await NodeProc.start([], { env: { IDGEN_MASK_KEYS: KEYS } });
  });
  after(async () => {
    await plain?.stop();
    await keyed?.stop();
    await masked?.stop();
  });

  test("after: IDs after the last one seen are greater; a future one is waited for", async () => {
    const client = new Client([plain.addr]);
    try {
      const first = await client.nextIds(5);
      const next = await client.nextIds(5, { after: first[4]! });
      assert.ok(increasing(next) && next[0]! > first[4]!);
      assert.equal(client.nodes()[0]!.hello?.version, 5);
      const layout = await client.layout();
      const shift = BigInt(layout.workerBits + layout.sequenceBits);
      const future = (BigInt(Date.now() + 400) - layout.epochMs) << shift;
      const t0 = Date.now();
      const id = await client.nextId({ after: future });
      assert.ok(id > future);
      assert.ok(Date.now() - t0 >= 200, `answered after ${Date.now() - t0} ms`);
    } finally {
      await client.close();
    }
  });

  test("an idempotency key: the same IDs twice; another request with it is 206", async () => {
    const client = new Client([keyed.addr]);
    const other = new Client([keyed.addr]);
    try {
      const a = await client.nextIds(3, { idempotencyKey: "order-42" });
      const b = await other.nextIds(3, { idempotencyKey: "order-42" }); // another connection
      assert.deepEqual(Array.from(b), Array.from(a));
      await assert.rejects(client.nextIds(4, { idempotencyKey: "order-42" }), (e: unknown) => e instanceof ServerError && e.code === 206);
      const c = await client.nextIds(3, { idempotencyKey: "order-43" });
      assert.ok(c[0]! > a[2]!);
    } finally {
      await client.close();
      await other.close();
    }
  });

  test("masked IDs: unmasked with the keyring, increasing", async () => {
    const client = new Client([masked.addr]);
    try {
      const ring = MaskKeyring.parse(KEYS);
      const r = await client.nextMaskedIds(5);
      assert.equal(r.keyId, 1);
      assert.equal(r.strings.length, 5);
      const ids = Array.from(r.values, (v) => ring.unmask(v, r.keyId));
      assert.ok(increasing(ids));
      assert.deepEqual(r.strings.map((s) => ring.unmaskString(s)), ids);
      const after = await client.nextMaskedIds(2, { after: ids[4]! });
      assert.ok(ring.unmask(after.values[0]!, after.keyId) > ids[4]!);
    } finally {
      await client.close();
    }
  });

  test("a node without keys or masking: 205 INVALID_OPTION", async () => {
    const client = new Client([plain.addr]);
    try {
      await assert.rejects(client.nextIds(1, { idempotencyKey: "k" }), (e: unknown) => e instanceof ServerError && e.code === 205);
      await assert.rejects(client.nextMaskedIds(1), (e: unknown) => e instanceof ServerError && e.code === 205);
      await assert.rejects(client.nextId({ after: 1n << 62n }), (e: unknown) => e instanceof ServerError && e.code === 205);
      assert.ok((await client.nextId()) > 0n); // the connection stays
    } finally {
      await client.close();
    }
  });

  test("a version 4 connection: the node is too old, nothing sent", async () => {
    const client = new Client([plain.addr], { maxVersion: 4 });
    try {
      await assert.rejects(client.nextIds(1, { after: 1n }), (e: unknown) => e instanceof IdsWithUnsupportedError && /too old/.test(e.message));
      await assert.rejects(client.nextMaskedIds(1), IdsWithUnsupportedError);
      assert.ok((await client.nextIds(2)).length === 2);
    } finally {
      await client.close();
    }
  });

  test("a keyed call goes to the key's node only, and is not retried elsewhere", async () => {
    const dead = `127.0.0.1:${await unusedPort()}`;
    // Find keys hashing to each of the two nodes [keyed, dead].
    let toLive = "";
    let toDead = "";
    for (let i = 0; toLive === "" || toDead === ""; i++) {
      const k = `key-${i}`;
      if (keyNodeIndex(k, 2) === 0) toLive ||= k;
      else toDead ||= k;
    }
    const client = new Client([keyed.addr, dead]);
    try {
      assert.equal((await client.nextIds(2, { idempotencyKey: toLive })).length, 2);
      await assert.rejects(client.nextIds(2, { idempotencyKey: toDead }), (e: unknown) => e instanceof IdempotencyKeyNodeError && /not retried on another node/.test(e.message));
    } finally {
      await client.close();
    }
  });
});

// IDs are bigint on every path, never number (a number holds only 53 bits exactly).

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import * as api from "../index.js";
import { NodeProc } from "./support.js";

const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

test("no declared ID path returns or takes a number (lint over the .d.ts files)", () => {
  // Functions and methods whose name says they carry IDs.
  const idName = /^(next\w*|from(Decimal|Base62|Base32)|mask|unmask|checkId|toDecimal|toBase62|toBase32|formatId|readIdsInto|expandInto|toArray|encodeIds)$/;
  let checked = 0;
  for (const file of readdirSync(DIST).filter((f) => f.endsWith(".d.ts"))) {
    const text = readFileSync(path.join(DIST, file), "utf8");
    for (const m of text.matchAll(/^\s*(?:export declare function |(?:static )?(?:async )?)(\w+)\((.*)\): (.+);$/gm)) {
      const [, name, params, ret] = m;
      if (!idName.test(name!)) continue;
      checked++;
      assert.doesNotMatch(ret!, /\bnumber\b/, `${file}: ${name} returns ${ret}`);
      for (const p of params!.split(/,\s*/)) {
        if (/^(id|ids|masked)\??:/.test(p)) assert.doesNotMatch(p, /\bnumber\b/, `${file}: ${name}(${p})`);
      }
    }
  }
  assert.ok(checked >= 12, `only ${checked} ID signatures found`);
});

let node: NodeProc;
before(async () => {
  node = await NodeProc.start();
});
after(async () => {
  await node?.stop();
});

test("every ID the client, the pool and the forms hand out is a bigint (run time)", async () => {
  const client = new api.Client([node.addr]);
  const pool = new api.PrefetchPool(client, { size: 64 });
  try {
    const values: unknown[] = [await client.nextId(), ...(await client.nextIds(100)), await pool.next(), ...(await Promise.all([pool.next(), pool.next()]))];
    const v1 = new api.Client([node.addr], { maxVersion: 1 });
    values.push(await v1.nextId(), ...(await v1.nextIds(70000)));
    await v1.close();
    const id = values[0] as bigint;
    values.push(api.fromDecimal(api.toDecimal(id)), api.fromBase62(api.toBase62(id)), api.fromBase32(api.toBase32(id)));
    const m = api.MaskKeyring.parse("1:000102030405060708090a0b0c0d0e0f");
    values.push(m.mask(id), m.unmask(m.mask(id)), m.unmaskString(m.maskString(id)));
    for (const v of values) assert.equal(typeof v, "bigint");
    // IDs above 2^53 survive exactly.
    assert.ok(id > BigInt(Number.MAX_SAFE_INTEGER));
    assert.equal(api.fromDecimal(api.toDecimal(id)), id);
  } finally {
    pool.close();
    await client.close();
  }
});

test("an ID given as a number is refused, not rounded", () => {
  const lossy = 9007199254740993; // 2^53 + 1 is not representable: it reads 2^53
  assert.throws(() => api.toDecimal(lossy as unknown as bigint), TypeError);
  assert.throws(() => api.MaskKeyring.parse("1:000102030405060708090a0b0c0d0e0f").mask(lossy as unknown as bigint), TypeError);
  assert.throws(() => api.checkId(1), TypeError);
});

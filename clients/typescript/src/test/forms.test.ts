// String forms: the known answers of clients/vectors/forms.json (masking: mask.test.ts).

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { FormError, fromBase32, fromBase62, fromDecimal, toBase32, toBase62, toDecimal } from "../forms.js";
import { loadJson } from "./support.js";

interface Forms {
  forms: { id: string; decimal: string; base62: string; base32: string }[];
  invalid: { form: "decimal" | "base62" | "base32"; text: string; why: string }[];
  base32_aliases: { text: string; id: string }[];
}

const V = loadJson("clients/vectors/forms.json") as Forms;
const PARSE = { decimal: fromDecimal, base62: fromBase62, base32: fromBase32 };

describe("string forms", () => {
  test("every form case encodes and parses", () => {
    assert.ok(V.forms.length >= 10);
    for (const c of V.forms) {
      const id = BigInt(c.id);
      assert.equal(toDecimal(id), c.decimal);
      assert.equal(toBase62(id), c.base62);
      assert.equal(toBase32(id), c.base32);
      assert.equal(fromDecimal(c.decimal), id);
      assert.equal(fromBase62(c.base62), id);
      assert.equal(fromBase32(c.base32), id);
      assert.equal(fromBase32(c.base32.toLowerCase()), id);
      assert.equal(typeof fromDecimal(c.decimal), "bigint");
    }
  });
  test("the sortable forms sort like the numbers", () => {
    const ids = V.forms.map((c) => BigInt(c.id)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const enc of [toBase62, toBase32]) {
      const texts = ids.map(enc);
      assert.deepEqual([...texts].sort(), texts);
    }
  });
  test("every invalid case is rejected with a FormError (a RangeError) that names the form", () => {
    assert.ok(V.invalid.length >= 10);
    for (const c of V.invalid) {
      assert.throws(
        () => PARSE[c.form](c.text),
        (e: unknown) => e instanceof FormError && e instanceof RangeError && e.message.includes(c.form === "decimal" ? "decimal" : c.form),
        `${c.form} ${JSON.stringify(c.text)}: ${c.why}`,
      );
    }
  });
  test("every base32 alias case", () => {
    for (const c of V.base32_aliases) assert.equal(fromBase32(c.text), BigInt(c.id));
  });
  test("numbers, negative and out-of-range bigints are refused", () => {
    for (const enc of [toDecimal, toBase62, toBase32]) {
      assert.throws(() => enc(5 as unknown as bigint), TypeError);
      assert.throws(() => enc(-1n), RangeError);
      assert.throws(() => enc(1n << 63n), RangeError);
    }
  });
});

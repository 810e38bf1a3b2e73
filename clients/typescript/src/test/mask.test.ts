// Masking (clients/vectors/MASK.md) against clients/vectors/mask.json and hostile input.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { inspect } from "node:util";
import { describe, test } from "node:test";

import { BASE62_ALPHABET } from "../forms.js";
import { FF1, MASK_KEYS_ENV, MaskError, MaskKeyring } from "../mask.js";
import { loadJson } from "./support.js";

interface MaskVectors {
  nist_ff1: { sample: number; key: string; radix: number; tweak: string; plaintext: string; ciphertext: string }[];
  mask: { keys: string; width: number; id: string; masked: string; masked_str: string }[];
  errors: { keys: string | null; op: "parse_keys" | "unmask_str" | "mask"; input: string; width: number; error: string }[];
}

const V = loadJson("clients/vectors/mask.json") as MaskVectors;
const DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz";
const KEY = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

function digits(s: string, radix: number): number[] {
  return [...s].map((c) => {
    const d = DIGITS.indexOf(c);
    assert.ok(d >= 0 && d < radix, s);
    return d;
  });
}

const text = (d: number[]): string => d.map((v) => DIGITS[v]).join("");

/** Fails when msg holds 8 or more consecutive characters of a key in the keyring text. */
function assertNoKeyMaterial(msg: string, keyring: string): void {
  for (const line of keyring.split(/[\n,]/)) {
    const item = line.trim();
    const key = item.slice(item.indexOf(":") + 1).trim();
    for (let i = 0; i + 8 <= key.length; i++) {
      assert.ok(!msg.includes(key.slice(i, i + 8)), `${JSON.stringify(msg)} shows key material`);
    }
  }
}

function thrown(f: () => unknown): Error {
  try {
    f();
  } catch (e) {
    return e as Error;
  }
  assert.fail("no error thrown");
}

describe("FF1", () => {
  test("NIST's nine samples encrypt and decrypt", () => {
    assert.equal(V.nist_ff1.length, 9);
    for (const s of V.nist_ff1) {
      const f = new FF1(Buffer.from(s.key, "hex"));
      const tweak = Buffer.from(s.tweak, "hex");
      assert.equal(text(f.encrypt(tweak, digits(s.plaintext, s.radix), s.radix)), s.ciphertext, `sample ${s.sample}`);
      assert.equal(text(f.decrypt(tweak, digits(s.ciphertext, s.radix), s.radix)), s.plaintext, `sample ${s.sample}`);
    }
  });
  // A 128-digit radix-36 string (capitalone/fpe's vector, also in the Rust fpe crate's tests):
  // its PRF output S spans three AES blocks, which NIST's samples (one block) never reach.
  test("a long numeral string", () => {
    const pt = "xs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyalyzuwdxs8a0azh2avyal";
    const ct = "lwulibfp1ju3ksztumqomwenpv7duy9q7pg7zf3eg3rjlfy46gmgkqjfwvromfjjktmbey8meqk9zkcmgvkv4s9ll5ctozme1hf15w7xo6zsylqcr0nbx9jbf10umzok";
    const f = new FF1(Buffer.from("2b7e151628aed2a6abf7158809cf4f3cef4359d8d580aa4f7f036d6f04fc6a94", "hex"));
    assert.equal(text(f.encrypt(new Uint8Array(0), digits(pt, 36), 36)), ct);
    assert.equal(text(f.decrypt(new Uint8Array(0), digits(ct, 36), 36)), pt);
  });
  test("what NIST does not allow is refused", () => {
    assert.throws(() => new FF1(new Uint8Array(20)), RangeError);
    const f = new FF1(new Uint8Array(16));
    assert.throws(() => f.encrypt(new Uint8Array(0), new Array<number>(19).fill(0), 2), RangeError);
    assert.throws(() => f.encrypt(new Uint8Array(0), new Array<number>(10).fill(0), 1), RangeError);
    assert.throws(() => f.encrypt(new Uint8Array(0), [0, 1, 2, 3, 4, 5, 6, 7, 8, 10], 10), RangeError);
  });
});

describe("masking", () => {
  // The masked string's first character names the key the vector masked with; when that is
  // the keyring's current key, mask and maskString give the vector's values, and under any
  // key unmask and unmaskString give the ID back.
  test("every mask vector masks and unmasks", () => {
    assert.ok(V.mask.length >= 10);
    for (const m of V.mask) {
      const ring = MaskKeyring.parse(m.keys);
      const id = BigInt(m.id);
      const masked = BigInt(m.masked);
      const keyId = BASE62_ALPHABET.indexOf(m.masked_str[0]!);
      const what = JSON.stringify(m);
      if (keyId === ring.currentKeyId()) {
        assert.equal(ring.mask(id, m.width), masked, what);
        assert.equal(ring.maskString(id, m.width), m.masked_str, what);
        assert.equal(ring.unmask(masked, undefined, m.width), id, what);
        if (m.width === 63) {
          assert.equal(ring.mask(id), masked, what);
          assert.equal(ring.maskString(id), m.masked_str, what);
          assert.equal(ring.unmask(masked), id, what);
        }
      }
      assert.equal(ring.unmask(masked, keyId, m.width), id, what);
      assert.equal(ring.unmaskString(m.masked_str, m.width), id, what);
    }
  });

  test("every error vector is refused with its message", () => {
    assert.ok(V.errors.length >= 10);
    for (const e of V.errors) {
      const err = thrown(() => {
        switch (e.op) {
          case "parse_keys":
            return MaskKeyring.parse(e.input);
          case "unmask_str":
            return MaskKeyring.parse(e.keys!).unmaskString(e.input, e.width);
          case "mask":
            return MaskKeyring.parse(e.keys!).mask(BigInt(e.input), e.width);
          default:
            throw new Error(`unknown op ${String(e.op)}`);
        }
      });
      assert.ok(err instanceof MaskError, `${JSON.stringify(e)}: ${String(err)}`);
      assert.ok(err.message.includes(e.error), `${err.message} / ${e.error}`);
      assertNoKeyMaterial(err.message, e.op === "parse_keys" ? e.input : e.keys!);
    }
  });

  test("hostile keyrings are refused without showing keys", () => {
    const cases: [string, string][] = [
      ["", "no keys"],
      ["\n\n  \n# nothing\n", "no keys"],
      ["1:" + KEY.slice(0, 62) + "zz", "not hex"],
      ["1:" + KEY.slice(0, 63) + "\u00e9", "not hex"],
      ["1:" + KEY.slice(0, 63) + "\uff11", "not hex"],
      ["1:" + KEY.slice(0, 62), "32, 48 or 64 hex digits"],
      ["1:", "32, 48 or 64 hex digits"],
      ["1:" + KEY.slice(0, 33), "32, 48 or 64 hex digits"],
      ["62:" + KEY, "key id out of range"],
      ["99999999999999999999999:" + KEY, "key id out of range"],
      ["-1:" + KEY, "key id"],
      ["+1:" + KEY, "key id"],
      [":" + KEY, "key id"],
      ["1:" + KEY + "\n2:" + KEY.slice(0, 32) + ",1:" + KEY.slice(0, 48), "duplicate key id 1"],
      [KEY, "<keyid>:<hex key>"],
      ["1:" + KEY + ",garbage", "entry 2: expected"],
    ];
    for (const [input, want] of cases) {
      const err = thrown(() => MaskKeyring.parse(input));
      assert.ok(err instanceof MaskError && err.message.includes(want), `${JSON.stringify(input)}: ${err.message}`);
      assertNoKeyMaterial(err.message, input);
    }
  });

  test("keyring text forms; printing, inspecting and serializing hide the keys", () => {
    const k = MaskKeyring.parse(`\n  # rotated 2026-12\n  7 : ${KEY.toUpperCase()} ,, 3:${KEY.slice(0, 32)}\r\n\n61:${KEY.slice(0, 48)}\n`);
    assert.equal(k.currentKeyId(), 7);
    assert.deepEqual(k.keyIds(), [7, 3, 61]);
    assert.deepEqual(MaskKeyring.parse(`001:${KEY},000:${KEY}`).keyIds(), [1, 0]);
    const lower = MaskKeyring.parse("7:" + KEY);
    for (const id of [0n, 1n, 264543142405996545n]) assert.equal(k.mask(id), lower.mask(id));
    for (const s of [String(k), `${k}`, inspect(k), inspect({ k }, { showHidden: true, depth: 5 }), JSON.stringify({ k })]) {
      assert.ok(s.includes("keys hidden"), s);
      assertNoKeyMaterial(s.toLowerCase(), KEY);
    }
  });

  test("keyrings from a file and from the environment", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "idgen-mask-"));
    try {
      const file = path.join(dir, "mask.keys");
      writeFileSync(file, `# current first\n9:${KEY}\n4:${KEY}\n`);
      const k = MaskKeyring.fromFile(file);
      assert.equal(k.currentKeyId(), 9);
      assert.deepEqual(k.keyIds(), [9, 4]);
      assert.throws(() => MaskKeyring.fromFile(path.join(dir, "missing")), /ENOENT/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    assert.equal(MaskKeyring.fromEnv({ [MASK_KEYS_ENV]: `4:${KEY}` }).currentKeyId(), 4);
    const err = thrown(() => MaskKeyring.fromEnv({}));
    assert.ok(err instanceof MaskError && err.message.includes(MASK_KEYS_ENV));
    assert.throws(() => MaskKeyring.fromEnv({ [MASK_KEYS_ENV]: "  " }), MaskError);
  });

  test("bad widths, IDs, key ids and masked strings are refused", () => {
    const k = MaskKeyring.parse("1:" + KEY);
    for (const w of [-1, 0, 19, 64, 1000, 20.5, NaN]) {
      const err = thrown(() => k.mask(0n, w));
      assert.ok(err instanceof MaskError && err.message.includes("mask width"), err.message);
      assert.throws(() => k.unmask(0n, 1, w), MaskError);
      assert.throws(() => k.unmaskString("100000000000", w), MaskError);
    }
    for (const w of [20, 53, 63]) {
      const err = thrown(() => k.mask(1n << BigInt(w), w));
      assert.ok(err instanceof MaskError && err.message.includes(`not below 2^${w}`), err.message);
      assert.throws(() => k.unmask(1n << BigInt(w), 1, w), MaskError);
    }
    assert.throws(() => k.mask(-1n), MaskError);
    assert.throws(() => k.mask(1n << 64n), MaskError);
    assert.throws(() => k.mask(5 as unknown as bigint), TypeError);
    assert.throws(() => k.unmask(-1n), MaskError);
    for (const id of [0, 2, 61, 62, -1, 1.5]) {
      const err = thrown(() => k.unmask(5n, id));
      assert.ok(err instanceof MaskError && err.message.includes("unknown key id"), err.message);
    }
    for (const s of [
      "200000000000", "1zzzzzzzzzzz", "1AzL8n0Y58m8", "1 0000000000", "1000000000_0", "10000000000\u0000",
      "1\u00e90000000000", "1000000000\n0", "", "1", "10000000000000000000000000", "1\u{1F600}000000000",
    ]) {
      assert.throws(() => k.unmaskString(s), MaskError, JSON.stringify(s));
    }
    const top = k.unmaskString("1AzL8n0Y58m7"); // 2^63 - 1, the largest masked value
    assert.equal(k.maskString(top), "1AzL8n0Y58m7");
  });

  test("random text as keyrings and masked strings: a MaskError or a result, nothing else", () => {
    const k = MaskKeyring.parse("1:" + KEY);
    const pieces = "0123456789abcdefABCDEFzZ:,\n# \r\u0000\u00ff-+\u00e9\uff11\ud83d";
    let x = 5n;
    const next = (n: number): number => {
      x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
      return Number(x >> 33n) % n;
    };
    for (let i = 0; i < 20000; i++) {
      let text = "";
      for (let j = next(80); j > 0; j--) text += next(4) === 0 ? String.fromCharCode(next(0x10000)) : pieces[next(pieces.length)];
      try {
        assert.ok(MaskKeyring.parse(text) instanceof MaskKeyring);
      } catch (e) {
        assert.ok(e instanceof MaskError, String(e));
      }
      const s = text.length > 12 && next(2) === 0 ? text.slice(0, 12) : text;
      try {
        assert.equal(typeof k.unmaskString(s, 20 + next(44)), "bigint");
      } catch (e) {
        assert.ok(e instanceof MaskError, String(e));
      }
    }
  });

  test("masking is one-to-one and keyed by the key id", () => {
    const a = MaskKeyring.parse("1:" + KEY);
    const b = MaskKeyring.parse("2:" + KEY); // same key bytes, another key id
    let x = 123456789n;
    for (const w of [20, 53, 63]) {
      const seen = new Map<bigint, bigint>();
      for (let i = 0; i < 1000; i++) {
        x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
        const id = x >> BigInt(64 - w);
        const m = a.mask(id, w);
        assert.ok(m >= 0n && m >> BigInt(w) === 0n);
        assert.equal(a.unmask(m, 1, w), id);
        const s = a.maskString(id, w);
        assert.equal(s.length, 12);
        assert.equal(s[0], "1");
        assert.equal(a.unmaskString(s, w), id);
        const other = seen.get(m);
        assert.ok(other === undefined || other === id, `collision at ${m}`);
        seen.set(m, id);
        assert.notEqual(b.mask(id, w), m);
      }
    }
  });
});

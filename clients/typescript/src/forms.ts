/**
 * String forms of IDs and keyed public-ID masking (clients/vectors/FORMS.md).
 *
 * Every function takes and returns IDs as `bigint` in `0 .. 2^63`; a `number` is refused
 * (a TypeError), since it cannot hold every ID exactly. Parsing a bad string throws
 * {@link FormError} (a RangeError) that says what is wrong.
 */

const LIMIT = 1n << 63n;
const MASK64 = (1n << 64n) - 1n;
const MASK32 = 0xffff_ffffn;

export const BASE62_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
export const BASE32_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
export const BASE62_WIDTH = 11;
export const BASE32_WIDTH = 13;

/** A string that is not a valid ID in its form. */
export class FormError extends RangeError {
  constructor(message: string) {
    super(message);
    this.name = "FormError";
  }
}

/** Throws unless `id` is a bigint in 0 .. 2^63. */
export function checkId(id: unknown): bigint {
  if (typeof id !== "bigint") {
    throw new TypeError(`an ID is a bigint, not ${typeof id}`);
  }
  if (id < 0n || id >= LIMIT) throw new RangeError(`ID ${id} is outside 0 .. 2^63`);
  return id;
}

// -- decimal ----------------------------------------------------------------------------

/** The plain base-10 form (no sign, no leading zeros). */
export function toDecimal(id: bigint): string {
  return checkId(id).toString(10);
}

/** Parse the decimal form: ASCII digits only, at most 19, no leading zeros but "0". */
export function fromDecimal(text: string): bigint {
  if (typeof text !== "string") throw new TypeError(`expected a string, not ${typeof text}`);
  if (text.length === 0) throw new FormError("empty decimal ID");
  if (!/^[0-9]+$/.test(text)) throw new FormError(`decimal ID ${JSON.stringify(text)} holds a character that is not an ASCII digit`);
  if (text.length > 19) throw new FormError(`decimal ID ${JSON.stringify(text)} is longer than 19 digits`);
  if (text.length > 1 && text[0] === "0") throw new FormError(`decimal ID ${JSON.stringify(text)} has a leading zero`);
  const v = BigInt(text);
  if (v >= LIMIT) throw new FormError(`decimal ID ${text} is at or above 2^63`);
  return v;
}

// -- base62 -----------------------------------------------------------------------------

/** The sortable base62 form: always 11 characters of `0-9A-Za-z`. */
export function toBase62(id: bigint): string {
  return encodeFixed(checkId(id), BASE62_ALPHABET, 62n, BASE62_WIDTH);
}

/** Parse the base62 form (case-sensitive, exactly 11 characters). */
export function fromBase62(text: string): bigint {
  if (typeof text !== "string") throw new TypeError(`expected a string, not ${typeof text}`);
  if (text.length === 0) throw new FormError("empty base62 ID");
  if (text.length !== BASE62_WIDTH) throw new FormError(`base62 ID ${JSON.stringify(text)} has ${text.length} characters, not ${BASE62_WIDTH}`);
  let v = 0n;
  for (const ch of text) {
    const d = BASE62_ALPHABET.indexOf(ch);
    if (d < 0) throw new FormError(`base62 ID ${JSON.stringify(text)}: ${JSON.stringify(ch)} is not in the alphabet 0-9A-Za-z`);
    v = v * 62n + BigInt(d);
  }
  if (v >= LIMIT) throw new FormError(`base62 ID ${JSON.stringify(text)} is at or above 2^63`);
  return v;
}

// -- Crockford base32 -----------------------------------------------------------------------

const BASE32_DECODE: ReadonlyMap<string, number> = (() => {
  const m = new Map<string, number>();
  [...BASE32_ALPHABET].forEach((c, i) => {
    m.set(c, i);
    m.set(c.toLowerCase(), i);
  });
  for (const [alias, digit] of [["I", 1], ["i", 1], ["L", 1], ["l", 1], ["O", 0], ["o", 0]] as const) m.set(alias, digit);
  return m;
})();

/** The sortable Crockford base32 form: always 13 upper-case characters. */
export function toBase32(id: bigint): string {
  return encodeFixed(checkId(id), BASE32_ALPHABET, 32n, BASE32_WIDTH);
}

/** Parse the Crockford base32 form: case-insensitive, I/L read as 1 and O as 0, exactly 13
 * characters, no hyphens. */
export function fromBase32(text: string): bigint {
  if (typeof text !== "string") throw new TypeError(`expected a string, not ${typeof text}`);
  if (text.length === 0) throw new FormError("empty base32 ID");
  if (text.length !== BASE32_WIDTH) throw new FormError(`base32 ID ${JSON.stringify(text)} has ${text.length} characters, not ${BASE32_WIDTH}`);
  let v = 0n;
  for (const ch of text) {
    const d = BASE32_DECODE.get(ch);
    if (d === undefined) throw new FormError(`base32 ID ${JSON.stringify(text)}: ${JSON.stringify(ch)} is not in the Crockford alphabet`);
    v = v * 32n + BigInt(d);
  }
  if (v >= LIMIT) throw new FormError(`base32 ID ${JSON.stringify(text)} is at or above 2^63`);
  return v;
}

function encodeFixed(v: bigint, alphabet: string, base: bigint, width: number): string {
  const out: string[] = new Array<string>(width);
  for (let i = width - 1; i >= 0; i--) {
    out[i] = alphabet[Number(v % base)]!;
    v /= base;
  }
  return out.join("");
}

// -- masking ------------------------------------------------------------------------------

function mix64(z: bigint): bigint {
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

/**
 * Keyed, reversible, collision-free masking of IDs (a 6-round Feistel permutation of
 * 0 .. 2^63 under a 128-bit key, with cycle walking). Masked IDs keep creation time and worker
 * out of public view; they are not secret and not security tokens.
 */
export class Masker {
  private readonly k0: bigint;
  private readonly k1: bigint;

  /** `key`: 16 bytes, or 32 hex digits. */
  constructor(key: string | Uint8Array) {
    let bytes: Uint8Array;
    if (typeof key === "string") {
      if (!/^[0-9a-fA-F]{32}$/.test(key)) throw new RangeError("a mask key is 32 hex digits (16 bytes)");
      bytes = Buffer.from(key, "hex");
    } else if (key instanceof Uint8Array) {
      if (key.length !== 16) throw new RangeError(`a mask key is 16 bytes, not ${key.length}`);
      bytes = key;
    } else {
      throw new TypeError("a mask key is a hex string or a Uint8Array");
    }
    const b = Buffer.from(bytes.buffer, bytes.byteOffset, 16);
    this.k0 = b.readBigUInt64BE(0);
    this.k1 = b.readBigUInt64BE(8);
  }

  private f(i: bigint, r: bigint): bigint {
    return (mix64(this.k0 ^ ((i << 32n) | r)) ^ this.k1) & MASK32;
  }

  private encrypt(x: bigint): bigint {
    let l = x >> 32n;
    let r = x & MASK32;
    for (let i = 0n; i < 6n; i++) [l, r] = [r, l ^ this.f(i, r)];
    return (l << 32n) | r;
  }

  private decrypt(y: bigint): bigint {
    let l = y >> 32n;
    let r = y & MASK32;
    for (let i = 5n; i >= 0n; i--) [l, r] = [r ^ this.f(i, l), l];
    return (l << 32n) | r;
  }

  /** The public form of an ID (also in 0 .. 2^63). */
  mask(id: bigint): bigint {
    let y = this.encrypt(checkId(id));
    while (y >= LIMIT) y = this.encrypt(y);
    return y;
  }

  /** The ID behind a masked value. */
  unmask(masked: bigint): bigint {
    let x = this.decrypt(checkId(masked));
    while (x >= LIMIT) x = this.decrypt(x);
    return x;
  }
}

/**
 * String forms of IDs (clients/vectors/FORMS.md); masking is in mask.ts (MASK.md).
 *
 * Every function takes and returns IDs as `bigint` in `0 .. 2^63`; a `number` is refused
 * (a TypeError), since it cannot hold every ID exactly. Parsing a bad string throws
 * {@link FormError} (a RangeError) that says what is wrong.
 */

const LIMIT = 1n << 63n;

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

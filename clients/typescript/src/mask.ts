/**
 * Masking of IDs (clients/vectors/MASK.md): FF1 format-preserving encryption (NIST SP 800-38G,
 * AES) over an ID's bits, a keyed one-to-one map of `0 .. 2^width` onto itself. A masked ID
 * tells nothing of creation time or worker to anyone without the key, and two IDs never share
 * a masked form.
 */

import { createCipheriv, type Cipher } from "node:crypto";
import { readFileSync } from "node:fs";

import { BASE62_ALPHABET } from "./forms.js";

/** The bit width of the default layout's IDs. */
export const MASK_DEFAULT_WIDTH = 63;
/** The narrowest width masking is defined for (FF1 with radix 2 needs 20 digits). */
export const MASK_MIN_WIDTH = 20;
/** The widest width masking is defined for. */
export const MASK_MAX_WIDTH = 63;
/** The largest key id (one base62 character). */
export const MASK_MAX_KEY_ID = 61;
/** The length of a masked string: a key-id character, then 11 base62 characters. */
export const MASKED_STRING_LENGTH = 12;
/** The environment variable {@link MaskKeyring.fromEnv} reads. */
export const MASK_KEYS_ENV = "IDGEN_MASK_KEYS";

/**
 * A mask keyring that cannot be read, or an ID, masked form, key id or width that masking
 * refuses. The message says why and never holds key material.
 */
export class MaskError extends RangeError {
  constructor(message: string) {
    super(message);
    this.name = "MaskError";
  }
}

const FF1_ROUNDS = 10;

/**
 * FF1, NIST SP 800-38G (Algorithm 7 encrypt, Algorithm 8 decrypt), with AES as the block
 * cipher: numeral strings are arrays of digit values, most significant first. General (radix
 * 2 .. 2^16, any length NIST allows) so NIST's published samples test it.
 */
export class FF1 {
  readonly #aes: Cipher;

  /** FF1 under an AES key of 16, 24 or 32 bytes. */
  constructor(key: Uint8Array) {
    if (key.length !== 16 && key.length !== 24 && key.length !== 32) {
      throw new RangeError("an FF1 key is 16, 24 or 32 bytes");
    }
    // ECB without padding: each 16-byte update is one AES block, so one cipher serves all.
    this.#aes = createCipheriv(`aes-${key.length * 8}-ecb`, key, null);
    this.#aes.setAutoPadding(false);
  }

  encrypt(tweak: Uint8Array, x: readonly number[], radix: number): number[] {
    return this.#run(tweak, x, radix, false);
  }

  decrypt(tweak: Uint8Array, x: readonly number[], radix: number): number[] {
    return this.#run(tweak, x, radix, true);
  }

  #ciph(block: Uint8Array): Buffer {
    return this.#aes.update(block);
  }

  #run(tweak: Uint8Array, x: readonly number[], radix: number, decrypt: boolean): number[] {
    if (!Number.isInteger(radix) || radix < 2 || radix > 1 << 16) throw new RangeError("FF1: radix must be in 2 .. 65536");
    const n = x.length;
    if (n < 2) throw new RangeError("FF1: numeral string length out of range");
    const r = BigInt(radix);
    if (r ** BigInt(n) < 1_000_000n) throw new RangeError("FF1: radix^length is below 1,000,000");
    for (const d of x) {
      if (!Number.isInteger(d) || d < 0 || d >= radix) throw new RangeError("FF1: a numeral is not below the radix");
    }
    const t = tweak.length;
    const u = Math.floor(n / 2);
    const v = n - u;
    let a = x.slice(0, u);
    let b = x.slice(u);
    const ru = r ** BigInt(u);
    const rv = r ** BigInt(v);
    // ceil(v * log2(radix)) is the bit length of radix^v - 1.
    const bLen = Math.ceil((rv - 1n).toString(2).length / 8);
    const d = 4 * Math.ceil(bLen / 4) + 4;
    const zeros = (((-t - bLen - 1) % 16) + 16) % 16;
    const pq = Buffer.alloc(16 + t + zeros + 1 + bLen);
    pq.set([1, 2, 1, (radix >>> 16) & 0xff, (radix >>> 8) & 0xff, radix & 0xff, 10, u & 0xff], 0);
    pq.writeUInt32BE(n, 8);
    pq.writeUInt32BE(t, 12);
    pq.set(tweak, 16);
    const roundAt = 16 + t + zeros;
    const blocks = Math.ceil(d / 16);
    const s = Buffer.alloc(blocks * 16);
    for (let step = 0; step < FF1_ROUNDS; step++) {
      const i = decrypt ? FF1_ROUNDS - 1 - step : step;
      pq[roundAt] = i;
      writeBig(pq, roundAt + 1, bLen, num(decrypt ? a : b, r));
      // PRF: CBC-MAC with a zero IV.
      let y: Buffer = Buffer.alloc(16);
      for (let off = 0; off < pq.length; off += 16) {
        for (let j = 0; j < 16; j++) y[j]! ^= pq[off + j]!;
        y = this.#ciph(y);
      }
      y.copy(s, 0);
      for (let j = 1; j < blocks; j++) {
        const blk = Buffer.from(y);
        blk.writeUInt32BE((blk.readUInt32BE(12) ^ j) >>> 0, 12);
        this.#ciph(blk).copy(s, 16 * j);
      }
      const yNum = BigInt("0x" + s.subarray(0, d).toString("hex"));
      const even = i % 2 === 0;
      const m = even ? u : v;
      const mod = even ? ru : rv;
      let c = decrypt ? num(b, r) - yNum : num(a, r) + yNum;
      c = ((c % mod) + mod) % mod;
      const out = str(c, r, m);
      if (decrypt) {
        b = a;
        a = out;
      } else {
        a = b;
        b = out;
      }
    }
    return [...a, ...b];
  }
}

/** NUM_radix(X): X[0] most significant. */
function num(x: readonly number[], r: bigint): bigint {
  let n = 0n;
  for (const d of x) n = n * r + BigInt(d);
  return n;
}

/** STR^m_radix(v): m digits, most significant first. */
function str(v: bigint, r: bigint, m: number): number[] {
  const out = new Array<number>(m);
  for (let i = m - 1; i >= 0; i--) {
    out[i] = Number(v % r);
    v /= r;
  }
  return out;
}

/** Writes v (below 256^len) big-endian into buf[at .. at+len]. */
function writeBig(buf: Buffer, at: number, len: number, v: bigint): void {
  for (let i = at + len - 1; i >= at; i--) {
    buf[i] = Number(v & 0xffn);
    v >>= 8n;
  }
}

function checkWidth(width: unknown): number {
  if (typeof width !== "number" || !Number.isInteger(width) || width < MASK_MIN_WIDTH || width > MASK_MAX_WIDTH) {
    throw new MaskError(`mask width ${String(width)} is outside ${MASK_MIN_WIDTH}..${MASK_MAX_WIDTH}`);
  }
  return width;
}

function checkValue(v: unknown, width: number, what: string): bigint {
  if (typeof v !== "bigint") throw new TypeError(`${what} is a bigint, not ${typeof v}`);
  if (v < 0n || v >> BigInt(width) !== 0n) throw new MaskError(`${what} ${v} is not below 2^${width}`);
  return v;
}

const HEX = /^[0-9a-fA-F]*$/;

/**
 * The keys masking uses, each under a key id 0..61. The first key of the keyring's text is the
 * current one, which masks; every key unmasks. A masked string names its key (its first
 * character); a masked integer does not, so unmasking one masked under an older key needs that
 * key's id. A keyring never prints, inspects or serializes its keys.
 */
export class MaskKeyring {
  readonly #keys = new Map<number, FF1>();
  readonly #ids: number[] = [];

  private constructor() {}

  /**
   * Reads a keyring: entries `<keyid>:<hex key>` (key id in decimal, 0..61; a key of 32, 48 or
   * 64 hex digits: AES-128, -192 or -256) separated by commas and/or newlines. Blank lines,
   * lines starting with `#` and whitespace around entries are ignored. Throws
   * {@link MaskError} (never showing a key).
   */
  static parse(text: string): MaskKeyring {
    if (typeof text !== "string") throw new TypeError("a keyring is a string");
    const k = new MaskKeyring();
    let entry = 0;
    for (const rawLine of text.split("\n")) {
      const line = rawLine.trim();
      if (line === "" || line.startsWith("#")) continue;
      for (const rawItem of line.split(",")) {
        const item = rawItem.trim();
        if (item === "") continue;
        entry++;
        k.#add(entry, item);
      }
    }
    if (k.#ids.length === 0) throw new MaskError("the keyring holds no keys");
    return k;
  }

  /** Reads the keyring from the environment variable IDGEN_MASK_KEYS (of `env`). */
  static fromEnv(env: Record<string, string | undefined> = process.env): MaskKeyring {
    const text = env[MASK_KEYS_ENV];
    if (text === undefined || text.trim() === "") throw new MaskError(`${MASK_KEYS_ENV} is not set`);
    return MaskKeyring.parse(text);
  }

  /** Reads the keyring from a file. */
  static fromFile(path: string): MaskKeyring {
    return MaskKeyring.parse(readFileSync(path, "utf8"));
  }

  #add(entry: number, item: string): void {
    const colon = item.indexOf(":");
    if (colon < 0) throw new MaskError(`keyring entry ${entry}: expected <keyid>:<hex key>`);
    const idText = item.slice(0, colon).trim();
    const keyText = item.slice(colon + 1).trim();
    if (!/^[0-9]+$/.test(idText)) throw new MaskError(`keyring entry ${entry}: the key id is not a decimal number`);
    const digits = idText.replace(/^0+(?=.)/, ""); // "01" is 1
    const id = digits.length > 2 ? Infinity : Number(digits);
    if (id > MASK_MAX_KEY_ID) throw new MaskError(`keyring entry ${entry}: key id out of range (0..${MASK_MAX_KEY_ID})`);
    if (this.#keys.has(id)) throw new MaskError(`keyring entry ${entry}: duplicate key id ${id}`);
    const where = `keyring entry ${entry} (key id ${id}): `;
    if (!HEX.test(keyText)) throw new MaskError(`${where}the key is not hex`);
    if (keyText.length !== 32 && keyText.length !== 48 && keyText.length !== 64) {
      throw new MaskError(`${where}a key is 32, 48 or 64 hex digits, not ${keyText.length}`);
    }
    const key = Buffer.from(keyText, "hex");
    this.#keys.set(id, new FF1(key));
    key.fill(0);
    this.#ids.push(id);
  }

  /** The id of the key that masks (the keyring's first). */
  currentKeyId(): number {
    return this.#ids[0]!;
  }

  /** The keyring's key ids, the current one first. */
  keyIds(): number[] {
    return [...this.#ids];
  }

  #key(keyId: number): FF1 {
    const f = Number.isInteger(keyId) ? this.#keys.get(keyId) : undefined;
    if (f === undefined) {
      const c = Number.isInteger(keyId) && keyId >= 0 && keyId <= MASK_MAX_KEY_ID ? `${BASE62_ALPHABET[keyId]} (${keyId})` : String(keyId);
      throw new MaskError(`unknown key id ${c}`);
    }
    return f;
  }

  /** FF1 over the width-bit numeral string of x (most significant bit first) with tweak [keyId]. */
  static #run(f: FF1, keyId: number, x: bigint, width: number, decrypt: boolean): bigint {
    const bits = new Array<number>(width);
    for (let i = 0; i < width; i++) bits[i] = Number((x >> BigInt(width - 1 - i)) & 1n);
    const tweak = Uint8Array.of(keyId);
    const out = decrypt ? f.decrypt(tweak, bits, 2) : f.encrypt(tweak, bits, 2);
    let y = 0n;
    for (const b of out) y = (y << 1n) | BigInt(b);
    return y;
  }

  /**
   * The masked form of an ID below 2^width under the current key (width 20..63, default 63,
   * the default layout's); the result is below 2^width too.
   */
  mask(id: bigint, width: number = MASK_DEFAULT_WIDTH): bigint {
    checkWidth(width);
    checkValue(id, width, "ID");
    const current = this.currentKeyId();
    return MaskKeyring.#run(this.#keys.get(current)!, current, id, width, false);
  }

  /** The ID a masked integer stands for, under the key `keyId` (default: the current key). */
  unmask(masked: bigint, keyId: number = this.currentKeyId(), width: number = MASK_DEFAULT_WIDTH): bigint {
    checkWidth(width);
    const f = this.#key(keyId);
    checkValue(masked, width, "masked value");
    return MaskKeyring.#run(f, keyId, masked, width, true);
  }

  /**
   * The masked string form of an ID under the current key: the key id's base62 character, then
   * the masked value in 11 base62 characters, most significant first (12 in all).
   */
  maskString(id: bigint, width: number = MASK_DEFAULT_WIDTH): string {
    return maskedString(this.currentKeyId(), this.mask(id, width));
  }

  /** The ID a masked string stands for, under the key its first character names. */
  unmaskString(text: string, width: number = MASK_DEFAULT_WIDTH): bigint {
    checkWidth(width);
    if (typeof text !== "string") throw new TypeError("a masked string is a string");
    if (text.length !== MASKED_STRING_LENGTH) {
      throw new MaskError(`a masked string is ${MASKED_STRING_LENGTH} characters, not ${text.length}`);
    }
    const digits: number[] = [];
    for (let i = 0; i < MASKED_STRING_LENGTH; i++) {
      const d = BASE62_ALPHABET.indexOf(text[i]!);
      if (d < 0) throw new MaskError(`invalid character at position ${i} of a masked string`);
      digits.push(d);
    }
    const keyId = digits[0]!;
    const f = this.#keys.get(keyId);
    if (f === undefined) throw new MaskError(`unknown key id ${text[0]}`);
    let v = 0n;
    for (let i = 1; i < MASKED_STRING_LENGTH; i++) v = v * 62n + BigInt(digits[i]!);
    if (v >> BigInt(width) !== 0n) throw new MaskError(`masked value is not below 2^${width}`);
    return MaskKeyring.#run(f, keyId, v, width, true);
  }

  /** Names the key ids, never the keys. */
  toString(): string {
    return `MaskKeyring(current key id ${this.currentKeyId()}, key ids ${this.#ids.join(",")}, keys hidden)`;
  }

  toJSON(): string {
    return this.toString();
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}

/**
 * The 12-character string form of a masked value under the key `keyId` (0..61): the key id's
 * base62 character, then the value in 11 base62 digits, most significant first. Needs no key
 * (the form of the masked IDs a node answers, `Client.nextMaskedIds`).
 */
export function maskedString(keyId: number, masked: bigint): string {
  if (!Number.isInteger(keyId) || keyId < 0 || keyId > MASK_MAX_KEY_ID) throw new MaskError(`key id ${String(keyId)} is not 0..${MASK_MAX_KEY_ID}`);
  if (typeof masked !== "bigint" || masked < 0n || masked >> 63n !== 0n) throw new MaskError("a masked value is a bigint below 2^63");
  let m = masked;
  const out = new Array<string>(MASKED_STRING_LENGTH);
  out[0] = BASE62_ALPHABET[keyId]!;
  for (let i = MASKED_STRING_LENGTH - 1; i >= 1; i--) {
    out[i] = BASE62_ALPHABET[Number(m % 62n)]!;
    m /= 62n;
  }
  return out.join("");
}

/**
 * Prefetch for named sequences (clients/vectors/SEQUENCES.md, "Prefetch"): per sequence
 * name, a buffer of values fetched ahead, for dense sequences only.
 *
 * - The first call for a name asks for exactly the values it needs and learns the sequence's
 *   mode from the VALUES `mode` byte; the mode is remembered.
 * - Dense: a call is answered from the buffer while it holds enough values. When it does not,
 *   the call asks for `max(K, n)` values (at most what the node accepts), takes its `n` and
 *   the rest is kept. Calls that arrive meanwhile wait in line (first come, first served) and
 *   are answered from what that request brings, so concurrent calls share requests and every
 *   value goes to exactly one call, in increasing order. Values are taken by synchronous code,
 *   which no other caller can interleave with.
 * - Strict: nothing is ever kept. Every call asks for exactly what it needs, and gets the
 *   values of its own request: a kept value would be older than the call it answers, breaking
 *   the strict mode's real-time order.
 * - `UNKNOWN_SEQUENCE` (203) for a name empties its buffer and forgets its mode.
 * - At most `maxNames` (1024, a namespace's bound) names are held; the least recently used
 *   idle one is forgotten first (its buffered values are a gap).
 *
 * Failures: a request that fails (after the client's failover) fails every call waiting in
 * line for it with the same error (every one of them would meet it), except two answers
 * about the asking call's own count: a RangeError (its `n` above the node's max_batch) fails
 * that call only, and `SEQUENCE_USED_UP` (307) to a request for more than the call needs
 * (`max(K, n)` near the sequence's maximum) is asked again for exactly the call's `n`, whose
 * own 307 then fails that call only; the calls behind it go on. Values buffered when the
 * client closes, or the process ends, are never handed out (a gap, never a duplicate).
 */

import type { CallOptions } from "./client.js";
import type { Values } from "./connection.js";
import { Deadline } from "./deadline.js";
import { ServerError } from "./errors.js";
import type { SequenceMode } from "./protocol.js";
import { SEQUENCE_USED_UP, UNKNOWN_SEQUENCE } from "./status.js";

/**
 * Ask a node for values of `name`: at least `n` (the call's own need: a RangeError, nothing
 * sent, when the node cannot give that many at once) and up to `ask` (capped at what the node
 * accepts). `options` bound the request, failover included.
 */
export type FetchValues = (name: string, n: number, ask: number, options?: CallOptions) => Promise<Values>;

/** A sequence's buffer state, as {@link SequencePrefetch.state} reports it (for tests). */
export interface SequenceBufferState {
  readonly mode: SequenceMode | null;
  /** Values in the buffer now. */
  readonly buffered: number;
  /** Calls waiting in line. */
  readonly waiting: number;
}

interface Waiter {
  readonly n: number;
  settled: boolean;
  /** Ask for exactly `n` (a request for more was refused SEQUENCE_USED_UP). */
  exact: boolean;
  resolve(values: BigUint64Array): void;
  reject(err: Error): void;
}

const EMPTY = new BigUint64Array(0);

class SeqState {
  mode: SequenceMode | null = null;
  buf: BigUint64Array = EMPTY;
  pos = 0;
  /** Calls waiting in line, oldest first (settled ones are skipped). */
  queue: Waiter[] = [];
  /** A request for the line's head is in flight. */
  busy = false;

  get available(): number {
    return this.buf.length - this.pos;
  }

  get idle(): boolean {
    return !this.busy && this.queue.length === 0;
  }

  clear(): void {
    this.mode = null;
    this.buf = EMPTY;
    this.pos = 0;
  }

  /** `n` values off the front of the buffer (a copy: the caller owns it). */
  take(n: number): BigUint64Array {
    const out = this.buf.slice(this.pos, this.pos + n);
    this.pos += n;
    if (this.pos >= this.buf.length) {
      this.buf = EMPTY;
      this.pos = 0;
    }
    return out;
  }
}

export class SequencePrefetch {
  private readonly states = new Map<string, SeqState>();
  private readonly k: number;
  private readonly fetch: FetchValues;
  private readonly maxNames: number;

  constructor(k: number, fetch: FetchValues, maxNames = 1024) {
    this.k = k;
    this.fetch = fetch;
    this.maxNames = maxNames;
  }

  /** `n` values of `name` (checked by the caller), from the buffer or a new request. */
  take(name: string, n: number, options?: CallOptions): Promise<BigUint64Array> {
    const st = this.touch(name);
    if (st.mode === "strict") return this.direct(name, st, n, options);
    if (st.mode === "dense" && st.queue.length === 0 && st.available >= n) return Promise.resolve(st.take(n));
    const deadline = options !== undefined && (options.timeoutMs !== undefined || options.signal !== undefined) ? new Deadline(options) : null;
    const p = new Promise<BigUint64Array>((resolve, reject) => {
      st.queue.push({ n, settled: false, exact: false, resolve, reject });
    });
    const waiter = st.queue[st.queue.length - 1]!;
    this.pump(name, st);
    if (deadline === null) return p;
    return deadline.race(p).then(
      (v) => {
        deadline.dispose();
        return v;
      },
      (e: unknown) => {
        deadline.dispose();
        // Out of line: values that arrive for it go to the next call (dense) or are a gap.
        waiter.settled = true;
        throw e;
      },
    );
  }

  /** What the client holds for `name` (null: nothing). */
  state(name: string): SequenceBufferState | null {
    const st = this.states.get(name);
    return st === undefined ? null : { mode: st.mode, buffered: st.available, waiting: st.queue.filter((w) => !w.settled).length };
  }

  /** Names held now, least recently used first. */
  names(): string[] {
    return [...this.states.keys()];
  }

  /** Values buffered over every name. */
  buffered(): number {
    let n = 0;
    for (const st of this.states.values()) n += st.available;
    return n;
  }

  /** Drop every buffer (a gap) and mode. Calls waiting in line fail with `err`. */
  clear(err: Error): void {
    for (const st of this.states.values()) {
      st.clear();
      this.rejectAll(st, err);
    }
    this.states.clear();
  }

  /** The name's state, now the most recently used; a new one beyond `maxNames` forgets the
   * least recently used idle name (else the least recently used). */
  private touch(name: string): SeqState {
    let st = this.states.get(name);
    if (st !== undefined) {
      this.states.delete(name);
      this.states.set(name, st);
      return st;
    }
    st = new SeqState();
    this.states.set(name, st);
    if (this.states.size > this.maxNames) {
      let victim: string | null = null;
      for (const [key, other] of this.states) {
        if (other === st) break;
        if (victim === null) victim = key; // the least recently used, if none is idle
        if (other.idle) {
          victim = key;
          break;
        }
      }
      // A busy state forgotten here still serves its line; what it keeps afterwards is a gap.
      if (victim !== null) this.states.delete(victim);
    }
    return st;
  }

  /** An answer `UNKNOWN_SEQUENCE` for `name`: empty its buffer, forget its mode. */
  private forget(name: string, st: SeqState): void {
    st.clear();
    if (this.states.get(name) === st) this.states.delete(name);
  }

  private observe(name: string, st: SeqState, err: unknown): void {
    if (err instanceof ServerError && err.code === UNKNOWN_SEQUENCE) this.forget(name, st);
  }

  /** A call that asks for exactly what it needs and gets its own request's values. */
  private direct(name: string, st: SeqState, n: number, options?: CallOptions): Promise<BigUint64Array> {
    return this.fetch(name, n, n, options).then(
      (v) => {
        if (v.mode === "dense" && this.states.get(name) === st) st.mode = "dense";
        return v.values;
      },
      (e: unknown) => {
        this.observe(name, st, e);
        throw e;
      },
    );
  }

  /** Serve the line in order: from the buffer, or by one request for its head. */
  private pump(name: string, st: SeqState): void {
    // Bounded by the line: each round removes a waiter, or returns.
    while (st.queue.length > 0) {
      const head = st.queue[0]!;
      if (head.settled) {
        st.queue.shift();
        continue;
      }
      if (st.busy) return;
      if (st.mode === "strict") {
        // Learnt while they waited: each asks for its own values now, none is kept.
        const line = st.queue.splice(0);
        for (const w of line) {
          if (w.settled) continue;
          this.direct(name, st, w.n).then(
            (values) => settle(w, null, values),
            (e: unknown) => settle(w, e as Error, null),
          );
        }
        return;
      }
      if (st.mode === "dense" && st.available >= head.n) {
        st.queue.shift();
        settle(head, null, st.take(head.n));
        continue;
      }
      // The first call asks for exactly its need (the mode is not known yet); later ones for
      // max(K, n).
      const ask = st.mode === null || head.exact ? head.n : Math.max(this.k, head.n);
      st.busy = true;
      this.fetch(name, head.n, ask).then(
        (v) => {
          st.busy = false;
          this.arrive(st, head, v);
          this.pump(name, st);
        },
        (e: unknown) => {
          st.busy = false;
          this.observe(name, st, e);
          if (e instanceof ServerError && e.code === SEQUENCE_USED_UP && ask > head.n) {
            // Fewer than max(K, n) left below the maximum: ask again for exactly the head's n.
            head.exact = true;
            this.pump(name, st);
          } else if (e instanceof RangeError || (e instanceof ServerError && e.code === SEQUENCE_USED_UP)) {
            // About the head's own n (above the node's max_batch, or more than the sequence
            // has left): the calls behind it may still be served.
            const i = st.queue.indexOf(head);
            if (i >= 0) st.queue.splice(i, 1);
            settle(head, e, null);
            this.pump(name, st);
          } else {
            this.rejectAll(st, e as Error);
          }
        },
      );
      return;
    }
  }

  /** The answer to the head's request. */
  private arrive(st: SeqState, head: Waiter, v: Values): void {
    if (v.mode === "strict") {
      // Never kept: the head gets its values (reserved after it asked); the rest is a gap.
      st.mode = "strict";
      st.buf = EMPTY;
      st.pos = 0;
      const i = st.queue.indexOf(head);
      if (i >= 0) st.queue.splice(i, 1);
      settle(head, null, v.values.length === head.n ? v.values : v.values.slice(0, head.n));
      return;
    }
    st.mode = "dense";
    const rest = st.buf.subarray(st.pos);
    const fresh = v.values;
    if (rest.length > 0 && rest[rest.length - 1]! < fresh[0]!) {
      // Too few to answer the head, so they go first: the line is served in increasing order.
      const merged = new BigUint64Array(rest.length + fresh.length);
      merged.set(rest, 0);
      merged.set(fresh, rest.length);
      st.buf = merged;
    } else {
      // From another node (dense values of two nodes interleave): the few left over are a gap,
      // so that every call still gets increasing values.
      st.buf = fresh;
    }
    st.pos = 0;
  }

  private rejectAll(st: SeqState, err: Error): void {
    const line = st.queue.splice(0);
    for (const w of line) settle(w, err, null);
  }
}

function settle(w: Waiter, err: Error | null, values: BigUint64Array | null): void {
  if (w.settled) return;
  w.settled = true;
  if (err !== null) w.reject(err);
  else w.resolve(values!);
}

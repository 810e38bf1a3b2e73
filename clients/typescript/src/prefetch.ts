/**
 * A prefetch pool: a local buffer of IDs fetched ahead in batches, so that most `next()`
 * calls are answered without a round trip.
 *
 * Safe for any number of concurrent async callers: an ID is taken from the buffer by
 * synchronous code (`buffer[pos++]`), which no other caller can interleave with, and at most
 * one refill is in flight at a time (callers that find the buffer empty wait for that refill
 * and take from what it brought). An ID is handed out at most once.
 *
 * Costs: IDs wait in the buffer, so an ID's timestamp may be older than the moment it is
 * handed out, and IDs still in the buffer when the pool is closed or the process ends are
 * never used (a gap, never a duplicate).
 */

import type { CallOptions, Client } from "./client.js";
import { ClientClosedError, DeadlineError } from "./errors.js";

export interface PrefetchOptions {
  /** IDs fetched per refill (the buffer's capacity). Default 4096. */
  size?: number;
  /** Start a refill in the background when fewer IDs than this remain. Default size / 4. */
  lowWater?: number;
}

export interface PrefetchStats {
  refills: number;
  served: number;
  failedRefills: number;
}

const EMPTY = new BigUint64Array(0);

export class PrefetchPool {
  private readonly client: Client;
  readonly size: number;
  readonly lowWater: number;
  private buffer: BigUint64Array = EMPTY;
  private pos = 0;
  private refilling: Promise<void> | null = null;
  private closed = false;
  private readonly counters: PrefetchStats = { refills: 0, served: 0, failedRefills: 0 };

  constructor(client: Client, options: PrefetchOptions = {}) {
    const size = options.size ?? 4096;
    if (!Number.isInteger(size) || size < 1) throw new RangeError("size must be a positive integer");
    const lowWater = options.lowWater ?? Math.floor(size / 4);
    if (!Number.isInteger(lowWater) || lowWater < 0 || lowWater >= size) throw new RangeError("lowWater must be in 0 .. size - 1");
    this.client = client;
    this.size = size;
    this.lowWater = lowWater;
  }

  /** IDs in the buffer now. */
  get available(): number {
    return this.buffer.length - this.pos;
  }

  /** One ID from the buffer; waits for a refill when it is empty. */
  async next(options?: CallOptions): Promise<bigint> {
    // Bounded: each round waits for one refill, which either brings IDs or throws.
    for (let round = 0; round < 1000; round++) {
      if (this.closed) throw new ClientClosedError("the prefetch pool is closed");
      if (this.pos < this.buffer.length) {
        const id = this.buffer[this.pos++]!;
        this.counters.served++;
        if (this.buffer.length - this.pos < this.lowWater) this.refill().catch(() => undefined);
        return id;
      }
      await this.refill(options);
    }
    throw new DeadlineError("the prefetch pool stayed empty for 1000 refills");
  }

  /** Fill the buffer now (e.g. at start-up); resolves once a refill has completed. */
  async warm(options?: CallOptions): Promise<void> {
    if (this.available < this.size) await this.refill(options);
  }

  /** The refill in flight, or a new one. A caller's deadline bounds only its own wait. */
  private refill(options?: CallOptions): Promise<void> {
    if (this.refilling === null) {
      const want = Math.max(1, this.size - this.available);
      const p = this.client.nextIds(want).then(
        (ids) => {
          if (this.closed) return;
          const rest = this.buffer.subarray(this.pos);
          const merged = new BigUint64Array(rest.length + ids.length);
          merged.set(rest, 0);
          merged.set(ids, rest.length);
          this.buffer = merged;
          this.pos = 0;
          this.counters.refills++;
        },
        (err: unknown) => {
          this.counters.failedRefills++;
          throw err;
        },
      );
      this.refilling = p;
      const clear = () => {
        if (this.refilling === p) this.refilling = null;
      };
      p.then(clear, clear);
    }
    const wait = this.refilling;
    if (options?.timeoutMs === undefined && options?.signal === undefined) return wait;
    return raceDeadline(wait, options);
  }

  stats(): PrefetchStats {
    return { ...this.counters };
  }

  /** Drop the buffered IDs (a gap) and refuse further calls. The client stays open. */
  close(): void {
    this.closed = true;
    this.buffer = EMPTY;
    this.pos = 0;
  }
}

function raceDeadline(p: Promise<void>, o: CallOptions): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const onAbort = () => finish(new DeadlineError("the call was aborted", o.signal!.reason));
    const finish = (err: Error | null) => {
      if (timer !== undefined) clearTimeout(timer);
      o.signal?.removeEventListener("abort", onAbort);
      if (err) reject(err);
      else resolve();
    };
    if (o.signal?.aborted) return finish(new DeadlineError("the call was aborted", o.signal.reason));
    if (o.timeoutMs !== undefined) timer = setTimeout(() => finish(new DeadlineError(`no IDs within the call's ${o.timeoutMs} ms`)), o.timeoutMs);
    o.signal?.addEventListener("abort", onAbort, { once: true });
    p.then(() => finish(null), (e: Error) => finish(e));
  });
}

/** A call's own deadline: `timeoutMs` and `signal` of {@link CallOptions}. */

import type { CallOptions } from "./client.js";
import { DeadlineError } from "./errors.js";

/** The deadline of one call. */
export class Deadline {
  private timer: NodeJS.Timeout | undefined;
  private onAbort: (() => void) | undefined;
  readonly expired: Promise<never>;
  private signal: AbortSignal | undefined;

  constructor(o: CallOptions) {
    this.signal = o.signal;
    this.expired = new Promise<never>((_, reject) => {
      if (o.timeoutMs !== undefined) {
        this.timer = setTimeout(() => reject(new DeadlineError(`no answer within the call's ${o.timeoutMs} ms`)), o.timeoutMs);
      }
      if (o.signal !== undefined) {
        if (o.signal.aborted) reject(new DeadlineError("the call was aborted", o.signal.reason));
        this.onAbort = () => reject(new DeadlineError("the call was aborted", o.signal!.reason));
        o.signal.addEventListener("abort", this.onAbort, { once: true });
      }
    });
    this.expired.catch(() => undefined); // observed through race(); never unhandled
  }

  race<T>(p: Promise<T>): Promise<T> {
    return Promise.race([p, this.expired]);
  }

  dispose(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.onAbort !== undefined) this.signal!.removeEventListener("abort", this.onAbort);
  }
}

/** `o`, checked: a positive `timeoutMs`, an AbortSignal `signal`. */
export function checkCall(o: CallOptions): CallOptions {
  if (o.timeoutMs !== undefined && (typeof o.timeoutMs !== "number" || !(o.timeoutMs > 0))) throw new RangeError("timeoutMs must be a positive number of ms");
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new TypeError("signal must be an AbortSignal");
  return o;
}

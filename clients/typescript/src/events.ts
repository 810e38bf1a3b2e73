/**
 * Observability (clients/vectors/CONFIG.md, "Observability"): the client's events, published on
 * `node:diagnostics_channel` channels `idgen-client:<event>` (nothing is printed: a program
 * that subscribes to nothing sees nothing) and passed to the `hooks` option.
 *
 * A hook is called synchronously, after the fact, with the event's name and fields. A hook
 * that throws is reported once per client with `process.emitWarning` (code
 * `IDGEN_HOOK_FAILED`) and otherwise ignored: it never fails or changes a call.
 */

import * as diagnostics_channel from "node:diagnostics_channel";

/** The operations a `request` event names. */
export type IdgenOp = "ids" | "ranges" | "values" | "uuids" | "ids_with" | "masked_ids" | "ping";

/** Each event's fields. Durations are in milliseconds. */
export interface IdgenEventFields {
  /** A connection to a node is up (TLS and HELLO done). */
  connect: { node: string; address: string | null; version: number; durationMs: number };
  /** A connect to a node failed. */
  connect_failed: { node: string; error: Error; durationMs: number };
  /** A call finished (once per user call, not per frame). `node`: the one that answered (with
   * the result or with the status the call failed with), if any; `outcome`: `"ok"`, a status name (`"UNAVAILABLE_LEASE"`) or an error's name. */
  request: { op: IdgenOp; count: number; node: string | null; durationMs: number; outcome: string; error: Error | null };
  /** A node answered an error status. */
  refused: { node: string; op: IdgenOp | "hello"; status: number; statusName: string; message: string };
  /** A call moves from one node to another. */
  failover: { from: string; to: string | null; reason: string };
  /** The client marks a node down (backing off for `retryInMs`). */
  node_down: { node: string; reason: string; retryInMs: number };
  /** A node that was down answered again. */
  node_up: { node: string; reason: string };
}

/** The events' names. */
export type IdgenEventName = keyof IdgenEventFields;

/** Every event name, in the order of the table in CONFIG.md. */
export const EVENT_NAMES: readonly IdgenEventName[] = ["connect", "connect_failed", "request", "refused", "failover", "node_down", "node_up"];

/** What an event's channel publishes: its fields and its name. */
export type IdgenEventMessage<E extends IdgenEventName = IdgenEventName> = IdgenEventFields[E] & { event: E };

/** A hook's arguments: an event's name and its fields (checking the name narrows the fields). */
export type IdgenHookArgs = { [E in IdgenEventName]: [event: E, fields: IdgenEventFields[E]] }[IdgenEventName];

/** A hook: called synchronously with each event's name and fields.
 * `(event, fields) => { if (event === "request") use(fields.durationMs); }` */
export type IdgenHook = (...args: IdgenHookArgs) => void;

/** The channel of an event: `idgen-client:<event>`. */
export function eventChannel(event: IdgenEventName): diagnostics_channel.Channel {
  return diagnostics_channel.channel(`idgen-client:${event}`);
}

const CHANNELS = new Map<IdgenEventName, diagnostics_channel.Channel>(EVENT_NAMES.map((e) => [e, eventChannel(e)]));

/** The hooks option: one function or several, called in order. */
export type HooksOption = IdgenHook | readonly IdgenHook[];

/** Checks the `hooks` option; the list of hook functions. */
export function checkHooks(hooks: unknown): IdgenHook[] {
  if (hooks === undefined || hooks === null) return [];
  const list = typeof hooks === "function" ? [hooks] : Array.isArray(hooks) ? [...hooks] : null;
  if (list === null || list.some((h) => typeof h !== "function")) throw new TypeError("hooks must be a function (event, fields) => void, or an array of them");
  return list as IdgenHook[];
}

/** A client's event sink: the channels, then its hooks. */
export class Observer {
  private readonly hooks: IdgenHook[];
  private warned = false;

  constructor(hooks: IdgenHook[]) {
    this.hooks = hooks;
  }

  /** Whether anyone listens to `event` (so that its fields need not be built otherwise). */
  wants(event: IdgenEventName): boolean {
    return this.hooks.length > 0 || CHANNELS.get(event)!.hasSubscribers;
  }

  emit<E extends IdgenEventName>(event: E, fields: IdgenEventFields[E]): void {
    const channel = CHANNELS.get(event)!;
    if (channel.hasSubscribers) channel.publish({ ...fields, event });
    for (const hook of this.hooks) {
      try {
        (hook as (event: E, fields: IdgenEventFields[E]) => void)(event, fields);
      } catch (e) {
        if (!this.warned) {
          this.warned = true;
          process.emitWarning(`an idgen-client hook threw on the ${event} event (ignored, as are its later failures): ${e instanceof Error ? e.message : String(e)}`, {
            code: "IDGEN_HOOK_FAILED",
            detail: e instanceof Error && e.stack !== undefined ? e.stack : undefined,
          });
        }
      }
    }
  }
}

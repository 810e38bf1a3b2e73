/**
 * An optional OpenTelemetry adapter (clients/vectors/CONFIG.md, "Observability"), loaded as
 * `idgen-client/opentelemetry`. It needs `@opentelemetry/api` (an optional peer dependency:
 * the rest of the package works without it, and only this entry point imports it).
 *
 * ```ts
 * import { Client } from "idgen-client";
 * import { openTelemetryHook } from "idgen-client/opentelemetry";
 *
 * const client = new Client(["127.0.0.1:7420"], { hooks: openTelemetryHook() });
 * ```
 *
 * Each `request` event (one per call) becomes a span of kind CLIENT named `idgen <op>`, from
 * the call's start to its end, with the call's attributes (`idgen.op`, `idgen.count`,
 * `idgen.node`, `idgen.outcome`) and an ERROR status with the exception when it failed. The
 * other events (`connect`, `connect_failed`, `refused`, `failover`, `node_down`, `node_up`)
 * become events `idgen.<event>` of the span active when they happen (the caller's), if any.
 */

import { SpanKind, SpanStatusCode, trace, type Attributes, type Tracer } from "@opentelemetry/api";

import type { IdgenHook, IdgenHookArgs } from "./events.js";

export interface OpenTelemetryOptions {
  /** The tracer spans are made with (default: `trace.getTracer("idgen-client")`, from the
   * globally registered provider). */
  tracer?: Tracer;
}

/** An event's fields as span attributes `idgen.<field>` (errors by their message). */
function attributes(fields: object): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(fields)) {
    if (v === null || v === undefined) continue;
    if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") out[`idgen.${k}`] = v;
    else if (v instanceof Error) out[`idgen.${k}`] = `${v.name}: ${v.message}`;
  }
  return out;
}

/** A hook (the `hooks` option of a Client) that reports to OpenTelemetry. */
export function openTelemetryHook(options: OpenTelemetryOptions = {}): IdgenHook {
  const tracer = options.tracer ?? trace.getTracer("idgen-client");
  return (...[event, fields]: IdgenHookArgs) => {
    if (event === "request") {
      const f = fields;
      const end = performance.timeOrigin + performance.now();
      const span = tracer.startSpan(`idgen ${f.op}`, {
        kind: SpanKind.CLIENT,
        startTime: end - f.durationMs,
        attributes: attributes({ op: f.op, count: f.count, node: f.node, outcome: f.outcome }),
      });
      if (f.outcome !== "ok") {
        span.setStatus({ code: SpanStatusCode.ERROR, message: f.error?.message ?? f.outcome });
        if (f.error !== null) span.recordException(f.error);
      }
      span.end(end);
      return;
    }
    trace.getActiveSpan()?.addEvent(`idgen.${event}`, attributes(fields));
  };
}

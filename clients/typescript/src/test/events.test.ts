// Observability (CONFIG.md): the events on the idgen-client:* diagnostics channels and the hooks
// option, a hook that throws (reported once, calls unharmed), and the OpenTelemetry adapter
// with the SDK's in-memory exporter.

import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import * as diagnostics_channel from "node:diagnostics_channel";
import { after, before, describe, test } from "node:test";

import { ROOT_CONTEXT, context, type Context, type ContextManager } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";

import { Client } from "../client.js";
import { EVENT_NAMES, type IdgenEventFields, type IdgenEventName } from "../events.js";
import { openTelemetryHook } from "../opentelemetry.js";
import { FakeNode, NodeProc, defaultHello, sleep, unusedPort } from "./support.js";

type Seen = { event: IdgenEventName; fields: Record<string, unknown> };

/** Every event on the idgen-client:* channels while `f` runs. */
async function onChannels<T>(f: () => Promise<T>): Promise<[T, Seen[]]> {
  const seen: Seen[] = [];
  const subscribers = EVENT_NAMES.map((event) => {
    const fn = (message: unknown) => seen.push({ event, fields: message as Record<string, unknown> });
    diagnostics_channel.subscribe(`idgen-client:${event}`, fn);
    return [event, fn] as const;
  });
  try {
    return [await f(), seen];
  } finally {
    for (const [event, fn] of subscribers) diagnostics_channel.unsubscribe(`idgen-client:${event}`, fn);
  }
}

describe("events: diagnostics channels and hooks", () => {
  let down: FakeNode; // answers 300 UNAVAILABLE_LEASE to everything
  let up: FakeNode;
  let real: NodeProc;
  before(async () => {
    down = await FakeNode.start(defaultHello({ version: 5 }), "unavailable", { status: 300 });
    up = await FakeNode.start(defaultHello({ version: 5 }), "serve");
    real = await NodeProc.start();
  });
  after(async () => {
    await down?.close();
    await up?.close();
    await real?.stop();
  });

  test("a failover appears on the channel and in the hook, with the events around it", async () => {
    const hooked: Seen[] = [];
    const client = new Client([down.addr, up.addr], { hooks: (event, fields) => hooked.push({ event, fields: fields as unknown as Record<string, unknown> }) });
    try {
      const [ids, seen] = await onChannels(() => client.nextIds(3));
      assert.equal(ids.length, 3);
      for (const list of [seen, hooked]) {
        assert.deepEqual(
          list.map((s) => s.event),
          ["connect", "refused", "node_down", "failover", "connect", "request"],
        );
        const by = (e: string) => list.find((s) => s.event === e)!.fields;
        assert.equal(by("connect")["node"], down.addr);
        assert.equal(by("connect")["address"], down.addr);
        assert.equal(by("connect")["version"], 5);
        assert.ok((by("connect")["durationMs"] as number) >= 0);
        assert.deepEqual({ ...by("refused") }, { ...(list === seen ? { event: "refused" } : {}), node: down.addr, op: "ranges", status: 300, statusName: "UNAVAILABLE_LEASE", message: by("refused")["message"] });
        assert.equal(by("node_down")["node"], down.addr);
        assert.ok((by("node_down")["retryInMs"] as number) > 0);
        assert.equal(by("failover")["from"], down.addr);
        assert.equal(by("failover")["to"], up.addr);
        assert.match(by("failover")["reason"] as string, /300 UNAVAILABLE_LEASE/);
        const request = by("request");
        assert.equal(request["op"], "ranges");
        assert.equal(request["count"], 3);
        assert.equal(request["node"], up.addr);
        assert.equal(request["outcome"], "ok");
        assert.equal(request["error"], null);
      }
      // The channel message names its event; the hook gets the name as its first argument.
      assert.equal(seen.find((s) => s.event === "failover")!.fields["event"], "failover");
      assert.equal(client.stats().failovers, 1);
    } finally {
      await client.close();
    }
  });

  test("request events: one per user call (split batches, sequences, UUIDs, ping), failures by their status or error name", async () => {
    const events: IdgenEventFields["request"][] = [];
    const client = new Client([real.addr], {
      hooks: (event, fields) => {
        if (event === "request") events.push(fields as IdgenEventFields["request"]);
      },
    });
    try {
      await client.nextIds(200_000); // several frames, one call
      await client.nextUuid();
      await client.ping();
      await assert.rejects(client.nextValue("no-such-sequence"));
      await assert.rejects(client.nextIds(0), RangeError);
      assert.deepEqual(
        events.map((e) => [e.op, e.count, e.outcome, e.node]),
        [
          ["ranges", 200_000, "ok", real.addr],
          ["uuids", 1, "ok", real.addr],
          ["ping", 1, "ok", real.addr],
          ["values", 1, "UNKNOWN_SEQUENCE", real.addr],
          ["ids", 0, "RangeError", null],
        ],
      );
      assert.ok(events.every((e) => e.durationMs >= 0));
    } finally {
      await client.close();
    }
  });

  test("connect_failed, node_down, then node_up when the node answers again", async () => {
    const dead = await unusedPort();
    const hooked: Seen[] = [];
    const client = new Client([`127.0.0.1:${dead}`], { hooks: (event, fields) => hooked.push({ event, fields: fields as unknown as Record<string, unknown> }), backoffMinMs: 20, backoffMaxMs: 20 });
    let late: NodeProc | null = null;
    try {
      await assert.rejects(client.nextId());
      const failed = hooked.find((s) => s.event === "connect_failed")!;
      assert.equal(failed.fields["node"], `127.0.0.1:${dead}`);
      assert.ok(failed.fields["error"] instanceof Error);
      assert.deepEqual(
        hooked.map((s) => s.event),
        ["connect_failed", "node_down", "request"],
      );
      assert.notEqual(hooked[2]!.fields["outcome"], "ok");
      // The node comes up: once the backoff is over, the next call reaches it and reports it up.
      late = await NodeProc.start(["--listen", `127.0.0.1:${dead}`]);
      await sleep(50);
      hooked.length = 0;
      assert.ok((await client.nextId()) > 0n);
      assert.deepEqual(
        hooked.map((s) => s.event),
        ["connect", "node_up", "request"],
      );
      assert.equal(hooked[1]!.fields["node"], `127.0.0.1:${dead}`);
    } finally {
      await client.close();
      await late?.stop();
    }
  });

  test("a hook that throws is reported once (a process warning) and never breaks a call", async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => {
      if ((w as { code?: string }).code === "IDGEN_HOOK_FAILED") warnings.push(w);
    };
    process.on("warning", onWarning);
    let calls = 0;
    const client = new Client([down.addr, up.addr], {
      hooks: [
        () => {
          calls++;
          throw new Error("the hook is broken");
        },
      ],
    });
    try {
      for (let i = 0; i < 5; i++) assert.equal((await client.nextIds(2)).length, 2);
      assert.ok(calls >= 6, `${calls} hook calls`);
      await sleep(20); // warnings are emitted on the next tick
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!.message, /hook threw .*the hook is broken/);
    } finally {
      process.off("warning", onWarning);
      await client.close();
    }
  });

  test("hooks must be functions", () => {
    assert.throws(() => new Client([up.addr], { hooks: "log" as unknown as () => void }), TypeError);
    assert.throws(() => new Client([up.addr], { hooks: [() => undefined, 3] as unknown as (() => void)[] }), TypeError);
  });
});

/** A context manager over AsyncLocalStorage (what @opentelemetry/context-async-hooks does), so
 * that the span a caller makes active is active inside the client's calls. */
class AlsContextManager implements ContextManager {
  private readonly als = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.als.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return this.als.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.als.disable();
    return this;
  }
}

describe("the OpenTelemetry adapter (idgen-client/opentelemetry)", () => {
  let down: FakeNode;
  let up: FakeNode;
  before(async () => {
    down = await FakeNode.start(defaultHello({ version: 5 }), "unavailable", { status: 300 });
    up = await FakeNode.start(defaultHello({ version: 5 }), "serve");
    context.setGlobalContextManager(new AlsContextManager());
  });
  after(async () => {
    context.disable();
    await down?.close();
    await up?.close();
  });

  test("a call is a CLIENT span; failover and the other events are events of the caller's span", async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    const tracer = provider.getTracer("test");
    const client = new Client([down.addr, up.addr], { hooks: openTelemetryHook({ tracer }) });
    try {
      await tracer.startActiveSpan("caller", async (parent) => {
        await client.nextIds(4);
        await assert.rejects(client.nextUuids(0), RangeError);
        parent.end();
      });
      const spans = exporter.getFinishedSpans();
      assert.deepEqual(
        spans.map((s) => s.name),
        ["idgen ranges", "idgen uuids", "caller"],
      );
      const [ok, refused, caller] = spans as [(typeof spans)[0], (typeof spans)[0], (typeof spans)[0]];
      assert.equal(ok.kind, 2); // SpanKind.CLIENT
      assert.deepEqual(ok.attributes, { "idgen.op": "ranges", "idgen.count": 4, "idgen.node": up.addr, "idgen.outcome": "ok" });
      assert.equal(ok.status.code, 0);
      assert.equal(refused.status.code, 2); // ERROR
      assert.equal(refused.attributes["idgen.outcome"], "RangeError");
      assert.ok(refused.events.some((e) => e.name === "exception"));
      // The call spans are children of the caller's span; its events tell the failover.
      assert.equal(ok.spanContext().traceId, caller.spanContext().traceId);
      assert.deepEqual(
        caller.events.map((e) => e.name),
        ["idgen.connect", "idgen.refused", "idgen.node_down", "idgen.failover", "idgen.connect"],
      );
      const failover = caller.events.find((e) => e.name === "idgen.failover")!;
      assert.equal(failover.attributes?.["idgen.from"], down.addr);
      assert.equal(failover.attributes?.["idgen.to"], up.addr);
    } finally {
      await client.close();
      await provider.shutdown();
    }
  });

  test("without a registered provider the adapter is a no-op, and calls work", async () => {
    const client = new Client([up.addr], { hooks: openTelemetryHook() });
    try {
      assert.equal((await client.nextIds(2)).length, 2);
    } finally {
      await client.close();
    }
  });
});

// The shared behaviour scenarios (clients/vectors/scenarios.json, SCENARIOS.md): for each, the
// test kit's `idgen-fake-nodes` ($IDGEN_FAKE_NODES_BIN, default target/debug/idgen-fake-nodes)
// serves the scenario's fake nodes; the client, given those nodes in order and the scenario's
// connect and request timeouts (every other setting the default), runs the steps; each call's
// result must be the expected outcome, and the fake nodes' `check` must answer `ok`. One test
// per scenario; a missing binary fails every one of them (never a skip).

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants } from "node:fs";
import * as path from "node:path";
import { createInterface, type Interface } from "node:readline";
import { test } from "node:test";

import { Client } from "../client.js";
import { ProtocolError, ServerError, UnavailableError } from "../errors.js";
import { REPO, loadJson, sleep, withTimeout } from "./support.js";

const SCENARIOS_FILE = path.join(REPO, "clients", "vectors", "scenarios.json");
const SCENARIO_TIMEOUT_MS = 20_000;

interface Step {
  call?: string;
  count?: number;
  expect?: string;
  status?: number;
  kill?: number;
  revive?: number;
  sleep_ms?: number;
}

interface Scenario {
  name: string;
  doc: string;
  nodes: unknown[];
  client: { connect_timeout_ms?: number; timeout_ms?: number };
  steps: Step[];
}

/** `$IDGEN_FAKE_NODES_BIN`, else `<repo>/target/debug/idgen-fake-nodes`. Throws (the test
 * fails, never skips) when it is missing. */
function fakeNodesBin(): string {
  const bin = process.env["IDGEN_FAKE_NODES_BIN"] || path.join(REPO, "target", "debug", "idgen-fake-nodes");
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    throw new Error(`idgen-fake-nodes not found at ${bin}: build it with \`cargo build -p idgen-testkit --bin idgen-fake-nodes\` or set IDGEN_FAKE_NODES_BIN`);
  }
  return bin;
}

/** One `idgen-fake-nodes` process: its nodes' addresses and its command line on stdin. */
class FakeNodes {
  private readonly lines: string[] = [];
  private readonly waiters: ((line: string | null) => void)[] = [];
  private ended = false;
  private stderr = "";
  private readonly rl: Interface;

  private constructor(private readonly proc: ChildProcess) {
    proc.stderr!.setEncoding("utf8");
    proc.stderr!.on("data", (d: string) => (this.stderr += d));
    this.rl = createInterface({ input: proc.stdout! });
    this.rl.on("line", (line) => {
      const w = this.waiters.shift();
      if (w) w(line);
      else this.lines.push(line);
    });
    this.rl.on("close", () => {
      this.ended = true;
      for (const w of this.waiters.splice(0)) w(null);
    });
    proc.on("error", (e) => (this.stderr += `\n${e.message}`));
  }

  static async start(name: string): Promise<{ fake: FakeNodes; addrs: string[] }> {
    const proc = spawn(fakeNodesBin(), [SCENARIOS_FILE, name], { stdio: ["pipe", "pipe", "pipe"] });
    const fake = new FakeNodes(proc);
    const first = await fake.line(10_000, "the `nodes ...` line");
    const words = first.split(/\s+/).filter((w) => w !== "");
    if (words[0] !== "nodes" || words.length < 2) {
      fake.stop();
      throw new Error(`idgen-fake-nodes printed ${JSON.stringify(first)}, not \`nodes ADDR ...\``);
    }
    return { fake, addrs: words.slice(1) };
  }

  private line(ms: number, what: string): Promise<string> {
    const got = this.lines.shift();
    if (got !== undefined) return Promise.resolve(got);
    if (this.ended) return Promise.reject(new Error(`idgen-fake-nodes exited before ${what}; stderr: ${this.stderr}`));
    let waiter: (line: string | null) => void = () => undefined;
    const p = new Promise<string>((resolve, reject) => {
      waiter = (line) => (line === null ? reject(new Error(`idgen-fake-nodes exited before ${what}; stderr: ${this.stderr}`)) : resolve(line));
      this.waiters.push(waiter);
    });
    return withTimeout(p, ms, `idgen-fake-nodes: no ${what} within ${ms} ms`).finally(() => {
      const i = this.waiters.indexOf(waiter);
      if (i >= 0) this.waiters.splice(i, 1);
    });
  }

  /** Send one command; resolves with its one-line answer. */
  command(cmd: string): Promise<string> {
    this.proc.stdin!.write(`${cmd}\n`);
    return this.line(10_000, `an answer to ${JSON.stringify(cmd)}`);
  }

  /** Close stdin (it then exits); kill it (by its PID) if it has not within 2 s. */
  async stop(): Promise<void> {
    this.proc.stdin!.end();
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => this.proc.once("exit", () => r()));
    await Promise.race([exited, sleep(2000)]);
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGKILL");
      await Promise.race([exited, sleep(2000)]);
    }
  }
}

/** The scenario vocabulary's name for what a call did. */
function outcome(result: { ids: BigUint64Array } | { error: unknown }): { kind: string; status?: number; detail: string } {
  if ("ids" in result) return { kind: "ok", detail: `${result.ids.length} IDs` };
  const e = result.error;
  const detail = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  if (e instanceof RangeError || e instanceof TypeError) return { kind: "invalid_argument", detail };
  if (e instanceof ServerError && !e.retryElsewhere && !e.closes) return { kind: "server_error", status: e.code, detail };
  if (e instanceof UnavailableError || e instanceof ProtocolError || e instanceof ServerError) return { kind: "unavailable", detail };
  return { kind: "other", detail };
}

async function run(s: Scenario): Promise<void> {
  const { fake, addrs } = await FakeNodes.start(s.name);
  const client = new Client(addrs, {
    connectTimeoutMs: s.client.connect_timeout_ms ?? 1000,
    timeoutMs: s.client.timeout_ms ?? 2000,
  });
  try {
    for (const [i, step] of s.steps.entries()) {
      if (step.kill !== undefined || step.revive !== undefined) {
        const cmd = step.kill !== undefined ? `kill ${step.kill}` : `revive ${step.revive}`;
        assert.equal(await fake.command(cmd), "ok", `step ${i}: ${cmd}`);
      } else if (step.sleep_ms !== undefined) {
        await sleep(step.sleep_ms);
      } else if (step.call === "next_ids") {
        const count = step.count ?? 1;
        const result = await client.nextIds(count).then(
          (ids) => ({ ids }),
          (error: unknown) => ({ error }),
        );
        const got = outcome(result);
        if ("ids" in result) assert.equal(result.ids.length, count, `step ${i}: ${result.ids.length} IDs for ${count}`);
        const want = step.expect ?? "?";
        const wantStatus = want === "server_error" ? step.status : undefined;
        assert.deepEqual(
          { kind: got.kind, status: got.status },
          { kind: want, status: wantStatus },
          `step ${i}: expected ${want}${wantStatus !== undefined ? ` ${wantStatus}` : ""}, got ${got.kind} (${got.detail})`,
        );
      } else {
        assert.fail(`step ${i}: unknown step ${JSON.stringify(step)}`);
      }
    }
    const check = await fake.command("check");
    assert.equal(check, "ok", `check: ${check}`);
  } finally {
    await client.close();
    await fake.stop();
  }
}

const all = (loadJson("clients/vectors/scenarios.json") as { scenarios: Scenario[] }).scenarios;

test("scenarios.json holds the scenarios", () => {
  assert.ok(all.length >= 15, `only ${all.length} scenarios`);
  assert.equal(new Set(all.map((s) => s.name)).size, all.length, "scenario names are unique");
});

for (const s of all) {
  test(`scenario ${s.name}`, { timeout: SCENARIO_TIMEOUT_MS + 5000 }, async () => {
    await withTimeout(run(s), SCENARIO_TIMEOUT_MS, `scenario ${s.name}: took over ${SCENARIO_TIMEOUT_MS / 1000} s`);
  });
}

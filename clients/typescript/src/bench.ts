/**
 * Closed-loop benchmark of the client against one node; prints ONE JSON line:
 * `{"client":"typescript","batch":N,"ids_per_sec":X,"requests_per_sec":Y}`.
 *
 *   node dist/bench.js --addr 127.0.0.1:7420 --batch 4096 --seconds 5 --connections 2 --pipeline 8
 *     [--warmup 1] [--version 1|2]
 *
 * `--connections` clients (one connection each) with `--pipeline` calls in flight on each,
 * each call `nextIds(batch)`; counted after `--warmup` seconds for `--seconds` seconds, then it
 * stops (bounded in time: calls still in flight after the window are not waited for beyond
 * the client's timeout).
 */

import { Client } from "./client.js";

interface Args {
  addr: string;
  batch: number;
  seconds: number;
  connections: number;
  pipeline: number;
  warmup: number;
  version: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { addr: "127.0.0.1:7420", batch: 1, seconds: 5, connections: 1, pipeline: 1, warmup: 1, version: 2 };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = argv[i + 1];
    if (flag === "--help" || flag === "-h") {
      process.stdout.write("usage: node dist/bench.js --addr HOST:PORT --batch N --seconds S --connections C --pipeline P [--warmup S] [--version 1|2]\n");
      process.exit(0);
    }
    if (value === undefined) throw new Error(`${flag} needs a value`);
    i++;
    const num = (min: number) => {
      const n = Number(value);
      if (!Number.isFinite(n) || n < min) throw new Error(`${flag} must be a number >= ${min}, not ${value}`);
      return n;
    };
    switch (flag) {
      case "--addr":
        a.addr = value;
        break;
      case "--batch":
        a.batch = Math.floor(num(1));
        break;
      case "--seconds":
        a.seconds = num(0.1);
        break;
      case "--connections":
        a.connections = Math.floor(num(1));
        break;
      case "--pipeline":
        a.pipeline = Math.floor(num(1));
        break;
      case "--warmup":
        a.warmup = num(0);
        break;
      case "--version":
        a.version = Math.floor(num(1));
        break;
      default:
        throw new Error(`unknown flag ${flag}`);
    }
  }
  return a;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const clients = Array.from({ length: args.connections }, () => new Client([args.addr], { timeoutMs: 5000, connectTimeoutMs: 5000, maxVersion: args.version }));
  await Promise.all(clients.map((c) => c.ping()));
  let counting = false;
  let stop = false;
  let ids = 0;
  let requests = 0;
  let errors = 0;
  const loop = async (c: Client) => {
    while (!stop) {
      try {
        const got = await c.nextIds(args.batch);
        if (counting) {
          ids += got.length;
          requests++;
        }
      } catch (e) {
        errors++;
        if (errors > 1000) throw e;
      }
    }
  };
  const loops: Promise<void>[] = [];
  for (const c of clients) for (let k = 0; k < args.pipeline; k++) loops.push(loop(c));
  await sleep(args.warmup * 1000);
  counting = true;
  const start = performance.now();
  await sleep(args.seconds * 1000);
  counting = false;
  const elapsed = (performance.now() - start) / 1000;
  stop = true;
  await Promise.race([Promise.allSettled(loops), sleep(6000)]);
  await Promise.all(clients.map((c) => c.close()));
  const out: Record<string, unknown> = {
    client: "typescript",
    batch: args.batch,
    ids_per_sec: Math.round(ids / elapsed),
    requests_per_sec: Math.round(requests / elapsed),
  };
  if (errors > 0) out["errors"] = errors;
  process.stdout.write(JSON.stringify(out) + "\n");
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    process.stderr.write(`bench: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  },
);

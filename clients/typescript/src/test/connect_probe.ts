// The client side of connect.test.ts, run under clients/with-debian-hosts.sh:
// `connect_probe.js CA_FILE (plain=HOST:PORT | tls=HOST:PORT | refused=HOST:PORT)...`. Gets IDs
// from each node, and for `refused` expects an UnavailableError naming ::1 and 127.0.0.1;
// prints `connected: N`; exits 1 at the first failure, saying which.

import { readFileSync } from "node:fs";

import { Client } from "../client.js";
import { UnavailableError } from "../errors.js";

async function main(ca: string, targets: string[]): Promise<number> {
  let connected = 0;
  for (const target of targets) {
    const [kind, addr] = target.split("=", 2) as [string, string];
    const client = new Client([addr], { connectTimeoutMs: 5000, timeoutMs: 5000, ...(kind === "tls" ? { tls: { ca: readFileSync(ca) } } : {}) });
    try {
      if (kind === "refused") {
        const err = await client.nextId().then(
          () => new Error("connected to a port nothing listens on"),
          (e: unknown) => e as Error,
        );
        if (!(err instanceof UnavailableError) || !err.message.includes("::1") || !err.message.includes("127.0.0.1")) {
          console.log(`${target}: FAILED: expected an UnavailableError naming both addresses, got ${String(err)}`);
          return 1;
        }
        console.log(`${target}: ${err.message}`);
        continue;
      }
      const ids = await client.nextIds(3);
      console.log(`${target}: ids ${ids[0]}..${ids[2]}`);
      connected++;
    } catch (e) {
      console.log(`${target}: FAILED: ${String(e)}`);
      return 1;
    } finally {
      await client.close();
    }
  }
  console.log(`connected: ${connected}`);
  return 0;
}

process.exitCode = await main(process.argv[2]!, process.argv.slice(3));

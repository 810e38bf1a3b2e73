// clients/vectors/connect.json: a node listening on one loopback address only is reached through
// a name that resolves to both (::1 first, then 127.0.0.1), in plaintext and over TLS verified
// for that name. The nodes run here; the client runs in connect_probe.js, in a mount namespace
// with a default Debian /etc/hosts (clients/with-debian-hosts.sh). The probe's Node runs with
// address-family autoselection off, as an application may turn it off: the client must still
// try every address (it sets autoSelectFamily itself). Node 20 has it on by default and takes
// --no-network-family-autoselection; Node 18 (Debian 12's) has it off and has no such flag.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";

import { NodeProc, REPO, cert, loadJson, unusedPort } from "./support.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const port = (addr: string) => addr.slice(addr.lastIndexOf(":") + 1);

interface Case {
  name: string;
  listen: string;
  dial: string;
}

const nodes: NodeProc[] = [];
after(async () => {
  for (const n of nodes) await n.stop();
});

test("a name that resolves to several addresses reaches the node on any of them", async () => {
  const cases = (loadJson("clients/vectors/connect.json") as { cases: Case[] }).cases;
  const targets: string[] = [];
  for (const c of cases) {
    const bind = `${c.listen.includes(":") ? `[${c.listen}]` : c.listen}:0`;
    const n = await NodeProc.start(["--listen", bind, "--tls-listen", bind, "--tls-cert", cert("server.crt"), "--tls-key", cert("server.key"), "--shards", "1"]);
    nodes.push(n);
    targets.push(`plain=${c.dial}:${port(n.addr)}`, `tls=${c.dial}:${port(n.tlsAddr!)}`);
  }
  // Nothing listens there on either address: the error names what happened at each.
  targets.push(`refused=localhost:${await unusedPort()}`);
  const noAutoselect = process.allowedNodeEnvironmentFlags.has("--no-network-family-autoselection")
    ? ["--no-network-family-autoselection"]
    : [];
  const run = spawnSync(
    "bash",
    [path.join(REPO, "clients", "with-debian-hosts.sh"), process.execPath, ...noAutoselect, path.join(HERE, "connect_probe.js"), cert("ca.crt"), ...targets],
    { encoding: "utf8", timeout: 60_000, stdio: ["ignore", "pipe", "pipe"] },
  );
  const out = `${run.stdout}${run.stderr}`;
  assert.equal(run.status, 0, `probe failed:\n${out}`);
  assert.match(out, new RegExp(`connected: ${2 * cases.length}\\b`), out);
});

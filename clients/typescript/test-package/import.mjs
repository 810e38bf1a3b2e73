// Loads the installed idgen-client with import (its ES module build) and takes an ID from the
// node at process.argv[2]; prints the ID. Run by scripts/package from a project that installed
// the package's npm pack tarball.
import assert from "node:assert/strict";
import { Client, MaskKeyring, fromDecimal, protocol, toDecimal } from "idgen-client";
import { subscribe } from "node:diagnostics_channel";

let requests = 0;
subscribe("idgen-client:request", () => requests++);

assert.match(import.meta.resolve("idgen-client"), /\/node_modules\/idgen-client\/dist\/index\.js$/);
assert.equal(typeof protocol, "object");
const client = Client.fromEnv({}, { IDGEN_NODES: process.argv[2] });
try {
  const id = await client.nextId();
  assert.equal(typeof id, "bigint");
  assert.ok(id > 0n);
  assert.equal(fromDecimal(toDecimal(id)), id);
  const keys = MaskKeyring.parse("1:" + "00".repeat(32));
  assert.equal(keys.unmaskString(keys.maskString(id)), id);
  assert.equal(requests, 1);
  console.log(String(id));
} finally {
  await client.close();
}

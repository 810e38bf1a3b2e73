// Loads the installed idgen-client with require() (its CommonJS build) and takes an ID from
// the node at process.argv[2]; prints the ID. Run by scripts/package from a project that
// installed the package's npm pack tarball.
"use strict";
const assert = require("node:assert/strict");
const idgen = require("idgen-client");

async function main() {
  assert.match(require.resolve("idgen-client"), /[\\/]node_modules[\\/]idgen-client[\\/]dist[\\/]cjs[\\/]index\.js$/);
  assert.equal(typeof idgen.Client, "function");
  assert.equal(typeof idgen.protocol, "object");
  // The OpenTelemetry adapter is its own entry point; its peer dependency is optional and not
  // installed here, so only that entry point fails to load (saying what is missing).
  assert.throws(() => require("idgen-client/opentelemetry"), /@opentelemetry\/api/);
  assert.throws(() => idgen.parseUrl("idgen://h:0"), idgen.ConfigError);
  const events = [];
  const client = idgen.Client.fromUrl(`idgen://${process.argv[2]}?timeout_ms=5000`, { hooks: (event) => events.push(event) });
  try {
    const id = await client.nextId();
    assert.equal(typeof id, "bigint");
    assert.ok(id > 0n);
    assert.equal(idgen.fromDecimal(idgen.toDecimal(id)), id);
    const keys = idgen.MaskKeyring.parse("1:" + "00".repeat(32));
    assert.equal(keys.unmaskString(keys.maskString(id)), id);
    assert.deepEqual(events, ["connect", "request"]);
    console.log(String(id));
  } finally {
    await client.close();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

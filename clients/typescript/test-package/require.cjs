// Loads the installed idgen-client with require() (its CommonJS build) and takes an ID from
// the node at process.argv[2]; prints the ID. Run by run_tests.sh from a project that
// installed the package's npm pack tarball.
"use strict";
const assert = require("node:assert/strict");
const idgen = require("idgen-client");

async function main() {
  assert.match(require.resolve("idgen-client"), /[\\/]node_modules[\\/]idgen-client[\\/]dist[\\/]cjs[\\/]index\.js$/);
  assert.equal(typeof idgen.Client, "function");
  assert.equal(typeof idgen.protocol, "object");
  const client = new idgen.Client([process.argv[2]]);
  try {
    const id = await client.nextId();
    assert.equal(typeof id, "bigint");
    assert.ok(id > 0n);
    assert.equal(idgen.fromDecimal(idgen.toDecimal(id)), id);
    const keys = idgen.MaskKeyring.parse("1:" + "00".repeat(32));
    assert.equal(keys.unmaskString(keys.maskString(id)), id);
    console.log(String(id));
  } finally {
    await client.close();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

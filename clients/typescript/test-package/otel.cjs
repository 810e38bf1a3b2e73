// With the optional peer @opentelemetry/api installed, the adapter loads with require() (its
// CommonJS build) and makes a hook. Run by scripts/package from the project that installed the
// package's npm pack tarball.
"use strict";
const assert = require("node:assert/strict");
const { openTelemetryHook } = require("idgen-client/opentelemetry");

assert.match(require.resolve("idgen-client/opentelemetry"), /[\\/]dist[\\/]cjs[\\/]opentelemetry\.js$/);
const hook = openTelemetryHook();
assert.equal(typeof hook, "function");
hook("request", { op: "ids", count: 1, node: null, durationMs: 1, outcome: "ok", error: null }); // no provider: a no-op
console.log("require");

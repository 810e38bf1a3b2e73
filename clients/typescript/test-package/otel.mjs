// With the optional peer @opentelemetry/api installed, the adapter loads with import (its ES
// module build). Run by scripts/package from the project that installed the npm pack tarball.
import assert from "node:assert/strict";
import { openTelemetryHook } from "idgen-client/opentelemetry";

assert.match(import.meta.resolve("idgen-client/opentelemetry"), /\/dist\/opentelemetry\.js$/);
assert.equal(typeof openTelemetryHook(), "function");
console.log("import");

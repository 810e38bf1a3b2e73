// Type-checked (tsc --noEmit) against the installed package with @opentelemetry/api installed,
// from a CommonJS TypeScript file: the "require" types of the adapter's entry point.
import idgen = require("idgen-client");
import otel = require("idgen-client/opentelemetry");

export const client: idgen.Client = new idgen.Client(["127.0.0.1:7420"], { hooks: otel.openTelemetryHook() });

// Type-checked (tsc --noEmit) against the installed package with @opentelemetry/api installed:
// the adapter's entry point has its own types, and its hook fits the client's hooks option.
import { Client } from "idgen-client";
import { openTelemetryHook } from "idgen-client/opentelemetry";

export const client: Client = new Client(["127.0.0.1:7420"], { hooks: [openTelemetryHook()] });

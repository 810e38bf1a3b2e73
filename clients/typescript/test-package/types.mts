// Type-checked (tsc --noEmit, module nodenext) against the installed package: an ES module
// TypeScript file resolves the "import" types.
import { Client, MaskKeyring, configFromEnv, toDecimal, type IdgenHook } from "idgen-client";

const client: Client = new Client(["127.0.0.1:7420"]);
export const id: Promise<bigint> = client.nextId();
export const text: string = toDecimal(1n);
export const masked: string = MaskKeyring.parse("1:" + "00".repeat(32)).maskString(1n);
const hook: IdgenHook = (event, fields) => {
  if (event === "failover") {
    const from: string = fields.from;
    void from;
  }
};
export const fromEnv: Client = Client.fromConfig(configFromEnv({ IDGEN_NODES: "127.0.0.1:7420" }), { hooks: [hook] });

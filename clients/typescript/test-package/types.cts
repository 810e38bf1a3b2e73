// Type-checked (tsc --noEmit, module nodenext) against the installed package: a CommonJS
// TypeScript file resolves the "require" types.
import idgen = require("idgen-client");

const client: idgen.Client = new idgen.Client(["127.0.0.1:7420"]);
const id: Promise<bigint> = client.nextId();
const text: string = idgen.toDecimal(1n);
const masked: bigint = idgen.MaskKeyring.parse("1:" + "00".repeat(32)).mask(1n, 53);
const config: idgen.IdgenConfig = idgen.parseUrl("idgens://n1:7420?ca=/ca.pem");
const fromUrl: idgen.Client = idgen.Client.fromUrl("idgen://127.0.0.1:7420", {
  hooks: (event, fields) => {
    if (event === "request") {
      const ms: number = fields.durationMs;
      void ms;
    }
  },
});
export { id, text, masked, config, fromUrl };

// TLS and mutual TLS against a real node's TLS listener, with the test kit's certificates.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client } from "../client.js";
import { TlsError, UnavailableError, type TlsErrorKind } from "../errors.js";
import { PrefetchPool } from "../prefetch.js";
import { NodeProc, allDistinct, cert } from "./support.js";

const port = (addr: string) => addr.slice(addr.lastIndexOf(":") + 1);

function tlsArgs(name = "server", clientCa?: string): string[] {
  const args = ["--tls-listen", "127.0.0.1:0", "--tls-cert", cert(`${name}.crt`), "--tls-key", cert(`${name}.key`)];
  if (clientCa) args.push("--tls-client-ca", cert(clientCa));
  return args;
}

async function tlsFailure(nodes: string[], tls: ConstructorParameters<typeof Client>[1] extends infer O ? (O extends { tls?: infer T } ? T : never) : never, kinds: TlsErrorKind[]): Promise<TlsError> {
  const client = new Client(nodes, { tls, timeoutMs: 5000, connectTimeoutMs: 5000 });
  try {
    const err = await client.nextId().then(
      () => assert.fail("the TLS connection was accepted"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof TlsError, `expected a TlsError, got ${String(err)}`);
    assert.ok(err instanceof UnavailableError);
    assert.ok(kinds.includes(err.kind), `kind ${err.kind} (${err.message}), expected ${kinds.join("|")}`);
    assert.ok(client.nodes()[0]!.down, "a failed handshake marks the node down");
    return err;
  } finally {
    await client.close();
  }
}

describe("TLS against a real node", () => {
  let node: NodeProc; // server certificate, no client certificates
  let mtls: NodeProc; // client certificates required (chaining to ca.crt)
  before(async () => {
    node = await NodeProc.start(tlsArgs());
    mtls = await NodeProc.start(tlsArgs("server", "ca.crt"));
  });
  after(async () => {
    await node?.stop();
    await mtls?.stop();
  });

  test("by name and by address, with ALPN idgen/1, beside the plaintext listener", async () => {
    for (const addr of [`localhost:${port(node.tlsAddr!)}`, node.tlsAddr!]) {
      const client = new Client([addr], { tls: { caFile: cert("ca.crt") }, timeoutMs: 5000, connectTimeoutMs: 5000 });
      try {
        const ids = await client.nextIds(1000);
        assert.equal(ids.length, 1000);
        assert.ok(allDistinct(ids));
        assert.ok((await client.ping()) >= 0);
        const s = client.nodes()[0]!;
        assert.equal(s.alpn, "idgen/1");
        assert.match(s.tlsVersion ?? "", /^TLSv1\.[23]$/);
        assert.equal(s.hello?.version, 5);
      } finally {
        await client.close();
      }
    }
    const plain = new Client([node.addr]);
    assert.equal(typeof (await plain.nextId()), "bigint");
    await plain.close();
  });

  test("mutual TLS with a client certificate (PEM contents or files), and the prefetch pool over it", async () => {
    const { readFileSync } = await import("node:fs");
    for (const tls of [
      { caFile: cert("ca.crt"), certFile: cert("client.crt"), keyFile: cert("client.key") },
      { ca: readFileSync(cert("ca.crt")), cert: readFileSync(cert("client.crt"), "utf8"), key: readFileSync(cert("client.key")) },
    ]) {
      const client = new Client([`localhost:${port(mtls.tlsAddr!)}`], { tls, timeoutMs: 5000, connectTimeoutMs: 5000 });
      const pool = new PrefetchPool(client, { size: 100 });
      try {
        const got = await Promise.all(Array.from({ length: 500 }, () => pool.next()));
        assert.ok(allDistinct(got));
        assert.equal(client.nodes()[0]!.alpn, "idgen/1");
      } finally {
        pool.close();
        await client.close();
      }
    }
  });

  test("the node refuses a missing, an expired and a foreign client certificate", async () => {
    const addr = `localhost:${port(mtls.tlsAddr!)}`;
    const ca = cert("ca.crt");
    await tlsFailure([addr], { caFile: ca }, ["client_certificate_required"]);
    await tlsFailure([addr], { caFile: ca, certFile: cert("client-expired.crt"), keyFile: cert("client-expired.key") }, ["client_certificate_rejected"]);
    await tlsFailure([addr], { caFile: ca, certFile: cert("client-other-ca.crt"), keyFile: cert("client-other-ca.key") }, ["client_certificate_rejected"]);
  });

  test("the client refuses another authority's CA, a wrong server name and a plaintext port", async () => {
    const addr = `localhost:${port(node.tlsAddr!)}`;
    const e1 = await tlsFailure([addr], { caFile: cert("other-ca.crt") }, ["unknown_issuer"]);
    assert.match(e1.message, /not signed by a trusted authority/);
    const e2 = await tlsFailure([addr], { caFile: cert("ca.crt"), serverName: "idgen.internal" }, ["name_mismatch"]);
    assert.match(e2.message, /does not name/);
    await tlsFailure([node.tlsAddr!], { caFile: cert("ca.crt"), serverName: "10.9.8.7" }, ["name_mismatch"]);
    const plain = `localhost:${port(node.addr)}`;
    await tlsFailure([plain], { caFile: cert("ca.crt") }, ["handshake"]);
  });

  test("a node whose certificate does not verify is failed over to one that does", async () => {
    const other = await NodeProc.start(tlsArgs("server-other-ca"));
    try {
      const client = new Client([`localhost:${port(other.tlsAddr!)}`, `localhost:${port(node.tlsAddr!)}`], { tls: { caFile: cert("ca.crt") }, timeoutMs: 5000, connectTimeoutMs: 5000, backoffMinMs: 5000 });
      try {
        assert.equal((await client.nextIds(10)).length, 10);
        const bad = client.nodes()[0]!;
        assert.ok(bad.down && bad.lastError instanceof TlsError && bad.lastError.kind === "unknown_issuer");
        assert.equal(client.stats().failovers, 1);
      } finally {
        await client.close();
      }
    } finally {
      await other.stop();
    }
  });

  test("an expired or misnamed server certificate is refused", async () => {
    const expired = await NodeProc.start(tlsArgs("server-expired"));
    const misnamed = await NodeProc.start(tlsArgs("server-other-name"));
    try {
      await tlsFailure([`localhost:${port(expired.tlsAddr!)}`], { caFile: cert("ca.crt") }, ["expired"]);
      await tlsFailure([`localhost:${port(misnamed.tlsAddr!)}`], { caFile: cert("ca.crt") }, ["name_mismatch"]);
    } finally {
      await expired.stop();
      await misnamed.stop();
    }
  });
});

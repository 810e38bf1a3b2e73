// clients/vectors/CONFIG.md: every case of config.json (parse only), then clients built from a
// URL and from the environment against real nodes (plain, TLS, mutual TLS), settings given
// twice, and expand=true (names with several addresses, re-resolved on failure).

import assert from "node:assert/strict";
import { promises as dns } from "node:dns";
import { after, before, describe, test } from "node:test";

import { Client } from "../client.js";
import { ConfigError, configFromEnv, parseUrl, type IdgenConfig } from "../config.js";
import { NoNodeAvailableError, TlsError } from "../errors.js";
import { NodeProc, cert, loadJson, sleep, unusedPort } from "./support.js";

interface Expected {
  nodes: string[];
  tls: boolean;
  ca: string | null;
  cert: string | null;
  key: string | null;
  server_name: string | null;
  connect_timeout_ms: number | null;
  timeout_ms: number | null;
  expand: boolean;
}
type UrlCase = ({ url: string; error?: undefined } & Expected) | { url: string; error: string };
type EnvCase = ({ env: Record<string, string>; error?: undefined } & Expected) | { env: Record<string, string>; error: string };

const vectors = loadJson("clients/vectors/config.json") as { urls: UrlCase[]; envs: EnvCase[] };

function asVector(c: IdgenConfig): Expected {
  return {
    nodes: [...c.nodes],
    tls: c.tls,
    ca: c.ca,
    cert: c.cert,
    key: c.key,
    server_name: c.serverName,
    connect_timeout_ms: c.connectTimeoutMs,
    timeout_ms: c.timeoutMs,
    expand: c.expand,
  };
}

function expected(c: Expected): Expected {
  const { nodes, tls, ca, cert, key, server_name, connect_timeout_ms, timeout_ms, expand } = c;
  return { nodes, tls, ca, cert, key, server_name, connect_timeout_ms, timeout_ms, expand };
}

const port = (addr: string) => Number(addr.slice(addr.lastIndexOf(":") + 1));

describe("config.json (CONFIG.md), parse only", () => {
  test("the vectors are there: URLs and environments, valid and invalid", () => {
    assert.ok(vectors.urls.length >= 30, `${vectors.urls.length} URL cases`);
    assert.ok(vectors.envs.length >= 15, `${vectors.envs.length} environment cases`);
    assert.ok(vectors.urls.some((c) => c.error === undefined) && vectors.urls.some((c) => c.error !== undefined));
    assert.ok(vectors.envs.some((c) => c.error === undefined) && vectors.envs.some((c) => c.error !== undefined));
  });

  for (const c of vectors.urls) {
    test(`URL ${c.url}${c.error !== undefined ? ` fails: ${c.error}` : ""}`, () => {
      if (c.error !== undefined) {
        assert.throws(
          () => parseUrl(c.url),
          (e: unknown) => e instanceof ConfigError && e instanceof RangeError && e.name === "ConfigError" && e.message.length > 10,
        );
      } else {
        assert.deepEqual(asVector(parseUrl(c.url)), expected(c));
      }
    });
  }

  for (const c of vectors.envs) {
    test(`environment ${JSON.stringify(c.env)}${c.error !== undefined ? ` fails: ${c.error}` : ""}`, () => {
      // Every other IDGEN_* unset: the environment is exactly the case's.
      if (c.error !== undefined) {
        assert.throws(() => configFromEnv({ ...c.env }), (e: unknown) => e instanceof ConfigError && e.message.length > 10);
      } else {
        assert.deepEqual(asVector(configFromEnv({ ...c.env })), expected(c));
      }
    });
  }

  test("errors name what is wrong", () => {
    const message = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        assert.ok(e instanceof ConfigError);
        return e.message;
      }
      return assert.fail("no error");
    };
    assert.match(message(() => parseUrl("http://h:7420")), /scheme "http"/);
    assert.match(message(() => parseUrl("IDGEN://h")), /lower case/);
    assert.match(message(() => parseUrl("idgen://h:7420?ca=/ca.pem")), /TLS parameter: use idgens:\/\//);
    assert.match(message(() => parseUrl("idgen://h:7420?tls=1")), /unknown parameter "tls"/);
    assert.match(message(() => parseUrl("idgens://h?cert=/c.pem")), /cert is given without key/);
    assert.match(message(() => parseUrl("idgen://a:1,,b:2")), /entry 2 of 3 is empty/);
    assert.match(message(() => parseUrl("idgen://h:7420,h:7420")), /listed twice/);
    assert.match(message(() => configFromEnv({})), /IDGEN_NODES is not set/);
    assert.match(message(() => configFromEnv({ IDGEN_NODES: "idgen://a", IDGEN_CLIENT_TIMEOUT_MS: "5" })), /IDGEN_CLIENT_TIMEOUT_MS is set too/);
    assert.match(message(() => configFromEnv({ IDGEN_NODES: "a", IDGEN_CLIENT_TIMEOUT_MS: "soon" })), /IDGEN_CLIENT_TIMEOUT_MS "soon" is not an integer/);
    assert.throws(() => parseUrl(42 as unknown as string), TypeError);
  });

  test("a URL is parsed without any lookup or connection; the result is frozen", () => {
    const c = parseUrl("idgen://no-such-host.invalid:7420?expand=true");
    assert.ok(Object.isFrozen(c) && Object.isFrozen(c.nodes));
    const client = Client.fromUrl("idgen://no-such-host.invalid:7420");
    assert.equal(client.stats().connects, 0);
    void client.close();
  });

  test("a setting given both in code and in the URL or environment is an error", () => {
    const both = (f: () => Client) => assert.throws(f, (e: unknown) => e instanceof ConfigError && /both/.test(e.message));
    both(() => Client.fromUrl("idgen://h:7420?timeout_ms=5", { timeoutMs: 5 }));
    both(() => Client.fromUrl("idgen://h:7420?connect_timeout_ms=5", { connectTimeoutMs: 9 }));
    both(() => Client.fromUrl("idgen://h:7420?expand=false", { expand: true }));
    both(() => Client.fromUrl("idgens://h:7420?ca=/ca.pem", { tls: { caFile: "/other.pem" } }));
    both(() => Client.fromUrl("idgens://h:7420?server_name=x", { tls: { serverName: "y" } }));
    both(() => Client.fromEnv({ timeoutMs: 5 }, { IDGEN_NODES: "h:7420", IDGEN_CLIENT_TIMEOUT_MS: "5" }));
    assert.throws(() => Client.fromUrl("idgen://h:7420", { tls: {} }), (e: unknown) => e instanceof ConfigError && /idgens:\/\//.test(e.message));
    // What the URL does not hold keeps its meaning.
    const ok = Client.fromUrl("idgen://h:7420?timeout_ms=250", { connectTimeoutMs: 300, sequencePrefetch: 10 });
    const fields = ok as unknown as { timeoutMs: number; connectTimeoutMs: number };
    assert.equal(fields.timeoutMs, 250);
    assert.equal(fields.connectTimeoutMs, 300);
    void ok.close();
  });
});

describe("clients from a URL and from the environment, against real nodes", () => {
  let plain: NodeProc;
  let secure: NodeProc; // TLS, client certificates required
  before(async () => {
    plain = await NodeProc.start();
    secure = await NodeProc.start(["--tls-listen", "127.0.0.1:0", "--tls-cert", cert("server.crt"), "--tls-key", cert("server.key"), "--tls-client-ca", cert("ca.crt")]);
  });
  after(async () => {
    await plain?.stop();
    await secure?.stop();
  });

  async function idFrom(client: Client): Promise<bigint> {
    try {
      const id = await client.nextId();
      assert.equal(typeof id, "bigint");
      assert.ok(id > 0n);
      return id;
    } finally {
      await client.close();
    }
  }

  test("IDGEN_NODES, a plain list", async () => {
    await idFrom(Client.fromEnv({}, { IDGEN_NODES: ` ${plain.addr} ` }));
  });

  test("IDGEN_NODES and IDGEN_CLIENT_* (TLS, mutual TLS, server name, timeouts)", async () => {
    const env = {
      IDGEN_NODES: `localhost:${port(secure.tlsAddr!)}`,
      IDGEN_CLIENT_CA: cert("ca.crt"),
      IDGEN_CLIENT_CERT: cert("client.crt"),
      IDGEN_CLIENT_KEY: cert("client.key"),
      IDGEN_CLIENT_TIMEOUT_MS: "5000",
      IDGEN_CLIENT_CONNECT_TIMEOUT_MS: "5000",
    };
    const client = Client.fromEnv({}, env);
    await client.nextId();
    assert.match(client.nodes()[0]!.tlsVersion ?? "", /^TLSv1\.[23]$/);
    await idFrom(client);
    // The server name is verified: the test certificate does not name idgen.internal.
    const wrong = Client.fromEnv({}, { ...env, IDGEN_CLIENT_SERVER_NAME: "idgen.internal" });
    try {
      await assert.rejects(wrong.nextId(), (e: unknown) => e instanceof TlsError && e.kind === "name_mismatch");
    } finally {
      await wrong.close();
    }
  });

  test("Client.fromEnv() reads process.env by default", async () => {
    const saved = process.env["IDGEN_NODES"];
    process.env["IDGEN_NODES"] = `idgen://${plain.addr}`;
    try {
      await idFrom(Client.fromEnv());
    } finally {
      if (saved === undefined) delete process.env["IDGEN_NODES"];
      else process.env["IDGEN_NODES"] = saved;
    }
  });

  test("idgen:// and idgens:// URLs, with the CA path percent-encoded", async () => {
    await idFrom(Client.fromUrl(`idgen://${plain.addr}/?timeout_ms=5000`));
    const tlsPort = port(secure.tlsAddr!);
    const q = `ca=${encodeURIComponent(cert("ca.crt"))}&cert=${encodeURIComponent(cert("client.crt"))}&key=${encodeURIComponent(cert("client.key"))}`;
    await idFrom(Client.fromUrl(`idgens://localhost:${tlsPort}?${q}&connect_timeout_ms=5000`));
    await idFrom(Client.fromEnv({}, { IDGEN_NODES: `idgens://localhost:${tlsPort}?${q}` }));
    // A URL node list keeps its order: the first node that answers serves.
    const dead = await unusedPort();
    const client = Client.fromUrl(`idgen://127.0.0.1:${dead},${plain.addr}?connect_timeout_ms=2000`);
    await client.nextId();
    assert.deepEqual(
      client.nodes().map((n) => n.node),
      [`127.0.0.1:${dead}`, plain.addr],
    );
    assert.ok(client.nodes()[0]!.down);
    await client.close();
  });
});

describe("expand=true: each address of a name is a node", () => {
  let a: NodeProc; // 127.0.0.1:P
  let b: NodeProc; // 127.0.0.2:P
  let secure: NodeProc;
  let p: number;
  before(async () => {
    a = await NodeProc.start();
    p = port(a.addr);
    b = await NodeProc.start(["--listen", `127.0.0.2:${p}`]);
    secure = await NodeProc.start(["--tls-listen", "127.0.0.1:0", "--tls-cert", cert("server.crt"), "--tls-key", cert("server.key")]);
  });
  after(async () => {
    await a?.stop();
    await b?.stop();
    await secure?.stop();
  });

  test("localhost with the system resolver: every address it resolves to, in order, duplicates removed", async () => {
    const found = await dns.lookup("localhost", { all: true, verbatim: true });
    const want = [...new Set(found.map((x) => (x.family === 6 ? `[${x.address}]:${p}` : `${x.address}:${p}`)))];
    const client = Client.fromUrl(`idgen://localhost:${p},127.0.0.1:${p}?expand=true`);
    try {
      await client.nextId(); // 127.0.0.1 answers (::1, if listed, refuses and is skipped)
      assert.deepEqual(
        client.nodes().map((n) => n.node),
        want.includes(`127.0.0.1:${p}`) ? want : [...want, `127.0.0.1:${p}`],
      );
    } finally {
      await client.close();
    }
  });

  test("a name that resolves to nothing is a node that is down, not an error at construction", async () => {
    const lookup = async (host: string) => {
      if (host === "nowhere.invalid") throw Object.assign(new Error("getaddrinfo ENOTFOUND nowhere.invalid"), { code: "ENOTFOUND" });
      return ["127.0.0.1"];
    };
    const client = Client.fromUrl(`idgen://nowhere.invalid:${p},up.test:${p}?expand=true`, { lookup });
    try {
      assert.ok((await client.nextId()) > 0n);
      const nodes = client.nodes();
      assert.deepEqual(
        nodes.map((n) => n.node),
        [`nowhere.invalid:${p}`, `127.0.0.1:${p}`],
      );
      assert.ok(nodes[0]!.down);
    } finally {
      await client.close();
    }
  });

  test("TLS verifies the name given, never the address it resolved to", async () => {
    const tlsPort = port(secure.tlsAddr!);
    const lookup = async () => ["127.0.0.1"];
    const ca = encodeURIComponent(cert("ca.crt"));
    // The certificate names localhost (and 127.0.0.1): reached through 127.0.0.1, verified as localhost.
    const good = Client.fromUrl(`idgens://localhost:${tlsPort}?ca=${ca}&expand=true&connect_timeout_ms=5000`, { lookup });
    try {
      assert.ok((await good.nextId()) > 0n);
      assert.deepEqual(
        good.nodes().map((n) => n.node),
        [`127.0.0.1:${tlsPort}`],
      );
    } finally {
      await good.close();
    }
    // A name the certificate does not hold fails, though the address it resolves to is in it.
    const bad = Client.fromUrl(`idgens://wrong-name.test:${tlsPort}?ca=${ca}&expand=true&connect_timeout_ms=5000`, { lookup });
    try {
      await assert.rejects(bad.nextId(), (e: unknown) => e instanceof TlsError && e.kind === "name_mismatch");
    } finally {
      await bad.close();
    }
  });
  // Last: it stops both nodes.
  test("a failed node makes the client resolve again (at most once a second): new addresses added, gone ones dropped", async () => {
    let answer = ["127.0.0.1", "127.0.0.2"];
    const lookups: string[] = [];
    const lookup = async (host: string) => {
      lookups.push(host);
      return answer;
    };
    const events: string[] = [];
    const client = Client.fromUrl(`idgen://idgen-headless.test:${p}?expand=true&connect_timeout_ms=2000`, {
      lookup,
      hooks: (event, fields) => {
        if (event === "failover") events.push(`failover ${(fields as { from: string }).from} -> ${(fields as { to: string | null }).to}`);
      },
    });
    try {
      await client.nextId();
      assert.deepEqual(lookups, ["idgen-headless.test"]);
      assert.deepEqual(
        client.nodes().map((n) => n.node),
        [`127.0.0.1:${p}`, `127.0.0.2:${p}`],
      );
      answer = ["127.0.0.2", "127.0.0.3"]; // 127.0.0.1 gone, 127.0.0.3 (nothing listens) added
      await sleep(1100);
      await a.kill(); // the connection to 127.0.0.1 fails under the next call
      const id = await client.nextId();
      assert.ok(id > 0n);
      assert.equal(lookups.length, 2, "one more resolution after the failure");
      assert.deepEqual(events, [`failover 127.0.0.1:${p} -> 127.0.0.2:${p}`]);
      for (let i = 0; i < 100 && client.nodes().length !== 2; i++) await sleep(10); // the resolution runs beside the call
      assert.deepEqual(
        client.nodes().map((n) => n.node),
        [`127.0.0.2:${p}`, `127.0.0.3:${p}`],
      );
      // More failures within the second resolve nothing more.
      answer = ["127.0.0.3"];
      await b.kill();
      await assert.rejects(client.nextId(), NoNodeAvailableError);
      await assert.rejects(client.nextId(), NoNodeAvailableError);
      assert.equal(lookups.length, 2, "at most once a second");
    } finally {
      await client.close();
    }
  });

});

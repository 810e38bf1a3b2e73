/**
 * Configuring a client from a URL or from the environment (clients/vectors/CONFIG.md, shared by
 * every idgen client):
 *
 * ```text
 * idgen://NODES[/][?PARAMS]     plain TCP
 * idgens://NODES[/][?PARAMS]    TLS
 * NODES = host[:port] | [v6-literal][:port], comma-separated (port default 7420)
 * PARAMS: ca, cert, key, server_name (idgens:// only), connect_timeout_ms, timeout_ms, expand
 * ```
 *
 * and the variables `IDGEN_NODES` (a URL or a plain `host:port,host:port` list),
 * `IDGEN_CLIENT_CA`, `IDGEN_CLIENT_CERT`, `IDGEN_CLIENT_KEY`, `IDGEN_CLIENT_SERVER_NAME`,
 * `IDGEN_CLIENT_CONNECT_TIMEOUT_MS` and `IDGEN_CLIENT_TIMEOUT_MS` (plain list only). Everything
 * that is not exactly that is a {@link ConfigError} that names what is wrong, before any
 * connection.
 */

import * as net from "node:net";

/** The default port of a node (the ID protocol). */
export const DEFAULT_PORT = 7420;

/** The largest `connect_timeout_ms` / `timeout_ms`: one hour. */
export const MAX_CONFIG_TIMEOUT_MS = 3_600_000;

/** A URL or environment that does not configure a client (a RangeError: bad input). */
export class ConfigError extends RangeError {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** A client's configuration as a URL or the environment gives it (CONFIG.md). */
export interface IdgenConfig {
  /** The nodes, `host:port` (IPv6 as `[v6]:port`), the default port filled in, in the order given. */
  readonly nodes: readonly string[];
  /** `idgens://`, or an `IDGEN_CLIENT_*` TLS variable set. */
  readonly tls: boolean;
  /** PEM file of the CA the nodes' certificates chain to (null: the system roots). */
  readonly ca: string | null;
  /** Client certificate and key files for mutual TLS (both or neither). */
  readonly cert: string | null;
  readonly key: string | null;
  /** The name TLS verifies and sends as SNI instead of each node's host. */
  readonly serverName: string | null;
  /** Integer ms in 1..=3600000; null: the client's default. */
  readonly connectTimeoutMs: number | null;
  readonly timeoutMs: number | null;
  /** Each address a node's name resolves to is a node of its own (re-resolved on failure). */
  readonly expand: boolean;
}

/** The settings a config set explicitly (for the "given both in code and in the URL" check). */
const GIVEN = new WeakMap<IdgenConfig, ReadonlySet<keyof IdgenConfig>>();

/** The settings `config` (from {@link parseUrl} or {@link configFromEnv}) set explicitly. */
export function givenSettings(config: IdgenConfig): ReadonlySet<keyof IdgenConfig> {
  const given = GIVEN.get(config);
  if (given !== undefined) return given;
  // A config built by hand: whatever is not at its default.
  const s = new Set<keyof IdgenConfig>();
  for (const k of ["ca", "cert", "key", "serverName", "connectTimeoutMs", "timeoutMs"] as const) if (config[k] !== null && config[k] !== undefined) s.add(k);
  if (config.expand) s.add("expand");
  return s;
}

const PARAMS = ["ca", "cert", "key", "server_name", "connect_timeout_ms", "timeout_ms", "expand"] as const;
type Param = (typeof PARAMS)[number];
const TLS_PARAMS: readonly Param[] = ["ca", "cert", "key", "server_name"];

const HOST_NAME = /^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?$/;

function show(s: string): string {
  return JSON.stringify(s.length > 200 ? `${s.slice(0, 200)}...` : s);
}

/**
 * One node entry, `host[:port]` or `[v6][:port]`, as `host:port` with the default port filled
 * in (IPv6 in brackets); `where` prefixes the error.
 */
export function parseNodeEntry(entry: string, where: string): string {
  let host: string;
  let port: string | null = null;
  if (entry.startsWith("[")) {
    const close = entry.indexOf("]");
    if (close < 0) throw new ConfigError(`${where}: node ${show(entry)} has an unclosed "[" (an IPv6 address is written [v6] or [v6]:port)`);
    host = entry.slice(1, close);
    const rest = entry.slice(close + 1);
    if (rest !== "") {
      if (!rest.startsWith(":")) throw new ConfigError(`${where}: node ${show(entry)}: after "]" only ":port" may follow`);
      port = rest.slice(1);
    }
    if (!net.isIPv6(host)) throw new ConfigError(`${where}: node ${show(entry)}: ${show(host)} in brackets is not an IPv6 address`);
  } else {
    const colon = entry.indexOf(":");
    if (colon >= 0 && entry.indexOf(":", colon + 1) >= 0) {
      throw new ConfigError(`${where}: node ${show(entry)}: an IPv6 address is written in brackets, [v6]:port`);
    }
    host = colon >= 0 ? entry.slice(0, colon) : entry;
    if (colon >= 0) port = entry.slice(colon + 1);
    if (host === "") throw new ConfigError(`${where}: node ${show(entry)} has no host`);
    if (!HOST_NAME.test(host)) throw new ConfigError(`${where}: node ${show(entry)}: ${show(host)} is not a host name or address`);
  }
  let p = DEFAULT_PORT;
  if (port !== null) {
    if (port === "") throw new ConfigError(`${where}: node ${show(entry)} has an empty port (leave out ":" for the default ${DEFAULT_PORT})`);
    if (!/^[0-9]+$/.test(port)) throw new ConfigError(`${where}: node ${show(entry)}: port ${show(port)} is not a number`);
    p = Number(port);
    if (p < 1 || p > 65535) throw new ConfigError(`${where}: node ${show(entry)}: port ${port} is not in 1..=65535`);
  }
  return host.includes(":") ? `[${host}]:${p}` : `${host}:${p}`;
}

/** A comma-separated node list: no empty entry, no node twice. */
function parseNodeList(list: string, where: string, trim: boolean): string[] {
  if (list.trim() === "") throw new ConfigError(`${where}: no node given`);
  const nodes: string[] = [];
  const seen = new Set<string>();
  const entries = list.split(",");
  entries.forEach((raw, i) => {
    const entry = trim ? raw.trim() : raw;
    if (entry === "") throw new ConfigError(`${where}: entry ${i + 1} of ${entries.length} is empty (in ${show(list)})`);
    const node = parseNodeEntry(entry, where);
    const key = node.toLowerCase();
    if (seen.has(key)) throw new ConfigError(`${where}: node ${node} is listed twice`);
    seen.add(key);
    nodes.push(node);
  });
  return nodes;
}

/** A timeout setting: an integer number of ms in 1..=3600000. */
function parseTimeout(value: string, what: string): number {
  if (!/^[0-9]+$/.test(value)) throw new ConfigError(`${what} ${show(value)} is not an integer number of milliseconds`);
  const ms = Number(value);
  if (ms < 1 || ms > MAX_CONFIG_TIMEOUT_MS) throw new ConfigError(`${what} ${value} is not in 1..=${MAX_CONFIG_TIMEOUT_MS} ms`);
  return ms;
}

function finish(c: IdgenConfig, given: Set<keyof IdgenConfig>, where: string, names: { cert: string; key: string }): IdgenConfig {
  if (c.cert !== null && c.key === null) throw new ConfigError(`${where}: ${names.cert} is given without ${names.key} (mutual TLS needs both)`);
  if (c.key !== null && c.cert === null) throw new ConfigError(`${where}: ${names.key} is given without ${names.cert} (mutual TLS needs both)`);
  const config = Object.freeze({ ...c, nodes: Object.freeze([...c.nodes]) });
  GIVEN.set(config, given);
  return config;
}

/**
 * Parse an `idgen://` or `idgens://` URL (CONFIG.md). Throws {@link ConfigError} saying what is
 * wrong (another scheme, no node, an empty entry, a bad port, user info, a path, a fragment, an
 * unknown, repeated or valueless parameter, a TLS parameter in `idgen://`, `cert` without `key`,
 * a bad timeout or `expand`, a node listed twice). Nothing is resolved or connected.
 *
 * ```ts
 * parseUrl("idgens://n1:7420,n2?ca=/etc/idgen/ca.crt&timeout_ms=500");
 * // { nodes: ["n1:7420", "n2:7420"], tls: true, ca: "/etc/idgen/ca.crt", timeoutMs: 500, ... }
 * ```
 */
export function parseUrl(url: string): IdgenConfig {
  if (typeof url !== "string") throw new TypeError(`an idgen URL is a string, not ${typeof url}`);
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url);
  if (m === null) throw new ConfigError(`${show(url)} is not an idgen://... or idgens://... URL`);
  const scheme = m[1]!;
  if (scheme !== "idgen" && scheme !== "idgens") {
    if (scheme.toLowerCase() === "idgen" || scheme.toLowerCase() === "idgens") {
      throw new ConfigError(`URL scheme ${show(scheme)} must be lower case (${scheme.toLowerCase()}://)`);
    }
    throw new ConfigError(`URL scheme ${show(scheme)} is not idgen:// (plain TCP) or idgens:// (TLS)`);
  }
  const where = `URL ${show(url)}`;
  let rest = url.slice(m[0].length);
  if (rest.includes("#")) throw new ConfigError(`${where}: a fragment ("#...") is not allowed`);
  const q = rest.indexOf("?");
  const query = q >= 0 ? rest.slice(q + 1) : null;
  rest = q >= 0 ? rest.slice(0, q) : rest;
  const slash = rest.indexOf("/");
  const authority = slash >= 0 ? rest.slice(0, slash) : rest;
  const path = slash >= 0 ? rest.slice(slash) : "";
  if (path !== "" && path !== "/") throw new ConfigError(`${where}: a path (${show(path)}) is not allowed; only "/" may follow the nodes`);
  if (authority.includes("@")) throw new ConfigError(`${where}: user info ("user@") is not allowed (a URL never holds secrets)`);
  if (authority === "") throw new ConfigError(`${where}: no node given`);
  const nodes = parseNodeList(authority, where, false);

  const tls = scheme === "idgens";
  const values = new Map<Param, string>();
  if (query !== null && query !== "") {
    for (const part of query.split("&")) {
      if (part === "") throw new ConfigError(`${where}: an empty parameter ("&&" or a trailing "&")`);
      const eq = part.indexOf("=");
      if (eq < 0) throw new ConfigError(`${where}: parameter ${show(part)} has no "=value"`);
      const name = part.slice(0, eq);
      if (!(PARAMS as readonly string[]).includes(name)) {
        throw new ConfigError(`${where}: unknown parameter ${show(name)} (known: ${PARAMS.join(", ")})`);
      }
      const param = name as Param;
      if (values.has(param)) throw new ConfigError(`${where}: parameter ${name} is given twice`);
      let value: string;
      try {
        value = decodeURIComponent(part.slice(eq + 1));
      } catch {
        throw new ConfigError(`${where}: parameter ${name}: bad percent-encoding in ${show(part.slice(eq + 1))}`);
      }
      if (value === "") throw new ConfigError(`${where}: parameter ${name} has an empty value`);
      if (!tls && TLS_PARAMS.includes(param)) throw new ConfigError(`${where}: ${name} is a TLS parameter: use idgens://`);
      values.set(param, value);
    }
  }
  const given = new Set<keyof IdgenConfig>();
  const get = (p: Param, k: keyof IdgenConfig): string | null => {
    const v = values.get(p);
    if (v === undefined) return null;
    given.add(k);
    return v;
  };
  const ct = get("connect_timeout_ms", "connectTimeoutMs");
  const t = get("timeout_ms", "timeoutMs");
  const expand = get("expand", "expand");
  if (expand !== null && expand !== "true" && expand !== "false") throw new ConfigError(`${where}: expand is ${show(expand)}, not true or false`);
  return finish(
    {
      nodes,
      tls,
      ca: get("ca", "ca"),
      cert: get("cert", "cert"),
      key: get("key", "key"),
      serverName: get("server_name", "serverName"),
      connectTimeoutMs: ct === null ? null : parseTimeout(ct, `${where}: connect_timeout_ms`),
      timeoutMs: t === null ? null : parseTimeout(t, `${where}: timeout_ms`),
      expand: expand === "true",
    },
    given,
    where,
    { cert: "cert", key: "key" },
  );
}

/** The variables {@link configFromEnv} reads besides `IDGEN_NODES`. */
export const CLIENT_ENV_VARIABLES = [
  "IDGEN_CLIENT_CA",
  "IDGEN_CLIENT_CERT",
  "IDGEN_CLIENT_KEY",
  "IDGEN_CLIENT_SERVER_NAME",
  "IDGEN_CLIENT_CONNECT_TIMEOUT_MS",
  "IDGEN_CLIENT_TIMEOUT_MS",
] as const;

/**
 * A configuration from the environment (CONFIG.md): `IDGEN_NODES` (required) is a URL
 * ({@link parseUrl}; then no `IDGEN_CLIENT_*` variable may be set) or a plain
 * `host:port,host:port` list (spaces around entries ignored) that the `IDGEN_CLIENT_*`
 * variables complete: `IDGEN_CLIENT_CA`, `IDGEN_CLIENT_CERT`, `IDGEN_CLIENT_KEY`,
 * `IDGEN_CLIENT_SERVER_NAME` (any of them set turns TLS on), `IDGEN_CLIENT_CONNECT_TIMEOUT_MS`,
 * `IDGEN_CLIENT_TIMEOUT_MS`. An empty variable counts as unset. Throws {@link ConfigError}.
 *
 * ```ts
 * const config = configFromEnv(); // process.env
 * const other = configFromEnv({ IDGEN_NODES: "a:7420,b:7420", IDGEN_CLIENT_TIMEOUT_MS: "500" });
 * ```
 */
export function configFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): IdgenConfig {
  if (env === null || typeof env !== "object") throw new TypeError("env must be an object of variables (process.env by default)");
  const get = (name: string): string | null => {
    const v = env[name];
    if (v === undefined || v === null || v === "") return null;
    if (typeof v !== "string") throw new TypeError(`${name} must be a string`);
    return v;
  };
  const nodesVar = get("IDGEN_NODES");
  if (nodesVar === null) {
    throw new ConfigError(`IDGEN_NODES is not set: give the nodes as "host:port,host:port" or as a URL (idgen://host:port or idgens://host:port?ca=...)`);
  }
  const set = CLIENT_ENV_VARIABLES.filter((name) => get(name) !== null);
  if (/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(nodesVar.trim())) {
    if (set.length > 0) {
      throw new ConfigError(`IDGEN_NODES is a URL, and ${set.join(", ")} ${set.length === 1 ? "is" : "are"} set too: each setting has one source (put it in the URL, or give IDGEN_NODES as a plain host:port list)`);
    }
    try {
      return parseUrl(nodesVar.trim());
    } catch (e) {
      if (e instanceof ConfigError) throw new ConfigError(`IDGEN_NODES: ${e.message}`);
      throw e;
    }
  }
  const where = "IDGEN_NODES";
  const nodes = parseNodeList(nodesVar, where, true);
  const given = new Set<keyof IdgenConfig>();
  const take = (name: string, k: keyof IdgenConfig): string | null => {
    const v = get(name);
    if (v !== null) given.add(k);
    return v;
  };
  const ca = take("IDGEN_CLIENT_CA", "ca");
  const cert = take("IDGEN_CLIENT_CERT", "cert");
  const key = take("IDGEN_CLIENT_KEY", "key");
  const serverName = take("IDGEN_CLIENT_SERVER_NAME", "serverName");
  const ct = take("IDGEN_CLIENT_CONNECT_TIMEOUT_MS", "connectTimeoutMs");
  const t = take("IDGEN_CLIENT_TIMEOUT_MS", "timeoutMs");
  return finish(
    {
      nodes,
      tls: ca !== null || cert !== null || key !== null || serverName !== null,
      ca,
      cert,
      key,
      serverName,
      connectTimeoutMs: ct === null ? null : parseTimeout(ct, "IDGEN_CLIENT_CONNECT_TIMEOUT_MS"),
      timeoutMs: t === null ? null : parseTimeout(t, "IDGEN_CLIENT_TIMEOUT_MS"),
      expand: false,
    },
    given,
    "the environment",
    { cert: "IDGEN_CLIENT_CERT", key: "IDGEN_CLIENT_KEY" },
  );
}

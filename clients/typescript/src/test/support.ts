/**
 * Shared test helpers: paths, vectors, real idgen nodes, an etcd, fake nodes, certificates.
 * Every wait here is bounded in time, and tests stop only the processes they started (by PID).
 */

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { accessSync, constants, existsSync, mkdtempSync, openSync, closeSync, readFileSync, rmSync } from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { createInterface } from "node:readline";
import * as tls from "node:tls";
import { fileURLToPath } from "node:url";

import { closesConnection } from "../status.js";
import { encodeError, encodeHelloOk, encodeIds, encodePong, encodeRanges, encodeValues, type HelloOk, type SequenceMode } from "../protocol.js";

const HERE = path.dirname(fileURLToPath(import.meta.url)); // clients/typescript/dist/test
export const REPO = path.resolve(HERE, "..", "..", "..", "..");
const START_TIMEOUT_MS = 30_000;

export function loadJson(relative: string): unknown {
  return JSON.parse(readFileSync(path.join(REPO, relative), "utf8"));
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The server binary: `$IDGEN_BIN`, else `<repo>/target/debug/idgen`. Throws (the test fails,
 * never skips) when it is missing. */
export function idgenBin(): string {
  const bin = process.env["IDGEN_BIN"] || path.join(REPO, "target", "debug", "idgen");
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    throw new Error(`idgen server binary not found at ${bin}: build it with \`cargo build -p idgen\` (target/debug/idgen) or set IDGEN_BIN`);
  }
  return bin;
}

/**
 * Run `idgen <args>` to completion (e.g. `seq create orders --data-dir DIR` before a node
 * starts on DIR); throws with its output when it fails or takes over 60 s.
 */
export function runIdgen(args: string[]): string {
  const bin = idgenBin();
  const done = spawnSync(bin, args, { timeout: 60_000, encoding: "utf8" });
  if (done.error !== undefined || done.status !== 0) {
    throw new Error(`idgen ${args.join(" ")} failed (${done.error?.message ?? `exit ${done.status}`}):\n${done.stdout}\n${done.stderr}`);
  }
  return done.stdout;
}

export function tmpDir(prefix: string): string {
  return mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** A real `idgen serve` process, stopped by PID. */
export class NodeProc {
  readonly addr: string;
  readonly tlsAddr: string | null;
  readonly dir: string;
  private readonly proc: ChildProcess;
  private readonly logPath: string;
  private exited: Promise<void>;

  private constructor(proc: ChildProcess, addr: string, tlsAddr: string | null, dir: string, logPath: string, exited: Promise<void>) {
    this.proc = proc;
    this.addr = addr;
    this.tlsAddr = tlsAddr;
    this.dir = dir;
    this.logPath = logPath;
    this.exited = exited;
  }

  get pid(): number {
    return this.proc.pid!;
  }

  /**
   * Start `idgen serve` on 127.0.0.1:0 unless `args` give --listen (memory store unless
   * `options.store` names another, or is null: no --store, the embedded default in `dir`; 2
   * shards unless `args` say otherwise), and wait for its `listening on` line (and
   * `listening with TLS on` with --tls-listen).
   */
  static async start(args: string[] = [], options: { store?: string | null; dir?: string; env?: Record<string, string> } = {}): Promise<NodeProc> {
    const bin = idgenBin();
    const dir = options.dir ?? tmpDir("idgen-tstest-");
    const logPath = path.join(dir, `server-${Date.now()}.log`);
    const log = openSync(logPath, "a");
    const store = options.store === null ? [] : ["--store", options.store ?? "memory"];
    const full = ["serve", ...(args.includes("--listen") ? [] : ["--listen", "127.0.0.1:0"]), "--admin-listen", "off", "--http-listen", "off", ...store, "--data-dir", dir];
    if (!args.includes("--shards")) full.push("--shards", "2");
    full.push(...args);
    const proc = spawn(bin, full, { stdio: ["ignore", "pipe", log], env: options.env !== undefined ? { ...process.env, ...options.env } : process.env });
    closeSync(log);
    const exited = new Promise<void>((r) => proc.once("exit", () => r()));
    const wantTls = args.includes("--tls-listen");
    const lines = createInterface({ input: proc.stdout! });
    let addr: string | null = null;
    let tlsAddr: string | null = null;
    const ready = new Promise<void>((resolve, reject) => {
      lines.on("line", (line) => {
        const t = line.trim();
        if (t.startsWith("listening with TLS on ")) tlsAddr = t.slice("listening with TLS on ".length);
        else if (t.startsWith("listening on ")) addr = t.slice("listening on ".length);
        if (addr !== null && (tlsAddr !== null || !wantTls)) resolve();
      });
      proc.once("exit", (code) => reject(new Error(`idgen exited (${code}) before listening; log:\n${tail(logPath)}`)));
    });
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([ready, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`idgen did not print its listening addresses within ${START_TIMEOUT_MS} ms; log:\n${tail(logPath)}`)), START_TIMEOUT_MS)))]);
    } catch (e) {
      proc.kill("SIGKILL");
      throw e;
    } finally {
      clearTimeout(timer);
    }
    return new NodeProc(proc, addr!, tlsAddr, dir, logPath, exited);
  }

  log(): string {
    return tail(this.logPath);
  }

  get running(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** SIGKILL, as a crash. */
  async kill(): Promise<void> {
    if (this.running) this.proc.kill("SIGKILL");
    await withTimeout(this.exited, 10_000, "idgen did not exit after SIGKILL");
  }

  signal(sig: NodeJS.Signals): void {
    if (this.running) this.proc.kill(sig);
  }

  /** SIGTERM, then SIGKILL after 15 s. */
  async stop(): Promise<void> {
    if (this.running) {
      this.proc.kill("SIGTERM");
      try {
        await withTimeout(this.exited, 15_000, "");
      } catch {
        this.proc.kill("SIGKILL");
        await withTimeout(this.exited, 10_000, "idgen did not exit after SIGKILL");
      }
    }
  }
}

function tail(file: string): string {
  try {
    return readFileSync(file, "utf8").slice(-4000);
  } catch {
    return "(no log)";
  }
}

export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what || `timed out after ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** A loopback port nothing listens on (bound, then released). */
export async function unusedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

// -- etcd -------------------------------------------------------------------------------------

/** A single-member etcd on loopback (Debian's `etcd`), stopped by PID. */
export class Etcd {
  readonly url: string;
  private readonly proc: ChildProcess;
  private readonly dir: string;
  private readonly exited: Promise<void>;

  private constructor(proc: ChildProcess, url: string, dir: string, exited: Promise<void>) {
    this.proc = proc;
    this.url = url;
    this.dir = dir;
    this.exited = exited;
  }

  static async start(): Promise<Etcd> {
    const bin = process.env["ETCD_BIN"] || "etcd";
    const dir = tmpDir("idgen-tstest-etcd-");
    const client = await unusedPort();
    const peer = await unusedPort();
    const url = `http://127.0.0.1:${client}`;
    const peerUrl = `http://127.0.0.1:${peer}`;
    const log = openSync(path.join(dir, "etcd.log"), "a");
    const proc = spawn(
      bin,
      ["--name", "t", "--data-dir", path.join(dir, "data"), "--listen-client-urls", url, "--advertise-client-urls", url, "--listen-peer-urls", peerUrl, "--initial-advertise-peer-urls", peerUrl, "--initial-cluster", `t=${peerUrl}`],
      { stdio: ["ignore", log, log] },
    );
    closeSync(log);
    const spawnError = new Promise<never>((_, reject) => proc.once("error", (e) => reject(new Error(`cannot start etcd (${bin}): ${e.message}`))));
    spawnError.catch(() => undefined);
    const exited = new Promise<void>((r) => proc.once("exit", () => r()));
    const etcd = new Etcd(proc, url, dir, exited);
    const deadline = Date.now() + 20_000;
    for (;;) {
      try {
        const r = await Promise.race([fetch(`${url}/health`), spawnError]);
        if (r.ok && ((await r.json()) as { health?: string }).health === "true") return etcd;
      } catch (e) {
        if (proc.exitCode !== null || (e instanceof Error && e.message.startsWith("cannot start etcd"))) {
          throw new Error(`etcd failed to start: ${e instanceof Error ? e.message : String(e)}\n${tail(path.join(dir, "etcd.log"))}`);
        }
      }
      if (Date.now() > deadline) {
        await etcd.stop();
        throw new Error(`etcd not healthy within 20 s:\n${tail(path.join(dir, "etcd.log"))}`);
      }
      await sleep(100);
    }
  }

  /** The store URL for idgen nodes: `etcd://127.0.0.1:P/<prefix>`. */
  store(prefix: string): string {
    return `etcd://${this.url.slice("http://".length)}/${prefix}`;
  }

  private async call(api: string, body: object): Promise<unknown> {
    const r = await fetch(`${this.url}/v3/${api}`, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } });
    if (!r.ok) throw new Error(`etcd ${api}: HTTP ${r.status} ${await r.text()}`);
    return r.json();
  }

  /** Every key under `prefix` with its value (text). */
  async range(prefix: string): Promise<Map<string, string>> {
    const key = Buffer.from(prefix);
    const end = Buffer.from(prefix);
    end[end.length - 1]!++;
    const out = (await this.call("kv/range", { key: key.toString("base64"), range_end: end.toString("base64") })) as { kvs?: { key: string; value: string }[] };
    return new Map((out.kvs ?? []).map((kv) => [Buffer.from(kv.key, "base64").toString(), Buffer.from(kv.value, "base64").toString()]));
  }

  async put(key: string, value: string): Promise<void> {
    await this.call("kv/put", { key: Buffer.from(key).toString("base64"), value: Buffer.from(value).toString("base64") });
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGTERM");
      try {
        await withTimeout(this.exited, 10_000, "");
      } catch {
        this.proc.kill("SIGKILL");
        await withTimeout(this.exited, 10_000, "etcd did not exit");
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// -- certificates -------------------------------------------------------------------------------

let certs: string | null = null;

/**
 * The test certificates of the test kit's `idgen-test-certs`: `$IDGEN_TEST_CERTS` (a directory
 * run_tests.sh fills), else written once into a temporary directory by
 * `$IDGEN_TEST_CERTS_BIN`, else by `cargo run -p idgen-testkit --bin idgen-test-certs`.
 * Throws (fails, never skips) when none works.
 */
export function certsDir(): string {
  if (certs !== null) return certs;
  const given = process.env["IDGEN_TEST_CERTS"];
  if (given) {
    if (!existsSync(path.join(given, "ca.crt"))) throw new Error(`IDGEN_TEST_CERTS=${given} holds no ca.crt`);
    certs = given;
    return given;
  }
  const dir = tmpDir("idgen-tstest-certs-");
  const bin = process.env["IDGEN_TEST_CERTS_BIN"];
  const [cmd, args] = bin ? [bin, [dir]] : ["cargo", ["run", "--quiet", "-p", "idgen-testkit", "--bin", "idgen-test-certs", "--", dir]];
  const done = spawnSync(cmd, args, { cwd: REPO, timeout: 600_000, encoding: "utf8" });
  if (done.status !== 0) throw new Error(`cannot generate test certificates with ${cmd} ${args.join(" ")}: ${done.error?.message ?? done.stderr}`);
  certs = dir;
  return dir;
}

export function cert(name: string): string {
  return path.join(certsDir(), name);
}

// -- a server's request decoder (for the vectors and the fake nodes) -----------------------------

/** The versions a (fake) server speaks. */
export const SERVER_VERSIONS = [1, 5] as const;

/** A request as the vectors' `decoded` writes it. */
export type DecodedRequest =
  | { op: "HELLO"; min_version: number; max_version: number }
  | { op: "GET_IDS"; count: number }
  | { op: "GET_RANGES"; count: number }
  | { op: "PING"; token: string }
  | { op: "GET_VALUES"; count: number; name: string }
  | { op: "GET_UUIDS"; count: number }
  | { op: "GET_IDS_WITH"; count: number; after?: string; key?: string; masked: boolean };

/** One well-formed request frame: a request to serve, or a status that refuses it and keeps
 * the connection open (`reject`). */
export interface RequestOutcome {
  readonly consumed: number;
  readonly request: DecodedRequest | null;
  readonly reject: number | null;
}

/** A broken stream: the server answers `status` and closes. */
export class FrameFault extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

export interface RequestLimits {
  readonly max_request_frame: number;
  readonly max_batch: number;
}

const NAME_BYTE = /^[a-z0-9._-]$/;

/** Whether raw GET_VALUES name bytes are a sequence name (PROTOCOL.md section 3.5). */
function nameBytesOk(b: Uint8Array): boolean {
  if (b.length < 1 || b.length > 64) return false;
  for (const c of b) if (c >= 0x80 || !NAME_BYTE.test(String.fromCharCode(c))) return false;
  return /[a-z0-9]/.test(String.fromCharCode(b[0]!));
}

/**
 * Decode the first request frame of `buf` as a server speaking `version` does (PROTOCOL.md
 * sections 3 and 7; the Rust reference is protocol/src/request.rs): `null` while incomplete,
 * FrameFault for a broken stream (as early as the bytes show it). The HELLO-first rule is
 * {@link handshakeRule}'s.
 */
export function decodeRequest(buf: Uint8Array, limits: RequestLimits, version: number): RequestOutcome | null {
  if (buf.length < 4) return null;
  const length = ((buf[0]! << 24) | (buf[1]! << 16) | (buf[2]! << 8) | buf[3]!) >>> 0;
  if (length === 0) throw new FrameFault(100, "frame length 0");
  if (length > limits.max_request_frame) throw new FrameFault(101, `frame length ${length} exceeds limit ${limits.max_request_frame}`);
  if (buf.length < 5) return null;
  const op = buf[4]!;
  const fixed: Record<number, number> = { 0x01: 9, 0x02: 5, 0x03: 9 };
  if (version >= 2) fixed[0x04] = 5;
  if (version >= 4) fixed[0x06] = 5;
  const want = fixed[op];
  if (want !== undefined && length !== want) throw new FrameFault(100, `opcode ${op} with length ${length}, expected ${want}`);
  if (op === 0x05 && version >= 3 && (length < 6 || length > 69)) throw new FrameFault(100, `GET_VALUES length ${length} outside 6..=69`);
  if (op === 0x07 && version >= 5 && (length < 6 || length > 79)) throw new FrameFault(100, `GET_IDS_WITH length ${length} outside 6..=79`);
  if (buf.length < 4 + length) return null;
  const consumed = 4 + length;
  const p = Buffer.from(buf.buffer, buf.byteOffset + 5, length - 1);
  const ok = (request: DecodedRequest): RequestOutcome => ({ consumed, request, reject: null });
  const no = (status: number): RequestOutcome => ({ consumed, request: null, reject: status });
  const variable = (op === 0x05 && version >= 3) || (op === 0x07 && version >= 5);
  switch (want === undefined && !variable ? -1 : op) {
    case 0x01:
      if (p.toString("latin1", 0, 4) !== "IDGN") throw new FrameFault(100, "bad magic");
      return ok({ op: "HELLO", min_version: p.readUInt16BE(4), max_version: p.readUInt16BE(6) });
    case 0x02:
    case 0x04:
    case 0x06: {
      const count = p.readUInt32BE(0);
      if (count === 0) return no(200);
      if (count > limits.max_batch) return no(201);
      return ok({ op: op === 0x02 ? "GET_IDS" : op === 0x04 ? "GET_RANGES" : "GET_UUIDS", count });
    }
    case 0x03:
      return ok({ op: "PING", token: p.readBigUInt64BE(0).toString() });
    case 0x05: {
      const count = p.readUInt32BE(0);
      if (count === 0) return no(200);
      if (count > Math.min(limits.max_batch, 1 << 20)) return no(201);
      const name = p.subarray(4);
      if (!nameBytesOk(name)) return no(204);
      return ok({ op: "GET_VALUES", count, name: name.toString("latin1") });
    }
    case 0x07: {
      // PROTOCOL.md 3.8 (protocol/src/request.rs decode_ids_with): the length must match the
      // options (closes); then count, option bits, after's sign bit, the key's bytes (keep).
      const wrong = () => new FrameFault(100, `GET_IDS_WITH length ${length} disagrees with its options`);
      const count = p.readUInt32BE(0);
      const options = p[4]!;
      let i = 5;
      let after: bigint | undefined;
      if (options & 0x01) {
        if (p.length < i + 8) throw wrong();
        after = p.readBigUInt64BE(i);
        i += 8;
      }
      let key: Buffer | undefined;
      if (options & 0x02) {
        if (p.length < i + 1) throw wrong();
        const len = p[i]!;
        if (p.length - (i + 1) !== len) throw wrong();
        key = p.subarray(i + 1, i + 1 + len);
        i = p.length;
      }
      if (i !== p.length) throw wrong();
      if (count === 0) return no(200);
      if (count > limits.max_batch) return no(201);
      if (options & ~0x07) return no(205);
      if (after !== undefined && after >= 1n << 63n) return no(205);
      if (key !== undefined && (key.length < 1 || key.length > 64 || key.some((c) => c < 0x21 || c > 0x7e))) return no(205);
      const out: DecodedRequest = { op: "GET_IDS_WITH", count, masked: (options & 0x04) !== 0 };
      if (after !== undefined) out.after = after.toString();
      if (key !== undefined) out.key = key.toString("latin1");
      return ok(out);
    }
    default:
      return no(202);
  }
}

/** The version a server speaking {@link SERVER_VERSIONS} picks for HELLO `min..=max`. */
export function negotiate(min: number, max: number): number | null {
  const hi = Math.min(max, SERVER_VERSIONS[1]);
  const lo = Math.max(min, SERVER_VERSIONS[0]);
  return lo <= hi ? hi : null;
}

/** The HELLO-first rule for one decoded frame: the status that closes the connection, or
 * null. `established`: a handshake has completed on the connection. */
export function handshakeRule(out: RequestOutcome, established: boolean): number | null {
  const hello = out.request !== null && out.request.op === "HELLO" ? out.request : null;
  if (!established) {
    if (hello === null) return 102;
    return negotiate(hello.min_version, hello.max_version) === null ? 103 : null;
  }
  return hello !== null ? 102 : null;
}

// -- fake nodes ----------------------------------------------------------------------------------

export function defaultHello(overrides: Partial<HelloOk> = {}): HelloOk {
  return {
    version: 1,
    epochMs: 1767225600000n,
    timestampBits: 41,
    workerBits: 10,
    sequenceBits: 12,
    regionBits: 0,
    maxBatch: 65536,
    maxRequestFrame: 128,
    workerFirst: 0,
    workerCount: 1,
    shard: 0,
    ...overrides,
  };
}

export type FakeMode = "serve" | "unavailable" | "garbage" | "silent" | "range_changed";

/** A named sequence of a fake node: values `start, start + 1, ...` up to `max`. */
export interface FakeSequence {
  mode: SequenceMode;
  /** The next value to hand out. Default 1. */
  next?: bigint;
  /** The largest value; past it GET_VALUES is answered SEQUENCE_USED_UP (307). */
  max?: bigint;
}

export interface FakeOptions {
  status?: number;
  /** range_changed: requests served on the first connection before the 305. */
  serveBefore?: number;
  /** The HELLO_OK of every connection after the first. */
  helloAfter?: HelloOk;
  firstId?: bigint;
  /** Answer GET_RANGES (version 2 HELLO_OK) with runs of this many IDs each. */
  runLength?: number;
  /** Hold every answer until this many requests have arrived (to prove pipelining). */
  holdUntil?: number;
  /** The node's named sequences (GET_VALUES on a version 3 HELLO_OK): absent names are
   * answered UNKNOWN_SEQUENCE. */
  sequences?: Record<string, FakeSequence>;
  /** Answer GET_VALUES with a broken VALUES frame: one value more than asked, values not
   * increasing, or an unknown mode byte. */
  badValues?: "count" | "order" | "mode";
  /** Answer every GET_UUIDS (version 4 HELLO_OK) with these bytes, made from its count,
   * instead of the UUIDs of the counter's IDs. */
  uuidAnswer?: (count: number) => Buffer;
  tls?: tls.TlsOptions;
}

/**
 * A tiny idgen node. After the handshake it answers every request according to `mode`:
 * `serve` (IDS/RANGES from one counter shared by all connections, PONG), `unavailable`
 * (ERROR `status`, default 300, closing when the status closes), `garbage`, `silent`, or
 * `range_changed` (serves `serveBefore` requests on the first connection, then 305 and close;
 * later connections are greeted with `helloAfter` and served).
 */
export class FakeNode {
  readonly addr: string;
  requests = 0;
  connections = 0;
  readonly idsByConnection: bigint[][] = [];
  /** Every request frame received after the handshake, decoded (or its refusal status). */
  readonly received: (DecodedRequest | { op: "REJECTED"; status: number })[] = [];
  readonly tlsSessions: { alpn: string | false | null; clientCert: boolean }[] = [];
  readonly tlsFailures: Error[] = [];
  private nextId: bigint;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();

  private constructor(server: net.Server, addr: string, firstId: bigint) {
    this.server = server;
    this.addr = addr;
    this.nextId = firstId;
  }

  static async start(hello: HelloOk, mode: FakeMode, o: FakeOptions = {}): Promise<FakeNode> {
    let fake!: FakeNode;
    const onSocket = (sock: net.Socket) => fake.handle(sock, hello, mode, o);
    const server = o.tls ? tls.createServer({ ...o.tls, ALPNProtocols: ["idgen/1"] }, onSocket) : net.createServer(onSocket);
    if (o.tls) {
      server.on("tlsClientError", (e: Error) => fake.tlsFailures.push(e));
    }
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    const port = (server.address() as net.AddressInfo).port;
    fake = new FakeNode(server, `127.0.0.1:${port}`, o.firstId ?? 1n << 40n);
    return fake;
  }

  private handle(sock: net.Socket, hello: HelloOk, mode: FakeMode, o: FakeOptions): void {
    this.sockets.add(sock);
    sock.on("close", () => this.sockets.delete(sock));
    sock.on("error", () => undefined);
    sock.setNoDelay(true);
    if (sock instanceof tls.TLSSocket) {
      this.tlsSessions.push({ alpn: sock.alpnProtocol, clientCert: Object.keys(sock.getPeerCertificate()).length > 0 });
    }
    const index = this.connections++;
    const sent: bigint[] = [];
    this.idsByConnection.push(sent);
    if (mode === "range_changed" && index > 0) mode = "serve";
    let greeting = index === 0 ? hello : (o.helloAfter ?? hello);
    let buf = Buffer.alloc(0);
    let greeted = false;
    let k = 0;
    const held: Buffer[] = [];
    sock.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (!greeted) {
        if (buf.length < 13) return;
        // The node speaks 1..=greeting.version: it picks the highest the client offers.
        const offered = buf.readUInt16BE(11);
        if (offered < greeting.version) greeting = { ...greeting, version: offered };
        buf = buf.subarray(13);
        greeted = true;
        sock.write(encodeHelloOk(greeting));
      }
      for (;;) {
        let decoded: RequestOutcome | null;
        try {
          decoded = decodeRequest(buf, { max_request_frame: greeting.maxRequestFrame, max_batch: greeting.maxBatch }, greeting.version);
        } catch (e) {
          const fault = e as FrameFault;
          sock.end(encodeError(fault.status, fault.message));
          return;
        }
        if (decoded === null) break;
        const length = decoded.consumed - 4;
        const body = buf.subarray(4, 4 + length);
        buf = buf.subarray(4 + length);
        this.requests++;
        this.received.push(decoded.request ?? { op: "REJECTED", status: decoded.reject! });
        const step = k++;
        let answer: Buffer | null = null;
        let close = false;
        if (mode === "unavailable") {
          answer = encodeError(o.status ?? 300, "fake node says no");
          close = closesConnection(o.status ?? 300);
        } else if (mode === "garbage") {
          answer = Buffer.from("\x00\x00\x00\x09\x99garbage!", "latin1");
        } else if (mode === "range_changed" && step >= (o.serveBefore ?? 0)) {
          answer = encodeError(305, "worker range changed");
          close = true;
        } else if (mode === "serve" || mode === "range_changed") {
          answer = decoded.reject !== null ? encodeError(decoded.reject, "refused") : this.answer(body, sent, o, greeting);
        }
        if (answer === null) continue; // silent
        if (o.holdUntil !== undefined && this.requests < o.holdUntil) {
          held.push(answer);
          continue;
        }
        for (const h of held.splice(0)) sock.write(h);
        sock.write(answer);
        if (close) {
          sock.end();
          return;
        }
      }
    });
  }

  private answer(body: Buffer, sent: bigint[], o: FakeOptions, hello: HelloOk): Buffer {
    const op = body[0]!;
    if (op === 0x03) return encodePong(body.readBigUInt64BE(1));
    const count = body.readUInt32BE(1);
    if (op === 0x05) return this.answerValues(body.subarray(5).toString("latin1"), count, o);
    if (op === 0x06) {
      if (o.uuidAnswer !== undefined) return o.uuidAnswer(count);
      const uuids: Buffer[] = [];
      for (let i = 0; i < count; i++) {
        const id = this.nextId++;
        sent.push(id);
        uuids.push(uuidOf(hello, id, id * 0x9e3779b97f4a7c15n));
      }
      return uuidsBytes(uuids);
    }
    const first = this.nextId;
    const ids: bigint[] = [];
    for (let i = 0n; i < BigInt(count); i++) ids.push(first + i);
    sent.push(...ids);
    if (op === 0x02) {
      this.nextId += BigInt(count);
      return encodeIds(ids);
    }
    // Runs of `runLength`, with a gap of one ID between runs.
    const runLength = o.runLength ?? count;
    const runs = [];
    let next = first;
    sent.length -= count;
    for (let left = count; left > 0; ) {
      const n = Math.min(runLength, left);
      runs.push({ first: next, count: n });
      for (let i = 0n; i < BigInt(n); i++) sent.push(next + i);
      next += BigInt(n) + 1n;
      left -= n;
    }
    this.nextId = next;
    return encodeRanges(runs);
  }

  private answerValues(name: string, count: number, o: FakeOptions): Buffer {
    const seq = o.sequences?.[name];
    if (seq === undefined) return encodeError(203, `no sequence ${name}`);
    const next = seq.next ?? 1n;
    const max = seq.max ?? (1n << 63n) - 1n;
    if (max - next + 1n < BigInt(count)) return encodeError(307, `sequence ${name} is used up`);
    const values: bigint[] = [];
    for (let i = 0n; i < BigInt(count); i++) values.push(next + i);
    seq.next = next + BigInt(count);
    if (o.badValues === "count") values.push(seq.next++);
    if (o.badValues === "order" && values.length >= 2) values.reverse();
    return encodeValues(o.badValues === "mode" ? 2 : seq.mode, values);
  }

  /** The GET_VALUES requests received, in order. */
  valueRequests(): { count: number; name: string }[] {
    return this.received.flatMap((r) => (r.op === "GET_VALUES" ? [{ count: r.count, name: r.name }] : []));
  }

  /** Stop accepting and cut every open connection (as a crashed node would). */
  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/**
 * The version 7 UUID (16 bytes) a node of `hello`'s layout makes from `id` with `random` in its
 * random bits (PROTOCOL.md section 3.7), written out independently of the client's decoder.
 */
export function uuidOf(hello: Pick<HelloOk, "epochMs" | "workerBits" | "sequenceBits">, id: bigint, random = 0n): Buffer {
  const lowBits = BigInt(hello.workerBits + hello.sequenceBits);
  const randomBits = 74n - lowBits;
  const payload = ((id & ((1n << lowBits) - 1n)) << randomBits) | (random & ((1n << randomBits) - 1n));
  const unixMs = hello.epochMs + (id >> lowBits);
  const u = (unixMs << 80n) | (7n << 76n) | ((payload >> 62n) << 64n) | (2n << 62n) | (payload & ((1n << 62n) - 1n));
  return Buffer.from(u.toString(16).padStart(32, "0"), "hex");
}

/** A UUIDS frame (0x86) of 16-byte `uuids`. */
export function uuidsBytes(uuids: Buffer[]): Buffer {
  const head = Buffer.alloc(9);
  head.writeUInt32BE(5 + 16 * uuids.length, 0);
  head[4] = 0x86;
  head.writeUInt32BE(uuids.length, 5);
  return Buffer.concat([head, ...uuids]);
}

/** The canonical text form of 16 UUID bytes. */
export function uuidString(b: Buffer): string {
  const h = b.toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** Every element of `ids` is distinct. */
export function allDistinct(ids: Iterable<bigint>): boolean {
  const seen = new Set<bigint>();
  let n = 0;
  for (const id of ids) {
    seen.add(id);
    n++;
  }
  return seen.size === n;
}

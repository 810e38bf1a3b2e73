#!/usr/bin/env python3
"""Checks idgen's version 7 UUIDs with parsers that are not idgen's: Python's `uuid` module
(version, variant, time field, order) and PostgreSQL's `uuid` type (its ORDER BY is the order
the node issued them in). Starts its own node and its own throwaway PostgreSQL, loopback only,
and fails loudly (non-zero exit) on any mismatch or if either cannot start.

    scripts/uuids_check.py [--count 5000] [--idgen target/debug/idgen]

Needs PostgreSQL's server binaries under /usr/lib/postgresql/*/bin and runs them as the
`postgres` user (so run as root, as scripts/bench does).
"""

import argparse
import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def post(addr, path, body=None):
    req = urllib.request.Request(f"http://{addr}{path}", method="POST",
                                 data=body.encode() if body else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def fail(msg):
    print(f"uuids_check: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--idgen", default=str(ROOT / "target" / "debug" / "idgen"))
    args = ap.parse_args()
    if not Path(args.idgen).is_file():
        fail(f"{args.idgen} is missing: cargo build -p idgen")
    pg_dirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not pg_dirs:
        fail("PostgreSQL binaries not found under /usr/lib/postgresql")
    bindir = pg_dirs[-1]

    tmp = Path(tempfile.mkdtemp(prefix="idgen-uuids-"))
    procs = []
    try:
        http_port, admin_port = free_port(), free_port()
        node = subprocess.Popen(
            [args.idgen, "serve", "--store", "memory", "--shards", "2", "--listen", "127.0.0.1:0",
             "--http-listen", f"127.0.0.1:{http_port}", "--admin-listen", f"127.0.0.1:{admin_port}",
             "--data-dir", str(tmp / "node")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(node)
        wait_port(http_port)
        api = f"127.0.0.1:{http_port}"
        layout = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/layout",
                                                   timeout=10).read())

        # In issue order: one keep-alive-free call after another, so each call's UUIDs come
        # after the previous call's (the node's calls may land on either shard: UUIDs of two
        # shards in one millisecond order by worker, so only each call's own order and the
        # total uniqueness are promised across calls; within a call they are one shard's).
        calls = []
        left = args.count
        while left > 0:
            n = min(100, left)
            calls.append([uuid.UUID(u) for u in post(api, "/uuids/batch", json.dumps({"count": n}))["uuids"]])
            left -= n
        issued = [u for c in calls for u in c]
        if len(set(issued)) != len(issued):
            fail("a UUID was issued twice")
        now_ms = time.time() * 1000
        for c in calls:
            if c != sorted(c):
                fail("a batch's UUIDs are not increasing by Python's uuid ordering")
            for u in c:
                if u.version != 7 or u.variant != uuid.RFC_4122:
                    fail(f"{u}: version {u.version}, variant {u.variant!r}")
                ms = u.int >> 80
                if abs(ms - now_ms) > 120_000:
                    fail(f"{u}: its time {ms} ms is not now ({now_ms:.0f})")
                # The bits after the version: worker ‖ sequence of an ID of the node's layout.
                ws = layout["worker_bits"] + layout["sequence_bits"]
                payload = (((u.int >> 64) & 0xFFF) << 62) | (u.int & ((1 << 62) - 1))
                worker = (payload >> (74 - ws)) >> layout["sequence_bits"]
                first, count = layout["workers"]["first"], layout["workers"]["count"]
                if not first <= worker < first + count:
                    fail(f"{u}: worker {worker} is not the node's ({first}..{first + count})")
        print(f"python uuid: {len(issued)} UUIDs, all version 7 / RFC 9562 variant, unique, "
              f"each batch increasing")

        # PostgreSQL's uuid type, its ORDER BY against Python's sort of the same values.
        data = tmp / "pg"
        data.mkdir()
        shutil.chown(tmp, "postgres", "postgres")
        shutil.chown(data, "postgres", "postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
        subprocess.run(as_pg + [str(bindir / "initdb"), "-D", str(data / "db"), "-A", "trust"],
                       check=True, capture_output=True)
        port = free_port()
        pg = subprocess.Popen(as_pg + [str(bindir / "postgres"), "-D", str(data / "db"), "-p", str(port),
                                       "-c", "listen_addresses=127.0.0.1", "-k", str(data),
                                       "-c", "fsync=off"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(pg)
        wait_port(port)
        psql = as_pg + [str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                        "-qAt", "-v", "ON_ERROR_STOP=1"]
        for _ in range(50):
            if subprocess.run(psql + ["-c", "SELECT 1"], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        shuffled = issued[:]
        random.shuffle(shuffled)
        values = ",".join(f"('{u}')" for u in shuffled)
        sql = f"CREATE TABLE t (u uuid PRIMARY KEY); INSERT INTO t VALUES {values}; SELECT u FROM t ORDER BY u;"
        out = subprocess.run(psql, input=sql, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            fail(f"psql: {out.stderr[-2000:]}")
        pg_order = [uuid.UUID(line) for line in out.stdout.split()]
        if len(pg_order) != len(issued):
            fail(f"PostgreSQL returned {len(pg_order)} rows, not {len(issued)}")
        if pg_order != sorted(issued):
            fail("PostgreSQL's uuid order differs from the UUIDs' 128-bit order")
        # Within each call, PostgreSQL's order is the issue order.
        position = {u: i for i, u in enumerate(pg_order)}
        for c in calls:
            if [position[u] for u in c] != sorted(position[u] for u in c):
                fail("PostgreSQL orders a batch's UUIDs other than they were issued")
        print(f"postgresql {bindir.parent.name}: {len(pg_order)} UUIDs in a uuid PRIMARY KEY column, "
              f"ORDER BY u equals their 128-bit order and each batch's issue order")
        print("uuids_check: OK")
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

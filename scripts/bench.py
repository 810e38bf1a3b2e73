#!/usr/bin/env python3
"""Side-by-side benchmark: idgen against the loopback limit, Redis INCRBY and PostgreSQL
nextval, plus the in-process generator against the uuid crate's v7. One run, one machine,
loopback only, every load bounded in time.

    scripts/bench [--seconds 5] [--out docs/bench] [--skip-build] [--quick] [--cores N]
    scripts/bench --cost-only | --compare OLD_IDGEN_BINARY | --tls-only | --http-only | --clients-only
    scripts/bench --uuids-only

Cost, not only speed: every server row carries the server's CPU time (user + system, from
/proc, the server process and its children) per request and per ID, sampled inside the load
generator's measured window, and its ratio to the best peer's; system calls per request come
from perf's syscall tracepoints on a short extra run. The workloads run twice: shared (server
and load generator on every CPU) and pinned (taskset: the server on CPU 0, the load generator
on the others). The efficiency targets are checked against this run's figures and printed
(not a pass/fail: the run's ratios are the result), and a model of throughput as cores grow
(against 25 and 100 Gb/s NICs) is computed from the pinned costs. `--cores N` runs the
shard-scaling rows (1, 2, 4 … N shards, each on CPUs of its own) where the machine has them,
and says which it could not run. The JSON records the git revision, rustc, the build profile
and the CPU.

Prints a table (each row with its ratio to the best peer and to the limit), the TLS rows beside
plaintext on one node (with the server's CPU time per request and per ID), TLS handshakes per
second and the memory of 10,000 idle TLS connections, each client (Rust, Go, Java, TypeScript)
against one node with its ratio to the Rust client, and writes
<out>/latest.json and <out>/chart.svg (throughput and latency percentiles per system).
Needs iperf3, wrk, redis-server and postgresql: run it through scripts/bench, which installs them
(scripts/deps bench) and then runs this file.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")).resolve()
procs = []


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, **kw):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, **kw)
    procs.append(p)
    return p


def stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_port(port, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def loopback_limit(seconds):
    port = free_port()
    # No probe connection: iperf3 would take it for a test client.
    server = start(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result = {}
    for _ in range(20):
        time.sleep(0.25)
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds),
                              "-J"], capture_output=True, text=True)
        result = json.loads(out.stdout or "{}")
        if "sum_received" in result.get("end", {}):
            break
    stop(server)
    if "sum_received" not in result.get("end", {}):
        raise SystemExit(f"iperf3 failed: {result.get('error', out.stderr)}")
    bps = result["end"]["sum_received"]["bits_per_second"]
    return {"system": "loopback limit (iperf3, 1 stream)", "workload": "bytes",
            "ids_per_sec": bps / 64, "bytes_per_sec": bps / 8}


def proc_cpu_ns(pid):
    """User + system CPU time, in ns, of `pid` and of every live descendant, by pid
    (/proc/<pid>/stat): PostgreSQL serves each connection from a child process."""
    tick = 1e9 / os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(d.name)] = int(fields[1])
        cpu[int(d.name)] = (int(fields[11]) + int(fields[12])) * tick
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in tree or p not in cpu:
            continue
        tree.add(p)
        todo += [c for c, pp in parents.items() if pp == p]
    return {p: cpu[p] for p in tree}


def cpu_between(before, after):
    """CPU time spent between two proc_cpu_ns snapshots (a process that appeared in between
    counts whole)."""
    return sum(ns - before.get(p, 0) for p, ns in after.items())


def measured(cmd, server_pid, warmup, seconds, timeout):
    """Runs a load generator and samples the server's CPU time inside its measured window
    (from 0.3 s after the warm-up to 0.3 s before the end): (completed process, CPU ns spent
    in the window, window length in s)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(warmup + 0.3)
    c0, t0 = proc_cpu_ns(server_pid), time.monotonic()
    time.sleep(max(seconds - 0.6, 0.2))
    c1, t1 = proc_cpu_ns(server_pid), time.monotonic()
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), cpu_between(c0, c1), t1 - t0


def add_cost(row, spent_ns, window_s):
    """The server's CPU time per request and per ID, from the CPU it spent in a window of the
    run and the rates the client measured."""
    reqs = row["requests_per_sec"] * window_s
    ids = row["ids_per_sec"] * window_s
    row["server_cpu_cores"] = spent_ns / 1e9 / window_s
    row["server_cpu_ns_per_request"] = spent_ns / reqs if reqs else None
    row["server_cpu_ns_per_id"] = spent_ns / ids if ids else None
    return row


# CPUs for the pinned mode: the server on the first, the load generator on the others.
PIN = {"server": None, "load": None}


def pinned(cmd, who):
    cpus = PIN[who]
    return ["taskset", "-c", cpus, *cmd] if cpus else cmd


def loadtest(args, seconds, label, workload, server_pid=None, threads=1):
    cmd = pinned([str(TARGET / "release" / "idgen-loadtest"), *args, "--duration", f"{seconds}s",
                  "--warmup", "1s", "--json", "--quiet", "--threads", str(threads)], "load")
    if server_pid is None:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
        spent = window = None
    else:
        out, spent, window = measured(cmd, server_pid, 1, seconds, seconds + 60)
    if out.returncode != 0:
        raise SystemExit(f"{label}: idgen-loadtest failed ({out.returncode}): {out.stderr[-2000:]}")
    r = json.loads(out.stdout)
    errors = sum(r.get("errors", {}).values()) if isinstance(r.get("errors"), dict) else r.get("errors")
    row = {"system": label, "workload": workload, "ids_per_sec": r["ids_per_sec"],
           "requests_per_sec": r["requests_per_sec"], "latency_us": r["latency_us"],
           "errors": errors}
    if spent is not None:
        add_cost(row, spent, window)
    return row


def syscalls(server_pid, args, seconds=2):
    """System calls of the server per request, counted by perf's syscall tracepoints on a
    short extra run (recv/send/epoll by name, and all of them)."""
    names = ["recvfrom", "sendto", "read", "write", "readv", "writev", "epoll_wait",
             "epoll_pwait", "futex", "sched_yield"]
    out_file = tempfile.mktemp(prefix="idgen-bench-perf-")
    events = ["-e", "raw_syscalls:sys_enter"]
    for n in names:
        events += ["-e", f"syscalls:sys_enter_{n}"]
    perf = subprocess.Popen(["perf", "stat", "-x,", *events, "-p", str(server_pid), "-o", out_file,
                             "--", "sleep", str(seconds + 2)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    cmd = pinned([str(TARGET / "release" / "idgen-loadtest"), *args, "--duration", f"{seconds}s",
                  "--json", "--quiet", "--threads", "1"], "load")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    _, err = perf.communicate(timeout=seconds + 30)
    if out.returncode != 0 or perf.returncode != 0:
        raise SystemExit(f"syscall count failed: {out.stderr[-1000:]} {err[-1000:]}")
    # The requests the server answered while perf counted: the whole load run (perf starts
    # before it and stops after it).
    requests = json.loads(out.stdout)["requests"]
    counts = {}
    for line in Path(out_file).read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit():
            counts[parts[2].split(":")[-1].replace("sys_enter_", "").replace("sys_enter", "all")] = int(parts[0])
    os.unlink(out_file)
    per = {k: v / requests for k, v in counts.items() if v}
    return {"requests": requests, "per_request": per,
            "reads_per_request": (counts.get("recvfrom", 0) + counts.get("read", 0) + counts.get("readv", 0)) / requests,
            "writes_per_request": (counts.get("sendto", 0) + counts.get("write", 0) + counts.get("writev", 0)) / requests,
            "all_per_request": counts.get("all", 0) / requests}


WORKLOADS = [
    ("big batches", ["--batch", "4096", "--pipeline", "8", "--connections", "2"]),
    ("1 ID/req, 50 conn × 128", ["--batch", "1", "--pipeline", "128", "--connections", "50"]),
    ("1 ID/req, 8 conn × 16", ["--batch", "1", "--pipeline", "16", "--connections", "8"]),
    ("1 request in flight", ["--batch", "1", "--pipeline", "1", "--connections", "1"]),
]
# The workloads whose system calls per request are counted (an extra short run each).
SYSCALL_WORKLOADS = ["1 ID/req, 50 conn × 128", "1 request in flight"]
# The workloads run a second time asking for version 7 UUIDs (GET_UUIDS, protocol version 4)
# instead of IDs, on the same node in the same run: "<workload>, UUIDs" (issue 30).
UUID_WORKLOADS = ["big batches", "1 ID/req, 50 conn × 128", "1 request in flight"]
UUIDS = ", UUIDs"


def uuid_runs(addr, seconds, label, server_pid, threads=1):
    """The UUID_WORKLOADS with --uuids against `addr`: each UUID counts as one ID."""
    return [loadtest(["--addr", addr, "--uuids", *args], seconds, label, name + UUIDS, server_pid,
                     threads)
            for name, args in WORKLOADS if name in UUID_WORKLOADS]


def start_idgen(shards, workers=64, binary=None, extra=()):
    """A node on the memory store, pinned to the server CPUs in the pinned mode: (process,
    protocol address, data directory)."""
    data = tempfile.mkdtemp(prefix="idgen-bench-")
    binary = binary or str(TARGET / "release" / "idgen")
    server = start(pinned([binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "off",
                           "--http-listen", "off", "--store", "memory", "--shards", str(shards),
                           "--workers-per-shard", str(workers), "--data-dir", data, *extra],
                          "server"),
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = server.stdout.readline()
    m = re.match(r"listening on (\S+)", line)
    if not m:
        raise SystemExit(f"idgen did not start: {line!r}")
    return server, m.group(1), data


def idgen_runs(seconds, shards, workers=64, only_ranges=False, binary=None, label=None,
               syscall_rows=None, threads=1):
    rows = []
    server, addr, data = start_idgen(shards, workers, binary)
    if label is None:
        label = f"idgen ({shards} shard{'s' if shards > 1 else ''})"
        if workers != 64:
            label = f"idgen ({shards} shard, {workers} worker IDs)"
    for name, args in ([] if only_ranges else WORKLOADS):
        rows.append(loadtest(["--addr", addr, *args], seconds, label, name, server.pid, threads))
        if syscall_rows is not None and name in SYSCALL_WORKLOADS:
            syscall_rows.append({"system": label, "workload": name,
                                 **syscalls(server.pid, ["--addr", addr, *args])})
    # Range answers (protocol version 2): the big-batch workload, IDs sent as runs.
    rows.append(loadtest(["--addr", addr, "--ranges", *WORKLOADS[0][1]], seconds, label,
                         "big batches, range answers", server.pid, threads))
    # The layout's limit for this worker range: 4,096 IDs per worker ID per millisecond.
    rows[-1]["range_limit_ids_per_sec"] = shards * workers * 4096 * 1000
    if not only_ranges:
        rows += uuid_runs(addr, seconds, label, server.pid, threads)
    stop(server)
    shutil.rmtree(data, ignore_errors=True)
    return rows


def start_bare():
    """The floor: the bench's bare responder (the same frames answered from a counter, on the
    I/O of one shard), pinned like a node: (process, address)."""
    server = start(pinned([str(TARGET / "release" / "idgen-bare-responder"), "127.0.0.1:0"], "server"),
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = server.stdout.readline()
    m = re.match(r"listening on (\S+)", line)
    if not m:
        raise SystemExit(f"idgen-bare-responder did not start: {line!r}")
    return server, m.group(1)


BARE = "bare responder (floor)"


def bare_runs(seconds):
    """The floor beneath every idgen row: the same workloads against the bare responder."""
    server, addr = start_bare()
    rows = [loadtest(["--addr", addr, *args], seconds, BARE, name, server.pid) for name, args in WORKLOADS]
    rows.append(loadtest(["--addr", addr, "--ranges", *WORKLOADS[0][1]], seconds, BARE,
                         "big batches, range answers", server.pid))
    rows += uuid_runs(addr, seconds, BARE, server.pid)
    stop(server)
    return rows


def print_uuids(rows):
    """Version 7 UUIDs beside plain IDs, per system and workload, from rows of one run: the
    rate of each, and the server's CPU per ID and per UUID."""
    by = {(r["system"], r["workload"]): r for r in rows}
    print("UUIDv7 beside plain IDs (same node, same run; GET_UUIDS vs GET_IDS)")
    print(f"{'system':<32} {'workload':<26} {'IDs/s':>14} {'UUIDs/s':>14} {'÷':>6} "
          f"{'ns/ID':>8} {'ns/UUID':>8} {'÷':>6} {'p50 µs ID/UUID':>15} {'p99 µs ID/UUID':>15}")
    for (system, workload), u in by.items():
        if not workload.endswith(UUIDS):
            continue
        i = by.get((system, workload[:-len(UUIDS)]))
        if i is None:
            continue
        ns_i, ns_u = i.get("server_cpu_ns_per_id"), u.get("server_cpu_ns_per_id")
        cost = f"{ns_i:>8.2f} {ns_u:>8.2f} {ns_u / ns_i:>6.2f}" if ns_i and ns_u else f"{'-':>8} {'-':>8} {'-':>6}"
        li, lu = i.get("latency_us", {}), u.get("latency_us", {})
        print(f"{system:<32} {workload[:-len(UUIDS)]:<26} {i['ids_per_sec']:>14,.0f} "
              f"{u['ids_per_sec']:>14,.0f} {u['ids_per_sec'] / i['ids_per_sec']:>6.2f} {cost} "
              f"{li.get('p50', 0):>7.1f}/{lu.get('p50', 0):<7.1f} {li.get('p99', 0):>7.1f}/{lu.get('p99', 0):<7.1f}")
    print("÷: UUIDs over IDs (rate; server CPU per UUID over per ID); ns/ID, ns/UUID: server CPU "
          "time (user + system, /proc) per ID or UUID handed out; the floor answers UUIDs from its "
          "counter with random bits 0")


# GET_IDS_WITH's options beside plain GET_IDS (protocol version 5, issue 35): one node with
# masking keys and idempotency keys on, each of these workloads plain and with each option.
OPTION_WORKLOADS = ["big batches", "1 ID/req, 50 conn × 128", "1 request in flight"]
OPTIONS = [(", after", ["--after-id", "1"]), (", idempotency key", ["--idempotency-keys"]),
           (", masked", ["--masked"])]
BENCH_MASK_KEYS = "1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"


def option_runs(seconds):
    """OPTION_WORKLOADS plain and with each of OPTIONS, on one node, in one run."""
    os.environ["IDGEN_MASK_KEYS"] = BENCH_MASK_KEYS
    try:
        server, addr, data = start_idgen(1, extra=("--idempotency-window", "10s",
                                                   "--idempotency-max-bytes", str(4 << 30)))
    finally:
        os.environ.pop("IDGEN_MASK_KEYS", None)
    label = "idgen (1 shard)"
    rows = []
    for name, args in WORKLOADS:
        if name not in OPTION_WORKLOADS:
            continue
        rows.append(loadtest(["--addr", addr, *args], seconds, label, name, server.pid))
        for suffix, flags in OPTIONS:
            rows.append(loadtest(["--addr", addr, *flags, *args], seconds, label, name + suffix,
                                 server.pid))
    stop(server)
    shutil.rmtree(data, ignore_errors=True)
    return rows


def print_options(rows):
    """Each option beside plain IDs: rate, server CPU per ID, latency."""
    by = {(r["system"], r["workload"]): r for r in rows}
    print("GET_IDS_WITH options beside plain GET_IDS (same node, same run)")
    print(f"{'workload':<26} {'option':<18} {'IDs/s':>14} {'÷':>6} {'ns/ID':>8} {'÷':>6} "
          f"{'p50 µs':>8} {'p99 µs':>8} {'errors':>7}")
    for (system, workload), plain in by.items():
        if any(workload.endswith(s) for s, _ in OPTIONS):
            continue
        for suffix, _ in [("", None), *OPTIONS]:
            r = by.get((system, workload + suffix))
            if r is None:
                continue
            ns, ns0 = r.get("server_cpu_ns_per_id"), plain.get("server_cpu_ns_per_id")
            cost = f"{ns:>8.1f} {ns / ns0:>6.2f}" if ns and ns0 else f"{'-':>8} {'-':>6}"
            lat = r.get("latency_us", {})
            print(f"{workload:<26} {suffix.lstrip(', ') or 'none':<18} {r['ids_per_sec']:>14,.0f} "
                  f"{r['ids_per_sec'] / plain['ids_per_sec']:>6.2f} {cost} "
                  f"{lat.get('p50', 0):>8.1f} {lat.get('p99', 0):>8.1f} {r.get('errors', 0) or 0:>7}")
    print("÷: over the plain row of the workload; ns/ID: server CPU time (user + system, /proc) "
          "per ID; after = 1 (always already passed: the option's own cost); a new idempotency "
          "key per request (window 10 s); masked: FF1 per ID on the node")


# The second write pattern: each connection writes a whole window of --pipeline requests in one
# write and the next once all are answered (redis-benchmark -P, pgbench's pipelines), where the
# load tester's own pattern refills the window as answers come. One request in flight is the
# same in both.
WINDOW = " (window writes)"


def window_runs(seconds):
    """idgen (1 shard), the floor and Redis again, with window writes, for the pipelined
    workloads: the cost ratios under both client write patterns."""
    rows = []
    pipelined = [(name, args) for name, args in WORKLOADS if "--pipeline" in args and args[args.index("--pipeline") + 1] != "1"]
    server, addr, data = start_idgen(1)
    for name, args in pipelined:
        rows.append(loadtest(["--addr", addr, "--write-pattern", "window", *args], seconds,
                             "idgen (1 shard)", name + WINDOW, server.pid))
    stop(server)
    shutil.rmtree(data, ignore_errors=True)
    server, addr = start_bare()
    for name, args in pipelined:
        rows.append(loadtest(["--addr", addr, "--write-pattern", "window", *args], seconds, BARE,
                             name + WINDOW, server.pid))
    stop(server)
    port = free_port()
    server = start(pinned(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no"], "server"), stdout=subprocess.DEVNULL)
    wait_port(port)
    for name, args in pipelined:
        rows.append(loadtest(["--target", "redis", "--addr", f"127.0.0.1:{port}", "--write-pattern",
                              "window", *args], seconds, "Redis INCRBY", name + WINDOW, server.pid))
    stop(server)
    return rows


def wrk(url, seconds, script=None, connections=32):
    """wrk -t1 -c32 against `url` (one thread: the other core stays the server's)."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script:
        cmd += ["-s", script]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=seconds + 60)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
    if out.returncode != 0 or not m:
        raise SystemExit(f"wrk {url} failed: {out.stdout[-1000:]} {out.stderr[-1000:]}")
    lat = {}
    for pct, key in (("50", "p50"), ("90", "p90"), ("99", "p99")):
        mm = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out.stdout, re.M)
        if mm:
            lat[key] = float(mm.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[mm.group(2)]
    errors = 0
    mm = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out.stdout)
    if mm:
        errors += int(mm.group(1))
    mm = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out.stdout)
    if mm:
        errors += sum(int(x) for x in mm.groups())
    return float(m.group(1)), lat, errors


def scrape(admin):
    """The admin port's /metrics as {series: value}."""
    import urllib.request
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


def http_runs(seconds, batch=65536):
    """The HTTP ID API against the cheapest endpoint of the same listener, then lease renewals
    while a stream of big HTTP batches runs (renewals every 333 ms: --lease-ttl 1s)."""
    data = tempfile.mkdtemp(prefix="idgen-bench-")
    http_port, admin_port = free_port(), free_port()
    server = start([str(TARGET / "release" / "idgen"), "serve", "--listen", "127.0.0.1:0",
                    "--http-listen", f"127.0.0.1:{http_port}",
                    "--admin-listen", f"127.0.0.1:{admin_port}", "--store", "memory",
                    "--shards", "2", "--workers-per-shard", "64", "--lease-ttl", "1s",
                    "--data-dir", data],
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if not re.match(r"listening on", server.stdout.readline()):
        raise SystemExit("idgen did not start")
    wait_port(http_port)
    api, admin = f"127.0.0.1:{http_port}", f"127.0.0.1:{admin_port}"
    scripts = Path(data) / "wrk"
    scripts.mkdir()
    post = scripts / "post.lua"
    post.write_text('wrk.method = "POST"\n')
    big = scripts / "batch.lua"
    big.write_text('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                   f'wrk.body = \'{{"count": {batch}}}\'\n')
    batch100 = scripts / "batch100.lua"
    batch100.write_text('wrk.method = "POST"\nwrk.body = \'{"count": 100}\'\n')
    rows = []
    for name, url, script, per_request in [
            ("GET /health/live (same listener)", f"http://{api}/health/live", None, 0),
            ("POST /ids", f"http://{api}/ids", post, 1),
            ("POST /ids/batch 100", f"http://{api}/ids/batch", batch100, 100),
            # Version 7 UUIDs made from the same IDs (random bits, text forms): their cost
            # beside the plain IDs'.
            ("POST /uuids", f"http://{api}/uuids", post, 1),
            ("POST /uuids/batch 100", f"http://{api}/uuids/batch", batch100, 100),
            ("GET /health/live (admin port)", f"http://{admin}/health/live", None, 0)]:
        before = scrape(admin)
        rps, lat, errors = wrk(url, seconds, str(script) if script else None)
        after = scrape(admin)
        by_shard = [after.get(f'idgen_http_requests_total{{shard="{i}"}}', 0)
                    - before.get(f'idgen_http_requests_total{{shard="{i}"}}', 0) for i in range(2)]
        rows.append({"system": "idgen HTTP (2 shards)", "workload": name,
                     "requests_per_sec": rps, "ids_per_sec": rps * per_request,
                     "latency_us": lat, "errors": errors, "http_requests_by_shard": by_shard})

    def renewal_sum_count(m):
        return tuple(sum(m.get(f'idgen_lease_renewal_duration_seconds_{k}{{result="{r}"}}', 0)
                         for r in ("ok", "failed")) for k in ("sum", "count"))

    def renewals(during):
        """Renewals while `during` runs, sampled every 50 ms: the durations of the renewals
        since the last sample (from the renewal-duration histogram's sum and count; at most one
        renewal per sample), and the lease time left (TTL 1 s renewed every 333 ms: a renewal
        that starts late shows as less than 667 ms left)."""
        m0 = scrape(admin)
        proc = during()
        samples, left = [], []
        prev = renewal_sum_count(m0)
        deadline = time.time() + seconds
        while time.time() < deadline:
            m = scrape(admin)
            cur = renewal_sum_count(m)
            if cur[1] > prev[1]:
                samples.append((cur[0] - prev[0]) / (cur[1] - prev[1]) * 1e6)
            prev = cur
            left.append(m.get("idgen_lease_time_remaining_seconds", 0))
            time.sleep(0.05)
        out = ""
        if proc is not None:
            out = proc.communicate(timeout=60)[0]
        m1 = scrape(admin)
        n = sum(m1.get(f'idgen_lease_renewals_total{{result="{r}"}}', 0)
                - m0.get(f'idgen_lease_renewals_total{{result="{r}"}}', 0) for r in ("ok", "failed"))
        failed = (m1.get('idgen_lease_renewals_total{result="failed"}', 0)
                  - m0.get('idgen_lease_renewals_total{result="failed"}', 0))
        rps = re.search(r"Requests/sec:\s+([\d.]+)", out or "")
        return {"renewals": n, "failed": failed,
                # The renewals' durations, per sample: their mean and maximum over the run.
                "mean_us": sum(samples) / len(samples) if samples else None,
                "max_sampled_us": max(samples, default=None),
                "min_lease_left_s": min(left, default=None),
                "load_requests_per_sec": float(rps.group(1)) if rps else None}

    idle = renewals(lambda: None)
    loaded = renewals(lambda: subprocess.Popen(
        ["wrk", "-t1", "-c8", f"-d{seconds}s", "-s", str(big), f"http://{api}/ids/batch"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    stop(server)
    shutil.rmtree(data, ignore_errors=True)
    return rows, {"batch": batch, "idle": idle, "under_http_batches": loaded}


def rss_kib_of(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def idle_connections_rss(count=10_000):
    """Server resident memory with `count` idle connections that completed the handshake."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, count + 1024)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # children inherit it
    data = tempfile.mkdtemp(prefix="idgen-bench-")
    server = start([str(TARGET / "release" / "idgen"), "serve", "--listen", "127.0.0.1:0",
                    "--admin-listen", "off", "--store", "memory", "--shards", "2",
                    "--data-dir", data],
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    host, port = re.match(r"listening on (\S+)", server.stdout.readline()).group(1).rsplit(":", 1)
    rss_kib = lambda: rss_kib_of(server.pid)
    before = rss_kib()
    hello = protocol_vector("hello_v1")
    socks = []
    for _ in range(min(count, want - 64)):
        s = socket.create_connection((host, int(port)))
        s.sendall(hello)
        socks.append(s)
    for s in socks:
        s.settimeout(5)
        s.recv(64)  # HELLO_OK
    time.sleep(1)
    after = rss_kib()
    for s in socks:
        s.close()
    stop(server)
    shutil.rmtree(data, ignore_errors=True)
    return {"connections": len(socks), "rss_mib_before": before / 1024, "rss_mib": after / 1024}


def test_certs():
    """A throwaway CA and a server certificate for localhost (the test kit's idgen-test-certs)."""
    d = Path(tempfile.mkdtemp(prefix="idgen-bench-certs-"))
    subprocess.run([str(TARGET / "release" / "idgen-test-certs"), str(d)], check=True,
                   capture_output=True)
    return d


def cpu_ns(pid):
    """User + system CPU time of a process and its children so far, in ns."""
    return sum(proc_cpu_ns(pid).values())


def start_tls_node(certs, extra=()):
    """A node (2 shards, memory store) serving the ID protocol plaintext and over TLS; returns
    (process, plaintext address, TLS address)."""
    data = tempfile.mkdtemp(prefix="idgen-bench-")
    server = start([str(TARGET / "release" / "idgen"), "serve", "--listen", "127.0.0.1:0",
                    "--tls-listen", "127.0.0.1:0", "--tls-cert", str(certs / "server.crt"),
                    "--tls-key", str(certs / "server.key"), "--admin-listen", "off",
                    "--http-listen", "off", "--store", "memory", "--shards", "2",
                    "--workers-per-shard", "64", "--data-dir", data, *extra],
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    plain = tls = None
    while plain is None or tls is None:
        line = server.stdout.readline()
        if not line:
            raise SystemExit("idgen with TLS did not start")
        if m := re.match(r"listening with TLS on (\S+)", line):
            tls = m.group(1)
        elif m := re.match(r"listening on (\S+)", line):
            plain = m.group(1)
    return server, plain, tls


def tls_runs(seconds, certs):
    """Plaintext and TLS side by side on one node: each workload on the plaintext address,
    then the same on the TLS address, with the server's CPU time per request and per ID."""
    server, plain, tls = start_tls_node(certs)
    tls_args = ["--tls-ca", str(certs / "ca.crt"), "--tls-server-name", "localhost"]
    rows = []
    for name, args in WORKLOADS:
        for transport, addr, extra in (("plaintext", plain, []), ("TLS", tls, tls_args)):
            r = loadtest(["--addr", addr, *extra, *args], seconds, f"idgen {transport}", name,
                         server.pid)
            r["transport"] = transport
            rows.append(r)
    stop(server)
    return rows


def handshake_worker(addr, ca, seconds, out):
    import ssl
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["idgen/1"])
    host, port = addr.rsplit(":", 1)
    n = 0
    end = time.time() + seconds
    while time.time() < end:
        with socket.create_connection((host, int(port))) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost"):
                n += 1
    out.put(n)


def handshakes(seconds, certs, workers=2):
    """Full TLS handshakes per second against one node (new connections, no resumption), and
    the server's CPU time per handshake."""
    import multiprocessing
    server, _, tls = start_tls_node(certs)
    q = multiprocessing.Queue()
    before = cpu_ns(server.pid)
    ps = [multiprocessing.Process(target=handshake_worker,
                                  args=(tls, str(certs / "ca.crt"), seconds, q))
          for _ in range(workers)]
    for p in ps:
        p.start()
    total = sum(q.get(timeout=seconds + 30) for _ in ps)
    for p in ps:
        p.join(10)
    spent = cpu_ns(server.pid) - before
    stop(server)
    return {"handshakes_per_sec": total / seconds, "handshakes": total,
            "server_cpu_us_per_handshake": spent / max(total, 1) / 1e3}


def idle_tls_rss(certs, count=10_000):
    """Server resident memory with `count` idle TLS connections that completed the HELLO."""
    import resource
    import ssl
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, count + 1024)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # children inherit it
    server, _, tls = start_tls_node(certs)
    host, port = tls.rsplit(":", 1)
    rss_kib = lambda: rss_kib_of(server.pid)
    before = rss_kib()
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    ctx.set_alpn_protocols(["idgen/1"])
    hello = protocol_vector("hello_v1")
    socks = []
    started = time.time()
    for _ in range(min(count, want - 64)):
        s = ctx.wrap_socket(socket.create_connection((host, int(port))), server_hostname="localhost")
        s.sendall(hello)
        socks.append(s)
    for s in socks:
        s.settimeout(5)
        s.recv(64)  # HELLO_OK
    opened = time.time() - started
    time.sleep(1)
    after = rss_kib()
    for s in socks:
        s.close()
    stop(server)
    return {"connections": len(socks), "rss_mib_before": before / 1024, "rss_mib": after / 1024,
            "seconds_to_open": opened}


def print_tls(rows, hs, idle):
    print(f"{'transport':<10} {'workload':<26} {'IDs/s':>14} {'req/s':>12} {'p50 µs':>8} {'p99 µs':>8} "
          f"{'CPU ns/req':>10} {'CPU ns/ID':>9} {'× plaintext':>11}")
    plain = {r["workload"]: r for r in rows if r["transport"] == "plaintext"}
    for r in rows:
        base = plain[r["workload"]]
        # One ID per request compares requests/s, batches compare IDs/s.
        key = "ids_per_sec" if r["workload"] == "big batches" else "requests_per_sec"
        r["ratio_to_plaintext"] = r[key] / base[key] if base[key] else None
        lat = r.get("latency_us", {})
        print(f"{r['transport']:<10} {r['workload']:<26} {r['ids_per_sec']:>14,.0f} "
              f"{r['requests_per_sec']:>12,.0f} {lat.get('p50', 0):>8.1f} {lat.get('p99', 0):>8.1f} "
              f"{r['server_cpu_ns_per_request']:>10,.0f} {r['server_cpu_ns_per_id']:>9.2f} "
              f"{(r['ratio_to_plaintext'] or 0):>11.2f}")
    print(f"TLS handshakes: {hs['handshakes_per_sec']:,.0f}/s (2 client processes), "
          f"server CPU {hs['server_cpu_us_per_handshake']:.0f} µs per handshake")
    print(f"idle TLS connections: {idle['connections']} open in {idle['seconds_to_open']:.1f} s, "
          f"server RSS {idle['rss_mib']:.1f} MiB (idle server {idle['rss_mib_before']:.1f} MiB)")


CLIENT_WORKLOADS = [
    ("big batches", ["--batch", "4096", "--pipeline", "8", "--connections", "2"]),
    ("1 ID/request, pipelined", ["--batch", "1", "--pipeline", "32", "--connections", "32"]),
]


def client_benches():
    """Each client's bench program, built: (name, command prefix). They take the same flags
    and print one JSON line."""
    work = Path(tempfile.mkdtemp(prefix="idgen-bench-clients-"))
    subprocess.run(["cargo", "build", "--release", "-p", "idgen-client", "--example", "bench"],
                   cwd=ROOT, check=True, capture_output=True)
    benches = [("Rust", [str(TARGET / "release" / "examples" / "bench")])]
    go_env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOTOOLCHAIN": "local"}
    # Each client on one core, as the Rust bench's current-thread runtime and Node's event
    # loop are: with two, Go's scheduler fights the server's two shards for this machine's
    # two cores (82 M against 171 M IDs/s for big batches, measured in one run).
    subprocess.run(["go", "build", "-o", str(work / "idgen-bench-go"), "./cmd/idgen-bench"],
                   cwd=ROOT / "clients" / "go", env=go_env, check=True, capture_output=True)
    benches.append(("Go", ["env", "GOMAXPROCS=1", str(work / "idgen-bench-go")]))
    java = ROOT / "clients" / "java" / "src"
    java_src = sorted(str(p) for d in ("main", "bench") for p in (java / d).rglob("*.java"))
    subprocess.run(["javac", "-d", str(work / "java"), *java_src], check=True, capture_output=True)
    benches.append(("Java", ["java", "-cp", str(work / "java"), "dev.idgen.client.bench.Bench"]))
    ts = ROOT / "clients" / "typescript"
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=ts, check=True, capture_output=True)
    subprocess.run(["npm", "run", "build"], cwd=ts, check=True, capture_output=True)
    benches.append(("TypeScript", ["node", str(ts / "dist" / "bench.js")]))
    return benches, work


def client_runs(seconds):
    """Every client against one node (2 shards, 64 worker IDs each, memory store), the same
    workloads one client after the other, with the ratio of each to the Rust client."""
    benches, work = client_benches()
    data = tempfile.mkdtemp(prefix="idgen-bench-")
    server = start([str(TARGET / "release" / "idgen"), "serve", "--listen", "127.0.0.1:0",
                    "--admin-listen", "off", "--http-listen", "off", "--store", "memory",
                    "--shards", "2", "--workers-per-shard", "64", "--data-dir", data],
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    addr = re.match(r"listening on (\S+)", server.stdout.readline()).group(1)
    rows = []
    for workload, args in CLIENT_WORKLOADS:
        for name, cmd in benches:
            out = subprocess.run([*cmd, "--addr", addr, *args, "--seconds", str(seconds)],
                                 capture_output=True, text=True, timeout=seconds + 60)
            if out.returncode != 0:
                # One client failing does not lose the rest of the run: its row says why.
                log(f"{name} client bench failed: {out.stderr[-2000:]}")
                rows.append({"client": name, "workload": workload, "ids_per_sec": 0,
                             "requests_per_sec": 0, "errors": None,
                             "failed": out.stderr.strip()[-500:]})
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append({"client": name, "workload": workload, "ids_per_sec": r["ids_per_sec"],
                         "requests_per_sec": r["requests_per_sec"], "errors": r.get("errors", 0)})
    stop(server)
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        rust = next(x for x in rows if x["client"] == "Rust" and x["workload"] == r["workload"])
        r["ratio_to_rust"] = r["ids_per_sec"] / rust["ids_per_sec"] if rust["ids_per_sec"] else None
    return rows


def print_clients(rows):
    print(f"{'client':<12} {'workload':<26} {'IDs/s':>14} {'req/s':>12} {'errors':>7} {'× Rust':>7}")
    for r in rows:
        if r.get("failed"):
            print(f"{r['client']:<12} {r['workload']:<26} FAILED: {r['failed'].splitlines()[-1]}")
            continue
        print(f"{r['client']:<12} {r['workload']:<26} {r['ids_per_sec']:>14,.0f} "
              f"{r['requests_per_sec']:>12,.0f} {r['errors']:>7} {(r['ratio_to_rust'] or 0):>7.2f}")


def protocol_vector(name):
    """The bytes of one request vector of protocol/tests/vectors.json (the spec's own)."""
    with open(ROOT / "protocol" / "tests" / "vectors.json") as f:
        for v in json.load(f):
            if v["name"] == name:
                return bytes.fromhex(v["hex"])
    raise SystemExit(f"scripts/bench: no vector {name!r} in protocol/tests/vectors.json")


def redis_runs(seconds, syscall_rows=None):
    port = free_port()
    server = start(pinned(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no"], "server"), stdout=subprocess.DEVNULL)
    wait_port(port)
    rows = []
    for name, args in WORKLOADS:
        args = ["--target", "redis", "--addr", f"127.0.0.1:{port}", *args]
        rows.append(loadtest(args, seconds, "Redis INCRBY", name, server.pid))
        if syscall_rows is not None and name in SYSCALL_WORKLOADS:
            syscall_rows.append({"system": "Redis INCRBY", "workload": name,
                                 **syscalls(server.pid, args)})
    stop(server)
    return rows


def pg_bin():
    dirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not dirs:
        raise SystemExit("PostgreSQL binaries not found under /usr/lib/postgresql")
    return dirs[-1]


def postgres_runs(seconds):
    """nextval() through pgbench: batches as nextval over generate_series, per transaction."""
    bindir = pg_bin()
    data = Path(tempfile.mkdtemp(prefix="idgen-bench-pg-"))
    shutil.chown(data, "postgres", "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(as_pg + [str(bindir / "initdb"), "-D", str(data / "db"), "-A", "trust"],
                   check=True, capture_output=True)
    port = free_port()
    server = start(pinned(as_pg + [str(bindir / "postgres"), "-D", str(data / "db"), "-p", str(port),
                            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                            "-c", "synchronous_commit=off", "-k", str(data), "-c", "max_connections=100"], "server"),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    psql = as_pg + [str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-q"]
    for _ in range(50):
        if subprocess.run(psql + ["-c", "CREATE SEQUENCE IF NOT EXISTS s"], capture_output=True).returncode == 0:
            break
        time.sleep(0.2)
    rows = []
    # The same shapes as WORKLOADS: (name, IDs per statement, connections, statements in
    # flight per connection). Pipelined statements are sent with pgbench's \\startpipeline
    # (PostgreSQL 14+): one transaction of `depth` statements, sent without waiting.
    shapes = [("big batches", 4096, 2, 8), ("1 ID/req, 50 conn × 128", 1, 50, 128),
              ("1 ID/req, 8 conn × 16", 1, 8, 16), ("1 request in flight", 1, 1, 1)]
    postmaster = server.pid
    for i, (name, batch, clients, depth) in enumerate(shapes):
        script = data / f"w{i}.sql"
        stmt = ("SELECT nextval('s') FROM generate_series(1, %d);" % batch if batch > 1
                else "SELECT nextval('s');")
        script.write_text("\\startpipeline\n" + (stmt + "\n") * depth + "\\endpipeline\n"
                          if depth > 1 else stmt + "\n")
        shutil.chown(script, "postgres", "postgres")
        logdir = data / f"log{i}"
        logdir.mkdir()
        shutil.chown(logdir, "postgres", "postgres")
        cmd = pinned(as_pg + [str(bindir / "pgbench"), "-n", "-M", "prepared", "-h", "127.0.0.1",
                              "-p", str(port), "-U", "postgres", "-c", str(clients), "-j", "1",
                              "-T", str(seconds + 1), "-f", str(script), "-l",
                              "--log-prefix", str(logdir / "tx"), "postgres"], "load")
        # pgbench has no warm-up: its first second (connecting) is left out of the CPU window.
        out, spent, window = measured(cmd, postmaster, 1, seconds, seconds + 60)
        m = re.search(r"tps = ([\d.]+)", out.stdout)
        if out.returncode != 0 or not m:
            raise SystemExit(f"pgbench failed: {out.stdout[-1000:]} {out.stderr[-1000:]}")
        tps = float(m.group(1))
        lat = []
        for f in logdir.iterdir():
            for line in f.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3:
                    lat.append(int(parts[2]))
        lat.sort()
        pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0)
        row = {"system": "PostgreSQL nextval (pgbench)", "workload": name,
               "ids_per_sec": tps * depth * batch, "requests_per_sec": tps * depth,
               # pgbench times transactions: with a pipeline, all `depth` statements of one.
               "latency_us": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
                              "p999": pct(0.999), "max": lat[-1] if lat else 0},
               "latency_of": "transaction" if depth > 1 else "statement"}
        rows.append(add_cost(row, spent, window))
    stop(server)
    shutil.rmtree(data, ignore_errors=True)
    return rows


def in_process(quick):
    """Criterion: one ID (the cached clock, and the system clock read every call) and uuid v7;
    the clock reads; batch fill and the bare loop."""
    args = ["cargo", "bench", "-p", "idgen-benches", "--bench", "generator", "--",
            "--warm-up-time", "1", "--measurement-time", "2" if quick else "4"]
    subprocess.run(args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def ns(name):
        est = TARGET / "criterion" / "generator" / name / "new" / "estimates.json"
        return json.loads(est.read_text())["median"]["point_estimate"]
    return {
        "next_id_ns": ns("next_id"),
        "next_id_system_clock_ns": ns("next_id_system_clock"),
        "uuid_v7_ns": ns("uuid_v7"),
        "wall_clock_read_ns": ns("wall_clock_read"),
        "cached_clock_read_ns": ns("cached_clock_read"),
        "batch_4096_ns": ns("batch_4096_workers_1024"),
        "bare_loop_4096_ns": ns("batch_4096_bare_shift_or_loop"),
    }


def svg_chart(rows, path):
    """Two panels: IDs/s per system and workload (log scale), and latency percentiles."""
    import math
    workloads = [w for w, _ in WORKLOADS] + ["big batches, range answers"]
    systems = []
    for r in rows:
        if r["system"] not in systems and r["workload"] in workloads:
            systems.append(r["system"])
    colors = ["#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd", "#8c564b"]
    limit = next((r for r in rows if r["workload"] == "bytes"), None)
    W, H, pad = 980, 730, 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{W/2}" y="24" text-anchor="middle" font-size="16">IDs per second (log scale), one run on this machine</text>']
    top, bottom = 40, 330
    vals = [r["ids_per_sec"] for r in rows if r["ids_per_sec"] > 0]
    lo, hi = 10 ** math.floor(math.log10(min(vals))), 10 ** math.ceil(math.log10(max(vals)))
    y = lambda v: bottom - (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (bottom - top)
    e = lo
    while e <= hi:
        out.append(f'<line x1="{pad}" x2="{W-20}" y1="{y(e):.1f}" y2="{y(e):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{pad-6}" y="{y(e)+4:.1f}" text-anchor="end">{e:.0e}</text>')
        e *= 10
    gw = (W - pad - 20) / len(workloads)
    bw = gw * 0.8 / max(1, len(systems))
    for wi, w in enumerate(workloads):
        x0 = pad + wi * gw + gw * 0.1
        out.append(f'<text x="{pad + wi*gw + gw/2:.1f}" y="{bottom+18}" text-anchor="middle">{w}</text>')
        for si, s in enumerate(systems):
            r = next((r for r in rows if r["system"] == s and r["workload"] == w), None)
            if not r:
                continue
            x = x0 + si * bw
            out.append(f'<rect x="{x:.1f}" y="{y(r["ids_per_sec"]):.1f}" width="{bw-2:.1f}" height="{bottom-y(r["ids_per_sec"]):.1f}" fill="{colors[si % len(colors)]}"/>')
    if limit:
        ly = y(limit["ids_per_sec"])
        out.append(f'<line x1="{pad}" x2="{W-20}" y1="{ly:.1f}" y2="{ly:.1f}" stroke="black" stroke-dasharray="6,4"/>')
        out.append(f'<text x="{pad+4}" y="{ly-5:.1f}" style="paint-order:stroke" stroke="white" stroke-width="3">loopback limit (8-byte IDs)</text>')
    lx, lrow = pad, 0
    for si, s in enumerate(systems):
        width = 24 + 7 * len(s)
        if lx + width > W - 20:
            lx, lrow = pad, lrow + 1
        ly0 = bottom + 30 + 18 * lrow
        out.append(f'<rect x="{lx}" y="{ly0}" width="12" height="12" fill="{colors[si % len(colors)]}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly0 + 11}">{s}</text>')
        lx += width
    # Latency panel: one request in flight, p50/p90/p99/p99.9 per system.
    ltop, lbottom = 440, 690
    out.append(f'<text x="{W/2}" y="{ltop-14}" text-anchor="middle" font-size="16">Latency, one request in flight (µs, log scale)</text>')
    lat_rows = [r for r in rows if r["workload"] == "1 request in flight" and "latency_us" in r]
    pcts = ["p50", "p90", "p99", "p999"]
    lvals = [r["latency_us"][p] for r in lat_rows for p in pcts if r["latency_us"].get(p)]
    if lvals:
        llo = 10 ** math.floor(math.log10(max(1, min(lvals))))
        lhi = 10 ** math.ceil(math.log10(max(lvals) * 1.01))
        ly = lambda v: lbottom - (math.log10(max(v, llo)) - math.log10(llo)) / (math.log10(lhi) - math.log10(llo)) * (lbottom - ltop)
        e = llo
        while e <= lhi:
            out.append(f'<line x1="{pad}" x2="{W-20}" y1="{ly(e):.1f}" y2="{ly(e):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{pad-6}" y="{ly(e)+4:.1f}" text-anchor="end">{e:g}</text>')
            e *= 10
        gw = (W - pad - 20) / len(pcts)
        bw = gw * 0.8 / max(1, len(lat_rows))
        for pi, p in enumerate(pcts):
            out.append(f'<text x="{pad + pi*gw + gw/2:.1f}" y="{lbottom+18}" text-anchor="middle">{p}</text>')
            for ri, r in enumerate(lat_rows):
                v = r["latency_us"].get(p) or 0
                x = pad + pi * gw + gw * 0.1 + ri * bw
                color = colors[systems.index(r["system"]) % len(colors)] if r["system"] in systems else "#999"
                out.append(f'<rect x="{x:.1f}" y="{ly(v):.1f}" width="{bw-2:.1f}" height="{lbottom-ly(v):.1f}" fill="{color}"/>')
    out.append("</svg>")
    path.write_text("\n".join(out))


def print_http(http_rows, renewal):
    print(f"{'HTTP ID API (wrk -t1 -c32)':<40} {'req/s':>10} {'IDs/s':>12} {'p50 µs':>8} {'p99 µs':>8} {'errors':>7}  requests by shard")
    cheapest = next(r for r in http_rows if r["workload"] == "GET /health/live (same listener)")
    for r in http_rows:
        lat = r["latency_us"]
        r["ratio_to_same_listener_live"] = r["requests_per_sec"] / cheapest["requests_per_sec"]
        print(f"{r['workload']:<40} {r['requests_per_sec']:>10,.0f} {r['ids_per_sec']:>12,.0f} "
              f"{lat.get('p50', 0):>8.1f} {lat.get('p99', 0):>8.1f} {r['errors']:>7}  "
              f"{[int(x) for x in r['http_requests_by_shard']]}  ×live {r['ratio_to_same_listener_live']:.2f}")
    for k in ("idle", "under_http_batches"):
        v = renewal[k]
        mean = f"{v['mean_us']:.0f}" if v["mean_us"] is not None else "?"
        print(f"lease renewals {k.replace('_', ' ')}: {int(v['renewals'])} ({int(v['failed'])} failed), "
              f"mean {mean} µs, max sampled {v['max_sampled_us'] or 0:.0f} µs, "
              f"least lease time left {v['min_lease_left_s'] or 0:.3f} s"
              + (f", load {v['load_requests_per_sec']:,.0f} req/s × {renewal['batch']} IDs"
                 if v["load_requests_per_sec"] else ""))


# Sizes on the wire (protocol/tests/vectors.json): a GET_IDS request is 9 bytes, an IDS answer
# 9 + 8 × count bytes. TCP/IPv4 over Ethernet with full 1,500-byte frames carries 1,448 bytes of
# payload in 1,538 bytes on the wire (preamble, header, FCS, gap): pipelined answers fill them.
WIRE_OVERHEAD = 1538 / 1448
NICS = [("25 Gb/s", 25e9), ("100 Gb/s", 100e9)]
MODEL_CORES = [1, 2, 4, 8, 16, 32, 64]


def scaling_model(cost):
    """Throughput as cores grow, from the CPU cost of one request and of one ID measured on one
    shard, against what the NICs can carry. Assumes shards scale linearly (they share nothing
    on the request path) and that the cost per request stays what loopback measured (it counts
    the kernel's loopback work on both ends of each send; a NIC moves part of that off the
    CPU)."""
    per_req, per_id = cost["ns_per_request"], cost["ns_per_id"]
    nic = {name: bps / 8 for name, bps in NICS}
    rows = []
    for cores in MODEL_CORES:
        r = {"cores": cores,
             "requests_per_sec_cpu": cores * 1e9 / per_req,
             "ids_per_sec_cpu": cores * 1e9 / per_id}
        for name, bytes_per_sec in nic.items():
            r[f"requests_per_sec_{name}"] = min(r["requests_per_sec_cpu"],
                                                bytes_per_sec / (17 * WIRE_OVERHEAD))
            r[f"ids_per_sec_{name}"] = min(r["ids_per_sec_cpu"],
                                           bytes_per_sec / ((8 + 9 / 4096) * WIRE_OVERHEAD))
        rows.append(r)
    # Where each NIC becomes the bound.
    knees = {}
    for name, bytes_per_sec in nic.items():
        knees[f"cores_to_fill_{name}_with_1_id_requests"] = bytes_per_sec / (17 * WIRE_OVERHEAD) / (1e9 / per_req)
        knees[f"cores_to_fill_{name}_with_batches"] = bytes_per_sec / ((8 + 9 / 4096) * WIRE_OVERHEAD) / (1e9 / per_id)
    return {"from": cost, "rows": rows, **knees}


def print_model(model):
    f = model["from"]
    print(f"scaling model from one pinned shard: {f['ns_per_request']:.0f} ns of server CPU per "
          f"one-ID request ({f['request_workload']}), {f['ns_per_id']:.2f} ns per ID ({f['id_workload']})")
    head = f"{'cores':>5} {'req/s (CPU)':>14} " + " ".join(f"{'req/s @' + n:>16}" for n, _ in NICS) + \
        f" {'IDs/s (CPU)':>16} " + " ".join(f"{'IDs/s @' + n:>17}" for n, _ in NICS)
    print(head)
    for r in model["rows"]:
        print(f"{r['cores']:>5} {r['requests_per_sec_cpu']:>14,.0f} "
              + " ".join(f"{r[f'requests_per_sec_{n}']:>16,.0f}" for n, _ in NICS)
              + f" {r['ids_per_sec_cpu']:>16,.0f} "
              + " ".join(f"{r[f'ids_per_sec_{n}']:>17,.0f}" for n, _ in NICS))
    for n, _ in NICS:
        print(f"{n}: filled by one-ID requests at {model[f'cores_to_fill_{n}_with_1_id_requests']:.1f} cores, "
              f"by 4,096-ID batches at {model[f'cores_to_fill_{n}_with_batches']:.1f} cores")


def best_peer_costs(rows):
    """The lowest server CPU per request (and per ID) of the peers, by workload."""
    best = {}
    for r in rows:
        if (r["system"].startswith(("idgen", BARE)) or r.get("server_cpu_ns_per_request") is None):
            continue
        b = best.setdefault(r["workload"], {"ns_per_request": None, "ns_per_id": None})
        for key, col in (("ns_per_request", "server_cpu_ns_per_request"), ("ns_per_id", "server_cpu_ns_per_id")):
            if b[key] is None or r[col] < b[key]:
                b[key] = r[col]
                b[key.replace("ns_", "system_")] = r["system"]
    return best


def floor_costs(rows):
    """The bare responder's server CPU per request and per ID, by workload."""
    return {r["workload"]: r for r in rows
            if r["system"].startswith(BARE) and r.get("server_cpu_ns_per_request") is not None}


def print_costs(rows, title):
    """Server CPU per request and per ID, how many times the floor's (the bare responder's:
    what the kernel and the I/O cost with no generator) and the best peer's."""
    best = best_peer_costs(rows)
    floor = floor_costs(rows)
    print(title)
    print(f"{'system':<32} {'workload':<44} {'req/s':>12} {'IDs/s':>14} {'p50 µs':>8} {'p99 µs':>8} "
          f"{'p99.9':>8} {'CPU':>5} {'ns/req':>8} {'ns/ID':>8} {'÷ floor':>8} {'÷ best peer':>11}")
    for r in rows:
        if r.get("server_cpu_ns_per_request") is None:
            continue
        # One ID per request compares CPU per request; batches compare CPU per ID.
        key, col = (("ns_per_id", "server_cpu_ns_per_id") if r["workload"].startswith("big")
                    else ("ns_per_request", "server_cpu_ns_per_request"))
        peer = best.get(r["workload"].replace(", range answers", "").replace(UUIDS, ""), {}).get(key)
        r["cpu_ratio_to_best_peer"] = r[col] / peer if peer else None
        bare = floor.get(r["workload"], {}).get(col)
        r["cpu_ratio_to_floor"] = r[col] / bare if bare else None
        lat = r.get("latency_us", {})
        ratio = f"{r['cpu_ratio_to_best_peer']:.3f}" if r["cpu_ratio_to_best_peer"] else "-"
        to_floor = f"{r['cpu_ratio_to_floor']:.3f}" if r["cpu_ratio_to_floor"] else "-"
        print(f"{r['system']:<32} {r['workload']:<44} {r['requests_per_sec']:>12,.0f} {r['ids_per_sec']:>14,.0f} "
              f"{lat.get('p50', 0):>8.1f} {lat.get('p99', 0):>8.1f} {lat.get('p999', 0):>8.1f} "
              f"{r['server_cpu_cores']:>5.2f} {r['server_cpu_ns_per_request']:>8,.0f} "
              f"{r['server_cpu_ns_per_id']:>8.2f} {to_floor:>8} {ratio:>11}")
    print("CPU: server cores busy; ns/req, ns/ID: server CPU time (user + system, /proc) per "
          "request and per ID; ÷ floor, ÷ best peer: this row's ns (per request; per ID for "
          "batches) over the bare responder's (the same frames answered from a counter: the "
          "kernel's and the I/O's part) and over the lowest peer's, in the same workload; "
          "(window writes): the client writes each window of --pipeline requests whole")


def print_syscalls(rows):
    print(f"{'system calls per request (perf stat, extra 2 s run)':<56} {'reads':>6} {'writes':>6} "
          f"{'epoll':>6} {'all':>6}")
    for r in rows:
        per = r["per_request"]
        epoll = per.get("epoll_wait", 0) + per.get("epoll_pwait", 0)
        print(f"{r['system'] + ', ' + r['workload']:<56} {r['reads_per_request']:>6.3f} "
              f"{r['writes_per_request']:>6.3f} {epoll:>6.3f} {r['all_per_request']:>6.3f}")


def targets(rows, syscall_rows, inproc, tag):
    """The efficiency targets, each as measured in this run: (target, value, met)."""
    def row(system_prefix, workload):
        return next((r for r in rows if r["system"].startswith(system_prefix) and r["workload"] == workload), None)
    out = []
    ig, rd = row("idgen (1 shard", "1 ID/req, 50 conn × 128"), row("Redis", "1 ID/req, 50 conn × 128")
    if ig and ig.get("server_cpu_ns_per_request"):
        v = ig["server_cpu_ns_per_request"]
        out.append(("50 conn × 128, ns of server CPU per request ≤ 120", f"{v:.0f}", v <= 120))
        if rd and rd.get("server_cpu_ns_per_request"):
            x = rd["server_cpu_ns_per_request"] / v
            out.append(("50 conn × 128, ≥ 7× less CPU per request than Redis", f"{x:.1f}×", x >= 7))
    for r in syscall_rows:
        if r["system"].startswith("idgen (1 shard") and r["workload"] == "1 request in flight":
            out.append(("1 in flight: ≤ 1 read and ≤ 1 write system call per request",
                        f"{r['reads_per_request']:.2f} / {r['writes_per_request']:.2f}",
                        r["reads_per_request"] <= 1.005 and r["writes_per_request"] <= 1.005))
    ig, rd = row("idgen (1 shard", "1 request in flight"), row("Redis", "1 request in flight")
    if ig and rd:
        a, b = ig["latency_us"], rd["latency_us"]
        out.append(("1 in flight: p99 ≤ Redis p99", f"{a['p99']:.1f} vs {b['p99']:.1f} µs", a["p99"] <= b["p99"]))
        out.append(("1 in flight: p99.9 ≤ 2 × Redis p99.9", f"{a['p999']:.1f} vs {b['p999']:.1f} µs",
                    a["p999"] <= 2 * b["p999"]))
    ig = row("idgen (1 shard", "big batches")
    if ig and ig.get("server_cpu_ns_per_id"):
        v = ig["server_cpu_ns_per_id"]
        out.append(("4,096-ID batches: ≤ 2 ns of server CPU per ID", f"{v:.2f}", v <= 2))
    ig = row("idgen (1 shard", "big batches, range answers")
    if ig and ig.get("range_limit_ids_per_sec"):
        x = ig["ids_per_sec"] / ig["range_limit_ids_per_sec"]
        out.append(("range answers ≥ 0.95 × the worker range's limit", f"{x:.3f}", x >= 0.95))
    if inproc:
        v = inproc["next_id_ns"]
        out.append(("in-process: one ID ≤ 30 ns", f"{v:.1f} ns", v <= 30))
    print(f"targets ({tag}):")
    for name, value, met in out:
        print(f"  {'met    ' if met else 'NOT MET'} {name}: {value}")
    return [{"target": n, "value": v, "met": m} for n, v, m in out]


def machine_and_build():
    """What the figures were measured on and with."""
    def cmd(*c):
        try:
            return subprocess.run(c, cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return "?"
    import tomllib
    with open(ROOT / "Cargo.toml", "rb") as f:
        profile = tomllib.load(f).get("profile", {}).get("release", {})
    cpuinfo = Path("/proc/cpuinfo").read_text()
    flags = next((l.split(":", 1)[1].split() for l in cpuinfo.splitlines() if l.startswith("flags")), [])
    source = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    return {
        "cpus": os.cpu_count(), "kernel": os.uname().release,
        "cpu": next((l.split(":", 1)[1].strip() for l in cpuinfo.splitlines() if l.startswith("model name")), "?"),
        "clocksource": source.read_text().strip() if source.exists() else "?",
        "invariant_tsc": "nonstop_tsc" in flags,
        "git_revision": cmd("git", "rev-parse", "HEAD"),
        "git_dirty": bool(cmd("git", "status", "--porcelain", "--untracked-files=no")),
        "rustc": cmd("rustc", "-V"),
        "build_profile": {"name": "release", **profile},
        "load_average_at_end": os.getloadavg(),
    }


def cpu_sets(server_cpus):
    """CPU lists for the pinned mode: `server_cpus` CPUs for the server, the rest for the load
    generator; None if the machine has too few."""
    n = os.cpu_count() or 1
    if server_cpus >= n:
        return None
    server = f"0-{server_cpus - 1}" if server_cpus > 1 else "0"
    load = f"{server_cpus}-{n - 1}" if n - server_cpus > 1 else str(server_cpus)
    return server, load, n - server_cpus


def pinned_runs(seconds, no_postgres, syscall_rows):
    """The same workloads with the server on CPU 0 and the load generator on the others."""
    sets = cpu_sets(1)
    if sets is None:
        return []
    PIN["server"], PIN["load"], _ = sets
    try:
        rows = [{**r, "system": r["system"] + " pinned"} for r in idgen_runs(seconds, 1, syscall_rows=syscall_rows)]
        rows += [{**r, "system": BARE + " pinned"} for r in bare_runs(seconds)]
        rows += [{**r, "system": "Redis INCRBY pinned"} for r in redis_runs(seconds)]
        rows += [{**r, "system": r["system"] + " pinned"} for r in window_runs(seconds)]
        if not no_postgres:
            rows += [{**r, "system": "PostgreSQL nextval pinned"} for r in postgres_runs(seconds)]
    finally:
        PIN["server"] = PIN["load"] = None
    return rows


def scaling_runs(seconds, cores):
    """Shard-scaling rows: 1, 2, 4 … shards up to `cores`, each shard count on its own CPUs
    with the load generator on the rest. Returns (rows, shard counts this machine cannot run)."""
    counts, k = [], 1
    while k <= cores:
        counts.append(k)
        k *= 2
    if cores not in counts:
        counts.append(cores)
    rows, skipped = [], []
    for shards in counts:
        sets = cpu_sets(shards)
        if sets is None:
            skipped.append(shards)
            continue
        PIN["server"], PIN["load"], load_cpus = sets
        try:
            server, addr, data = start_idgen(shards)
            for name, args in WORKLOADS[:2]:
                # Enough connections for every shard (connections are dealt round-robin).
                rows.append({**loadtest(["--addr", addr, *args], seconds, f"idgen ({shards} shards pinned)",
                                        name, server.pid, threads=load_cpus), "shards": shards})
            stop(server)
            shutil.rmtree(data, ignore_errors=True)
        finally:
            PIN["server"] = PIN["load"] = None
    return rows, skipped


def print_scaling(rows, skipped, cores):
    if rows:
        print(f"{'shard scaling (pinned)':<28} {'workload':<28} {'IDs/s':>14} {'req/s':>12} {'ns/req':>8} {'ns/ID':>8}")
        for r in rows:
            print(f"{r['system']:<28} {r['workload']:<28} {r['ids_per_sec']:>14,.0f} "
                  f"{r['requests_per_sec']:>12,.0f} {r['server_cpu_ns_per_request']:>8,.0f} {r['server_cpu_ns_per_id']:>8.2f}")
    if skipped:
        print(f"shard scaling: this machine has {os.cpu_count()} CPUs, so {', '.join(map(str, skipped))} "
              f"shard(s) with a load generator on CPUs of its own could not run here "
              f"(--cores {cores}; the model above is what they are expected to show)")


def compare_runs(seconds, baseline):
    """The idgen rows for `baseline` (another build's idgen binary) and for this build,
    alternating workload by workload on two live nodes."""
    rows = []
    nodes = [("baseline", *start_idgen(1, binary=baseline)), ("this build", *start_idgen(1))]
    for name, args in WORKLOADS:
        for label, server, addr, _ in nodes:
            rows.append(loadtest(["--addr", addr, *args], seconds, f"idgen 1 shard, {label}", name, server.pid))
    for _, server, _, data in nodes:
        stop(server)
        shutil.rmtree(data, ignore_errors=True)
    print(f"{'build':<26} {'workload':<28} {'req/s':>12} {'IDs/s':>14} {'p99 µs':>8} {'ns/req':>8} {'ns/ID':>8} {'÷ baseline':>10}")
    for r in rows:
        base = next(b for b in rows if b["workload"] == r["workload"] and b["system"].endswith("baseline"))
        col = "server_cpu_ns_per_id" if r["workload"].startswith("big") else "server_cpu_ns_per_request"
        print(f"{r['system']:<26} {r['workload']:<28} {r['requests_per_sec']:>12,.0f} {r['ids_per_sec']:>14,.0f} "
              f"{r['latency_us'].get('p99', 0):>8.1f} {r['server_cpu_ns_per_request']:>8,.0f} "
              f"{r['server_cpu_ns_per_id']:>8.2f} {r[col] / base[col]:>10.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=5, help="measurement time of each run")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--quick", action="store_true", help="2 s runs, shorter criterion")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--cores", type=int, default=os.cpu_count(),
                    help="shard-scaling rows for 1, 2, 4 … N shards, each on CPUs of its own with "
                         "the load generator on the others; counts this machine cannot host are "
                         "reported as such [default: this machine's CPUs]")
    ap.add_argument("--http-only", action="store_true",
                    help="only the HTTP ID API rows and the renewal check (prints, writes nothing)")
    ap.add_argument("--clients-only", action="store_true",
                    help="only the clients (Rust, Go, Java, TypeScript) side by side against one "
                         "node (prints, writes nothing)")
    ap.add_argument("--tls-only", action="store_true",
                    help="only the TLS rows beside plaintext, handshakes and idle TLS connections "
                         "(prints, writes nothing)")
    ap.add_argument("--cost-only", action="store_true",
                    help="only the cost rows (idgen, Redis, PostgreSQL; shared and pinned), system "
                         "calls, the targets and the model (prints, writes nothing)")
    ap.add_argument("--uuids-only", action="store_true",
                    help="only version 7 UUIDs beside plain IDs: one node and the floor, each "
                         "workload of UUID_WORKLOADS with GET_IDS and with GET_UUIDS (prints, "
                         "writes nothing)")
    ap.add_argument("--options-only", action="store_true",
                    help="only GET_IDS_WITH's options (after, idempotency keys, masked) beside "
                         "plain IDs on one node (prints, writes nothing)")
    ap.add_argument("--sequences-only", action="store_true",
                    help="only the named sequences against Redis INCR and PostgreSQL nextval "
                         "(scripts/bench-sequences; prints, writes nothing)")
    ap.add_argument("--compare", metavar="IDGEN_BINARY",
                    help="only the idgen rows, for this idgen binary (another build: the before "
                         "of a change) and for this build, alternating (prints, writes nothing)")
    a = ap.parse_args()
    seconds = 2 if a.quick else a.seconds
    if not a.skip_build:
        log("building release binaries")
        subprocess.run(["cargo", "build", "--release", "-p", "idgen", "-p", "idgen-loadtest",
                        "--bins"],
                       cwd=ROOT, check=True)
        subprocess.run(["cargo", "build", "--release", "-p", "idgen-testkit", "--bin",
                        "idgen-test-certs"], cwd=ROOT, check=True)

    def only(run, show):
        try:
            result = run()
        finally:
            for p in procs:
                stop(p, signal.SIGKILL)
        show(result)

    if a.compare:
        return only(lambda: compare_runs(seconds, a.compare), lambda _: None)
    if a.uuids_only:
        def uuids():
            rows = []
            server, addr, data = start_idgen(1)
            for name, args in WORKLOADS:
                if name in UUID_WORKLOADS:
                    rows.append(loadtest(["--addr", addr, *args], seconds, "idgen (1 shard)", name,
                                         server.pid))
            rows += uuid_runs(addr, seconds, "idgen (1 shard)", server.pid)
            stop(server)
            shutil.rmtree(data, ignore_errors=True)
            server, addr = start_bare()
            for name, args in WORKLOADS:
                if name in UUID_WORKLOADS:
                    rows.append(loadtest(["--addr", addr, *args], seconds, BARE, name, server.pid))
            rows += uuid_runs(addr, seconds, BARE, server.pid)
            stop(server)
            return rows

        def show(rows):
            print_costs(rows, "shared: server and load generator on every CPU")
            print()
            print_uuids(rows)
        return only(uuids, show)
    if a.sequences_only:
        return only(sequence_runs, lambda lines: print("\n".join(lines)))
    if a.options_only:
        return only(lambda: option_runs(seconds), print_options)
    if a.http_only:
        return only(lambda: http_runs(seconds), lambda r: print_http(*r))
    if a.clients_only:
        return only(lambda: client_runs(seconds), print_clients)
    if a.tls_only:
        certs = test_certs()
        try:
            return only(lambda: (tls_runs(seconds, certs), handshakes(seconds, certs), idle_tls_rss(certs)),
                        lambda r: print_tls(*r))
        finally:
            shutil.rmtree(certs, ignore_errors=True)
    if a.cost_only:
        def cost():
            sys_rows = []
            rows = (idgen_runs(seconds, 1, syscall_rows=sys_rows) + bare_runs(seconds)
                    + redis_runs(seconds, sys_rows) + window_runs(seconds))
            if not a.no_postgres:
                rows += postgres_runs(seconds)
            return rows, sys_rows, pinned_runs(seconds, a.no_postgres, None)

        def show(r):
            rows, sys_rows, pin = r
            print_costs(rows, "shared: server and load generator on every CPU")
            print()
            print_costs(pin, "pinned: server on CPU 0, load generator on the others")
            print()
            print_uuids(rows + pin)
            print()
            print_syscalls(sys_rows)
            targets(rows, sys_rows, None, "shared")
            if pin:
                targets([{**x, "system": x["system"].replace(" pinned", "")} for x in pin], [], None, "pinned")
                print_model(scaling_model(model_cost(pin)))
        return only(cost, show)

    rows, syscall_rows = [], []
    certs = test_certs()
    try:
        log("loopback limit (iperf3)")
        rows.append(loopback_limit(seconds))
        for shards in (1, 2):
            log(f"idgen, {shards} shard(s)")
            rows += idgen_runs(seconds, shards, syscall_rows=syscall_rows if shards == 1 else None)
        # 64 worker IDs cap one shard at 64 × 4096 IDs per ms (262 M/s), which range answers
        # reach: show them with a worker range that does not bind.
        log("idgen, 1 shard, 256 worker IDs, range answers")
        rows += idgen_runs(seconds, 1, workers=256, only_ranges=True)
        log("the floor: a bare responder of the same frames")
        rows += bare_runs(seconds)
        log("Redis INCRBY")
        rows += redis_runs(seconds, syscall_rows)
        if not a.no_postgres:
            log("PostgreSQL nextval")
            rows += postgres_runs(seconds)
        log("window writes: idgen, the floor and Redis")
        rows += window_runs(seconds)
        log("pinned: server on CPU 0, load generator on the others")
        pin_rows = pinned_runs(seconds, a.no_postgres, None)
        log(f"shard scaling up to {a.cores} shards")
        scale_rows, scale_skipped = scaling_runs(seconds, a.cores)
        log("idgen HTTP ID API (wrk)")
        http_rows, renewal = http_runs(seconds)
        log("10,000 idle connections")
        idle = idle_connections_rss()
        log("TLS beside plaintext, handshakes, 10,000 idle TLS connections")
        tls_rows = tls_runs(seconds, certs)
        hs = handshakes(seconds, certs)
        idle_tls = idle_tls_rss(certs)
        log("clients (Rust, Go, Java, TypeScript)")
        client_rows = client_runs(seconds)
        log("in-process (criterion)")
        inproc = in_process(a.quick)
        log("named sequences against Redis INCR and PostgreSQL nextval (scripts/bench-sequences)")
        sequences = sequence_runs()
    finally:
        for p in procs:
            stop(p, signal.SIGKILL)
        shutil.rmtree(certs, ignore_errors=True)
    limit = rows[0]["ids_per_sec"]
    peers = [r for r in rows if not r["system"].startswith(("idgen", BARE)) and r["workload"] != "bytes"]
    for r in peers:
        if r["workload"] == "big batches":
            # Range answers compete with the same peers as big batches.
            peers = peers + [{**r, "workload": "big batches, range answers"}]
        if r["workload"] in UUID_WORKLOADS:
            # UUIDs compete with the same peers as the IDs they are made from.
            peers = peers + [{**r, "workload": r["workload"] + UUIDS}]
    print(f"{'system':<32} {'workload':<28} {'IDs/s':>14} {'req/s':>12} {'p50 µs':>8} {'p99 µs':>8} {'× best peer':>11} {'× limit':>8}")
    for r in rows:
        best = max((p["ids_per_sec"] for p in peers if p["workload"] == r["workload"]), default=0)
        lat = r.get("latency_us", {})
        r["ratio_to_best_peer"] = r["ids_per_sec"] / best if best else None
        r["ratio_to_limit"] = r["ids_per_sec"] / limit
        print(f"{r['system']:<32} {r['workload']:<28} {r['ids_per_sec']:>14,.0f} "
              f"{r.get('requests_per_sec', 0):>12,.0f} {lat.get('p50', 0):>8.1f} {lat.get('p99', 0):>8.1f} "
              f"{(r['ratio_to_best_peer'] or 0):>11.2f} {r['ratio_to_limit']:>8.3f}")
    print()
    print_costs(rows, "cost, shared: server and load generator on every CPU")
    print()
    print_costs(pin_rows, "cost, pinned: server on CPU 0, load generator on the others")
    print()
    print_uuids(rows + pin_rows)
    print()
    print_syscalls(syscall_rows)
    print()
    target_rows = targets(rows, syscall_rows, inproc, "shared")
    pin_targets = targets([{**x, "system": x["system"].replace(" pinned", "")} for x in pin_rows], [], None,
                          "pinned") if pin_rows else []
    print()
    model = scaling_model(model_cost(pin_rows or rows))
    print_model(model)
    print_scaling(scale_rows, scale_skipped, a.cores)
    print()
    print_http(http_rows, renewal)
    print(f"idle connections: {idle['connections']} open, server RSS {idle['rss_mib']:.1f} MiB "
          f"(idle server {idle['rss_mib_before']:.1f} MiB)")
    print()
    print_tls(tls_rows, hs, idle_tls)
    print()
    print_clients(client_rows)
    print("\n".join(sequences))
    print()
    print(f"in-process: next_id {inproc['next_id_ns']:.1f} ns (cached clock read {inproc['cached_clock_read_ns']:.1f} ns; "
          f"on the system clock read every call {inproc['next_id_system_clock_ns']:.1f} ns, that read alone "
          f"{inproc['wall_clock_read_ns']:.1f} ns), uuid v7 {inproc['uuid_v7_ns']:.1f} ns → "
          f"{inproc['uuid_v7_ns']/inproc['next_id_ns']:.1f}× ; "
          f"batch of 4096 {4096/inproc['batch_4096_ns']:.2f} G IDs/s vs bare loop {4096/inproc['bare_loop_4096_ns']:.2f} G/s "
          f"→ {inproc['bare_loop_4096_ns']/inproc['batch_4096_ns']:.2f}×")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                 "seconds_per_run": seconds,
                                                 "machine": machine_and_build(),
                                                 "rows": rows, "pinned_rows": pin_rows,
                                                 "syscalls": syscall_rows,
                                                 "targets": {"shared": target_rows, "pinned": pin_targets},
                                                 "model": model,
                                                 "scaling": {"rows": scale_rows, "could_not_run": scale_skipped,
                                                             "cores_asked": a.cores},
                                                 "in_process": inproc,
                                                 "http": http_rows, "renewals": renewal,
                                                 "idle_connections": idle,
                                                 "tls": {"rows": tls_rows, "handshakes": hs,
                                                         "idle_connections": idle_tls},
                                                 "clients": client_rows,
                                                 "sequences": sequences},
                                                indent=1))
    svg_chart(rows, out / "chart.svg")
    log(f"wrote {out/'latest.json'} and {out/'chart.svg'}")


def sequence_runs():
    """Named sequences (dense over the protocol and HTTP, strict on three nodes on etcd at
    depth 1 and 16) beside Redis INCR and PostgreSQL nextval, the same connections and depths:
    scripts/bench-sequences, which starts and stops its own processes. Its report, by line."""
    out = subprocess.run(["bash", str(ROOT / "scripts" / "bench-sequences")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    lines = out.stdout.splitlines()
    if out.returncode != 0:
        raise RuntimeError("scripts/bench-sequences failed:\n" + out.stdout + out.stderr)
    return ["named sequences (scripts/bench-sequences):"] + ["  " + l for l in lines]


def model_cost(rows):
    """The costs the model starts from: idgen on one shard (pinned where it ran pinned), one ID
    per request with 50 connections × 128 in flight, and 4,096-ID batches."""
    def find(workload):
        return next(r for r in rows if r["system"].startswith("idgen (1 shard") and r["workload"] == workload)
    req, ids = find("1 ID/req, 50 conn × 128"), find("big batches")
    return {"ns_per_request": req["server_cpu_ns_per_request"], "request_workload": req["system"] + ", " + req["workload"],
            "ns_per_id": ids["server_cpu_ns_per_id"], "id_workload": ids["system"] + ", " + ids["workload"]}


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Cross-file checks of deploy/ that no off-the-shelf validator makes.

Run by scripts/validate-deploy (with a venv that has PyYAML):

    check-deploy.py ROOT METRICS_FILE SERVE_HELP_FILE INVOCATIONS_OUT OVERLAY=RENDERED…

ROOT is the repository; METRICS_FILE a scrape of a running node's /metrics (a node with TLS
on, so that the TLS metric families the alerts use exist); SERVE_HELP_FILE the output of
`idgen serve --help`; each OVERLAY=RENDERED an overlay of deploy/k8s/overlays (etcd, fdb,
postgres: every directory there) and the file `kubectl kustomize` rendered it into. Prints one
line per check and exits 1 if any fails. Writes to INVOCATIONS_OUT the `idgen serve` command
lines the deploy files run, one per line as `what<US>VAR=value …<US>args…` (US: the 0x1f unit
separator; shell-quoted), for validate-deploy to run each with --check-config. While the build
has no PostgreSQL TLS (no --postgres-ca in SERVE_HELP_FILE), a command line with it is written
twice: as it is (validate-deploy expects this build to refuse its sslmode) and without its TLS
settings (checked in full).

    check-deploy.py --queries ROOT PROMETHEUS_URL

runs every query of the Grafana dashboard and every alert expression on a Prometheus that
scrapes a live node (validate-deploy starts a throwaway one on loopback).
"""

import json
import re
import shlex
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

FAILURES = []


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILURES.append(what)


def seconds(text):
    """A humantime-ish duration ("10s", "500ms", "2m") in seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*", str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    v = float(m.group(1))
    return v * {"ms": 1e-3, "s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]


def load_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def env_of(svc):
    """A compose service's environment as a dict (it may be written as a list of VAR=value)."""
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {k: str(v) for k, v in env.items()}


def compose(root, name, store, invocations):
    print(f"{name}:")
    doc = load_all(root / "deploy" / name)[0]
    services = doc["services"]
    nodes = {k: v for k, v in services.items() if re.fullmatch(r"idgen\d+", k)}
    check(len(nodes) == 3, f"three idgen nodes ({', '.join(sorted(nodes))})")
    ids = []
    for k, svc in sorted(nodes.items()):
        cmd = svc["command"]
        env = env_of(svc)
        arg = lambda flag: cmd[cmd.index(flag) + 1] if flag in cmd else None  # noqa: E731
        ids.append(arg("--node-id"))
        check(arg("--store") == store, f"{k}: --store {arg('--store')}")
        check(arg("--listen") == "0.0.0.0:7420", f"{k}: listens on 0.0.0.0:7420")
        check(arg("--admin-listen") == "0.0.0.0:7421", f"{k}: admin on 0.0.0.0:7421")
        check(arg("--http-listen") == "0.0.0.0:7422", f"{k}: HTTP ID API on 0.0.0.0:7422")
        drain = seconds(env.get("IDGEN_DRAIN_DELAY", "0s"))
        shut = seconds(env.get("IDGEN_SHUTDOWN_TIMEOUT", "10s"))
        grace = seconds(svc.get("stop_grace_period", "10s"))
        check(
            grace > drain + shut,
            f"{k}: stop_grace_period {grace:g}s > drain {drain:g}s + shutdown {shut:g}s",
        )
        check(svc.get("ports") is None, f"{k}: publishes no ports (HAProxy does)")
        check(
            not any(re.search(r"--[a-z-]*password(?!-file)", a) for a in cmd)
            and not re.search(r"://[^/@]*:[^/@]*@", arg("--store") or ""),
            f"{k}: no password on the command line (a flag, or user:password@ in the store URL)",
        )
        invocations.append(
            (f"{name} {k}", {kk: str(vv) for kk, vv in env.items()}, cmd[1:])
        )
    check(len(set(ids)) == len(ids) and None not in ids, f"distinct --node-id {ids}")
    in_env = sorted(
        f"{k}: {var}" for k, svc in services.items() for var in env_of(svc)
        if var.endswith("PASSWORD")
    )
    check(not in_env, f"no password in any service's environment, only files ({in_env})")
    hap = services.get("haproxy", {})
    check(
        any("haproxy.cfg" in v for v in hap.get("volumes", [])),
        "haproxy mounts deploy/haproxy.cfg",
    )
    check(
        all(p.startswith("127.0.0.1:") for p in hap.get("ports", [])),
        "haproxy publishes on the host's loopback only",
    )
    return sorted(nodes)


# ---- PostgreSQL: the store URL, the password and TLS files, and what a check must catch -----

# The PostgreSQL TLS settings' variables. Until `idgen serve --help` lists --postgres-ca (the
# TLS work, merged separately), command lines that use them are also checked without them.
PG_TLS_VARS = ("IDGEN_POSTGRES_CA", "IDGEN_POSTGRES_CERT", "IDGEN_POSTGRES_KEY")
PG_TLS_FLAGS = ("--postgres-ca", "--postgres-cert", "--postgres-key")


def pg_url(store):
    """(user, [(host, port)], database, {parameter: value}) of a postgres:// URL, or None."""
    m = re.fullmatch(
        r"postgres(?:ql)?://(?:([^@/?]*)@)?([^/?]+)(?:/([^?]*))?(?:\?(.*))?", store or ""
    )
    if m is None:
        return None
    hosts = []
    for h in m.group(2).split(","):
        host, _, port = h.rpartition(":")
        if not host:
            host, port = h, "5432"
        if not port.isdigit():
            return None
        hosts.append((host, int(port)))
    pairs = [kv for kv in (m.group(4) or "").split("&") if kv]
    params = dict(kv.split("=", 1) if "=" in kv else (kv, "") for kv in pairs)
    return m.group(1), hosts, m.group(3) or None, params


def compose_setting(svc, key):
    """A compose service's `idgen serve` setting: its flag in the command, else its variable."""
    cmd, env = svc.get("command") or [], env_of(svc)
    flag = "--" + key.replace("_", "-")
    for i, a in enumerate(cmd):
        if a == flag and i + 1 < len(cmd):
            return cmd[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return env.get("IDGEN_" + key.upper())


def pg_compose_problems(doc, demo, ignored):
    """What is wrong with a PostgreSQL compose file: the nodes' store URL (a role, never a
    password; sslmode=verify-full unless `demo`), the password and TLS files as compose secrets
    the service lists, from files under a directory deploy/.gitignore keeps out of git
    (`ignored`); for the demo, its postgres service: the same password secret, the role and
    database of the URL, a health check the nodes wait for, no published port."""
    problems = []
    services = doc.get("services") or {}
    top = doc.get("secrets") or {}
    nodes = {k: v for k, v in services.items() if re.fullmatch(r"idgen\d+", k)}
    if not nodes:
        return ["no idgen nodes"]

    def secret_file(svc, path, what):
        m = re.fullmatch(r"/run/secrets/([A-Za-z0-9._-]+)", path or "")
        if m is None:
            problems.append(f"{what} {path} is not a compose secret (/run/secrets/NAME)")
            return None
        name = m.group(1)
        listed = [x if isinstance(x, str) else x.get("source") for x in svc.get("secrets") or []]
        if name not in listed:
            problems.append(f"{what}: the service does not list the secret {name}")
        f = (top.get(name) or {}).get("file")
        if not f:
            problems.append(f"{what}: no top-level secret {name} from a file")
            return None
        parts = Path(f).parts
        if len(parts) < 2 or not {f"{parts[0]}/", f"/{parts[0]}/"} & ignored:
            problems.append(f"{what}: {f} is not in a directory deploy/.gitignore lists")
        return f

    urls, pw_files = {}, set()
    for k, svc in sorted(nodes.items()):
        env = env_of(svc)
        url = pg_url(compose_setting(svc, "store"))
        if url is None:
            problems.append(f"{k}: the store is not postgres://ROLE@HOST:PORT/DATABASE")
            continue
        urls[k] = url
        user, _, _, params = url
        if not user or ":" in user:
            problems.append(f"{k}: the URL must name a role, without a password ({user!r})")
        if "IDGEN_POSTGRES_PASSWORD" in env:
            problems.append(f"{k}: the password itself in the environment")
        pw = compose_setting(svc, "postgres_password_file")
        if pw is None:
            problems.append(f"{k}: no postgres_password_file")
        else:
            pw_files.add(secret_file(svc, pw, f"{k}: postgres_password_file"))
        tls = {
            key: compose_setting(svc, key)
            for key in ("postgres_ca", "postgres_cert", "postgres_key")
        }
        if not demo:
            if params.get("sslmode") != "verify-full":
                problems.append(f"{k}: no sslmode=verify-full in the URL ({params})")
            if tls["postgres_ca"] is None:
                problems.append(f"{k}: no postgres_ca (verify-full needs the authorities)")
        if (tls["postgres_cert"] is None) != (tls["postgres_key"] is None):
            problems.append(f"{k}: only one of postgres_cert and postgres_key")
        for key, path in tls.items():
            if path is not None:
                secret_file(svc, path, f"{k}: {key}")
    if len({(u[0], tuple(u[1]), u[2], tuple(sorted(u[3].items()))) for u in urls.values()}) > 1:
        problems.append("the nodes name different stores")
    if len(pw_files) > 1:
        problems.append(f"the nodes read different password files {sorted(map(str, pw_files))}")
    if not demo:
        return problems
    pg = services.get("postgres")
    if pg is None:
        return problems + ["no postgres service"]
    penv = env_of(pg)
    pg_pw = secret_file(pg, penv.get("POSTGRES_PASSWORD_FILE"), "postgres: POSTGRES_PASSWORD_FILE")
    if pg_pw not in pw_files or len(pw_files) != 1:
        problems.append(
            f"postgres sets the password from {pg_pw}, the nodes read {sorted(map(str, pw_files))}"
        )
    user = penv.get("POSTGRES_USER", "postgres")
    for k, (u, hosts, db, _) in sorted(urls.items()):
        if hosts != [("postgres", 5432)] or u != user or db != penv.get("POSTGRES_DB", user):
            want = f"{user}@postgres:5432/{penv.get('POSTGRES_DB', user)}"
            problems.append(f"{k}: the URL is not {want}")
        dep = (nodes[k].get("depends_on") or {})
        dep = dep.get("postgres", {}) if isinstance(dep, dict) else {}
        if dep.get("condition") != "service_healthy":
            problems.append(f"{k}: does not wait for postgres to be healthy (depends_on condition)")
    if not (pg.get("healthcheck") or {}).get("test"):
        problems.append("postgres: no health check")
    if pg.get("ports"):
        problems.append(f"postgres: publishes {pg['ports']}")
    return problems


def pg_compose(root, name, demo):
    """The checks of pg_compose_problems on a compose file, and on broken copies of it, each of
    which they must catch."""
    print(f"{name} (PostgreSQL):")
    doc = load_all(root / "deploy" / name)[0]
    ignored = set((root / "deploy" / ".gitignore").read_text(encoding="utf-8").split())
    problems = pg_compose_problems(doc, demo, ignored)
    check(
        not problems,
        "the store URL names a role, no password; the password"
        + ("" if demo else " and the CA (sslmode=verify-full)")
        + " from compose secrets the nodes list, files under a directory deploy/.gitignore lists"
        + ("; postgres sets the same password, serves the URL's role and database, is "
           "health-checked before the nodes start and publishes no port" if demo else "")
        + (f": {problems}" if problems else ""),
    )

    def node(d):
        return d["services"]["idgen1"]

    def set_store(d, f):
        cmd = node(d)["command"]
        i = cmd.index("--store") + 1
        cmd[i] = f(cmd[i])

    breaks = {
        "the password in the environment": lambda d: (
            node(d)["environment"].pop("IDGEN_POSTGRES_PASSWORD_FILE"),
            node(d)["environment"].__setitem__("IDGEN_POSTGRES_PASSWORD", "x"),
        ),
        "the password in the URL": lambda d: set_store(
            d, lambda u: u.replace("idgen@", "idgen:x@")),
        "a secret the service does not list": lambda d: node(d)["secrets"].remove(
            "postgres-password"),
        "the password file outside the secrets": lambda d: node(d)["environment"].__setitem__(
            "IDGEN_POSTGRES_PASSWORD_FILE", "/etc/idgen/password"),
        "a secret file git would commit": lambda d: d["secrets"]["postgres-password"].__setitem__(
            "file", "./password"),
        "a client certificate without its key": lambda d: (
            node(d)["environment"].__setitem__(
                "IDGEN_POSTGRES_CERT", "/run/secrets/postgres-password")),
    }
    if demo:
        breaks.update({
            "postgres with another password file": lambda d: d["services"]["postgres"][
                "environment"].__setitem__("POSTGRES_PASSWORD_FILE", "/run/secrets/other"),
            "a node that does not wait for postgres": lambda d: node(d).__setitem__(
                "depends_on", ["postgres"]),
            "postgres published": lambda d: d["services"]["postgres"].__setitem__(
                "ports", ["5432:5432"]),
            "another host": lambda d: set_store(d, lambda u: u.replace("@postgres:", "@db:")),
        })
    else:
        breaks.update({
            "no sslmode": lambda d: set_store(d, lambda u: u.split("?")[0]),
            "sslmode=require (no name check)": lambda d: set_store(
                d, lambda u: u.replace("verify-full", "require")),
            "no CA": lambda d: node(d)["environment"].pop("IDGEN_POSTGRES_CA"),
        })
    missed = []
    for what, brk in breaks.items():
        broken = yaml.safe_load(yaml.safe_dump(doc))
        # The nodes share one anchor in the file; in the copy each has its own.
        brk(broken)
        if not pg_compose_problems(broken, demo, ignored):
            missed.append(what)
    check(not missed, f"the checks catch each of {len(breaks)} broken copies (missed: {missed})")


def pg_k8s_problems(c, pod, np):
    """What is wrong with a rendered StatefulSet's PostgreSQL wiring: IDGEN_STORE names a role
    and no password, with sslmode=verify-full; the password file is key `password` of the
    Secret idgen-postgres, the CA (and a client certificate and key, both or neither) keys of
    idgen-postgres-tls, each mounted read-only as a directory (no subPath); no Secret goes into
    the environment; the NetworkPolicy lets the pods reach every port of the URL."""
    problems = []
    env = {e["name"]: e for e in c.get("env", [])}

    def val(name):
        return env.get(name, {}).get("value")

    for name, e in sorted(env.items()):
        if "secretKeyRef" in (e.get("valueFrom") or {}):
            problems.append(f"{name} from a Secret into the environment (mount it as a file)")
    if "IDGEN_POSTGRES_PASSWORD" in env:
        problems.append("IDGEN_POSTGRES_PASSWORD: the password itself in the environment")
    url = pg_url(val("IDGEN_STORE"))
    if url is None:
        return problems + [f"IDGEN_STORE {val('IDGEN_STORE')} is not postgres://…"]
    user, hosts, _, params = url
    if not user or ":" in user:
        problems.append(f"the URL must name a role, without a password ({user!r})")
    if params.get("sslmode") != "verify-full":
        problems.append(f"no sslmode=verify-full in the URL ({params})")
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod.get("volumes", [])}

    def from_secret(var, secret, key):
        path = val(var)
        if path is None:
            problems.append(f"{var} is not set")
            return
        path = Path(path)
        m = mounts.get(str(path.parent))
        s = vols.get(m["name"], {}).get("secret", {}) if m else {}
        if not (m and s.get("secretName") == secret and path.name == key and not s.get("items")):
            problems.append(f"{var} {path} is not key {key} of the Secret {secret} in its mount")
        elif not (m.get("readOnly") is True and "subPath" not in m):
            problems.append(f"{var}: the Secret is not mounted read-only without subPath")

    from_secret("IDGEN_POSTGRES_PASSWORD_FILE", "idgen-postgres", "password")
    from_secret("IDGEN_POSTGRES_CA", "idgen-postgres-tls", "ca.crt")
    if ("IDGEN_POSTGRES_CERT" in env) != ("IDGEN_POSTGRES_KEY" in env):
        problems.append("only one of IDGEN_POSTGRES_CERT and IDGEN_POSTGRES_KEY")
    elif "IDGEN_POSTGRES_CERT" in env:
        from_secret("IDGEN_POSTGRES_CERT", "idgen-postgres-tls", "tls.crt")
        from_secret("IDGEN_POSTGRES_KEY", "idgen-postgres-tls", "tls.key")
    egress = np["spec"].get("egress", [])
    for port in sorted({p for _, p in hosts}):
        if not any(
            rule.get("to")
            and any(
                p.get("protocol", "TCP") == "TCP"
                and p["port"] <= port <= p.get("endPort", p["port"])
                for p in rule.get("ports", [])
            )
            for rule in egress
        ):
            problems.append(f"no egress rule to TCP {port} (the URL's port)")
    return problems


def postgres_store(c, pod, np):
    """pg_k8s_problems on the rendered overlay, and on broken copies, each of which it must
    catch."""
    problems = pg_k8s_problems(c, pod, np)
    check(
        not problems,
        "IDGEN_STORE names a role, no password, sslmode=verify-full; the password file is key "
        "`password` of the Secret idgen-postgres, the CA key ca.crt of idgen-postgres-tls, both "
        "mounted read-only without subPath; no Secret in the environment; egress to the URL's "
        f"ports{': ' if problems else ''}{problems if problems else ''}",
    )

    def env(cc):
        return {e["name"]: e for e in cc["env"]}

    def set_env(cc, name, **value):
        cc["env"] = [e for e in cc["env"] if e["name"] != name]
        if value:
            cc["env"].append({"name": name, **value})

    def mount(cc, path):
        return next(m for m in cc["volumeMounts"] if m["mountPath"] == path)

    breaks = {
        "no sslmode": lambda cc, pp, nn: set_env(
            cc, "IDGEN_STORE", value=env(cc)["IDGEN_STORE"]["value"].split("?")[0]),
        "the password from a secretKeyRef variable": lambda cc, pp, nn: (
            set_env(cc, "IDGEN_POSTGRES_PASSWORD_FILE"),
            set_env(cc, "IDGEN_POSTGRES_PASSWORD", valueFrom={
                "secretKeyRef": {"name": "idgen-postgres", "key": "password"}})),
        "the password in the URL": lambda cc, pp, nn: set_env(
            cc, "IDGEN_STORE", value=env(cc)["IDGEN_STORE"]["value"].replace("idgen@", "idgen:x@")),
        "the password file outside its Secret": lambda cc, pp, nn: set_env(
            cc, "IDGEN_POSTGRES_PASSWORD_FILE", value="/etc/idgen/tls/password"),
        "a subPath mount": lambda cc, pp, nn: mount(cc, "/etc/idgen/postgres").__setitem__(
            "subPath", "password"),
        "the CA from the password's Secret": lambda cc, pp, nn: set_env(
            cc, "IDGEN_POSTGRES_CA", value="/etc/idgen/postgres/ca.crt"),
        "no CA": lambda cc, pp, nn: set_env(cc, "IDGEN_POSTGRES_CA"),
        "a client certificate without its key": lambda cc, pp, nn: set_env(
            cc, "IDGEN_POSTGRES_CERT", value="/etc/idgen/postgres-tls/tls.crt"),
        "no egress to PostgreSQL's port": lambda cc, pp, nn: nn["spec"].__setitem__(
            "egress", nn["spec"]["egress"][1:]),
    }
    missed = []
    for what, brk in breaks.items():
        cc, pp, nn = (yaml.safe_load(yaml.safe_dump(x)) for x in (c, pod, np))
        brk(cc, pp, nn)
        if not pg_k8s_problems(cc, pp, nn):
            missed.append(what)
    check(not missed, f"the checks catch each of {len(breaks)} broken copies (missed: {missed})")


def uses_pg_tls(env, args):
    values = list(env.values()) + list(args)
    return (
        any(k in PG_TLS_VARS for k in env)
        or any("sslmode=" in v for v in values)
        or any(a.split("=", 1)[0] in PG_TLS_FLAGS for a in args)
    )


def without_pg_tls(env, args):
    """A command line without its PostgreSQL TLS settings: no sslmode in the URL, no
    --postgres-ca/cert/key, no IDGEN_POSTGRES_CA/CERT/KEY."""

    def url(v):
        if not v.startswith(("postgres://", "postgresql://")) or "?" not in v:
            return v
        base, q = v.split("?", 1)
        q = "&".join(kv for kv in q.split("&") if kv and not kv.startswith("sslmode="))
        return f"{base}?{q}" if q else base

    env = {k: url(v) for k, v in env.items() if k not in PG_TLS_VARS}
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in PG_TLS_FLAGS:
            skip = True
        elif a.split("=", 1)[0] not in PG_TLS_FLAGS:
            out.append(url(a))
    return env, out


def variables(serve_help, invocations, pg_tls_built):
    """Every IDGEN_* variable the deploy files set is one `idgen serve --help` lists (an
    unknown one would be ignored without a word)."""
    print("IDGEN_* variables:")
    known = set(re.findall(r"\[env: (IDGEN_[A-Z0-9_]+)=", serve_help))
    pending = set() if pg_tls_built else set(PG_TLS_VARS)
    used = {k for _, env, _ in invocations for k in env}
    unknown = sorted(used - known - pending)
    check(
        len(known) > 30 and not unknown,
        f"the {len(used)} variables set are among the {len(known)} of `idgen serve --help`"
        + ("" if pg_tls_built
           else f" or the PostgreSQL TLS ones this build lacks {sorted(pending & used)}")
        + (f" (unknown: {unknown})" if unknown else ""),
    )


def haproxy(root, node_names):
    print("haproxy.cfg:")
    text = (root / "deploy" / "haproxy.cfg").read_text(encoding="utf-8")
    servers = re.findall(r"^\s*server\s+(\S+)\s+(\S+)", text, re.M)
    check(
        [s for s, _ in servers] == node_names,
        f"servers {[s for s, _ in servers]} are the compose nodes",
    )
    check(all(a.endswith(":7420") for _, a in servers), "traffic goes to port 7420")
    check(re.search(r"^\s*mode tcp", text, re.M) is not None, "mode tcp")
    check(
        re.search(r"option httpchk GET /health/ready", text) is not None,
        "option httpchk GET /health/ready",
    )
    check(re.search(r"check port 7421", text) is not None, "check port 7421 (admin)")
    idle = re.search(r"timeout client (\d+)s", text)
    check(
        idle is not None and int(idle.group(1)) > 300,
        "timeout client above idgen's 300s idle timeout",
    )


RECOMMENDED = ("name", "instance", "version", "component", "part-of", "managed-by")
# Labels a selector may name: the ones that never change over a release (spec.selector of a
# StatefulSet is immutable, and a Service or NetworkPolicy selecting on the version would lose
# the pods of the other version during a rollout).
STABLE = {"app.kubernetes.io/name", "app.kubernetes.io/instance"}


def cargo_version(root):
    text = (root / "Cargo.toml").read_text(encoding="utf-8")
    m = re.search(r'^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    m = m or re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    return m.group(1)


def k8s(root, overlay, docs, invocations):
    """One overlay of deploy/k8s/, as `kubectl kustomize` renders it (what `kubectl apply -k`
    sends)."""
    print(f"k8s/overlays/{overlay} (rendered):")
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    def named(kind, name):
        found = [d for d in by_kind.get(kind, []) if d["metadata"]["name"] == name]
        check(len(found) == 1, f"one {kind} {name}")
        return found[0] if found else None

    sts = named("StatefulSet", "idgen")
    pod = sts["spec"]["template"]["spec"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    check(
        sts["spec"]["selector"]["matchLabels"].items() <= labels.items(),
        "StatefulSet selector matches its pods",
    )
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    envv = {k: e["value"] for k, e in env.items() if "value" in e}
    check(
        env["IDGEN_NODE_ID"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        == "metadata.name",
        "IDGEN_NODE_ID from the pod name (fieldRef)",
    )
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(
        ports == {"id-tls": 7430, "admin": 7421, "https": 7422}, f"container ports {ports}"
    )
    rp, lp = c["readinessProbe"]["httpGet"], c["livenessProbe"]["httpGet"]
    check(
        rp["path"] == "/health/ready" and ports.get(rp["port"], rp["port"]) == 7421,
        "readiness: /health/ready on the admin port",
    )
    check(
        lp["path"] == "/health/live" and ports.get(lp["port"], lp["port"]) == 7421,
        "liveness: /health/live on the admin port",
    )
    check("preStop" not in c.get("lifecycle", {}), "no preStop hook (SIGTERM + drain delay)")
    drain = seconds(envv.get("IDGEN_DRAIN_DELAY", "0s"))
    shut = seconds(envv.get("IDGEN_SHUTDOWN_TIMEOUT", "10s"))
    grace = pod["terminationGracePeriodSeconds"]
    check(
        grace > drain + shut,
        f"terminationGracePeriodSeconds {grace} > drain {drain:g}s + shutdown {shut:g}s",
    )
    sc, psc = c["securityContext"], pod["securityContext"]
    check(psc.get("runAsNonRoot") is True, "runAsNonRoot")
    check(sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem")
    check(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], "drops all capabilities")
    res = c["resources"]
    check(
        res["requests"].get("cpu") and res["requests"].get("memory") and res.get("limits"),
        f"resources {res}",
    )
    check(
        str(res["requests"]["cpu"]) == envv.get("IDGEN_SHARDS"),
        "IDGEN_SHARDS equals the CPU request (one shard per core)",
    )
    memory = res["requests"]["memory"]
    check(
        res["limits"].get("memory") == memory,
        f"memory limit = request ({memory}): the measured figure, Guaranteed QoS",
    )
    ops = (root / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    check(
        f"`{memory}`" in ops.split("### Sizing on Kubernetes", 1)[-1].split("\n## ", 1)[0],
        f"docs/OPERATIONS.md, Sizing on Kubernetes, gives the figure `{memory}`",
    )
    spread(pod, labels, "idgen")
    store = envv.get("IDGEN_STORE", "")
    want = {"etcd": "etcd://", "fdb": "fdb:", "postgres": "postgres://"}.get(overlay, "?")
    check(store.startswith(want), f"IDGEN_STORE {store} (the {overlay} store)")
    check(
        c["image"].startswith("idgen:") and c["image"].endswith(f":{overlay}"),
        f"image {c['image']} (tag {overlay}: built with the store's feature)",
    )
    own = lambda d: d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "idgen"  # noqa: E731
    svcs = {d["metadata"]["name"]: d for d in by_kind["Service"] if own(d)}
    check(sts["spec"]["serviceName"] in svcs, f"serviceName {sts['spec']['serviceName']}")
    check(
        svcs[sts["spec"]["serviceName"]]["spec"].get("clusterIP") == "None",
        "the governing Service is headless",
    )
    for name, s in svcs.items():
        check(s["spec"]["selector"].items() <= labels.items(), f"Service {name} selects the pods")
        check(
            any(
                p["name"] == "id-tls" and p["port"] == 7430 and p.get("protocol", "TCP") == "TCP"
                for p in s["spec"]["ports"]
            ),
            f"Service {name} has TCP id-tls 7430 (the ID protocol over TLS)",
        )
    setting = settings_of(c)
    tls_wiring(setting, c, pod, ports, svcs, sts)
    idgen_kinds = {k: [d for d in v if own(d)] for k, v in by_kind.items()}
    network_policy(idgen_kinds, labels, ports, setting)
    (pdb,) = idgen_kinds["PodDisruptionBudget"]
    check(
        pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(),
        "PodDisruptionBudget selects the pods",
    )
    recommended_labels(root, docs)
    stable_selectors(docs)
    (np,) = idgen_kinds["NetworkPolicy"]
    peers = [
        peer
        for rule in np["spec"].get("ingress", []) + np["spec"].get("egress", [])
        for peer in rule.get("from", []) + rule.get("to", [])
    ]
    check(
        all(
            "app.kubernetes.io/name" not in p.get(k, {}).get("matchLabels", {})
            or p[k]["matchLabels"]["app.kubernetes.io/name"] != "idgen"
            for p in peers
            for k in ("podSelector", "namespaceSelector")
        ),
        "no NetworkPolicy peer selects idgen's own labels (kustomize's includeSelectors would "
        "add them to the peers)",
    )
    if overlay == "fdb":
        fdb_store(store, c, pod, by_kind)
    elif overlay == "etcd":
        etcd_store(store, by_kind, np)
    elif overlay == "postgres":
        postgres_store(c, pod, np)
    monitoring(root, by_kind, svcs, sts, ports, setting)
    run_env = {k: v for k, v in envv.items()}
    run_env["IDGEN_NODE_ID"] = f"{sts['metadata']['name']}-0"
    invocations.append((f"k8s/overlays/{overlay} (rendered)", run_env, c["args"][1:]))
    return sts


def spread(pod, labels, what):
    tsc = pod.get("topologySpreadConstraints", [])
    keys = {t["topologyKey"] for t in tsc}
    check(
        {"topology.kubernetes.io/zone", "kubernetes.io/hostname"} <= keys,
        f"{what}: spread over zones and nodes ({sorted(keys)})",
    )
    check(
        all(t["labelSelector"]["matchLabels"].items() <= labels.items() for t in tsc),
        f"{what}: the spread constraints select its own pods",
    )


def recommended_labels(root, docs):
    version = cargo_version(root)
    missing = []
    for d in docs:
        objs = [(f"{d['kind']} {d['metadata']['name']}", d["metadata"].get("labels", {}))]
        if "template" in d.get("spec", {}):
            objs.append((f"{d['kind']} {d['metadata']['name']} pods",
                         d["spec"]["template"]["metadata"].get("labels", {})))
        for what, lab in objs:
            want = [k for k in RECOMMENDED if not (d["kind"] == "ConfigMap" and k == "version")]
            missing += [f"{what}: {k}" for k in want if f"app.kubernetes.io/{k}" not in lab]
            if lab.get("app.kubernetes.io/name") == "idgen" and "app.kubernetes.io/version" in lab:
                if lab["app.kubernetes.io/version"] != version:
                    missing.append(f"{what}: version {lab['app.kubernetes.io/version']}")
            if lab.get("app.kubernetes.io/part-of") != "idgen":
                missing.append(f"{what}: part-of {lab.get('app.kubernetes.io/part-of')}")
    check(
        not missing,
        f"the recommended labels app.kubernetes.io/{{{','.join(RECOMMENDED)}}} on every object "
        f"and pod, version {version} (Cargo.toml) on idgen's{': ' if missing else ''}"
        f"{', '.join(missing)}",
    )


def stable_selectors(docs):
    sels = []
    for d in docs:
        spec, what = d.get("spec", {}), f"{d['kind']} {d['metadata']['name']}"
        if d["kind"] in ("StatefulSet", "PodDisruptionBudget", "ServiceMonitor"):
            sels.append((what, spec["selector"].get("matchLabels", {})))
        if d["kind"] == "Service":
            sels.append((what, spec.get("selector", {})))
        if d["kind"] == "NetworkPolicy":
            sels.append((what, spec["podSelector"].get("matchLabels", {})))
        if d["kind"] == "StatefulSet":
            for t in spec["template"]["spec"].get("topologySpreadConstraints", []):
                sels.append((f"{what} spread", t["labelSelector"].get("matchLabels", {})))
    bad = [f"{w}: {sorted(s)}" for w, s in sels if not s or not set(s) <= STABLE]
    check(
        not bad,
        f"every selector ({len(sels)}) names only {sorted(STABLE)}, never the version"
        f"{': ' if bad else ''}{', '.join(bad)}",
    )
    vcts = [
        (f"{d['metadata']['name']} {v['metadata']['name']}", v["metadata"].get("labels", {}))
        for d in docs
        if d["kind"] == "StatefulSet"
        for v in d["spec"].get("volumeClaimTemplates", [])
    ]
    check(
        all("app.kubernetes.io/version" not in lab for _, lab in vcts),
        f"no version label in volumeClaimTemplates (immutable): {[w for w, _ in vcts]}",
    )


def fdb_store(store, c, pod, by_kind):
    cluster_path = Path(store[len("fdb:"):])
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    cm_vol = [n for n, v in vols.items() if "configMap" in v]
    check(len(cm_vol) == 1, "one ConfigMap volume")
    if len(cm_vol) != 1:
        return
    cm_name = vols[cm_vol[0]]["configMap"]["name"]
    m = mounts[cm_vol[0]]
    cms = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    check(
        cm_name in cms and cluster_path.name in cms[cm_name]["data"],
        f"ConfigMap {cm_name} has key {cluster_path.name}",
    )
    check(
        str(cluster_path.parent) == m["mountPath"] and m.get("readOnly") is True,
        f"mounted read-only at {m['mountPath']} (the store path's directory)",
    )


def etcd_store(store, by_kind, np):
    """IDGEN_STORE names every member of the overlay's etcd StatefulSet by its stable name
    through the headless Service, on the members' client port, which the NetworkPolicies let
    idgen reach."""
    m = re.fullmatch(r"etcd://([^/]+)(/.*)?", store)
    check(m is not None, f"IDGEN_STORE {store} is etcd://HOST:PORT,…/PREFIX")
    if m is None:
        return
    endpoints = [e.rsplit(":", 1) for e in m.group(1).split(",")]
    etcds = [d for d in by_kind["StatefulSet"] if d["metadata"]["name"] != "idgen"]
    check(len(etcds) == 1, f"one etcd StatefulSet ({[d['metadata']['name'] for d in etcds]})")
    if len(etcds) != 1:
        return
    e = etcds[0]
    name, svc_name, n = e["metadata"]["name"], e["spec"]["serviceName"], e["spec"]["replicas"]
    check(n >= 3 and n % 2 == 1, f"etcd: {n} members (odd, at least 3)")
    pod = e["spec"]["template"]["spec"]
    elabels = e["spec"]["template"]["metadata"]["labels"]
    (ec,) = pod["containers"]
    eports = {p["name"]: p["containerPort"] for p in ec["ports"]}
    client = eports.get("client")
    check(
        [h for h, _ in endpoints] == [f"{name}-{i}.{svc_name}" for i in range(n)]
        and all(p == str(client) for _, p in endpoints),
        f"the endpoints are the {n} members {name}-N.{svc_name} on the client port {client}",
    )
    svcs = {d["metadata"]["name"]: d for d in by_kind["Service"]}
    svc = svcs.get(svc_name, {}).get("spec", {})
    check(
        svc.get("clusterIP") == "None"
        and svc.get("publishNotReadyAddresses") is True
        and svc.get("selector", {"-": "-"}).items() <= elabels.items(),
        f"etcd: {svc_name} is headless, selects the members and publishes them before ready",
    )
    eenv = {x["name"]: x.get("value") for x in ec["env"]}
    peer = eports.get("peer")
    check(
        eenv.get("ETCD_ADVERTISE_CLIENT_URLS") == f"http://$(POD_NAME).{svc_name}:{client}"
        and eenv.get("ETCD_INITIAL_ADVERTISE_PEER_URLS") == f"http://$(POD_NAME).{svc_name}:{peer}"
        and eenv.get("ETCD_NAME") == "$(POD_NAME)"
        and [x["name"] for x in ec["env"]].index("POD_NAME") == 0,
        "etcd: each member advertises its own stable name",
    )
    check(
        (eenv.get("ETCD_INITIAL_CLUSTER") or "").split(",")
        == [f"{name}-{i}=http://{name}-{i}.{svc_name}:{peer}" for i in range(n)],
        f"etcd: ETCD_INITIAL_CLUSTER lists the {n} members",
    )
    check(
        eenv.get("ETCD_AUTO_COMPACTION_RETENTION") is not None,
        "etcd: auto-compaction on (every lease renewal is a revision)",
    )
    check(bool(e["spec"].get("volumeClaimTemplates")), "etcd: a volume per member")
    spread(pod, elabels, "etcd")
    pdbs = [d for d in by_kind["PodDisruptionBudget"]
            if d["spec"]["selector"]["matchLabels"].items() <= elabels.items()]
    check(
        len(pdbs) == 1 and pdbs[0]["spec"].get("maxUnavailable") == (n - 1) // 2,
        f"etcd: a PodDisruptionBudget that keeps a quorum (at most {(n - 1) // 2} down)",
    )
    to_etcd = [
        r for r in np["spec"]["egress"]
        if any(t.get("podSelector", {}).get("matchLabels", {"-": "-"}).items() <= elabels.items()
               and "namespaceSelector" not in t for t in r.get("to", []))
    ]
    check(
        len(to_etcd) == 1
        and [(p["port"], p.get("protocol", "TCP")) for p in to_etcd[0]["ports"]] == [(client, "TCP")],
        f"idgen's NetworkPolicy: egress to the etcd members on TCP {client} only",
    )
    enps = [d for d in by_kind["NetworkPolicy"]
            if d["spec"]["podSelector"]["matchLabels"].items() <= elabels.items()]
    check(len(enps) == 1, "etcd: a NetworkPolicy of its own")
    if len(enps) == 1:
        spec = enps[0]["spec"]
        idgen_labels = {"app.kubernetes.io/name": "idgen"}
        admits = {
            p["port"]: [peer.get("podSelector", {}).get("matchLabels", {})
                        for peer in rule.get("from", [])]
            for rule in spec.get("ingress", []) for p in rule.get("ports", [])
        }
        check(
            set(spec.get("policyTypes", [])) == {"Ingress", "Egress"}
            and admits.get(client) == [idgen_labels]
            and all(s.items() <= elabels.items() for s in admits.get(peer, [{"-": "-"}])),
            f"etcd: its NetworkPolicy admits idgen on {client} and the members on {peer}",
        )


def monitoring(root, by_kind, svcs, sts, ports, setting):
    """The ServiceMonitor scrapes the admin port's /metrics over the scheme IDGEN_TLS_ADMIN
    implies, as job "idgen"; the PrometheusRule's groups are deploy/prometheus/alerts.yml's."""
    sms = by_kind.get("ServiceMonitor", [])
    check(len(sms) == 1, "one ServiceMonitor")
    if sms:
        spec = sms[0]["spec"]
        sel = spec["selector"]["matchLabels"]
        picked = {n: s for n, s in svcs.items() if sel.items() <= s["metadata"]["labels"].items()}
        headless = sts["spec"]["serviceName"]
        check(headless in picked, f"ServiceMonitor selects the headless Service {headless}")
        eps = spec.get("endpoints", [])
        scheme = "https" if (setting("tls_admin") or "off") == "tls" else "http"
        for ep in eps:
            targets = {
                n: [p for p in s["spec"]["ports"] if p["name"] == ep.get("port")]
                for n, s in picked.items()
            }
            check(
                targets.get(headless)
                and ports.get(targets[headless][0]["targetPort"]) == ports["admin"]
                and all(not t for n, t in targets.items() if n != headless),
                f"ServiceMonitor port {ep.get('port')}: the admin port {ports['admin']} of "
                f"{headless} only",
            )
            check(ep.get("path", "/metrics") == "/metrics", f"path {ep.get('path')}")
            check(
                ep.get("scheme", "http") == scheme,
                f"scheme {ep.get('scheme', 'http')} (tls_admin {setting('tls_admin') or 'off'})",
            )
        check(len(eps) == 1, f"one endpoint ({len(eps)})")
        job = svcs[headless]["metadata"]["labels"].get(spec.get("jobLabel", ""), headless)
        check(job == "idgen", f"job label {job!r} (the alerts' and dashboard's job)")
    rules = by_kind.get("PrometheusRule", [])
    check(len(rules) == 1, "one PrometheusRule")
    if rules:
        source = load_all(root / "deploy" / "prometheus" / "alerts.yml")[0]
        check(
            rules[0]["spec"] == {"groups": source["groups"]},
            "PrometheusRule groups are exactly deploy/prometheus/alerts.yml's "
            "(regenerate with scripts/gen-prometheusrule)",
        )


def k8s_overlays(rendered):
    """What the overlays share is the base: the same idgen objects and labels, apart from what
    each overlay is for (the store and its settings, their volumes, the image tag, the store's
    egress rule)."""
    print("k8s/overlays (across):")

    def base_part(docs):
        out = {}
        for d in docs:
            if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") != "idgen":
                continue
            if d["kind"] == "ConfigMap":
                continue
            d = yaml.safe_load(yaml.safe_dump(d))
            if d["kind"] == "StatefulSet":
                pod = d["spec"]["template"]["spec"]
                (c,) = pod["containers"]
                c["env"] = [
                    e for e in c["env"]
                    if e["name"] != "IDGEN_STORE"
                    and not e["name"].startswith(("IDGEN_POSTGRES_", "IDGEN_ETCD_", "IDGEN_FDB_"))
                ]
                c["image"] = c["image"].split(":")[0]
                keep = {"tls", "tmp"}
                c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] in keep]
                pod["volumes"] = [v for v in pod["volumes"] if v["name"] in keep]
            if d["kind"] == "NetworkPolicy":
                d["spec"]["egress"] = d["spec"]["egress"][1:]
            out[(d["kind"], d["metadata"]["name"])] = d
        return out

    parts = {name: base_part(docs) for name, docs in rendered.items()}
    first = next(iter(parts.values()))
    check(len(first) >= 7, f"{len(first)} idgen objects from the base")
    for name, part in parts.items():
        diff = sorted(k for k in set(first) | set(part) if first.get(k) != part.get(k))
        check(not diff, f"overlays/{name}: the base's objects, changed only for the store {diff}")


def port_of(addr):
    """The port of "host:port" ("[v6]:port"), None for "off" or nothing."""
    if addr is None or addr == "off":
        return None
    return int(addr.rsplit(":", 1)[1])


def host_of(addr):
    return addr.rsplit(":", 1)[0].strip("[]")


def settings_of(c):
    """A container's `idgen serve` setting by key: its flag in args, else its IDGEN_* variable."""
    args = c.get("args", [])
    env = {e["name"]: e.get("value") for e in c.get("env", [])}

    def setting(key):
        flag = "--" + key.replace("_", "-")
        for i, a in enumerate(args):
            if a == flag and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
        return env.get("IDGEN_" + key.upper())

    return setting


def tls_wiring(setting, c, pod, ports, svcs, sts):
    """The StatefulSet serves its ID ports over (mutual) TLS with the files of the Secret
    idgen-tls, and every port agrees across the flags, the container, the Services and the
    probes."""
    print("k8s/ TLS wiring:")
    listen = setting("listen") or "127.0.0.1:7420"
    check(
        listen == "off" or host_of(listen) in ("127.0.0.1", "::1", "localhost"),
        f"plaintext ID protocol on loopback or off ({listen}): the pod serves it over TLS only",
    )
    check(
        port_of(listen) not in ports.values(),
        "no container port for the plaintext ID protocol",
    )
    tls_listen = setting("tls_listen")
    check(
        tls_listen is not None and port_of(tls_listen) == ports.get("id-tls"),
        f"tls_listen {tls_listen} is container port id-tls {ports.get('id-tls')}",
    )
    check(
        setting("tls_client_ca") is not None,
        "tls_client_ca set: the ID protocol's TLS listener and HTTPS require client certificates",
    )
    http = setting("http_listen") or "127.0.0.1:7422"
    check(
        http == "off" or (setting("tls_http") == "true" and port_of(http) == ports.get("https")),
        f"HTTP ID API {http} off, or HTTPS (tls_http) on container port https",
    )
    admin = setting("admin_listen") or "127.0.0.1:7421"
    check(
        port_of(admin) == ports.get("admin"),
        f"admin_listen {admin} is container port admin {ports.get('admin')}",
    )
    tls_admin = setting("tls_admin") or "off"
    check(
        tls_admin in ("off", "tls"),
        f"tls_admin {tls_admin}: not mtls (the kubelet's probes present no client certificate)",
    )
    scheme = "HTTPS" if tls_admin == "tls" else "HTTP"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        got = c[probe]["httpGet"].get("scheme", "HTTP")
        check(got == scheme, f"{probe} scheme {got} (tls_admin {tls_admin})")
    headless = svcs[sts["spec"]["serviceName"]]["metadata"].get("annotations", {})
    check(
        headless.get("prometheus.io/port") == str(ports.get("admin"))
        and headless.get("prometheus.io/scheme", "http") == scheme.lower(),
        f"Prometheus scrapes the admin port {ports.get('admin')} over {scheme.lower()}",
    )
    for name, s in svcs.items():
        for p in s["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            number = ports.get(target, target)
            check(
                number in ports.values() and number == p["port"],
                f"Service {name} port {p['name']} {p['port']} -> container port {target} ({number})",
            )
    # The certificate files are the Secret's keys, in its read-only, updatable mount.
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    for key, want in (("tls_cert", "tls.crt"), ("tls_key", "tls.key"), ("tls_client_ca", "ca.crt")):
        path = setting(key)
        if path is None:
            check(False, f"{key} is set")
            continue
        path = Path(path)
        m = mounts.get(str(path.parent))
        vol = vols.get(m["name"], {}) if m else {}
        secret = vol.get("secret", {})
        check(
            m is not None
            and secret.get("secretName") == "idgen-tls"
            and path.name == want
            and not secret.get("items"),
            f"{key} {path} is key {want} of the Secret idgen-tls mounted at {path.parent}",
        )
        check(
            m is not None and m.get("readOnly") is True and "subPath" not in m,
            f"{key}: mounted read-only, without subPath (Secret updates reach the file)",
        )
    psc = pod["securityContext"]
    modes = [v["secret"].get("defaultMode", 0o644) for v in vols.values() if "secret" in v]
    check(
        bool(modes) and all(m & 0o040 and not m & 0o007 for m in modes) and "fsGroup" in psc,
        f"the key is readable by the pod's fsGroup {psc.get('fsGroup')} only "
        f"(defaultMode {[oct(m) for m in modes]})",
    )


def network_policy(by_kind, labels, ports, setting):
    """The NetworkPolicy admits exactly the ports the pods serve, the ID ports from labelled
    clients and the admin port from monitoring only, and lets the pods reach the store and
    DNS only."""
    print("k8s/ NetworkPolicy:")
    (np,) = by_kind.get("NetworkPolicy", [None])
    if np is None:
        check(False, "a NetworkPolicy")
        return
    spec = np["spec"]
    check(
        spec["podSelector"]["matchLabels"].items() <= labels.items(),
        "NetworkPolicy selects the pods",
    )
    check(
        set(spec.get("policyTypes", [])) == {"Ingress", "Egress"},
        "policyTypes Ingress and Egress (default deny both ways)",
    )
    admitted = {}
    for rule in spec.get("ingress", []):
        peers = rule.get("from", [])
        check(bool(peers), f"ingress to {[p['port'] for p in rule.get('ports', [])]} names its peers")
        for p in rule.get("ports", []):
            number = ports.get(p["port"], p["port"])
            admitted[number] = peers
    check(
        set(admitted) == set(ports.values()),
        f"ingress admits exactly the container ports {sorted(ports.values())} "
        f"(admits {sorted(admitted)})",
    )

    def selectors(peers):
        return [
            {k: p.get(k, {}).get("matchLabels", {}) for k in ("namespaceSelector", "podSelector")}
            for p in peers
        ]

    id_ports = [port_of(setting("tls_listen")), port_of(setting("http_listen"))]
    for port in [p for p in id_ports if p is not None]:
        peers = selectors(admitted.get(port, []))
        check(
            bool(peers)
            and all(s["podSelector"] for s in peers)
            and all("ipBlock" not in p for p in admitted.get(port, [])),
            f"ID port {port} from labelled client pods only",
        )
    admin_peers = selectors(admitted.get(ports.get("admin"), []))
    check(
        any(
            s["namespaceSelector"].get("kubernetes.io/metadata.name") == "monitoring"
            for s in admin_peers
        )
        and all(s not in selectors(admitted.get(id_ports[0], [])) for s in admin_peers),
        "admin port from the monitoring namespace, not from the ID ports' clients",
    )
    egress = spec.get("egress", [])
    check(all(rule.get("to") for rule in egress), "every egress rule names its destination")

    def allows(port, proto):
        return any(
            p.get("protocol", "TCP") == proto and p["port"] <= port <= p.get("endPort", p["port"])
            for rule in egress
            for p in rule.get("ports", [])
        )

    check(allows(53, "UDP") and allows(53, "TCP"), "egress to DNS (53 UDP and TCP)")
    store = setting("store") or "embedded"
    url = pg_url(store)
    store_ports = (
        [4500] if store.startswith("fdb:")
        else [2379] if store.startswith("etcd")
        else sorted({port for _, port in url[1]}) if url
        else []
    )
    check(
        bool(store_ports) and all(allows(p, "TCP") for p in store_ports),
        f"egress to the store ({store}: TCP {store_ports})",
    )
    everything = sorted(
        (p.get("protocol", "TCP"), p["port"], p.get("endPort", p["port"]))
        for rule in egress
        for p in rule.get("ports", [])
    )
    check(
        all(rule.get("ports") for rule in egress)
        and all(
            lo == hi == 53 or (proto == "TCP" and any(lo <= p <= hi for p in store_ports))
            for proto, lo, hi in everything
        ),
        f"egress to nothing else ({everything})",
    )


def dockerfile(root):
    print("Dockerfile:")
    text = (root / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    # Instructions only (comments dropped, continuation lines joined), by stage.
    logical = re.sub(r"\\\n", " ", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")
    ))
    instructions = [line.strip() for line in logical.splitlines() if line.strip()]
    stages = []
    for ins in instructions:
        if re.match(r"FROM\s", ins, re.I):
            stages.append([ins])
        elif stages:
            stages[-1].append(ins)
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M)
    check(len(froms) >= 2, f"multi-stage: {[f for f, _ in froms]}")
    check(froms[0][0].startswith("rust:") and "bookworm" in text, "a rust:*-bookworm builder")
    runtime_base = froms[-1][0]
    check(
        runtime_base.startswith("gcr.io/distroless/") or runtime_base == "scratch",
        f"a runtime without a shell: distroless or scratch ({runtime_base})",
    )
    check(
        not runtime_base.startswith("gcr.io/distroless/") or "debian12" in runtime_base,
        "the distroless release is the builder's (bookworm = debian12: its glibc)",
    )
    final = stages[-1] if stages else []
    keywords = [ins.split(None, 1)[0].upper() for ins in final]
    check("RUN" not in keywords, f"no RUN in the runtime stage ({sorted(set(keywords))})")
    check("SHELL" not in keywords, "no SHELL in the runtime stage")
    check(
        not any(re.search(r"\bcurl\b", ins) for ins in final),
        "nothing in the runtime stage uses curl",
    )
    users = [ins.split(None, 1)[1] for ins in final if ins.upper().startswith("USER ")]
    m = re.fullmatch(r"(\d+)(?::(\d+))?", users[-1].strip()) if users else None
    check(
        m is not None and int(m.group(1)) != 0 and (m.group(2) is None or int(m.group(2)) != 0),
        f"the runtime user is numeric and not root ({users})",
    )
    for pkg in ("protobuf-compiler", "libprotobuf-dev", "libclang-dev", "clang"):
        check(re.search(rf"\b{re.escape(pkg)}\b", text) is not None, f"builder installs {pkg}")
    check(re.search(r'^ARG FEATURES="etcd postgres"', text, re.M) is not None, 'ARG FEATURES="etcd postgres" (or with fdb)')
    check(re.search(r'^ARG REVISION=', text, re.M) is not None, "ARG REVISION")
    check(re.search(r'^ARG FDB_VERSION=\d+\.\d+\.\d+$', text, re.M) is not None, "ARG FDB_VERSION")
    check("IDGEN_BUILD_REVISION=\"$REVISION\"" in text, "the build records REVISION for idgen --version")
    builder = " ".join(" ".join(st) for st in stages[:-1])
    check(
        "foundationdb-clients_${FDB_VERSION}" in builder
        and "foundationdb-clients" not in " ".join(final),
        "foundationdb-clients fetched in a builder stage only (FEATURES=fdb)",
    )
    check(
        re.search(r"libfdb_c\.so\s+/runtime/usr/lib/", builder) is not None
        and any(re.match(r"COPY\s+--from=\S+\s+/runtime/\s+/$", ins) for ins in final),
        "with fdb, the runtime gets libfdb_c.so from the builder (COPY, into /usr/lib)",
    )
    check(re.search(r"^EXPOSE 7420 7421 7422$", text, re.M) is not None, "EXPOSE 7420 7421 7422")
    health = [ins for ins in final if ins.upper().startswith("HEALTHCHECK")]
    cmd = re.search(r"\bCMD\s+(\[.*\])\s*$", health[0]) if health else None
    try:
        argv = json.loads(cmd.group(1)) if cmd else None
    except ValueError:
        argv = None
    check(
        argv is not None and argv[:3] == ["idgen", "health", "--ready"],
        f"HEALTHCHECK: idgen health --ready in exec form ({argv})",
    )
    check('ENTRYPOINT ["idgen"]' in text, 'ENTRYPOINT ["idgen"]')
    check(
        'CMD ["serve", "--listen", "0.0.0.0:7420", "--admin-listen", "0.0.0.0:7421", '
        '"--http-listen", "0.0.0.0:7422"]' in text,
        "CMD serve on 0.0.0.0:7420 / 0.0.0.0:7421 / 0.0.0.0:7422",
    )


def systemd(root, invocations):
    print("idgen.service:")
    text = (root / "deploy" / "idgen.service").read_text(encoding="utf-8")
    keys = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys.setdefault(k.strip(), []).append(v.strip())
    ex = keys["ExecStart"][0]
    check(ex == "/usr/local/bin/idgen serve --config /etc/idgen/idgen.toml", f"ExecStart={ex}")
    for k, v in [
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
        ("StateDirectory", "idgen"),
        ("CapabilityBoundingSet", ""),
        ("KillSignal", "SIGTERM"),
        ("Restart", "on-failure"),
        ("SystemCallFilter", "@system-service"),
    ]:
        check(v in keys.get(k, []), f"{k}={v}")
    check("RestrictAddressFamilies" in keys, "RestrictAddressFamilies")
    check(
        "2" in keys.get("RestartPreventExitStatus", []),
        "RestartPreventExitStatus=2: a configuration error (exit 2) is not restarted",
    )
    # idgen leads each stderr line with its syslog level (<3> … <7>) under journald.
    check(
        keys.get("StandardError", ["journal"])[-1].startswith("journal")
        and keys.get("SyslogLevelPrefix", ["yes"])[-1] == "yes",
        "stderr to the journal with SyslogLevelPrefix=yes (log levels)",
    )
    envs = " ".join(keys.get("Environment", []))
    check(
        re.search(r"\bIDGEN_LOG=", envs) is not None and "RUST_LOG" not in envs,
        f"the log level by IDGEN_LOG, not RUST_LOG (Environment={envs})",
    )
    check(
        "yes" in keys.get("DynamicUser", []) or "User" in keys, "DynamicUser or a dedicated User"
    )
    toml = (root / "deploy" / "idgen.toml").read_text(encoding="utf-8")
    val = lambda k, d: (  # noqa: E731
        re.search(rf'^{k}\s*=\s*"([^"]+)"', toml, re.M).group(1)
        if re.search(rf'^{k}\s*=\s*"([^"]+)"', toml, re.M)
        else d
    )
    drain, shut = seconds(val("drain_delay", "0s")), seconds(val("shutdown_timeout", "10s"))
    stop = seconds(keys["TimeoutStopSec"][0])
    check(stop > drain + shut, f"TimeoutStopSec {stop:g}s > drain {drain:g}s + shutdown {shut:g}s")
    args = [str(root / "deploy" / "idgen.toml") if a == "/etc/idgen/idgen.toml" else a
            for a in shlex.split(ex)[2:]]
    invocations.append(("idgen.service (config: deploy/idgen.toml)", {}, args))


def toml_sample(root, serve_help):
    print("idgen.toml:")
    toml = (root / "deploy" / "idgen.toml").read_text(encoding="utf-8")
    flags = set(re.findall(r"^\s+--([a-z-]+)", serve_help, re.M)) - {"config", "check-config", "help"}
    for flag in sorted(flags):
        key = flag.replace("-", "_")
        check(
            re.search(rf"^#? ?{key} = ", toml, re.M) is not None,
            f"setting {key} (--{flag}) is in the sample",
        )


# ---- Prometheus rules, the Grafana dashboard, and their queries -----------------------------

# Where every alert's runbook_url points: a heading of docs/OPERATIONS.md.
RUNBOOK_BASE = "https://github.com/idgen/idgen/blob/main/docs/OPERATIONS.md#"
# Series that Prometheus makes itself, not the node.
SCRAPE_SERIES = {"up"}
# Labels a scrape adds (target labels), so no node exposes them.
TARGET_LABELS = {"job", "instance"}
# Metric names the rules and the dashboard may use: the node's, the process's, the scrape's.
METRIC_NAME = re.compile(r"\b(idgen_[a-z0-9_]+|process_[a-z0-9_]+|up)\b")
SELECTOR = re.compile(r"\b(idgen_[a-z0-9_]+|process_[a-z0-9_]+|up)\s*\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
SELECTOR_ANY = re.compile(r"\b(idgen_[a-z0-9_]+|process_[a-z0-9_]+|up)\b(\s*\{[^}]*\})?")
COUNTER_FUNCS = re.compile(r"\b(rate|irate|increase)\(\s*$")


class Scrape:
    """A node's /metrics: every sample name, its family's type, and the label values seen."""

    def __init__(self, text):
        self.types = dict(re.findall(r"^# TYPE (\S+) (\S+)", text, re.M))
        self.labels = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
            if not m:
                continue
            seen = self.labels.setdefault(m.group(1), {})
            for k, _, v in MATCHER.findall(m.group(3) or ""):
                seen.setdefault(k, set()).add(v)

    def type_of(self, sample):
        """The type of the family a sample name belongs to (None: not on /metrics)."""
        if sample not in self.labels:
            return None
        if sample in self.types:
            return self.types[sample]
        for suffix in ("_total", "_bucket", "_sum", "_count", "_created", "_info"):
            if sample.endswith(suffix) and sample[: -len(suffix)] in self.types:
                return self.types[sample[: -len(suffix)]]
        return None


def strip_strings(expr):
    """The expression with its string literals emptied (label values hold no metric names)."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def check_expr(what, expr, scrape):
    """Every metric an expression names is on the live node's /metrics, of the type its
    suffix and its use say (counters and histogram series only inside rate/irate/increase,
    gauges never; _bucket only of a histogram), and every label it selects on exists there
    (with the value, for an `=` matcher)."""
    bare = strip_strings(expr)
    seen_uses = set()
    for m in METRIC_NAME.finditer(bare):
        name = m.group(1)
        in_rate = COUNTER_FUNCS.search(bare[: m.start()]) is not None
        if name in SCRAPE_SERIES or (name, in_rate) in seen_uses:
            continue
        seen_uses.add((name, in_rate))
        kind = scrape.type_of(name)
        if kind is None:
            check(False, f"{what}: {name} is on /metrics")
            continue
        if name.endswith(("_bucket", "_sum", "_count")) and kind == "histogram":
            ok = in_rate
            rule = "a histogram series, inside rate/increase"
        elif kind == "counter":
            ok = in_rate and name.endswith("_total")
            rule = "a counter (_total), inside rate/increase"
        else:
            ok = kind in ("gauge", "info") and not in_rate and not name.endswith("_bucket")
            rule = "a gauge, not inside rate/increase"
        check(ok, f"{what}: {name} ({kind}) is {rule}")
    for name, body in sorted(set(SELECTOR.findall(expr))):
        if name in SCRAPE_SERIES:
            continue
        seen = scrape.labels.get(name, {})
        for label, op, value in MATCHER.findall(body):
            if label in TARGET_LABELS:
                continue
            ok = label in seen and (op != "=" or value in seen[label])
            check(ok, f"{what}: {name}{{{label}{op}\"{value}\"}} matches series on /metrics")


def github_anchors(markdown):
    """The anchors GitHub gives the headings of a Markdown file (outside code blocks)."""
    anchors, counts, fenced = set(), {}, False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def alert_rules(root):
    rules = load_all(root / "deploy" / "prometheus" / "alerts.yml")[0]
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def alerts(root, metrics_text):
    print("prometheus/alerts.yml:")
    scrape = Scrape(metrics_text)
    check(len(scrape.types) > 10, f"{len(scrape.types)} metric families scraped from a live node")
    # The TLS families exist only on a node that serves TLS: validate-deploy starts it so.
    check(
        scrape.type_of("idgen_tls_handshakes_total") is not None,
        "the live node serves TLS (its TLS metric families are on /metrics)",
    )
    rules = alert_rules(root)
    used = set()
    for r in rules:
        check_expr(r["alert"], r["expr"], scrape)
        used |= set(METRIC_NAME.findall(strip_strings(r["expr"])))

    # Every alert fires in at least one test case (an expected alert, not only `[]`).
    tests = load_all(root / "deploy" / "prometheus" / "alerts.test.yml")[0]
    fires = {
        t["alertname"]
        for case in tests["tests"]
        for t in case.get("alert_rule_test", [])
        if t.get("exp_alerts")
    }
    names = [r["alert"] for r in rules]
    check(len(set(names)) == len(names), f"{len(names)} alerts, each name once")
    for name in names:
        check(name in fires, f"{name} fires in a case of alerts.test.yml")
    check(fires <= set(names), f"tests expect only alerts that exist ({sorted(fires - set(names))})")
    series = {
        re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s["series"].strip()).group(0)
        for case in tests["tests"]
        for s in case["input_series"]
    }
    for s in sorted(series - SCRAPE_SERIES):
        check(scrape.type_of(s) is not None, f"test series {s} exists on /metrics")

    # Every alert links its runbook: a heading of docs/OPERATIONS.md.
    anchors = github_anchors((root / "docs" / "OPERATIONS.md").read_text(encoding="utf-8"))
    for r in rules:
        url = r.get("annotations", {}).get("runbook_url", "")
        anchor = url[len(RUNBOOK_BASE):] if url.startswith(RUNBOOK_BASE) else None
        check(
            anchor is not None and anchor in anchors,
            f"{r['alert']}: runbook_url is the base + #{anchor}, a heading of docs/OPERATIONS.md",
        )
    wanted = {
        "idgen_tls_certificate_expiry_timestamp_seconds",
        "idgen_tls_handshakes_total",
        "idgen_lease_time_remaining_seconds",
        "idgen_lease_ttl_seconds",
        "idgen_lease_renewals_total",
        "idgen_lease_renewal_duration_seconds_bucket",
        "idgen_clock_rollback_events_total",
        "idgen_clock_behind",
        "idgen_clock_drift_seconds",
        "idgen_worker_ids_free",
        "idgen_worker_ids_capacity",
        "idgen_layout_time_remaining_seconds",
        "idgen_node_info",
        "idgen_ready",
        "idgen_errors_total",
        "idgen_requests_total",
        "idgen_http_requests_total",
        "idgen_connections_refused_total",
        "idgen_request_duration_seconds_bucket",
        "up",
    }
    check(wanted <= used, f"the alerts cover targets, lease, errors, latency, clocks, capacity, TLS "
          f"(missing: {sorted(wanted - used)})")


# What Grafana substitutes for the dashboard's variables when validate-deploy runs its queries.
DASHBOARD_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "${job:regex}": "idgen",
    "${instance:regex}": ".*",
    "$job": "idgen",
    "$instance": ".*",
}


def dashboard_panels(doc):
    """Every panel, rows' nested panels included."""
    for p in doc.get("panels", []):
        yield p
        yield from p.get("panels", [])


def dashboard_queries(root):
    """(panel title, expression with the variables substituted) of every query of the
    dashboard, its variables' queries included."""
    doc = json.loads((root / "deploy" / "grafana" / "idgen.json").read_text(encoding="utf-8"))
    out = []
    for p in dashboard_panels(doc):
        for t in p.get("targets", []):
            if "expr" in t:
                out.append((p.get("title", "?"), t["expr"]))
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"\s*label_values\((.*),\s*[a-z_]+\)\s*", q or "")
            out.append((f"variable {var['name']}", m.group(1) if m else q))
    subst = []
    for title, expr in out:
        for k in sorted(DASHBOARD_VARIABLES, key=len, reverse=True):
            expr = expr.replace(k, DASHBOARD_VARIABLES[k])
        subst.append((title, expr))
    return doc, subst


def dashboard(root, metrics_text):
    print("grafana/idgen.json:")
    scrape = Scrape(metrics_text)
    doc, queries = dashboard_queries(root)
    check(isinstance(doc.get("schemaVersion"), int) and doc["schemaVersion"] >= 39,
          f"schemaVersion {doc.get('schemaVersion')} (Grafana 11 or later)")
    check(bool(doc.get("uid")) and bool(doc.get("title")), f"uid {doc.get('uid')!r}, a title")
    variables = {v["name"]: v for v in doc.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    check(ds.get("type") == "datasource" and ds.get("query") == "prometheus",
          "a `datasource` variable of Prometheus data sources")
    for name in ("job", "instance"):
        v = variables.get(name, {})
        check(v.get("type") == "query" and v.get("datasource", {}).get("uid") == "${datasource}",
              f"a `{name}` query variable on ${{datasource}}")
    panels = list(dashboard_panels(doc))
    ids = [p.get("id") for p in panels]
    check(len(set(ids)) == len(ids) and None not in ids, f"{len(ids)} panels, distinct ids")
    graphs = [p for p in panels if p.get("type") != "row"]
    off_ds, no_query, unfiltered = [], [], []
    for p in graphs:
        title = p.get("title")
        if p.get("datasource", {}).get("uid") != "${datasource}" or any(
            t.get("datasource", {}).get("uid") != "${datasource}" for t in p.get("targets", [])
        ):
            off_ds.append(title)
        if not p.get("targets"):
            no_query.append(title)
        for t in p.get("targets", []):
            sels = list(SELECTOR_ANY.finditer(t.get("expr", "")))
            if not sels or not all(
                'job=~"$job"' in (m.group(2) or "") and 'instance=~"$instance"' in (m.group(2) or "")
                for m in sels
            ):
                unfiltered.append(f"{title} {t.get('refId')}")
    check(not off_ds, f"every panel and query uses ${{datasource}} (not: {off_ds})")
    check(not no_query, f"every panel of the {len(graphs)} has queries (not: {no_query})")
    check(not unfiltered, f"every selector filters on $job and $instance (not: {unfiltered})")
    for title, expr in queries:
        check_expr(f"dashboard {title!r}", expr, scrape)
    used = set()
    for _, expr in queries:
        used |= set(METRIC_NAME.findall(strip_strings(expr)))
    wanted = {
        "idgen_ids_issued_total",
        "idgen_requests_total",
        "idgen_http_requests_total",
        "idgen_request_duration_seconds_bucket",
        "idgen_errors_total",
        "idgen_lease_time_remaining_seconds",
        "idgen_lease_ttl_seconds",
        "idgen_clock_drift_seconds",
        "idgen_worker_ids_free",
        "idgen_connections_open",
        "idgen_connections_total",
        "idgen_connections_refused_total",
        "idgen_ready",
    }
    check(wanted <= used, f"panels for throughput, latency, errors, lease, drift, worker IDs, "
          f"connections, readiness (missing: {sorted(wanted - used)})")


def selectors_of(expr):
    """The vector selectors of an expression (name and matchers), to query each alone."""
    return sorted({m.group(1) + (m.group(2) or "").strip() for m in SELECTOR_ANY.finditer(expr)})


def live_queries(root, url, deadline_s=60.0):
    """Runs every dashboard query and every alert expression on a Prometheus that scrapes a
    live node (validate-deploy starts both): each must evaluate without error, each
    dashboard query must return series, and so must every selector of the alerts on its
    own (a misspelt name or label would return nothing)."""
    print(f"queries on {url}:")
    start = time.monotonic()

    def query(expr):
        left = deadline_s - (time.monotonic() - start)
        if left <= 0:
            return {"status": "error", "error": "validate-deploy's query budget is used up"}
        q = urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=min(left, 10)) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            try:
                return json.load(e)
            except ValueError:
                return {"status": "error", "error": f"HTTP {e.code}"}
        except (OSError, ValueError) as e:
            return {"status": "error", "error": str(e)}

    _, queries = dashboard_queries(root)
    for title, expr in queries:
        got = query(expr)
        n = len(got.get("data", {}).get("result", []))
        check(got.get("status") == "success" and n > 0,
              f"dashboard {title!r}: {n} series ({got.get('error', 'ok')}): {' '.join(expr.split())}")
    for r in alert_rules(root):
        got = query(r["expr"])
        check(got.get("status") == "success",
              f"alert {r['alert']} evaluates ({got.get('error', 'ok')})")
        for sel in selectors_of(r["expr"]):
            got = query(sel)
            n = len(got.get("data", {}).get("result", []))
            check(got.get("status") == "success" and n > 0,
                  f"alert {r['alert']}: {sel} selects {n} series")


def main():
    if sys.argv[1:2] == ["--queries"]:
        live_queries(Path(sys.argv[2]).resolve(), sys.argv[3])
        sys.exit(1 if FAILURES else 0)
    root = Path(sys.argv[1]).resolve()
    metrics_text = Path(sys.argv[2]).read_text(encoding="utf-8")
    serve_help = Path(sys.argv[3]).read_text(encoding="utf-8")
    invocations = []
    # The default compose file runs a store this machine can run (etcd); each other store has
    # its own file.
    composes = {
        "docker-compose.yml": "etcd://etcd1:2379,etcd2:2379,etcd3:2379/idgen",
        "docker-compose.fdb.yml": "fdb:/var/fdb/fdb.cluster",
        "docker-compose.postgres.yml":
            "postgres://idgen@pg1.example.com:5432,pg2.example.com:5432/idgen?sslmode=verify-full",
        "docker-compose.postgres-demo.yml": "postgres://idgen@postgres:5432/idgen",
    }
    present = sorted(p.name for p in (root / "deploy").glob("docker-compose*.yml"))
    check(present == sorted(composes), f"every compose file in deploy/ is checked ({present})")
    nodes = None
    for name, store in composes.items():
        got = compose(root, name, store, invocations)
        nodes = got if nodes is None else nodes
        check(got == nodes, f"{name}: the nodes of docker-compose.yml ({got})")
    pg_compose(root, "docker-compose.postgres.yml", demo=False)
    pg_compose(root, "docker-compose.postgres-demo.yml", demo=True)
    haproxy(root, nodes)
    rendered = {}
    for arg in sys.argv[5:]:
        overlay, path = arg.split("=", 1)
        rendered[overlay] = load_all(path)
        k8s(root, overlay, rendered[overlay], invocations)
    overlays = sorted(
        p.name for p in (root / "deploy" / "k8s" / "overlays").iterdir() if p.is_dir()
    )
    check(
        sorted(rendered) == overlays == ["etcd", "fdb", "postgres"],
        f"every overlay rendered ({sorted(rendered)}; in deploy/k8s/overlays: {overlays})",
    )
    k8s_overlays(rendered)
    dockerfile(root)
    systemd(root, invocations)
    toml_sample(root, serve_help)
    pg_tls_built = re.search(r"^\s+--postgres-ca\b", serve_help, re.M) is not None
    variables(serve_help, invocations, pg_tls_built)
    if not pg_tls_built:
        # validate-deploy expects this build to refuse each of these as it is (its sslmode),
        # and checks each in full without its TLS settings.
        for what, env, args in list(invocations):
            if uses_pg_tls(env, args):
                env2, args2 = without_pg_tls(env, args)
                what2 = f"{what} without its PostgreSQL TLS settings (this build has none)"
                invocations.append((what2, env2, args2))
    alerts(root, metrics_text)
    dashboard(root, metrics_text)
    with open(sys.argv[4], "w", encoding="utf-8") as out:
        for what, env, args in invocations:
            envs = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items()))
            out.write(f"{what}\x1f{envs}\x1f{' '.join(shlex.quote(a) for a in args)}\n")
    if FAILURES:
        print(f"check-deploy: {len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

"""docs/openapi.yaml against a live node.

The node is the real `idgen serve --store memory` binary (IDGEN_BIN) on loopback ephemeral
ports; the client is Python's own http.client and sockets, and the checker is openapi-core
(a third-party validator), so nothing of idgen's Rust code judges its own answers.

* the document is a valid OpenAPI 3.1 document (openapi-spec-validator);
* every documented operation is called, with success and with each documented error status
  that can be provoked (bad format, bad count, bad body, body too large, body too slow, bad
  ID, not ready, connection limit), and each answer's status, headers, content type and body
  are validated against the document (openapi-core), the content type also exactly;
* the document covers what the node serves: on each listener, every documented path answers
  every documented method (never 404/405) and every other method with 405, an `Allow`
  header naming exactly the documented methods and the documented error body; paths of the
  other listener and unknown paths answer 404 with the documented error body.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from pathlib import Path

import yaml
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate as validate_spec

REPO = Path(__file__).resolve().parents[2]
DOC_PATH = REPO / "docs" / "openapi.yaml"
IDGEN_BIN = os.environ.get("IDGEN_BIN", str(REPO / "target" / "debug" / "idgen"))

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
MAX_BATCH = 100
LIMIT_2_63 = 1 << 63
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BASE32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def load_doc():
    with open(DOC_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


def fixed_form(value, alphabet, width):
    out = []
    for _ in range(width):
        value, digit = divmod(value, len(alphabet))
        out.append(alphabet[digit])
    assert value == 0
    return "".join(reversed(out))


class Node:
    """An `idgen serve` process on 127.0.0.1:0 ports; stopped (by its own PID) on close."""

    def __init__(self, *extra):
        if not os.path.isfile(IDGEN_BIN):
            raise AssertionError(
                f"IDGEN_BIN={IDGEN_BIN} is missing: build it with `cargo build -p idgen`"
            )
        self.dir = tempfile.TemporaryDirectory(prefix="idgen-openapi.")
        self.log = open(os.path.join(self.dir.name, "idgen.log"), "w+b")
        data = os.path.join(self.dir.name, "data")
        # Named sequences in the node's own embedded store, made before it starts: a dense
        # one, and one with a single value (to see 409).
        for seq in (["orders"], ["tiny", "--max", "1"]):
            made = subprocess.run(
                [IDGEN_BIN, "seq", "create", *seq, "--data-dir", data],
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
            )
            if made.returncode != 0:
                raise AssertionError(f"idgen seq create {seq}: {made.stderr}")
        args = [
            IDGEN_BIN, "serve", "--store", "embedded",
            "--listen", "127.0.0.1:0",
            "--http-listen", "127.0.0.1:0",
            "--admin-listen", "127.0.0.1:0",
            "--data-dir", data,
            "--shards", "1",
            "--max-batch", str(MAX_BATCH),
            *extra,
        ]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.lines = []
        found = {}
        want = {"admin": "admin on http://", "api": "HTTP ID API on http://"}
        reader = threading.Thread(target=self._read, args=(found, want), daemon=True)
        reader.start()
        reader.join(30)
        if len(found) != len(want):
            self.close()
            raise AssertionError(f"the node printed no addresses in 30 s: {self.lines}\n{self.log_tail()}")
        self.api = found["api"]
        self.admin = found["admin"]
        deadline = time.monotonic() + 20
        while True:
            status, _, _ = request(self.admin, "GET", "/health/ready")
            if status == 200:
                break
            if time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"the node is not ready within 20 s:\n{self.log_tail()}")
            time.sleep(0.05)

    def _read(self, found, want):
        for line in self.proc.stdout:
            line = line.strip()
            self.lines.append(line)
            for key, prefix in want.items():
                if line.startswith(prefix):
                    host, port = line[len(prefix):].rsplit(":", 1)
                    found[key] = (host, int(port))
            if len(found) == len(want):
                return

    def log_tail(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.proc.stdout.close()
        self.log.close()
        self.dir.cleanup()


def request(addr, method, path, body=None, headers=None, timeout=10):
    """One request on a fresh connection: (status, headers as a lower-cased dict, body)."""
    conn = http.client.HTTPConnection(addr[0], addr[1], timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def raw_exchange(addr, head, body_part, wait):
    """Sends a request head and part of its body, then reads until the server closes (or
    `wait` seconds pass): (status, headers, body)."""
    with socket.create_connection(addr, timeout=wait) as s:
        s.sendall(head + body_part)
        chunks = []
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, body


class OpenApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.doc = load_doc()
        cls.openapi = OpenAPI.from_dict(load_doc())
        cls.error_schema = OAS31Validator(
            {**cls.doc["components"]["schemas"]["Error"], "components": cls.doc["components"]}
        )
        cls.server_url = {}
        for server in cls.doc["servers"]:
            if server["description"].startswith("HTTP ID API"):
                cls.server_url["api"] = server["url"]
            elif server["description"].startswith("admin API"):
                cls.server_url["admin"] = server["url"]
        assert set(cls.server_url) == {"api", "admin"}, cls.doc["servers"]
        # A masking keyring (key ID 1), so that format=masked answers.
        cls.keys_dir = tempfile.TemporaryDirectory(prefix="idgen-openapi-keys.")
        keys = os.path.join(cls.keys_dir.name, "mask-keys")
        with open(keys, "w", encoding="utf-8") as f:
            f.write("1:" + os.urandom(32).hex() + "\n")
        cls.node = Node(
            "--http-request-timeout", "1s", "--admin-request-timeout", "1s",
            "--mask-keys-file", keys,
        )
        cls.addr = {"api": cls.node.api, "admin": cls.node.admin}
        cls.checked = set()

    @classmethod
    def tearDownClass(cls):
        cls.node.close()
        cls.keys_dir.cleanup()
        # Every documented (path, method, status) was seen live by some test.
        documented = set()
        for path, item in cls.doc["paths"].items():
            for method, op in item.items():
                if method in ("servers", "parameters"):
                    continue
                for status in op["responses"]:
                    documented.add((path, method.upper(), int(status)))
        # Not provokable on a healthy node: a failure to encode the metrics, a sequence record
        # the node cannot read.
        unreachable = {
            ("/metrics", "GET", 500),
            ("/seq/{name}", "POST", 500),
            ("/seq/{name}/batch", "POST", 500),
        }
        missing = sorted(documented - cls.checked - unreachable)
        if missing:
            raise AssertionError(f"documented answers never seen live: {missing}")

    # --- helpers ---------------------------------------------------------------------

    def listener_paths(self, listener):
        """The documented paths a listener serves (by the paths' `servers`)."""
        url = self.server_url[listener]
        return [
            p for p, item in self.doc["paths"].items()
            if any(s["url"] == url for s in item.get("servers", self.doc["servers"]))
        ]

    def documented_methods(self, path):
        return {m.upper() for m in self.doc["paths"][path] if m not in ("servers", "parameters")}

    def template_of(self, listener, path):
        """The documented path (template) of this listener that `path` falls under, if any:
        a concrete path before a templated one, as OpenAPI matches them."""
        bare = path.split("?", 1)[0]
        mine = self.listener_paths(listener)
        if bare in mine:
            return bare
        for p in mine:
            regex = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(p)) + "$"
            if re.match(regex, bare):
                return p
        return None

    def validate(self, listener, method, path, status, headers, body, req_body=None, req_type="application/json"):
        """Validates one live answer against the document and records it as seen."""
        bare, _, query = path.partition("?")
        args = dict(kv.split("=", 1) for kv in query.split("&") if "=" in kv)
        req = MockRequest(
            self.server_url[listener], method.lower(), bare, args=args,
            data=req_body, content_type=req_type,
        )
        content_type = headers.get("content-type", "")
        resp = MockResponse(body, status_code=status, headers=headers, content_type=content_type)
        try:
            self.openapi.validate_response(req, resp)
        except Exception as e:  # the validator's error says what does not match
            detail = getattr(e, "__cause__", None)
            self.fail(
                f"{listener} {method} {path} -> {status} {content_type} {body[:300]!r} "
                f"does not match the document: {e!r} {detail!r}"
            )
        template = self.template_of(listener, path)
        self.assertIsNotNone(template, f"{listener} {path}")
        op = self.doc["paths"][template][method.lower()]
        documented = op["responses"][str(status)]
        if "$ref" in documented:
            documented = self.doc["components"]["responses"][documented["$ref"].rsplit("/", 1)[1]]
        content = documented.get("content")
        if content and method != "HEAD":
            # Exactly one of the documented media types, parameters included.
            self.assertIn(content_type, content, f"{listener} {method} {path}")
        if method == "HEAD":
            self.assertEqual(body, b"", f"HEAD {path} has a body")
        type(self).checked.add((template, method, status))
        return json.loads(body) if content_type == "application/json" and body else None

    def call(self, listener, method, path, body=None, headers=None, expect=None):
        h = dict(headers or {})
        if body is not None:
            h.setdefault("Content-Type", "application/json")
        status, rh, data = request(self.addr[listener], method, path, body, h)
        if expect is not None:
            self.assertEqual(status, expect, f"{listener} {method} {path} {body!r}: {data!r}")
        return status, rh, self.validate(
            listener, method, path, status, rh, data,
            req_body=body.encode() if isinstance(body, str) else body,
        )

    def assert_error_body(self, status, headers, data, what):
        self.assertEqual(headers.get("content-type"), "application/json", what)
        v = json.loads(data)
        errors = list(self.error_schema.iter_errors(v))
        self.assertEqual(errors, [], f"{what}: {v}")
        self.assertEqual(v["status"], status, what)

    def issue_one(self):
        _, _, v = self.call("api", "POST", "/ids", expect=200)
        return v["id"]

    # --- the document ------------------------------------------------------------------

    def test_the_document_is_valid_openapi_3_1(self):
        doc = load_doc()
        self.assertEqual(doc["openapi"][:4], "3.1.")
        validate_spec(doc)

    # --- the HTTP ID API ---------------------------------------------------------------

    def test_post_ids_in_both_forms(self):
        _, _, v = self.call("api", "POST", "/ids", expect=200)
        self.assertIsInstance(v["id"], int)
        self.assertEqual(v["id_str"], str(v["id"]))
        self.assertLess(v["id"], LIMIT_2_63)
        _, _, v2 = self.call("api", "POST", "/ids?format=number", expect=200)
        self.assertGreater(v2["id"], v["id"])
        _, _, s = self.call("api", "POST", "/ids?format=string", expect=200)
        self.assertEqual(set(s), {"id"})
        self.assertIsInstance(s["id"], str)
        self.assertGreater(int(s["id"]), v2["id"])
        # IDs of today's layout are above 2^53: the reason for the strings.
        self.assertGreater(v["id"], 1 << 53)
        # A body is ignored.
        _, _, v3 = self.call("api", "POST", "/ids", body="whatever", expect=200)
        self.assertGreater(v3["id"], int(s["id"]))

    def test_post_ids_batch_in_both_forms(self):
        for count in (1, 7, MAX_BATCH):
            _, _, v = self.call("api", "POST", "/ids/batch", body=json.dumps({"count": count}), expect=200)
            self.assertEqual(len(v["ids"]), count)
            self.assertEqual(v["ids_str"], [str(i) for i in v["ids"]])
            self.assertEqual(v["ids"], sorted(set(v["ids"])))
        _, _, s = self.call("api", "POST", "/ids/batch?format=string", body='{"count": 3}', expect=200)
        self.assertEqual(set(s), {"ids"})
        self.assertTrue(all(isinstance(i, str) for i in s["ids"]))
        self.assertGreater(int(s["ids"][0]), v["ids"][-1])
        # Without a JSON content type the body is read all the same.
        status, h, data = request(self.addr["api"], "POST", "/ids/batch", '{"count": 2}', {"Content-Type": "text/plain"})
        self.assertEqual(status, 200, data)
        self.assertEqual(len(json.loads(data)["ids"]), 2)

    def test_post_ids_masked(self):
        _, _, v = self.call("api", "POST", "/ids?format=masked", expect=200)
        self.assertEqual(set(v), {"id", "id_str", "masked"})
        self.assertLess(v["id"], LIMIT_2_63)
        self.assertEqual(v["id_str"], str(v["id"]))
        self.assertRegex(v["masked"], r"^1[0-9A-Za-z]{11}$")
        self.assertEqual(v["masked"][1:], fixed_form(v["id"], BASE62, 11))
        _, _, b = self.call("api", "POST", "/ids/batch?format=masked", body='{"count": 5}', expect=200)
        self.assertEqual(set(b), {"ids", "ids_str", "masked"})
        self.assertEqual(b["ids_str"], [str(i) for i in b["ids"]])
        self.assertEqual(b["masked"], ["1" + fixed_form(i, BASE62, 11) for i in b["ids"]])
        self.assertEqual(len(set(b["ids"]) | {v["id"]}), 6)
        # The admin port unmasks and decodes the string form; the IDs increase.
        ids = []
        for text in [v["masked"]] + b["masked"]:
            _, _, d = self.call("admin", "GET", f"/ids/{text}", expect=200)
            self.assertEqual(d["masked"], text)
            ids.append(d["id"])
        self.assertEqual(ids, sorted(set(ids)))
        for bad in ("Zabcdefghijk", "1zzzzzzzzzzz"):
            self.call("admin", "GET", f"/ids/{bad}", expect=400)

    def test_post_uuids_are_version_7_and_increase(self):
        import uuid
        _, _, v = self.call("api", "POST", "/uuids", expect=200)
        one = uuid.UUID(v["uuid"])
        self.assertEqual((one.version, one.variant), (7, uuid.RFC_4122))
        self.assertEqual(str(one), v["uuid"])
        for count in (1, 7, MAX_BATCH):
            _, _, b = self.call("api", "POST", "/uuids/batch", body=json.dumps({"count": count}), expect=200)
            got = [uuid.UUID(u) for u in b["uuids"]]
            self.assertEqual(len(got), count)
            self.assertTrue(all(u.version == 7 and u.variant == uuid.RFC_4122 for u in got))
            # Python's own ordering of UUIDs (by their 128-bit value) is the issue order.
            self.assertEqual(got, sorted(set(got)))
            self.assertGreater(got[0], one)
            one = got[-1]
        for body in ('{"count": 0}', json.dumps({"count": MAX_BATCH + 1}), "nope"):
            self.call("api", "POST", "/uuids/batch", body=body, expect=400)

    def test_decode_a_uuid(self):
        import uuid
        _, _, v = self.call("api", "POST", "/uuids", expect=200)
        u = uuid.UUID(v["uuid"])
        forms = [str(u), u.hex, str(u).upper(), u.urn, "{" + str(u) + "}"]
        decoded = [self.call("admin", "GET", f"/ids/{form}", expect=200)[2] for form in forms]
        self.assertTrue(all(d == decoded[0] for d in decoded), decoded)
        d = decoded[0]
        self.assertEqual(d["uuid"], str(u))
        # The UUID's first 48 bits are the ID's Unix millisecond.
        self.assertEqual(d["unix_ms"], u.int >> 80)
        self.assertLess(abs(d["unix_ms"] - time.time() * 1000), 60_000)
        for bad in (str(uuid.uuid4()), str(uuid.UUID(int=u.int & ~(0b11 << 62))), "0" * 31 + "g",
                    str(uuid.UUID(int=0))):
            _, _, e = self.call("admin", "GET", f"/ids/{bad}", expect=400)
            self.assertEqual(e["status"], 400)

    def test_http_id_api_errors(self):
        for path in ("/ids?format=xml", "/ids?format=", "/ids?format"):
            self.call("api", "POST", path, expect=400)
        self.call("api", "POST", "/ids/batch?format=xml", body='{"count": 1}', expect=400)
        for body in (
            '{"count": 0}',
            '{"count": %d}' % (MAX_BATCH + 1),
            '{"count": -1}',
            '{"count": 1.5}',
            '{"count": "3"}',
            '{"cnt": 3}',
            '{"count": 1, "extra": 2}',
            "not json",
            "",
        ):
            _, _, v = self.call("api", "POST", "/ids/batch", body=body, expect=400)
            self.assertEqual(v["status"], 400)
        big = '{"count": 1' + " " * 5000 + "}"
        self.call("api", "POST", "/ids/batch", body=big, expect=413)
        self.call("api", "POST", "/uuids/batch", body=big, expect=413)

    def test_post_seq_in_both_forms(self):
        _, _, a = self.call("api", "POST", "/seq/orders", expect=200)
        self.assertEqual(a["value_str"], str(a["value"]))
        _, _, b = self.call("api", "POST", "/seq/orders?format=string", expect=200)
        self.assertGreater(int(b["value"]), a["value"])
        _, _, c = self.call("api", "POST", "/seq/orders/batch", body='{"count": 3}', expect=200)
        self.assertEqual([str(v) for v in c["values"]], c["values_str"])
        self.assertEqual(c["values"], sorted(c["values"]))
        self.assertGreater(c["values"][0], int(b["value"]))
        _, _, d = self.call("api", "POST", "/seq/orders/batch?format=string", body='{"count": 2}', expect=200)
        self.assertGreater(int(d["values"][0]), c["values"][-1])

    def test_seq_errors(self):
        for path in ("/seq/Orders", "/seq/orders?format=xml", "/seq/orders?format=masked", "/seq/-x"):
            self.call("api", "POST", path, expect=400)
        for body in ('{"count": 0}', '{"count": 101}', "nope", '{"n": 1}'):
            self.call("api", "POST", "/seq/orders/batch", body=body, expect=400)
        self.call("api", "POST", "/seq/Orders/batch", body='{"count": 1}', expect=400)
        self.call("api", "POST", "/seq/missing", expect=404)
        self.call("api", "POST", "/seq/missing/batch", body='{"count": 1}', expect=404)
        # tiny holds one value: the second call, and any batch after it, is 409.
        status, _, _ = self.call("api", "POST", "/seq/tiny")
        self.assertIn(status, (200, 409))
        self.call("api", "POST", "/seq/tiny", expect=409)
        self.call("api", "POST", "/seq/tiny/batch", body='{"count": 1}', expect=409)
        big = json.dumps({"count": 1, "pad": "x" * 5000})
        self.call("api", "POST", "/seq/orders/batch", body=big, expect=413)

    def test_a_body_that_does_not_arrive_is_408(self):
        for path in ("/ids/batch", "/seq/orders/batch", "/uuids/batch"):
            head = (
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: 20\r\n\r\n"
            ).encode()
            status, headers, body = raw_exchange(self.addr["api"], head, b'{"cou', 5)
            self.assertEqual(status, 408, body)
            self.assertEqual(headers.get("connection"), "close")
            self.validate("api", "POST", path, status, headers, body, req_body=b'{"count": 1}')
        for path in self.listener_paths("admin"):
            concrete = path.replace("{id}", "12345")
            head = f"GET {concrete} HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n".encode()
            status, headers, body = raw_exchange(self.addr["admin"], head, b"abc", 5)
            self.assertEqual(status, 408, f"{path}: {body!r}")
            self.assertEqual(headers.get("connection"), "close")
            self.validate("admin", "GET", concrete, status, headers, body)

    def test_a_large_body_on_the_admin_api_is_413(self):
        for path in self.listener_paths("admin"):
            concrete = path.replace("{id}", "12345")
            self.call("admin", "GET", concrete, body="x" * 5000, expect=413)
        # The HTTP ID API's /health/live reads no body.
        self.call("api", "GET", "/health/live", body="x" * 5000, expect=200)

    # --- the admin API -----------------------------------------------------------------

    def test_health_layout_and_metrics(self):
        for listener in ("api", "admin"):
            _, _, v = self.call(listener, "GET", "/health/live", expect=200)
            self.assertEqual(v, {"live": True})
            self.call(listener, "HEAD", "/health/live", expect=200)
        _, _, v = self.call("admin", "GET", "/health/ready", expect=200)
        self.assertTrue(v["ready"])
        self.assertEqual(v["reasons"], [])
        self.call("admin", "HEAD", "/health/ready", expect=200)
        _, _, layout = self.call("admin", "GET", "/layout", expect=200)
        self.assertEqual(
            layout["timestamp_bits"] + layout["worker_bits"] + layout["sequence_bits"], 63
        )
        # The default layout: 63 bits wide, not JavaScript-safe.
        self.assertEqual(layout["id_bits"], 63)
        self.assertEqual((layout["max_id"], layout["max_id_str"]), (LIMIT_2_63 - 1, str(LIMIT_2_63 - 1)))
        self.assertFalse(layout["js_safe"])
        self.assertEqual(layout["workers"]["count"], layout["shards"] * layout["workers_per_shard"])
        self.call("admin", "HEAD", "/layout", expect=200)
        _, h, _ = self.call("admin", "GET", "/metrics", expect=200)
        self.call("admin", "HEAD", "/metrics", expect=200)

    def test_decode_an_id_in_its_three_forms(self):
        status, _, data = request(self.addr["admin"], "GET", "/layout")
        layout = json.loads(data)
        id_ = self.issue_one()
        forms = [str(id_), fixed_form(id_, BASE62, 11), fixed_form(id_, BASE32, 13),
                 fixed_form(id_, BASE32, 13).lower()]
        decoded = []
        for form in forms:
            _, _, v = self.call("admin", "GET", f"/ids/{form}", expect=200)
            decoded.append(v)
        self.assertTrue(all(d == decoded[0] for d in decoded), decoded)
        d = decoded[0]
        self.assertEqual((d["id"], d["id_str"]), (id_, str(id_)))
        seq_bits, worker_bits = layout["sequence_bits"], layout["worker_bits"]
        self.assertEqual(d["sequence"], id_ & ((1 << seq_bits) - 1))
        self.assertEqual(d["worker"], (id_ >> seq_bits) & ((1 << worker_bits) - 1))
        self.assertEqual(d["timestamp_ms"], id_ >> (seq_bits + worker_bits))
        self.assertEqual(d["unix_ms"], layout["epoch_ms"] + d["timestamp_ms"])
        first, count = layout["workers"]["first"], layout["workers"]["count"]
        self.assertTrue(first <= d["worker"] < first + count, (d, layout))
        self.assertLess(abs(d["unix_ms"] - time.time() * 1000), 60_000)
        self.call("admin", "HEAD", f"/ids/{id_}", expect=200)
        # The largest ID, in each form.
        top = LIMIT_2_63 - 1
        for form in (str(top), fixed_form(top, BASE62, 11), fixed_form(top, BASE32, 13)):
            _, _, v = self.call("admin", "GET", f"/ids/{form}", expect=200)
            self.assertEqual(v["id_str"], str(top))

    def test_decode_errors(self):
        for bad in ("abc", str(LIMIT_2_63), "0123", "AzL8n0Y58m8", "8ZZZZZZZZZZZZ",
                    "000000000000U", "%FF", "12345678901234567890123", "-5"):
            _, _, v = self.call("admin", "GET", f"/ids/{bad}", expect=400)
            self.assertEqual(v["status"], 400)
        self.call("admin", "HEAD", "/ids/abc", expect=400)

    # --- coverage: what the node serves is what the document says ------------------------

    def test_every_listener_serves_exactly_the_documented_routes(self):
        probe = {
            "/ids/{id}": "/ids/12345",
            "/seq/{name}": "/seq/orders",
            "/seq/{name}/batch": "/seq/orders/batch",
        }
        for listener in ("api", "admin"):
            mine = self.listener_paths(listener)
            self.assertTrue(mine, listener)
            for path in self.doc["paths"]:
                concrete = probe.get(path, path)
                # What this listener should do with it: the documented path of its own it
                # falls under (admin: /ids/batch is /ids/{id} with the ID "batch"), or none.
                template = self.template_of(listener, concrete)
                for method in METHODS:
                    batch = concrete.endswith("/batch") and method == "POST"
                    body = '{"count": 1}' if batch else None
                    status, headers, data = request(
                        self.addr[listener], method, concrete, body,
                        {"Content-Type": "application/json"} if body else {},
                    )
                    what = f"{listener} {method} {concrete} -> {status} {data[:200]!r}"
                    if template and method in self.documented_methods(template):
                        self.assertNotIn(status, (404, 405), what)
                        self.validate(listener, method, concrete, status, headers, data,
                                      req_body=body.encode() if body else None)
                    elif template:
                        self.assertEqual(status, 405, what)
                        allow = {m.strip() for m in headers.get("allow", "").split(",")}
                        self.assertEqual(allow, self.documented_methods(template), what)
                        if method != "HEAD":
                            self.assert_error_body(405, headers, data, what)
                    else:
                        self.assertEqual(status, 404, what)
                        if method != "HEAD":
                            self.assert_error_body(404, headers, data, what)
            for unknown in ("/", "/nope", "/ids/", "/ids/batch/x", "/ids/1/2", "/health",
                            "/health/live/x", "/layout/x", "/metrics/x", "/IDS", "//ids"):
                for method in ("GET", "POST"):
                    status, headers, data = request(self.addr[listener], method, unknown)
                    what = f"{listener} {method} {unknown} -> {status} {data[:200]!r}"
                    self.assertEqual(status, 404, what)
                    self.assert_error_body(404, headers, data, what)

    # --- 503: a node of its own, at its connection limit, then draining ------------------

    def test_connection_limit_then_draining_are_503(self):
        node = Node("--max-connections", "1", "--drain-delay", "20s")
        try:
            # One keep-alive connection holds the node's only slot.
            held = http.client.HTTPConnection(*node.api, timeout=10)
            held.request("POST", "/ids")
            first = held.getresponse()
            self.assertEqual(first.status, 200)
            first.read()
            # The refusal comes before the request is read: the batch's body is not sent
            # (closing a socket with unread bytes would reset the connection under the answer).
            batch_head = (
                b"POST /ids/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 12\r\n\r\n"
            )
            for path, body in (
                ("/ids", None),
                ("/ids/batch", '{"count": 2}'),
                ("/seq/orders", None),
                ("/seq/orders/batch", '{"count": 2}'),
                ("/uuids", None),
                ("/uuids/batch", '{"count": 2}'),
            ):
                if body is None:
                    status, headers, data = request(node.api, "POST", path)
                else:
                    head = batch_head.replace(b"/ids/batch", path.encode())
                    status, headers, data = raw_exchange(node.api, head, b"", 5)
                self.assertEqual(status, 503, data)
                self.assertEqual(headers.get("retry-after"), "1")
                self.assertEqual(headers.get("connection"), "close")
                self.validate("api", "POST", path, status, headers, data,
                              req_body=body.encode() if body else None)
            # The held connection is still served.
            held.request("POST", "/ids/batch", '{"count": 2}', {"Content-Type": "application/json"})
            again = held.getresponse()
            self.assertEqual(again.status, 200)
            again.read()
            held.close()

            node.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while True:
                status, headers, data = request(node.admin, "GET", "/health/ready")
                if status == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(status, 503, data)
            v = self.validate("admin", "GET", "/health/ready", status, headers, data)
            self.assertFalse(v["ready"])
            self.assertIn("draining", v["reasons"])
            status, headers, data = request(node.admin, "HEAD", "/health/ready")
            self.assertEqual(status, 503)
            self.validate("admin", "HEAD", "/health/ready", status, headers, data)
            # Still serving during the drain delay.
            status, headers, data = request(node.api, "POST", "/ids")
            self.assertEqual(status, 200, data)
        finally:
            node.close()


if __name__ == "__main__":
    unittest.main()

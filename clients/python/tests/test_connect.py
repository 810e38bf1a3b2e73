"""clients/vectors/connect.json: a node listening on one loopback address only is reached
through a name that resolves to both (::1 first, then 127.0.0.1), in plaintext and over TLS
verified for that name. The nodes run here; the client runs in ``connect_probe.py``, in a
mount namespace with a default Debian /etc/hosts (``clients/with-debian-hosts.sh``)."""

import os
import socket
import subprocess
import sys
import time
import unittest
from unittest import mock

import _support
from idgen_client import Client, UnavailableError


class Connect(unittest.TestCase):
    def test_a_name_that_resolves_to_several_addresses_reaches_the_node_on_any_of_them(self):
        certs = _support.certs_dir(self)
        cases = _support.load_json("clients/vectors/connect.json")["cases"]
        probe = [
            "bash", str(_support.REPO / "clients" / "with-debian-hosts.sh"),
            sys.executable, str(_support.HERE / "connect_probe.py"), os.path.join(certs, "ca.crt"),
        ]  # fmt: skip
        for case in cases:
            ip = case["listen"]
            bind = (f"[{ip}]" if ":" in ip else ip) + ":0"
            server = _support.Server(
                self, "--listen", bind, "--tls-listen", bind,
                "--tls-cert", os.path.join(certs, "server.crt"),
                "--tls-key", os.path.join(certs, "server.key"),
            )  # fmt: skip
            self.addCleanup(server.stop)
            probe.append(f"plain={case['dial']}:{server.addr.rsplit(':', 1)[1]}")
            probe.append(f"tls={case['dial']}:{server.tls_addr.rsplit(':', 1)[1]}")
        run = subprocess.run(
            probe, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=60, text=True,
        )  # fmt: skip
        self.assertEqual(run.returncode, 0, f"probe failed:\n{run.stdout}")
        self.assertIn(f"connected: {2 * len(cases)}", run.stdout)


class ConnectTimeout(unittest.TestCase):
    """``connect_timeout`` bounds the whole connect, and an address that does not answer gets
    only its share of it (time left / addresses left), so the addresses behind it are still
    tried. getaddrinfo is replaced to give a name those addresses."""

    def resolving_to(self, *addrs):
        infos = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", a) for a in addrs]
        patch = mock.patch.object(socket, "getaddrinfo", return_value=infos)
        patch.start()
        self.addCleanup(patch.stop)

    def silent(self):
        s = _support.SilentAddress(self)
        self.addCleanup(s.close)
        return s.addr

    def test_a_silent_first_address_leaves_time_for_the_next(self):
        fake = _support.FakeNode(_support.default_hello(), "serve")
        self.addCleanup(fake.close)
        host, port = fake.addr.rsplit(":", 1)
        self.resolving_to(self.silent(), (host, int(port)))
        client = Client(["idgen.test:7420"], connect_timeout=1.0, timeout=5.0)
        self.addCleanup(client.close)
        start = time.monotonic()
        self.assertEqual(len(client.next_ids(3)), 3)
        # The silent address had half of the second; the HELLO the rest.
        self.assertLess(time.monotonic() - start, 1.0)

    def test_silent_addresses_fail_within_one_connect_timeout(self):
        self.resolving_to(self.silent(), self.silent(), self.silent())
        client = Client(["idgen.test:7420"], connect_timeout=0.6, timeout=5.0)
        self.addCleanup(client.close)
        start = time.monotonic()
        with self.assertRaises(UnavailableError) as caught:
            client.next_id()
        self.assertLess(time.monotonic() - start, 1.2, "each attempt had the whole timeout")
        self.assertIn("timed out", str(caught.exception))


if __name__ == "__main__":
    unittest.main()

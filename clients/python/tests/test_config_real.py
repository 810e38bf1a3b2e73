"""Clients configured by IDGEN_NODES (and IDGEN_CLIENT_*) alone, or by a URL, against real
nodes, plain and over (mutual) TLS; ``expand=true`` with a name that resolves to two
loopback addresses (clients/with-debian-hosts.sh), and re-resolution when a node fails."""

import os
import time
import unittest

import _support
from _support import clean_env
from idgen_client import Client, UnavailableError


class FromEnvAndUrl(unittest.TestCase):
    def setUp(self):
        self.certs, self.server = _support.mutual_tls_server(self)
        self.ca = os.path.join(self.certs, "ca.crt")
        self.tls_port = self.server.tls_addr.rsplit(":", 1)[1]

    def ids(self, client):
        self.addCleanup(client.close)
        ids = client.next_ids(5)
        self.assertEqual(len(ids), 5)
        self.assertEqual(ids, sorted(set(ids)))
        return client

    def test_plain_from_IDGEN_NODES_alone(self):
        with clean_env(IDGEN_NODES=self.server.addr, IDGEN_CLIENT_TIMEOUT_MS="4000"):
            client = self.ids(Client.from_env())
        self.assertEqual(client._timeout, 4.0)
        self.assertIsNone(client._tls)
        with clean_env(IDGEN_NODES=f"idgen://{self.server.addr}"):
            self.ids(Client.from_env(prefetch=10))

    def test_mutual_tls_from_IDGEN_NODES_and_IDGEN_CLIENT_variables(self):
        env = dict(
            IDGEN_NODES=f"localhost:{self.tls_port}",
            IDGEN_CLIENT_CA=self.ca,
            IDGEN_CLIENT_CERT=os.path.join(self.certs, "client.crt"),
            IDGEN_CLIENT_KEY=os.path.join(self.certs, "client.key"),
        )
        with clean_env(**env):
            client = self.ids(Client.from_env())
        self.assertIsNotNone(client.nodes()[0]["hello"])
        # By address, verifying the name the certificate holds.
        env.update(IDGEN_NODES=f"127.0.0.1:{self.tls_port}", IDGEN_CLIENT_SERVER_NAME="localhost")
        with clean_env(**env):
            self.ids(Client.from_env())

    def test_from_a_url_plain_and_mutual_tls(self):
        self.ids(Client.from_url(f"idgen://{self.server.addr}/?timeout_ms=5000"))
        cert = os.path.join(self.certs, "client.crt")
        key = os.path.join(self.certs, "client.key")
        self.ids(Client.from_url(f"idgens://localhost:{self.tls_port}?ca={self.ca}&cert={cert}&key={key}"))
        self.ids(
            Client.from_url(
                f"idgens://127.0.0.1:{self.tls_port}?ca={self.ca}&cert={cert}&key={key}"
                "&server_name=localhost"
            )
        )
        with clean_env(IDGEN_NODES=f"idgens://localhost:{self.tls_port}?ca={self.ca}&cert={cert}&key={key}"):
            self.ids(Client.from_env())


class Expand(unittest.TestCase):
    def test_each_address_of_localhost_is_a_node(self):
        """Two nodes on [::1]:P and 127.0.0.1:P (plain and TLS); ``localhost`` resolves to
        both (::1 first). The client has two nodes, uses ::1 first, and fails over to
        127.0.0.1 (a failover event) when the node on ::1 stops; TLS verifies ``localhost``
        on both (config_probe.py is the client side)."""
        _support.expand_test(self, [str(_support.HERE / "config_probe.py")])


class Reresolve(unittest.TestCase):
    """``expand=True`` with getaddrinfo replaced for one name: addresses that appear are
    added, gone ones dropped when they fail, at most one resolution a second."""

    def setUp(self):
        _support.fake_resolver(self, ("idgen.test",))

    def fake(self):
        return _support.serving_node(self)

    def test_new_addresses_are_added_and_gone_ones_dropped(self):
        a, a_addr = self.fake()
        b, b_addr = self.fake()
        self.answer = [a_addr]
        client = Client(["idgen.test:7420"], expand=True, timeout=2.0, connect_timeout=2.0)
        self.addCleanup(client.close)
        self.assertEqual([n["node"] for n in client.nodes()], [a.addr])
        self.assertEqual(len(client.next_ids(2)), 2)
        self.assertEqual(self.lookups, 1)
        time.sleep(1.05)  # past the once-a-second limit
        self.answer = [b_addr]
        a.kill()
        # The call on a fails; the names are resolved again, b added, a (gone) dropped, and
        # the same call goes on to b.
        self.assertEqual(len(client.next_ids(2)), 2)
        self.assertEqual([n["node"] for n in client.nodes()], [b.addr])
        self.assertEqual(len(b.ids_by_connection), 1)
        self.assertEqual(self.lookups, 2)

    def test_a_name_that_resolves_to_nothing_is_a_node_that_is_down(self):
        self.answer = []
        client = Client(["idgen.test:7420"], expand=True, connect_timeout=0.5, backoff_min=0.05)
        self.addCleanup(client.close)
        self.assertEqual([n["node"] for n in client.nodes()], ["idgen.test:7420"])
        with self.assertRaises(UnavailableError):
            client.next_id()
        lookups = self.lookups
        with self.assertRaises(UnavailableError):
            client.next_id()  # within the second: no new resolution
        self.assertLessEqual(self.lookups - lookups, 1, "resolved at most once a second")
        b, b_addr = self.fake()
        self.answer = [b_addr]
        time.sleep(1.05)
        self.assertEqual(len(client.next_ids(2)), 2)
        self.assertEqual([n["node"] for n in client.nodes()], [b.addr])


if __name__ == "__main__":
    unittest.main()

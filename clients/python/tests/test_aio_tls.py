"""AsyncClient over TLS: mutual TLS against a real node's ``--tls-listen`` (certificates from
the test kit's ``idgen-test-certs``, as test_tls.py), and against fake TLS nodes that record
the SNI name the client sent."""

import asyncio
import os
import ssl
import unittest

import _support
from idgen_client import AsyncClient, TLSError, UnavailableError


class _Base(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        asyncio.get_running_loop().set_debug(False)

    def path(self, name):
        return os.path.join(self.certs, name)

    def client(self, nodes, **kw):
        kw.setdefault("tls_ca", self.path("ca.crt"))
        return _support.make_client(self, AsyncClient, nodes, **kw)


class RealNodeMutualTLS(_Base):
    def setUp(self):
        self.certs, self.server = _support.mutual_tls_server(self)
        self.port = self.server.tls_addr.rsplit(":", 1)[1]

    def mtls(self, addr, cert="client", **kw):
        if cert:
            kw.update(_support.client_cert(self.certs, cert))
        return self.client([addr], **kw)

    async def test_mutual_tls_by_name_and_by_address_with_many_tasks(self):
        seen = set()
        for addr in (f"localhost:{self.port}", self.server.tls_addr):
            client = self.mtls(addr, prefetch=100)
            got = await asyncio.gather(*(client.next_ids(10) for _ in range(200)))
            got.append([await client.next_id()])
            for ids in got:
                self.assertEqual(ids, sorted(set(ids)))
                for id_ in ids:
                    self.assertNotIn(id_, seen)
                    seen.add(id_)
            self.assertGreater(await client.ping(), 0)
            stats = client.stats()
            self.assertEqual(stats["connects"], 1, stats)
            conn = client._nodes[0].conn
            self.assertEqual(conn.alpn, "idgen/1")
            self.assertIn(conn.tls_version, ("TLSv1.2", "TLSv1.3"))
        self.assertEqual(len(seen), 2 * 2001)

    async def test_the_node_refuses_a_client_without_a_good_certificate(self):
        addr = f"localhost:{self.port}"
        for cert, kind in (
            (None, "client_certificate_required"),
            ("client-other-ca", "client_certificate_rejected"),
        ):
            with self.assertRaises(TLSError, msg=cert) as caught:
                await self.mtls(addr, cert=cert).next_id()
            self.assertEqual(caught.exception.kind, kind, (cert, caught.exception))
            self.assertIsInstance(caught.exception, UnavailableError)

    async def test_the_client_refuses_a_node_it_cannot_verify(self):
        addr = f"localhost:{self.port}"
        with self.assertRaises(TLSError) as caught:
            await self.mtls(addr, server_hostname="idgen.internal").next_id()
        self.assertEqual(caught.exception.kind, "name_mismatch")
        with self.assertRaises(TLSError) as caught:
            await self.mtls(addr, tls_ca=self.path("other-ca.crt")).next_id()
        self.assertEqual(caught.exception.kind, "unknown_issuer")
        with self.assertRaises(TLSError) as caught:  # TLS spoken to the plaintext listener
            await self.mtls(self.server.addr).next_id()
        self.assertEqual(caught.exception.kind, "handshake")


class SNI(_Base):
    """The name verified and sent as SNI is the host given (or ``server_hostname``)."""

    def setUp(self):
        self.certs = _support.certs_dir(self)

    def node(self, cert="server"):
        ctx = _support.server_tls(self.certs, cert, self.path("ca.crt"))
        names = []

        def sni(sock, name, context):
            names.append(name)

        ctx.sni_callback = sni
        fake = _support.FakeNode(_support.default_hello(), "serve", tls=ctx)
        self.addCleanup(fake.close)
        return fake, names

    async def test_sni_carries_the_name_given_never_the_address(self):
        fake, names = self.node()
        port = fake.addr.rsplit(":", 1)[1]
        client = self.client(
            [f"localhost:{port}"], tls_cert=self.path("client.crt"), tls_key=self.path("client.key")
        )
        self.assertEqual(len(await client.next_ids(5)), 5)
        self.assertEqual(names, ["localhost"])
        self.assertEqual(fake.tls_sessions, [("idgen/1", True)])

    async def test_server_hostname_is_verified_and_sent(self):
        fake, names = self.node("server-other-name")
        # Not ssl.create_default_context: from Python 3.13 it verifies strictly (X.509
        # extensions the test kit's certificates do not carry).
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname, CERT_REQUIRED
        ctx.load_verify_locations(cafile=self.path("ca.crt"))
        ctx.load_cert_chain(self.path("client.crt"), self.path("client.key"))
        client = self.client(
            [fake.addr], tls_ca=None, ssl_context=ctx, server_hostname="idgen.internal"
        )
        self.assertEqual(len(await client.next_ids(5)), 5)
        self.assertEqual(names, ["idgen.internal"])
        # Without it the address is checked against the certificate, which does not name it.
        with self.assertRaises(TLSError) as caught:
            await self.client([fake.addr], tls_ca=None, ssl_context=ctx).next_id()
        self.assertEqual(caught.exception.kind, "name_mismatch")


if __name__ == "__main__":
    unittest.main()

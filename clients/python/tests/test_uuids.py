"""(i) Version 7 UUIDs (protocol version 4, GET_UUIDS) against fake nodes: the calls, the
pre-send checks, the checks of each UUIDS answer, failover, and taking a UUID apart. The
real-server cases are in test_real_server.py."""

import struct
import unittest
import uuid

import _support
from _support import FakeNode, uuid_of, uuids_bytes
from idgen_client import (
    Client,
    Layout,
    ProtocolError,
    ServerError,
    UuidsUnsupportedError,
    protocol,
)


def v4_hello(**overrides):
    fields = dict(version=4, max_request_frame=128)
    fields.update(overrides)
    return _support.default_hello(**fields)


def node_state(client, addr):
    return next(n for n in client.nodes() if n["node"] == addr)


class Calls(unittest.TestCase):
    def fake(self, hello=None, mode="serve", **kw):
        node = FakeNode(hello or v4_hello(), mode, **kw)
        self.addCleanup(node.close)
        return node

    def client(self, nodes, **kw):
        kw.setdefault("timeout", 2.0)
        c = Client([n.addr for n in nodes], **kw)
        self.addCleanup(c.close)
        return c

    def test_uuids_are_uuid_objects_of_version_7_made_from_the_ids_sent(self):
        node = self.fake(v4_hello(max_batch=10))
        client = self.client([node])
        one = client.next_uuid()
        many = client.next_uuids(25)  # above max_batch: 10 + 10 + 5, pipelined, re-joined
        self.assertIsInstance(one, uuid.UUID)
        self.assertEqual(len(many), 25)
        got = [one] + many
        self.assertTrue(all(isinstance(u, uuid.UUID) for u in got))
        self.assertTrue(all(u.version == 7 and u.variant == uuid.RFC_4122 for u in got))
        self.assertTrue(all(a < b for a, b in zip(got, got[1:])), "strictly increasing")
        self.assertEqual(node.ops, [0x06] * 4)
        sent = node.ids_by_connection[0]
        self.assertEqual([client.decode_uuid(u).id for u in got], sent)
        self.assertEqual([u.bytes for u in got], [uuid_of(node.hello, i, i * 0x9E3779B97F4A7C15) for i in sent])
        stats = client.stats()
        self.assertEqual((stats["uuid_requests"], stats["uuids"]), (4, 26))
        # IDs still flow on the same version 4 connection.
        self.assertEqual(len(client.next_ids(3)), 3)
        self.assertEqual(stats["connects"], 1)

    def test_a_node_below_version_4_is_refused_before_sending_and_no_other_node_is_tried(self):
        for version in (1, 2, 3):
            with self.subTest(version=version):
                old = self.fake(v4_hello(version=version))
                other = self.fake()
                client = self.client([old, other])
                for call in (client.next_uuid, lambda: client.next_uuids(5)):
                    with self.assertRaises(UuidsUnsupportedError) as cm:
                        call()
                    err = cm.exception
                    self.assertEqual((err.version, err.required, err.node), (version, 4, old.addr))
                    self.assertIn(f"protocol version {version}; UUIDs need protocol version 4", str(err))
                self.assertEqual(old.requests, 0, "nothing sent after the HELLO")
                self.assertEqual(other.connections, 0, "no other node tried")
                self.assertFalse(node_state(client, old.addr)["down"])
                # The node still serves IDs over its version.
                self.assertEqual(len(client.next_ids(3)), 3)

    def test_the_client_offers_version_5_and_accepts_an_older_node(self):
        old = self.fake(v4_hello(version=3))
        client = self.client([old])
        self.assertEqual(len(client.next_ids(2)), 2)
        self.assertEqual(old.hellos[0], protocol.encode_hello(1, 5))

    def test_bad_arguments_are_refused_before_anything_is_sent(self):
        node = self.fake()
        client = self.client([node])
        for bad in (0, -1):
            with self.assertRaises(ValueError):
                client.next_uuids(bad)
        for bad in (True, 1.0, "3", None):
            with self.assertRaises(TypeError):
                client.next_uuids(bad)
        self.assertEqual(node.requests, 0)

    def test_bad_uuids_answers_are_protocol_errors_and_fail_over(self):
        hello = v4_hello()
        good = [uuid_of(hello, (1 << 40) + k, 5) for k in range(3)]
        version_4 = bytearray(good[0])
        version_4[6] = (version_4[6] & 0x0F) | 0x40
        variant_11 = bytearray(good[0])
        variant_11[8] |= 0xC0
        cases = {
            "too few": lambda n: uuids_bytes(good[: n - 1]),
            "too many": lambda n: uuids_bytes(good[: n + 1]),
            "version 4": lambda n: uuids_bytes([bytes(version_4)] + good[1:n]),
            "variant 11": lambda n: uuids_bytes([bytes(variant_11)] + good[1:n]),
            "decreasing": lambda n: uuids_bytes(list(reversed(good[:n]))),
            "IDS instead": lambda n: _support.ids_bytes(list(range(1, n + 1))),
            "count disagrees with length": lambda n: struct.pack(">IBI", 5 + 16 * n, 0x86, n + 1)
            + b"".join(good[:n]),
        }
        for name, answer in cases.items():
            with self.subTest(name):
                bad = self.fake(hello, uuid_answer=answer)
                client = self.client([bad])
                with self.assertRaises(ProtocolError) as cm:
                    client.next_uuids(2)
                self.assertEqual(cm.exception.node, bad.addr)
                self.assertTrue(node_state(client, bad.addr)["down"], "the node is marked down")
                # With a healthy node beside it, the call fails over and succeeds there.
                healthy = self.fake(hello)
                client = self.client([bad, healthy])
                self.assertEqual(len(client.next_uuids(2)), 2)
                self.assertEqual(client.stats()["failovers"], 1)

    def test_uuids_must_increase_across_the_frames_of_one_connection(self):
        hello = v4_hello()
        same = uuid_of(hello, 1 << 40)
        node = self.fake(hello, uuid_answer=lambda n: uuids_bytes([same] * n))
        client = self.client([node])
        self.assertEqual(client.next_uuid().bytes, same)
        with self.assertRaises(ProtocolError) as cm:
            client.next_uuid()
        self.assertIn("not increasing", str(cm.exception))

    def test_a_refusal_is_raised_like_one_for_ids(self):
        node = self.fake(mode="unavailable", status=304)
        client = self.client([node])
        with self.assertRaises(ServerError) as cm:
            client.next_uuids(3)
        self.assertEqual(cm.exception.status, 304)


class Decode(unittest.TestCase):
    # PROTOCOL.md 11.1 and 11.6: the layout of the worked examples and its UUIDs.
    LAYOUT = Layout(1704067200000, 41, 10, 12, 0, 65536)

    def test_the_worked_example_decodes_to_its_ids(self):
        first = self.LAYOUT.decode_uuid(uuid.UUID("019b71b4-4c7b-7800-8000-123456789abc"))
        self.assertEqual(first.id, 264543142405996544)
        self.assertEqual((first.unix_ms, first.worker, first.sequence), (1767139200123, 512, 0))
        second = self.LAYOUT.decode_uuid(uuid.UUID("019b71b4-4c7b-7800-801f-edcba9876543"))
        self.assertEqual((second.id, second.sequence), (264543142405996545, 1))

    def test_every_failed_check_says_which(self):
        for text, why in [
            ("019b71b4-4c7b-4800-8000-123456789abc", "version 4"),
            ("019b71b4-4c7b-7800-c000-123456789abc", "variant"),
            ("00000000-0001-7000-8000-000000000000", "before the epoch"),
            ("ffffffff-ffff-7000-8000-000000000000", "past the layout"),
        ]:
            with self.subTest(text):
                with self.assertRaises(ValueError) as cm:
                    self.LAYOUT.decode_uuid(uuid.UUID(text))
                self.assertIn(why, str(cm.exception))
        with self.assertRaises(TypeError):
            self.LAYOUT.decode_uuid("019b71b4-4c7b-7800-8000-123456789abc")

    def test_decode_is_the_inverse_of_the_mapping_for_other_layouts(self):
        for t, w, s, r in [(41, 10, 12, 0), (39, 8, 16, 3), (31, 16, 16, 4), (1, 31, 31, 0)]:
            hello = _support.default_hello(timestamp_bits=t, worker_bits=w, sequence_bits=s, region_bits=r)
            layout = Layout.from_hello(hello)
            for id_ in (0, 1, (1 << 63) - 1, 0x0123456789ABCDEF & ((1 << 63) - 1)):
                with self.subTest(layout=(t, w, s), id=id_):
                    u = uuid.UUID(bytes=uuid_of(hello, id_, random=(1 << 74) - 1))
                    parts = layout.decode_uuid(u)
                    self.assertEqual(parts.id, id_)
                    self.assertEqual(parts[1:], tuple(layout.decode(id_)))


if __name__ == "__main__":
    unittest.main()

"""GET_RANGES (version 2): IDs as runs of consecutive integers, expanded by the client.

The codec's checks of a RANGES frame (PROTOCOL.md section 4.5), then the client against a fake
node of each version (RANGES on version 2 and later, GET_IDS on version 1) and against the
real node."""

import struct
import unittest

import _support
from idgen_client import Client, ProtocolError, protocol


def ranges_frame(total, runs):
    body = struct.pack(">BII", 0x84, total, len(runs))
    body += b"".join(struct.pack(">QI", first, n) for first, n in runs)
    return struct.pack(">I", len(body)) + body


class RangesCodec(unittest.TestCase):
    def test_runs_expand_to_the_ids_in_order(self):
        frame = ranges_frame(8197, [(0, 8192), (10_000, 1), ((1 << 63) - 4, 4)])
        decoded, used = protocol.decode_response(frame)
        self.assertEqual(used, len(frame))
        self.assertIsInstance(decoded, protocol.Ranges)
        ids = decoded.ids
        self.assertEqual(len(ids), 8197)
        self.assertEqual(ids[:2], [0, 1])
        self.assertEqual(ids[8191:8193], [8191, 10_000])
        self.assertEqual(ids[-1], (1 << 63) - 1)
        self.assertEqual(protocol.encode_get_ranges(7), bytes.fromhex("000000050400000007"))

    def test_every_malformed_frame_is_a_bad_frame(self):
        cases = {
            "a run of count 0": ranges_frame(1, [(5, 1), (9, 0)]),
            "overlapping runs": ranges_frame(4, [(5, 2), (6, 2)]),
            "runs out of order": ranges_frame(2, [(9, 1), (5, 1)]),
            "touching runs in reverse": ranges_frame(2, [(6, 1), (5, 1)]),
            "the top bit set": ranges_frame(2, [((1 << 63) - 1, 2)]),
            "total below the runs": ranges_frame(3, [(0, 2), (5, 2)]),
            "total above the runs": ranges_frame(5, [(0, 2), (5, 2)]),
            "a total no response may carry": ranges_frame(0xFFFF_FFFF, [(0, 0xFFFF_FFFF)]),
            "no run": struct.pack(">IBII", 9, 0x84, 0, 0),
            "runs disagreeing with the length": struct.pack(">IBIIQI", 21, 0x84, 1, 2, 0, 1),
        }
        for name, frame in cases.items():
            with self.subTest(name):
                with self.assertRaises(ProtocolError) as cm:
                    protocol.decode_response(frame)
                self.assertEqual(cm.exception.status, 100, str(cm.exception))

    def test_a_huge_claim_is_refused_before_anything_is_expanded(self):
        # 21 bytes claiming 2^32 - 1 IDs: refused from the total alone, with the default limit
        # and with a node's smaller one.
        frame = ranges_frame(0xFFFF_FFFF, [(0, 0xFFFF_FFFF)])
        for limit in (protocol.DEFAULT_MAX_RESPONSE_FRAME, protocol.response_frame_limit(100, 3)):
            with self.subTest(limit=limit):
                with self.assertRaises(ProtocolError) as cm:
                    protocol.decode_response(frame, limit)
                self.assertIn("more than a response may carry", str(cm.exception))


class RangesOnTheWire(unittest.TestCase):
    def test_version_2_nodes_are_asked_for_ranges_and_version_1_nodes_for_ids(self):
        for version, op in ((1, 0x02), (2, 0x04), (3, 0x04)):
            with self.subTest(version=version):
                fake = _support.FakeNode(
                    _support.default_hello(version=version, max_batch=5000), "serve"
                )
                try:
                    with Client([fake.addr]) as client:
                        ids = client.next_ids(12_345)  # three requests: 5000, 5000, 2345
                    self.assertEqual(len(ids), 12_345)
                    self.assertEqual(ids, sorted(set(ids)))
                    self.assertEqual(fake.ops, [op, op, op])
                finally:
                    fake.close()

    def test_ids_answering_get_ranges_are_refused(self):
        # A node that answers GET_RANGES with IDS breaks the protocol: the call fails.
        fake = _support.FakeNode(_support.default_hello(version=2), "serve")
        fake._answer = lambda body, sent: _support.ids_bytes([1 << 40])
        try:
            with Client([fake.addr], timeout=2.0) as client:
                with self.assertRaises(Exception) as cm:
                    client.next_ids(1)
            self.assertIn("RANGES expected", str(cm.exception))
        finally:
            fake.close()


class RangesFromTheRealNode(unittest.TestCase):
    def test_the_node_answers_a_big_call_in_runs_that_expand_to_unique_increasing_ids(self):
        server = _support.Server(self)
        try:
            with Client([server.addr]) as client:
                ids = client.next_ids(200_000)
                more = client.next_ids(1)
        finally:
            server.stop()
        self.assertEqual(len(ids), 200_000)
        self.assertEqual(len(set(ids)), 200_000)
        self.assertTrue(all(a < b for a, b in zip(ids, ids[1:])))
        self.assertGreater(more[0], ids[-1])


if __name__ == "__main__":
    unittest.main()

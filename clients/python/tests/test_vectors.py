"""(a) The shared wire vectors of protocol/tests/vectors.json, through the client's codec."""

import struct
import unittest

import _support  # noqa: F401  (puts idgen_client on the path when not installed)
from idgen_client import ProtocolError, protocol

# Version 4's cases (GET_UUIDS, UUIDS) are a file of their own; a version 4 client passes both.
VECTORS = (
    _support.load_json("protocol/tests/vectors.json")
    + _support.load_json("protocol/tests/vectors_v4.json")
    + _support.load_json("protocol/tests/vectors_v5.json")
)


def encode_request(decoded):
    op = decoded["op"]
    if op == "HELLO":
        return protocol.encode_hello(decoded["min_version"], decoded["max_version"])
    if op == "GET_IDS":
        return protocol.encode_get_ids(decoded["count"])
    if op == "PING":
        return protocol.encode_ping(int(decoded["token"]))
    if op == "GET_VALUES":
        return protocol.encode_get_values(decoded["name"], decoded["count"])
    if op == "GET_UUIDS":
        return protocol.encode_get_uuids(decoded["count"])
    if op == "GET_IDS_WITH":
        after = decoded.get("after")
        return protocol.encode_get_ids_with(
            decoded["count"],
            after=int(after) if after is not None else None,
            key=decoded.get("key"),
            masked=decoded["masked"],
        )
    raise AssertionError(f"unknown request op {op}")


def as_decoded(frame):
    """The client's decoded frame in the vectors' JSON shape."""
    if isinstance(frame, protocol.HelloOk):
        d = {"op": "HELLO_OK", **frame._asdict()}
        d["epoch_ms"] = str(d["epoch_ms"])
        return d
    if isinstance(frame, protocol.Ids):
        return {"op": "IDS", "ids": [str(i) for i in frame.ids]}
    if isinstance(frame, protocol.Pong):
        return {"op": "PONG", "token": str(frame.token)}
    if isinstance(frame, protocol.Values):
        return {"op": "VALUES", "mode": frame.mode_name, "values": [str(v) for v in frame.values]}
    if isinstance(frame, protocol.Uuids):
        return {"op": "UUIDS", "uuids": [u.hex for u in frame.uuids]}
    if isinstance(frame, protocol.MaskedIds):
        return {"op": "MASKED_IDS", "key_id": frame.key_id, "ids": [str(i) for i in frame.ids]}
    if isinstance(frame, protocol.ErrorFrame):
        return {
            "op": "ERROR",
            "status": frame.status,
            "name": frame.name,
            "message": frame.message,
            "closes": frame.closes,
            "retry_elsewhere": frame.retry_elsewhere,
        }
    raise AssertionError(f"unexpected frame {frame!r}")


class RequestVectors(unittest.TestCase):
    def test_every_request_vector_with_decoded_is_encoded_byte_exact(self):
        cases = [c for c in VECTORS if c["direction"] == "request" and "decoded" in c]
        self.assertGreaterEqual(len(cases), 10)
        for case in cases:
            with self.subTest(case["name"]):
                raw = bytes.fromhex(case["hex"])
                consumed = case.get("consumed", len(raw))
                self.assertEqual(encode_request(case["decoded"]).hex(), raw[:consumed].hex())


def get_values_cases(kind):
    """Request vectors of GET_VALUES (opcode 0x05) of one kind: "decoded", "error" or
    "incomplete"."""
    out = []
    for c in VECTORS:
        raw = bytes.fromhex(c["hex"])
        if c["direction"] == "request" and len(raw) >= 5 and raw[4] == protocol.OP_GET_VALUES:
            if kind in c:
                out.append(c)
    return out


def client_check(case):
    """What the client's pre-send check says about a GET_VALUES vector: the fields the
    vector's bytes carry, checked with the connection's version and limits."""
    raw = bytes.fromhex(case["hex"])
    (length,) = struct.unpack_from(">I", raw, 0)
    (count,) = struct.unpack_from(">I", raw, 5)
    name = raw[9 : 4 + length]
    return protocol.check_get_values(
        name,
        count,
        version=case.get("version", 1),
        max_batch=case["limits"]["max_batch"],
        max_request_frame=case["limits"]["max_request_frame"],
    )


class RequestGetValuesVectors(unittest.TestCase):
    """The GET_VALUES request vectors (those of an established connection with a
    ``version``, and the version-1 one). A client encodes the well-formed ones byte-exact
    (above); every one the server refuses, the client refuses to send: it checks the name,
    the count, the negotiated version and the frame limit first (SEQUENCES.md)."""

    def test_every_decoded_get_values_vector_passes_the_client_check_and_encodes_exactly(self):
        cases = get_values_cases("decoded")
        self.assertGreaterEqual(len(cases), 4)
        for case in cases:
            with self.subTest(case["name"]):
                self.assertEqual(case.get("version"), 3)
                raw = bytes.fromhex(case["hex"])
                consumed = case.get("consumed", len(raw))
                frame = client_check(case)
                self.assertEqual(frame.hex(), raw[:consumed].hex())

    def test_every_refused_get_values_vector_is_refused_by_the_client_before_sending(self):
        cases = get_values_cases("error")
        self.assertGreaterEqual(len(cases), 12)
        seen = set()
        for case in cases:
            status = case["error"]["status"]
            seen.add(status)
            raw = bytes.fromhex(case["hex"])
            (length,) = struct.unpack_from(">I", raw, 0)
            with self.subTest(case["name"]):
                if status == 100:  # a length outside 6..=69: no name the encoder takes
                    self.assertFalse(6 <= length <= 69)
                    with self.assertRaises(ValueError):
                        protocol.encode_get_values(b"a" * (length - 5), 1)
                    continue
                self.assertEqual(len(raw), 4 + length, "the vector holds the whole frame")
                if status == 202:  # GET_VALUES on a version 1 or 2 connection
                    with self.assertRaises(protocol.SequencesUnsupported) as cm:
                        client_check(case)
                    self.assertEqual(cm.exception.version, case.get("version", 1))
                    self.assertIn("version 3", str(cm.exception))
                    continue
                with self.assertRaises(ValueError) as cm:
                    client_check(case)
                self.assertNotIsInstance(cm.exception, protocol.SequencesUnsupported)
                reason = str(cm.exception)
                if status in (200, 201):
                    self.assertIn("n must be 1 to", reason)
                elif status == 204:
                    self.assertIn("sequence name", reason)
                elif status == 101:
                    self.assertIn("at most", reason)
                else:
                    self.fail(f"no client check for status {status}")
        self.assertEqual(seen, {100, 101, 200, 201, 202, 204})

    def test_incomplete_get_values_vectors_are_prefixes_of_a_frame_the_client_writes(self):
        cases = get_values_cases("incomplete")
        self.assertGreaterEqual(len(cases), 1)
        for case in cases:
            with self.subTest(case["name"]):
                raw = bytes.fromhex(case["hex"])
                (length,) = struct.unpack_from(">I", raw, 0)
                (count,) = struct.unpack_from(">I", raw, 5)
                self.assertLess(len(raw), 4 + length)
                name = raw[9:] + b"z" * (4 + length - len(raw))
                frame = protocol.encode_get_values(name, count)
                self.assertEqual(frame[: len(raw)].hex(), raw.hex())

    def test_the_client_hello_offers_versions_1_to_5(self):
        self.assertEqual(protocol.encode_hello().hex(), "00000009014944474e00010005")
        picks = {c["name"]: c for c in VECTORS if c["name"] == "hello_range_1_to_5_picks_5"}
        self.assertEqual(picks["hello_range_1_to_5_picks_5"]["hex"], protocol.encode_hello().hex())
        self.assertEqual(picks["hello_range_1_to_5_picks_5"]["negotiated_version"], 5)

    def test_sequence_names(self):
        good = ["a", "0", "orders", "invoice.tenant-42", "a_b-c.d", "9" * 64]
        for name in good:
            with self.subTest(name):
                self.assertEqual(protocol.check_sequence_name(name), name.encode())
        bad = ["", "A", "Orders", ".a", "_a", "-a", "a/b", "a b", "caf\u00e9", "a" * 65,
               "a\n", "\u0430"]  # fmt: skip
        for name in bad:
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    protocol.check_sequence_name(name)
        for name in (None, 1, ["a"]):
            with self.assertRaises(TypeError):
                protocol.check_sequence_name(name)


class ResponseVectors(unittest.TestCase):
    def test_every_response_vector_with_decoded_is_decoded_to_the_same_values(self):
        cases = [c for c in VECTORS if c["direction"] == "response" and "decoded" in c]
        self.assertGreaterEqual(len(cases), 15)
        for case in cases:
            with self.subTest(case["name"]):
                raw = bytes.fromhex(case["hex"])
                out = protocol.decode_response(raw, case["max_frame"])
                self.assertIsNotNone(out, "decoder asked for more bytes")
                frame, consumed = out
                self.assertEqual(consumed, case.get("consumed", len(raw)))
                self.assertEqual(as_decoded(frame), case["decoded"])

    def test_every_response_vector_with_error_is_rejected_with_its_status(self):
        cases = [c for c in VECTORS if c["direction"] == "response" and "error" in c]
        self.assertGreaterEqual(len(cases), 10)
        for case in cases:
            with self.subTest(case["name"]):
                raw = bytes.fromhex(case["hex"])
                with self.assertRaises(ProtocolError) as cm:
                    protocol.decode_response(raw, case["max_frame"])
                self.assertEqual(cm.exception.status, case["error"]["status"], str(cm.exception))
                self.assertTrue(case["error"]["closes"])  # a client drops the connection

    def test_every_incomplete_response_vector_asks_for_more(self):
        cases = [c for c in VECTORS if c["direction"] == "response" and c.get("incomplete")]
        self.assertGreaterEqual(len(cases), 2)
        for case in cases:
            with self.subTest(case["name"]):
                self.assertIsNone(
                    protocol.decode_response(bytes.fromhex(case["hex"]), case["max_frame"])
                )

    def test_frames_fed_one_byte_at_a_time(self):
        """Every decoded response vector split at every byte decodes once complete."""
        for case in (c for c in VECTORS if c["direction"] == "response" and "decoded" in c):
            raw = bytes.fromhex(case["hex"])
            consumed = case.get("consumed", len(raw))
            with self.subTest(case["name"]):
                for cut in range(consumed):
                    self.assertIsNone(protocol.decode_response(raw[:cut], case["max_frame"]))
                self.assertIsNotNone(protocol.decode_response(raw[:consumed], case["max_frame"]))

    def test_values_vectors_are_all_run(self):
        values = [c for c in VECTORS if c["direction"] == "response"
                  and bytes.fromhex(c["hex"])[4:5] == b"\x85"]  # fmt: skip
        self.assertGreaterEqual(len(values), 10)
        kinds = {("decoded" in c, "error" in c, bool(c.get("incomplete"))) for c in values}
        self.assertEqual(len(kinds), 3, "decoded, rejected and incomplete VALUES vectors")

    def test_values_mode_and_count_are_checked_as_soon_as_they_arrive(self):
        # A body of a million values need not arrive for a bad mode or count to be seen.
        big = 6 + 8 * 1000
        with self.assertRaises(ProtocolError) as cm:
            protocol.decode_response(struct.pack(">IBB", big, 0x85, 2), 1 << 20)
        self.assertEqual(cm.exception.status, 100)
        with self.assertRaises(ProtocolError) as cm:
            protocol.decode_response(struct.pack(">IBBI", big, 0x85, 0, 999), 1 << 20)
        self.assertEqual(cm.exception.status, 100)
        self.assertIsNone(protocol.decode_response(struct.pack(">IBBI", big, 0x85, 1, 1000), 1 << 20))

    def test_a_values_frame_of_max_batch_values_fits_the_v3_frame_limit(self):
        limit = protocol.response_frame_limit(65536, version=3)
        frame = struct.pack(">IBBI", 6 + 8 * 65536, 0x85, 0, 65536) + b"".join(
            struct.pack(">Q", v) for v in range(1, 65537)
        )
        decoded, used = protocol.decode_response(frame, limit)
        self.assertEqual((len(decoded.values), used), (65536, len(frame)))
        self.assertEqual(protocol.response_frame_limit(65536), 5 + 8 * 65536)  # version 1, 2

    def test_uuids_vectors_are_all_run(self):
        uuids = [c for c in VECTORS if c["direction"] == "response"
                 and bytes.fromhex(c["hex"])[4:5] == b"\x86"]  # fmt: skip
        kinds = {("decoded" in c, "error" in c, bool(c.get("incomplete"))) for c in uuids}
        self.assertEqual(len(kinds), 3, "decoded, rejected and incomplete UUIDS vectors")

    def test_uuids_count_is_checked_as_soon_as_it_arrives(self):
        big = 5 + 16 * 1000
        with self.assertRaises(ProtocolError) as cm:
            protocol.decode_response(struct.pack(">IBI", big, 0x86, 999), 1 << 20)
        self.assertEqual(cm.exception.status, 100)
        self.assertIsNone(protocol.decode_response(struct.pack(">IBI", big, 0x86, 1000), 1 << 20))

    def test_a_uuids_frame_of_max_batch_uuids_fits_the_v4_frame_limit(self):
        self.assertEqual(protocol.response_frame_limit(65536, version=4), 5 + 16 * 65536)
        self.assertEqual(protocol.response_frame_limit(1, version=4), 258)

    def test_oversized_length_is_rejected_from_the_prefix_alone(self):
        with self.assertRaises(ProtocolError) as cm:
            protocol.decode_response(b"\xff\xff\xff\xff", protocol.DEFAULT_MAX_RESPONSE_FRAME)
        self.assertEqual(cm.exception.status, 101)


class StatusTable(unittest.TestCase):
    def test_unknown_codes_follow_their_class(self):
        from idgen_client import status

        self.assertFalse(status.closes_connection(299) or status.retry_elsewhere(299))
        self.assertTrue(status.retry_elsewhere(399) and not status.closes_connection(399))
        self.assertTrue(status.closes_connection(499) and not status.retry_elsewhere(499))
        self.assertFalse(status.retry_elsewhere(304))

    def test_the_table_matches_protocol_md(self):
        """Every row of PROTOCOL.md's status table agrees with the client's table."""
        from idgen_client import status

        text = (_support.REPO / "protocol" / "PROTOCOL.md").read_text()
        table = text.split("<!-- status-table:begin -->")[1].split("<!-- status-table:end -->")[0]
        rows = [r for r in table.splitlines() if r.startswith("| `")]
        self.assertEqual(len(rows), len(status.STATUSES))
        for row in rows:
            cells = [c.strip().strip("`") for c in row.strip("|").split("|")]
            code, name, closes, retry = int(cells[0]), cells[1], cells[2], cells[3]
            info = status.STATUSES[code]
            self.assertEqual(
                (info.name, info.closes_connection, info.retry_elsewhere),
                (name, closes == "yes", retry == "yes"),
                row,
            )


if __name__ == "__main__":
    unittest.main()

"""(a) The shared wire vectors of protocol/tests/vectors.json, through the client's codec."""

import unittest

import _support  # noqa: F401  (puts idgen_client on the path when not installed)
from idgen_client import ProtocolError, protocol

VECTORS = _support.load_json("protocol/tests/vectors.json")


def encode_request(decoded):
    op = decoded["op"]
    if op == "HELLO":
        return protocol.encode_hello(decoded["min_version"], decoded["max_version"])
    if op == "GET_IDS":
        return protocol.encode_get_ids(decoded["count"])
    if op == "PING":
        return protocol.encode_ping(int(decoded["token"]))
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
            with self.subTest(case["name"]):
                for cut in range(len(raw)):
                    self.assertIsNone(protocol.decode_response(raw[:cut], case["max_frame"]))
                self.assertIsNotNone(protocol.decode_response(raw, case["max_frame"]))

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

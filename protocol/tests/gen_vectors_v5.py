#!/usr/bin/env python3
"""Writes protocol/tests/vectors_v5.json: version 5's cases (GET_IDS_WITH, MASKED_IDS and the
statuses 205 to 207), in the format of vectors.json (PROTOCOL.md section 12).

Run it from the repository root: python3 protocol/tests/gen_vectors_v5.py
"""
import json
import struct

LIMITS = {"max_request_frame": 128, "max_batch": 65536}
MAX_FRAME = 6 + 8 * 65536


def get_ids_with(count, after=None, key=None, masked=False, options=None):
    opts = (1 if after is not None else 0) | (2 if key is not None else 0) | (4 if masked else 0)
    if options is not None:
        opts = options
    body = struct.pack(">BIB", 0x07, count, opts)
    if after is not None:
        body += struct.pack(">Q", after)
    if key is not None:
        body += struct.pack(">B", len(key)) + key
    return struct.pack(">I", len(body)) + body


def req(name, raw, decoded=None, error=None, version=5, **extra):
    case = {"name": name, "direction": "request", "hex": raw.hex(), "connection": "established",
            "version": version, "limits": LIMITS}
    if decoded is not None:
        case["decoded"] = decoded
    if error is not None:
        case["error"] = error
    case.update(extra)
    return case


def err(status, name, closes):
    return {"status": status, "name": name, "closes": closes}


def masked_ids(key_id, ids):
    body = struct.pack(">BBI", 0x87, key_id, len(ids)) + b"".join(struct.pack(">Q", i) for i in ids)
    return struct.pack(">I", len(body)) + body


def error_frame(status, message):
    m = message.encode()
    body = struct.pack(">BH", 0xFF, status) + m
    return struct.pack(">I", len(body)) + body


cases = [
    {"name": "hello_range_1_to_5_picks_5", "direction": "request", "hex": "00000009014944474e00010005",
     "connection": "new", "decoded": {"op": "HELLO", "min_version": 1, "max_version": 5},
     "negotiated_version": 5, "limits": LIMITS},
    req("get_ids_with_no_option", get_ids_with(3), {"op": "GET_IDS_WITH", "count": 3, "masked": False}),
    req("get_ids_with_after", get_ids_with(2, after=4196401153),
        {"op": "GET_IDS_WITH", "count": 2, "after": "4196401153", "masked": False}),
    req("get_ids_with_key", get_ids_with(5, key=b"order-42"),
        {"op": "GET_IDS_WITH", "count": 5, "key": "order-42", "masked": False}),
    req("get_ids_with_masked", get_ids_with(1, masked=True), {"op": "GET_IDS_WITH", "count": 1, "masked": True}),
    req("get_ids_with_every_option", get_ids_with(7, after=9223372036854775807, key=b"k" * 64, masked=True),
        {"op": "GET_IDS_WITH", "count": 7, "after": "9223372036854775807", "key": "k" * 64, "masked": True}),
    req("get_ids_with_then_ping", get_ids_with(1) + bytes.fromhex("00000009030000000000000007"),
        {"op": "GET_IDS_WITH", "count": 1, "masked": False}, consumed=10),
    req("get_ids_with_count_0", get_ids_with(0), error=err(200, "INVALID_COUNT", False)),
    req("get_ids_with_count_above_max_batch", get_ids_with(65537), error=err(201, "BATCH_TOO_LARGE", False)),
    req("get_ids_with_unknown_option_bit", get_ids_with(1, options=0x08), error=err(205, "INVALID_OPTION", False)),
    req("get_ids_with_after_sign_bit", get_ids_with(1, after=1 << 63), error=err(205, "INVALID_OPTION", False)),
    req("get_ids_with_key_with_a_space", get_ids_with(1, key=b"a b"), error=err(205, "INVALID_OPTION", False)),
    req("get_ids_with_incomplete_key", get_ids_with(1, key=b"abc")[:-1],
        incomplete=True),
    req("get_ids_with_length_disagrees_with_options",
        struct.pack(">IBIB", 7, 0x07, 1, 0) + b"\x00", error=err(100, "BAD_FRAME", True)),
    req("get_ids_with_after_missing", struct.pack(">IBIB", 6, 0x07, 1, 1), error=err(100, "BAD_FRAME", True)),
    req("get_ids_with_key_len_0", struct.pack(">IBIBB", 7, 0x07, 1, 2, 0), error=err(205, "INVALID_OPTION", False)),
    req("get_ids_with_too_long", struct.pack(">IB", 80, 0x07), error=err(100, "BAD_FRAME", True)),
    req("get_ids_with_on_version_4_is_unknown", get_ids_with(1), error=err(202, "UNKNOWN_OPCODE", False), version=4),
    {"name": "masked_ids_2", "direction": "response", "hex": masked_ids(1, [5198491534207628843, 7]).hex(),
     "decoded": {"op": "MASKED_IDS", "key_id": 1, "ids": ["5198491534207628843", "7"]}, "max_frame": MAX_FRAME},
    {"name": "masked_ids_key_61", "direction": "response", "hex": masked_ids(61, [0]).hex(),
     "decoded": {"op": "MASKED_IDS", "key_id": 61, "ids": ["0"]}, "max_frame": MAX_FRAME},
    {"name": "masked_ids_key_62", "direction": "response", "hex": masked_ids(62, [0]).hex(),
     "error": err(100, "BAD_FRAME", True), "max_frame": MAX_FRAME},
    {"name": "masked_ids_top_bit", "direction": "response", "hex": masked_ids(0, [1 << 63]).hex(),
     "error": err(100, "BAD_FRAME", True), "max_frame": MAX_FRAME},
    {"name": "masked_ids_count_mismatch", "direction": "response",
     "hex": (struct.pack(">IBBI", 14, 0x87, 0, 2) + struct.pack(">Q", 1)).hex(),
     "error": err(100, "BAD_FRAME", True), "max_frame": MAX_FRAME},
]
for status, name, message in [
    (205, "INVALID_OPTION", "masking is not configured on this node"),
    (206, "IDEMPOTENCY_KEY_REUSED", "this idempotency key came with another request"),
    (207, "IDEMPOTENCY_KEY_IN_FLIGHT", "the first request with this key is still being answered"),
]:
    cases.append({"name": f"error_{name.lower()}", "direction": "response",
                  "hex": error_frame(status, message).hex(),
                  "decoded": {"op": "ERROR", "status": status, "name": name, "message": message,
                              "closes": False, "retry_elsewhere": False},
                  "max_frame": MAX_FRAME})

with open("protocol/tests/vectors_v5.json", "w") as f:
    f.write("[\n")
    f.write(",\n".join(json.dumps(c) for c in cases))
    f.write("\n]\n")

#!/usr/bin/env python3
"""Writes clients/vectors/layouts.json: clusters' layout generations (as GET /layout's
"layouts" lists them) and IDs decoded under the generation each belongs to (LAYOUTS.md).

Run from the repository root: python3 clients/vectors/gen_layouts.py
"""
import json

DEFAULT_EPOCH = 1767225600000  # 2026-01-01T00:00:00Z
DAY = 86_400_000


def successor(prev, switch, ts, worker, seq, region=0, epoch=None):
    """The generation after `prev` from `switch`: first_id and (by default) the latest epoch."""
    shift_prev = prev["worker_bits"] + prev["sequence_bits"]
    first_id = (switch - prev["epoch_ms"]) << shift_prev
    shift = worker + seq
    need = -(-first_id // (1 << shift))  # ceil
    if epoch is None:
        epoch = switch - need
    assert (switch - epoch) << shift >= first_id, "the successor's IDs at the switch go back"
    assert ts + worker + seq == prev["timestamp_bits"] + prev["worker_bits"] + prev["sequence_bits"]
    return {"layout_generation": prev["layout_generation"] + 1, "first_id": first_id,
            "first_id_str": str(first_id), "switch_unix_ms": switch, "epoch_ms": epoch,
            "timestamp_bits": ts, "worker_bits": worker, "sequence_bits": seq, "region_bits": region}


def base(ts, worker, seq, region=0, epoch=DEFAULT_EPOCH):
    return {"layout_generation": 0, "first_id": 0, "first_id_str": "0", "switch_unix_ms": None,
            "epoch_ms": epoch, "timestamp_bits": ts, "worker_bits": worker, "sequence_bits": seq,
            "region_bits": region}


def width(layouts):
    g = layouts[0]
    return g["timestamp_bits"] + g["worker_bits"] + g["sequence_bits"]


def decode(layouts, i):
    g = max((g for g in layouts if g["first_id"] <= i), key=lambda g: g["first_id"])
    s, w, r = g["sequence_bits"], g["worker_bits"], g["region_bits"]
    sequence = i & ((1 << s) - 1)
    worker = (i >> s) & ((1 << w) - 1)
    timestamp = i >> (w + s)
    return {"id": str(i), "layout_generation": g["layout_generation"],
            "unix_ms": g["epoch_ms"] + timestamp, "timestamp": timestamp, "worker": worker,
            "region": worker >> (w - r) if r else 0, "sequence": sequence}


def check(layouts):
    for prev, nxt in zip(layouts, layouts[1:]):
        shift = prev["worker_bits"] + prev["sequence_bits"]
        last_old = ((nxt["switch_unix_ms"] - prev["epoch_ms"] - 1) << shift) | ((1 << shift) - 1)
        first_new = (nxt["switch_unix_ms"] - nxt["epoch_ms"]) << (nxt["worker_bits"] + nxt["sequence_bits"])
        assert last_old < nxt["first_id"] <= first_new


def cluster(name, layouts, extra=()):
    check(layouts)
    w = width(layouts)
    ids = {0, 1, (1 << w) - 1, *extra}
    for g in layouts[1:]:
        ids |= {g["first_id"] - 1, g["first_id"], g["first_id"] + 1}
    return {"name": name, "layouts": layouts,
            "decode": [decode(layouts, i) for i in sorted(ids)],
            "invalid": [str(1 << w), str((1 << w) + 12345)] + ([str((1 << 63) - 1)] if w < 63 else [])}


g0 = base(41, 10, 12)
default = [g0, successor(g0, DEFAULT_EPOCH + 300 * DAY, 42, 9, 12)]
j0 = base(41, 2, 10)
j1 = successor(j0, DEFAULT_EPOCH + 100 * DAY, 42, 1, 10)
j2 = successor(j1, DEFAULT_EPOCH + 200 * DAY, 40, 3, 10)
js = [j0, j1, j2]
r0 = base(41, 10, 12)
regions = [r0, successor(r0, DEFAULT_EPOCH + 50 * DAY, 40, 11, 12, region=2)]
clusters = [
    cluster("default then 42/9/12", default, [(5 << 22) | (7 << 12) | 3]),
    cluster("JavaScript-safe, three generations", js),
    cluster("region bits added", regions, [regions[1]["first_id"] + (5 << 12) * 0 + ((1 << 12) * 1500) + 9]),
]
with open("clients/vectors/layouts.json", "w") as f:
    json.dump({"clusters": clusters}, f, indent=1)
    f.write("\n")

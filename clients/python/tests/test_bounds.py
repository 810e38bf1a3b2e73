"""Time bounds for range queries: every case of clients/vectors/bounds.json, and the same
bounds recomputed another way (a search over IDs with Layout.decode) on random layouts."""

import random
import unittest

import _support  # noqa: F401
from idgen_client import (
    AfterLastTimestamp,
    BeforeEpoch,
    EmptyInterval,
    Layout,
    TimeBoundsError,
)

BOUNDS = _support.load_json("clients/vectors/bounds.json")
KINDS = {"before_epoch": BeforeEpoch, "after_last": AfterLastTimestamp, "empty": EmptyInterval}


def layout_of(case):
    l = case["layout"]
    return Layout(
        int(l["epoch_ms"]),
        l["timestamp_bits"],
        l["worker_bits"],
        l["sequence_bits"],
        l["region_bits"],
        1,
    )


def first_id_at_or_after(layout, unix_ms):
    """The smallest ID whose time is at or after ``unix_ms``, by bisection over all IDs with
    decode (no shifts of the bounds' own formulas)."""
    lo, hi = 0, 1 << layout.id_bits
    while lo < hi:  # at most 63 halvings
        mid = (lo + hi) // 2
        if layout.decode(mid).unix_ms >= unix_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


class Vectors(unittest.TestCase):
    def test_every_bounds_case(self):
        answers = errors = 0
        self.assertGreaterEqual(len(BOUNDS["layouts"]), 5)
        for lv in BOUNDS["layouts"]:
            layout = layout_of(lv)
            self.assertEqual(layout.last_unix_ms, int(lv["last_unix_ms"]), lv["name"])
            for case in lv["at"]:
                t = int(case["unix_ms"])
                with self.subTest(layout=lv["name"], at=t):
                    if "error" in case:
                        for f in (layout.min_id_at, layout.max_id_at):
                            with self.assertRaises(KINDS[case["error"]]) as cm:
                                f(t)
                            self.assertEqual(cm.exception.kind, case["error"])
                        errors += 1
                    else:
                        self.assertEqual(layout.min_id_at(t), int(case["min"]))
                        self.assertEqual(layout.max_id_at(t), int(case["max"]))
                        answers += 1
            for case in lv["bounds"]:
                f, t = int(case["from_ms"]), int(case["to_ms"])
                with self.subTest(layout=lv["name"], interval=(f, t)):
                    if "error" in case:
                        with self.assertRaises(KINDS[case["error"]]) as cm:
                            layout.bounds(f, t)
                        self.assertIsInstance(cm.exception, ValueError)
                        errors += 1
                    else:
                        lo, hi = layout.bounds(f, t)
                        self.assertEqual((lo, hi, hi - 1), (int(case["lo"]), int(case["hi"]), int(case["last"])))
                        self.assertLess(hi, 1 << 63)
                        answers += 1
        self.assertGreaterEqual(answers, 20)
        self.assertGreaterEqual(errors, 20)

    def test_errors_say_what_is_wrong(self):
        layout = layout_of(BOUNDS["layouts"][0])
        with self.assertRaisesRegex(BeforeEpoch, "before the layout's epoch"):
            layout.min_id_at(layout.epoch_ms - 1)
        with self.assertRaisesRegex(AfterLastTimestamp, "after the layout's last timestamp"):
            layout.max_id_at(layout.last_unix_ms + 1)
        with self.assertRaisesRegex(EmptyInterval, "empty"):
            layout.bounds(layout.epoch_ms + 5, layout.epoch_ms + 5)
        with self.assertRaises(TypeError):
            layout.min_id_at(1.5)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            layout.bounds(True, 5)  # type: ignore[arg-type]
        self.assertTrue(issubclass(TimeBoundsError, ValueError))

    def test_javascript_safe_layouts(self):
        """The 53-bit layouts of the vectors: their last ID is 2^53 - 1, and a value at or
        above 2^53 is not one of their IDs."""
        seen = 0
        for lv in BOUNDS["layouts"]:
            layout = layout_of(lv)
            with self.subTest(layout=lv["name"]):
                self.assertEqual(layout.max_id_at(layout.last_unix_ms), layout.max_id)
                self.assertEqual(layout.decode(layout.max_id).unix_ms, layout.last_unix_ms)
                if layout.id_bits < 63:
                    with self.assertRaisesRegex(ValueError, "not an ID of this layout"):
                        layout.decode(layout.max_id + 1)
                if layout.id_bits == 53:
                    seen += 1
                    self.assertTrue(layout.js_safe)
                    self.assertEqual(layout.max_id, 2**53 - 1)
        self.assertGreaterEqual(seen, 2)
        self.assertFalse(layout_of(BOUNDS["layouts"][0]).js_safe)
        self.assertEqual(layout_of(BOUNDS["layouts"][0]).id_bits, 63)


class Independent(unittest.TestCase):
    """The bounds against a search over IDs with decode, and against IDs built field by field,
    on random layouts and intervals (seeded, so a failure repeats)."""

    def test_random_layouts_agree_with_a_search_over_ids(self):
        rng = random.Random(30)
        for _ in range(300):
            t_bits = rng.randint(1, 61)
            width = rng.randint(max(32, t_bits + 2), 63)  # any width from 32 to 63 bits
            w_bits = rng.randint(1, width - 1 - t_bits)
            s_bits = width - t_bits - w_bits
            layout = Layout(rng.randint(0, 1 << 44), t_bits, w_bits, s_bits, rng.randint(0, w_bits), 1)
            span = layout.last_unix_ms - layout.epoch_ms
            a, b = sorted(rng.sample(range(span + 1), 2)) if span >= 1 else (0, 0)
            if a == b:
                continue
            f, t = layout.epoch_ms + a, layout.epoch_ms + b
            with self.subTest(layout=layout, interval=(f, t)):
                lo, hi = layout.bounds(f, t)
                self.assertEqual(lo, first_id_at_or_after(layout, f))
                self.assertEqual(hi, first_id_at_or_after(layout, t))
                self.assertEqual(layout.min_id_at(f), lo)
                self.assertEqual(layout.max_id_at(t - 1), hi - 1)
                # IDs built from their fields: inside iff their time is.
                for when in (f, t - 1, rng.randint(f, t - 1), f - 1, t):
                    if not layout.epoch_ms <= when <= layout.last_unix_ms:
                        continue
                    worker = rng.randrange(1 << w_bits)
                    seq = rng.randrange(1 << s_bits)
                    id_ = ((when - layout.epoch_ms) << (w_bits + s_bits)) | (worker << s_bits) | seq
                    self.assertEqual(lo <= id_ < hi, f <= when < t, (when, worker, seq))
                    self.assertEqual(layout.decode(id_).unix_ms, when)


if __name__ == "__main__":
    unittest.main()

"""Layout generations: every case of clients/vectors/layouts.json, and lists that break the
rules (LAYOUTS.md)."""

import json
import pathlib
import unittest

from idgen_client import LayoutGenerations

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors" / "layouts.json"


class GenerationsTest(unittest.TestCase):
    def setUp(self):
        self.clusters = json.loads(VECTORS.read_text())["clusters"]

    def test_every_vector(self):
        self.assertGreaterEqual(len(self.clusters), 3)
        for c in self.clusters:
            gens = LayoutGenerations.from_json({"layouts": c["layouts"]})
            self.assertEqual(len(gens.generations), len(c["layouts"]))
            for d in c["decode"]:
                generation, parts = gens.decode(int(d["id"]))
                got = {"id": d["id"], "layout_generation": generation, "unix_ms": parts.unix_ms,
                       "timestamp": parts.timestamp, "worker": parts.worker,
                       "region": parts.region, "sequence": parts.sequence}
                self.assertEqual(got, d, c["name"])
            for bad in c["invalid"]:
                with self.assertRaises(ValueError):
                    gens.decode(int(bad))

    def test_lists_that_break_the_rules_are_refused(self):
        good = self.clusters[0]["layouts"]
        def changed(i, **kv):
            lst = json.loads(json.dumps(good))
            lst[i].update(kv)
            return lst
        for bad in [
            [],
            changed(1, first_id_str="12345"),
            changed(1, switch_unix_ms=None),
            changed(1, timestamp_bits=43),
            changed(1, epoch_ms=good[0]["epoch_ms"]),
            changed(1, layout_generation=2),
            changed(0, first_id_str="1"),
        ]:
            with self.assertRaises(ValueError, msg=bad):
                LayoutGenerations.from_json(bad)
        with self.assertRaises(TypeError):
            LayoutGenerations.from_json(good).decode("1")


if __name__ == "__main__":
    unittest.main()

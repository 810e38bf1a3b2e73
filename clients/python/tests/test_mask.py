"""(b) Masking: every case of clients/vectors/mask.json (NIST's FF1 samples, masked IDs,
errors), plus round trips, injectivity and what a keyring shows."""

import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import _support  # noqa: F401
from idgen_client import mask
from idgen_client.mask import Keyring, MaskError

VECTORS = _support.load_json("clients/vectors/mask.json")
ALPHABET36 = "0123456789abcdefghijklmnopqrstuvwxyz"
KEY = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"


class NistSamples(unittest.TestCase):
    def test_all_nine_samples_encrypt_and_decrypt(self):
        samples = VECTORS["nist_ff1"]
        self.assertEqual([s["sample"] for s in samples], list(range(1, 10)))
        for s in samples:
            with self.subTest(sample=s["sample"]):
                key, tweak, radix = bytes.fromhex(s["key"]), bytes.fromhex(s["tweak"]), s["radix"]
                pt = [int(c, 36) for c in s["plaintext"]]
                ct = mask.ff1_encrypt(key, radix, tweak, pt)
                self.assertEqual("".join(ALPHABET36[d] for d in ct), s["ciphertext"])
                self.assertEqual(mask.ff1_decrypt(key, radix, tweak, ct), pt)

    def test_ff1_refuses_what_it_cannot_take(self):
        for args in [
            (bytes(15), 10, b"", [0] * 10),  # key length
            (bytes(16), 1, b"", [0] * 10),  # radix
            (bytes(16), 10, b"", [0] * 5),  # 10^5 < 10^6: too short
            (bytes(16), 10, b"", [0] * 9 + [10]),  # digit not below the radix
        ]:
            with self.subTest(args=args[1:]):
                with self.assertRaises(MaskError):
                    mask.ff1_encrypt(*args)


class MaskVectors(unittest.TestCase):
    def test_every_mask_case(self):
        cases = VECTORS["mask"]
        self.assertGreaterEqual(len(cases), 20)
        rotated = 0
        for c in cases:
            with self.subTest(case=c):
                ring = Keyring.parse(c["keys"])
                w, kid = c["width"], c["key_id"]
                id_, masked = int(c["id"]), int(c["masked"])
                if kid == ring.current_key_id():
                    self.assertEqual(ring.mask(id_, w), masked)
                    self.assertEqual(ring.mask_str(id_, w), c["masked_str"])
                    self.assertEqual(ring.unmask(masked, width=w), id_)
                else:
                    rotated += 1
                    self.assertNotEqual(ring.mask(id_, w), masked)
                self.assertEqual(ring.unmask(masked, kid, w), id_)
                self.assertEqual(ring.unmask_str(c["masked_str"], w), id_)
        self.assertGreaterEqual(rotated, 2)

    def test_every_error_case(self):
        cases = VECTORS["errors"]
        self.assertGreaterEqual(len(cases), 20)
        for c in cases:
            with self.subTest(case=c):
                with self.assertRaises(MaskError) as cm:
                    if c["op"] == "parse_keys":
                        Keyring.parse(c["input"])
                    elif c["op"] == "unmask_str":
                        Keyring.parse(c["keys"]).unmask_str(c["input"], c["width"])
                    elif c["op"] == "mask":
                        Keyring.parse(c["keys"]).mask(int(c["input"]), c["width"])
                    else:
                        self.fail(f"unknown op {c['op']}")
                self.assertIn(c["error"], str(cm.exception))


class KeyringBehaviour(unittest.TestCase):
    def test_round_trips_and_no_collisions(self):
        ring = Keyring.parse(f"7:{KEY}")
        start = 721864159923240960
        ids = list(range(start, start + 300)) + [(i * 0x9E3779B97F4A7C15) % (1 << 63) for i in range(300)]
        masked = [ring.mask(i) for i in ids]
        self.assertEqual(len(set(masked)), len(set(ids)))
        self.assertTrue(all(0 <= m < (1 << 63) for m in masked))
        self.assertEqual([ring.unmask(m) for m in masked], ids)
        for w in (20, 33, 53, 63):
            for i in (0, 1, (1 << w) - 1, (1 << w) // 3):
                s = ring.mask_str(i, w)
                self.assertEqual((len(s), s[0]), (12, "7"))
                self.assertEqual(ring.unmask_str(s, w), i)

    def test_repr_and_errors_show_no_key(self):
        ring = Keyring.parse(f"1:{KEY}\n2:{KEY.upper()}")
        self.assertEqual(repr(ring), "Keyring(key_ids='12')")
        self.assertEqual(str(ring), "Keyring(key_ids='12')")
        self.assertEqual((ring.current_key_id(), ring.key_ids()), (1, [1, 2]))
        with self.assertRaises(MaskError) as cm:
            Keyring.parse("1:" + KEY[:-1] + "x")
        self.assertNotIn(KEY[:8], str(cm.exception))
        self.assertIn("position 63", str(cm.exception))
        with self.assertRaises(MaskError) as cm:
            ring.unmask(5, key_id=3)
        self.assertEqual(str(cm.exception), "unknown key id 3")

    def test_types_are_checked(self):
        ring = Keyring.parse(f"1:{KEY}")
        for bad in ("1", 1.0, True, None):
            with self.assertRaises(TypeError):
                ring.mask(bad)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            ring.unmask_str(b"1abcdefghijk")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            Keyring.parse(None)  # type: ignore[arg-type]
        with self.assertRaises(MaskError):
            ring.mask(-1)
        with self.assertRaises(MaskError):
            ring.unmask_str("1ééééééééééé")
        with self.assertRaises(TypeError):
            ring.unmask(5, key_id="1")  # type: ignore[arg-type]

    def test_without_cryptography_the_client_imports_and_masking_says_what_to_install(self):
        code = (
            "import sys; sys.modules['cryptography'] = None\n"
            "import idgen_client\n"
            "from idgen_client.mask import Keyring\n"
            "try:\n"
            f"    Keyring.parse('1:{KEY}')\n"
            "except ImportError as e:\n"
            "    print(e)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
            cwd=os.path.dirname(os.path.dirname(mask.__file__)),
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("pip install 'idgen-client[mask]'", out.stdout)

    def test_from_file_and_env(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "keys")
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"# idgen mask keys\n3:{KEY}\n\n1:{KEY[:32]}\n")
            self.assertEqual(Keyring.from_file(path).key_ids(), [3, 1])
            with self.assertRaises(MaskError) as cm:
                Keyring.from_file(os.path.join(d, "missing"))
            self.assertIn("cannot read", str(cm.exception))
        with mock.patch.dict(os.environ, {mask.ENV_VAR: f"5:{KEY}"}):
            self.assertEqual(Keyring.from_env().current_key_id(), 5)
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(MaskError) as cm:
                Keyring.from_env()
            self.assertIn("IDGEN_MASK_KEYS is not set", str(cm.exception))


if __name__ == "__main__":
    unittest.main()

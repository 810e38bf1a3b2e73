"""(b) String forms: every case of clients/vectors/forms.json."""

import unittest

import _support  # noqa: F401
from idgen_client import forms

FORMS = _support.load_json("clients/vectors/forms.json")

PARSERS = {
    "decimal": forms.parse_decimal,
    "base62": forms.parse_base62,
    "base32": forms.parse_base32,
}
# The specific ValueError subclass each "why" of the invalid cases calls for.
WHY = [
    ("empty", forms.EmptyIdString),
    ("out of range", forms.OutOfRange),
    ("above 2^64", forms.OutOfRange),
    ("leading zero", forms.LeadingZero),
    ("characters", forms.WrongLength),
    ("too long", forms.WrongLength),
    ("not a digit", forms.InvalidCharacter),
    ("sign", forms.InvalidCharacter),
    ("alphabet", forms.InvalidCharacter),
    ("hyphen", forms.InvalidCharacter),
]


class Forms(unittest.TestCase):
    def test_every_form_case_encodes_and_parses(self):
        self.assertGreaterEqual(len(FORMS["forms"]), 5)
        for case in FORMS["forms"]:
            id_ = int(case["id"])
            with self.subTest(id=case["id"]):
                self.assertEqual(forms.to_decimal(id_), case["decimal"])
                self.assertEqual(forms.to_base62(id_), case["base62"])
                self.assertEqual(forms.to_base32(id_), case["base32"])
                self.assertEqual(forms.parse_decimal(case["decimal"]), id_)
                self.assertEqual(forms.parse_base62(case["base62"]), id_)
                self.assertEqual(forms.parse_base32(case["base32"]), id_)
                self.assertEqual(forms.parse_base32(case["base32"].lower()), id_)

    def test_sortable_forms_sort_like_the_numbers(self):
        ids = sorted(int(c["id"]) for c in FORMS["forms"])
        self.assertEqual(sorted(ids, key=forms.to_base62), ids)
        self.assertEqual(sorted(ids, key=forms.to_base32), ids)

    def test_every_invalid_case_is_rejected_with_a_clear_value_error(self):
        self.assertGreaterEqual(len(FORMS["invalid"]), 5)
        for case in FORMS["invalid"]:
            with self.subTest(form=case["form"], text=case["text"], why=case["why"]):
                with self.assertRaises(forms.InvalidIdString) as cm:
                    PARSERS[case["form"]](case["text"])
                self.assertIsInstance(cm.exception, ValueError)
                self.assertIn(case["form"], str(cm.exception))
                expected = [cls for key, cls in WHY if key in case["why"]]
                if expected:
                    self.assertIsInstance(cm.exception, expected[0], str(cm.exception))

    def test_every_base32_alias_case(self):
        self.assertGreaterEqual(len(FORMS["base32_aliases"]), 1)
        for case in FORMS["base32_aliases"]:
            with self.subTest(text=case["text"]):
                self.assertEqual(forms.parse_base32(case["text"]), int(case["id"]))

    def test_out_of_range_integers(self):
        for fn in (forms.to_decimal, forms.to_base62, forms.to_base32):
            with self.assertRaises(ValueError):
                fn(1 << 63)
            with self.assertRaises(ValueError):
                fn(-1)


if __name__ == "__main__":
    unittest.main()

"""String forms of IDs, exactly per clients/vectors/FORMS.md.

Every form covers IDs in ``0 .. 2**63`` (an idgen ID never has its top bit set).

* :func:`to_decimal` / :func:`parse_decimal`: plain base 10, no sign, no leading zeros.
  Decimal strings do NOT sort like the numbers.
* :func:`to_base62` / :func:`parse_base62`: ``0-9A-Za-z``, always 11 characters; byte-wise
  string order equals numeric order. Case-sensitive.
* :func:`to_base32` / :func:`parse_base32`: Crockford base32, always 13 characters, upper
  case; parsing is case-insensitive and maps ``I``/``L`` to 1 and ``O`` to 0. Sortable.

Public-ID masking (FF1 over AES) is :mod:`idgen_client.mask`.

Parse errors are :class:`InvalidIdString` (a ``ValueError``) subclasses that say what is
wrong: :class:`EmptyIdString`, :class:`WrongLength`, :class:`InvalidCharacter`,
:class:`LeadingZero`, :class:`OutOfRange`.
"""

from typing import Dict

__all__ = [
    "ID_LIMIT",
    "InvalidIdString",
    "EmptyIdString",
    "WrongLength",
    "InvalidCharacter",
    "LeadingZero",
    "OutOfRange",
    "to_decimal",
    "parse_decimal",
    "to_base62",
    "parse_base62",
    "to_base32",
    "parse_base32",
]

#: Every ID is below this: the sign bit of an idgen ID is always 0.
ID_LIMIT = 1 << 63

BASE62_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BASE62_WIDTH = 11
BASE32_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
BASE32_WIDTH = 13
DECIMAL_MAX_DIGITS = 19

_BASE62_VALUE: Dict[str, int] = {c: i for i, c in enumerate(BASE62_ALPHABET)}
_BASE32_VALUE: Dict[str, int] = {}
for _i, _c in enumerate(BASE32_ALPHABET):
    _BASE32_VALUE[_c] = _i
    _BASE32_VALUE[_c.lower()] = _i
for _alias, _digit in (("I", 1), ("L", 1), ("O", 0)):
    _BASE32_VALUE[_alias] = _digit
    _BASE32_VALUE[_alias.lower()] = _digit
del _i, _c, _alias, _digit


class InvalidIdString(ValueError):
    """A string that is not a valid ID in the form it was parsed as."""

    def __init__(self, form: str, text: str, reason: str):
        self.form = form
        self.text = text
        self.reason = reason
        super().__init__(f"invalid {form} ID {text!r}: {reason}")


class EmptyIdString(InvalidIdString):
    """The string is empty."""


class WrongLength(InvalidIdString):
    """The string has the wrong number of characters for its form."""


class InvalidCharacter(InvalidIdString):
    """The string holds a character outside the form's alphabet."""


class LeadingZero(InvalidIdString):
    """A decimal with a leading zero (only ``0`` itself may start with 0)."""


class OutOfRange(InvalidIdString):
    """The value is at or above 2**63 (or an integer argument is negative or too big)."""


def _check_id(value: int, what: str = "ID") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value < ID_LIMIT:
        raise OutOfRange("integer", str(value), f"{what} must be in 0 .. 2^63")
    return value


def _check_text(form: str, text: str) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{form} ID must be a str, not {type(text).__name__}")
    if text == "":
        raise EmptyIdString(form, text, "empty string")


# --- decimal -----------------------------------------------------------------------------


def to_decimal(value: int) -> str:
    """Base 10, no sign, no leading zeros (``"0"`` for zero)."""
    return str(_check_id(value))


def parse_decimal(text: str) -> int:
    """Parse ASCII digits (at most 19, no leading zero except ``"0"``) into an ID < 2**63."""
    _check_text("decimal", text)
    for i, ch in enumerate(text):
        if not "0" <= ch <= "9":
            raise InvalidCharacter(
                "decimal", text, f"character {ch!r} at position {i} is not an ASCII digit"
            )
    if len(text) > DECIMAL_MAX_DIGITS:
        raise WrongLength(
            "decimal", text, f"{len(text)} digits, at most {DECIMAL_MAX_DIGITS} allowed"
        )
    if len(text) > 1 and text[0] == "0":
        raise LeadingZero("decimal", text, "leading zero")
    value = int(text)
    if value >= ID_LIMIT:
        raise OutOfRange("decimal", text, "value is at or above 2^63")
    return value


# --- base62 ------------------------------------------------------------------------------


def to_base62(value: int) -> str:
    """11 characters of ``0-9A-Za-z``, most significant first, left-padded with ``0``."""
    v = _check_id(value)
    out = []
    for _ in range(BASE62_WIDTH):
        v, digit = divmod(v, 62)
        out.append(BASE62_ALPHABET[digit])
    return "".join(reversed(out))


def parse_base62(text: str) -> int:
    """Parse exactly 11 case-sensitive base62 characters into an ID < 2**63."""
    _check_text("base62", text)
    if len(text) != BASE62_WIDTH:
        raise WrongLength(
            "base62", text, f"{len(text)} characters, exactly {BASE62_WIDTH} required"
        )
    value = 0
    for i, ch in enumerate(text):
        digit = _BASE62_VALUE.get(ch)
        if digit is None:
            raise InvalidCharacter(
                "base62", text, f"character {ch!r} at position {i} is not in 0-9A-Za-z"
            )
        value = value * 62 + digit
    if value >= ID_LIMIT:
        raise OutOfRange("base62", text, "value is at or above 2^63")
    return value


# --- Crockford base32 --------------------------------------------------------------------


def to_base32(value: int) -> str:
    """13 upper-case Crockford base32 characters, most significant first, left-padded."""
    v = _check_id(value)
    out = []
    for _ in range(BASE32_WIDTH):
        out.append(BASE32_ALPHABET[v & 31])
        v >>= 5
    return "".join(reversed(out))


def parse_base32(text: str) -> int:
    """Parse exactly 13 Crockford base32 characters (case-insensitive; I/L read as 1, O as 0;
    no hyphens) into an ID < 2**63."""
    _check_text("base32", text)
    if len(text) != BASE32_WIDTH:
        raise WrongLength(
            "base32", text, f"{len(text)} characters, exactly {BASE32_WIDTH} required"
        )
    value = 0
    for i, ch in enumerate(text):
        digit = _BASE32_VALUE.get(ch)
        if digit is None:
            raise InvalidCharacter(
                "base32",
                text,
                f"character {ch!r} at position {i} is not in the Crockford base32 alphabet",
            )
        value = (value << 5) | digit
    if value >= ID_LIMIT:
        raise OutOfRange("base32", text, "value is at or above 2^63 (first character above 7)")
    return value

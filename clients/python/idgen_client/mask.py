"""Public-ID masking: FF1 format-preserving encryption (NIST SP 800-38G, AES) over an ID's
bits, exactly per clients/vectors/MASK.md (shared by every idgen client and the node).

Needs the ``cryptography`` package for AES: ``pip install 'idgen-client[mask]'``.

Masking maps an ID, under a secret AES key, to another integer of the same width ``W`` (63
for the default layout): a permutation, so masked IDs never collide, and without the key a
masked ID says nothing about the real one. With the key, :meth:`Keyring.unmask` turns it back.

* The ID is written as ``W`` binary digits, most significant first; FF1 over radix 2
  encrypts them with the tweak ``bytes([key_id])``; the result read back the same way is the
  masked integer (``0 <= masked < 2**W``).
* Key IDs are ``0 ..= 61``, written as one base62 character. The keyring text is
  ``<key id>:<hex key>`` entries separated by commas or newlines (keys of 32, 48 or 64 hex
  digits: AES-128, -192, -256); the first entry is the current key (it masks), every entry
  unmasks. Lines starting with ``#`` are comments.
* The string form is the key ID's character and the masked integer in 11 base62 characters
  (12 in all): it names its key. The integer form does not: :meth:`Keyring.unmask` uses the
  current key unless told another.

Errors are :class:`MaskError` (a ``ValueError``); no message and no ``repr`` shows a key.
"""

import os
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:  # pragma: no cover
    from cryptography.hazmat.primitives.ciphers import Cipher, modes

__all__ = [
    "ENV_VAR",
    "DEFAULT_WIDTH",
    "MIN_WIDTH",
    "MAX_WIDTH",
    "MAX_KEY_ID",
    "MASKED_STR_LEN",
    "MaskError",
    "Keyring",
    "ff1_encrypt",
    "ff1_decrypt",
]

#: The environment variable :meth:`Keyring.from_env` reads.
ENV_VAR = "IDGEN_MASK_KEYS"
#: The width of the default layout's IDs and of their masked forms.
DEFAULT_WIDTH = 63
#: The narrowest width masking supports (FF1 over radix 2 needs at least 20 digits).
MIN_WIDTH = 20
#: The widest width masking supports.
MAX_WIDTH = 63
#: The largest key ID.
MAX_KEY_ID = 61
#: Length of the masked string form.
MASKED_STR_LEN = 12

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE62_VALUE: Dict[str, int] = {c: i for i, c in enumerate(_BASE62)}
_HEX = frozenset("0123456789abcdefABCDEF")
_DECIMAL = frozenset("0123456789")


class MaskError(ValueError):
    """A keyring that cannot be read, or a value that cannot be masked or unmasked."""


def _aes(key: bytes) -> "Cipher[modes.ECB]":
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "idgen_client.mask needs the 'cryptography' package for AES: "
            "pip install 'idgen-client[mask]'"
        ) from e
    return Cipher(algorithms.AES(key), modes.ECB())


def _num(digits: Sequence[int], radix: int) -> int:
    value = 0
    for d in digits:
        value = value * radix + d
    return value


def _str(value: int, radix: int, length: int) -> List[int]:
    out = [0] * length
    for i in range(length - 1, -1, -1):
        value, out[i] = divmod(value, radix)
    return out


class _Ff1:
    """FF1 (SP 800-38G, Algorithms 7 and 8) under one AES key, any radix 2 ..= 65536."""

    __slots__ = ("_cipher",)

    def __init__(self, key: bytes):
        if len(key) not in (16, 24, 32):
            raise MaskError(
                f"wrong key length: a key is 32, 48 or 64 hex digits, not {len(key) * 2}"
            )
        self._cipher = _aes(key)

    def _rounds(
        self, radix: int, tweak: bytes, digits: Sequence[int], decrypt: bool
    ) -> List[int]:
        if not 2 <= radix <= 1 << 16:
            raise MaskError(f"FF1: radix {radix} not supported")
        n = len(digits)
        if n < 2 or radix**n < 1_000_000:
            raise MaskError(f"FF1: numeral string too short ({n} digits of radix {radix})")
        if any(not 0 <= d < radix for d in digits):
            raise MaskError(f"FF1: a digit is not below the radix {radix}")
        t = len(tweak)
        u = n // 2
        v = n - u
        a: List[int] = list(digits[:u])
        b_: List[int] = list(digits[u:])
        # b = ceil(ceil(v * log2(radix)) / 8), exactly: ceil(log2(radix^v)) is the bit
        # length of radix^v - 1.
        b = ((radix**v - 1).bit_length() + 7) // 8
        d = 4 * ((b + 3) // 4) + 4
        p = (
            bytes([1, 2, 1])
            + radix.to_bytes(3, "big")
            + bytes([10, u % 256])
            + n.to_bytes(4, "big")
            + t.to_bytes(4, "big")
        )
        prefix = p + tweak + bytes((-t - b - 1) % 16)
        enc = self._cipher.encryptor()
        steps = range(9, -1, -1) if decrypt else range(10)
        for i in steps:
            other = a if decrypt else b_
            q_tail = bytes([i]) + _num(other, radix).to_bytes(b, "big")
            # PRF: CBC-MAC (zero IV) over P || Q, block by block through AES-ECB.
            data = prefix + q_tail
            r = bytes(16)
            for off in range(0, len(data), 16):
                block = bytes(x ^ y for x, y in zip(r, data[off : off + 16]))
                r = enc.update(block)
            s = r
            j = 1
            while len(s) < d:
                block = bytes(x ^ y for x, y in zip(r, j.to_bytes(16, "big")))
                s += enc.update(block)
                j += 1
            y = int.from_bytes(s[:d], "big")
            m = u if i % 2 == 0 else v
            if decrypt:
                c = (_num(b_, radix) - y) % radix**m
                b_, a = a, _str(c, radix, m)
            else:
                c = (_num(a, radix) + y) % radix**m
                a, b_ = b_, _str(c, radix, m)
        return a + b_


def ff1_encrypt(key: bytes, radix: int, tweak: bytes, digits: Sequence[int]) -> List[int]:
    """FF1.Encrypt (SP 800-38G Algorithm 7): AES under ``key`` (16, 24 or 32 bytes),
    ``digits`` most significant first, each below ``radix``."""
    return _Ff1(key)._rounds(radix, tweak, digits, decrypt=False)


def ff1_decrypt(key: bytes, radix: int, tweak: bytes, digits: Sequence[int]) -> List[int]:
    """FF1.Decrypt (SP 800-38G Algorithm 8), the inverse of :func:`ff1_encrypt`."""
    return _Ff1(key)._rounds(radix, tweak, digits, decrypt=True)


def _check_width(width: int) -> None:
    if isinstance(width, bool) or not isinstance(width, int):
        raise TypeError(f"width must be an int, not {type(width).__name__}")
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise MaskError(f"mask width {width} not supported (expected 20..=63)")


def _check_value(value: int, width: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    _check_width(width)
    if not 0 <= value < 1 << width:
        raise MaskError(f"{what} out of range: not below 2^{width}")


def _bits(value: int, width: int) -> List[int]:
    return [(value >> i) & 1 for i in range(width - 1, -1, -1)]


def _from_bits(bits: Sequence[int]) -> int:
    return _num(bits, 2)


class Keyring:
    """Masking keys: the current one (the first) masks, every one unmasks.

    Build one with :meth:`parse`, :meth:`from_env` or :meth:`from_file`. ``repr`` shows the
    key IDs, never the keys.
    """

    __slots__ = ("_keys",)

    def __init__(self, keys: Sequence[Tuple[int, bytes]]):
        """Keys as ``(key_id, key_bytes)`` pairs, the current one first."""
        if not keys:
            raise MaskError("mask keys: empty keyring, no keys (expected <keyid>:<hex key> entries)")
        ring: List[Tuple[int, _Ff1]] = []
        for n, (key_id, key) in enumerate(keys, 1):
            if isinstance(key_id, bool) or not isinstance(key_id, int):
                raise TypeError(f"key id must be an int, not {type(key_id).__name__}")
            if not 0 <= key_id <= MAX_KEY_ID:
                raise MaskError(f"mask keys: entry {n}: key id out of range (0..=61)")
            if any(k == key_id for k, _ in ring):
                raise MaskError(f"mask keys: entry {n}: duplicate key id {key_id}")
            if not isinstance(key, (bytes, bytearray)):
                raise TypeError(f"key must be bytes, not {type(key).__name__}")
            try:
                ring.append((key_id, _Ff1(bytes(key))))
            except MaskError as e:
                raise MaskError(f"mask keys: entry {n}: {e}") from None
        self._keys = ring

    @classmethod
    def parse(cls, text: str) -> "Keyring":
        """A keyring from its text: ``<key id>:<hex key>`` entries separated by commas
        and/or newlines; blank entries, surrounding whitespace and ``#`` lines ignored."""
        if not isinstance(text, str):
            raise TypeError(f"keyring text must be a str, not {type(text).__name__}")
        entries = [
            item.strip()
            for line in text.splitlines()
            if not line.lstrip().startswith("#")
            for item in line.split(",")
        ]
        keys: List[Tuple[int, bytes]] = []
        seen = set()
        for n, item in enumerate((e for e in entries if e), 1):
            key_id_text, sep, hex_text = item.partition(":")
            if not sep:
                raise MaskError(
                    f"mask keys: malformed entry {n} (expected <keyid>:<hex key>)"
                )
            key_id_text, hex_text = key_id_text.strip(), hex_text.strip()
            if not key_id_text or any(c not in _DECIMAL for c in key_id_text):
                raise MaskError(
                    f"mask keys: entry {n}: invalid key id (expected a decimal number 0..=61)"
                )
            key_id = int(key_id_text)
            if key_id > MAX_KEY_ID:
                raise MaskError(f"mask keys: entry {n}: key id out of range (0..=61)")
            if key_id in seen:
                raise MaskError(f"mask keys: entry {n}: duplicate key id {key_id}")
            seen.add(key_id)
            for pos, c in enumerate(hex_text):
                if c not in _HEX:
                    raise MaskError(
                        f"mask keys: entry {n}: the key is not hex (invalid hex digit at position {pos})"
                    )
            if len(hex_text) not in (32, 48, 64):
                raise MaskError(
                    f"mask keys: entry {n}: wrong key length: a key is 32, 48 or 64 hex digits, "
                    f"not {len(hex_text)}"
                )
            keys.append((key_id, bytes.fromhex(hex_text)))
        return cls(keys)

    @classmethod
    def from_env(cls) -> "Keyring":
        """The keyring in the environment variable ``IDGEN_MASK_KEYS``."""
        text = os.environ.get(ENV_VAR)
        if text is None:
            raise MaskError(f"mask keys: {ENV_VAR} is not set")
        return cls.parse(text)

    @classmethod
    def from_file(cls, path: Union["os.PathLike[str]", str]) -> "Keyring":
        """The keyring in a file (the text :meth:`parse` reads)."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise MaskError(f"mask keys: cannot read {os.fspath(path)}: {e}") from None
        return cls.parse(text)

    def __repr__(self) -> str:
        return f"Keyring(key_ids={self.key_ids_text()!r})"

    __str__ = __repr__

    def current_key_id(self) -> int:
        """The current key's ID (the key that masks)."""
        return self._keys[0][0]

    def key_ids(self) -> List[int]:
        """Every key's ID, the current one first."""
        return [k for k, _ in self._keys]

    def key_ids_text(self) -> str:
        """The key IDs as base62 characters, the current one first."""
        return "".join(_BASE62[k] for k, _ in self._keys)

    def _key(self, key_id: int) -> _Ff1:
        for k, ff1 in self._keys:
            if k == key_id:
                return ff1
        name = _BASE62[key_id] if 0 <= key_id <= MAX_KEY_ID else str(key_id)
        raise MaskError(f"unknown key id {name}")

    def mask(self, id_: int, width: int = DEFAULT_WIDTH) -> int:
        """The masked integer form of a ``width``-bit ID under the current key."""
        _check_value(id_, width, "ID")
        key_id, ff1 = self._keys[0]
        return _from_bits(ff1._rounds(2, bytes([key_id]), _bits(id_, width), decrypt=False))

    def unmask(
        self, masked: int, key_id: Optional[int] = None, width: int = DEFAULT_WIDTH
    ) -> int:
        """The ID whose masked integer form under ``key_id`` (default: the current key)
        is ``masked``."""
        _check_value(masked, width, "masked ID")
        if key_id is not None and (isinstance(key_id, bool) or not isinstance(key_id, int)):
            raise TypeError(f"key_id must be an int, not {type(key_id).__name__}")
        kid = self.current_key_id() if key_id is None else key_id
        ff1 = self._key(kid)
        return _from_bits(ff1._rounds(2, bytes([kid]), _bits(masked, width), decrypt=True))

    def mask_str(self, id_: int, width: int = DEFAULT_WIDTH) -> str:
        """The masked string form: the current key ID's character and the masked integer
        in 11 base62 characters."""
        value = self.mask(id_, width)
        out = []
        for _ in range(MASKED_STR_LEN - 1):
            value, digit = divmod(value, 62)
            out.append(_BASE62[digit])
        return _BASE62[self.current_key_id()] + "".join(reversed(out))

    def unmask_str(self, text: str, width: int = DEFAULT_WIDTH) -> int:
        """The ID a masked string form stands for, unmasked with the key it names."""
        if not isinstance(text, str):
            raise TypeError(f"masked ID must be a str, not {type(text).__name__}")
        _check_width(width)
        if len(text) != MASKED_STR_LEN:
            raise MaskError(
                f"masked ID: wrong length {len(text)} (expected {MASKED_STR_LEN} characters)"
            )
        for pos, c in enumerate(text):
            if c not in _BASE62_VALUE:
                raise MaskError(f"masked ID: invalid character {c!r} at position {pos}")
        key_id = _BASE62_VALUE[text[0]]
        ff1 = self._key(key_id)
        masked = _num([_BASE62_VALUE[c] for c in text[1:]], 62)
        if masked >= 1 << width:
            raise MaskError(f"masked ID out of range: not below 2^{width}")
        return _from_bits(ff1._rounds(2, bytes([key_id]), _bits(masked, width), decrypt=True))

//! Public-ID masking: a keyed, reversible permutation of `0 .. 2^63`, exactly as
//! specified in `clients/vectors/FORMS.md` (shared by every idgen client).
//!
//! An idgen ID shows when it was made and by which worker. Masking turns it into a
//! public ID that does not, and [`MaskKey::unmask`] turns it back. The mapping is a
//! permutation (a 6-round Feistel network on 64 bits keyed by 128 bits, with cycle
//! walking to stay below `2^63`), so two IDs can never mask to the same value, and a
//! masked ID is itself a valid value for every [string form](crate::forms).
//!
//! **Masked IDs are not security tokens.** The key is shared by every service that
//! unmasks, the construction is not a vetted cipher, and a masked ID grants nothing. It
//! only keeps creation time and worker out of casual public view. Never use one where
//! guessing or forging must be impossible (session IDs, password-reset links, capability
//! URLs).
//!
//! ```
//! use idgen_client::mask::MaskKey;
//!
//! let key = MaskKey::from_hex("000102030405060708090a0b0c0d0e0f")?;
//! let id = 721_864_159_923_240_960;
//! let public = key.mask(id)?;
//! assert_eq!(public, 3_375_378_808_002_988_854);
//! assert_eq!(key.unmask(public)?, id);
//!
//! // Combine with a string form for URLs.
//! let text = idgen_client::forms::to_base62(public).unwrap();
//! assert_eq!(key.unmask(idgen_client::forms::parse_base62(&text).unwrap())?, id);
//! # Ok::<(), idgen_client::mask::MaskError>(())
//! ```

use std::fmt;

use idgen_id::forms::LIMIT;

/// What went wrong building a key or masking a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MaskError {
    /// A hex key that is not 32 characters long.
    KeyLength {
        /// Characters in the string.
        len: usize,
    },
    /// A hex key with a character that is not a hex digit.
    KeyCharacter {
        /// The offending character.
        ch: char,
        /// Its position, in characters from 0.
        position: usize,
    },
    /// The value to mask or unmask is `2^63` or more.
    OutOfRange,
}

impl fmt::Display for MaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaskError::KeyLength { len } => {
                write!(f, "mask key: wrong length {len} (expected 32 hex digits)")
            }
            MaskError::KeyCharacter { ch, position } => write!(
                f,
                "mask key: invalid character {ch:?} at position {position} (expected a hex digit)"
            ),
            MaskError::OutOfRange => f.write_str("out of range (≥ 2^63)"),
        }
    }
}

impl std::error::Error for MaskError {}

/// A 128-bit masking key.
///
/// `Debug` does not print the key.
#[derive(Clone, PartialEq, Eq)]
pub struct MaskKey {
    k0: u64,
    k1: u64,
}

impl fmt::Debug for MaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MaskKey(..)")
    }
}

impl MaskKey {
    /// The key from its 16 bytes: `k0` is the big-endian `u64` of bytes 0–7, `k1` of
    /// bytes 8–15.
    pub fn from_bytes(bytes: [u8; 16]) -> MaskKey {
        let mut k0 = [0u8; 8];
        let mut k1 = [0u8; 8];
        k0.copy_from_slice(&bytes[..8]);
        k1.copy_from_slice(&bytes[8..]);
        MaskKey {
            k0: u64::from_be_bytes(k0),
            k1: u64::from_be_bytes(k1),
        }
    }

    /// The key from 32 hex digits (either case, nothing else: no `0x`, no spaces).
    ///
    /// ```
    /// use idgen_client::mask::{MaskError, MaskKey};
    /// assert!(MaskKey::from_hex("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF").is_ok());
    /// assert_eq!(MaskKey::from_hex("abc").unwrap_err(), MaskError::KeyLength { len: 3 });
    /// ```
    pub fn from_hex(hex: &str) -> Result<MaskKey, MaskError> {
        let len = hex.chars().count();
        if len != 32 {
            return Err(MaskError::KeyLength { len });
        }
        let mut bytes = [0u8; 16];
        for (position, ch) in hex.chars().enumerate() {
            let nibble = ch
                .to_digit(16)
                .ok_or(MaskError::KeyCharacter { ch, position })? as u8;
            bytes[position / 2] |= if position % 2 == 0 {
                nibble << 4
            } else {
                nibble
            };
        }
        Ok(MaskKey::from_bytes(bytes))
    }

    /// The key's 16 bytes (for storing it).
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.k0.to_be_bytes());
        out[8..].copy_from_slice(&self.k1.to_be_bytes());
        out
    }

    /// The public form of `id`. Fails for `id ≥ 2^63`; the result is below `2^63`.
    pub fn mask(&self, id: u64) -> Result<u64, MaskError> {
        if id >= LIMIT {
            return Err(MaskError::OutOfRange);
        }
        // Cycle walking: `encrypt` permutes 0..2^64, so following the cycle from `id`
        // reaches a value below 2^63 (at worst `id` itself); about two steps on average.
        let mut y = self.encrypt(id);
        while y >= LIMIT {
            y = self.encrypt(y);
        }
        Ok(y)
    }

    /// The ID whose public form is `masked`. Fails for `masked ≥ 2^63`.
    pub fn unmask(&self, masked: u64) -> Result<u64, MaskError> {
        if masked >= LIMIT {
            return Err(MaskError::OutOfRange);
        }
        let mut x = self.decrypt(masked);
        while x >= LIMIT {
            x = self.decrypt(x);
        }
        Ok(x)
    }

    fn round(&self, i: u64, r: u64) -> u64 {
        (mix64(self.k0 ^ ((i << 32) | r)) ^ self.k1) & 0xFFFF_FFFF
    }

    fn encrypt(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> 32, x & 0xFFFF_FFFF);
        for i in 0..6 {
            (l, r) = (r, l ^ self.round(i, r));
        }
        (l << 32) | r
    }

    fn decrypt(&self, y: u64) -> u64 {
        let (mut l, mut r) = (y >> 32, y & 0xFFFF_FFFF);
        for i in (0..6).rev() {
            (l, r) = (r ^ self.round(i, l), l);
        }
        (l << 32) | r
    }
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trips_and_rejects_junk() {
        let key = MaskKey::from_hex("000102030405060708090A0B0C0D0E0F").unwrap();
        assert_eq!(key.to_bytes(), core::array::from_fn(|i| i as u8));
        assert_eq!(format!("{key:?}"), "MaskKey(..)");
        assert_eq!(
            MaskKey::from_hex("0x0102030405060708090a0b0c0d0e0f"),
            Err(MaskError::KeyCharacter {
                ch: 'x',
                position: 1
            })
        );
        assert_eq!(key.mask(LIMIT), Err(MaskError::OutOfRange));
        assert_eq!(key.unmask(u64::MAX), Err(MaskError::OutOfRange));
        for x in [0, 1, LIMIT - 1, LIMIT, u64::MAX] {
            assert_eq!(key.decrypt(key.encrypt(x)), x);
        }
    }
}

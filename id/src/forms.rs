//! String forms of IDs: decimal, base62 and Crockford base32, exactly as specified in
//! `clients/vectors/FORMS.md` in the idgen repository (shared by every idgen client).
//!
//! | form | width | alphabet | sorts like the number |
//! |---|---|---|---|
//! | decimal | 1–19, no leading zeros | `0-9` | no |
//! | base62 | always 11 | `0-9A-Za-z` (case-sensitive) | yes |
//! | base32 (Crockford) | always 13 | `0123456789ABCDEFGHJKMNPQRSTVWXYZ` | yes |
//!
//! Every form covers IDs in `0 .. 2^63` (an idgen ID never has the sign bit set).
//! Encoding a value at or above `2^63` fails with [`FormError::OutOfRange`], and parsing
//! rejects anything that is not the canonical form of such a value, with an error that
//! says what is wrong. The checks run in this order, so the error names the first
//! problem: empty, length, characters, leading zero (decimal), range.
//!
//! ```
//! use idgen_id::forms::{self, FormError};
//!
//! let id = 721_864_159_923_240_960;
//! assert_eq!(forms::to_decimal(id)?, "721864159923240960");
//! assert_eq!(forms::to_base62(id)?, "0rK91LJZ0W8");
//! assert_eq!(forms::to_base32(id)?, "0M14KM3Y4Z000");
//!
//! assert_eq!(forms::parse_base62("0rK91LJZ0W8")?, id);
//! // Base32 parsing is case-insensitive and knows Crockford's aliases (I, L → 1; O → 0).
//! assert_eq!(forms::parse_base32("0m14km3y4z0oo")?, id);
//!
//! // Fixed width: string order is numeric order.
//! assert!(forms::to_base62(99)? < forms::to_base62(100)?);
//!
//! assert_eq!(forms::parse_decimal("0123"), Err(FormError::LeadingZero));
//! assert_eq!(
//!     forms::parse_base62("0rK91LJZ0W").unwrap_err().to_string(),
//!     "wrong length 10 (expected 11)"
//! );
//! assert_eq!(
//!     forms::parse_base32("000000000000U").unwrap_err().to_string(),
//!     "invalid character 'U' at position 12"
//! );
//! # Ok::<(), FormError>(())
//! ```

use std::fmt;

/// The exclusive upper bound of every form: `2^63`.
pub const LIMIT: u64 = 1 << 63;

/// Width of the base62 form.
pub const BASE62_LEN: usize = 11;
/// Width of the Crockford base32 form.
pub const BASE32_LEN: usize = 13;
/// Most digits a decimal ID can have (`2^63 - 1` has 19).
pub const DECIMAL_MAX_LEN: usize = 19;

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const BASE32: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Why a string is not a valid ID in a form (or a value cannot be encoded).
///
/// Positions count characters (not bytes) from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FormError {
    /// The string is empty.
    Empty,
    /// A fixed-width form (base62, base32) got a string of another length.
    WrongLength {
        /// Characters in the string.
        len: usize,
        /// The form's width.
        expected: usize,
    },
    /// A decimal string longer than 19 digits.
    TooLong {
        /// Characters in the string.
        len: usize,
        /// The most the form allows (19).
        max: usize,
    },
    /// A character outside the form's alphabet (a sign, a hyphen, a space, …).
    InvalidCharacter {
        /// The offending character.
        ch: char,
        /// Its position, in characters from 0.
        position: usize,
    },
    /// The value is `2^63` or more (not an idgen ID).
    OutOfRange,
    /// A decimal string other than `0` that starts with `0`.
    LeadingZero,
}

impl fmt::Display for FormError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormError::Empty => f.write_str("empty"),
            FormError::WrongLength { len, expected } => {
                write!(f, "wrong length {len} (expected {expected})")
            }
            FormError::TooLong { len, max } => {
                write!(f, "too long: {len} digits (at most {max})")
            }
            FormError::InvalidCharacter { ch, position } => {
                write!(f, "invalid character {ch:?} at position {position}")
            }
            FormError::OutOfRange => f.write_str("out of range (≥ 2^63)"),
            FormError::LeadingZero => f.write_str("leading zero"),
        }
    }
}

impl std::error::Error for FormError {}

fn check_range(id: u64) -> Result<(), FormError> {
    if id >= LIMIT {
        Err(FormError::OutOfRange)
    } else {
        Ok(())
    }
}

/// Fixed-width, most significant digit first.
fn encode_fixed(mut id: u64, alphabet: &[u8], width: usize) -> String {
    let base = alphabet.len() as u64;
    let mut out = vec![b'0'; width];
    for slot in out.iter_mut().rev() {
        *slot = alphabet[(id % base) as usize];
        id /= base;
    }
    // All bytes come from an ASCII alphabet.
    out.into_iter().map(char::from).collect()
}

/// Check emptiness and the fixed width, then fold the digits (`digit` maps a character
/// to its value or `None`), then the range.
fn parse_fixed(
    text: &str,
    width: usize,
    base: u128,
    digit: impl Fn(char) -> Option<u8>,
) -> Result<u64, FormError> {
    if text.is_empty() {
        return Err(FormError::Empty);
    }
    let len = text.chars().count();
    if len != width {
        return Err(FormError::WrongLength {
            len,
            expected: width,
        });
    }
    // Width ≤ 13 digits of base ≤ 62 stays far below 2^128.
    let mut value: u128 = 0;
    for (position, ch) in text.chars().enumerate() {
        let d = digit(ch).ok_or(FormError::InvalidCharacter { ch, position })?;
        value = value * base + u128::from(d);
    }
    if value >= u128::from(LIMIT) {
        return Err(FormError::OutOfRange);
    }
    Ok(value as u64)
}

/// The plain base-10 form: no sign, no leading zeros (`"0"` for zero).
///
/// Decimal strings do **not** sort like the numbers; use [`to_base62`] or [`to_base32`]
/// where string order matters. Fails only for `id ≥ 2^63`.
///
/// ```
/// assert_eq!(idgen_id::forms::to_decimal(4096).unwrap(), "4096");
/// ```
pub fn to_decimal(id: u64) -> Result<String, FormError> {
    check_range(id)?;
    Ok(id.to_string())
}

/// Parse the decimal form: 1 to 19 ASCII digits, no leading zero except `"0"` itself,
/// below `2^63`.
///
/// ```
/// use idgen_id::forms::{parse_decimal, FormError};
/// assert_eq!(parse_decimal("4096"), Ok(4096));
/// assert_eq!(parse_decimal("-5"), Err(FormError::InvalidCharacter { ch: '-', position: 0 }));
/// assert_eq!(parse_decimal("9223372036854775808"), Err(FormError::OutOfRange));
/// ```
pub fn parse_decimal(text: &str) -> Result<u64, FormError> {
    if text.is_empty() {
        return Err(FormError::Empty);
    }
    let len = text.chars().count();
    if len > DECIMAL_MAX_LEN {
        return Err(FormError::TooLong {
            len,
            max: DECIMAL_MAX_LEN,
        });
    }
    let mut value: u64 = 0;
    for (position, ch) in text.chars().enumerate() {
        let d = ch
            .to_digit(10)
            .filter(|_| ch.is_ascii_digit())
            .ok_or(FormError::InvalidCharacter { ch, position })?;
        // 19 digits fit in u64 (at most 9_999_999_999_999_999_999 < 2^64).
        value = value * 10 + u64::from(d);
    }
    if len > 1 && text.starts_with('0') {
        return Err(FormError::LeadingZero);
    }
    check_range(value)?;
    Ok(value)
}

/// The base62 form: alphabet `0-9A-Za-z`, always 11 characters (left-padded with `0`).
/// Sorts like the number. Fails only for `id ≥ 2^63`.
///
/// ```
/// assert_eq!(idgen_id::forms::to_base62(62).unwrap(), "00000000010");
/// ```
pub fn to_base62(id: u64) -> Result<String, FormError> {
    check_range(id)?;
    Ok(encode_fixed(id, BASE62, BASE62_LEN))
}

/// Parse the base62 form: exactly 11 characters of `0-9A-Za-z` (case-sensitive), below
/// `2^63`.
///
/// ```
/// use idgen_id::forms::{parse_base62, FormError};
/// assert_eq!(parse_base62("0000000000z"), Ok(61));
/// assert_eq!(parse_base62("AzL8n0Y58m8"), Err(FormError::OutOfRange));
/// ```
pub fn parse_base62(text: &str) -> Result<u64, FormError> {
    parse_fixed(text, BASE62_LEN, 62, |ch| match ch {
        '0'..='9' => Some(ch as u8 - b'0'),
        'A'..='Z' => Some(ch as u8 - b'A' + 10),
        'a'..='z' => Some(ch as u8 - b'a' + 36),
        _ => None,
    })
}

/// The Crockford base32 form: alphabet `0123456789ABCDEFGHJKMNPQRSTVWXYZ`, upper case,
/// always 13 characters (left-padded with `0`; the first is `0`–`7`). Sorts like the
/// number. Fails only for `id ≥ 2^63`.
///
/// ```
/// assert_eq!(idgen_id::forms::to_base32(4095).unwrap(), "00000000003ZZ");
/// ```
pub fn to_base32(id: u64) -> Result<String, FormError> {
    check_range(id)?;
    Ok(encode_fixed(id, BASE32, BASE32_LEN))
}

/// Parse the Crockford base32 form: exactly 13 characters, case-insensitive, with
/// `I`/`L` read as `1` and `O` as `0`; no hyphens; below `2^63`.
///
/// ```
/// use idgen_id::forms::parse_base32;
/// assert_eq!(parse_base32("0000000000OIL"), Ok(33));
/// assert_eq!(parse_base32("00000000003zz"), Ok(4095));
/// ```
pub fn parse_base32(text: &str) -> Result<u64, FormError> {
    parse_fixed(text, BASE32_LEN, 32, |ch| {
        let up = match ch.to_ascii_uppercase() {
            'I' | 'L' => '1',
            'O' => '0',
            c => c,
        };
        if !up.is_ascii() {
            return None;
        }
        BASE32.iter().position(|&a| a == up as u8).map(|p| p as u8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extremes() {
        let max = LIMIT - 1;
        assert_eq!(to_base62(max).unwrap(), "AzL8n0Y58m7");
        assert_eq!(to_base32(max).unwrap(), "7ZZZZZZZZZZZZ");
        assert_eq!(to_decimal(LIMIT), Err(FormError::OutOfRange));
        assert_eq!(to_base62(u64::MAX), Err(FormError::OutOfRange));
        assert_eq!(to_base32(LIMIT), Err(FormError::OutOfRange));
        assert_eq!(parse_decimal("0"), Ok(0));
        assert_eq!(parse_decimal("00"), Err(FormError::LeadingZero));
        // Non-ASCII digits are not digits, and positions count characters.
        assert_eq!(
            parse_decimal("1\u{0663}"),
            Err(FormError::InvalidCharacter {
                ch: '\u{0663}',
                position: 1
            })
        );
        assert_eq!(
            parse_base62("é0000000000"),
            Err(FormError::InvalidCharacter {
                ch: 'é',
                position: 0
            })
        );
        assert_eq!(
            parse_base32("ZZZZZZZZZZZZZ"),
            Err(FormError::OutOfRange),
            "65-bit values are out of range, not an overflow"
        );
    }
}

//! Public-ID masking: FF1 format-preserving encryption (NIST SP 800-38G, AES) over an ID's
//! bits, exactly as specified in `clients/vectors/MASK.md` in the idgen repository (shared by
//! every idgen client and the node). Feature `mask`.
//!
//! An idgen ID shows when it was made and by which worker, and consecutive IDs are close
//! together. Masking maps it, under a secret AES key, to another integer of the same width:
//! a permutation, so two IDs never mask to the same value, and without the key a masked ID
//! says nothing about the real one and cannot be predicted from other masked IDs. With the
//! key, [`Keyring::unmask`] turns it back.
//!
//! - **Width** `W`: the layout's total bit width (63 for the default layout), `20 ..= 63`.
//!   The ID is written as `W` binary digits, most significant first; FF1 (radix 2) encrypts
//!   that numeral string; the masked integer is the result read back the same way, so
//!   `0 <= masked < 2^W`.
//! - **Key IDs**: every key has an ID `0 ..= 61`, one base62 character, which is also FF1's
//!   tweak (the single byte `[key id]`): the same key bytes under two IDs mask differently.
//! - **Keyring**: `<key id>:<hex key>` entries (16, 24 or 32 bytes: AES-128, -192, -256)
//!   separated by commas or newlines; the first is the current key (it masks), every entry
//!   unmasks. Read from a file ([`Keyring::from_file`]) or `IDGEN_MASK_KEYS`
//!   ([`Keyring::from_env`]), never from a command line; no error or `Debug` output shows
//!   key material.
//! - **String form** ([`Keyring::mask_str`]): the key ID's character and the masked integer
//!   in 11 base62 characters, 12 in all: it names its key, so strings masked before a key
//!   rotation still unmask while the old key stays in the ring. The integer form does not
//!   name its key: [`Keyring::unmask`] uses the current key, [`Keyring::unmask_with`] the
//!   one you name.
//!
//! ```
//! use idgen_id::mask::{Keyring, DEFAULT_WIDTH};
//!
//! let ring = Keyring::parse("1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")?;
//! let id = 721_864_159_923_240_960;
//! let public = ring.mask(id, DEFAULT_WIDTH)?;
//! assert_ne!(public, id);
//! assert_eq!(ring.unmask(public, DEFAULT_WIDTH)?, id);
//!
//! let text = ring.mask_str(id, DEFAULT_WIDTH)?;
//! assert_eq!(text.len(), 12);
//! assert!(text.starts_with('1'));
//! assert_eq!(ring.unmask_str(&text, DEFAULT_WIDTH)?, id);
//! // Debug shows key IDs, never keys.
//! assert_eq!(format!("{ring:?}"), "Keyring { key_ids: \"1\" }");
//! # Ok::<(), idgen_id::mask::MaskError>(())
//! ```

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use aes::{Aes128, Aes192, Aes256};
use fpe::ff1::{FlexibleNumeralString, NumeralString, Operations, FF1};

use crate::forms;
use crate::Layout;

/// The environment variable [`Keyring::from_env`] reads.
pub const ENV_VAR: &str = "IDGEN_MASK_KEYS";
/// The width of the default layout's IDs, and of their masked forms.
pub const DEFAULT_WIDTH: u32 = 63;
/// The narrowest width masking supports (FF1 over radix 2 needs at least 20 digits).
pub const MIN_WIDTH: u32 = 20;
/// The widest width masking supports (an idgen ID's sign bit is always 0).
pub const MAX_WIDTH: u32 = 63;
/// The largest key ID.
pub const MAX_KEY_ID: u8 = 61;
/// Length of the masked string form: the key ID's character and 11 base62 characters.
pub const MASKED_STR_LEN: usize = 12;

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The width of a layout's IDs: its timestamp, worker and sequence bits together.
pub fn layout_width(layout: &Layout) -> u32 {
    u32::from(layout.timestamp_bits())
        + u32::from(layout.worker_bits())
        + u32::from(layout.sequence_bits())
}

/// The base62 character that names key ID `id` (`0` → `'0'`, `10` → `'A'`, `61` → `'z'`),
/// or `None` above 61.
pub fn key_id_char(id: u8) -> Option<char> {
    BASE62.get(usize::from(id)).map(|&b| char::from(b))
}

/// The string form of a masked integer made with key `key_id` (its character, then the value
/// in 11 base62 digits): what a node's masked answer is written as, without the key. `None`
/// for a key ID above [`MAX_KEY_ID`] or a value with the sign bit.
pub fn masked_str(key_id: u8, masked: u64) -> Option<String> {
    let mut out = String::with_capacity(MASKED_STR_LEN);
    out.push(key_id_char(key_id)?);
    out.push_str(&forms::to_base62(masked).ok()?);
    Some(out)
}

/// The key ID a base62 character names, or `None` for any other character.
pub fn key_id_from_char(ch: char) -> Option<u8> {
    match ch {
        '0'..='9' => Some(ch as u8 - b'0'),
        'A'..='Z' => Some(ch as u8 - b'A' + 10),
        'a'..='z' => Some(ch as u8 - b'a' + 36),
        _ => None,
    }
}

/// What went wrong reading a keyring or masking a value. No message holds key material.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MaskError {
    /// The keyring text holds no entry.
    EmptyKeyring,
    /// An entry that is not `<key id>:<hex key>` (entries count from 1).
    MalformedEntry {
        /// The entry's number.
        entry: usize,
    },
    /// A key ID that is not a decimal number.
    InvalidKeyId {
        /// The entry's number.
        entry: usize,
    },
    /// A key ID above 61.
    KeyIdOutOfRange {
        /// The entry's number.
        entry: usize,
    },
    /// The same key ID twice in one keyring.
    DuplicateKeyId {
        /// The entry's number.
        entry: usize,
        /// The repeated key ID.
        key_id: u8,
    },
    /// A key with a character that is not a hex digit.
    InvalidHex {
        /// The entry's number.
        entry: usize,
        /// The position in the key, in characters from 0 (the character is not shown).
        position: usize,
    },
    /// A key that is not 32, 48 or 64 hex digits long.
    KeyLength {
        /// The entry's number, or 0 for a key given as bytes.
        entry: usize,
        /// Its length, in hex digits (or bytes for a key given as bytes, times two).
        len: usize,
    },
    /// `IDGEN_MASK_KEYS` is not set (or not UTF-8).
    EnvNotSet,
    /// The key file could not be read.
    File {
        /// The file.
        path: String,
        /// What the OS said.
        reason: String,
    },
    /// A width outside `20 ..= 63`.
    Width {
        /// The width asked for.
        width: u32,
    },
    /// A value to mask or unmask that is `2^width` or more.
    OutOfRange {
        /// The width.
        width: u32,
    },
    /// A masked string that is not 12 characters long.
    WrongLength {
        /// Its length in characters.
        len: usize,
    },
    /// A masked string with a character outside `0-9A-Za-z`.
    InvalidCharacter {
        /// The character.
        ch: char,
        /// Its position, in characters from 0.
        position: usize,
    },
    /// A key ID that the keyring does not hold.
    UnknownKeyId {
        /// The key ID's character (or the number for one above 61).
        key_id: String,
    },
    /// A radix FF1 does not take (`2 ..= 65536`), for [`Ff1`].
    Radix {
        /// The radix asked for.
        radix: u32,
    },
    /// A numeral string FF1 refuses: too short for its radix, or a digit not below the radix.
    Numerals {
        /// What FF1 said.
        reason: String,
    },
}

impl fmt::Display for MaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaskError::EmptyKeyring => {
                f.write_str("mask keys: empty keyring, no keys (expected <keyid>:<hex key> entries)")
            }
            MaskError::MalformedEntry { entry } => write!(
                f,
                "mask keys: malformed entry {entry} (expected <keyid>:<hex key>)"
            ),
            MaskError::InvalidKeyId { entry } => write!(
                f,
                "mask keys: entry {entry}: invalid key id (expected a decimal number 0..=61)"
            ),
            MaskError::KeyIdOutOfRange { entry } => {
                write!(f, "mask keys: entry {entry}: key id out of range (0..=61)")
            }
            MaskError::DuplicateKeyId { entry, key_id } => {
                write!(f, "mask keys: entry {entry}: duplicate key id {key_id}")
            }
            MaskError::InvalidHex { entry, position } => write!(
                f,
                "mask keys: entry {entry}: the key is not hex (invalid hex digit at position {position})"
            ),
            MaskError::KeyLength { entry, len } => write!(
                f,
                "mask keys: entry {entry}: wrong key length: a key is 32, 48 or 64 hex digits, not {len}"
            ),
            MaskError::EnvNotSet => write!(f, "mask keys: {ENV_VAR} is not set"),
            MaskError::File { path, reason } => {
                write!(f, "mask keys: cannot read {path}: {reason}")
            }
            MaskError::Width { width } => {
                write!(f, "mask width {width} not supported (expected 20..=63)")
            }
            MaskError::OutOfRange { width } => {
                write!(f, "value out of range: not below 2^{width}")
            }
            MaskError::WrongLength { len } => write!(
                f,
                "masked ID: wrong length {len} (expected {MASKED_STR_LEN} characters)"
            ),
            MaskError::InvalidCharacter { ch, position } => {
                write!(f, "masked ID: invalid character {ch:?} at position {position}")
            }
            MaskError::UnknownKeyId { key_id } => write!(f, "unknown key id {key_id}"),
            MaskError::Radix { radix } => write!(f, "FF1: radix {radix} not supported"),
            MaskError::Numerals { reason } => write!(f, "FF1: {reason}"),
        }
    }
}

impl std::error::Error for MaskError {}

/// FF1 (NIST SP 800-38G) with AES-128, -192 or -256 (chosen by the key's length) for one
/// radix: the `fpe` crate's, over numeral strings of `u16` digits, most significant first.
///
/// Masking uses radix 2; the general form is here for NIST's published samples.
///
/// ```
/// use idgen_id::mask::Ff1;
/// // NIST SP 800-38G, FF1 sample 1 (AES-128, radix 10, empty tweak).
/// let key = [0x2B, 0x7E, 0x15, 0x16, 0x28, 0xAE, 0xD2, 0xA6, 0xAB, 0xF7, 0x15, 0x88, 0x09, 0xCF, 0x4F, 0x3C];
/// let ff1 = Ff1::new(&key, 10)?;
/// let ct = ff1.encrypt(&[], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9])?;
/// assert_eq!(ct, [2, 4, 3, 3, 4, 7, 7, 4, 8, 4]);
/// assert_eq!(ff1.decrypt(&[], &ct)?, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
/// # Ok::<(), idgen_id::mask::MaskError>(())
/// ```
#[derive(Clone)]
pub struct Ff1(Arc<Cipher>);

enum Cipher {
    Aes128(FF1<Aes128>),
    Aes192(FF1<Aes192>),
    Aes256(FF1<Aes256>),
}

impl fmt::Debug for Ff1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = match *self.0 {
            Cipher::Aes128(_) => 128,
            Cipher::Aes192(_) => 192,
            Cipher::Aes256(_) => 256,
        };
        write!(f, "Ff1(AES-{bits}, ..)")
    }
}

impl Ff1 {
    /// FF1 under `key` (16, 24 or 32 bytes) for numerals of `radix` (`2 ..= 65536`).
    pub fn new(key: &[u8], radix: u32) -> Result<Ff1, MaskError> {
        let radix_error = |_| MaskError::Radix { radix };
        let cipher = match key.len() {
            16 => Cipher::Aes128(FF1::new(key, radix).map_err(radix_error)?),
            24 => Cipher::Aes192(FF1::new(key, radix).map_err(radix_error)?),
            32 => Cipher::Aes256(FF1::new(key, radix).map_err(radix_error)?),
            n => {
                return Err(MaskError::KeyLength {
                    entry: 0,
                    len: n * 2,
                })
            }
        };
        Ok(Ff1(Arc::new(cipher)))
    }

    /// FF1.Encrypt (SP 800-38G Algorithm 7) of `digits` under `tweak`.
    pub fn encrypt(&self, tweak: &[u8], digits: &[u16]) -> Result<Vec<u16>, MaskError> {
        let x = FlexibleNumeralString::from(digits.to_vec());
        let y = match &*self.0 {
            Cipher::Aes128(c) => c.encrypt(tweak, &x),
            Cipher::Aes192(c) => c.encrypt(tweak, &x),
            Cipher::Aes256(c) => c.encrypt(tweak, &x),
        };
        y.map(Vec::from).map_err(|e| MaskError::Numerals {
            reason: e.to_string(),
        })
    }

    /// FF1.Decrypt (SP 800-38G Algorithm 8) of `digits` under `tweak`.
    pub fn decrypt(&self, tweak: &[u8], digits: &[u16]) -> Result<Vec<u16>, MaskError> {
        let x = FlexibleNumeralString::from(digits.to_vec());
        let y = match &*self.0 {
            Cipher::Aes128(c) => c.decrypt(tweak, &x),
            Cipher::Aes192(c) => c.decrypt(tweak, &x),
            Cipher::Aes256(c) => c.decrypt(tweak, &x),
        };
        y.map(Vec::from).map_err(|e| MaskError::Numerals {
            reason: e.to_string(),
        })
    }
}

impl Ff1 {
    /// FF1 over the `width`-digit binary numeral string of `value` (most significant digit
    /// first), for an `Ff1` of radix 2: [`Bits`], without the general numeral string's
    /// big-integer arithmetic.
    fn bits(&self, tweak: &[u8], value: u64, width: u32, decrypt: bool) -> Result<u64, MaskError> {
        let x = Bits {
            value,
            len: width as usize,
        };
        let y = match (&*self.0, decrypt) {
            (Cipher::Aes128(c), false) => c.encrypt(tweak, &x),
            (Cipher::Aes128(c), true) => c.decrypt(tweak, &x),
            (Cipher::Aes192(c), false) => c.encrypt(tweak, &x),
            (Cipher::Aes192(c), true) => c.decrypt(tweak, &x),
            (Cipher::Aes256(c), false) => c.encrypt(tweak, &x),
            (Cipher::Aes256(c), true) => c.decrypt(tweak, &x),
        };
        y.map(|y| y.value).map_err(|e| MaskError::Numerals {
            reason: e.to_string(),
        })
    }
}

/// A binary numeral string of at most 63 digits held in a `u64`: digit `i` (from 0, most
/// significant first) is bit `len - 1 - i`, so `NUM_2(X)` is the value itself.
///
/// `fpe`'s FF1 runs on it as on any numeral string (it is that crate's extension point);
/// the arithmetic FF1 asks of a numeral string is done in 64-bit integers: `NUM` is the
/// value, and `(NUM(A) ± y) mod 2^m` needs only `y mod 2^64` since `m <= 32`.
struct Bits {
    value: u64,
    len: usize,
}

/// The `b` low bytes of a value, big-endian (`b <= 8`): `STR^b_256`.
struct BeBytes {
    buf: [u8; 8],
    b: usize,
}

impl AsRef<[u8]> for BeBytes {
    fn as_ref(&self) -> &[u8] {
        &self.buf[8 - self.b..]
    }
}

fn low_bits(len: usize) -> u64 {
    if len >= 64 {
        u64::MAX
    } else {
        (1u64 << len) - 1
    }
}

impl NumeralString for Bits {
    type Ops = Bits;

    fn is_valid(&self, radix: u32) -> bool {
        radix == 2 && self.len <= 63 && self.value & !low_bits(self.len) == 0
    }

    fn numeral_count(&self) -> usize {
        self.len
    }

    fn split(&self) -> (Bits, Bits) {
        let u = self.len / 2;
        let v = self.len - u;
        (
            Bits {
                value: self.value >> v,
                len: u,
            },
            Bits {
                value: self.value & low_bits(v),
                len: v,
            },
        )
    }

    fn concat(a: Bits, b: Bits) -> Bits {
        Bits {
            value: (a.value << b.len) | b.value,
            len: a.len + b.len,
        }
    }
}

/// `NUM(S)` modulo 2^64: the low 8 bytes of the big-endian byte string `S`.
fn num_low64(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0u64, |acc, byte| (acc << 8) | u64::from(byte))
}

impl Operations for Bits {
    type Bytes = BeBytes;

    fn numeral_count(&self) -> usize {
        self.len
    }

    fn to_be_bytes(&self, _radix: u32, b: usize) -> BeBytes {
        // b = ceil(len / 8) <= 4 for the halves of at most 63 digits.
        BeBytes {
            buf: self.value.to_be_bytes(),
            b: b.min(8),
        }
    }

    fn add_mod_exp(self, other: impl Iterator<Item = u8>, _radix: u32, m: usize) -> Bits {
        Bits {
            value: self.value.wrapping_add(num_low64(other)) & low_bits(m),
            len: m,
        }
    }

    fn sub_mod_exp(self, other: impl Iterator<Item = u8>, _radix: u32, m: usize) -> Bits {
        Bits {
            value: self.value.wrapping_sub(num_low64(other)) & low_bits(m),
            len: m,
        }
    }
}

/// One masking key: its ID and FF1 over radix 2 under its bytes. `Debug` shows the ID only.
#[derive(Clone)]
pub struct MaskKey {
    id: u8,
    ff1: Ff1,
}

impl fmt::Debug for MaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MaskKey({}, ..)", self.id)
    }
}

fn check_width(width: u32) -> Result<(), MaskError> {
    if (MIN_WIDTH..=MAX_WIDTH).contains(&width) {
        Ok(())
    } else {
        Err(MaskError::Width { width })
    }
}

fn check_value(value: u64, width: u32) -> Result<(), MaskError> {
    check_width(width)?;
    if value >> width != 0 {
        Err(MaskError::OutOfRange { width })
    } else {
        Ok(())
    }
}

impl MaskKey {
    /// Key `id` (`0 ..= 61`) with `key`'s 16, 24 or 32 bytes.
    pub fn new(id: u8, key: &[u8]) -> Result<MaskKey, MaskError> {
        if id > MAX_KEY_ID {
            return Err(MaskError::KeyIdOutOfRange { entry: 0 });
        }
        Ok(MaskKey {
            id,
            ff1: Ff1::new(key, 2)?,
        })
    }

    /// The key's ID.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// The masked form of `id`, a `width`-bit ID.
    pub fn mask(&self, id: u64, width: u32) -> Result<u64, MaskError> {
        check_value(id, width)?;
        self.ff1.bits(&[self.id], id, width, false)
    }

    /// The ID whose masked form under this key is `masked`.
    pub fn unmask(&self, masked: u64, width: u32) -> Result<u64, MaskError> {
        check_value(masked, width)?;
        self.ff1.bits(&[self.id], masked, width, true)
    }
}

/// Masking keys: the current one masks, every one unmasks. `Debug` shows key IDs only.
#[derive(Clone)]
pub struct Keyring {
    /// Never empty; the first is the current key.
    keys: Vec<MaskKey>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("key_ids", &self.key_ids_text())
            .finish()
    }
}

fn parse_hex(entry: usize, hex: &str) -> Result<Vec<u8>, MaskError> {
    let len = hex.chars().count();
    if let Some(position) = hex.chars().position(|c| !c.is_ascii_hexdigit()) {
        return Err(MaskError::InvalidHex { entry, position });
    }
    if !matches!(len, 32 | 48 | 64) {
        return Err(MaskError::KeyLength { entry, len });
    }
    // All ASCII hex digits: two per byte.
    Ok(hex
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            let digit = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
            (digit(pair[0]) << 4) | digit(pair[1])
        })
        .collect())
}

impl Keyring {
    /// A keyring from its text: `<key id>:<hex key>` entries separated by commas and/or
    /// newlines, key IDs in decimal (`0 ..= 61`), keys of 32, 48 or 64 hex digits (either
    /// case). Blank entries and whitespace around entries, IDs and keys are ignored, and so
    /// are lines starting with `#`. The first entry is the current key.
    ///
    /// ```
    /// use idgen_id::mask::Keyring;
    /// let ring = Keyring::parse("# rotated in May\n2:00112233445566778899aabbccddeeff, 1:ffeeddccbbaa99887766554433221100\n")?;
    /// assert_eq!(ring.current_key_id(), 2);
    /// assert_eq!(ring.key_ids().collect::<Vec<_>>(), [2, 1]);
    /// assert_eq!(
    ///     Keyring::parse("1:0011").unwrap_err().to_string(),
    ///     "mask keys: entry 1: wrong key length: a key is 32, 48 or 64 hex digits, not 4"
    /// );
    /// # Ok::<(), idgen_id::mask::MaskError>(())
    /// ```
    pub fn parse(text: &str) -> Result<Keyring, MaskError> {
        let mut keys: Vec<MaskKey> = Vec::new();
        let entries = text
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .filter(|entry| !entry.is_empty());
        for (index, item) in entries.enumerate() {
            let entry = index + 1;
            let (id, hex) = item
                .split_once(':')
                .ok_or(MaskError::MalformedEntry { entry })?;
            let (id, hex) = (id.trim(), hex.trim());
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(MaskError::InvalidKeyId { entry });
            }
            let id = match id.parse::<u64>() {
                Ok(n) if n <= u64::from(MAX_KEY_ID) => n as u8,
                _ => return Err(MaskError::KeyIdOutOfRange { entry }),
            };
            if keys.iter().any(|k| k.id == id) {
                return Err(MaskError::DuplicateKeyId { entry, key_id: id });
            }
            let bytes = parse_hex(entry, hex)?;
            keys.push(MaskKey {
                id,
                ff1: Ff1::new(&bytes, 2)?,
            });
        }
        if keys.is_empty() {
            return Err(MaskError::EmptyKeyring);
        }
        Ok(Keyring { keys })
    }

    /// The keyring in the environment variable `IDGEN_MASK_KEYS`.
    pub fn from_env() -> Result<Keyring, MaskError> {
        match std::env::var(ENV_VAR) {
            Ok(text) => Keyring::parse(&text),
            Err(_) => Err(MaskError::EnvNotSet),
        }
    }

    /// The keyring in a file (the text [`Keyring::parse`] reads).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Keyring, MaskError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| MaskError::File {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Keyring::parse(&text)
    }

    /// A keyring of the given keys, the first current. `None` if there are none or two share
    /// an ID.
    pub fn from_keys(keys: Vec<MaskKey>) -> Option<Keyring> {
        let unique = keys
            .iter()
            .enumerate()
            .all(|(i, k)| keys[..i].iter().all(|j| j.id != k.id));
        (!keys.is_empty() && unique).then_some(Keyring { keys })
    }

    /// The current key's ID (the key that masks).
    pub fn current_key_id(&self) -> u8 {
        self.keys[0].id
    }

    /// Every key's ID, the current one first.
    pub fn key_ids(&self) -> impl Iterator<Item = u8> + '_ {
        self.keys.iter().map(|k| k.id)
    }

    /// The key IDs as their base62 characters, the current one first (e.g. `"21"`).
    pub fn key_ids_text(&self) -> String {
        self.keys.iter().filter_map(|k| key_id_char(k.id)).collect()
    }

    /// The key with ID `key_id`.
    pub fn key(&self, key_id: u8) -> Result<&MaskKey, MaskError> {
        self.keys
            .iter()
            .find(|k| k.id == key_id)
            .ok_or_else(|| MaskError::UnknownKeyId {
                key_id: key_id_char(key_id)
                    .map(String::from)
                    .unwrap_or_else(|| key_id.to_string()),
            })
    }

    /// The masked form of the `width`-bit `id` under the current key (`0 <= masked <
    /// 2^width`). It does not name its key.
    pub fn mask(&self, id: u64, width: u32) -> Result<u64, MaskError> {
        self.keys[0].mask(id, width)
    }

    /// The ID whose masked integer form under the current key is `masked`.
    pub fn unmask(&self, masked: u64, width: u32) -> Result<u64, MaskError> {
        self.keys[0].unmask(masked, width)
    }

    /// The ID whose masked integer form under key `key_id` is `masked`.
    pub fn unmask_with(&self, key_id: u8, masked: u64, width: u32) -> Result<u64, MaskError> {
        self.key(key_id)?.unmask(masked, width)
    }

    /// The masked string form of `id` under the current key: the key ID's character and the
    /// masked integer in 11 base62 characters.
    pub fn mask_str(&self, id: u64, width: u32) -> Result<String, MaskError> {
        self.mask_both(id, width).map(|(_, text)| text)
    }

    /// Both masked forms of `id` under the current key, for the price of one encryption:
    /// the integer ([`Keyring::mask`]) and the string ([`Keyring::mask_str`]).
    pub fn mask_both(&self, id: u64, width: u32) -> Result<(u64, String), MaskError> {
        let key = &self.keys[0];
        let masked = key.mask(id, width)?;
        let out = masked_str(key.id, masked).ok_or(MaskError::OutOfRange { width })?;
        Ok((masked, out))
    }

    /// The ID a masked string form stands for, unmasked with the key it names. Fails with a
    /// clear error for a wrong length, a character outside `0-9A-Za-z`, a key ID the ring
    /// does not hold, or a value of `2^width` or more.
    pub fn unmask_str(&self, text: &str, width: u32) -> Result<u64, MaskError> {
        check_width(width)?;
        let len = text.chars().count();
        if len != MASKED_STR_LEN {
            return Err(MaskError::WrongLength { len });
        }
        if let Some((position, ch)) = text
            .chars()
            .enumerate()
            .find(|&(_, c)| key_id_from_char(c).is_none())
        {
            return Err(MaskError::InvalidCharacter { ch, position });
        }
        // All 12 characters are ASCII base62 digits.
        let (first, rest) = text.split_at(1);
        let key_id = first.chars().next().and_then(key_id_from_char).unwrap_or(0);
        let key = self.key(key_id)?;
        let masked = forms::parse_base62(rest).map_err(|_| MaskError::OutOfRange { width })?;
        key.unmask(masked, width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `value`'s `width` bits, most significant first.
    fn to_bits(value: u64, width: u32) -> Vec<u16> {
        (0..width)
            .rev()
            .map(|i| ((value >> i) & 1) as u16)
            .collect()
    }

    fn from_bits(bits: &[u16]) -> u64 {
        bits.iter().fold(0, |acc, &b| (acc << 1) | u64::from(b))
    }

    const KEY: &str = "1:2b7e151628aed2a6abf7158809cf4f3cef4359d8d580aa4f7f036d6f04fc6a94";

    #[test]
    fn bits_are_most_significant_first() {
        assert_eq!(to_bits(0b1011, 4), [1, 0, 1, 1]);
        assert_eq!(to_bits(1, 20)[19], 1);
        assert_eq!(from_bits(&to_bits(0x5555_0000_1234, 63)), 0x5555_0000_1234);
    }

    #[test]
    fn the_u64_numeral_string_agrees_with_the_general_one() {
        // Same FF1, two numeral strings: `Bits` (masking's) and `FlexibleNumeralString`
        // (big integers, the NIST samples'), over widths, keys and values.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for (i, len) in [16usize, 24, 32].into_iter().cycle().take(30).enumerate() {
            let key: Vec<u8> = (0..len as u8)
                .map(|b| b.wrapping_mul(31).wrapping_add(i as u8))
                .collect();
            let ff1 = Ff1::new(&key, 2).unwrap();
            for width in [20u32, 21, 33, 53, 62, 63] {
                x = x.rotate_left(17).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ 0x94D0_49BB;
                let value = x >> (64 - width);
                let tweak = [i as u8];
                let fast = ff1.bits(&tweak, value, width, false).unwrap();
                let general = from_bits(&ff1.encrypt(&tweak, &to_bits(value, width)).unwrap());
                assert_eq!(fast, general, "width {width} value {value}");
                assert_eq!(ff1.bits(&tweak, fast, width, true), Ok(value));
                assert_eq!(
                    from_bits(&ff1.decrypt(&tweak, &to_bits(fast, width)).unwrap()),
                    value
                );
            }
        }
    }

    #[test]
    fn key_id_characters() {
        assert_eq!(key_id_char(0), Some('0'));
        assert_eq!(key_id_char(10), Some('A'));
        assert_eq!(key_id_char(61), Some('z'));
        assert_eq!(key_id_char(62), None);
        for id in 0..=MAX_KEY_ID {
            assert_eq!(key_id_from_char(key_id_char(id).unwrap()), Some(id));
        }
        assert_eq!(key_id_from_char('-'), None);
        assert_eq!(key_id_from_char('é'), None);
    }

    #[test]
    fn widths_and_ranges() {
        let ring = Keyring::parse(KEY).unwrap();
        assert_eq!(ring.mask(0, 19), Err(MaskError::Width { width: 19 }));
        assert_eq!(ring.mask(0, 64), Err(MaskError::Width { width: 64 }));
        assert_eq!(
            ring.mask(1 << 20, 20),
            Err(MaskError::OutOfRange { width: 20 })
        );
        assert_eq!(
            ring.unmask(1 << 53, 53),
            Err(MaskError::OutOfRange { width: 53 })
        );
        assert!(ring.mask((1 << 20) - 1, 20).unwrap() < 1 << 20);
        assert_eq!(
            ring.mask(u64::MAX, 63),
            Err(MaskError::OutOfRange { width: 63 })
        );
    }

    #[test]
    fn no_output_shows_key_material() {
        let ring = Keyring::parse(KEY).unwrap();
        let debug = format!(
            "{ring:?} {:?} {:?}",
            ring.key(1).unwrap(),
            ring.key(1).unwrap().ff1
        );
        assert!(!debug.to_lowercase().contains("2b7e"), "{debug}");
        let bad =
            Keyring::parse("1:2b7e151628aed2a6abf7158809cf4f3cef4359d8d580aa4f7f036d6f04fc6a9g")
                .unwrap_err()
                .to_string();
        assert_eq!(
            bad,
            "mask keys: entry 1: the key is not hex (invalid hex digit at position 63)"
        );
    }

    #[test]
    fn a_wrong_key_length_is_an_error_not_a_panic() {
        assert_eq!(
            MaskKey::new(1, &[0; 15]).unwrap_err(),
            MaskError::KeyLength { entry: 0, len: 30 }
        );
        assert!(MaskKey::new(62, &[0; 16]).is_err());
        assert!(Ff1::new(&[0; 16], 1).is_err());
    }

    #[test]
    fn from_keys_refuses_empty_and_duplicates() {
        let a = MaskKey::new(1, &[1; 16]).unwrap();
        let b = MaskKey::new(1, &[2; 16]).unwrap();
        assert!(Keyring::from_keys(vec![]).is_none());
        assert!(Keyring::from_keys(vec![a.clone(), b]).is_none());
        assert_eq!(Keyring::from_keys(vec![a]).unwrap().current_key_id(), 1);
    }
}

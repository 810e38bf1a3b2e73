//! Public-ID masking: FF1 format-preserving encryption (NIST SP 800-38G, AES) under a
//! keyring of rotatable keys, exactly as specified in `clients/vectors/MASK.md` (shared by
//! every idgen client and the node). This is [`idgen_id::mask`], re-exported: the node and
//! this client run the same code.
//!
//! A masked ID is another integer of the ID's width (`0 ..= 2^63 - 1` for the default
//! layout), one-to-one with the real ID: masked IDs never collide, and without the key they
//! show neither creation time nor worker, nor let anyone predict the next one. The string
//! form (12 characters) starts with its key's ID, so it still unmasks after a key rotation
//! while the old key stays in the ring; the integer form needs its key ID out of band.
//!
//! ```
//! use idgen_client::mask::{Keyring, DEFAULT_WIDTH};
//!
//! // In production: Keyring::from_file(path) or Keyring::from_env() (IDGEN_MASK_KEYS).
//! let ring = Keyring::parse("1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")?;
//! let id = 721_864_159_923_240_960;
//! assert_eq!(ring.mask(id, DEFAULT_WIDTH)?, 1_877_513_527_388_186_486);
//! assert_eq!(ring.mask_str(id, DEFAULT_WIDTH)?, "12Eh1yWZ6ImE");
//! assert_eq!(ring.unmask_str("12Eh1yWZ6ImE", DEFAULT_WIDTH)?, id);
//! assert_eq!(
//!     ring.unmask_str("22Eh1yWZ6ImE", DEFAULT_WIDTH).unwrap_err().to_string(),
//!     "unknown key id 2"
//! );
//! # Ok::<(), idgen_client::mask::MaskError>(())
//! ```

pub use idgen_id::mask::*;

//! The idgen ID model, once for the server, the wire protocol and the clients.
//!
//! | type | what |
//! |---|---|
//! | [`Id`] | a 64-bit ID (the sign bit is always 0) |
//! | [`Layout`] | the bit layout `0 \| timestamp \| worker \| sequence`, validated ([`LayoutError`]) |
//! | [`Parts`] | an ID taken apart: timestamp, unix_ms, region, worker, node, sequence |
//! | [`WorkerRange`] | a contiguous range of worker IDs, `first .. first + count` |
//! | [`forms`] | the text forms: decimal, base62, Crockford base32 |
//! | [`Bounds`] | the IDs of a time interval, for range queries ([`Layout::bounds`], [`TimeError`]) |
//! | [`Layout::uuid_v7`], [`Layout::decode_uuid_v7`] | an ID as a version 7 UUID whose worker and sequence make it unique ([`UuidError`], [`UuidParts`]) |
//!
//! | [`mask`] (feature `mask`) | public-ID masking: FF1 (NIST SP 800-38G) over AES, keys with IDs for rotation |
//!
//! Without the feature `mask`: no dependencies, no I/O, no clock: time is passed in where it matters
//! ([`Layout::check_epoch`]).
//!
//! ```
//! use idgen_id::{forms, Layout, WorkerRange};
//!
//! let layout = Layout::new(1_704_067_200_000, 41, 10, 12, 3)?;
//! let parts = layout.decompose(264_543_142_405_996_545);
//! assert_eq!(parts.unix_ms, 1_767_139_200_123);
//! assert_eq!((parts.worker, parts.region, parts.node, parts.sequence), (512, 4, 0, 1));
//! assert!(WorkerRange::new(512, 128).contains(parts.worker));
//! assert_eq!(forms::to_base32(264_543_142_405_996_545)?, "07AYRJRFE0001");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

mod bounds;
pub mod forms;
pub mod generations;
mod layout;
#[cfg(feature = "mask")]
pub mod mask;
mod uuid;

pub use bounds::{Bounds, TimeError};

pub use forms::FormError;
pub use generations::{
    first_id_after, successor_epoch, Generation, Generations, Plan, ScheduleError,
};
pub use layout::{
    Layout, LayoutError, Parts, DEFAULT_EPOCH_MS, DEFAULT_SEQUENCE_BITS, DEFAULT_TIMESTAMP_BITS,
    DEFAULT_WORKER_BITS, JS_SAFE_BITS, MIN_ID_BITS, PAYLOAD_BITS,
};
pub use uuid::{UuidError, UuidParts, MAX_UUID_UNIX_MS, UUID_PAYLOAD_BITS, UUID_VERSION};

/// A 64-bit ID. The sign bit is always zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Id(pub u64);

impl Id {
    /// The raw value.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<u64> for Id {
    fn from(raw: u64) -> Id {
        Id(raw)
    }
}

impl From<Id> for u64 {
    fn from(id: Id) -> u64 {
        id.0
    }
}

impl From<Id> for i64 {
    fn from(id: Id) -> i64 {
        // The sign bit of an issued ID is always zero, so this never wraps.
        id.0 as i64
    }
}

/// A contiguous range of worker IDs: `first .. first + count`.
///
/// A lease grants one, a node splits it among its shards, and HELLO_OK announces the range of
/// the shard serving a connection. The empty range (`count == 0`) stands for "none yet".
///
/// ```
/// use idgen_id::WorkerRange;
///
/// let r = WorkerRange::new(8, 4);
/// assert_eq!(r.end(), 12);
/// assert!(r.contains(8) && r.contains(11) && !r.contains(12));
/// assert_eq!(r.to_string(), "8..12");
/// assert!(WorkerRange::default().is_empty());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WorkerRange {
    /// The first worker ID.
    pub first: u64,
    /// How many worker IDs.
    pub count: u64,
}

impl WorkerRange {
    /// The range `first .. first + count`.
    pub const fn new(first: u64, count: u64) -> WorkerRange {
        WorkerRange { first, count }
    }

    /// One past the last worker ID (`first + count`, saturating).
    pub const fn end(&self) -> u64 {
        self.first.saturating_add(self.count)
    }

    /// Whether `worker` lies in the range.
    pub const fn contains(&self, worker: u64) -> bool {
        worker >= self.first && worker < self.end()
    }

    /// Whether the range holds no worker ID.
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The worker IDs, as a `Range` to iterate over.
    pub const fn ids(&self) -> std::ops::Range<u64> {
        self.first..self.end()
    }
}

impl fmt::Display for WorkerRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.first, self.end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_display_and_conversions() {
        assert_eq!(
            Id(721_864_159_923_240_960).to_string(),
            "721864159923240960"
        );
        assert_eq!(i64::from(Id(5)), 5);
        assert_eq!(u64::from(Id(5)), 5);
        assert_eq!(Id::from(5), Id(5));
    }

    #[test]
    fn worker_ranges() {
        let r = WorkerRange::new(512, 512);
        assert_eq!((r.end(), r.is_empty()), (1024, false));
        assert!(!r.contains(511) && r.contains(512) && r.contains(1023) && !r.contains(1024));
        assert_eq!(r.ids().count(), 512);
        assert_eq!(format!("{r}"), "512..1024");
        let none = WorkerRange::default();
        assert!(none.is_empty() && !none.contains(0));
        assert_eq!(none.to_string(), "0..0");
        let top = WorkerRange::new(u64::MAX - 1, 5);
        assert_eq!(top.end(), u64::MAX, "saturates, never wraps");
        assert!(top.contains(u64::MAX - 1));
    }
}

/// The examples of `README.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

//! UUIDv7 (RFC 9562 §5.7) whose uniqueness comes from an issued ID, not from chance.
//!
//! A UUID is built from one ID a node issued (with that ID's [`Layout`]) and random bits:
//!
//! ```text
//!  127                 80 79  76 75        64 63 62 61                              0
//! +---------------------+------+-----------+-----+---------------------------------+
//! |  unix_ts_ms (48)    | 0111 |  rand_a   | 10  |            rand_b (62)          |
//! +---------------------+------+-----------+-----+---------------------------------+
//!                               \_________________  74 bits  ______________________/
//!                                worker ‖ sequence of the ID (w + s bits), high first,
//!                                then 74 − w − s random bits
//! ```
//!
//! * `unix_ts_ms` is the ID's time in Unix milliseconds: `epoch_ms + timestamp` (an ID's
//!   timestamp is always in milliseconds since the layout's epoch, so the conversion is exact
//!   and keeps the order).
//! * The 74 bits RFC 9562 leaves to the generator (`rand_a`, then `rand_b` after the two
//!   variant bits) start with the ID's low `worker_bits + sequence_bits` bits, in the ID's
//!   order (worker above sequence), and end with random bits. Every layout fits: the worker
//!   and sequence fields take at most 63 bits.
//!
//! Two distinct IDs of one layout differ in their timestamp (hence in `unix_ts_ms`) or in
//! worker ‖ sequence (hence in the 74 bits), so their UUIDs differ whatever the random bits:
//! two UUIDs can only be equal if two IDs could. And the UUIDs compare (as 128-bit big-endian
//! integers, or byte strings) like the IDs they came from, so the UUIDs of one connection
//! increase as its IDs do (RFC 9562 §6.2's monotonicity). The random bits only make a UUID
//! hard to guess; they are not what keeps it unique.
//!
//! ```
//! use idgen_id::{Layout, UuidError};
//!
//! let layout = Layout::default();
//! let id = layout.compose(1_000, 7, 42)?;
//! let bytes = layout.uuid_v7(id, 0)?;
//! assert_eq!(bytes[6] >> 4, 7, "version 7");
//! assert_eq!(bytes[8] >> 6, 0b10, "variant");
//! let back = layout.decode_uuid_v7(bytes)?;
//! assert_eq!((back.id, back.parts.worker, back.parts.sequence), (id, 7, 42));
//! assert_eq!(back.parts.unix_ms, layout.epoch_ms() + 1_000);
//! // A version 4 UUID is refused.
//! let mut v4 = bytes;
//! v4[6] = 0x40 | (v4[6] & 0x0F);
//! assert_eq!(layout.decode_uuid_v7(v4), Err(UuidError::Version { version: 4 }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use crate::{Id, Layout, Parts};

/// The version these UUIDs carry (RFC 9562 §5.7).
pub const UUID_VERSION: u8 = 7;
/// The bits of a version 7 UUID after `unix_ts_ms`, other than the version and variant: the
/// ID's worker and sequence fields, then random bits.
pub const UUID_PAYLOAD_BITS: u8 = 74;
/// The largest Unix millisecond `unix_ts_ms` holds (48 bits: the year 10889).
pub const MAX_UUID_UNIX_MS: u64 = (1 << 48) - 1;

/// Why an ID could not become a UUID, or 16 bytes are not one of this layout's UUIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UuidError {
    /// The ID's Unix millisecond does not fit the 48-bit `unix_ts_ms` field.
    TimeOutOfRange {
        /// The ID's time, ms since the Unix epoch (saturated at `u64::MAX`).
        unix_ms: u64,
    },
    /// The version nibble is not 7.
    Version {
        /// The version found.
        version: u8,
    },
    /// The variant bits are not `0b10` (RFC 9562's variant).
    Variant {
        /// The top three bits of octet 8, as found.
        bits: u8,
    },
    /// The UUID's time is before the layout's epoch: no ID of this layout has it.
    BeforeEpoch {
        /// The UUID's time, ms since the Unix epoch.
        unix_ms: u64,
        /// The layout's epoch.
        epoch_ms: u64,
    },
    /// The UUID's time is past the layout's timestamp range: no ID of this layout has it.
    AfterRange {
        /// The UUID's time, ms since the Unix epoch.
        unix_ms: u64,
        /// The first Unix millisecond the layout cannot express.
        end_ms: u64,
    },
}

impl fmt::Display for UuidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            UuidError::TimeOutOfRange { unix_ms } => write!(
                f,
                "the ID's time {unix_ms} ms since the Unix epoch does not fit a UUIDv7's 48-bit millisecond field (max {MAX_UUID_UNIX_MS})"
            ),
            UuidError::Version { version } => write!(
                f,
                "not a version 7 UUID: its version is {version} (idgen issues only version 7 UUIDs)"
            ),
            UuidError::Variant { bits } => write!(
                f,
                "not an RFC 9562 UUID: its variant bits are {bits:03b} (want 10x)"
            ),
            UuidError::BeforeEpoch { unix_ms, epoch_ms } => write!(
                f,
                "the UUID's time {unix_ms} ms is before the layout's epoch {epoch_ms} ms: this cluster did not issue it"
            ),
            UuidError::AfterRange { unix_ms, end_ms } => write!(
                f,
                "the UUID's time {unix_ms} ms is past the layout's timestamp range (ends at {end_ms} ms): this cluster did not issue it"
            ),
        }
    }
}

impl std::error::Error for UuidError {}

/// A version 7 UUID taken apart by [`Layout::decode_uuid_v7`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UuidParts {
    /// The ID the UUID was made from.
    pub id: Id,
    /// That ID's fields (`unix_ms` is the UUID's `unix_ts_ms`).
    pub parts: Parts,
    /// The random bits, right-aligned.
    pub random: u128,
    /// How many random bits the layout leaves (`74 − worker_bits − sequence_bits`).
    pub random_bits: u8,
}

#[inline]
const fn mask128(bits: u8) -> u128 {
    // bits <= 74 here.
    (1u128 << bits) - 1
}

impl Layout {
    /// Bits of worker ‖ sequence, which a UUID carries right after `unix_ts_ms`.
    #[inline]
    const fn uuid_id_bits(&self) -> u8 {
        self.worker_bits() + self.sequence_bits()
    }

    /// How many of a UUID's 74 free bits are random with this layout
    /// (`74 − worker_bits − sequence_bits`, at least 11).
    pub const fn uuid_random_bits(&self) -> u8 {
        UUID_PAYLOAD_BITS - self.uuid_id_bits()
    }

    /// The version 7 UUID (16 bytes, big-endian: the RFC's byte order) of `id`, an ID this
    /// layout issued, with the low [`uuid_random_bits`](Self::uuid_random_bits) of `random`
    /// as its random bits (the caller draws them from a CSPRNG). Errs only when the ID's
    /// Unix millisecond is beyond 48 bits.
    #[inline]
    pub fn uuid_v7(&self, id: impl Into<Id>, random: u128) -> Result<[u8; 16], UuidError> {
        let id = id.into().0 & self.max_id().0;
        let id_bits = self.uuid_id_bits();
        let timestamp = id >> id_bits;
        let unix_ms = self.epoch_ms().saturating_add(timestamp);
        if unix_ms > MAX_UUID_UNIX_MS {
            return Err(UuidError::TimeOutOfRange { unix_ms });
        }
        let low = id & ((1u64 << id_bits) - 1);
        let random_bits = UUID_PAYLOAD_BITS - id_bits;
        let payload = ((low as u128) << random_bits) | (random & mask128(random_bits));
        let rand_a = payload >> 62;
        let rand_b = payload & mask128(62);
        let uuid = ((unix_ms as u128) << 80)
            | ((UUID_VERSION as u128) << 76)
            | (rand_a << 64)
            | (0b10u128 << 62)
            | rand_b;
        Ok(uuid.to_be_bytes())
    }

    /// Takes a version 7 UUID of this layout apart: the ID it was made from, that ID's fields
    /// and the random bits. Refuses another version or variant, and a time no ID of this
    /// layout has. (Any 74 bits decode: a UUID that passes was not necessarily issued.)
    pub fn decode_uuid_v7(&self, bytes: [u8; 16]) -> Result<UuidParts, UuidError> {
        let u = u128::from_be_bytes(bytes);
        let version = bytes[6] >> 4;
        if version != UUID_VERSION {
            return Err(UuidError::Version { version });
        }
        if bytes[8] >> 6 != 0b10 {
            return Err(UuidError::Variant {
                bits: bytes[8] >> 5,
            });
        }
        let unix_ms = (u >> 80) as u64;
        let Some(timestamp) = self.id_time(unix_ms) else {
            return Err(UuidError::BeforeEpoch {
                unix_ms,
                epoch_ms: self.epoch_ms(),
            });
        };
        if timestamp > self.max_timestamp() {
            return Err(UuidError::AfterRange {
                unix_ms,
                end_ms: self.end_unix_ms(),
            });
        }
        let payload = (((u >> 64) & 0xFFF) << 62) | (u & mask128(62));
        let random_bits = self.uuid_random_bits();
        let low = (payload >> random_bits) as u64;
        let id = Id((timestamp << self.uuid_id_bits()) | low);
        Ok(UuidParts {
            id,
            parts: self.decompose(id),
            random: payload & mask128(random_bits),
            random_bits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(b: [u8; 16]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The vectors PROTOCOL.md (GET_UUIDS) shows.
    #[test]
    fn vectors() {
        let layout = Layout::new(1_704_067_200_000, 41, 10, 12, 0).unwrap();
        // PROTOCOL.md §10's ID: 63072000123 ms after the epoch (unix_ms 1767139200123 =
        // 0x019B71B44C7B), worker 512, sequence 1: worker ‖ sequence is the 22 bits
        // 10 0000 0000 | 0000 0000 0001, then 52 random bits.
        let id = 264_543_142_405_996_545u64;
        for (random, want) in [
            (0u128, "019b71b44c7b78008010000000000000"),
            (u128::MAX, "019b71b44c7b7800801fffffffffffff"),
            (0x0_1234_5678_9ABC, "019b71b44c7b78008010123456789abc"),
        ] {
            let b = layout.uuid_v7(id, random).unwrap();
            assert_eq!(hex(b), want, "{random:x}");
            let d = layout.decode_uuid_v7(b).unwrap();
            assert_eq!(d.id, Id(id));
            assert_eq!(
                (d.parts.unix_ms, d.parts.worker, d.parts.sequence),
                (1_767_139_200_123, 512, 1)
            );
            assert_eq!(d.random_bits, 52);
            assert_eq!(d.random, random & ((1 << 52) - 1));
        }
    }

    #[test]
    fn decode_refuses_other_versions_and_variants() {
        let l = Layout::default();
        let good = l.uuid_v7(l.compose(5, 3, 9).unwrap(), 77).unwrap();
        assert!(l.decode_uuid_v7(good).is_ok());
        for v in [0u8, 1, 4, 6, 8, 15] {
            let mut b = good;
            b[6] = (v << 4) | (b[6] & 0x0F);
            assert_eq!(l.decode_uuid_v7(b), Err(UuidError::Version { version: v }));
        }
        for bits in [0b00u8, 0b01, 0b11] {
            let mut b = good;
            b[8] = (bits << 6) | (b[8] & 0x3F);
            assert!(matches!(
                l.decode_uuid_v7(b),
                Err(UuidError::Variant { .. })
            ));
        }
        // The nil and max UUIDs (RFC 9562 §5.9, §5.10).
        assert_eq!(
            l.decode_uuid_v7([0; 16]),
            Err(UuidError::Version { version: 0 })
        );
        assert_eq!(
            l.decode_uuid_v7([0xFF; 16]),
            Err(UuidError::Version { version: 15 })
        );
        let msg = l.decode_uuid_v7([0; 16]).unwrap_err().to_string();
        assert!(
            msg.contains("version 7") && msg.contains("version is 0"),
            "{msg}"
        );
    }

    #[test]
    fn decode_refuses_times_outside_the_layout() {
        let l = Layout::new(1_000_000, 41, 10, 12, 0).unwrap();
        let mut before = l.uuid_v7(l.compose(0, 0, 0).unwrap(), 0).unwrap();
        // unix_ms 999_999: one before the epoch.
        before[..6].copy_from_slice(&999_999u64.to_be_bytes()[2..]);
        assert_eq!(
            l.decode_uuid_v7(before),
            Err(UuidError::BeforeEpoch {
                unix_ms: 999_999,
                epoch_ms: 1_000_000
            })
        );
        let small = Layout::new(1_000_000, 10, 30, 23, 0).unwrap();
        let mut after = small
            .uuid_v7(small.compose(1023, 0, 0).unwrap(), 0)
            .unwrap();
        assert!(small.decode_uuid_v7(after).is_ok());
        after[..6].copy_from_slice(&(1_000_000u64 + 1024).to_be_bytes()[2..]);
        assert!(matches!(
            small.decode_uuid_v7(after),
            Err(UuidError::AfterRange {
                end_ms: 1_001_024,
                ..
            })
        ));
    }

    #[test]
    fn times_beyond_48_bits_are_refused() {
        let l = Layout::new(MAX_UUID_UNIX_MS - 10, 41, 10, 12, 0).unwrap();
        assert!(l.uuid_v7(l.compose(10, 0, 0).unwrap(), 0).is_ok());
        assert_eq!(
            l.uuid_v7(l.compose(11, 0, 0).unwrap(), 0),
            Err(UuidError::TimeOutOfRange {
                unix_ms: MAX_UUID_UNIX_MS + 1
            })
        );
        let far = Layout::new(u64::MAX, 41, 10, 12, 0).unwrap();
        assert!(far.uuid_v7(0u64, 0).is_err(), "saturates, never wraps");
    }

    #[test]
    fn a_javascript_safe_layout_round_trips_and_ignores_bits_above_its_width() {
        let l = Layout::new(crate::DEFAULT_EPOCH_MS, 41, 2, 10, 0).unwrap();
        assert_eq!(l.uuid_random_bits(), 62);
        let id = l.compose(1_000, 3, 1023).unwrap();
        let b = l.uuid_v7(id, 0).unwrap();
        let d = l.decode_uuid_v7(b).unwrap();
        assert_eq!((d.id, d.parts.worker, d.parts.sequence), (id, 3, 1023));
        assert_eq!(d.parts.unix_ms, crate::DEFAULT_EPOCH_MS + 1_000);
        // A value with bits above the layout's 53 is not taken for a later time.
        assert_eq!(l.uuid_v7(id.0 | 1 << 60, 0), Ok(b));
    }

    fn layouts() -> impl Strategy<Value = Layout> {
        // Every layout `Layout::new` accepts (32 to 63 bits wide), epochs up to the 2020s.
        (crate::MIN_ID_BITS..=63u8, 0u64..=crate::DEFAULT_EPOCH_MS)
            .prop_flat_map(|(bits, epoch)| (Just(bits), 1..=bits - 2, Just(epoch)))
            .prop_flat_map(|(bits, ts, epoch)| (Just(bits), Just(ts), Just(epoch), 1..bits - ts))
            .prop_map(|(bits, ts, epoch, w)| Layout::new(epoch, ts, w, bits - ts - w, 0).unwrap())
    }

    /// An ID of `l` whose Unix millisecond fits 48 bits.
    fn id_of(l: &Layout, (t, w, s): (u64, u64, u64)) -> Id {
        let room = MAX_UUID_UNIX_MS - l.epoch_ms();
        let t = (t & l.max_timestamp()) % (room + 1);
        l.compose(t, w & l.max_worker(), s & l.max_sequence())
            .unwrap()
    }

    proptest! {
        #[test]
        fn every_layout_fits(l in layouts()) {
            prop_assert!(l.worker_bits() + l.sequence_bits() <= UUID_PAYLOAD_BITS);
            prop_assert!(l.uuid_random_bits() >= 11);
        }

        #[test]
        fn round_trip(l in layouts(), f in any::<(u64, u64, u64)>(), r in any::<u128>()) {
            let id = id_of(&l, f);
            let b = l.uuid_v7(id, r).unwrap();
            prop_assert_eq!(b[6] >> 4, 7);
            prop_assert_eq!(b[8] >> 6, 0b10);
            let d = l.decode_uuid_v7(b).unwrap();
            prop_assert_eq!(d.id, id);
            prop_assert_eq!(d.parts, l.decompose(id));
            prop_assert_eq!(d.random, r & mask128(l.uuid_random_bits()));
            prop_assert_eq!(u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]), d.parts.unix_ms);
        }

        /// Distinct IDs give distinct UUIDs, whatever the random bits.
        #[test]
        fn distinct_ids_distinct_uuids(l in layouts(), a in any::<(u64, u64, u64)>(), b in any::<(u64, u64, u64)>(), ra in any::<u128>(), rb in any::<u128>()) {
            let (ia, ib) = (id_of(&l, a), id_of(&l, b));
            let (ua, ub) = (l.uuid_v7(ia, ra).unwrap(), l.uuid_v7(ib, rb).unwrap());
            if ia != ib {
                prop_assert_ne!(ua, ub);
            }
            // The same ID and random bits: the same UUID (the mapping is a function).
            prop_assert_eq!(l.uuid_v7(ia, ra).unwrap(), ua);
        }

        /// UUIDs (as bytes, or 128-bit integers) order as their IDs do, whatever the random bits.
        #[test]
        fn order_is_the_ids_order(l in layouts(), a in any::<(u64, u64, u64)>(), b in any::<(u64, u64, u64)>(), ra in any::<u128>(), rb in any::<u128>()) {
            let (ia, ib) = (id_of(&l, a), id_of(&l, b));
            prop_assume!(ia != ib);
            let (ua, ub) = (l.uuid_v7(ia, ra).unwrap(), l.uuid_v7(ib, rb).unwrap());
            prop_assert_eq!(ua.cmp(&ub), ia.cmp(&ib));
        }

        /// Consecutive IDs of one worker (one connection) give strictly increasing UUIDs.
        #[test]
        fn one_worker_is_monotonic(l in layouts(), f in any::<(u64, u64, u64)>(), n in 1usize..200, seed in any::<u128>()) {
            let start = id_of(&l, f);
            let p = l.decompose(start);
            let mut last: Option<[u8; 16]> = None;
            let (mut t, mut s) = (p.timestamp, p.sequence);
            for i in 0..n {
                if l.epoch_ms() + t > MAX_UUID_UNIX_MS || t > l.max_timestamp() {
                    break;
                }
                let id = l.compose(t, p.worker, s).unwrap();
                let u = l.uuid_v7(id, seed.rotate_left(i as u32)).unwrap();
                if let Some(prev) = last {
                    prop_assert!(prev < u);
                }
                last = Some(u);
                if s == l.max_sequence() { t += 1; s = 0 } else { s += 1 }
            }
        }

        /// Any 16 bytes decode to a value or a clear error, never a panic.
        #[test]
        fn hostile_bytes_never_panic(l in layouts(), b in any::<[u8; 16]>()) {
            match l.decode_uuid_v7(b) {
                Ok(d) => {
                    prop_assert_eq!(l.uuid_v7(d.id, d.random).unwrap(), b);
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}

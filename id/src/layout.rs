//! The bit layout of an ID: `0 | timestamp | worker | sequence`.
//!
//! ```text
//!  63  62                      22 21        12 11          0
//! +---+--------------------------+------------+-------------+
//! | 0 | timestamp (ms since epoch)|   worker   |  sequence   |   default 41 / 10 / 12
//! +---+--------------------------+------------+-------------+
//!                                 ^ region bits, when set, are the top bits of the worker field
//! ```
//!
//! The sign bit is always zero, so every ID fits a signed 64-bit integer. The three widths are
//! cluster configuration: a cluster stores its layout once and a node whose layout differs
//! refuses to start. They sum to the layout's ID width `W` ([`Layout::id_bits`]), at most 63
//! and at least [`MIN_ID_BITS`]; every ID is below `2^W`. The default layout is 63 bits wide; a
//! layout of at most [`JS_SAFE_BITS`] (53) bits is *JavaScript-safe*: every ID is an exact
//! JavaScript number (at most `Number.MAX_SAFE_INTEGER`, `2^53 - 1`), at the cost of a shorter
//! lifetime, fewer worker IDs or fewer IDs per millisecond.
//!
//! ```
//! use idgen_id::{Id, Layout};
//!
//! let layout = Layout::default();
//! let id = layout.compose(1_000, 7, 42).unwrap();
//! let parts = layout.decompose(id);
//! assert_eq!((parts.timestamp, parts.worker, parts.sequence), (1_000, 7, 42));
//! assert_eq!(parts.unix_ms, layout.epoch_ms() + 1_000);
//! assert_eq!(id, Id((1_000 << 22) | (7 << 12) | 42));
//! ```

use std::fmt;

use crate::Id;

/// 2026-01-01T00:00:00Z in milliseconds since the Unix epoch: the default ID epoch.
pub const DEFAULT_EPOCH_MS: u64 = 1_767_225_600_000;
/// Default width of the timestamp field: 41 bits, about 69.7 years of milliseconds.
pub const DEFAULT_TIMESTAMP_BITS: u8 = 41;
/// Default width of the worker field: 1024 worker IDs.
pub const DEFAULT_WORKER_BITS: u8 = 10;
/// Default width of the sequence field: 4096 IDs per worker per millisecond.
pub const DEFAULT_SEQUENCE_BITS: u8 = 12;
/// Bits available below the sign bit: the widest layout.
pub const PAYLOAD_BITS: u8 = 63;
/// The narrowest layout a node runs with: IDs of fewer bits than a 32-bit integer leave too
/// little room for a lifetime and a rate worth running a service for.
pub const MIN_ID_BITS: u8 = 32;
/// The widest JavaScript-safe layout: every ID of a layout this wide or narrower is at most
/// `2^53 - 1` (`Number.MAX_SAFE_INTEGER`), an exact IEEE-754 double.
pub const JS_SAFE_BITS: u8 = 53;

/// Why a layout was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// The three widths sum to more than 63.
    WidthSum {
        /// Width of the timestamp field.
        timestamp: u8,
        /// Width of the worker field.
        worker: u8,
        /// Width of the sequence field.
        sequence: u8,
        /// Their sum.
        sum: u32,
    },
    /// The three widths sum to fewer than [`MIN_ID_BITS`].
    TooNarrow {
        /// Width of the timestamp field.
        timestamp: u8,
        /// Width of the worker field.
        worker: u8,
        /// Width of the sequence field.
        sequence: u8,
        /// Their sum.
        sum: u32,
    },
    /// An ID at or above `2^bits`, the layout's width: not an ID of this layout.
    IdOutOfRange {
        /// The value.
        id: u64,
        /// The layout's ID width.
        bits: u8,
    },
    /// A field of width 0.
    ZeroWidth {
        /// `timestamp`, `worker` or `sequence`.
        field: &'static str,
    },
    /// More region bits than worker bits.
    RegionTooWide {
        /// Region bits.
        region: u8,
        /// Worker bits.
        worker: u8,
    },
    /// The epoch is later than the clock.
    EpochInFuture {
        /// The layout's epoch.
        epoch_ms: u64,
        /// The clock, ms since the Unix epoch.
        now_ms: u64,
    },
    /// The timestamp field has run out.
    RangeOver {
        /// The layout's epoch.
        epoch_ms: u64,
        /// Width of the timestamp field.
        timestamp_bits: u8,
        /// The first Unix millisecond the layout cannot express.
        end_ms: u64,
        /// The clock, ms since the Unix epoch.
        now_ms: u64,
    },
    /// A field value wider than its field.
    FieldOverflow {
        /// The field's name.
        field: &'static str,
        /// The value.
        value: u64,
        /// The field's width.
        bits: u8,
        /// The largest value the field holds.
        max: u64,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::WidthSum {
                timestamp,
                worker,
                sequence,
                sum,
            } => write!(
                f,
                "bit widths must sum to at most 63 (the sign bit stays 0): timestamp {timestamp} + worker {worker} + sequence {sequence} = {sum}"
            ),
            LayoutError::TooNarrow {
                timestamp,
                worker,
                sequence,
                sum,
            } => write!(
                f,
                "bit widths must sum to at least {MIN_ID_BITS}: timestamp {timestamp} + worker {worker} + sequence {sequence} = {sum}"
            ),
            LayoutError::IdOutOfRange { id, bits } => write!(
                f,
                "{id} is not an ID of this layout: its IDs are {bits} bits wide, below 2^{bits} = {}",
                1u128 << bits
            ),
            LayoutError::ZeroWidth { field } => {
                write!(f, "the {field} field must be at least 1 bit wide")
            }
            LayoutError::RegionTooWide { region, worker } => write!(
                f,
                "region bits ({region}) are wider than the worker field ({worker})"
            ),
            LayoutError::EpochInFuture { epoch_ms, now_ms } => write!(
                f,
                "the epoch {epoch_ms} ms is in the future (the clock says {now_ms} ms since the Unix epoch)"
            ),
            LayoutError::RangeOver {
                epoch_ms,
                timestamp_bits,
                end_ms,
                now_ms,
            } => write!(
                f,
                "the layout's timestamp range has already run out: epoch {epoch_ms} ms + 2^{timestamp_bits} ms ended at {end_ms} ms, now is {now_ms} ms"
            ),
            LayoutError::FieldOverflow {
                field,
                value,
                bits,
                max,
            } => write!(f, "{field} {value} does not fit in {bits} bits (max {max})"),
        }
    }
}

impl std::error::Error for LayoutError {}

/// The fields of a decomposed ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    /// Milliseconds since the layout's epoch.
    pub timestamp: u64,
    /// Milliseconds since the Unix epoch (`epoch + timestamp`).
    pub unix_ms: u64,
    /// The whole worker field (region bits included).
    pub worker: u64,
    /// The region: the top `region_bits` of the worker field (0 when the layout has none).
    pub region: u64,
    /// The worker within its region: the low bits of the worker field.
    pub node: u64,
    /// The sequence within the millisecond.
    pub sequence: u64,
}

/// A validated bit layout. Shifts and masks are precomputed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    epoch_ms: u64,
    timestamp_bits: u8,
    worker_bits: u8,
    sequence_bits: u8,
    region_bits: u8,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            epoch_ms: DEFAULT_EPOCH_MS,
            timestamp_bits: DEFAULT_TIMESTAMP_BITS,
            worker_bits: DEFAULT_WORKER_BITS,
            sequence_bits: DEFAULT_SEQUENCE_BITS,
            region_bits: 0,
        }
    }
}

#[inline]
const fn mask(bits: u8) -> u64 {
    // bits <= 63 for every field of a valid layout.
    (1u64 << bits) - 1
}

impl Layout {
    /// A layout a node may run with: every field at least 1 bit wide, the widths summing to
    /// [`MIN_ID_BITS`] ..= 63, the region bits within the worker field. The epoch is not checked against a clock (see
    /// [`Layout::check_epoch`]).
    pub fn new(
        epoch_ms: u64,
        timestamp_bits: u8,
        worker_bits: u8,
        sequence_bits: u8,
        region_bits: u8,
    ) -> Result<Layout, LayoutError> {
        for (field, width) in [
            ("timestamp", timestamp_bits),
            ("worker", worker_bits),
            ("sequence", sequence_bits),
        ] {
            if width == 0 {
                return Err(LayoutError::ZeroWidth { field });
            }
        }
        let sum = timestamp_bits as u32 + worker_bits as u32 + sequence_bits as u32;
        if sum < MIN_ID_BITS as u32 {
            return Err(LayoutError::TooNarrow {
                timestamp: timestamp_bits,
                worker: worker_bits,
                sequence: sequence_bits,
                sum,
            });
        }
        // Beyond that, the wire's rule.
        Layout::announced(
            epoch_ms,
            timestamp_bits,
            worker_bits,
            sequence_bits,
            region_bits,
        )
    }

    /// A layout as HELLO_OK announces it: the rule of the wire (`PROTOCOL.md`, HELLO_OK) is
    /// only that the widths sum to at most 63 and the region bits fit in the worker field, so a
    /// field may be 0 bits wide here, and the sum below [`MIN_ID_BITS`] (a node never announces
    /// either: [`Layout::new`] refuses them).
    pub const fn announced(
        epoch_ms: u64,
        timestamp_bits: u8,
        worker_bits: u8,
        sequence_bits: u8,
        region_bits: u8,
    ) -> Result<Layout, LayoutError> {
        let sum = timestamp_bits as u32 + worker_bits as u32 + sequence_bits as u32;
        if sum > PAYLOAD_BITS as u32 {
            return Err(LayoutError::WidthSum {
                timestamp: timestamp_bits,
                worker: worker_bits,
                sequence: sequence_bits,
                sum,
            });
        }
        if region_bits > worker_bits {
            return Err(LayoutError::RegionTooWide {
                region: region_bits,
                worker: worker_bits,
            });
        }
        Ok(Layout {
            epoch_ms,
            timestamp_bits,
            worker_bits,
            sequence_bits,
            region_bits,
        })
    }

    /// Checks the epoch against the wall clock: it must not be in the future, and the timestamp
    /// range must not have run out.
    pub fn check_epoch(&self, now_unix_ms: u64) -> Result<(), LayoutError> {
        if self.epoch_ms > now_unix_ms {
            return Err(LayoutError::EpochInFuture {
                epoch_ms: self.epoch_ms,
                now_ms: now_unix_ms,
            });
        }
        let end_ms = self.end_unix_ms();
        if now_unix_ms >= end_ms {
            return Err(LayoutError::RangeOver {
                epoch_ms: self.epoch_ms,
                timestamp_bits: self.timestamp_bits,
                end_ms,
                now_ms: now_unix_ms,
            });
        }
        Ok(())
    }

    /// Unix time in milliseconds of timestamp 0.
    pub const fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }
    /// Width of the timestamp field.
    pub const fn timestamp_bits(&self) -> u8 {
        self.timestamp_bits
    }
    /// Width of the worker field (region bits included).
    pub const fn worker_bits(&self) -> u8 {
        self.worker_bits
    }
    /// Width of the sequence field.
    pub const fn sequence_bits(&self) -> u8 {
        self.sequence_bits
    }
    /// How many of the worker field's top bits are the region (0 = no regions).
    pub const fn region_bits(&self) -> u8 {
        self.region_bits
    }
    /// The ID width `W`: timestamp + worker + sequence bits. Every ID is below `2^W`.
    #[inline]
    pub const fn id_bits(&self) -> u8 {
        self.timestamp_bits + self.worker_bits + self.sequence_bits
    }
    /// The largest ID the layout can hold (`2^W - 1`).
    #[inline]
    pub const fn max_id(&self) -> Id {
        Id(mask(self.id_bits()))
    }
    /// Whether every ID of the layout is an exact JavaScript number (`W <=` [`JS_SAFE_BITS`]).
    pub const fn is_js_safe(&self) -> bool {
        self.id_bits() <= JS_SAFE_BITS
    }
    /// `id` if it is one of the layout's IDs (below `2^W`), else [`LayoutError::IdOutOfRange`].
    pub fn check_id(&self, id: impl Into<Id>) -> Result<Id, LayoutError> {
        let id = id.into();
        if id > self.max_id() {
            return Err(LayoutError::IdOutOfRange {
                id: id.0,
                bits: self.id_bits(),
            });
        }
        Ok(id)
    }
    /// Bits of the worker field below the region bits.
    pub const fn node_bits(&self) -> u8 {
        self.worker_bits - self.region_bits
    }

    /// The largest timestamp (ms since the epoch) the layout can hold.
    #[inline]
    pub const fn max_timestamp(&self) -> u64 {
        mask(self.timestamp_bits)
    }
    /// The number of worker IDs (`2^worker_bits`).
    pub const fn worker_count(&self) -> u64 {
        1 << self.worker_bits
    }
    /// The largest worker ID.
    pub const fn max_worker(&self) -> u64 {
        mask(self.worker_bits)
    }
    /// The number of regions (`2^region_bits`; 1 when the layout has no region bits).
    pub const fn region_count(&self) -> u64 {
        1 << self.region_bits
    }
    /// Worker IDs per region (`2^node_bits`).
    pub const fn workers_per_region(&self) -> u64 {
        1 << self.node_bits()
    }
    /// IDs one worker can issue in one millisecond (`2^sequence_bits`).
    #[inline]
    pub const fn sequence_count(&self) -> u64 {
        1 << self.sequence_bits
    }
    /// The largest sequence number.
    pub const fn max_sequence(&self) -> u64 {
        mask(self.sequence_bits)
    }
    /// Left shift of the timestamp field.
    #[inline]
    pub const fn timestamp_shift(&self) -> u8 {
        self.worker_bits + self.sequence_bits
    }
    /// Left shift of the worker field.
    #[inline]
    pub const fn worker_shift(&self) -> u8 {
        self.sequence_bits
    }

    /// The Unix millisecond at which the timestamp field overflows: the first moment no ID can
    /// be issued for.
    pub const fn end_unix_ms(&self) -> u64 {
        self.epoch_ms.saturating_add(1 << self.timestamp_bits)
    }

    /// How long from `now_unix_ms` until the timestamp range runs out (zero if it has).
    pub fn time_left(&self, now_unix_ms: u64) -> std::time::Duration {
        std::time::Duration::from_millis(self.end_unix_ms().saturating_sub(now_unix_ms))
    }

    /// Converts Unix milliseconds to ID time (ms since the layout's epoch); `None` before the
    /// epoch.
    #[inline]
    pub const fn id_time(&self, unix_ms: u64) -> Option<u64> {
        unix_ms.checked_sub(self.epoch_ms)
    }

    /// The worker ID for `node` in `region`.
    pub fn worker_id(&self, region: u64, node: u64) -> Result<u64, LayoutError> {
        check_field("region", region, self.region_bits)?;
        check_field("node", node, self.node_bits())?;
        Ok((region << self.node_bits()) | node)
    }

    /// Builds an ID from its fields, each checked against its width.
    pub fn compose(&self, timestamp: u64, worker: u64, sequence: u64) -> Result<Id, LayoutError> {
        check_field("timestamp", timestamp, self.timestamp_bits)?;
        check_field("worker", worker, self.worker_bits)?;
        check_field("sequence", sequence, self.sequence_bits)?;
        Ok(Id((timestamp << self.timestamp_shift())
            | (worker << self.worker_shift())
            | sequence))
    }

    /// Splits an ID (an [`Id`] or a raw `u64`) into its fields. Any 64-bit value decomposes;
    /// the bits at and above the layout's width (the sign bit, and more in a layout narrower
    /// than 63 bits) are ignored: [`Layout::check_id`] refuses such a value.
    #[inline]
    pub fn decompose(&self, id: impl Into<Id>) -> Parts {
        let v = id.into().0 & mask(self.id_bits());
        let timestamp = v >> self.timestamp_shift();
        let worker = (v >> self.worker_shift()) & mask(self.worker_bits);
        let node_bits = self.worker_bits - self.region_bits;
        Parts {
            timestamp,
            unix_ms: self.epoch_ms.saturating_add(timestamp),
            worker,
            region: worker >> node_bits,
            node: worker & mask(node_bits),
            sequence: v & mask(self.sequence_bits),
        }
    }
}

fn check_field(field: &'static str, value: u64, bits: u8) -> Result<(), LayoutError> {
    let max = mask(bits);
    if value > max {
        Err(LayoutError::FieldOverflow {
            field,
            value,
            bits,
            max,
        })
    } else {
        Ok(())
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epoch {} ms, timestamp/worker/sequence bits {}/{}/{} ({}-bit IDs), region bits {}",
            self.epoch_ms,
            self.timestamp_bits,
            self.worker_bits,
            self.sequence_bits,
            self.id_bits(),
            self.region_bits
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_is_41_10_12_from_2026() {
        let l = Layout::default();
        assert_eq!(
            (
                l.timestamp_bits(),
                l.worker_bits(),
                l.sequence_bits(),
                l.region_bits()
            ),
            (41, 10, 12, 0)
        );
        assert_eq!(l.epoch_ms(), 1_767_225_600_000);
        assert_eq!(l.timestamp_shift(), 22);
        assert_eq!(l.worker_shift(), 12);
        assert_eq!(l.sequence_count(), 4096);
        assert_eq!(l.worker_count(), 1024);
        assert_eq!(l.max_timestamp(), (1 << 41) - 1);
        assert_eq!(Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 0), Ok(l));
    }

    #[test]
    fn width_errors() {
        assert!(matches!(
            Layout::new(0, 20, 5, 6, 0),
            Err(LayoutError::TooNarrow { sum: 31, .. })
        ));
        assert!(matches!(
            Layout::new(0, 42, 10, 12, 0),
            Err(LayoutError::WidthSum { sum: 64, .. })
        ));
        assert_eq!(
            Layout::new(0, 0, 51, 12, 0),
            Err(LayoutError::ZeroWidth { field: "timestamp" })
        );
        assert_eq!(
            Layout::new(0, 51, 0, 12, 0),
            Err(LayoutError::ZeroWidth { field: "worker" })
        );
        assert_eq!(
            Layout::new(0, 41, 22, 0, 0),
            Err(LayoutError::ZeroWidth { field: "sequence" })
        );
        assert_eq!(
            Layout::new(0, 41, 10, 12, 11),
            Err(LayoutError::RegionTooWide {
                region: 11,
                worker: 10
            })
        );
        // Region bits may take the whole worker field (one worker per region).
        assert!(Layout::new(0, 41, 10, 12, 10).is_ok());
        // Widths that would overflow a u8 sum are still a sum error, not a wrap.
        assert!(matches!(
            Layout::new(0, 255, 255, 255, 0),
            Err(LayoutError::WidthSum { sum: 765, .. })
        ));
        // The wire's rule allows a zero-width field, nothing else that `new` refuses.
        assert!(Layout::announced(0, 63, 0, 0, 0).is_ok());
        assert!(Layout::announced(0, 0, 51, 12, 0).is_ok());
        assert!(Layout::announced(0, 20, 5, 6, 0).is_ok());
        assert!(Layout::announced(0, 0, 0, 0, 0).is_ok());
        assert!(matches!(
            Layout::announced(0, 41, 10, 13, 0),
            Err(LayoutError::WidthSum { sum: 64, .. })
        ));
        assert!(matches!(
            Layout::announced(0, 255, 255, 255, 0),
            Err(LayoutError::WidthSum { sum: 765, .. })
        ));
        assert_eq!(
            Layout::announced(0, 41, 10, 12, 11),
            Err(LayoutError::RegionTooWide {
                region: 11,
                worker: 10
            })
        );
        let msg = Layout::new(0, 42, 10, 12, 0).unwrap_err().to_string();
        assert!(msg.contains("at most 63") && msg.contains("64"), "{msg}");
        let msg = Layout::new(0, 20, 5, 6, 0).unwrap_err().to_string();
        assert!(msg.contains("at least 32") && msg.contains("31"), "{msg}");
    }

    #[test]
    fn narrower_layouts_from_32_to_63_bits() {
        for w in MIN_ID_BITS..=PAYLOAD_BITS {
            // Timestamp bits take what worker 10 and sequence 2 leave (at least 20).
            let l = Layout::new(DEFAULT_EPOCH_MS, w - 12, 10, 2, 0).unwrap();
            assert_eq!(l.id_bits(), w);
            assert_eq!(l.max_id(), Id((1 << w) - 1));
            assert_eq!(l.is_js_safe(), w <= 53);
            let top = l
                .compose(l.max_timestamp(), l.max_worker(), l.max_sequence())
                .unwrap();
            assert_eq!(top, l.max_id());
        }
        // The JavaScript-safe 41/2/10: 2^53 - 1 is its largest ID, Number.MAX_SAFE_INTEGER.
        let js = Layout::new(DEFAULT_EPOCH_MS, 41, 2, 10, 0).unwrap();
        assert_eq!(js.max_id(), Id(9_007_199_254_740_991));
        assert!(js.is_js_safe() && !Layout::default().is_js_safe());
        assert_eq!(js.end_unix_ms(), Layout::default().end_unix_ms());
        assert_eq!((js.worker_count(), js.sequence_count()), (4, 1024));
        assert_eq!(js.check_id(9_007_199_254_740_991), Ok(js.max_id()));
        assert_eq!(
            js.check_id(1u64 << 53),
            Err(LayoutError::IdOutOfRange {
                id: 1 << 53,
                bits: 53
            })
        );
        let msg = js.check_id(1u64 << 53).unwrap_err().to_string();
        assert!(
            msg.contains("53 bits") && msg.contains("9007199254740992"),
            "{msg}"
        );
        assert_eq!(
            Layout::default().check_id(i64::MAX as u64),
            Ok(Id(i64::MAX as u64))
        );
        assert!(Layout::default().check_id(1u64 << 63).is_err());
        // Bits above the width are not the timestamp's: a value of 2^53 + 5 decomposes as 5.
        assert_eq!(js.decompose((1u64 << 53) + 5), js.decompose(5));
        assert_eq!(js.decompose(5).sequence, 5);
        // The width is in the layout's description, so a mismatch names it.
        assert!(js.to_string().contains("41/2/10 (53-bit IDs)"), "{js}");
        assert!(Layout::default().to_string().contains("(63-bit IDs)"));
    }

    #[test]
    fn epoch_checks() {
        let l = Layout::default();
        assert_eq!(
            l.check_epoch(DEFAULT_EPOCH_MS - 1),
            Err(LayoutError::EpochInFuture {
                epoch_ms: DEFAULT_EPOCH_MS,
                now_ms: DEFAULT_EPOCH_MS - 1
            })
        );
        assert_eq!(l.check_epoch(DEFAULT_EPOCH_MS), Ok(()));
        let end = l.end_unix_ms();
        assert_eq!(end, DEFAULT_EPOCH_MS + (1 << 41));
        assert_eq!(l.check_epoch(end - 1), Ok(()));
        assert!(matches!(
            l.check_epoch(end),
            Err(LayoutError::RangeOver { .. })
        ));
        assert_eq!(l.time_left(end - 5), std::time::Duration::from_millis(5));
        assert_eq!(l.time_left(end + 5), std::time::Duration::ZERO);
        // 2^41 ms is about 69.7 years.
        let years = (1u64 << 41) as f64 / (365.25 * 86_400_000.0);
        assert!((69.6..69.8).contains(&years));
    }

    #[test]
    fn compose_checks_each_field() {
        let l = Layout::default();
        assert!(l.compose(l.max_timestamp(), 1023, 4095).is_ok());
        assert_eq!(
            l.compose(l.max_timestamp(), 1023, 4095).unwrap().0,
            i64::MAX as u64
        );
        assert!(matches!(
            l.compose(1 << 41, 0, 0),
            Err(LayoutError::FieldOverflow {
                field: "timestamp",
                ..
            })
        ));
        assert!(matches!(
            l.compose(0, 1024, 0),
            Err(LayoutError::FieldOverflow {
                field: "worker",
                ..
            })
        ));
        assert!(matches!(
            l.compose(0, 0, 4096),
            Err(LayoutError::FieldOverflow {
                field: "sequence",
                ..
            })
        ));
    }

    #[test]
    fn spec_example() {
        // PROTOCOL.md, "Taking IDs apart".
        let layout = Layout::new(1_704_067_200_000, 41, 10, 12, 0).unwrap();
        let p = layout.decompose(264_543_142_405_996_545);
        assert_eq!(
            p,
            Parts {
                timestamp: 63_072_000_123,
                unix_ms: 1_767_139_200_123,
                worker: 512,
                region: 0,
                node: 512,
                sequence: 1,
            }
        );
        let regions = Layout::new(1_704_067_200_000, 41, 10, 12, 3).unwrap();
        assert_eq!(regions.decompose(264_543_142_405_996_545).region, 4);
    }

    #[test]
    fn regions_are_the_top_worker_bits() {
        let l = Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 3).unwrap();
        assert_eq!(l.region_count(), 8);
        assert_eq!(l.workers_per_region(), 128);
        let w = l.worker_id(5, 17).unwrap();
        assert_eq!(w, 5 * 128 + 17);
        let p = l.decompose(l.compose(9, w, 3).unwrap());
        assert_eq!((p.region, p.node, p.worker), (5, 17, w));
        assert!(l.worker_id(8, 0).is_err());
        assert!(l.worker_id(0, 128).is_err());
        let none = Layout::default();
        assert_eq!(none.region_count(), 1);
        assert_eq!(none.decompose(Id(123 << 12)).region, 0);
    }

    /// Every layout a node runs with: any width from 32 to 63 bits, 63 (the default's) often.
    fn layouts() -> impl Strategy<Value = Layout> {
        (
            prop_oneof![Just(PAYLOAD_BITS), MIN_ID_BITS..=PAYLOAD_BITS],
            0u64..=DEFAULT_EPOCH_MS,
        )
            .prop_flat_map(|(bits, epoch)| (Just(bits), 1..=bits - 2, Just(epoch)))
            .prop_flat_map(|(bits, ts, epoch)| {
                let rest = bits - ts;
                (Just(ts), Just(epoch), 1..rest)
                    .prop_flat_map(move |(ts, epoch, worker)| {
                        (Just(ts), Just(epoch), Just(worker), 0..=worker)
                    })
                    .prop_map(move |(ts, epoch, worker, region)| {
                        Layout::new(epoch, ts, worker, bits - ts - worker, region).unwrap()
                    })
            })
    }

    /// Every layout the wire allows: zero-width fields, and widths below 32 bits, included.
    fn announced_layouts() -> impl Strategy<Value = Layout> {
        (0u8..=63, 0u8..=63, 0u8..=63, any::<u64>())
            .prop_filter("widths fit in 63 bits", |(t, w, s, _)| t + w + s <= 63)
            .prop_flat_map(|(t, w, s, epoch)| (Just((t, w, s, epoch)), 0..=w))
            .prop_map(|((t, w, s, epoch), r)| Layout::announced(epoch, t, w, s, r).unwrap())
    }

    proptest! {
        #[test]
        fn announced_layouts_round_trip(l in announced_layouts(), t in any::<u64>(), w in any::<u64>(), s in any::<u64>(), raw in any::<u64>()) {
            let (t, w, s) = (t & l.max_timestamp(), w & l.max_worker(), s & l.max_sequence());
            let p = l.decompose(l.compose(t, w, s).unwrap());
            prop_assert_eq!((p.timestamp, p.worker, p.sequence), (t, w, s));
            prop_assert_eq!(p.region << l.node_bits() | p.node, w);
            // Any value decomposes, the bits above the layout's width ignored.
            let q = l.decompose(raw);
            prop_assert_eq!(q, l.decompose(raw & l.max_id().0));
            prop_assert!(q.worker <= l.max_worker() && q.sequence <= l.max_sequence());
            prop_assert!(q.timestamp <= l.max_timestamp());
            prop_assert_eq!(l.check_id(raw).is_ok(), raw <= l.max_id().0);
        }

        #[test]
        fn compose_decompose_round_trip(l in layouts(), t in any::<u64>(), w in any::<u64>(), s in any::<u64>()) {
            let (t, w, s) = (t & l.max_timestamp(), w & l.max_worker(), s & l.max_sequence());
            let id = l.compose(t, w, s).unwrap();
            prop_assert!(id.0 < (1 << 63));
            prop_assert!(id <= l.max_id() && l.check_id(id) == Ok(id));
            prop_assert_eq!(l.is_js_safe(), l.max_id().0 < 1 << 53);
            let p = l.decompose(id);
            prop_assert_eq!((p.timestamp, p.worker, p.sequence), (t, w, s));
            prop_assert_eq!(p.region << l.node_bits() | p.node, w);
            prop_assert_eq!(p.unix_ms, l.epoch_ms() + t);
        }

        #[test]
        fn order_of_ids_is_order_of_fields(l in layouts(), a in any::<(u64, u64, u64)>(), b in any::<(u64, u64, u64)>()) {
            let f = |(t, w, s): (u64, u64, u64)| (t & l.max_timestamp(), w & l.max_worker(), s & l.max_sequence());
            let (a, b) = (f(a), f(b));
            let ia = l.compose(a.0, a.1, a.2).unwrap();
            let ib = l.compose(b.0, b.1, b.2).unwrap();
            prop_assert_eq!(ia.cmp(&ib), a.cmp(&b));
        }
    }
}

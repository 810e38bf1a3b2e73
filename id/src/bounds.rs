//! Time bounds for range queries: the smallest and the largest ID a layout can hold for a
//! Unix millisecond, and the half-open ID range `[lo, hi)` of a time interval `[from, to)`.
//!
//! IDs sort by time first (the timestamp is the top field), so every ID issued at a time in
//! `[from, to)`, by any worker with any sequence, satisfies `lo <= id < hi`, and no ID issued
//! outside it does:
//!
//! ```text
//! lo = (from - epoch) << (worker_bits + sequence_bits)      worker 0, sequence 0
//! hi = (to   - epoch) << (worker_bits + sequence_bits)      the first ID of `to`
//! ```
//!
//! The timestamp counts milliseconds since the layout's epoch; region bits are the top bits of
//! the worker field, so the bounds cover every region. A time before the epoch or after the
//! layout's last millisecond ([`Layout::last_unix_ms`]) has no IDs and is an error
//! ([`TimeError`]), as is an empty interval. `to` may be at most the last millisecond, so `hi`
//! always fits a signed 64-bit integer (a SQL `BIGINT`); the IDs of the last millisecond
//! itself end at [`Layout::max_id_at`] of it.
//!
//! ```
//! use idgen_id::{Id, Layout};
//!
//! let layout = Layout::default(); // epoch 2026-01-01T00:00:00Z, 41 / 10 / 12 bits
//! let from = layout.epoch_ms() + 1_000;
//! let b = layout.bounds(from, from + 2)?;
//! assert_eq!((b.lo, b.hi), (Id(1_000 << 22), Id(1_002 << 22)));
//! assert_eq!(b.last(), Id((1_002 << 22) - 1));
//! assert_eq!(layout.min_id_at(from)?, b.lo);
//! assert_eq!(layout.max_id_at(from + 1)?, b.last());
//! assert!(layout.min_id_at(layout.epoch_ms() - 1).is_err());
//! # Ok::<(), idgen_id::TimeError>(())
//! ```

use std::fmt;

use crate::{Id, Layout};

/// Why a time or an interval has no IDs in a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeError {
    /// The time is before the layout's epoch.
    BeforeEpoch {
        /// The time, ms since the Unix epoch.
        unix_ms: u64,
        /// The layout's epoch.
        epoch_ms: u64,
    },
    /// The time is after the layout's last millisecond.
    AfterLast {
        /// The time, ms since the Unix epoch.
        unix_ms: u64,
        /// The last Unix millisecond the layout can hold.
        last_ms: u64,
    },
    /// The interval `[from, to)` holds no millisecond: `to <= from`.
    Empty {
        /// Start of the interval (inclusive).
        from_ms: u64,
        /// End of the interval (exclusive).
        to_ms: u64,
    },
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeError::BeforeEpoch { unix_ms, epoch_ms } => write!(
                f,
                "{unix_ms} ms is before the layout's epoch {epoch_ms} ms: no ID has that time"
            ),
            TimeError::AfterLast { unix_ms, last_ms } => write!(
                f,
                "{unix_ms} ms is after the layout's last timestamp {last_ms} ms: no ID has that time"
            ),
            TimeError::Empty { from_ms, to_ms } => write!(
                f,
                "the interval [{from_ms}, {to_ms}) ms is empty: the end must be after the start"
            ),
        }
    }
}

impl std::error::Error for TimeError {}

/// The IDs of a time interval: `lo <= id < hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The smallest ID of the interval's first millisecond (inclusive).
    pub lo: Id,
    /// The smallest ID of the millisecond just after the interval (exclusive).
    pub hi: Id,
}

impl Bounds {
    /// The largest ID of the interval's last millisecond (`hi - 1`; `hi > lo` for every
    /// interval [`Layout::bounds`] accepts, and a hand-made `hi` of 0 gives 0, never a wrap).
    pub const fn last(&self) -> Id {
        Id(self.hi.0.saturating_sub(1))
    }

    /// Whether `id` lies in `[lo, hi)`.
    pub fn contains(&self, id: impl Into<Id>) -> bool {
        let id = id.into();
        self.lo <= id && id < self.hi
    }
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.lo, self.hi)
    }
}

impl Layout {
    /// The last Unix millisecond an ID of this layout can hold (`epoch + 2^timestamp_bits - 1`,
    /// saturating).
    pub const fn last_unix_ms(&self) -> u64 {
        self.epoch_ms().saturating_add(self.max_timestamp())
    }

    /// The timestamp field of `unix_ms`, if the layout can hold it.
    fn timestamp_at(&self, unix_ms: u64) -> Result<u64, TimeError> {
        let Some(t) = self.id_time(unix_ms) else {
            return Err(TimeError::BeforeEpoch {
                unix_ms,
                epoch_ms: self.epoch_ms(),
            });
        };
        if t > self.max_timestamp() {
            return Err(TimeError::AfterLast {
                unix_ms,
                last_ms: self.last_unix_ms(),
            });
        }
        Ok(t)
    }

    /// The smallest ID at `unix_ms`: its timestamp, worker 0 (region 0), sequence 0.
    pub fn min_id_at(&self, unix_ms: u64) -> Result<Id, TimeError> {
        let t = self.timestamp_at(unix_ms)?;
        Ok(Id(t << self.timestamp_shift()))
    }

    /// The largest ID at `unix_ms`: its timestamp, the last worker of the last region, the last
    /// sequence.
    pub fn max_id_at(&self, unix_ms: u64) -> Result<Id, TimeError> {
        let t = self.timestamp_at(unix_ms)?;
        let below = (1u64 << self.timestamp_shift()) - 1;
        Ok(Id((t << self.timestamp_shift()) | below))
    }

    /// The IDs of the interval `[from_ms, to_ms)` (Unix milliseconds): every ID whose time lies
    /// in it, and no other, satisfies `lo <= id < hi`. `from_ms` must be a time of the layout
    /// (at or after the epoch, at most [`Layout::last_unix_ms`]), `to_ms` after `from_ms` and at
    /// most the last millisecond.
    pub fn bounds(&self, from_ms: u64, to_ms: u64) -> Result<Bounds, TimeError> {
        let lo = self.min_id_at(from_ms)?;
        if to_ms <= from_ms {
            return Err(TimeError::Empty { from_ms, to_ms });
        }
        let hi = self.min_id_at(to_ms)?;
        Ok(Bounds { lo, hi })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DEFAULT_EPOCH_MS;
    use proptest::prelude::*;

    #[test]
    fn default_layout_at_the_epoch_and_the_last_millisecond() {
        let l = Layout::default();
        assert_eq!(l.min_id_at(DEFAULT_EPOCH_MS), Ok(Id(0)));
        assert_eq!(l.max_id_at(DEFAULT_EPOCH_MS), Ok(Id((1 << 22) - 1)));
        let last = l.last_unix_ms();
        assert_eq!(last, DEFAULT_EPOCH_MS + (1 << 41) - 1);
        assert_eq!(last + 1, l.end_unix_ms());
        assert_eq!(l.max_id_at(last), Ok(Id(i64::MAX as u64)));
        assert_eq!(l.min_id_at(last), Ok(Id(((1 << 41) - 1) << 22)));
        assert_eq!(
            l.bounds(DEFAULT_EPOCH_MS, last),
            Ok(Bounds {
                lo: Id(0),
                hi: Id(((1 << 41) - 1) << 22)
            })
        );
    }

    #[test]
    fn times_outside_the_layout_are_errors() {
        let l = Layout::default();
        let last = l.last_unix_ms();
        let before = TimeError::BeforeEpoch {
            unix_ms: DEFAULT_EPOCH_MS - 1,
            epoch_ms: DEFAULT_EPOCH_MS,
        };
        assert_eq!(l.min_id_at(DEFAULT_EPOCH_MS - 1), Err(before));
        assert_eq!(l.max_id_at(DEFAULT_EPOCH_MS - 1), Err(before));
        assert_eq!(
            l.bounds(DEFAULT_EPOCH_MS - 1, DEFAULT_EPOCH_MS),
            Err(before)
        );
        assert_eq!(
            l.min_id_at(0),
            Err(TimeError::BeforeEpoch {
                unix_ms: 0,
                epoch_ms: DEFAULT_EPOCH_MS
            })
        );
        let after = TimeError::AfterLast {
            unix_ms: last + 1,
            last_ms: last,
        };
        assert_eq!(l.min_id_at(last + 1), Err(after));
        assert_eq!(l.max_id_at(last + 1), Err(after));
        assert_eq!(l.bounds(last - 1, last + 1), Err(after));
        assert!(matches!(
            l.max_id_at(u64::MAX),
            Err(TimeError::AfterLast { .. })
        ));
        assert_eq!(
            l.bounds(DEFAULT_EPOCH_MS + 5, DEFAULT_EPOCH_MS + 5),
            Err(TimeError::Empty {
                from_ms: DEFAULT_EPOCH_MS + 5,
                to_ms: DEFAULT_EPOCH_MS + 5
            })
        );
        assert!(matches!(
            l.bounds(DEFAULT_EPOCH_MS + 5, DEFAULT_EPOCH_MS + 4),
            Err(TimeError::Empty { .. })
        ));
        let msg = before.to_string();
        assert!(msg.contains("before the layout's epoch"), "{msg}");
        let msg = after.to_string();
        assert!(msg.contains("after the layout's last timestamp"), "{msg}");
    }

    #[test]
    fn an_epoch_near_the_end_of_u64_saturates_and_never_wraps() {
        let l = Layout::new(u64::MAX - 10, 41, 10, 12, 0).unwrap();
        assert_eq!(l.last_unix_ms(), u64::MAX);
        assert_eq!(l.min_id_at(u64::MAX), Ok(Id(10 << 22)));
        assert_eq!(
            l.bounds(u64::MAX - 10, u64::MAX),
            Ok(Bounds {
                lo: Id(0),
                hi: Id(10 << 22)
            })
        );
    }

    #[test]
    fn region_bits_do_not_move_the_bounds() {
        // Region bits are the top of the worker field: the bounds of a time are those of the
        // same widths without regions, and they span every region.
        let plain = Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 0).unwrap();
        let regions = Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 3).unwrap();
        let t = DEFAULT_EPOCH_MS + 123_456;
        assert_eq!(plain.bounds(t, t + 10), regions.bounds(t, t + 10));
        let b = regions.bounds(t, t + 1).unwrap();
        let top = regions
            .worker_id(7, regions.workers_per_region() - 1)
            .unwrap();
        assert!(b.contains(
            regions
                .compose(123_456, top, regions.max_sequence())
                .unwrap()
        ));
        assert!(b.contains(regions.compose(123_456, 0, 0).unwrap()));
        assert_eq!(b.last(), regions.max_id_at(t).unwrap());
    }

    #[test]
    fn layouts_the_wire_allows_with_zero_width_fields() {
        // Only one timestamp: the epoch.
        let l = Layout::announced(1000, 0, 51, 12, 0).unwrap();
        assert_eq!(l.last_unix_ms(), 1000);
        assert_eq!(l.min_id_at(1000), Ok(Id(0)));
        assert_eq!(l.max_id_at(1000), Ok(Id(i64::MAX as u64)));
        assert!(matches!(
            l.bounds(1000, 1001),
            Err(TimeError::AfterLast { .. })
        ));
        // No worker or sequence field: one ID per millisecond.
        let l = Layout::announced(1000, 63, 0, 0, 0).unwrap();
        assert_eq!(l.min_id_at(1005), Ok(Id(5)));
        assert_eq!(l.max_id_at(1005), Ok(Id(5)));
        assert_eq!(
            l.bounds(1005, 1007).map(|b| (b.lo, b.last())),
            Ok((Id(5), Id(6)))
        );
    }

    /// An independent check by brute force: in layouts whose worker and sequence fields are
    /// narrow, every raw value of the first timestamps is decomposed, and the IDs whose time
    /// falls in each interval are collected; their smallest and largest are `lo` and `hi - 1`,
    /// and every value in `[lo, hi)` is one of them.
    #[test]
    fn brute_force_over_small_layouts() {
        let epoch = 1_000_000;
        for (worker, sequence, region) in [(1, 1, 0), (2, 3, 1), (4, 4, 2), (0, 5, 0), (5, 0, 0)] {
            let l =
                Layout::announced(epoch, 63 - worker - sequence, worker, sequence, region).unwrap();
            let values = 12u64 << (worker + sequence);
            for from in epoch..epoch + 10 {
                for to in from + 1..=epoch + 10 {
                    let inside: Vec<u64> = (0..values)
                        .filter(|&v| (from..to).contains(&l.decompose(v).unix_ms))
                        .collect();
                    let b = l.bounds(from, to).unwrap();
                    assert_eq!(b.lo.0, *inside.first().unwrap(), "{l} [{from}, {to})");
                    assert_eq!(b.last().0, *inside.last().unwrap(), "{l} [{from}, {to})");
                    assert_eq!(inside.len() as u64, b.hi.0 - b.lo.0, "{l} [{from}, {to})");
                }
                let at: Vec<u64> = (0..values)
                    .filter(|&v| l.decompose(v).unix_ms == from)
                    .collect();
                assert_eq!(l.min_id_at(from).unwrap().0, at[0]);
                assert_eq!(l.max_id_at(from).unwrap().0, *at.last().unwrap());
            }
        }
    }

    /// Every layout the wire allows, zero-width fields and widths below 63 bits included, with
    /// epochs near both ends.
    fn layouts() -> impl Strategy<Value = Layout> {
        (
            0u8..=63,
            0u8..=63,
            prop_oneof![0u64..=DEFAULT_EPOCH_MS, any::<u64>()],
        )
            .prop_filter("widths fit in 63 bits", |(t, w, _)| t + w <= 63)
            .prop_flat_map(|(t, w, epoch)| (Just((t, w, epoch)), 0..=w, 0..=63 - t - w))
            .prop_map(|((t, w, epoch), r, s)| Layout::announced(epoch, t, w, s, r).unwrap())
    }

    /// A layout, an interval of it and a time: the time sometimes inside, sometimes just
    /// outside, sometimes anywhere.
    fn cases() -> impl Strategy<Value = (Layout, u64, u64, u64)> {
        layouts()
            .prop_flat_map(|l| {
                let span = l.last_unix_ms() - l.epoch_ms();
                (Just(l), 0..=span, 0..=span)
            })
            .prop_filter("a non-empty interval", |(_, a, b)| a != b)
            .prop_flat_map(|(l, a, b)| {
                let (from, to) = (l.epoch_ms() + a.min(b), l.epoch_ms() + a.max(b));
                let time =
                    prop_oneof![from..to, Just(from.wrapping_sub(1)), Just(to), any::<u64>(),];
                (Just(l), Just(from), Just(to), time)
            })
    }

    proptest! {
        /// An ID of any worker and sequence lies in the bounds exactly when its time lies in
        /// the interval.
        #[test]
        fn an_id_is_in_the_bounds_iff_its_time_is_in_the_interval(
            (l, from, to, time) in cases(), w in any::<u64>(), s in any::<u64>(),
        ) {
            let b = l.bounds(from, to).unwrap();
            prop_assert!(b.lo < b.hi && b.hi <= l.max_id());
            let (w, s) = (w & l.max_worker(), s & l.max_sequence());
            match l.id_time(time).filter(|t| *t <= l.max_timestamp()) {
                Some(t) => {
                    let id = l.compose(t, w, s).unwrap();
                    prop_assert_eq!(b.contains(id), (from..to).contains(&time));
                    // And the extremes of the time bound every ID of it.
                    prop_assert!(l.min_id_at(time).unwrap() <= id);
                    prop_assert!(id <= l.max_id_at(time).unwrap());
                    prop_assert_eq!(l.decompose(l.min_id_at(time).unwrap()).unix_ms, time);
                    prop_assert_eq!(l.decompose(l.max_id_at(time).unwrap()).unix_ms, time);
                }
                None => {
                    prop_assert!(l.min_id_at(time).is_err());
                    prop_assert!(l.max_id_at(time).is_err());
                }
            }
        }

        /// The bounds are tight: `lo` is an ID of `from`, `hi - 1` an ID of `to - 1`.
        #[test]
        fn the_bounds_are_ids_of_the_first_and_last_millisecond((l, from, to, _) in cases()) {
            let b = l.bounds(from, to).unwrap();
            prop_assert_eq!(b.lo, l.min_id_at(from).unwrap());
            prop_assert_eq!(b.last(), l.max_id_at(to - 1).unwrap());
            prop_assert_eq!(l.decompose(b.lo).unix_ms, from);
            prop_assert_eq!(l.decompose(b.last()).unix_ms, to - 1);
            prop_assert_eq!(l.decompose(b.hi).unix_ms, to);
        }

        /// Any time: an ID, or a clear error, never a panic.
        #[test]
        fn any_times_give_bounds_or_an_error(l in layouts(), from in any::<u64>(), to in any::<u64>()) {
            match l.bounds(from, to) {
                Ok(b) => prop_assert!(b.lo < b.hi && from < to && to <= l.last_unix_ms()),
                Err(TimeError::BeforeEpoch { unix_ms, .. }) => prop_assert!(unix_ms < l.epoch_ms()),
                Err(TimeError::AfterLast { unix_ms, .. }) => prop_assert!(unix_ms > l.last_unix_ms()),
                Err(TimeError::Empty { .. }) => prop_assert!(to <= from),
            }
        }
    }
}

//! Layout generations: the layouts a cluster has used over its life, each from its switch time
//! on, ordered so that every ID of a later generation is greater than every ID of an earlier
//! one (`ORDER BY id` and range bounds keep working across a switch).
//!
//! Generation 0 is the layout a cluster was created with. A successor (generation `g + 1`) is
//! scheduled with a switch time `S` (Unix ms): generation `g` issues only timestamps before
//! `S` (in its own ID time), generation `g + 1` only from `S` on (in its ID time). Its first
//! ID, `first_id = (S − epoch_g) << (worker_g + sequence_g)`, is above every ID generation `g`
//! can issue before the switch, and the successor's epoch must be early enough that its
//! smallest ID at `S` is at or above `first_id`: [`successor_epoch`] is the latest such epoch
//! (the longest lifetime). The generation of an ID is the one with the largest `first_id` at
//! or below it.
//!
//! Every generation of a cluster has the same ID width (timestamp + worker + sequence bits),
//! so masking, the JavaScript-safe bound and every client's integer type stay what they were.
//! Because later IDs must be greater, a successor can only use the part of the ID space above
//! `first_id`: rebalancing the widths (say one worker bit moved to the timestamp) early in a
//! layout's life gains the most; near the end of it, little is left to gain (see
//! [`Plan`]).
//!
//! ```
//! use idgen_id::{Generations, Layout};
//!
//! let g0 = Layout::default(); // 41/10/12, epoch 2026-01-01
//! let switch = g0.epoch_ms() + 1_000_000;
//! let g1 = Layout::new(idgen_id::successor_epoch(&g0, switch, 9, 12).unwrap(), 42, 9, 12, 0).unwrap();
//! let gens = Generations::new(g0).with_successor(g1, switch).unwrap();
//! let last_old = g0.compose(999_999, 1023, 4095).unwrap();
//! let first_new = g1.compose(switch - g1.epoch_ms(), 0, 0).unwrap();
//! assert!(last_old < first_new);
//! assert_eq!(gens.of_id(last_old).unwrap().index, 0);
//! assert_eq!(gens.of_id(first_new).unwrap().index, 1);
//! ```

use std::fmt;

use crate::{Id, Layout, LayoutError, Parts};

/// One layout generation of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation {
    /// 0 for the layout the cluster was created with, then 1, 2, ...
    pub index: u32,
    /// The layout its IDs are made with.
    pub layout: Layout,
    /// When the generation starts (Unix ms); `None` for generation 0.
    pub switch_unix_ms: Option<u64>,
    /// Its smallest possible ID: every ID of the generation is at or above it, and below the
    /// next generation's (0 for generation 0).
    pub first_id: u64,
}

impl Generation {
    /// The first timestamp (the layout's ID time, ms) the generation may issue: 0 for
    /// generation 0, the switch time in its ID time after that.
    pub fn first_timestamp(&self) -> u64 {
        self.switch_unix_ms
            .map_or(0, |s| s.saturating_sub(self.layout.epoch_ms()))
    }
}

/// Why a successor cannot be scheduled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError(pub String);

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScheduleError {}

/// The layout generations of a cluster, generation 0 first (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generations {
    all: Vec<Generation>,
}

/// The first ID a successor switching at `switch_unix_ms` may issue after `prev`: the
/// smallest ID of `prev`'s timestamp at the switch. `None` if the switch is before `prev`'s
/// epoch or past its range.
pub fn first_id_after(prev: &Layout, switch_unix_ms: u64) -> Option<u64> {
    let ts = prev.id_time(switch_unix_ms)?;
    prev.compose(ts, 0, 0).ok().map(|id| id.0)
}

/// The latest epoch a successor of `prev` with `worker_bits` and `sequence_bits`, switching at
/// `switch_unix_ms`, can have: its timestamp at the switch is the smallest whose IDs are at or
/// above [`first_id_after`]. `None` if the switch is not inside `prev`'s range.
pub fn successor_epoch(
    prev: &Layout,
    switch_unix_ms: u64,
    worker_bits: u8,
    sequence_bits: u8,
) -> Option<u64> {
    let first = first_id_after(prev, switch_unix_ms)?;
    let shift = u32::from(worker_bits) + u32::from(sequence_bits);
    if shift >= 63 {
        return None;
    }
    let ts = first.div_ceil(1u64 << shift);
    switch_unix_ms.checked_sub(ts)
}

impl Generations {
    /// A cluster that has only ever had `layout`.
    pub fn new(layout: Layout) -> Self {
        Generations {
            all: vec![Generation {
                index: 0,
                layout,
                switch_unix_ms: None,
                first_id: 0,
            }],
        }
    }

    /// These generations followed by `layout` from `switch_unix_ms` on, if it can follow the
    /// newest: a later switch inside the newest layout's range, the same ID width, and an
    /// epoch early enough that its IDs at the switch are at or above the newest's at the
    /// switch, with time left after it.
    pub fn with_successor(
        mut self,
        layout: Layout,
        switch_unix_ms: u64,
    ) -> Result<Self, ScheduleError> {
        let prev = *self.newest();
        let err = |m: String| Err(ScheduleError(m));
        if let Some(s) = prev.switch_unix_ms.filter(|&s| switch_unix_ms <= s) {
            return err(format!(
                "the switch at {switch_unix_ms} ms is not after generation {}'s switch at {s} ms",
                prev.index
            ));
        }
        if layout.id_bits() != prev.layout.id_bits() {
            return err(format!(
                "a successor keeps the ID width: generation {} has {}-bit IDs, the successor {}-bit (a different width is a new cluster: see `idgen migrate`)",
                prev.index,
                prev.layout.id_bits(),
                layout.id_bits()
            ));
        }
        if switch_unix_ms < prev.layout.epoch_ms()
            || switch_unix_ms.saturating_add(1) >= prev.layout.end_unix_ms()
        {
            return err(format!(
                "the switch at {switch_unix_ms} ms is outside generation {}'s range ({} to {} ms)",
                prev.index,
                prev.layout.epoch_ms(),
                prev.layout.end_unix_ms()
            ));
        }
        if prev.first_timestamp() > 0
            && switch_unix_ms.saturating_sub(prev.layout.epoch_ms()) <= prev.first_timestamp()
        {
            return err(format!(
                "generation {} would issue nothing before the switch",
                prev.index
            ));
        }
        let Some(first_id) = first_id_after(&prev.layout, switch_unix_ms) else {
            return err(format!(
                "the switch at {switch_unix_ms} ms is outside generation {}'s range",
                prev.index
            ));
        };
        let Some(ts) = layout.id_time(switch_unix_ms) else {
            return err(format!(
                "the successor's epoch {} ms is after its switch at {switch_unix_ms} ms",
                layout.epoch_ms()
            ));
        };
        if ts >= layout.max_timestamp() {
            return err(format!(
                "the successor's range ends at {} ms, before its switch at {switch_unix_ms} ms",
                layout.end_unix_ms()
            ));
        }
        let smallest = ts << layout.timestamp_shift();
        if smallest < first_id {
            return err(format!(
                "the successor's IDs at the switch (from {smallest}) would be below the IDs generation {} issues before it (up to {}): its epoch must be at or before {} ms",
                prev.index,
                first_id - 1,
                successor_epoch(
                    &prev.layout,
                    switch_unix_ms,
                    layout.worker_bits(),
                    layout.sequence_bits()
                )
                .map_or_else(|| "(none)".to_string(), |e| e.to_string())
            ));
        }
        self.all.push(Generation {
            index: prev.index + 1,
            layout,
            switch_unix_ms: Some(switch_unix_ms),
            first_id,
        });
        Ok(self)
    }

    /// Every generation, generation 0 first.
    pub fn all(&self) -> &[Generation] {
        &self.all
    }

    /// Generation 0: the layout the cluster was created with.
    pub fn base(&self) -> &Generation {
        &self.all[0]
    }

    /// The generation scheduled last (which may not have started yet).
    pub fn newest(&self) -> &Generation {
        self.all.last().unwrap_or(&self.all[0])
    }

    /// Generation `index`, if there is one.
    pub fn get(&self, index: u32) -> Option<&Generation> {
        self.all.get(index as usize)
    }

    /// The generation in effect at `unix_ms`: the last one whose switch is at or before it.
    pub fn at(&self, unix_ms: u64) -> &Generation {
        self.all
            .iter()
            .rev()
            .find(|g| g.switch_unix_ms.is_none_or(|s| s <= unix_ms))
            .unwrap_or(&self.all[0])
    }

    /// The generation after `index`, if one is scheduled.
    pub fn after(&self, index: u32) -> Option<&Generation> {
        self.get(index.checked_add(1)?)
    }

    /// The last timestamp (in generation `index`'s ID time) it may issue: the one before its
    /// successor's switch, `None` without a successor.
    pub fn last_timestamp(&self, index: u32) -> Option<u64> {
        let g = self.get(index)?;
        let next = self.after(index)?;
        let s = next.switch_unix_ms?;
        Some(s.saturating_sub(g.layout.epoch_ms()).saturating_sub(1))
    }

    /// The generation `id` belongs to: the one with the largest `first_id` at or below it.
    /// An ID at or above `2^W` (the cluster's width) belongs to none.
    pub fn of_id(&self, id: impl Into<Id>) -> Result<&Generation, LayoutError> {
        let id = self.all[0].layout.check_id(id)?;
        Ok(self
            .all
            .iter()
            .rev()
            .find(|g| g.first_id <= id.0)
            .unwrap_or(&self.all[0]))
    }

    /// `id`'s generation and its fields under that generation's layout.
    pub fn decompose(&self, id: impl Into<Id>) -> Result<(&Generation, Parts), LayoutError> {
        let id = id.into();
        let g = self.of_id(id)?;
        Ok((g, g.layout.decompose(id)))
    }
}

/// What scheduling a successor means, as `idgen layout plan` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The newest generation now.
    pub current: Generation,
    /// The successor as it would be scheduled.
    pub successor: Generation,
    /// The last ID the current generation can issue before the switch.
    pub last_id_before: u64,
    /// How long the current layout would have lasted without the switch (ms from the switch).
    pub current_left_ms: u64,
    /// How long the successor lasts from the switch (ms).
    pub successor_left_ms: u64,
}

impl Generations {
    /// The plan for scheduling `layout` at `switch_unix_ms` after the newest generation.
    pub fn plan(&self, layout: Layout, switch_unix_ms: u64) -> Result<Plan, ScheduleError> {
        let current = *self.newest();
        let next = self.clone().with_successor(layout, switch_unix_ms)?;
        let successor = *next.newest();
        Ok(Plan {
            current,
            successor,
            last_id_before: successor.first_id - 1,
            current_left_ms: current.layout.end_unix_ms().saturating_sub(switch_unix_ms),
            successor_left_ms: layout.end_unix_ms().saturating_sub(switch_unix_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = crate::DEFAULT_EPOCH_MS + 86_400_000;

    fn two() -> (Layout, Layout, Generations) {
        let g0 = Layout::default();
        let e = successor_epoch(&g0, S, 9, 12).unwrap();
        let g1 = Layout::new(e, 42, 9, 12, 0).unwrap();
        let gens = Generations::new(g0).with_successor(g1, S).unwrap();
        (g0, g1, gens)
    }

    #[test]
    fn every_id_after_the_switch_is_above_every_id_before_it() {
        let (g0, g1, gens) = two();
        let last_old = g0
            .compose(S - g0.epoch_ms() - 1, g0.max_worker(), g0.max_sequence())
            .unwrap();
        let first_new = g1.compose(S - g1.epoch_ms(), 0, 0).unwrap();
        assert!(last_old < first_new);
        assert_eq!(gens.all()[1].first_id, last_old.0 + 1);
        assert_eq!(gens.of_id(last_old).unwrap().index, 0);
        assert_eq!(gens.of_id(first_new).unwrap().index, 1);
        assert_eq!(gens.last_timestamp(0), Some(S - g0.epoch_ms() - 1));
        assert_eq!(gens.all()[1].first_timestamp(), S - g1.epoch_ms());
        assert_eq!(gens.at(S - 1).index, 0);
        assert_eq!(gens.at(S).index, 1);
        let (g, parts) = gens.decompose(first_new).unwrap();
        assert_eq!((g.index, parts.unix_ms, parts.worker), (1, S, 0));
    }

    #[test]
    fn a_successor_is_refused_when_its_ids_would_go_back_or_change_width() {
        let g0 = Layout::default();
        let gens = Generations::new(g0);
        // Same epoch, fewer shift bits: its IDs at the switch are far below.
        let late = Layout::new(g0.epoch_ms(), 42, 9, 12, 0).unwrap();
        let e = gens.clone().with_successor(late, S).unwrap_err();
        assert!(e.0.contains("must be at or before"), "{e}");
        let wider = Layout::new(g0.epoch_ms(), 30, 10, 12, 0).unwrap();
        assert!(gens
            .clone()
            .with_successor(wider, S)
            .unwrap_err()
            .0
            .contains("ID width"));
        let (_, g1, two) = two();
        assert!(two.clone().with_successor(g1, S).is_err(), "not after");
        assert!(gens.with_successor(g1, g0.end_unix_ms()).is_err());
    }

    #[test]
    fn ids_outside_the_width_belong_to_no_generation() {
        let g = Layout::new(crate::DEFAULT_EPOCH_MS, 31, 10, 12, 0).unwrap();
        let gens = Generations::new(g);
        assert!(gens.of_id(1u64 << 53).is_err());
        assert_eq!(gens.of_id((1u64 << 53) - 1).unwrap().index, 0);
    }

    #[test]
    fn the_plan_shows_the_lifetimes() {
        let (g0, g1, gens) = two();
        let plan = Generations::new(g0).plan(g1, S).unwrap();
        assert_eq!(plan.successor, gens.all()[1]);
        assert_eq!(plan.last_id_before, gens.all()[1].first_id - 1);
        assert!(plan.successor_left_ms > plan.current_left_ms);
    }
}

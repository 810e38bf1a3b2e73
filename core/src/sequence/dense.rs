//! A holder's blocks of one dense sequence, sans-IO: values are handed out from memory, the
//! next block is asked for before the current one runs out, and the block size follows
//! demand. The caller does the reservations ([`Sequences::reserve`](super::Sequences::reserve))
//! when [`Blocks::start_fetch`] says so and hands back what it got.
//!
//! ```text
//!   take(n) ──▶ current block ──(used up)──▶ ahead block becomes current
//!                    │ fewer than half a block left, nothing ahead, nothing in flight
//!                    ▼
//!               start_fetch() = Some(size) ──caller reserves──▶ fetched(block) / fetch_failed()
//! ```
//!
//! Values one `Blocks` hands out strictly increase: a block reserved later starts above
//! every block reserved before it (the record's `next` only moves forward), and the ahead
//! block is always reserved after the current one. What a holder loses when it stops is what
//! its two blocks still hold: at most `2 × max_block` values.

use super::Block;

/// How long a block should last at the demand seen: a block used up sooner doubles the next
/// one, a block that lasts more than [`SHRINK_AFTER_MS`] halves it.
pub const TARGET_BLOCK_MS: u64 = 1_000;
/// A block that lasted longer than this halves the next one (fewer values lost on a stop).
pub const SHRINK_AFTER_MS: u64 = 8 * TARGET_BLOCK_MS;
/// The size of a holder's first reservation (at most the sequence's `max_block`).
pub const FIRST_BLOCK: u64 = 16;

/// A reserved block that starts at or below a value this holder already holds: the record's
/// `next` went backwards (an edit by hand, a restored backup).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a block reserved from {first} does not start above {above}, which this holder already had: the record's next went backwards")]
pub struct BlockBehind {
    pub first: u64,
    pub above: u64,
}

/// A block being handed out: its values from `next_index` on are still to be handed out.
#[derive(Clone, Copy, Debug)]
struct Current {
    block: Block,
    next_index: u64,
    since_ms: u64,
}

impl Current {
    fn left(&self) -> u64 {
        self.block.count - self.next_index
    }
}

/// One holder's blocks of one dense sequence.
#[derive(Debug)]
pub struct Blocks {
    current: Option<Current>,
    ahead: Option<Block>,
    /// The size of the next reservation.
    size: u64,
    max_block: u64,
    fetching: bool,
    /// A call waits for more than is held: the next reservation is asked for now, however
    /// much of the current block is left.
    short: bool,
    /// The largest value handed out, asserted below every later one.
    last: Option<u64>,
}

impl Blocks {
    /// A holder with no block yet; blocks hold at most `max_block` values (at least 1).
    pub fn new(max_block: u64) -> Self {
        let max_block = max_block.max(1);
        Blocks {
            current: None,
            ahead: None,
            size: FIRST_BLOCK.min(max_block),
            max_block,
            fetching: false,
            short: false,
            last: None,
        }
    }

    /// Values held and not yet handed out.
    pub fn remaining(&self) -> u64 {
        self.current.map_or(0, |c| c.left()) + self.ahead.map_or(0, |b| b.count)
    }

    /// The size the next reservation asks for.
    pub fn block_size(&self) -> u64 {
        self.size
    }

    /// Hands out up to `want` values into `out`, in increasing order, and answers how many.
    /// Fewer (possibly none) when the blocks run out: the caller fetches (see
    /// [`start_fetch`](Self::start_fetch)) and takes the rest once a block arrived.
    pub fn take(&mut self, want: u64, now_ms: u64, out: &mut Vec<u64>) -> u64 {
        self.size_for(want);
        self.take_held(want, now_ms, out)
    }

    /// [`take`](Self::take) of all `want` values or none, for a call that fits one block
    /// (`want <= max_block`): while fewer are held and no block is ahead, none, and the next
    /// block, sized for them, is asked for at once ([`start_fetch`](Self::start_fetch)); so a
    /// call refused at the sequence's maximum has taken nothing, and the values left go to
    /// smaller calls. With a block ahead that is still too short, what is held is taken
    /// (the current block must be used up before another can be asked for): a gap, if the
    /// call is then refused. How many were taken.
    pub fn take_whole(&mut self, want: u64, now_ms: u64, out: &mut Vec<u64>) -> u64 {
        self.size_for(want);
        if self.remaining() < want && self.ahead.is_none() {
            self.short = true;
            return 0;
        }
        self.take_held(want, now_ms, out)
    }

    /// The sequence's `max_block` as this holder last read it.
    pub fn max_block(&self) -> u64 {
        self.max_block
    }

    /// Demand above what is held: the next block is sized for it.
    fn size_for(&mut self, want: u64) {
        if want > self.remaining() {
            self.size = self.size.max(
                want.min(self.max_block)
                    .next_power_of_two()
                    .min(self.max_block),
            );
        }
    }

    fn take_held(&mut self, want: u64, now_ms: u64, out: &mut Vec<u64>) -> u64 {
        let mut taken = 0;
        while taken < want {
            let cur = match &mut self.current {
                Some(c) if c.left() > 0 => c,
                _ => {
                    if !self.promote(now_ms) {
                        break;
                    }
                    continue;
                }
            };
            let n = (want - taken).min(cur.left());
            for i in cur.next_index..cur.next_index + n {
                let v = cur.block.value(i);
                assert!(
                    self.last.is_none_or(|l| v > l),
                    "a holder's values strictly increase"
                );
                self.last = Some(v);
                out.push(v);
            }
            cur.next_index += n;
            taken += n;
        }
        taken
    }

    /// Makes the ahead block current, if there is one, and sizes the next reservation by how
    /// long the block it replaces lasted.
    fn promote(&mut self, now_ms: u64) -> bool {
        let Some(block) = self.ahead.take() else {
            return false;
        };
        if let Some(old) = self.current {
            let lasted = now_ms.saturating_sub(old.since_ms);
            if lasted < TARGET_BLOCK_MS {
                self.size = (self.size * 2).min(self.max_block);
            } else if lasted > SHRINK_AFTER_MS {
                self.size = (self.size / 2).max(1);
            }
        }
        self.current = Some(Current {
            block,
            next_index: 0,
            since_ms: now_ms,
        });
        true
    }

    /// Whether to reserve a block now, and of how many values: when fewer than half a block
    /// is left, nothing is ahead and no reservation is in flight. The caller then reserves
    /// and answers with [`fetched`](Self::fetched) or [`fetch_failed`](Self::fetch_failed).
    pub fn start_fetch(&mut self) -> Option<u64> {
        let low = self.short || self.current.map_or(0, |c| c.left()) < self.size.div_ceil(2);
        if self.fetching || self.ahead.is_some() || !low {
            return None;
        }
        self.fetching = true;
        self.short = false;
        Some(self.size)
    }

    /// Whether a reservation is in flight.
    pub fn is_fetching(&self) -> bool {
        self.fetching
    }

    /// A reservation committed: `block` is handed out after what is held. `max_block` is the
    /// sequence's bound as the reservation read it (an operator may have changed it). A block
    /// that does not start above every value held or handed out came from a record that went
    /// backwards: it is refused (and handed out never), and the caller reports the record.
    pub fn fetched(
        &mut self,
        block: Block,
        max_block: u64,
        now_ms: u64,
    ) -> Result<(), BlockBehind> {
        self.fetching = false;
        self.max_block = max_block.max(1);
        self.size = self.size.min(self.max_block);
        if block.count == 0 {
            return Ok(());
        }
        assert!(self.ahead.is_none(), "one reservation in flight at a time");
        let above = self
            .current
            .map(|c| c.block.last())
            .into_iter()
            .chain(self.last)
            .max();
        if let Some(above) = above.filter(|&a| block.first <= a) {
            return Err(BlockBehind {
                first: block.first,
                above,
            });
        }
        self.ahead = Some(block);
        if self.current.is_none_or(|c| c.left() == 0) {
            self.promote(now_ms);
        }
        Ok(())
    }

    /// A reservation failed (or its outcome is unknown: its values are never handed out).
    pub fn fetch_failed(&mut self) {
        self.fetching = false;
    }

    /// Forgets every value held (the sequence was dropped): none of them is handed out.
    pub fn discard(&mut self) {
        self.current = None;
        self.ahead = None;
    }
}

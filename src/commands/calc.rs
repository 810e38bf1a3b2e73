//! `idgen layout`: a calculator for choosing a cluster's bit layout before its first start.
//!
//! From the size of a deployment (nodes per region, shards per node, regions, the peak rate a
//! region must sustain and how many years the IDs must last) it works out the minimum width of
//! each field, then offers a few layouts that satisfy all of them and marks one.
//!
//! The arithmetic, field by field (`H` is the headroom factor, 2 by default):
//!
//! - **region bits** `r = ⌈log2 R⌉` (0 for one region: a global pool);
//! - **node bits** `n = ⌈log2 (N · S · k · H)⌉`: every shard of every node holds `k` worker
//!   IDs, and `H` covers IDs that stay reserved after a node goes away (a crashed or replaced
//!   node's lease is held until its TTL and the safety period pass, so during a rolling restart
//!   old and new holders can overlap; `H = 2` lets every node be replaced at once);
//! - **worker bits** `w = r + n` (region bits are the top of the worker field);
//! - **sequence bits**: the smallest `s` with `k · 2^s ≥ H · X / (N · S) / 1000`, i.e. one
//!   shard's `k · 2^s` IDs per millisecond covers its share of the peak rate with the same
//!   headroom (connections are not spread perfectly evenly, and while a node restarts the
//!   others carry its share);
//! - **timestamp bits** `t = ⌈log2 (Y years in ms)⌉`, a year being 365.25 days.
//!
//! The three must fit `t + w + s ≤ W`, the ID width: 63 bits (below the sign bit) unless
//! `--bits` asks for a narrower layout. The bits left over can go to any field; the candidates
//! shown are the layout closest to idgen's default 41/10/12 (recommended: when the default
//! fits, it is the default), and the three extremes (every spare bit to the timestamp, to the
//! worker field, to the sequence).
//!
//! A layout at most 53 bits wide is *JavaScript-safe*: every ID is at most `2^53 - 1`, an exact
//! JavaScript number. When `W` is wider, the report also offers the JavaScript-safe layouts
//! that meet the same needs (with their lifetime and IDs per second per worker and per
//! cluster), or says how far over 53 bits the needs are.

use std::fmt::Write as _;

use clap::Args;
use idgen_id::{
    DEFAULT_EPOCH_MS, DEFAULT_SEQUENCE_BITS, DEFAULT_TIMESTAMP_BITS, DEFAULT_WORKER_BITS,
    JS_SAFE_BITS, MIN_ID_BITS, PAYLOAD_BITS,
};

use crate::config::parse_epoch;

/// Milliseconds in a year of 365.25 days.
pub const MS_PER_YEAR: f64 = 365.25 * 86_400_000.0;

/// Flags of `idgen layout`.
#[derive(Args, Debug, Clone)]
pub struct LayoutCalcArgs {
    /// Nodes per region (the largest region, if they differ).
    #[arg(long)]
    pub nodes: u64,
    /// Regions that share the ID space (1: no region bits, one global pool).
    #[arg(long, default_value_t = 1)]
    pub regions: u64,
    /// Peak IDs per second one region must sustain (accepts k, M, G suffixes: 10M).
    #[arg(long, value_parser = parse_rate)]
    pub peak_rate: f64,
    /// Shards (cores) per node.
    #[arg(long, default_value_t = 2)]
    pub shards: u64,
    /// Worker IDs each shard leases (`--workers-per-shard` of `idgen serve`).
    #[arg(long, default_value_t = 1)]
    pub workers_per_shard: u64,
    /// How many years from the epoch the IDs must last.
    #[arg(long, default_value_t = 50.0)]
    pub years: f64,
    /// Headroom on worker IDs and on the per-shard rate (see docs/OPERATIONS.md).
    #[arg(long, default_value_t = 2.0)]
    pub headroom: f64,
    /// The epoch the end dates are counted from: RFC 3339 or ms since the Unix epoch
    /// [default: 2026-01-01T00:00:00Z].
    #[arg(long)]
    pub epoch: Option<String>,
    /// The ID width the layouts must fit, 32 to 63 bits (53: JavaScript-safe, every ID an
    /// exact JavaScript number).
    #[arg(long, default_value_t = PAYLOAD_BITS)]
    pub bits: u8,
}

/// Parses a rate like `10000000`, `10M`, `2.5k`, `1G`.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        Some((i, 'g' | 'G')) => (&t[..i], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{t:?} is not a rate: write IDs per second, e.g. 10000000 or 10M"))?;
    let v = v * mult;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{t:?}: the peak rate must be above 0"));
    }
    Ok(v)
}

/// The smallest `b` with `2^b ≥ x` (0 for `x ≤ 1`).
pub fn ceil_log2(x: f64) -> u32 {
    let mut b = 0u32;
    while 2f64.powi(b as i32) < x {
        b += 1;
    }
    b
}

/// What a deployment needs, validated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Needs {
    pub nodes: u64,
    pub regions: u64,
    pub peak_rate: f64,
    pub shards: u64,
    pub workers_per_shard: u64,
    pub years: f64,
    pub headroom: f64,
    pub epoch_ms: u64,
    /// The ID width the layouts must fit (`MIN_ID_BITS ..= 63`).
    pub bits: u8,
}

/// The minimum width of each field, and the arithmetic behind it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Minimums {
    pub region_bits: u8,
    pub node_bits: u8,
    /// Region plus node bits, at least 1 (the layout has no zero-width fields).
    pub worker_bits: u8,
    pub sequence_bits: u8,
    pub timestamp_bits: u8,
    /// Worker IDs one region needs: nodes × shards × workers per shard × headroom.
    pub worker_ids_needed: f64,
    /// IDs per second one shard must issue at the peak (no headroom).
    pub per_shard_rate: f64,
    /// IDs per millisecond one shard must be able to issue (with headroom).
    pub per_shard_ms_needed: f64,
    /// The requested lifetime in ms.
    pub lifetime_ms: f64,
}

impl Minimums {
    pub fn total(&self) -> u32 {
        u32::from(self.timestamp_bits) + u32::from(self.worker_bits) + u32::from(self.sequence_bits)
    }
}

/// One layout that satisfies the needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub label: &'static str,
    pub timestamp_bits: u8,
    pub worker_bits: u8,
    pub sequence_bits: u8,
    pub region_bits: u8,
    pub recommended: bool,
}

impl Candidate {
    pub fn node_bits(&self) -> u8 {
        self.worker_bits - self.region_bits
    }
    /// Worker IDs in one region.
    pub fn worker_ids_per_region(&self) -> u64 {
        1u64 << self.node_bits()
    }
    /// Nodes one region can hold with the given shards, workers per shard and headroom.
    pub fn max_nodes(&self, n: &Needs) -> u64 {
        let per_node = n.shards as f64 * n.workers_per_shard as f64 * n.headroom;
        (self.worker_ids_per_region() as f64 / per_node).floor() as u64
    }
    /// IDs one shard can issue per second: `k · 2^s · 1000`.
    pub fn per_shard_capacity(&self, n: &Needs) -> f64 {
        n.workers_per_shard as f64 * 2f64.powi(i32::from(self.sequence_bits)) * 1000.0
    }
    /// The layout's ID width: every ID is below `2^bits`.
    pub fn bits(&self) -> u8 {
        self.timestamp_bits + self.worker_bits + self.sequence_bits
    }
    /// IDs one worker ID can issue per second: `2^s · 1000`.
    pub fn per_worker_capacity(&self) -> f64 {
        2f64.powi(i32::from(self.sequence_bits)) * 1000.0
    }
    /// IDs the whole cluster can issue per second, every worker ID of every region busy:
    /// `2^(w + s) · 1000`.
    pub fn cluster_capacity(&self) -> f64 {
        2f64.powi(i32::from(self.worker_bits) + i32::from(self.sequence_bits)) * 1000.0
    }
    /// Years the timestamp field lasts from the epoch.
    pub fn years(&self) -> f64 {
        2f64.powi(i32::from(self.timestamp_bits)) / MS_PER_YEAR
    }
    /// The Unix ms at which the timestamp field runs out.
    pub fn end_unix_ms(&self, epoch_ms: u64) -> u128 {
        u128::from(epoch_ms) + (1u128 << self.timestamp_bits)
    }
}

/// Why the calculator refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CalcError(pub String);

impl LayoutCalcArgs {
    pub fn needs(&self) -> Result<Needs, CalcError> {
        let bad = |m: String| Err(CalcError(m));
        if self.nodes == 0 {
            return bad("--nodes must be at least 1".into());
        }
        if self.regions == 0 {
            return bad("--regions must be at least 1".into());
        }
        if self.shards == 0 || self.shards > 1024 {
            return bad(format!(
                "--shards {} is not in 1..=1024 (idgen serve's limit)",
                self.shards
            ));
        }
        if self.workers_per_shard == 0 {
            return bad("--workers-per-shard must be at least 1".into());
        }
        if !self.years.is_finite() || self.years <= 0.0 {
            return bad(format!("--years {} must be above 0", self.years));
        }
        if !self.headroom.is_finite() || self.headroom < 1.0 {
            return bad(format!(
                "--headroom {} must be at least 1 (1 = no headroom)",
                self.headroom
            ));
        }
        if !self.peak_rate.is_finite() || self.peak_rate <= 0.0 {
            return bad("--peak-rate must be above 0".into());
        }
        if !(MIN_ID_BITS..=PAYLOAD_BITS).contains(&self.bits) {
            return bad(format!(
                "--bits {} is not in {MIN_ID_BITS}..={PAYLOAD_BITS} (an ID is at most 63 bits \
                 below the sign bit, and at least {MIN_ID_BITS}; {JS_SAFE_BITS} is JavaScript-safe)",
                self.bits
            ));
        }
        let epoch_ms = match &self.epoch {
            Some(e) => parse_epoch(e).map_err(|e| CalcError(e.0))?,
            None => DEFAULT_EPOCH_MS,
        };
        Ok(Needs {
            nodes: self.nodes,
            regions: self.regions,
            peak_rate: self.peak_rate,
            shards: self.shards,
            workers_per_shard: self.workers_per_shard,
            years: self.years,
            headroom: self.headroom,
            epoch_ms,
            bits: self.bits,
        })
    }
}

/// The minimum width of each field.
pub fn minimums(n: &Needs) -> Minimums {
    let region_bits = ceil_log2(n.regions as f64);
    let worker_ids_needed =
        n.nodes as f64 * n.shards as f64 * n.workers_per_shard as f64 * n.headroom;
    let node_bits = ceil_log2(worker_ids_needed);
    let per_shard_rate = n.peak_rate / (n.nodes as f64 * n.shards as f64);
    let per_shard_ms_needed = per_shard_rate * n.headroom / 1000.0;
    let sequence_bits = ceil_log2(per_shard_ms_needed / n.workers_per_shard as f64).max(1);
    let lifetime_ms = n.years * MS_PER_YEAR;
    let timestamp_bits = ceil_log2(lifetime_ms).max(1);
    // Every width is at most ~64 for any finite input that can fit; clamp so the sum is
    // meaningful and the error message can say how far over it is.
    let clamp = |b: u32| b.min(200) as u8;
    Minimums {
        region_bits: clamp(region_bits),
        node_bits: clamp(node_bits),
        worker_bits: clamp((region_bits + node_bits).max(1)),
        sequence_bits: clamp(sequence_bits),
        timestamp_bits: clamp(timestamp_bits),
        worker_ids_needed,
        per_shard_rate,
        per_shard_ms_needed,
        lifetime_ms,
    }
}

/// The layouts that fit, the recommended one first; an error if none does.
pub fn candidates(n: &Needs) -> Result<Vec<Candidate>, CalcError> {
    let m = minimums(n);
    let total = m.total();
    let payload = u32::from(n.bits);
    if total > payload {
        let room = if n.bits == PAYLOAD_BITS {
            format!("an ID has {payload} below the sign bit")
        } else {
            format!("--bits {payload} allows only {payload}")
        };
        return Err(CalcError(format!(
            "no layout fits: the minimums add up to {total} bits but {room} ({} short): timestamp {} bits for {} years + worker {} bits ({} region + {} \
             node for {:.0} worker IDs per region) + sequence {} bits ({:.1} IDs/ms per shard). \
             Ask for fewer --years, a lower --headroom, fewer --regions, or fewer shards per \
             region (bigger shards cost sequence bits, more shards cost worker bits)",
            total - payload,
            m.timestamp_bits,
            n.years,
            m.worker_bits,
            m.region_bits,
            m.node_bits,
            m.worker_ids_needed,
            m.sequence_bits,
            m.per_shard_ms_needed,
        )));
    }
    let spare = (payload - total) as u8;
    let (t0, w0, s0) = (m.timestamp_bits, m.worker_bits, m.sequence_bits);
    let r = m.region_bits;
    let mk = |label, t, w, s| Candidate {
        label,
        timestamp_bits: t,
        worker_bits: w,
        sequence_bits: s,
        region_bits: r,
        recommended: false,
    };

    // Closest to the default 41/10/12 (L1 distance); ties go to the longer timestamp.
    let mut best: Option<(u32, Candidate)> = None;
    for t in t0..=t0 + spare {
        for w in w0..=w0 + (t0 + spare - t) {
            let s = n.bits - t - w;
            if s < s0 {
                continue;
            }
            let d = u32::from(t.abs_diff(DEFAULT_TIMESTAMP_BITS))
                + u32::from(w.abs_diff(DEFAULT_WORKER_BITS))
                + u32::from(s.abs_diff(DEFAULT_SEQUENCE_BITS));
            if best
                .as_ref()
                .is_none_or(|(bd, b)| d < *bd || (d == *bd && t > b.timestamp_bits))
            {
                best = Some((d, mk("closest to the default", t, w, s)));
            }
        }
    }
    let (distance, mut rec) = best.expect("spare ≥ 0 leaves at least the minimums");
    if distance == 0 {
        rec.label = "idgen's default";
    }
    rec.recommended = true;

    let mut out = vec![rec];
    for c in [
        mk("longest timestamp", t0 + spare, w0, s0),
        mk("most worker IDs", t0, w0 + spare, s0),
        mk("most IDs per ms", t0, w0, s0 + spare),
    ] {
        let same = |o: &Candidate| {
            (o.timestamp_bits, o.worker_bits, o.sequence_bits)
                == (c.timestamp_bits, c.worker_bits, c.sequence_bits)
        };
        if !out.iter().any(same) {
            out.push(c);
        }
    }
    Ok(out)
}

/// A Unix ms as `YYYY-MM-DD` (proleptic Gregorian, UTC), for any year.
pub fn date(unix_ms: u128) -> String {
    let days = (unix_ms / 86_400_000) as i128;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i128::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn rate(x: f64) -> String {
    let (v, unit) = if x >= 1e9 {
        (x / 1e9, "G")
    } else if x >= 1e6 {
        (x / 1e6, "M")
    } else if x >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{unit}")
}

fn years(y: f64) -> String {
    if y >= 10_000.0 {
        format!("{:.0}", y)
    } else {
        format!("{y:.1}")
    }
}

/// The calculator's whole answer, as printed by `idgen layout`.
pub fn report(n: &Needs) -> Result<String, CalcError> {
    let m = minimums(n);
    let cands = candidates(n)?;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "idgen layout: {} node(s) per region × {} shard(s) × {} worker ID(s) per shard, {} region(s), \
         peak {} IDs/s per region, {} years, headroom {}×",
        n.nodes,
        n.shards,
        n.workers_per_shard,
        n.regions,
        rate(n.peak_rate),
        n.years,
        n.headroom
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "Minimum bits per field:");
    let _ = writeln!(
        o,
        "  region     {:>2}  {} region(s) need 2^{} = {} region code(s)",
        m.region_bits,
        n.regions,
        m.region_bits,
        1u128 << m.region_bits
    );
    let _ = writeln!(
        o,
        "  node       {:>2}  {} nodes × {} shards × {} × {} headroom = {} worker IDs per region ≤ 2^{} = {}",
        m.node_bits,
        n.nodes,
        n.shards,
        n.workers_per_shard,
        n.headroom,
        m.worker_ids_needed,
        m.node_bits,
        1u128 << m.node_bits
    );
    let _ = writeln!(o, "  worker     {:>2}  region + node bits", m.worker_bits);
    let _ = writeln!(
        o,
        "  sequence   {:>2}  {} IDs/s ÷ {} shards = {} IDs/s per shard; × {} headroom = {:.2} IDs/ms ≤ {} × 2^{} = {}",
        m.sequence_bits,
        rate(n.peak_rate),
        n.nodes * n.shards,
        rate(m.per_shard_rate),
        n.headroom,
        m.per_shard_ms_needed,
        n.workers_per_shard,
        m.sequence_bits,
        n.workers_per_shard as u128 * (1u128 << m.sequence_bits)
    );
    let _ = writeln!(
        o,
        "  timestamp  {:>2}  {} years = {:.0} ms ≤ 2^{} ms ({} years)",
        m.timestamp_bits,
        n.years,
        m.lifetime_ms,
        m.timestamp_bits,
        years(2f64.powi(i32::from(m.timestamp_bits)) / MS_PER_YEAR)
    );
    let _ = writeln!(
        o,
        "  total      {:>2}  of {}; {} spare",
        m.total(),
        n.bits,
        u32::from(n.bits) - m.total()
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Layouts that fit (timestamp/worker/sequence; worker = region + node), epoch {}:",
        date(u128::from(n.epoch_ms))
    );
    let _ = writeln!(o, "                                 t/w/s region+node workers/region   nodes/region*    IDs/s/shard     years  ends");
    for c in &cands {
        let _ = writeln!(
            o,
            "  {} {:<24} {:>9} {:>11} {:>14} {:>15} {:>14} {:>9}  {}",
            if c.recommended { "→" } else { " " },
            c.label,
            format!("{}/{}/{}", c.timestamp_bits, c.worker_bits, c.sequence_bits),
            format!("{}+{}", c.region_bits, c.node_bits()),
            c.worker_ids_per_region(),
            c.max_nodes(n),
            rate(c.per_shard_capacity(n)),
            years(c.years()),
            date(c.end_unix_ms(n.epoch_ms))
        );
    }
    let _ = writeln!(
        o,
        "  * nodes of {} shard(s) × {} worker ID(s) one region holds with {}× headroom",
        n.shards, n.workers_per_shard, n.headroom
    );
    let rec = &cands[0];
    let _ = writeln!(o);
    let _ = writeln!(o, "Recommended (→): {}. Start every node with:", rec.label);
    let mut flags = format!(
        "  idgen serve --timestamp-bits {} --worker-bits {} --sequence-bits {}",
        rec.timestamp_bits, rec.worker_bits, rec.sequence_bits
    );
    if rec.region_bits > 0 {
        let _ = write!(
            flags,
            " --region-bits {} --region <0..{}>",
            rec.region_bits,
            n.regions - 1
        );
    }
    let _ = write!(
        flags,
        " --shards {} --workers-per-shard {}",
        n.shards, n.workers_per_shard
    );
    if n.epoch_ms != DEFAULT_EPOCH_MS {
        let _ = write!(flags, " --epoch {}", n.epoch_ms);
    }
    let _ = writeln!(o, "{flags}");
    let _ = write!(
        o,
        "The layout is fixed per cluster once the first node starts: choose it before then."
    );
    if n.bits > JS_SAFE_BITS {
        let _ = write!(o, "\n\n{}", js_safe_report(n));
    }
    Ok(o)
}

/// The JavaScript-safe (at most 53-bit) layouts for the same needs: their lifetime and
/// throughput, and the flags of the first; or why none fits.
pub fn js_safe_report(n: &Needs) -> String {
    let js = Needs {
        bits: JS_SAFE_BITS,
        ..*n
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "JavaScript-safe layouts ({JS_SAFE_BITS} bits: every ID ≤ 2^53 - 1 = 9007199254740991, an exact \
         JavaScript number; the bits come out of the lifetime, the worker IDs or the IDs per ms):"
    );
    let cands = match candidates(&js) {
        Ok(c) => c,
        Err(_) => {
            let m = minimums(n);
            let _ = write!(
                o,
                "  none fits: the minimums add up to {} bits, {} over {JS_SAFE_BITS}. Ask for fewer \
                 --years, fewer nodes, shards or --regions, or a lower --peak-rate or --headroom; or \
                 keep a 63-bit layout and read IDs as strings (id_str) in JavaScript",
                m.total(),
                m.total() - u32::from(JS_SAFE_BITS)
            );
            return o;
        }
    };
    let _ = writeln!(o, "                                 t/w/s region+node nodes/region*  IDs/s/worker  IDs/s/cluster     years  ends");
    for c in &cands {
        let _ = writeln!(
            o,
            "  {} {:<24} {:>9} {:>11} {:>13} {:>13} {:>14} {:>9}  {}",
            if c.recommended { "→" } else { " " },
            c.label,
            format!("{}/{}/{}", c.timestamp_bits, c.worker_bits, c.sequence_bits),
            format!("{}+{}", c.region_bits, c.node_bits()),
            c.max_nodes(n),
            rate(c.per_worker_capacity()),
            rate(c.cluster_capacity()),
            years(c.years()),
            date(c.end_unix_ms(n.epoch_ms))
        );
    }
    let rec = &cands[0];
    let mut flags = format!(
        "  idgen serve --timestamp-bits {} --worker-bits {} --sequence-bits {}",
        rec.timestamp_bits, rec.worker_bits, rec.sequence_bits
    );
    if rec.region_bits > 0 {
        let _ = write!(flags, " --region-bits {}", rec.region_bits);
    }
    let _ = write!(
        o,
        "JavaScript-safe (→): {}, {} years to {}. Every node of such a cluster starts with:\n{flags}",
        rec.label,
        years(rec.years()),
        date(rec.end_unix_ms(n.epoch_ms))
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(nodes: u64, regions: u64, rate: f64, shards: u64) -> Needs {
        Needs {
            nodes,
            regions,
            peak_rate: rate,
            shards,
            workers_per_shard: 1,
            years: 50.0,
            headroom: 2.0,
            epoch_ms: DEFAULT_EPOCH_MS,
            bits: 63,
        }
    }

    fn tws(c: &Candidate) -> (u8, u8, u8) {
        (c.timestamp_bits, c.worker_bits, c.sequence_bits)
    }

    #[test]
    fn ceil_log2_by_hand() {
        assert_eq!(ceil_log2(0.5), 0);
        assert_eq!(ceil_log2(1.0), 0);
        assert_eq!(ceil_log2(2.0), 1);
        assert_eq!(ceil_log2(3.0), 2);
        assert_eq!(ceil_log2(256.0), 8);
        assert_eq!(ceil_log2(256.5), 9);
    }

    #[test]
    fn sixty_four_nodes_two_shards_two_regions_ten_million() {
        // By hand: 2 regions → 1 region bit. 64 × 2 × 1 × 2 = 256 worker IDs per region → 8
        // node bits, 9 worker bits. 10,000,000 / (64 × 2) = 78,125 IDs/s per shard; × 2 =
        // 156.25 IDs/ms ≤ 2^8 = 256 → 8 sequence bits. 50 years = 1.578e12 ms; 2^40 = 1.10e12
        // < that ≤ 2^41 = 2.20e12 → 41 timestamp bits. 41 + 9 + 8 = 58: 5 spare.
        let n = needs(64, 2, 10e6, 2);
        let m = minimums(&n);
        assert_eq!(m.region_bits, 1);
        assert_eq!(m.node_bits, 8);
        assert_eq!(m.worker_bits, 9);
        assert_eq!(m.sequence_bits, 8);
        assert_eq!(m.timestamp_bits, 41);
        assert_eq!(m.total(), 58);
        assert_eq!(m.per_shard_rate, 78_125.0);
        assert_eq!(m.per_shard_ms_needed, 156.25);
        let c = candidates(&n).unwrap();
        // The default 41/10/12 satisfies every minimum, so it is recommended.
        assert_eq!(tws(&c[0]), (41, 10, 12));
        assert!(c[0].recommended);
        assert_eq!(c[0].label, "idgen's default");
        // 1 region bit + 9 node bits: 512 worker IDs per region, 512 / (2 × 2) = 128 nodes.
        assert_eq!(c[0].worker_ids_per_region(), 512);
        assert_eq!(c[0].max_nodes(&n), 128);
        // 4096 IDs/ms per shard = 4,096,000 IDs/s.
        assert_eq!(c[0].per_shard_capacity(&n), 4_096_000.0);
        // 2^41 ms = 69.68 years from 2026-01-01: the range ends in September 2095.
        assert!((c[0].years() - 69.68).abs() < 0.01);
        assert_eq!(date(c[0].end_unix_ms(n.epoch_ms)), "2095-09-07");
        // The extremes put all 5 spare bits in one field.
        let rest: Vec<_> = c[1..].iter().map(tws).collect();
        assert_eq!(rest, vec![(46, 9, 8), (41, 14, 8), (41, 9, 13)]);
        assert!(c[1..].iter().all(|c| !c.recommended));
    }

    #[test]
    fn a_rate_heavy_cluster_moves_bits_to_the_sequence() {
        // 3 nodes × 4 shards, one region, 200M IDs/s: 200e6 / 12 = 16.67M/s per shard, × 2 =
        // 33,333 IDs/ms → 2^16 = 65,536 → 16 sequence bits. 3 × 4 × 2 = 24 → 5 node bits; no
        // region bits. 41 + 5 + 16 = 62: 1 spare. Closest to 41/10/12: 41/6/16 (distance
        // 0 + 4 + 4 = 8) beats 41/5/17 and 42/5/16 (10 each).
        let n = needs(3, 1, 200e6, 4);
        let m = minimums(&n);
        assert_eq!(
            (
                m.region_bits,
                m.node_bits,
                m.sequence_bits,
                m.timestamp_bits
            ),
            (0, 5, 16, 41)
        );
        let c = candidates(&n).unwrap();
        assert_eq!(tws(&c[0]), (41, 6, 16));
        assert_eq!(c[0].label, "closest to the default");
        assert_eq!(c[0].max_nodes(&n), 8); // 64 / (4 × 2)
        assert_eq!(c[0].per_shard_capacity(&n), 65_536_000.0);
    }

    #[test]
    fn workers_per_shard_trade_sequence_bits_for_worker_bits() {
        // Same cluster with 4 worker IDs per shard: 33,333 / 4 = 8,333 IDs/ms per worker →
        // 2^14 = 16,384 → 14 sequence bits; 3 × 4 × 4 × 2 = 96 → 7 node bits.
        let mut n = needs(3, 1, 200e6, 4);
        n.workers_per_shard = 4;
        let m = minimums(&n);
        assert_eq!((m.node_bits, m.sequence_bits), (7, 14));
    }

    #[test]
    fn impossible_requests_are_refused_with_the_arithmetic() {
        // 1000 nodes × 8 shards × 2 = 16,000 → 14 node bits; 4 regions → 2; 1e9 / 8000 =
        // 125,000/s × 2 = 250/ms → 8 sequence bits; 50 years → 41. 41 + 16 + 8 = 65 > 63.
        let mut n = needs(1000, 4, 1e9, 8);
        let e = candidates(&n).unwrap_err().0;
        assert!(e.contains("add up to 65 bits"), "{e}");
        assert!(e.contains("2 short"), "{e}");
        assert!(e.contains("--years"), "{e}");
        // 10 years = 3.16e11 ms ≤ 2^39 = 5.50e11 → 39 bits: 39 + 16 + 8 = 63, exactly.
        n.years = 10.0;
        let c = candidates(&n).unwrap();
        assert_eq!(c.len(), 1, "no spare bits: one layout");
        assert_eq!(tws(&c[0]), (39, 16, 8));
        assert_eq!(c[0].region_bits, 2);
        assert!((c[0].years() - 17.42).abs() < 0.01);
    }

    #[test]
    fn bad_flags_are_refused() {
        let base = LayoutCalcArgs {
            nodes: 3,
            regions: 1,
            peak_rate: 1e6,
            shards: 2,
            workers_per_shard: 1,
            years: 50.0,
            headroom: 2.0,
            epoch: None,
            bits: 63,
        };
        assert!(base.needs().is_ok());
        let e = |a: LayoutCalcArgs| a.needs().unwrap_err().0;
        assert!(e(LayoutCalcArgs {
            nodes: 0,
            ..base.clone()
        })
        .contains("--nodes"));
        assert!(e(LayoutCalcArgs {
            regions: 0,
            ..base.clone()
        })
        .contains("--regions"));
        assert!(e(LayoutCalcArgs {
            headroom: 0.5,
            ..base.clone()
        })
        .contains("--headroom"));
        assert!(e(LayoutCalcArgs {
            shards: 2000,
            ..base.clone()
        })
        .contains("--shards"));
        assert!(e(LayoutCalcArgs {
            epoch: Some("soon".into()),
            ..base.clone()
        })
        .starts_with("epoch:"));
        assert_eq!(parse_rate("10M"), Ok(10e6));
        assert_eq!(parse_rate("2.5k"), Ok(2500.0));
        assert_eq!(parse_rate("1_000"), Ok(1000.0));
        for bits in [31, 64, 0] {
            assert!(e(LayoutCalcArgs {
                bits,
                ..base.clone()
            })
            .contains("--bits"));
        }
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
    }

    #[test]
    fn one_small_node_still_gets_one_worker_bit_and_one_sequence_bit() {
        let mut n = needs(1, 1, 1.0, 1);
        n.headroom = 1.0;
        let m = minimums(&n);
        assert_eq!((m.worker_bits, m.sequence_bits), (1, 1));
        assert_eq!(tws(&candidates(&n).unwrap()[0]), (41, 10, 12));
    }

    #[test]
    fn dates_by_hand() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(u128::from(DEFAULT_EPOCH_MS)), "2026-01-01");
        assert_eq!(date(951_782_400_000), "2000-02-29");
        // Far beyond year 9999 still prints.
        assert!(date(1u128 << 60).starts_with("36"));
    }

    #[test]
    fn javascript_safe_layouts_with_their_lifetime_and_throughput() {
        // 3 nodes × 2 shards × 2 = 12 → 4 node bits; 100k / 6 = 16,667 IDs/s per shard, × 2 =
        // 33.3 IDs/ms ≤ 2^6 → 6 sequence bits; 30 years = 9.47e11 ms ≤ 2^40 → 40 timestamp
        // bits. 50 bits: 3 spare in 53.
        let mut n = needs(3, 1, 100e3, 2);
        n.years = 30.0;
        assert_eq!(minimums(&n).total(), 50);
        let js = Needs { bits: 53, ..n };
        let c = candidates(&js).unwrap();
        assert!(c.iter().all(|c| c.bits() == 53), "{c:?}");
        // Closest to 41/10/12: 41/4/8 (0 + 6 + 4 = 10; 41/5/7 ties, found later).
        assert_eq!(tws(&c[0]), (41, 4, 8));
        let rest: Vec<_> = c[1..].iter().map(tws).collect();
        assert_eq!(rest, vec![(43, 4, 6), (40, 7, 6), (40, 4, 9)]);
        // 2^8 IDs per ms per worker, 2^(4 + 8) for the cluster.
        assert_eq!(c[0].per_worker_capacity(), 256_000.0);
        assert_eq!(c[0].cluster_capacity(), 4_096_000.0);
        assert!((c[3].years() - 34.84).abs() < 0.01);
        // Each is a layout a node runs with, and JavaScript-safe.
        for c in &c {
            let l = idgen_id::Layout::new(
                DEFAULT_EPOCH_MS,
                c.timestamp_bits,
                c.worker_bits,
                c.sequence_bits,
                c.region_bits,
            )
            .unwrap();
            assert!(l.is_js_safe() && l.max_id().get() == (1 << 53) - 1);
        }
        // The 63-bit report offers them after its own.
        let r = report(&n).unwrap();
        let js_part = &r[r
            .find("JavaScript-safe layouts")
            .expect("a JavaScript section")..];
        assert!(
            js_part.contains("41/4/8") && js_part.contains("256k") && js_part.contains("4.096M"),
            "{r}"
        );
        assert!(js_part.contains("69.7 years to 2095-09-07"), "{r}");
        assert!(
            js_part.ends_with("idgen serve --timestamp-bits 41 --worker-bits 4 --sequence-bits 8"),
            "{r}"
        );
        // With --bits 53 the main table is the JavaScript-safe one, and nothing is repeated.
        let r = report(&js).unwrap();
        assert!(r.contains("total      50  of 53; 3 spare"), "{r}");
        assert!(!r.contains("JavaScript-safe layouts"), "{r}");
    }

    #[test]
    fn when_no_javascript_safe_layout_fits_the_report_says_by_how_much() {
        // 41 + 9 + 8 = 58 bits: 5 over 53.
        let n = needs(64, 2, 10e6, 2);
        let r = report(&n).unwrap();
        assert!(
            r.contains("none fits: the minimums add up to 58 bits, 5 over 53"),
            "{r}"
        );
        let e = candidates(&Needs { bits: 53, ..n }).unwrap_err().0;
        assert!(e.contains("--bits 53 allows only 53 (5 short)"), "{e}");
    }

    #[test]
    fn the_report_names_the_flags() {
        let r = report(&needs(64, 2, 10e6, 2)).unwrap();
        assert!(r.contains("--timestamp-bits 41 --worker-bits 10 --sequence-bits 12 --region-bits 1 --region <0..1>"), "{r}");
        assert!(r.contains("→ idgen's default"), "{r}");
    }
}

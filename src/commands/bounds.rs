//! `idgen bounds --from T --to T`: the IDs of a time interval, for a primary-key range query.
//!
//! Every ID issued at a time in `[from, to)` (any region, worker or sequence) satisfies
//! `lo <= id < hi`, and no other ID does ([`idgen_id::Layout::bounds`]). The command prints the
//! smallest and the largest ID of the interval and the SQL clause `WHERE id >= lo AND id < hi`.
//! Times are RFC 3339 or milliseconds since the Unix epoch; an ID's time has millisecond
//! resolution, so a time with finer digits is taken as the millisecond that contains it.

use std::time::{Duration, UNIX_EPOCH};

use idgen_id::Layout;
use serde_json::json;

/// Parses `--from` / `--to`: milliseconds since the Unix epoch, or RFC 3339 (finer than a
/// millisecond: the millisecond that contains it).
pub fn parse_time(flag: &str, text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<i128>() {
        if ms < 0 {
            return Err(format!("--{flag} {t} is before 1970, before any ID epoch"));
        }
        return u64::try_from(ms).map_err(|_| {
            format!("--{flag} {t}: out of range (ms since the Unix epoch, at most 2^64 - 1)")
        });
    }
    let time = humantime::parse_rfc3339_weak(t).map_err(|e| {
        format!(
            "--{flag} {t:?} is neither ms since the Unix epoch nor RFC 3339 like \
             2026-01-01T00:00:00Z ({e})"
        )
    })?;
    let d = time
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("--{flag} {t:?} is before 1970, before any ID epoch"))?;
    u64::try_from(d.as_millis()).map_err(|_| format!("--{flag} {t:?} is out of range"))
}

fn rfc3339(unix_ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(unix_ms)).to_string()
}

/// The report of `idgen bounds`: text, or one JSON object.
pub fn report(layout: &Layout, from_ms: u64, to_ms: u64, as_json: bool) -> Result<String, String> {
    let b = layout.bounds(from_ms, to_ms).map_err(|e| {
        let hint = match e {
            idgen_id::TimeError::BeforeEpoch { .. } | idgen_id::TimeError::AfterLast { .. } => {
                format!(
                    " (the layout holds {} to {})",
                    rfc3339(layout.epoch_ms()),
                    rfc3339(layout.last_unix_ms())
                )
            }
            idgen_id::TimeError::Empty { .. } => String::new(),
        };
        format!("{e}{hint}")
    })?;
    let sql = format!("WHERE id >= {} AND id < {}", b.lo, b.hi);
    if as_json {
        return Ok(json!({
            "from_unix_ms": from_ms,
            "from": rfc3339(from_ms),
            "to_unix_ms": to_ms,
            "to": rfc3339(to_ms),
            "first": b.lo.get(),
            "last": b.last().get(),
            "lo": b.lo.get(),
            "hi": b.hi.get(),
            "sql": sql,
        })
        .to_string());
    }
    Ok(format!(
        "from   {}  ({from_ms} ms, inclusive)\n\
         to     {}  ({to_ms} ms, exclusive)\n\
         first  {}  (the smallest ID of the interval)\n\
         last   {}  (the largest ID of the interval)\n\
         {sql}",
        rfc3339(from_ms),
        rfc3339(to_ms),
        b.lo,
        b.last(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idgen_id::DEFAULT_EPOCH_MS;

    #[test]
    fn times_are_unix_ms_or_rfc3339() {
        assert_eq!(parse_time("from", "1767225600000"), Ok(DEFAULT_EPOCH_MS));
        assert_eq!(
            parse_time("from", "2026-01-01T00:00:00Z"),
            Ok(DEFAULT_EPOCH_MS)
        );
        assert_eq!(
            parse_time("from", "2026-01-01T00:00:00.250Z"),
            Ok(DEFAULT_EPOCH_MS + 250)
        );
        // Finer than a millisecond: the millisecond that contains it.
        assert_eq!(
            parse_time("to", "2026-01-01T00:00:00.000999Z"),
            Ok(DEFAULT_EPOCH_MS)
        );
        let e = parse_time("to", "-1").unwrap_err();
        assert!(e.contains("--to -1") && e.contains("before 1970"), "{e}");
        let e = parse_time("to", "18446744073709551616").unwrap_err();
        assert!(e.contains("--to") && e.contains("out of range"), "{e}");
        // Before 1970: refused (humantime reads no earlier dates).
        let e = parse_time("from", "1969-12-31T23:59:59Z").unwrap_err();
        assert!(e.contains("--from") && e.contains("1969"), "{e}");
        let e = parse_time("from", "yesterday").unwrap_err();
        assert!(e.contains("--from") && e.contains("RFC 3339"), "{e}");
        assert!(parse_time("from", "99999999999999999999999").is_err());
    }

    #[test]
    fn the_report_has_both_ids_and_the_sql_clause() {
        let l = Layout::default();
        let text = report(
            &l,
            DEFAULT_EPOCH_MS + 1_000,
            DEFAULT_EPOCH_MS + 3_000,
            false,
        )
        .unwrap();
        let (lo, hi) = (1_000u64 << 22, 3_000u64 << 22);
        assert!(text.contains(&format!("first  {lo} ")), "{text}");
        assert!(text.contains(&format!("last   {} ", hi - 1)), "{text}");
        assert!(
            text.ends_with(&format!("WHERE id >= {lo} AND id < {hi}")),
            "{text}"
        );
        assert!(text.contains("2026-01-01T00:00:01.000Z"), "{text}");
        let v: serde_json::Value = serde_json::from_str(
            &report(&l, DEFAULT_EPOCH_MS + 1_000, DEFAULT_EPOCH_MS + 3_000, true).unwrap(),
        )
        .unwrap();
        assert_eq!(v["first"], lo);
        assert_eq!(v["last"], hi - 1);
        assert_eq!(v["hi"], hi);
        assert_eq!(v["to"], "2026-01-01T00:00:03.000Z");
        assert_eq!(v["sql"], format!("WHERE id >= {lo} AND id < {hi}"));
    }

    #[test]
    fn times_outside_the_layout_say_what_it_holds() {
        let l = Layout::default();
        let e = report(&l, DEFAULT_EPOCH_MS - 1, DEFAULT_EPOCH_MS + 1, false).unwrap_err();
        assert!(
            e.contains("before the layout's epoch") && e.contains("2026-01-01T00:00:00.000Z"),
            "{e}"
        );
        let e = report(&l, DEFAULT_EPOCH_MS, l.last_unix_ms() + 1, true).unwrap_err();
        assert!(e.contains("after the layout's last timestamp"), "{e}");
        let e = report(&l, DEFAULT_EPOCH_MS + 5, DEFAULT_EPOCH_MS + 5, false).unwrap_err();
        assert!(e.contains("empty"), "{e}");
    }
}

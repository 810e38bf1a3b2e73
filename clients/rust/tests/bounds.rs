//! The time bounds of the layout a client hands out ([`idgen_client::Layout`]) against every
//! known answer in `clients/vectors/bounds.json` (`BOUNDS.md` beside it is the specification).

use idgen_client::{Id, Layout, TimeError};
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("../../vectors/bounds.json")).unwrap()
}

fn num(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

fn width(v: &Value) -> u8 {
    u8::try_from(v.as_u64().unwrap()).unwrap()
}

/// The time of a case, or `None` for a negative one (which no `u64` can carry: such a time is
/// before every epoch, and its case must say so).
fn time(case: &Value, key: &str) -> Option<u64> {
    let t: i128 = case[key].as_str().unwrap().parse().unwrap();
    u64::try_from(t).ok()
}

fn kind(e: TimeError) -> &'static str {
    match e {
        TimeError::BeforeEpoch { .. } => "before_epoch",
        TimeError::AfterLast { .. } => "after_last",
        TimeError::Empty { .. } => "empty",
    }
}

fn layout(v: &Value) -> Layout {
    let l = &v["layout"];
    Layout::new(
        num(&l["epoch_ms"]),
        width(&l["timestamp_bits"]),
        width(&l["worker_bits"]),
        width(&l["sequence_bits"]),
        width(&l["region_bits"]),
    )
    .unwrap()
}

#[test]
fn every_bounds_vector_holds() {
    let v = vectors();
    let layouts = v["layouts"].as_array().unwrap();
    assert!(layouts.len() >= 5);
    let (mut ok, mut errors) = (0, 0);
    for lv in layouts {
        let l = layout(lv);
        let name = lv["name"].as_str().unwrap();
        assert_eq!(l.last_unix_ms(), num(&lv["last_unix_ms"]), "{name}");
        for case in lv["at"].as_array().unwrap() {
            let Some(t) = time(case, "unix_ms") else {
                assert_eq!(case["error"], "before_epoch", "{name}: {case}");
                continue;
            };
            match case["error"].as_str() {
                Some(e) => {
                    assert_eq!(l.min_id_at(t).map_err(kind), Err(e), "{name}: {case}");
                    assert_eq!(l.max_id_at(t).map_err(kind), Err(e), "{name}: {case}");
                    errors += 1;
                }
                None => {
                    assert_eq!(l.min_id_at(t), Ok(Id(num(&case["min"]))), "{name}: {case}");
                    assert_eq!(l.max_id_at(t), Ok(Id(num(&case["max"]))), "{name}: {case}");
                    ok += 1;
                }
            }
        }
        for case in lv["bounds"].as_array().unwrap() {
            let (Some(from), Some(to)) = (time(case, "from_ms"), time(case, "to_ms")) else {
                assert_eq!(case["error"], "before_epoch", "{name}: {case}");
                continue;
            };
            match case["error"].as_str() {
                Some(e) => {
                    assert_eq!(l.bounds(from, to).map_err(kind), Err(e), "{name}: {case}");
                    errors += 1;
                }
                None => {
                    let b = l.bounds(from, to).unwrap();
                    assert_eq!(b.lo, Id(num(&case["lo"])), "{name}: {case}");
                    assert_eq!(b.hi, Id(num(&case["hi"])), "{name}: {case}");
                    assert_eq!(b.last(), Id(num(&case["last"])), "{name}: {case}");
                    ok += 1;
                }
            }
        }
    }
    // The file covers both answers and every error.
    assert!(ok >= 20 && errors >= 20, "{ok} answers, {errors} errors");
    let text = include_str!("../../vectors/bounds.json");
    for e in ["before_epoch", "after_last", "empty"] {
        assert!(text.contains(&format!("\"{e}\"")), "no {e} case");
    }
}

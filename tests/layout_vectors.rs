//! `clients/vectors/layouts.json` (LAYOUTS.md), which every client's decode across layout
//! generations is checked against, agrees with the node's own: `GET /layout`'s `layouts` list
//! (built by `generations_json`, read back by `generations_from_json` and `idgen decode
//! --layouts`) and `idgen_id::Generations`' decoding. The file is written by a separate
//! implementation (`clients/vectors/gen_layouts.py`), so the two check each other.

use idgen::node::admin::{generations_from_json, generations_json};
use idgen_id::Id;
use serde_json::Value;

#[test]
fn the_shared_layout_vectors_decode_as_the_node_decodes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("clients/vectors/layouts.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let clusters = v["clusters"].as_array().unwrap();
    assert!(clusters.len() >= 3);
    for c in clusters {
        let name = c["name"].as_str().unwrap();
        let gens = generations_from_json(&c["layouts"]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            generations_json(&gens),
            c["layouts"],
            "{name}: the node lists the same"
        );
        for d in c["decode"].as_array().unwrap() {
            let id: u64 = d["id"].as_str().unwrap().parse().unwrap();
            let (g, p) = gens.decompose(Id(id)).unwrap();
            let got = serde_json::json!({
                "id": id.to_string(),
                "layout_generation": g.index,
                "unix_ms": p.unix_ms,
                "timestamp": p.timestamp,
                "worker": p.worker,
                "region": p.region,
                "sequence": p.sequence,
            });
            assert_eq!(&got, d, "{name}: {id}");
        }
        for bad in c["invalid"].as_array().unwrap() {
            let id: u64 = bad.as_str().unwrap().parse().unwrap();
            assert!(
                gens.of_id(Id(id)).is_err(),
                "{name}: {id} is not an ID of the cluster"
            );
        }
    }
}

#[test]
fn a_layouts_list_that_breaks_the_rules_is_refused() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("clients/vectors/layouts.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let good = v["clusters"][0]["layouts"].clone();
    let mut wrong_first = good.clone();
    wrong_first[1]["first_id_str"] = Value::from("12345");
    wrong_first[1]["first_id"] = Value::from(12345u64);
    let mut no_switch = good.clone();
    no_switch[1]["switch_unix_ms"] = Value::Null;
    let mut wider = good.clone();
    wider[1]["timestamp_bits"] = Value::from(43);
    let mut late_epoch = good.clone();
    late_epoch[1]["epoch_ms"] = Value::from(good[0]["epoch_ms"].as_u64().unwrap());
    for (what, list) in [
        ("a first_id the switch does not give", wrong_first),
        ("a successor without a switch", no_switch),
        ("another ID width", wider),
        (
            "an epoch too late for the IDs to keep increasing",
            late_epoch,
        ),
        ("an empty list", Value::Array(vec![])),
    ] {
        assert!(generations_from_json(&list).is_err(), "{what} accepted");
    }
}

//! Masking against every known answer in `clients/vectors/forms.json`, plus properties
//! (round trips, injectivity) over random IDs. The text forms are `idgen-id`'s and tested
//! there (`id/tests/forms.rs`) against the same file.

use std::collections::HashSet;

use idgen_client::mask::{MaskError, MaskKey};
use proptest::prelude::*;
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("../../vectors/forms.json")).unwrap()
}

fn num(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap()
}

#[test]
fn every_mask_vector_masks_and_unmasks() {
    let v = vectors();
    let cases = v["masks"].as_array().unwrap();
    assert!(cases.len() >= 33);
    for case in cases {
        let key = MaskKey::from_hex(text(&case["key"])).unwrap();
        let upper = MaskKey::from_hex(&text(&case["key"]).to_uppercase()).unwrap();
        assert_eq!(key, upper);
        let (id, masked) = (num(&case["id"]), num(&case["masked"]));
        assert_eq!(key.mask(id), Ok(masked), "key {} id {id}", case["key"]);
        assert_eq!(key.unmask(masked), Ok(id), "key {} id {id}", case["key"]);
        let bytes = key.to_bytes();
        assert_eq!(MaskKey::from_bytes(bytes).mask(id), Ok(masked));
    }
}

#[test]
fn mask_error_messages_say_what_is_wrong() {
    assert_eq!(
        MaskKey::from_hex("xyz").unwrap_err().to_string(),
        "mask key: wrong length 3 (expected 32 hex digits)"
    );
    let key = MaskKey::from_bytes([7; 16]);
    assert_eq!(key.mask(1 << 63), Err(MaskError::OutOfRange));
}

const MAX: u64 = (1 << 63) - 1;

proptest! {
    #[test]
    fn masking_round_trips(key in any::<[u8; 16]>(), id in 0..=MAX) {
        let key = MaskKey::from_bytes(key);
        let masked = key.mask(id).unwrap();
        prop_assert!(masked <= MAX);
        prop_assert_eq!(key.unmask(masked), Ok(id));
    }

    #[test]
    fn masking_is_injective_on_samples(
        key in any::<[u8; 16]>(),
        ids in proptest::collection::hash_set(0..=MAX, 1..200),
        start in 0..MAX - 300,
    ) {
        let key = MaskKey::from_bytes(key);
        // Random IDs and a run of consecutive ones (like IDs of one millisecond).
        let sample: HashSet<u64> = ids.into_iter().chain(start..start + 300).collect();
        let masked: HashSet<u64> = sample.iter().map(|&id| key.mask(id).unwrap()).collect();
        prop_assert_eq!(masked.len(), sample.len());
    }
}

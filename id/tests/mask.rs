//! Masking against every known answer in `clients/vectors/mask.json` (`MASK.md` beside it is
//! the specification): NIST's nine published FF1 samples, masked IDs and their string forms,
//! and the errors every client must give; plus properties (round trips, injectivity,
//! widths) over random IDs and keys.
//!
//! The masked values in the file were computed by the Python client's FF1 (its own rounds
//! over AES from `cryptography`); this crate's is the `fpe` crate's. Agreement is the
//! cross-check of the bit order (most significant bit first) and the tweak.

use std::collections::HashSet;

use idgen_id::mask::{Ff1, Keyring, MaskError, MaskKey, DEFAULT_WIDTH};
use proptest::prelude::*;
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("../../clients/vectors/mask.json")).unwrap()
}

fn num(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap()
}

fn width(v: &Value) -> u32 {
    v["width"].as_u64().unwrap() as u32
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn digits(s: &str, radix: u32) -> Vec<u16> {
    s.chars()
        .map(|c| c.to_digit(radix).unwrap() as u16)
        .collect()
}

#[test]
fn nist_ff1_samples() {
    let v = vectors();
    let samples = v["nist_ff1"].as_array().unwrap();
    assert_eq!(samples.len(), 9);
    for (i, s) in samples.iter().enumerate() {
        assert_eq!(s["sample"].as_u64(), Some(i as u64 + 1));
        let radix = s["radix"].as_u64().unwrap() as u32;
        let key = hex(text(&s["key"]));
        let tweak = hex(text(&s["tweak"]));
        let pt = digits(text(&s["plaintext"]), radix);
        let ct = digits(text(&s["ciphertext"]), radix);
        let ff1 = Ff1::new(&key, radix).unwrap();
        assert_eq!(ff1.encrypt(&tweak, &pt).unwrap(), ct, "sample {}", i + 1);
        assert_eq!(ff1.decrypt(&tweak, &ct).unwrap(), pt, "sample {}", i + 1);
    }
}

#[test]
fn every_mask_vector_masks_and_unmasks() {
    let v = vectors();
    let cases = v["mask"].as_array().unwrap();
    assert!(cases.len() >= 20);
    let mut rotated = 0;
    for case in cases {
        let ring = Keyring::parse(text(&case["keys"])).unwrap();
        let w = width(case);
        let key_id = case["key_id"].as_u64().unwrap() as u8;
        let (id, masked, masked_str) = (
            num(&case["id"]),
            num(&case["masked"]),
            text(&case["masked_str"]),
        );
        let what = format!("{case}");
        if key_id == ring.current_key_id() {
            assert_eq!(ring.mask(id, w), Ok(masked), "{what}");
            assert_eq!(ring.mask_str(id, w).as_deref(), Ok(masked_str), "{what}");
            assert_eq!(ring.unmask(masked, w), Ok(id), "{what}");
        } else {
            rotated += 1;
            assert_ne!(ring.mask(id, w), Ok(masked), "{what}");
        }
        assert_eq!(ring.unmask_with(key_id, masked, w), Ok(id), "{what}");
        assert_eq!(ring.key(key_id).unwrap().mask(id, w), Ok(masked), "{what}");
        assert_eq!(ring.unmask_str(masked_str, w), Ok(id), "{what}");
        assert!(masked < 1 << w, "{what}");
    }
    assert!(
        rotated >= 2,
        "the file unmasks with a key that is not current"
    );
}

#[test]
fn same_key_bytes_under_two_key_ids_mask_differently() {
    let key = [7u8; 32];
    let a = MaskKey::new(1, &key).unwrap();
    let b = MaskKey::new(2, &key).unwrap();
    let ids = 721_864_159_923_240_960..721_864_159_923_241_060;
    let same = ids
        .filter(|&id| a.mask(id, DEFAULT_WIDTH) == b.mask(id, DEFAULT_WIDTH))
        .count();
    assert!(same <= 1, "{same} of 100 IDs masked alike");
}

#[test]
fn every_error_vector_fails_with_its_message() {
    let v = vectors();
    let cases = v["errors"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for case in cases {
        let input = text(&case["input"]);
        let w = width(case);
        let err: MaskError = match text(&case["op"]) {
            "parse_keys" => Keyring::parse(input).unwrap_err(),
            "unmask_str" => Keyring::parse(text(&case["keys"]))
                .unwrap()
                .unmask_str(input, w)
                .unwrap_err(),
            "mask" => Keyring::parse(text(&case["keys"]))
                .unwrap()
                .mask(input.parse().unwrap(), w)
                .unwrap_err(),
            op => panic!("unknown op {op}"),
        };
        let message = err.to_string();
        assert!(
            message.contains(text(&case["error"])),
            "{case}: got {message:?}"
        );
    }
}

#[test]
fn hostile_masked_strings_and_keyrings_are_errors() {
    let ring = Keyring::parse("1:00112233445566778899aabbccddeeff").unwrap();
    // Non-ASCII: counted in characters, refused by character.
    assert_eq!(
        ring.unmask_str("1ééééééééééé", 63),
        Err(MaskError::InvalidCharacter {
            ch: 'é',
            position: 1
        })
    );
    assert_eq!(
        ring.unmask_str("1ééééééééééé", 19),
        Err(MaskError::Width { width: 19 })
    );
    assert!(Keyring::parse("1:ééééééééééééééééééééééééééééééé").is_err());
    assert!(Keyring::parse("\u{0}:\u{0}").is_err());
    assert!(Keyring::parse(":").is_err());
}

#[test]
fn keyrings_from_files_and_the_environment() {
    let dir = std::env::temp_dir().join(format!("idgen-id-mask-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys");
    std::fs::write(
        &path,
        "# idgen mask keys\n3:00112233445566778899aabbccddeeff\n\n1:ffeeddccbbaa99887766554433221100\n",
    )
    .unwrap();
    let ring = Keyring::from_file(&path).unwrap();
    assert_eq!(ring.key_ids().collect::<Vec<_>>(), [3, 1]);
    assert_eq!(ring.key_ids_text(), "31");
    let missing = Keyring::from_file(dir.join("nope"))
        .unwrap_err()
        .to_string();
    assert!(missing.starts_with("mask keys: cannot read "), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();

    // The one test in this binary that touches IDGEN_MASK_KEYS.
    std::env::remove_var(idgen_id::mask::ENV_VAR);
    assert_eq!(Keyring::from_env().unwrap_err(), MaskError::EnvNotSet);
    std::env::set_var(
        idgen_id::mask::ENV_VAR,
        "5:00112233445566778899aabbccddeeff",
    );
    assert_eq!(Keyring::from_env().unwrap().current_key_id(), 5);
    std::env::remove_var(idgen_id::mask::ENV_VAR);
}

fn ring_of(key: &[u8; 16], key_id: u8) -> Keyring {
    Keyring::from_keys(vec![MaskKey::new(key_id, key).unwrap()]).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn masking_round_trips_at_every_width(
        key in any::<[u8; 16]>(),
        key_id in 0u8..=61,
        w in 20u32..=63,
        raw in any::<u64>(),
    ) {
        let ring = ring_of(&key, key_id);
        let id = raw >> (64 - w);
        let masked = ring.mask(id, w).unwrap();
        prop_assert!(masked < 1 << w);
        prop_assert_eq!(ring.unmask(masked, w), Ok(id));
        let s = ring.mask_str(id, w).unwrap();
        prop_assert_eq!(s.len(), 12);
        prop_assert_eq!(ring.unmask_str(&s, w), Ok(id));
    }

    #[test]
    fn masking_is_injective_on_consecutive_ids(key in any::<[u8; 16]>(), start in 0u64..(1 << 63) - 200) {
        let ring = ring_of(&key, 1);
        let masked: HashSet<u64> = (start..start + 200).map(|id| ring.mask(id, 63).unwrap()).collect();
        prop_assert_eq!(masked.len(), 200);
    }
}

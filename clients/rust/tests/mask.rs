//! The client's masking is the id crate's (`id/tests/mask.rs` runs every case of
//! `clients/vectors/mask.json` against it): the types are the same, and the shared vectors'
//! masked IDs come out through the client's paths.

use idgen_client::mask::{Keyring, MaskError};
use serde_json::Value;

#[test]
fn the_clients_keyring_is_the_id_crates() {
    fn same(_: idgen_id::mask::Keyring) {}
    let ring = Keyring::parse("0:00112233445566778899aabbccddeeff").unwrap();
    same(ring);
    let err: idgen_id::mask::MaskError = MaskError::EmptyKeyring;
    assert_eq!(err.to_string(), Keyring::parse("").unwrap_err().to_string());
}

#[test]
fn shared_vectors_through_the_client() {
    let v: Value = serde_json::from_str(include_str!("../../vectors/mask.json")).unwrap();
    let mut checked = 0;
    for case in v["mask"].as_array().unwrap() {
        let ring = Keyring::parse(case["keys"].as_str().unwrap()).unwrap();
        let width = case["width"].as_u64().unwrap() as u32;
        let id: u64 = case["id"].as_str().unwrap().parse().unwrap();
        let masked_str = case["masked_str"].as_str().unwrap();
        assert_eq!(ring.unmask_str(masked_str, width), Ok(id), "{case}");
        if case["key_id"].as_u64() == Some(u64::from(ring.current_key_id())) {
            assert_eq!(
                ring.mask_str(id, width).as_deref(),
                Ok(masked_str),
                "{case}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20);
}

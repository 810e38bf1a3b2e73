//! The text forms against every known answer in `clients/vectors/forms.json` (the vectors
//! every idgen client is checked against; `FORMS.md` beside it is the specification), plus
//! properties (round trips, order) over random IDs.

use idgen_id::forms::{self, FormError};
use proptest::prelude::*;
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("../../clients/vectors/forms.json")).unwrap()
}

fn num(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap()
}

#[test]
fn every_form_vector_encodes_and_parses() {
    let v = vectors();
    let cases = v["forms"].as_array().unwrap();
    assert!(cases.len() >= 11);
    for case in cases {
        let id = num(&case["id"]);
        assert_eq!(
            forms::to_decimal(id).unwrap(),
            text(&case["decimal"]),
            "{id}"
        );
        assert_eq!(forms::to_base62(id).unwrap(), text(&case["base62"]), "{id}");
        assert_eq!(forms::to_base32(id).unwrap(), text(&case["base32"]), "{id}");
        assert_eq!(forms::parse_decimal(text(&case["decimal"])), Ok(id));
        assert_eq!(forms::parse_base62(text(&case["base62"])), Ok(id));
        assert_eq!(forms::parse_base32(text(&case["base32"])), Ok(id));
        assert_eq!(
            forms::parse_base32(&text(&case["base32"]).to_lowercase()),
            Ok(id),
            "base32 parsing is case-insensitive"
        );
    }
}

/// Whether `c` belongs to `form`'s alphabet (aliases included).
fn in_alphabet(form: &str, c: char) -> bool {
    match form {
        "decimal" => c.is_ascii_digit(),
        "base62" => c.is_ascii_alphanumeric(),
        _ => c.is_ascii_alphanumeric() && !matches!(c.to_ascii_uppercase(), 'U'),
    }
}

/// The error each `why` of the vectors stands for.
fn expected_error(form: &str, why: &str, text: &str, width: usize) -> FormError {
    if why == "empty" {
        FormError::Empty
    } else if why.contains("out of range") || why.contains("above 2^64") {
        FormError::OutOfRange
    } else if why == "leading zero" {
        FormError::LeadingZero
    } else if why == "too long" {
        FormError::TooLong {
            len: text.chars().count(),
            max: 19,
        }
    } else if let Some(n) = why.strip_suffix(" characters") {
        FormError::WrongLength {
            len: n.parse().unwrap(),
            expected: width,
        }
    } else {
        // "not a digit", "sign", "not in the alphabet", "hyphen", …: the first
        // character outside the alphabet.
        let (position, ch) = text
            .chars()
            .enumerate()
            .find(|&(_, c)| !in_alphabet(form, c))
            .unwrap();
        FormError::InvalidCharacter { ch, position }
    }
}

#[test]
fn every_invalid_vector_is_rejected_with_its_reason() {
    let v = vectors();
    let cases = v["invalid"].as_array().unwrap();
    assert!(cases.len() >= 17);
    for case in cases {
        let (form, input, why) = (text(&case["form"]), text(&case["text"]), text(&case["why"]));
        let (got, width) = match form {
            "decimal" => (forms::parse_decimal(input), 0),
            "base62" => (forms::parse_base62(input), 11),
            "base32" => (forms::parse_base32(input), 13),
            other => panic!("unknown form {other}"),
        };
        let want = expected_error(form, why, input, width);
        assert_eq!(got, Err(want), "{form} {input:?} ({why})");
        // The message names the problem.
        let message = want.to_string();
        assert!(!message.is_empty());
    }
}

#[test]
fn every_base32_alias_vector_parses() {
    let v = vectors();
    let cases = v["base32_aliases"].as_array().unwrap();
    assert!(cases.len() >= 2);
    for case in cases {
        assert_eq!(
            forms::parse_base32(text(&case["text"])),
            Ok(num(&case["id"])),
            "{}",
            case["text"]
        );
    }
}

#[test]
fn error_messages_say_what_is_wrong() {
    let cases: [(Result<u64, FormError>, &str); 6] = [
        (forms::parse_decimal(""), "empty"),
        (
            forms::parse_base62("0000000000"),
            "wrong length 10 (expected 11)",
        ),
        (
            forms::parse_base32("00000-0000000"),
            "invalid character '-' at position 5",
        ),
        (
            forms::parse_decimal("9223372036854775808"),
            "out of range (≥ 2^63)",
        ),
        (forms::parse_decimal("0123"), "leading zero"),
        (
            forms::parse_decimal("12345678901234567890"),
            "too long: 20 digits (at most 19)",
        ),
    ];
    for (got, message) in cases {
        assert_eq!(got.unwrap_err().to_string(), message);
    }
}

const MAX: u64 = (1 << 63) - 1;

proptest! {
    #[test]
    fn every_form_round_trips(id in 0..=MAX) {
        prop_assert_eq!(forms::parse_decimal(&forms::to_decimal(id).unwrap()), Ok(id));
        prop_assert_eq!(forms::parse_base62(&forms::to_base62(id).unwrap()), Ok(id));
        prop_assert_eq!(forms::parse_base32(&forms::to_base32(id).unwrap()), Ok(id));
        let b32 = forms::to_base32(id).unwrap();
        prop_assert!(matches!(b32.as_bytes()[0], b'0'..=b'7'));
    }

    #[test]
    fn sortable_forms_sort_like_the_numbers(a in 0..=MAX, b in 0..=MAX) {
        let (a62, b62) = (forms::to_base62(a).unwrap(), forms::to_base62(b).unwrap());
        let (a32, b32) = (forms::to_base32(a).unwrap(), forms::to_base32(b).unwrap());
        prop_assert_eq!(a62.cmp(&b62), a.cmp(&b));
        prop_assert_eq!(a32.cmp(&b32), a.cmp(&b));
    }

    #[test]
    fn nearby_ids_sort_like_the_numbers(a in 0..MAX, step in 1u64..70) {
        // Neighbours exercise carries in the last digits.
        let b = a.saturating_add(step).min(MAX);
        prop_assert!(forms::to_base62(a).unwrap() <= forms::to_base62(b).unwrap());
        prop_assert!(forms::to_base32(a).unwrap() <= forms::to_base32(b).unwrap());
    }
}

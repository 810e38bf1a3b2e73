use super::*;

fn exit(generation: u64, timestamp: u64) -> Option<IssuerExit> {
    Some(IssuerExit {
        last_issued: Some(LastIssued {
            generation,
            timestamp,
        }),
    })
}

#[test]
fn release_point_is_the_last_timestamp_of_the_current_generation() {
    let idle = Some(IssuerExit::default());
    assert_eq!(
        release_point(&[exit(7, 100), exit(7, 120), idle], Some(7), 500),
        Some(120)
    );
    // An issuer's timestamps under an earlier generation do not count.
    assert_eq!(
        release_point(&[exit(6, 900), exit(7, 120)], Some(7), 500),
        Some(120)
    );
    assert_eq!(release_point(&[idle, idle], Some(7), 500), None);
}

#[test]
fn a_shard_that_panicked_keeps_the_lease_end_at_the_ceiling() {
    // Issuer 1's thread panicked after issuing up to some unknown timestamp below the
    // ceiling: the release must not lower the lease end to issuer 0's last timestamp.
    assert_eq!(
        release_point(&[exit(7, 100), None], Some(7), 500),
        Some(500)
    );
    assert_eq!(release_point(&[None], Some(7), 500), Some(500));
}

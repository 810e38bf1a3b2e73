//! The time bounds of the layout a client hands out. [`idgen_client::Layout`] is the id crate's
//! `Layout` itself, so its bounds are the id crate's, checked against every known answer in
//! `clients/vectors/bounds.json` by `id/tests/bounds.rs`. Here: that the client's names are
//! those types, and the bounds of a node's layout as the client sees it.

use idgen_client::{Bounds, Id, Layout, TimeError};

#[test]
fn the_client_hands_out_the_id_crates_bounds() {
    // The same types, not look-alikes: these assignments only compile if they are.
    let layout: idgen_id::Layout = Layout::default();
    let epoch = layout.epoch_ms();
    let b: idgen_id::Bounds = layout.bounds(epoch, epoch + 2).unwrap();
    let b: Bounds = b;
    // The default layout: 22 bits of worker and sequence below the timestamp.
    assert_eq!((b.lo, b.hi), (Id(0), Id(2 << 22)));
    assert_eq!(layout.min_id_at(epoch + 1).unwrap(), Id(1 << 22));
    assert_eq!(layout.max_id_at(epoch).unwrap(), Id((1 << 22) - 1));
    let e: TimeError = layout.min_id_at(epoch - 1).unwrap_err();
    assert!(
        matches!(e, idgen_id::TimeError::BeforeEpoch { .. }),
        "{e:?}"
    );
}

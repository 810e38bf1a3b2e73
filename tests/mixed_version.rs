//! A cluster of two releases on one etcd: the previous release's binary (`IDGEN_PREVIOUS_BIN`)
//! beside this one's, a rollback before the explicit upgrade, and the upgrade that ends the
//! rollback window. Needs a build of the previous release, so it is ignored by `cargo test`;
//! `scripts/mixed-version [REV]` builds one and runs it (a release check, as scripts/chaos
//! --long is).

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use idgen_testkit::etcd::EtcdCluster;
use idgen_testkit::node::{idgen_binary, NodeProc};

fn previous_binary() -> PathBuf {
    let bin = PathBuf::from(std::env::var_os("IDGEN_PREVIOUS_BIN").expect(
        "IDGEN_PREVIOUS_BIN names the previous release's idgen binary (scripts/mixed-version builds one and sets it)",
    ));
    assert!(bin.is_file(), "{} is missing", bin.display());
    bin
}

fn start(bin: &std::path::Path, url: &str, name: &str) -> Result<NodeProc, String> {
    NodeProc::try_start_binary(
        bin,
        None,
        None,
        &["--store", url, "--node-id", name, "--lease-ttl", "1500ms"],
        &[],
    )
}

fn unique(seen: &mut HashSet<u64>, ids: &[u64], who: &str) {
    for &id in ids {
        assert!(seen.insert(id), "{who} issued {id} a second time");
    }
}

#[test]
#[ignore = "needs the previous release's binary in IDGEN_PREVIOUS_BIN: run by scripts/mixed-version"]
fn two_releases_serve_unique_ids_together_and_a_rollback_works_until_the_upgrade() {
    let old = previous_binary();
    let new = idgen_binary();
    let etcd = EtcdCluster::start(1);
    let url = etcd.url("mixed");
    let mut seen = HashSet::new();

    // The previous release makes the cluster; this release joins it; both serve at once.
    let mut a = start(&old, &url, "old-a").expect("the previous release starts");
    let mut b = start(&new, &url, "new-b").expect("this release joins its cluster");
    for _ in 0..3 {
        unique(&mut seen, &a.take_ids(1_000), "old-a");
        unique(&mut seen, &b.take_ids(1_000), "new-b");
    }
    // A rolling restart of a onto this release, then back (the rollback): every start works,
    // nothing repeats.
    assert!(a.terminate(Duration::from_secs(10)).success());
    let mut a2 = start(&new, &url, "old-a").expect("a on this release");
    unique(&mut seen, &a2.take_ids(2_000), "a on this release");
    assert!(a2.terminate(Duration::from_secs(10)).success());
    assert!(b.terminate(Duration::from_secs(10)).success());
    let mut a3 =
        start(&old, &url, "old-a").expect("the rollback: the previous release starts again");
    let b3 = start(&old, &url, "new-b").expect("the rollback of b");
    unique(&mut seen, &a3.take_ids(2_000), "a rolled back");
    unique(&mut seen, &b3.take_ids(2_000), "b rolled back");
    drop(b3);
    assert!(a3.terminate(Duration::from_secs(10)).success());

    // The explicit upgrade: from now on the previous release refuses the cluster, and this
    // one serves on.
    let out = Command::new(&new)
        .args(["store", "upgrade", "--store", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = start(&old, &url, "old-z")
        .err()
        .expect("the previous release refuses the upgraded records");
    assert!(
        refused.contains("layout mismatch")
            && refused.contains(&format!(
                "record version {}",
                idgen_core::lease::RECORD_VERSION_MAX
            )),
        "{refused}"
    );
    let c = start(&new, &url, "new-c").expect("this release after the upgrade");
    unique(&mut seen, &c.take_ids(2_000), "new-c");
}

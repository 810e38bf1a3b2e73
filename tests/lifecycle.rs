//! A cluster's life beyond the steady state, on real processes: a cut-over floor (`min_id`),
//! record versions (`idgen store upgrade`), and the fence after a restore of the store
//! (`idgen store restored`) with clocks set back under libfaketime.

use std::path::Path;
use std::time::{Duration, Instant};

use idgen_testkit::conn::TestConn;
use idgen_testkit::node::{idgen, NodeProc};

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// The IDs a node serves once its clock has passed the floor (up to 20 s): it refuses
/// before, and recovers by itself.
fn served_once_the_clock_passes(c: &mut TestConn) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.get_ids(500) {
            Ok(ids) => return ids,
            Err(e) => assert!(Instant::now() < deadline, "never served again: {e:?}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts a node (on the embedded store in `data`, unless `extra` names another), its wall
/// clock offset by what `offset` (a libfaketime timestamp file) says, read on every call; the
/// monotonic clock stays real.
fn node_with_clock(data: Option<&Path>, offset: &Path, extra: &[&str]) -> NodeProc {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "libfaketime is missing: install Debian's `faketime` (scripts/test does)"
    );
    let mut args = vec!["--lease-ttl", "1s"];
    args.extend_from_slice(extra);
    NodeProc::try_start_in(
        data,
        &args,
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", offset.to_str().unwrap()),
            ("FAKETIME_NO_CACHE", "1"),
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
    )
    .unwrap_or_else(|e| panic!("the node did not start: {e}"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

#[test]
fn a_restored_store_is_fenced_so_a_clock_set_back_issues_nothing_at_or_below_what_was_issued() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let snapshot = dir.path().join("snapshot");
    let offset = dir.path().join("faketime");
    let data_s = data.to_str().unwrap();

    // Before the snapshot: a node whose clock ran two minutes behind.
    std::fs::write(&offset, "-120s\n").unwrap();
    let mut node = node_with_clock(Some(&data), &offset, &[]);
    let before = node.take_ids(2_000);
    assert!(node.terminate(Duration::from_secs(10)).success());
    copy_dir(&data, &snapshot);

    // After it: the same node on the right time; these IDs are what the restore forgets.
    std::fs::write(&offset, "+0\n").unwrap();
    let mut node = node_with_clock(Some(&data), &offset, &[]);
    let after = node.take_ids(2_000);
    assert!(node.terminate(Duration::from_secs(10)).success());
    let largest = *after.iter().max().unwrap();
    assert!(largest > *before.iter().max().unwrap());

    // The restore: the records go back to the snapshot's.
    std::fs::remove_dir_all(&data).unwrap();
    copy_dir(&snapshot, &data);

    // The fence needs the records at version 3 or newer, and says so until they are.
    let (code, _, err) = idgen(&["store", "restored", "--data-dir", data_s, "--margin", "1s"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("idgen store upgrade"), "{err}");
    let (code, out, err) = idgen(&["store", "upgrade", "--data-dir", data_s]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 -> 4"), "{out}");
    let (code, out, err) = idgen(&[
        "store",
        "restored",
        "--data-dir",
        data_s,
        "--lease-ttl",
        "1s",
        "--margin",
        "1s",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("floor now:"), "{out}");
    let (_, inspected, _) = idgen(&["inspect", "--data-dir", data_s, "--json"]);
    let inspected: serde_json::Value = serde_json::from_str(&inspected).unwrap();
    let floor = inspected["min_id"].as_u64().expect("a floor");
    assert_eq!(inspected["layout_version"], 4);
    assert!(floor > largest, "the fence {floor} lies above {largest}");

    // A node whose clock is a minute behind (past the snapshot's lease ends, before the
    // forgotten IDs): it issues nothing while its clock is below the fence...
    std::fs::write(&offset, "-60s\n").unwrap();
    let node = node_with_clock(Some(&data), &offset, &[]);
    let mut c = TestConn::open(node.addr);
    match c.get_ids(10) {
        Ok(ids) => panic!("issued {ids:?} with its clock below the fence {floor}"),
        Err((status, message)) => assert!(message.contains("floor"), "{status:?}: {message}"),
    }
    // ...and once its clock is back, it serves again by itself, above everything issued.
    std::fs::write(&offset, "+0\n").unwrap();
    let ids = served_once_the_clock_passes(&mut c);
    let smallest = *ids.iter().min().unwrap();
    assert!(
        smallest > floor && smallest > largest,
        "{smallest} at or below the fence {floor} or an ID issued before the restore {largest}"
    );
}

#[test]
fn a_cut_over_floor_holds_for_every_node_and_is_never_a_side_effect_of_a_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap();
    let offset = dir.path().join("faketime");
    std::fs::write(&offset, "+0\n").unwrap();

    // A cluster made without a floor stays at record version 2 (the previous release can join
    // it, and run it again after a rollback).
    let mut node = node_with_clock(Some(&data), &offset, &[]);
    let first = node.take_ids(100);
    assert!(node.terminate(Duration::from_secs(10)).success());
    let (_, inspected, _) = idgen(&["inspect", "--data-dir", data_s, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&inspected).unwrap();
    assert_eq!(
        (v["layout_version"].as_u64(), v["min_id"].as_u64()),
        (Some(2), None)
    );

    // The sequence being replaced handed out values up to M, whose time lies 3 s ahead of now
    // in this layout: no ID at or below it, whatever the clock says.
    let plan = idgen(&["migrate", "--max-id", "1", "--json"]).1;
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["ready"], true);
    let m = *first.iter().max().unwrap() + (3_000u64 << 22);
    let m_s = m.to_string();
    // A node told to keep above M refuses a cluster of version 2, and writes nothing.
    let refused = NodeProc::try_start_in(Some(&data), &["--min-id", &m_s], &[]);
    let log = refused
        .err()
        .expect("a node with min_id on a version-2 cluster");
    assert!(log.contains("idgen store upgrade"), "{log}");
    let (_, inspected, _) = idgen(&["inspect", "--data-dir", data_s, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&inspected).unwrap();
    assert_eq!(v["layout_version"], 2);

    // The configuration shows it.
    let (code, toml, err) = idgen(&["serve", "--check-config", "--min-id", &m_s]);
    assert_eq!(code, 0, "{err}");
    assert!(toml.contains(&format!("min_id = {m}")), "{toml}");

    // Upgraded and floored: a node without min_id in its own settings obeys it too, and one
    // with its clock a minute behind issues nothing at or below it.
    assert_eq!(idgen(&["store", "upgrade", "--data-dir", data_s]).0, 0);
    let (code, out, err) = idgen(&["store", "floor", "--data-dir", data_s, "--min-id", &m_s]);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::write(&offset, "-60s\n").unwrap();
    let node = node_with_clock(Some(&data), &offset, &[]);
    let mut c = TestConn::open(node.addr);
    assert!(c.get_ids(1).is_err(), "issued below the floor");
    std::fs::write(&offset, "+0\n").unwrap();
    let ids = served_once_the_clock_passes(&mut c);
    assert!(ids.iter().all(|&id| id > m), "{ids:?} vs the floor {m}");
}

/// The same on etcd: IDs from two nodes, a snapshot, more IDs, the snapshot restored
/// (`etcdctl snapshot restore`, the records back in time), the fence, and both nodes back with
/// their clocks a minute behind: nothing at or below what was issued before the restore.
#[cfg(feature = "etcd")]
#[test]
fn an_etcd_snapshot_restored_and_fenced_keeps_clocks_set_back_above_every_id_issued() {
    use idgen_testkit::etcd::EtcdCluster;
    let mut etcd = EtcdCluster::start(1);
    let url = etcd.url("restore");
    let dir = tempfile::tempdir().unwrap();
    let offset = dir.path().join("faketime");
    let snapshot = dir.path().join("snapshot.db");
    let args = |name: &'static str| ["--store", &url, "--node-id", name].map(str::to_string);
    let pair = |offset_text: &str| {
        std::fs::write(&offset, offset_text).unwrap();
        ["a", "b"].map(|n| {
            let a = args(n);
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            node_with_clock(None, &offset, &a)
        })
    };
    let issue = |nodes: [NodeProc; 2]| {
        let ids: Vec<u64> = nodes.iter().flat_map(|n| n.take_ids(1_000)).collect();
        for mut n in nodes {
            assert!(n.terminate(Duration::from_secs(10)).success());
        }
        ids
    };
    let before = issue(pair("-120s\n"));
    etcd.snapshot(&snapshot);
    let after = issue(pair("+0\n"));
    let largest = *after.iter().max().unwrap();
    assert!(largest > *before.iter().max().unwrap());

    etcd.restore(&snapshot);
    let (code, out, err) = idgen(&["store", "upgrade", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = idgen(&[
        "store",
        "restored",
        "--store",
        &url,
        "--lease-ttl",
        "1s",
        "--margin",
        "1s",
    ]);
    assert_eq!(code, 0, "{out}{err}");

    let nodes = pair("-60s\n");
    let mut conns: Vec<TestConn> = nodes.iter().map(|n| TestConn::open(n.addr)).collect();
    for c in &mut conns {
        if let Ok(ids) = c.get_ids(10) {
            panic!("issued {ids:?} with its clock a minute behind the fence");
        }
    }
    std::fs::write(&offset, "+0\n").unwrap();
    for c in &mut conns {
        let ids = served_once_the_clock_passes(c);
        let smallest = *ids.iter().min().unwrap();
        assert!(
            smallest > largest,
            "{smallest} at or below an ID issued before the restore ({largest})"
        );
    }
}

/// Trusted time: the kernel's view of its clock (adjtimex) is on /metrics, and with
/// `--require-sync` a node refuses to start on a clock the kernel calls unsynchronised (or with
/// an error bound above --max-drift), and starts on one it calls synchronised. The test reads
/// the same kernel, so it checks whichever side this machine is on.
#[test]
fn the_kernel_s_clock_state_is_reported_and_require_sync_refuses_an_unsynchronised_clock() {
    use idgen_core::sync::KernelSync;
    let kernel = KernelSync::read().expect("adjtimex");
    let ok = kernel.problem(Duration::from_secs(1)).is_none();

    let node = NodeProc::start(&["--admin-listen", "127.0.0.1:0"]);
    let (status, metrics) = idgen_testkit::node::http(node.admin.unwrap(), "GET", "/metrics", None);
    assert_eq!(status, 200);
    let line = metrics
        .lines()
        .find(|l| l.starts_with("idgen_clock_synchronized "))
        .expect("idgen_clock_synchronized on /metrics");
    assert_eq!(
        line,
        format!("idgen_clock_synchronized {}", u8::from(kernel.synchronized))
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("idgen_clock_max_error_seconds ")),
        "{metrics}"
    );
    // Off by default: the state is reported, the node is ready either way.
    let (ready, body) =
        idgen_testkit::node::http(node.admin.unwrap(), "GET", "/health/ready", None);
    assert_eq!(ready, 200, "{body}");

    let required = NodeProc::try_start(&["--require-sync", "--admin-listen", "127.0.0.1:0"], &[]);
    match (ok, required) {
        (false, Err(log)) => assert!(
            log.contains("require_sync is on") && log.contains("clock"),
            "{log}"
        ),
        (false, Ok(_)) => {
            panic!("started with require_sync on a clock the kernel calls {kernel:?}")
        }
        (true, Ok(n)) => {
            let (ready, body) =
                idgen_testkit::node::http(n.admin.unwrap(), "GET", "/health/ready", None);
            assert_eq!(ready, 200, "{body}");
        }
        (true, Err(log)) => panic!("refused a synchronised clock ({kernel:?}): {log}"),
    }
    // The setting is validated like any other.
    let (code, _, err) = idgen(&["serve", "--check-config", "--require-sync=maybe"]);
    assert_eq!(code, 2, "{err}");
}

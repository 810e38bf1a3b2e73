//! `idgen layout`, the layout calculator, run as a user runs it.

use std::process::Command;

fn layout(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idgen"))
        .arg("layout")
        .args(args)
        .output()
        .expect("run idgen layout");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn sixty_four_nodes_in_two_regions_fit_the_default_layout() {
    let (code, out, err) = layout(&[
        "--nodes",
        "64",
        "--shards",
        "2",
        "--regions",
        "2",
        "--peak-rate",
        "10M",
    ]);
    assert_eq!(code, 0, "{err}");
    // The minimums, by hand: 1 region bit; 64 × 2 × 2 = 256 → 8 node bits; 10M / 128 =
    // 78,125 IDs/s per shard, × 2 = 156.25/ms → 8 sequence bits; 50 years → 41 bits.
    assert!(out.contains("region      1"), "{out}");
    assert!(out.contains("node        8"), "{out}");
    assert!(out.contains("sequence    8"), "{out}");
    assert!(out.contains("156.25 IDs/ms"), "{out}");
    assert!(out.contains("timestamp  41"), "{out}");
    assert!(out.contains("total      58  of 63; 5 spare"), "{out}");
    assert!(out.contains("→ idgen's default"), "{out}");
    assert!(out.contains("41/10/12"), "{out}");
    assert!(out.contains("2095-09-07"), "{out}");
    assert!(
        out.contains(
            "idgen serve --timestamp-bits 41 --worker-bits 10 --sequence-bits 12 --region-bits 1"
        ),
        "{out}"
    );
}

#[test]
fn the_recommended_flags_are_accepted_by_serve() {
    let (code, out, err) = layout(&["--nodes", "3", "--shards", "4", "--peak-rate", "200M"]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("idgen serve "))
        .expect("a serve line");
    assert!(
        line.contains("--timestamp-bits 41 --worker-bits 6 --sequence-bits 16"),
        "{line}"
    );
    let args: Vec<&str> = line.split_whitespace().skip(2).collect();
    let check = Command::new(env!("CARGO_BIN_EXE_idgen"))
        .arg("serve")
        .args(&args)
        .args(["--store", "memory", "--check-config"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(text.contains("41/6/16"), "{text}");
}

#[test]
fn impossible_requests_are_refused_with_exit_code_2() {
    let (code, out, err) = layout(&[
        "--nodes",
        "1000",
        "--shards",
        "8",
        "--regions",
        "4",
        "--peak-rate",
        "1G",
    ]);
    assert_eq!(code, 2);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("no layout fits"), "{err}");
    assert!(err.contains("add up to 65 bits"), "{err}");
    let (code, _, err) = layout(&["--nodes", "0", "--peak-rate", "1M"]);
    assert_eq!(code, 2);
    assert!(err.contains("--nodes"), "{err}");
    let (code, _, err) = layout(&["--nodes", "3", "--peak-rate", "lots"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a rate"), "{err}");
}

/// `--bits 53`: only JavaScript-safe layouts, and the recommended flags start a node whose
/// layout is 53 bits wide.
#[test]
fn javascript_safe_layouts_start_a_53_bit_node() {
    let (code, out, err) = layout(&[
        "--nodes",
        "3",
        "--peak-rate",
        "100k",
        "--years",
        "30",
        "--bits",
        "53",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("total      50  of 53; 3 spare"), "{out}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("idgen serve "))
        .expect("a serve line");
    assert!(
        line.contains("--timestamp-bits 41 --worker-bits 4 --sequence-bits 8"),
        "{line}"
    );
    let args: Vec<&str> = line.split_whitespace().skip(2).collect();
    let check = Command::new(env!("CARGO_BIN_EXE_idgen"))
        .arg("serve")
        .args(&args)
        .args(["--store", "memory", "--check-config"])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Without --bits, the same needs get the 63-bit layouts and the JavaScript-safe ones.
    let (code, out, _) = layout(&["--nodes", "3", "--peak-rate", "100k", "--years", "30"]);
    assert_eq!(code, 0);
    assert!(out.contains("→ idgen's default"), "{out}");
    assert!(
        out.contains("JavaScript-safe (→): closest to the default, 69.7 years to 2095-09-07"),
        "{out}"
    );
    // An impossible width is a usage error.
    let (code, _, err) = layout(&["--nodes", "3", "--peak-rate", "100k", "--bits", "64"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--bits 64 is not in 32..=63"), "{err}");
}

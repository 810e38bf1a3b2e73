//! The docs work as written for the load tester: every `idgen-loadtest …` command line in the
//! READMEs, `docs/` and the crate docs uses options that `idgen-loadtest --help` lists (the
//! addresses they use are checked with the server's defaults by the root `tests/docs.rs`).

#[path = "../../tests/common/docs.rs"]
mod docs;

use std::path::Path;

#[test]
fn every_loadtest_command_in_the_docs_uses_real_flags() {
    let bin = Path::new(env!("CARGO_BIN_EXE_idgen-loadtest"));
    let known = docs::help_flags(&docs::help(bin, &[]));
    assert!(
        known.contains("--addr") && known.contains("--verify"),
        "{known:?}"
    );
    let root = docs::repo_root();
    let found = docs::invocations(&docs::all_snippets(&root), "idgen-loadtest");
    assert!(
        found.len() >= 8,
        "only {} idgen-loadtest commands found",
        found.len()
    );
    let mut bad = Vec::new();
    for inv in &found {
        for flag in inv.flags() {
            if !known.contains(&flag) {
                bad.push(format!("{}: `{}`: no option {flag}", inv.place, inv.text));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "load tester commands in the docs that fail:\n{}",
        bad.join("\n")
    );
}

/// The docs (the clean room, `docs/OPERATIONS.md`) run the load tester as `cargo run -p
/// idgen-loadtest -- …`, which cargo refuses ("could not determine which binary to run") for a
/// package of several binaries unless the manifest names the default one.
#[test]
fn cargo_run_of_the_package_runs_the_load_tester() {
    let manifest = std::fs::read_to_string(docs::repo_root().join("loadtest/Cargo.toml")).unwrap();
    let bins = manifest.lines().filter(|l| l.trim() == "[[bin]]").count();
    let default_run = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("default-run"))
        .filter_map(|rest| rest.trim().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
        .next();
    assert!(
        bins <= 1 || default_run.as_deref() == Some("idgen-loadtest"),
        "loadtest/Cargo.toml has {bins} binaries and default-run {default_run:?}: \
         `cargo run -p idgen-loadtest` would not know which to run"
    );
}

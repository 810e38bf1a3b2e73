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

//! Records which source the binary was built from, for `idgen --version`: the git revision
//! (from `IDGEN_BUILD_REVISION` when set, as the container build does without `.git`; else
//! `git rev-parse`; else the revision `cargo package` wrote into `.cargo_vcs_info.json`; else
//! "unknown").

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=IDGEN_BUILD_REVISION");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&dir);
    let revision = std::env::var("IDGEN_BUILD_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .map(|r| r.trim().to_string())
        .or_else(|| from_git(dir))
        .or_else(|| from_vcs_info(dir))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=IDGEN_BUILD_REVISION={revision}");
}

/// The checked-out commit, and build again when it changes.
fn from_git(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let revision = git(&["rev-parse", "--short=12", "HEAD"])?;
    // HEAD names the branch; the branch's ref (or packed-refs) names the commit. Only files
    // that exist are watched (cargo reruns the script every build for a missing one).
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for path in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            let p = dir.join(p);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    Some(revision)
}

/// `cargo package` records the commit it packaged: `{"git": {"sha1": "…"}, …}`.
fn from_vcs_info(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")).ok()?;
    let start = text.find("\"sha1\"")? + "\"sha1\"".len();
    let rest = text[start..].trim_start().strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let sha: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    (sha.len() >= 12).then(|| sha[..12].to_string())
}

//! What this binary was built from: the crate version, the git revision (recorded by
//! `build.rs`) and the cargo features compiled in, for `idgen --version` and logs.

use std::sync::LazyLock;

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git revision the binary was built from (12 hex digits), or "unknown".
pub const REVISION: &str = env!("IDGEN_BUILD_REVISION");

/// The optional cargo features compiled in: `etcd` (the etcd store), `fdb` (FoundationDB),
/// `postgres` (PostgreSQL).
pub fn features() -> Vec<&'static str> {
    let mut features = Vec::new();
    if cfg!(feature = "etcd") {
        features.push("etcd");
    }
    if cfg!(feature = "fdb") {
        features.push("fdb");
    }
    if cfg!(feature = "postgres") {
        features.push("postgres");
    }
    features
}

/// `0.1.0 (git 0123456789ab, features: etcd, fdb)`; "features: none" for the default build.
pub static VERSION_LINE: LazyLock<String> = LazyLock::new(|| {
    let features = features();
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(", ")
    };
    format!("{VERSION} (git {REVISION}, features: {features})")
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_names_version_revision_and_features() {
        let line = VERSION_LINE.as_str();
        assert!(line.starts_with(&format!("{VERSION} (git ")), "{line}");
        assert!(!REVISION.is_empty());
        assert_eq!(line.contains("etcd"), cfg!(feature = "etcd"), "{line}");
        assert_eq!(line.contains("fdb"), cfg!(feature = "fdb"), "{line}");
        assert_eq!(
            line.contains("postgres"),
            cfg!(feature = "postgres"),
            "{line}"
        );
        if features().is_empty() {
            assert!(line.ends_with("features: none)"), "{line}");
        }
    }
}

//! The docs work as written: every `idgen …` command line in the READMEs, `docs/`, the crate
//! docs and the Python client uses subcommands and flags that `--help` lists; every address
//! uses a port that is a real default (or a well-known port of another service); every
//! `IDGEN_*` variable exists; the defaults stated in the README's flag table and in `--help`
//! are the ones a node really resolves; `idgen --version` says what was built.
//! (`loadtest/tests/docs.rs` does the same for `idgen-loadtest`.)

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::docs::{self, Invocation};

const IDGEN: &str = env!("CARGO_BIN_EXE_idgen");

/// The subcommands `idgen --help` lists.
fn subcommands() -> BTreeSet<String> {
    subcommands_of(&[]).expect("`idgen --help` lists its commands")
}

/// The subcommands `idgen PATH… --help` lists, if it has any (`idgen seq` has `create`, …).
fn subcommands_of(path: &[&str]) -> Option<BTreeSet<String>> {
    let help = docs::help(Path::new(IDGEN), path);
    let commands = help
        .split("Commands:")
        .nth(1)?
        .split("Options:")
        .next()
        .unwrap();
    Some(
        commands
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(String::from)
            .collect(),
    )
}

/// What `idgen serve --check-config` resolves with no flags, file or environment: key → value.
fn resolved_defaults() -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(IDGEN);
    cmd.args(["serve", "--check-config"])
        .current_dir(dir.path());
    for (k, _) in std::env::vars() {
        if k.starts_with("IDGEN_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "idgen serve --check-config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // A TOML file, one table per section: every setting's key is its flag's name.
    let file: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut map = BTreeMap::new();
    for (section, table) in file {
        let table = table
            .as_table()
            .unwrap_or_else(|| panic!("{section} is not a section: {text}"));
        for (key, value) in table {
            let value = match value {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            assert!(
                map.insert(key.clone(), value).is_none(),
                "{key} is in two sections"
            );
        }
    }
    assert!(
        map.contains_key("listen") && map.contains_key("admin_listen"),
        "{text}"
    );
    map
}

/// Two spellings of one default are equal: durations by value, paths without `./`.
fn same_value(doc: &str, real: &str) -> bool {
    if doc == real {
        return true;
    }
    if let (Ok(a), Ok(b)) = (
        humantime::parse_duration(doc),
        humantime::parse_duration(real),
    ) {
        return a == b;
    }
    doc.trim_start_matches("./") == real.trim_start_matches("./")
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{addr:?} is not host:port"))
}

fn idgen_invocations() -> Vec<Invocation> {
    let root = docs::repo_root();
    let found = docs::invocations(&docs::all_snippets(&root), "idgen");
    // The docs are full of commands: finding few means the reader above broke, not that the
    // docs are right.
    assert!(
        found.len() >= 30,
        "only {} idgen commands found",
        found.len()
    );
    found
}

#[test]
fn every_idgen_command_in_the_docs_uses_real_subcommands_and_flags() {
    let subs = subcommands();
    let top = docs::help_flags(&docs::help(Path::new(IDGEN), &[]));
    let mut sub_flags = BTreeMap::new();
    // A command with subcommands of its own (`idgen seq create`): each by its own flags.
    let mut nested: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for s in &subs {
        sub_flags.insert(
            s.clone(),
            docs::help_flags(&docs::help(Path::new(IDGEN), &[s])),
        );
        for n in subcommands_of(&[s]).unwrap_or_default() {
            let flags = docs::help_flags(&docs::help(Path::new(IDGEN), &[s, &n]));
            nested.entry(s.clone()).or_default().insert(n, flags);
        }
    }
    let mut bad = Vec::new();
    let mut checked = 0;
    for inv in idgen_invocations() {
        let Some(first) = inv.words.first() else {
            continue;
        };
        let second = inv.words.get(1).map(String::as_str).unwrap_or("");
        let (known, what) = if first.starts_with('-') {
            (&top, "idgen".to_string())
        } else if let Some(flags) = nested.get(first).and_then(|n| n.get(second)) {
            (flags, format!("idgen {first} {second}"))
        } else if nested.contains_key(first)
            && inv.shell
            && !second.is_empty()
            && !second.starts_with('-')
            && second.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        {
            bad.push(format!(
                "{}: `{}`: idgen {first} has no subcommand {second:?}",
                inv.place, inv.text
            ));
            continue;
        } else if let Some(flags) = sub_flags.get(first) {
            (flags, format!("idgen {first}"))
        } else {
            if inv.shell && first.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                bad.push(format!(
                    "{}: `{}`: no subcommand {first:?}",
                    inv.place, inv.text
                ));
            }
            continue;
        };
        checked += 1;
        for flag in inv.flags() {
            if !known.contains(&flag) {
                bad.push(format!(
                    "{}: `{}`: {what} has no option {flag} (see `{what} --help`)",
                    inv.place, inv.text
                ));
            }
        }
    }
    assert!(checked >= 30, "only {checked} commands checked");
    assert!(
        bad.is_empty(),
        "commands in the docs that fail:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_address_in_the_docs_uses_a_real_default_port() {
    let real = resolved_defaults();
    let listen = port_of(&real["listen"]);
    let admin = port_of(&real["admin_listen"]);
    let http = port_of(&real["http_listen"]);
    // `idgen get` and `idgen decode --addr` reach a node at its default listen address.
    let get_help = docs::help(Path::new(IDGEN), &["get"]);
    assert!(
        get_help.contains(&format!("[default: {}]", real["listen"])),
        "`idgen get --addr` defaults to another address than `serve --listen` ({}):\n{get_help}",
        real["listen"]
    );
    // Other services' own well-known ports, as the docs use them.
    let others: BTreeMap<u16, &str> = [
        (0, "any free port"),
        (2379, "etcd clients"),
        (2380, "etcd peers"),
        (4500, "FoundationDB"),
        (5432, "PostgreSQL"),
        (6379, "Redis"),
        (9090, "Prometheus"),
        // loadtest/README.md's floor example: idgen-bare-responder takes the address it is
        // given, and the load tester is pointed at the same one.
        (
            7499,
            "idgen-bare-responder, as loadtest/README.md starts it",
        ),
    ]
    .into();
    let mut bad = Vec::new();
    let mut seen = 0;
    for line in docs::all_lines(&docs::repo_root()) {
        for (host, port) in docs::addresses(&line.text) {
            seen += 1;
            if ![listen, admin, http].contains(&port) && !others.contains_key(&port) {
                bad.push(format!(
                    "{}: {host}:{port}: a node listens on {listen} (ID protocol), {http} (HTTP ID API) and {admin} (admin) by default: {}",
                    line.place,
                    line.text.trim()
                ));
            }
        }
    }
    assert!(seen >= 20, "only {seen} addresses found");
    assert!(
        bad.is_empty(),
        "addresses in the docs that reach nothing:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_idgen_variable_in_the_docs_exists() {
    let root = docs::repo_root();
    // Variables the command line reads: `[env: IDGEN_X=]` in some --help.
    let mut known = BTreeSet::new();
    for args in std::iter::once(vec![]).chain(subcommands().into_iter().map(|s| vec![s])) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for line in docs::help(Path::new(IDGEN), &args).lines() {
            known.extend(docs::env_vars(line));
        }
    }
    // Variables scripts, tests, the build or clients read: named in code (not in comments).
    let mut code = String::new();
    for dir in [
        "src", "core/src", "tests", "scripts", "clients", "loadtest", "protocol", "deploy", ".ci",
    ] {
        collect_code(&root.join(dir), &mut code);
    }
    collect_code(&root.join("build.rs"), &mut code);
    let mut bad = Vec::new();
    let mut seen = 0;
    for line in docs::all_lines(&root) {
        for var in docs::env_vars(&line.text) {
            seen += 1;
            if !known.contains(&var) && !code.contains(&var) {
                bad.push(format!("{}: {var} is read by nothing", line.place));
            }
        }
    }
    assert!(seen >= 5, "only {seen} variables found");
    assert!(
        bad.is_empty(),
        "variables in the docs that do nothing:\n{}",
        bad.join("\n")
    );
}

/// Appends the non-comment lines of the sources under `path` (not Markdown).
fn collect_code(path: &Path, out: &mut String) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap().flatten() {
            let p = e.path();
            if p.file_name()
                .is_some_and(|n| n == "target" || n == "corpus")
            {
                continue;
            }
            collect_code(&p, out);
        }
        return;
    }
    if path.extension().is_some_and(|x| x == "md") {
        return;
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        let t = line.trim_start();
        if !(t.starts_with("//") || t.starts_with('#') || t.starts_with('*')) {
            out.push_str(line);
            out.push('\n');
        }
    }
}

#[test]
fn defaults_in_the_readme_and_in_help_are_the_resolved_ones() {
    let real = resolved_defaults();
    let mut claims = Vec::new(); // (where, flag, stated default)
                                 // The README's flag table: | `--flag` | `default` | meaning |
    let readme = std::fs::read_to_string(docs::repo_root().join("README.md")).unwrap();
    for (i, line) in readme.lines().enumerate() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let (flag, default) = (cells[1], cells[2]);
        let one_flag = flag.starts_with("`--") && flag.ends_with('`') && !flag.contains(',');
        let default = default.trim_matches('`');
        let literal = !default.is_empty() && !default.contains(' ');
        if one_flag && literal {
            claims.push((
                format!("README.md:{}", i + 1),
                flag.trim_matches('`').to_string(),
                default.to_string(),
            ));
        }
    }
    assert!(claims.len() >= 5, "README flag table not found: {claims:?}");
    // `idgen serve --help`: "--flag <X>\n   text [default: value]", or all on the flag's line.
    let help = docs::help(Path::new(IDGEN), &["serve"]);
    let mut flag = None;
    for line in help.lines() {
        let t = line.trim_start();
        if t.starts_with("--") {
            flag = t.split_whitespace().next().map(String::from);
        }
        if let (Some(f), Some(d)) = (&flag, t.split("[default: ").nth(1)) {
            let d = d.split(']').next().unwrap();
            claims.push(("idgen serve --help".into(), f.clone(), d.to_string()));
        }
    }
    let mut bad = Vec::new();
    let mut compared = 0;
    for (place, flag, stated) in claims {
        let key = flag.trim_start_matches("--").replace('-', "_");
        let Some(value) = real.get(&key) else {
            continue;
        };
        // Defaults in words ("number of CPUs", "2 × lease TTL") are not literal values.
        if stated.contains(' ') && humantime::parse_duration(&stated).is_err() {
            continue;
        }
        compared += 1;
        if !same_value(&stated, value) {
            bad.push(format!(
                "{place}: {flag} says {stated:?}, a node resolves {value:?}"
            ));
        }
    }
    assert!(compared >= 15, "only {compared} defaults compared");
    assert!(
        bad.is_empty(),
        "defaults stated wrongly:\n{}",
        bad.join("\n")
    );
    // The words too: the safety period is 2 × the TTL.
    let ttl = humantime::parse_duration(&real["lease_ttl"]).unwrap();
    let safety = humantime::parse_duration(&real["lease_safety"]).unwrap();
    assert_eq!(safety, ttl * 2);
    assert_eq!(
        real["shards"].parse::<usize>().unwrap(),
        std::thread::available_parallelism().unwrap().get(),
        "--shards defaults to the number of CPUs"
    );
}

#[test]
fn version_names_the_revision_and_the_features() {
    let out = Command::new(IDGEN).arg("--version").output().unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let line = line.trim();
    let rest = line
        .strip_prefix(&format!("idgen {} (git ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{line:?}"));
    let (revision, features) = rest.split_once(", features: ").expect(line);
    let mut want = Vec::new();
    if cfg!(feature = "etcd") {
        want.push("etcd");
    }
    if cfg!(feature = "fdb") {
        want.push("fdb");
    }
    if cfg!(feature = "postgres") {
        want.push("postgres");
    }
    let want = if want.is_empty() {
        "none".to_string()
    } else {
        want.join(", ")
    };
    assert_eq!(features, format!("{want})"), "{line}");
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(docs::repo_root())
        .output();
    match head {
        Ok(h) if h.status.success() => {
            assert_eq!(
                revision,
                String::from_utf8_lossy(&h.stdout).trim(),
                "{line}"
            )
        }
        // Built outside a git checkout (a crate package): the revision is still well formed.
        _ => assert!(
            revision == "unknown"
                || revision.len() == 12 && revision.chars().all(|c| c.is_ascii_hexdigit()),
            "{line}"
        ),
    }
}

/// `docs/METRICS.md` carries the reference rendered from the metrics catalogue
/// (`idgen::node::metrics::FAMILIES`), between its markers. `IDGEN_UPDATE_DOCS=1 cargo test
/// --test docs` writes the rendering into the file instead of failing.
#[test]
fn the_metrics_reference_is_rendered_from_the_catalogue() {
    use idgen::node::metrics::{reference, REFERENCE_BEGIN, REFERENCE_END};
    let path = docs::repo_root().join("docs").join("METRICS.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = text
        .split_once(REFERENCE_BEGIN)
        .unwrap_or_else(|| panic!("docs/METRICS.md has no {REFERENCE_BEGIN} line"));
    let (_, tail) = rest
        .split_once(REFERENCE_END)
        .unwrap_or_else(|| panic!("docs/METRICS.md has no {REFERENCE_END} line"));
    let rendered = format!(
        "{head}{REFERENCE_BEGIN}\n\n{}\n{REFERENCE_END}{tail}",
        reference()
    );
    if rendered == text {
        return;
    }
    if std::env::var("IDGEN_UPDATE_DOCS").as_deref() == Ok("1") {
        std::fs::write(&path, rendered).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let first = text
        .lines()
        .zip(rendered.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("line {}:\n  file:     {a}\n  rendered: {b}", i + 1))
        .unwrap_or_else(|| "the files differ in length".to_string());
    panic!(
        "docs/METRICS.md is not what the metrics catalogue renders ({first}); \
         run IDGEN_UPDATE_DOCS=1 cargo test --test docs and commit the file"
    );
}

/// The README's two commands stay exactly as they are, each in a shell block of its own, and
/// the release check (`scripts/clean-room`) runs both on a clean machine; `scripts/test` runs
/// the README's client examples (`scripts/readme-clients`).
#[test]
fn the_readmes_two_commands_are_there_and_the_clean_room_runs_them() {
    let root = docs::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for command in ["cargo run --release -- serve", "scripts/test"] {
        let block = format!("```sh\n{command}\n```\n");
        assert!(
            readme.contains(&block),
            "README.md has no block of its own for `{command}`"
        );
    }
    let clean_room = std::fs::read_to_string(root.join("scripts/clean-room")).unwrap();
    let runs = |line: &str| clean_room.lines().any(|l| l.trim_start().starts_with(line));
    assert!(
        runs("cargo run --release -- serve "),
        "clean-room: no serve"
    );
    assert!(runs("scripts/test"), "clean-room: no scripts/test");
    let test = std::fs::read_to_string(root.join("scripts/test")).unwrap();
    assert!(
        test.lines()
            .any(|l| l.trim() == "bash scripts/readme-clients"),
        "scripts/test does not run the README's client examples"
    );
}

//! The `idgen` command line as an operator meets it: `inspect --config` on a node's own file
//! (the embedded store), the log level's sources and their precedence, shell completions and
//! the man page generated from the clap definition, and the documented exit statuses against
//! real invocations.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::docs::repo_root;
use common::node::{idgen_binary, NodeProc};
use serde_json::Value;

fn idgen(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(idgen_binary());
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("IDGEN_LOG")
        .env_remove("IDGEN_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run idgen")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temporary path")
}

/// The subcommands as `idgen --help` lists them (but `help`).
fn subcommands() -> Vec<String> {
    let names = subcommands_of(&[]).expect("a Commands: list");
    for expected in ["serve", "inspect", "health", "completions", "man"] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    names
}

/// The subcommands `idgen PATH… --help` lists (but `help`), if it has any.
fn subcommands_of(path: &[&str]) -> Option<Vec<String>> {
    let mut args = path.to_vec();
    args.push("--help");
    let help = text(&idgen(&args, &[]).stdout);
    let list = help
        .split("Commands:\n")
        .nth(1)?
        .split("\n\n")
        .next()
        .unwrap();
    let names: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    Some(names)
}

/// `idgen inspect --config FILE` reads the node's own file: the store (here the embedded one,
/// in the directory the file names) and the namespace come from it, flags and IDGEN_* variables
/// override it, and without the file inspect looks elsewhere (and finds nothing).
#[test]
fn inspect_reads_the_store_and_namespace_from_the_nodes_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let config = dir.path().join("idgen.toml");
    std::fs::write(
        &config,
        format!(
            "[lease]\nstore = \"embedded:{}\"\nnamespace = \"orders\"\nlease_ttl = \"2s\"\n\
             [log]\nlog_format = \"json\"\n",
            store.display()
        ),
    )
    .unwrap();
    let cfg = path(&config);
    let mut node = NodeProc::start(&["--config", cfg, "--shards", "2", "--node-id", "alpha"]);
    // JSON logs: the store is a field of node_started (stdout stays empty).
    assert!(
        node.log().contains("\"store\":\"embedded:"),
        "{}",
        node.log()
    );
    // The embedded store belongs to one process: while the node runs, inspect is refused (a
    // runtime failure, not a usage error).
    // It says so, and what to do instead.
    let out = idgen(&["inspect", "--config", cfg], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("cannot open the store embedded:"), "{err}");
    assert!(
        err.contains(&format!("a running node (pid {})", node.pid()))
            && err.contains("Stop the node"),
        "{err}"
    );
    assert!(node.terminate(Duration::from_secs(15)).success());

    let out = idgen(&["inspect", "--config", cfg, "--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["namespace"], "orders", "{v}");
    let leases = v["leases"].as_array().unwrap();
    assert!(
        leases
            .iter()
            .any(|l| l["node_id"] == "alpha" && l["count"] == 2 && l["state"] == "released"),
        "{v}"
    );
    let out = idgen(&["inspect", "--config", cfg], &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains("namespace   orders in embedded:"),
        "{out:?}"
    );

    // A flag, or its variable, beats the file.
    for (args, env) in [
        (vec!["--namespace", "billing"], vec![]),
        (vec![], vec![("IDGEN_NAMESPACE", "billing")]),
    ] {
        let mut all = vec!["inspect", "--config", cfg];
        all.extend(args);
        let out = idgen(&all, &env);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(
            text(&out.stderr).contains("no cluster in namespace \"billing\""),
            "{out:?}"
        );
    }
    // IDGEN_CONFIG names the file as --config does.
    let out = idgen(&["inspect", "--json"], &[("IDGEN_CONFIG", cfg)]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Without the file: the default store and namespace, where no node ran.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = Command::new(idgen_binary())
        .args(["inspect"])
        .env_remove("IDGEN_CONFIG")
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("no embedded store in idgen-data"),
        "{out:?}"
    );
    // inspect reads: it made no data directory (nor anything else) where it looked.
    let made: Vec<_> = std::fs::read_dir(elsewhere.path()).unwrap().collect();
    assert!(made.is_empty(), "inspect created {made:?}");
    // A file that is not a configuration, a setting that does not parse, a missing file: 2.
    let bad = dir.path().join("bad.toml");
    for contents in [
        "[lease]\nstorr = \"memory\"\n",
        "[lease]\nlease_ttl = \"soon\"\n",
    ] {
        std::fs::write(&bad, contents).unwrap();
        let out = idgen(&["inspect", "--config", path(&bad)], &[]);
        assert_eq!(out.status.code(), Some(2), "{contents}: {out:?}");
    }
    let out = idgen(&["inspect", "--config", "/nonexistent/idgen.toml"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("/nonexistent/idgen.toml"));
}

/// Whether a node logged at info: its `node_started` event (idgen::node) and its
/// `lease_acquired` event (idgen_core). Text logs: the test kit finds a JSON node's address in
/// its node_started event, which a level above info leaves out.
fn logged(args: &[&str], env: &[(&str, &str)]) -> (bool, bool) {
    let mut all = vec!["--store", "memory", "--shards", "1"];
    all.extend_from_slice(args);
    let mut node = NodeProc::try_start(&all, env).unwrap_or_else(|e| panic!("{e}"));
    let log = node.log();
    assert!(node.terminate(Duration::from_secs(15)).success());
    (
        log.contains("idgen node started"),
        log.contains("lease acquired"),
    )
}

/// The level comes from --log-level, else IDGEN_LOG, else the file's [log] log_level, else
/// RUST_LOG (the test kit sets RUST_LOG=info on its nodes), else info; it takes tracing's
/// directives; a value that does not parse, from any of them, is a configuration error (2).
#[test]
fn the_log_level_comes_from_the_flag_then_idgen_log_then_the_file_then_rust_log() {
    let dir = tempfile::tempdir().unwrap();
    let warn_file = dir.path().join("warn.toml");
    std::fs::write(&warn_file, "[log]\nlog_level = \"warn\"\n").unwrap();
    let wf = path(&warn_file);
    // RUST_LOG=info (the kit's) alone: info events.
    assert_eq!(logged(&[], &[]), (true, true));
    // The file beats RUST_LOG.
    assert_eq!(logged(&["--config", wf], &[]), (false, false));
    // IDGEN_LOG beats the file.
    assert_eq!(
        logged(&["--config", wf], &[("IDGEN_LOG", "info")]),
        (true, true)
    );
    // The flag beats IDGEN_LOG; directives per target.
    assert_eq!(
        logged(&["--log-level", "warn"], &[("IDGEN_LOG", "info")]),
        (false, false)
    );
    assert_eq!(
        logged(&["--log-level", "warn,idgen::node=info"], &[]),
        (true, false)
    );
    // Without any of them: info.
    let out = Command::new(idgen_binary())
        .args(["serve", "--store", "memory", "--check-config"])
        .env_remove("RUST_LOG")
        .env_remove("IDGEN_LOG")
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("# log_level is not set: RUST_LOG, else info"),
        "{out:?}"
    );
    assert_eq!(idgen::config::DEFAULT_LOG_LEVEL, "info");

    // --check-config prints the level it resolved, which reads back.
    let out = idgen(
        &[
            "serve",
            "--store",
            "memory",
            "--log-level",
            "warn,idgen=debug",
            "--check-config",
        ],
        &[],
    );
    assert!(
        text(&out.stdout).contains("log_level = \"warn,idgen=debug\""),
        "{out:?}"
    );

    // Bad values, from each source: exit 2 and the source named, before anything starts.
    let bad_file = dir.path().join("bad.toml");
    std::fs::write(&bad_file, "[log]\nlog_level = \"verbose\"\n").unwrap();
    let serve = [
        "serve",
        "--store",
        "memory",
        "--shards",
        "1",
        "--listen",
        "127.0.0.1:0",
    ];
    // Each named as the user wrote it: the flag, the variable, the file's key.
    for (extra, env, named) in [
        (vec!["--log-level", "verbose"], vec![], "--log-level: "),
        (vec!["--log-level", "idgen=loud"], vec![], "--log-level: "),
        (vec!["--log-level", ""], vec![], "--log-level: "),
        (vec![], vec![("IDGEN_LOG", "warning")], "IDGEN_LOG: "),
        (vec!["--config", path(&bad_file)], vec![], "log_level: "),
        (vec![], vec![("RUST_LOG", "idgen=loud")], "RUST_LOG"),
    ] {
        let mut args = serve.to_vec();
        args.extend(extra.iter().copied());
        for check in [false, true] {
            let mut a = args.clone();
            if check {
                a.push("--check-config");
            }
            let out = idgen(&a, &env);
            assert_eq!(out.status.code(), Some(2), "{a:?} {env:?}: {out:?}");
            let err = text(&out.stderr);
            assert!(
                err.contains("configuration error") && err.contains(named),
                "{a:?} {env:?}: {err}"
            );
            assert!(out.stdout.is_empty(), "{a:?}: started: {out:?}");
        }
    }
    // inspect takes the same flag (it logs the store's warnings).
    let out = idgen(
        &["inspect", "--store", "memory", "--log-level", "loud"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// `idgen completions SHELL`: every shell's script names every subcommand; bash accepts the
/// bash one (`bash -n`), and a shell that sources it completes the subcommands and the flags of
/// one.
#[test]
fn completion_scripts_cover_every_subcommand_and_bash_accepts_its_own() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = idgen(&["completions", shell], &[]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {out:?}");
        let script = text(&out.stdout);
        for sub in &subs {
            assert!(script.contains(sub.as_str()), "{shell}: no {sub}");
        }
    }
    let out = idgen(&["completions", "tcsh"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("idgen.bash");
    std::fs::write(&script, idgen(&["completions", "bash"], &[]).stdout).unwrap();
    let checked = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash (it is every test machine's shell)");
    assert!(checked.status.success(), "bash -n: {checked:?}");
    // Complete `idgen <TAB>` and `idgen inspect --etcd-<TAB>` the way bash's completion does.
    let complete = |words: &str, cword: usize| {
        let probe = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; \
             COMP_POINT=${{#COMP_LINE}}; _idgen idgen; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let out = Command::new("bash").arg("-c").arg(probe).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        text(&out.stdout)
    };
    let top: BTreeSet<String> = complete("idgen ''", 1)
        .lines()
        .map(str::to_string)
        .collect();
    for sub in &subs {
        assert!(top.contains(sub), "`idgen <TAB>` misses {sub}: {top:?}");
    }
    let flags = complete("idgen inspect --etcd-", 2);
    for flag in ["--etcd-ca", "--etcd-user", "--etcd-password-file"] {
        assert!(flags.lines().any(|l| l == flag), "{flag}: {flags}");
    }
}

/// `idgen man`: one page with every command (NAME, SYNOPSIS, OPTIONS, each command's section,
/// EXIT STATUS), or one page per command with --out-dir; groff renders them without a
/// warning.
#[test]
fn the_man_page_has_every_command_and_renders() {
    let subs = subcommands();
    let out = idgen(&["man"], &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let page = text(&out.stdout);
    assert!(page.contains("\n.TH idgen 1 "), "{page}");
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "SUBCOMMANDS",
        "\"EXIT STATUS\"",
    ] {
        assert!(page.contains(&format!("\n.SH {section}\n")), "{section}");
    }
    for sub in &subs {
        let heading = format!("\n.SH \"IDGEN {}\"\n", sub.to_uppercase());
        assert!(page.contains(&heading), "no section {heading:?}");
    }
    // Options of the commands are on the page, with their environment variables.
    for flag in [
        r"\-\-etcd\-password\-file",
        r"\-\-log\-level",
        r"\-\-ready",
        "IDGEN_LOG",
    ] {
        assert!(page.contains(flag), "{flag}");
    }
    // The exit table, as --help has it.
    assert!(page.contains("Usage or configuration error"), "{page}");
    assert!(!page.contains(".SH EXTRA"), "{page}");
    render(&page, "idgen.1");

    let dir = tempfile::tempdir().unwrap();
    let out = idgen(&["man", "--out-dir", path(dir.path())], &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A page per command, and one per subcommand of a command that has them (`idgen-seq-create.1`).
    let mut expected: BTreeSet<String> = subs.iter().map(|s| format!("idgen-{s}.1")).collect();
    for s in &subs {
        for sub in subcommands_of(&[s]).unwrap_or_default() {
            expected.insert(format!("idgen-{s}-{sub}.1"));
        }
    }
    assert!(expected.contains("idgen-seq-create.1"), "{expected:?}");
    expected.insert("idgen.1".into());
    let written: BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(written, expected);
    for name in &written {
        let page = std::fs::read_to_string(dir.path().join(name)).unwrap();
        for section in ["NAME", "SYNOPSIS", "\"EXIT STATUS\""] {
            assert!(
                page.contains(&format!("\n.SH {section}\n")),
                "{name}: {section}"
            );
        }
        render(&page, name);
    }
    let serve = std::fs::read_to_string(dir.path().join("idgen-serve.1")).unwrap();
    assert!(serve.contains(r"\fBidgen serve\fR"), "{serve}");
    assert!(serve.contains(r"\-\-check\-config"), "{serve}");
    // A directory that cannot be made: a runtime failure.
    let out = idgen(&["man", "--out-dir", "/proc/no-such-dir"], &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// Renders a page with groff (warnings on, fatal here) and `man -l` when they are installed
/// (scripts/deps test installs groff); without them the structure checks above stand alone.
fn render(page: &str, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, page).unwrap();
    match Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&file)
        .output()
    {
        Ok(out) => {
            assert!(out.status.success(), "groff {name}: {out:?}");
            assert!(
                out.stderr.is_empty(),
                "groff warns on {name}: {}",
                text(&out.stderr)
            );
        }
        Err(e) => eprintln!("groff not installed ({e}): {name} checked for its structure only"),
    }
    if let Ok(out) = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    {
        assert!(out.status.success(), "man -l {name}: {out:?}");
        let shown = text(&out.stdout);
        assert!(
            shown.contains("NAME") && shown.contains("EXIT STATUS"),
            "{shown}"
        );
    }
}

/// The exit table: the codes `idgen --help` documents, which docs/OPERATIONS.md repeats word
/// for word.
fn documented_codes() -> BTreeSet<i32> {
    let help = text(&idgen(&["--help"], &[]).stdout);
    let table = help
        .split_once("Exit status:\n")
        .expect("an exit table in idgen --help")
        .1;
    let ops = std::fs::read_to_string(repo_root().join("docs/OPERATIONS.md")).unwrap();
    assert!(
        ops.contains(table.trim_end()),
        "docs/OPERATIONS.md does not hold the exit table of idgen --help:\n{table}"
    );
    table
        .lines()
        .filter_map(|l| l.strip_prefix("  ")?.split("  ").next()?.parse().ok())
        .collect()
}

/// Every documented exit status against real invocations, and every invocation's status is a
/// documented one.
#[test]
fn the_documented_exit_statuses_are_the_real_ones() {
    let documented = documented_codes();
    assert_eq!(documented, BTreeSet::from([0, 1, 2]));
    let dir = tempfile::tempdir().unwrap();
    let bad_config = dir.path().join("bad.toml");
    std::fs::write(&bad_config, "[listen]\nshards = \"many\"\n").unwrap();
    let good_config = dir.path().join("good.toml");
    std::fs::write(&good_config, "[lease]\nstore = \"memory\"\n").unwrap();
    // A closed port: bound, then released.
    let closed = format!("127.0.0.1:{}", common::free_port());
    // A port in use, for a node that cannot bind it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let missing = "/nonexistent/ca.pem";
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["--help"], 0),
        (vec!["--version"], 0),
        (
            vec!["serve", "--config", path(&good_config), "--check-config"],
            0,
        ),
        (vec!["decode", "123456789"], 0),
        (
            vec![
                "bounds",
                "--from",
                "2026-01-01T00:00:00Z",
                "--to",
                "1767225601000",
            ],
            0,
        ),
        (vec!["layout", "--nodes", "3", "--peak-rate", "1M"], 0),
        (vec!["completions", "bash"], 0),
        (vec!["man"], 0),
        // Runtime failures.
        (vec!["health", "--addr", &closed], 1),
        (
            vec!["health", "--ready", "--addr", &closed, "--timeout", "500ms"],
            1,
        ),
        (vec!["get", "--addr", &closed], 1),
        (vec!["decode", "--addr", &closed, "1"], 1),
        (
            vec!["bounds", "--addr", &closed, "--from", "1", "--to", "2"],
            1,
        ),
        (vec!["inspect", "--store", "memory"], 1),
        (
            vec![
                "serve",
                "--store",
                "memory",
                "--shards",
                "1",
                "--listen",
                &taken,
                "--admin-listen",
                "off",
                "--http-listen",
                "off",
            ],
            1,
        ),
        // Usage and configuration errors.
        (vec![], 2),
        (vec!["bogus"], 2),
        (vec!["serve", "--bogus"], 2),
        (vec!["health", "--bogus"], 2),
        (vec!["serve", "--config", path(&bad_config)], 2),
        (
            vec!["serve", "--config", path(&bad_config), "--check-config"],
            2,
        ),
        (vec!["serve", "--config", "/nonexistent/idgen.toml"], 2),
        (vec!["serve", "--store", "memory", "--log-level", "loud"], 2),
        (
            vec![
                "serve",
                "--store",
                "memory",
                "--tls-listen",
                "127.0.0.1:0",
                "--tls-cert",
                missing,
                "--tls-key",
                missing,
            ],
            2,
        ),
        (vec!["health", "--addr", &closed, "--timeout", "soon"], 2),
        (vec!["health", "--addr", &closed, "--tls-ca", missing], 2),
        (vec!["get", "--addr", &closed, "--tls-ca", missing], 2),
        (vec!["get", "--count", "0"], 2),
        (vec!["decode", "12x"], 2),
        (vec!["bounds", "--from", "yesterday", "--to", "1"], 2),
        (vec!["bounds", "--from", "1", "--to", "2"], 2),
        (vec!["bounds", "--from", "2026-01-01T00:00:00Z"], 2),
        (
            vec!["decode", "--addr", &closed, "--tls-ca", missing, "1"],
            2,
        ),
        (vec!["inspect", "--store", "redis://x"], 2),
        (vec!["inspect", "--store", "memory", "--etcd-user", "me"], 2),
        (vec!["inspect", "--config", path(&bad_config)], 2),
        (vec!["layout", "--nodes", "0", "--peak-rate", "1M"], 2),
        (vec!["completions", "tcsh"], 2),
    ];
    let mut seen = BTreeSet::new();
    for (args, expected) in &cases {
        let out = idgen(args, &[]);
        let code = out
            .status
            .code()
            .unwrap_or_else(|| panic!("{args:?}: {out:?}"));
        assert_eq!(code, *expected, "idgen {args:?}: {}", text(&out.stderr));
        if code != 0 {
            assert!(
                !out.stderr.is_empty(),
                "idgen {args:?} failed without a word"
            );
        }
        seen.insert(code);
    }
    assert_eq!(seen, documented, "a documented status is not exercised");
    // Output that cannot be written (a full disk) is a runtime failure, not a crash.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(idgen_binary())
        .args(["completions", "bash"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("cannot write the output"),
        "{out:?}"
    );
    // A reader that stops reading (`| head`) wanted no more: success, quietly.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(idgen_binary())
        .args(["completions", "bash"])
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

/// `idgen get -n 100000 | head`: head reads its lines and closes the pipe; get ends quietly
/// with status 0, as `seq 100000 | head` does, not with "Broken pipe" and status 1.
#[test]
fn get_into_a_pipe_its_reader_closes_early_ends_quietly() {
    use std::io::BufRead;
    let mut node = NodeProc::start(&["--store", "memory", "--shards", "1"]);
    let addr = node.addr.to_string();
    let (reader, writer) = std::io::pipe().unwrap();
    let child = Command::new(idgen_binary())
        .args(["get", "--addr", &addr, "-n", "100000"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // head: ten lines, then the pipe closes.
    let mut lines = std::io::BufReader::new(reader).lines();
    for _ in 0..10 {
        let id: u64 = lines.next().unwrap().unwrap().parse().unwrap();
        assert!(id > 0);
    }
    drop(lines);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert!(node.terminate(Duration::from_secs(15)).success());
}

/// A store this build has no adapter for (`etcd://` without the `etcd` feature, `fdb:` without
/// `fdb`) is a configuration error, found before anything starts: `serve --check-config`
/// refuses it, `serve` exits 2 (which the systemd unit does not restart on) instead of 1 (which
/// it restarts every 2 s), and `inspect` exits 2.
#[test]
fn a_store_this_build_cannot_open_is_a_configuration_error() {
    let mut stores: Vec<&str> = Vec::new();
    if cfg!(not(feature = "etcd")) {
        stores.push("etcd://127.0.0.1:2379/idgen");
    }
    if cfg!(not(feature = "fdb")) {
        stores.push("fdb:/etc/foundationdb/fdb.cluster");
    }
    assert!(
        !stores.is_empty(),
        "a build with every store: nothing to check"
    );
    let serve = ["serve", "--shards", "1", "--listen", "127.0.0.1:0"];
    for store in stores {
        for extra in [&["--check-config"][..], &[]] {
            let mut args = serve.to_vec();
            args.extend(["--store", store]);
            args.extend(extra);
            let out = idgen(&args, &[]);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
            let err = text(&out.stderr);
            assert!(
                err.contains("configuration error: --store: ") && err.contains("built without"),
                "{args:?}: {err}"
            );
            assert!(!err.contains("configuration ok"), "{err}");
            assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        }
        // Named as written: here, the variable.
        let out = idgen(&["serve", "--check-config"], &[("IDGEN_STORE", store)]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(text(&out.stderr).contains("IDGEN_STORE: "), "{out:?}");
        let out = idgen(&["inspect", "--store", store], &[]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(text(&out.stderr).contains("built without"), "{out:?}");
    }
    // The unit does not restart on 2.
    let unit = std::fs::read_to_string(repo_root().join("deploy/idgen.service")).unwrap();
    assert!(
        unit.lines()
            .any(|l| l.trim() == "RestartPreventExitStatus=2"),
        "deploy/idgen.service restarts on a configuration error"
    );
}

/// An error names the setting as the user wrote it: an `IDGEN_*` variable by the variable, a
/// flag by the flag, a file's setting by its key; also for values clap itself refuses.
#[test]
fn errors_name_the_flag_the_variable_or_the_key_the_user_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idgen.toml");
    std::fs::write(
        &file,
        "[lease]\nlease_ttl = \"soon\"\n[listen]\nmax_batch = 0\n",
    )
    .unwrap();
    let base = ["serve", "--store", "memory", "--check-config"];
    // (flags, environment, what the error must name)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (vec!["--lease-ttl", "soon"], vec![], "--lease-ttl: "),
        (
            vec![],
            vec![("IDGEN_LEASE_TTL", "soon")],
            "IDGEN_LEASE_TTL: ",
        ),
        (vec!["--config", path(&file)], vec![], "lease_ttl: "),
        (vec!["--max-batch", "0"], vec![], "--max-batch: "),
        (vec![], vec![("IDGEN_MAX_BATCH", "0")], "IDGEN_MAX_BATCH: "),
        (vec!["--listen", "nowhere"], vec![], "--listen: "),
        (vec![], vec![("IDGEN_LISTEN", "nowhere")], "IDGEN_LISTEN: "),
        (
            vec![],
            vec![("IDGEN_NAMESPACE", "a b")],
            "IDGEN_NAMESPACE: ",
        ),
        // Values clap parses (numbers): the variable, not the flag clap knows it by.
        (vec![], vec![("IDGEN_SHARDS", "many")], "for IDGEN_SHARDS: "),
        (
            vec!["--shards", "many"],
            vec![],
            "for '--shards <SHARDS>': ",
        ),
        // The flag wins over its variable, and is the one named.
        (
            vec!["--lease-ttl", "soon"],
            vec![("IDGEN_LEASE_TTL", "10s")],
            "--lease-ttl: ",
        ),
    ];
    for (extra, env, named) in cases {
        let mut args = base.to_vec();
        args.extend(extra.iter().copied());
        let out = idgen(&args, &env);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {out:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains(named),
            "{args:?} {env:?}: want {named:?} in {err}"
        );
        // Never the other names of the same setting.
        for other in ["lease_ttl: ", "max_batch: ", "listen: ", "namespace: "] {
            if !named.ends_with(other) && named.contains(other.trim_end_matches(": ")) {
                assert!(
                    !err.contains(&format!(" {other}")),
                    "{args:?} {env:?}: {err}"
                );
            }
        }
    }
    // inspect names them the same way.
    let out = idgen(
        &["inspect", "--store", "memory"],
        &[("IDGEN_LEASE_TTL", "soon")],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("IDGEN_LEASE_TTL: "), "{out:?}");
}

/// Every message names an address once: `cannot connect to 127.0.0.1:N: Connection refused`,
/// not `cannot connect to 127.0.0.1:N: 127.0.0.1:N: Connection refused`.
#[test]
fn a_connection_error_names_the_address_once() {
    let closed = format!("127.0.0.1:{}", common::free_port());
    for args in [
        vec!["get", "--addr", &closed],
        vec!["decode", "--addr", &closed, "1"],
        vec!["bounds", "--addr", &closed, "--from", "1", "--to", "2"],
        vec!["health", "--addr", &closed],
    ] {
        let out = idgen(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let err = text(&out.stderr);
        assert_eq!(err.matches(closed.as_str()).count(), 1, "{args:?}: {err}");
    }
}

/// Logs into a file (or a pipe, or journald) carry no ANSI colour codes: colour is for a
/// terminal only. (`NO_COLOR` empty, so only the terminal check keeps them out.)
#[test]
fn logs_into_a_file_carry_no_colour() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    std::fs::File::create(&log).unwrap();
    let w = common::logs::serve_to_files(&[], &[("NO_COLOR", "")], &log);
    assert!(w.status.success(), "{}", w.stderr);
    assert!(w.stderr.contains("idgen node started"), "{}", w.stderr);
    assert!(
        !w.stderr.contains('\x1b'),
        "ANSI escapes in a file:\n{}",
        w.stderr
    );
    // A config error on the way out, too.
    let out = idgen(&["serve", "--store", "memory", "--max-batch", "0"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!out.stderr.contains(&0x1b), "{out:?}");
}

/// In JSON mode stderr is JSON lines only, with typed fields (numbers as numbers, addresses as
/// `host:port` strings, options left out when absent: no Rust `Debug` text such as
/// `Some(127.0.0.1:…)` or `Freed { lease_end: … }`), and stdout stays empty: the addresses the
/// text banner prints are fields of `node_started`.
#[test]
fn json_logs_are_typed_json_lines_and_stdout_stays_empty() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    std::fs::File::create(&log).unwrap();
    let w = common::logs::serve_to_files(&["--log-format", "json"], &[], &log);
    assert!(w.status.success(), "{}", w.stderr);
    assert_eq!(w.stdout, "", "stdout in JSON mode");
    let events: Vec<Value> = w
        .stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let event = |name: &str| {
        events
            .iter()
            .find(|e| e["event"] == name)
            .unwrap_or_else(|| panic!("no {name} in {}", w.stderr))
    };
    for e in &events {
        for (key, value) in e.as_object().unwrap() {
            let text = value.to_string();
            for debug in ["Some(", "None", "Freed", "AlreadyLost", " { "] {
                assert!(!text.contains(debug), "{key} = {text}: Debug text in {e}");
            }
        }
    }
    let started = event("node_started");
    for key in ["listen", "admin_listen"] {
        let addr = started[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key}: {started}"));
        addr.parse::<std::net::SocketAddr>()
            .unwrap_or_else(|e| panic!("{key} = {addr:?}: {e}"));
    }
    // Off: absent, not null or "None".
    for key in ["http_listen", "tls_listen"] {
        assert!(started.get(key).is_none(), "{key}: {started}");
    }
    assert!(
        started["shards"].is_u64() && started["worker_count"].is_u64(),
        "{started}"
    );
    for name in ["lease_released", "node_stopped"] {
        let e = event(name);
        assert_eq!(e["outcome"], "freed", "{e}");
        assert!(e["lease_end"].is_u64(), "{e}");
    }
}

/// An etcd that cannot be reached is named once, by the store URL, and its error is plain text:
/// not `etcd://127.0.0.1:N: etcd 127.0.0.1:N get: … source: tonic::transport::Error(…
/// ConnectError("tcp connect error", 127.0.0.1:N, Os { … }))`.
#[cfg(feature = "etcd")]
#[test]
fn an_unreachable_etcd_is_named_once_in_plain_words() {
    let port = common::free_port();
    let store = format!("etcd://127.0.0.1:{port}/idgen");
    let address = format!("127.0.0.1:{port}");
    for args in [
        vec![
            "serve",
            "--store",
            &store,
            "--shards",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "off",
            "--http-listen",
            "off",
        ],
        vec!["inspect", "--store", &store],
    ] {
        let out = idgen(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let err = text(&out.stderr);
        let line = err
            .lines()
            .find(|l| l.contains("cannot open the store"))
            .unwrap_or_else(|| panic!("{args:?}: {err}"));
        assert_eq!(line.matches(address.as_str()).count(), 1, "{line}");
        assert!(line.contains("Connection refused"), "{line}");
        for debug in ["Error(", "Os {", "source:"] {
            assert!(!line.contains(debug), "Debug text: {line}");
        }
    }
}

/// `idgen seq` manages named sequences in the store a node uses (here its embedded store, made
/// by a node's first run): what it prints, what it refuses and with which status, and that a
/// name dropped and created again starts above every value the old one reserved.
#[test]
fn seq_commands_create_alter_drop_and_list_sequences_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = path(dir.path());
    // No store yet: refused, nothing created.
    let none = idgen(&["seq", "list", "--data-dir", data], &[]);
    assert_eq!(none.status.code(), Some(1), "{}", text(&none.stderr));
    assert!(
        !dir.path()
            .join(idgen_core::store::embedded::DB_FILE)
            .exists(),
        "seq list created a store"
    );
    // Creating the first sequence makes the store (before a node's first start).
    let json = |args: &[&str]| -> Value {
        let mut all = vec!["seq"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--data-dir", data, "--json"]);
        let out = idgen(&all, &[]);
        assert!(out.status.success(), "{all:?}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{all:?}: {e}"))
    };
    let created = json(&[
        "create",
        "invoice.tenant-42",
        "--mode",
        "strict",
        "--start",
        "1000",
        "--increment",
        "10",
        "--max",
        "5000",
    ]);
    assert_eq!(created["name"], "invoice.tenant-42");
    assert_eq!(created["mode"], "strict");
    assert_eq!(created["next"], 1000);
    assert_eq!(created["remaining"], 401);
    json(&["create", "orders"]);
    let listed = json(&["list"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["invoice.tenant-42", "orders"]);
    let altered = json(&["alter", "orders", "--restart", "500", "--max-block", "64"]);
    assert_eq!(
        (altered["next"].as_u64(), altered["max_block"].as_u64()),
        (Some(500), Some(64))
    );
    let dropped = json(&["drop", "orders"]);
    assert_eq!(dropped["state"], "dropped");
    let again = json(&["create", "orders"]);
    assert_eq!(
        again["next"], 500,
        "created again above the dropped one's values"
    );
    // Refusals: what the operator wrote wrongly is 2, what the store refuses is 1, and each
    // message names the sequence or the value.
    for (args, code, says) in [
        (vec!["create", "Orders"], 2, "bad sequence name"),
        (
            vec!["create", "x", "--mode", "gapless"],
            2,
            "not a sequence mode",
        ),
        (
            vec!["create", "x", "--start", "0"],
            2,
            "start must be at least 1",
        ),
        (
            vec!["create", "x", "--max", "9223372036854775808"],
            2,
            "signed 64-bit",
        ),
        (vec!["create", "orders"], 1, "exists already"),
        (vec!["alter", "orders"], 2, "nothing to change"),
        (
            vec!["alter", "orders", "--restart", "10"],
            1,
            "values below 500",
        ),
        (vec!["get", "missing"], 1, "no sequence named missing"),
        (vec!["drop", "missing"], 1, "no sequence named missing"),
    ] {
        let mut all = vec!["seq"];
        all.extend_from_slice(&args);
        all.extend_from_slice(&["--data-dir", data]);
        let out = idgen(&all, &[]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{all:?}: {err}");
        assert!(err.contains(says), "{all:?}: {err}");
        assert!(
            out.stdout.is_empty(),
            "{all:?} printed {}",
            text(&out.stdout)
        );
    }
    // Every change was an audit event on stderr.
    let out = idgen(
        &[
            "seq",
            "drop",
            "invoice.tenant-42",
            "--data-dir",
            data,
            "--log-format",
            "json",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let event: Value = serde_json::from_str(text(&out.stderr).lines().next().unwrap()).unwrap();
    assert_eq!(event["event"], "sequence_dropped");
    assert_eq!(event["name"], "invoice.tenant-42");
}

#[test]
fn decode_takes_apart_a_uuid_and_refuses_other_uuids_clearly() {
    // The default layout, which `idgen decode` uses without --addr or --config.
    let layout = idgen_id::Layout::default();
    let id = layout.compose(63_072_000_123, 512, 7).unwrap();
    let bytes = layout.uuid_v7(id, 0x0123_4567_89AB).unwrap();
    let u = uuid::Uuid::from_bytes(bytes).hyphenated().to_string();
    let out = idgen(&["decode", &u], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    assert!(
        line.starts_with(&format!("{u}  id={id}  time=2028-01-01T00:00:00.123Z"))
            && line.contains("worker=512  sequence=7"),
        "{line}"
    );
    let out = idgen(&["decode", "--json", &u.to_uppercase()], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(v["uuid"].as_str(), Some(u.as_str()));
    assert_eq!(v["id"].as_u64(), Some(id.0));
    assert_eq!(
        (v["worker"].as_u64(), v["sequence"].as_u64()),
        (Some(512), Some(7))
    );
    // Hostile input: a usage error (2) that says what is wrong, never a panic.
    let mut v4 = bytes;
    v4[6] = 0x40 | (v4[6] & 0x0F);
    let mut variant = bytes;
    variant[8] |= 0xC0;
    for (arg, says) in [
        (
            uuid::Uuid::from_bytes(v4).to_string(),
            "not a version 7 UUID",
        ),
        (uuid::Uuid::from_bytes(variant).to_string(), "variant"),
        (
            "019b71b4-4c7b-7800-8000-12345678zzzz".to_string(),
            "not a UUID",
        ),
        (
            "{019b71b4-4c7b-7800-8000-123456789abc".to_string(),
            "not a UUID",
        ),
    ] {
        let out = idgen(&["decode", &arg], &[]);
        assert_eq!(out.status.code(), Some(2), "{arg}");
        let err = text(&out.stderr);
        assert!(
            err.contains(says) && !err.contains("panicked"),
            "{arg}: {err}"
        );
    }
}

#[test]
fn masking_keys_come_from_a_file_or_the_environment_and_never_show() {
    let dir = tempfile::tempdir().unwrap();
    let key_a = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    let key_b = "ffeeddccbbaa99887766554433221100";
    let keys = dir.path().join("mask-keys");
    std::fs::write(&keys, format!("# rotated\n2:{key_b}\n1:{key_a}\n")).unwrap();
    let check = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["serve", "--store", "memory", "--check-config"];
        args.extend_from_slice(extra);
        let out = idgen(&args, env);
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };

    // From the file: the path and the key IDs, never a key; the printed file reads back.
    let (code, out, err) = check(&["--mask-keys-file", path(&keys)], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("[mask]"), "{out}");
    assert!(
        out.contains(&format!("mask_keys_file = \"{}\"", path(&keys))),
        "{out}"
    );
    assert!(
        out.contains("# masking is on: key ids 2, 1 (current 2), from mask_keys_file"),
        "{out}"
    );
    assert!(
        !out.contains(key_a) && !out.contains(key_b) && !err.contains(key_b),
        "{out}{err}"
    );
    let resolved = dir.path().join("resolved.toml");
    std::fs::write(&resolved, &out).unwrap();
    let (code, again, err) = check(&["--config", path(&resolved)], &[]);
    assert_eq!((code, again.as_str()), (Some(0), out.as_str()), "{err}");

    // From the environment.
    let ring = format!("5:{key_b}");
    let (code, out, err) = check(&[], &[("IDGEN_MASK_KEYS", &ring)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(
            "# masking is on: key ids 5 (current 5), from IDGEN_MASK_KEYS (never written)"
        ),
        "{out}"
    );
    assert!(!out.contains(key_b), "{out}");

    // Off by default.
    let (code, out, _) = check(&[], &[]);
    assert_eq!(code, Some(0));
    assert!(out.contains("# masking is off"), "{out}");

    // Bad keyrings and both sources: exit 2, the setting named, no key material shown.
    let bad = dir.path().join("bad-keys");
    std::fs::write(&bad, format!("1:{key_a}\n1:{key_b}\n")).unwrap();
    let truncated = dir.path().join("short-keys");
    std::fs::write(&truncated, format!("1:{}\n", &key_a[..31])).unwrap();
    let missing = dir.path().join("missing");
    for (extra, env, says) in [
        (
            vec!["--mask-keys-file", path(&bad)],
            vec![],
            "--mask-keys-file: mask keys: entry 2: duplicate key id 1",
        ),
        (
            vec!["--mask-keys-file", path(&truncated)],
            vec![],
            "wrong key length: a key is 32, 48 or 64 hex digits, not 31",
        ),
        (
            vec!["--mask-keys-file", path(&missing)],
            vec![],
            "cannot read",
        ),
        (
            vec![],
            vec![("IDGEN_MASK_KEYS", "1:xyz")],
            "IDGEN_MASK_KEYS: mask keys: entry 1: the key is not hex (invalid hex digit at position 0)",
        ),
        (vec![], vec![("IDGEN_MASK_KEYS", "")], "empty keyring"),
        (
            vec!["--mask-keys-file", path(&keys)],
            vec![("IDGEN_MASK_KEYS", ring.as_str())],
            "are both set",
        ),
    ] {
        let (code, out, err) = check(&extra, &env);
        assert_eq!(code, Some(2), "{extra:?}: {out}{err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(
            !err.contains(&key_a[..16]) && !err.contains(&key_b[..16]),
            "{err}"
        );
    }
}

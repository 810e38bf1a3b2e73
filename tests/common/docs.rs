//! Reading the repository's docs the way a newcomer copies from them: command lines, flags,
//! `IDGEN_*` variables and addresses, from the Markdown files, the crate docs (`//!` and `///`)
//! and the Python client's docstrings. Shared by `tests/docs.rs` (the `idgen` binary) and
//! `loadtest/tests/docs.rs` (the load tester).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A piece of doc text that a reader would copy: a line of a fenced code block, or an inline
/// code span.
#[derive(Clone, Debug)]
pub struct Snippet {
    pub place: String,
    pub text: String,
    /// Inside a fenced block whose language is a shell (`sh`, `bash`, `console`, `shell`).
    pub shell: bool,
}

/// One line as a reader sees it (prose, tables, code and comments alike).
#[derive(Clone, Debug)]
pub struct Line {
    pub place: String,
    pub text: String,
}

/// One invocation of a program found in a snippet.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub place: String,
    pub text: String,
    pub shell: bool,
    /// The words after the program name, up to the end of the command (a `|`, `&&`, `;`,
    /// `&`, `>` or `#`).
    pub words: Vec<String>,
}

impl Invocation {
    /// The long and short options among the words, without `=value`.
    pub fn flags(&self) -> Vec<String> {
        self.words
            .iter()
            .filter(|w| w.starts_with('-') && w.len() > 1 && *w != "--")
            .filter(|w| !w[1..].starts_with(|c: char| c.is_ascii_digit()))
            .map(|w| w.split('=').next().unwrap_or(w).to_string())
            .collect()
    }
}

/// The repository root (the directory holding the workspace `Cargo.toml`).
pub fn repo_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join(".ci").is_dir() || !dir.join("Cargo.lock").is_file() {
        assert!(
            dir.pop(),
            "repository root not found above CARGO_MANIFEST_DIR"
        );
    }
    dir
}

/// Every file a user reads for instructions: the READMEs, `docs/`, the protocol spec, the
/// sources whose doc comments become the crate docs, and the clients.
pub fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for md in [
        "README.md",
        "clients/rust/README.md",
        "clients/python/README.md",
        "clients/go/README.md",
        "clients/java/README.md",
        "clients/typescript/README.md",
        "clients/vectors/FORMS.md",
        "clients/vectors/MASK.md",
        "clients/vectors/BOUNDS.md",
        "clients/vectors/CONFIG.md",
        "id/README.md",
        "loadtest/README.md",
        "protocol/README.md",
        "protocol/PROTOCOL.md",
    ] {
        let p = root.join(md);
        assert!(p.is_file(), "{} is missing", p.display());
        files.push(p);
    }
    for (dir, ext) in [
        ("docs", "md"),
        ("src", "rs"),
        ("id/src", "rs"),
        ("protocol/src", "rs"),
        ("clients/rust/src", "rs"),
        ("loadtest/src", "rs"),
        ("clients/python/idgen_client", "py"),
        ("clients/go", "go"),
        ("clients/java/src/main", "java"),
    ] {
        walk(&root.join(dir), ext, &mut files);
    }
    files.sort();
    files
}

fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        panic!("{} is missing", dir.display())
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// The text of a file as a reader sees it, line by line with its line number: Markdown whole,
/// only the doc comments of Rust sources, all of a Python source.
fn reader_lines(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rust = path.extension().is_some_and(|x| x == "rs");
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            if !rust {
                return Some((i + 1, line.to_string()));
            }
            let t = line.trim_start();
            let doc = t
                .strip_prefix("//!")
                .or_else(|| t.strip_prefix("///"))
                .or_else(|| t.strip_prefix("#![doc = \""))?;
            Some((i + 1, doc.strip_prefix(' ').unwrap_or(doc).to_string()))
        })
        .collect()
}

/// Every line a reader sees in the doc files.
pub fn all_lines(root: &Path) -> Vec<Line> {
    let mut out = Vec::new();
    for path in doc_files(root) {
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for (line, text) in reader_lines(&path) {
            out.push(Line {
                place: format!("{rel}:{line}"),
                text,
            });
        }
    }
    out
}

/// The code a reader copies from the doc files: lines of fenced blocks and inline code spans
/// (of Markdown and of doc comments).
pub fn all_snippets(root: &Path) -> Vec<Snippet> {
    let mut out = Vec::new();
    for path in doc_files(root) {
        if path.extension().is_some_and(|x| x == "py") {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let mut fence: Option<bool> = None; // Some(shell) inside a fenced block
        for (line, text) in reader_lines(&path) {
            let place = format!("{rel}:{line}");
            let t = text.trim_start();
            if let Some(lang) = t.strip_prefix("```") {
                fence = match fence {
                    Some(_) => None,
                    None => {
                        let lang = lang.trim().split(',').next().unwrap_or("");
                        Some(matches!(lang, "sh" | "bash" | "console" | "shell"))
                    }
                };
                continue;
            }
            if let Some(shell) = fence {
                let text = t.strip_prefix("$ ").unwrap_or(t).to_string();
                out.push(Snippet { place, text, shell });
                continue;
            }
            for (i, part) in text.split('`').enumerate() {
                if i % 2 == 1 {
                    out.push(Snippet {
                        place: place.clone(),
                        text: part.to_string(),
                        shell: false,
                    });
                }
            }
        }
    }
    out
}

/// Invocations of `program` in the snippets: the word `program`, a path ending in
/// `/program`, or `cargo run … --` (for the `idgen` binary, `cargo run` without `-p`, or with
/// `-p program`).
pub fn invocations(snippets: &[Snippet], program: &str) -> Vec<Invocation> {
    let mut out = Vec::new();
    for s in snippets {
        let words: Vec<&str> = s.text.split_whitespace().collect();
        let mut i = 0;
        while i < words.len() {
            let w = words[i].trim_matches(|c| c == '(' || c == '"' || c == '\'');
            // `-p idgen`, `--target idgen`: a value, not a command.
            let value = i > 0 && words[i - 1].starts_with('-');
            let start = if !value && (w == program || w.ends_with(&format!("/{program}"))) {
                Some(i + 1)
            } else if w == "cargo" && words.get(i + 1) == Some(&"run") {
                let end = words[i..].iter().position(|x| *x == "--").map(|p| p + i);
                let pkg = words[i..end.unwrap_or(words.len())]
                    .windows(2)
                    .find(|p| p[0] == "-p" || p[0] == "--package")
                    .map(|p| p[1]);
                match end {
                    Some(end) if pkg.unwrap_or("idgen") == program => Some(end + 1),
                    _ => None,
                }
            } else {
                None
            };
            if let Some(start) = start {
                let rest: Vec<String> = words[start..]
                    .iter()
                    .take_while(|w| {
                        !matches!(**w, "|" | "&&" | "||" | ";" | "&" | "#" | ">" | "2>")
                    })
                    .map(|w| w.trim_end_matches([';', ')', '`']).to_string())
                    .collect();
                i = start + rest.len();
                out.push(Invocation {
                    place: s.place.clone(),
                    text: s.text.clone(),
                    shell: s.shell,
                    words: rest,
                });
            } else {
                i += 1;
            }
        }
    }
    out
}

/// The options a `--help` text lists: every `--long` and `-s` at the start of an option line.
pub fn help_flags(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in help.lines() {
        let t = line.trim_start();
        if !t.starts_with('-') {
            continue;
        }
        for word in t.split([' ', ',']) {
            if let Some(name) = word.strip_prefix("--") {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                flags.insert(format!("--{name}"));
            } else if word.len() == 2 && word.starts_with('-') {
                flags.insert(word.to_string());
            } else if !word.is_empty() && !word.starts_with('<') && !word.starts_with('[') {
                break;
            }
        }
    }
    flags
}

/// Runs a program's `--help` (or a subcommand's) and returns its output.
pub fn help(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{} {args:?} --help: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{} {args:?} --help failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `host:port` addresses in a line: IPv4 literals, `localhost`, `[::1]`. Ports only (with the
/// host), dates and times excluded.
pub fn addresses(line: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(off) = line[i..].find(':') {
        let colon = i + off;
        i = colon + 1;
        let digits: String = line[colon + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if digits.is_empty() || digits.len() > 5 {
            continue;
        }
        let after = colon + 1 + digits.len();
        if bytes
            .get(after)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b':')
        {
            continue;
        }
        let host: String = line[..colon]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '[' | ']' | ':'))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let ipv4 = host.split('.').count() == 4 && host.split('.').all(|p| p.parse::<u8>().is_ok());
        if ipv4 || host == "localhost" || host == "[::1]" || host == "[::]" {
            if let Ok(port) = digits.parse() {
                out.push((host, port));
            }
        }
    }
    out
}

/// `IDGEN_*` names in a line.
pub fn env_vars(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(p) = rest.find("IDGEN_") {
        let name: String = rest[p..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        rest = &rest[p + name.len()..];
        let name = name.trim_end_matches('_').to_string();
        if name.len() > "IDGEN_".len() {
            out.push(name);
        }
    }
    out
}

//! `idgen man`: manual pages generated from the command-line definition (clap_mangen), with
//! the exit statuses of [`super::exit::TABLE`] as their EXIT STATUS section.
//!
//! [`page`] is one page, idgen(1), that holds every command: idgen's own sections, then one
//! section per command (its synopsis, description and options). [`write_pages`] writes
//! idgen.1 and one idgen-COMMAND.1 per command instead, as packages install them.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap_mangen::roff::{roman, Roff};
use clap_mangen::Man;

/// The manual section: user commands.
const SECTION: &str = "1";

/// Renders with `f`, without the preamble every render repeats (it opens the page once).
fn render(f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> String {
    let mut buf = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = f(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let preamble = Roff::new().render();
    match text.strip_prefix(&preamble) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

/// `cmd` built (bin names and display names filled in), without the `help` subcommand.
fn built(cmd: clap::Command) -> clap::Command {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    cmd
}

fn visible_subcommands(cmd: &clap::Command) -> Vec<clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect()
}

/// A preformatted block of `text`.
fn block(text: &str) -> String {
    let mut roff = Roff::new();
    roff.control("nf", []).text([roman(text)]).control("fi", []);
    render(|w| roff.to_writer(w))
}

/// The EXIT STATUS section.
fn exit_status() -> String {
    let table = super::exit::TABLE;
    let body = table.split_once('\n').map_or(table, |(_, rest)| rest);
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    format!("{}{}", render(|w| roff.to_writer(w)), block(body))
}

/// The page of one command: title, NAME, SYNOPSIS, DESCRIPTION, its options (under their
/// headings), its commands, EXIT STATUS, VERSION. `then` goes before EXIT STATUS.
fn command_page(cmd: &clap::Command, then: &str) -> String {
    let man = Man::new(cmd.clone()).section(SECTION);
    let mut page = Roff::new().render();
    page += &render(|w| man.render_title(w));
    page += &render(|w| man.render_name_section(w));
    page += &render(|w| man.render_synopsis_section(w));
    page += &render(|w| man.render_description_section(w));
    if let Some(after) = after_help(cmd) {
        page += &block(&after);
    }
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page += &render(|w| man.render_options_section(w));
    }
    if !visible_subcommands(cmd).is_empty() {
        page += &render(|w| man.render_subcommands_section(w));
    }
    page += then;
    page += &exit_status();
    if cmd.get_version().is_some() {
        page += &render(|w| man.render_version_section(w));
    }
    page
}

/// A command's text after its options, unless it is the exit table (its own section).
fn after_help(cmd: &clap::Command) -> Option<String> {
    let text = cmd
        .get_after_long_help()
        .or(cmd.get_after_help())?
        .to_string();
    (text != super::exit::TABLE).then_some(text)
}

/// `cmd`'s sections inside idgen(1): one section named after it, its own sections as
/// subsections.
fn command_section(cmd: &clap::Command) -> String {
    let man = Man::new(cmd.clone()).section(SECTION);
    let name = cmd
        .get_bin_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_uppercase();
    let mut roff = Roff::new();
    roff.control("SH", [name.as_str()]);
    let mut inner = render(|w| man.render_description_section(w));
    if let Some(after) = after_help(cmd) {
        inner += &block(&after);
    }
    inner += &render(|w| man.render_synopsis_section(w));
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        inner += &render(|w| man.render_options_section(w));
    }
    // Every heading of the command's page becomes a subsection of its section.
    let inner: String = inner
        .lines()
        .map(|l| match l.strip_prefix(".SH ") {
            Some(h) => format!(".SS {h}\n"),
            None => format!("{l}\n"),
        })
        .collect();
    // The description's own heading says nothing a section named after the command does not.
    let inner = inner.replacen(".SS DESCRIPTION\n", "", 1);
    format!("{}{inner}", render(|w| roff.to_writer(w)))
}

/// The page in ASCII: every other character as groff's `\[uXXXX]` escape, so groff renders
/// it whatever its input encoding (without preconv).
fn ascii(page: &str) -> Vec<u8> {
    let mut out = String::with_capacity(page.len());
    for c in page.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    out.into_bytes()
}

/// idgen(1): every command on one page.
pub fn page(cmd: clap::Command) -> Vec<u8> {
    let cmd = built(cmd);
    let sections: String = visible_subcommands(&cmd)
        .iter()
        .map(command_section)
        .collect();
    ascii(&command_page(&cmd, &sections))
}

/// Writes idgen.1 and one page per command (idgen-serve.1, …) into `dir` (created if need
/// be); returns the files written.
pub fn write_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn write(cmd: &clap::Command, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        let path = dir.join(Man::new(cmd.clone()).section(SECTION).get_filename());
        std::fs::write(&path, ascii(&command_page(cmd, "")))?;
        out.push(path);
        for sub in visible_subcommands(cmd) {
            write(&sub, dir, out)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir)?;
    let cmd = built(cmd);
    let mut out = Vec::new();
    write(&cmd, dir, &mut out)?;
    Ok(out)
}

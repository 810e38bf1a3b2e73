//! The `idgen` command: `serve` runs a node; the other subcommands help operate one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use idgen::commands::exit::{write_stdout, Failure};
use idgen::commands::{InspectArgs, LayoutSource};
use idgen::config::{ListenSection, LogFormat, LogSection, Origins, ServeArgs};
use idgen::node::Node;
use idgen_core::clock::{Clock, SystemClock};
use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// idgen: 64-bit, time-ordered, unique IDs, with timestamp-fenced worker leases.
#[derive(Parser)]
#[command(name = "idgen", version = idgen::build_info::VERSION_LINE.as_str(), about, long_about = None)]
#[command(after_help = idgen::commands::exit::TABLE)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node: lease worker IDs and answer the ID protocol.
    Serve(Box<ServeArgs>),
    /// Decode IDs and UUIDs: time (RFC 3339, UTC), region, worker, sequence.
    Decode {
        /// IDs in decimal (or the base62 / base32 forms of the clients), or version 7 UUIDs
        /// from `POST /uuids` or GET_UUIDS.
        #[arg(required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        layout: LayoutSource,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// The IDs of a time interval [from, to), for a range query: the smallest and the largest
    /// ID, and the SQL clause `WHERE id >= … AND id < …`.
    Bounds {
        /// Start of the interval (inclusive): RFC 3339 or ms since the Unix epoch.
        #[arg(long)]
        from: String,
        /// End of the interval (exclusive): RFC 3339 or ms since the Unix epoch.
        #[arg(long)]
        to: String,
        #[command(flatten)]
        layout: LayoutSource,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Show a cluster from its store: layout, every lease, free worker IDs per region.
    Inspect(Box<InspectArgs>),
    /// Named sequences in the store: create, alter, drop, list, get (against the store, as
    /// inspect reads it).
    Seq(idgen::commands::seq::SeqArgs),
    /// Work out a bit layout for a deployment: nodes, regions, peak rate, years.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Layout(idgen::commands::generations::LayoutArgs),
    /// Change the cluster's records: upgrade their version, raise the floor, fence after a
    /// restore of the store (against the store, as inspect reads it).
    Store(idgen::commands::store::StoreArgs),
    /// Plan a cut-over from a database sequence (or another ID source) whose largest value
    /// is --max-id: whether this layout's IDs are above it now, the floor, the steps.
    Migrate(idgen::commands::store::MigrateArgs),
    /// Check a running node's health on its admin port: exit 0 if live (ready with --ready),
    /// 1 if not or if it does not answer. For container health checks.
    Health {
        /// The node's admin address (host:port).
        #[arg(long, default_value = "127.0.0.1:7421", env = "IDGEN_ADMIN_ADDR")]
        addr: String,
        /// Ask /health/ready (holds a lease with time left, clock fine, not draining) instead
        /// of /health/live.
        #[arg(long)]
        ready: bool,
        /// Give up after this long.
        #[arg(long, default_value = "2s")]
        timeout: String,
        #[command(flatten)]
        tls: idgen::commands::tls::ClientTls,
    },
    /// Fetch IDs from a running node and print them, one per line.
    Get {
        /// Node address (host:port).
        #[arg(long, default_value_t = ListenSection::default().listen.map_or_else(String::new, |a| a.to_string()), env = "IDGEN_ADDR")]
        addr: String,
        /// How many IDs.
        #[arg(short = 'n', long = "count", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
        #[command(flatten)]
        tls: idgen::commands::tls::ClientTls,
    },
    /// Print a shell completion script for idgen.
    #[command(after_help = "Install it where the shell looks, for example:\n  \
        bash: idgen completions bash > ~/.local/share/bash-completion/completions/idgen\n  \
        zsh:  idgen completions zsh > ~/.zfunc/_idgen   (with fpath+=~/.zfunc before compinit)\n  \
        fish: idgen completions fish > ~/.config/fish/completions/idgen.fish")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff: `idgen man | man -l -`), or write one page per command.
    Man {
        /// Write idgen.1 and one idgen-COMMAND.1 per command into this directory instead.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

/// The command line as `idgen` parses it, also what completions and the man page describe.
fn cli() -> clap::Command {
    // `serve` and `inspect` show their settings' defaults from the configuration's sections.
    let inspect = |c: clap::Command| {
        let mut c = idgen::config::with_defaults_in_help(c);
        for id in idgen::commands::INSPECT_IGNORES {
            c = c.mut_arg(id, |a| a.hide(true));
        }
        c
    };
    Cli::command()
        .mut_subcommand("serve", idgen::config::with_defaults_in_help)
        .mut_subcommand("inspect", inspect)
        .mut_subcommand("seq", |seq| {
            ["create", "alter", "drop", "list", "get"]
                .into_iter()
                .fold(seq, |seq, sub| seq.mut_subcommand(sub, inspect))
        })
        .mut_subcommand("store", |store| {
            ["upgrade", "floor", "restored"]
                .into_iter()
                .fold(store, |store, sub| store.mut_subcommand(sub, inspect))
        })
}

fn main() -> ExitCode {
    let matches = match cli().try_get_matches() {
        Ok(m) => m,
        Err(e) => return refused(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let (name, result) = match cli.command {
        Command::Serve(mut args) => {
            args.origins = origins("serve", &matches);
            return serve(*args);
        }
        Command::Get { addr, count, tls } => ("get", get(&addr, count, &tls)),
        Command::Health {
            addr,
            ready,
            timeout,
            tls,
        } => ("health", health(&addr, ready, &timeout, &tls)),
        Command::Layout(args) => match &args.command {
            None => (
                "layout",
                args.calc.as_ref().map_or_else(
                    || {
                        Err(Failure::Usage(
                            "give the calculator's flags (--nodes, --peak-rate, ...) or a subcommand (plan, schedule)".into(),
                        ))
                    },
                    layout_calc,
                ),
            ),
            Some(cmd) => {
                let sub = cmd.name();
                let origins = origins_of(&["layout", &sub[7..]], &matches);
                (sub, layout_cmd(cmd, origins))
            }
        },
        Command::Decode { ids, layout, json } => ("decode", decode(&ids, &layout, json)),
        Command::Bounds {
            from,
            to,
            layout,
            json,
        } => ("bounds", bounds(&from, &to, &layout, json)),
        Command::Inspect(mut args) => {
            args.origins = origins("inspect", &matches);
            ("inspect", inspect(&args))
        }
        Command::Seq(args) => {
            let sub = args.command.name();
            let origins = origins_of(&["seq", &sub[4..]], &matches);
            (sub, seq(&args.command, origins))
        }
        Command::Store(args) => {
            let sub = args.command.name();
            let origins = origins_of(&["store", &sub[6..]], &matches);
            (sub, store(&args.command, origins))
        }
        Command::Migrate(args) => (
            "migrate",
            args.plan().and_then(|text| write_stdout(text.as_bytes())),
        ),
        Command::Completions { shell } => ("completions", completions(shell)),
        Command::Man { out_dir } => ("man", man(out_dir.as_deref())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.report(name),
    }
}

/// Where the settings of subcommand `name` came from: flags or `IDGEN_*` variables.
fn origins(name: &str, matches: &clap::ArgMatches) -> Origins {
    origins_of(&[name], matches)
}

/// The origins of a nested subcommand's settings (`["seq", "create"]`).
fn origins_of(path: &[&str], matches: &clap::ArgMatches) -> Origins {
    let mut cmd = cli();
    let mut matches = matches;
    for name in path {
        match (cmd.find_subcommand(name), matches.subcommand_matches(name)) {
            (Some(c), Some(m)) => {
                cmd = c.clone();
                matches = m;
            }
            _ => return Origins::default(),
        }
    }
    Origins::of(&cmd, matches)
}

/// Exits on a command line clap refused. A value it could not parse that came from an
/// `IDGEN_*` variable (not from the flag clap names) is reported under the variable's name:
/// the user wrote the variable, not the flag.
fn refused(e: clap::Error) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        e.exit()
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        e.exit()
    };
    // `--shards <SHARDS>`: the flag's long name.
    let Some(long) = arg
        .split_whitespace()
        .next()
        .and_then(|f| f.strip_prefix("--"))
    else {
        e.exit()
    };
    let on_command_line =
        std::env::args().any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    let cmd = cli();
    let variable = cmd
        .get_subcommands()
        .flat_map(|c| c.get_arguments())
        .filter(|a| a.get_long() == Some(long))
        .find_map(|a| a.get_env())
        .map(|v| v.to_string_lossy().into_owned())
        .filter(|v| std::env::var_os(v).is_some());
    match variable {
        Some(variable) if !on_command_line => {
            let text = e.render().to_string();
            eprint!("{}", text.replace(&format!("'{arg}'"), &variable));
            ExitCode::from(idgen::commands::exit::USAGE)
        }
        _ => e.exit(),
    }
}

fn layout_calc(args: &idgen::commands::calc::LayoutCalcArgs) -> Result<(), Failure> {
    let text = args
        .needs()
        .and_then(|n| idgen::commands::calc::report(&n))
        .map_err(|e| Failure::Usage(e.to_string()))?;
    write_stdout(format!("{text}\n").as_bytes())
}

fn decode(ids: &[String], layout: &LayoutSource, json: bool) -> Result<(), Failure> {
    let gens = layout.generations()?;
    let lines = idgen::commands::decode(&gens, ids, json).map_err(Failure::Usage)?;
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    write_stdout(out.as_bytes())
}

fn bounds(from: &str, to: &str, layout: &LayoutSource, json: bool) -> Result<(), Failure> {
    use idgen::commands::bounds::{parse_time, report};
    let from = parse_time("from", from).map_err(Failure::Usage)?;
    let to = parse_time("to", to).map_err(Failure::Usage)?;
    let layout = layout.layout()?;
    let text = report(&layout, from, to, json).map_err(Failure::Usage)?;
    write_stdout(format!("{text}\n").as_bytes())
}

fn inspect(args: &InspectArgs) -> Result<(), Failure> {
    let (lease, log) = args.resolve()?;
    // Logs (the store's warnings) go to stderr; the report is stdout's alone.
    init_logging(&log)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Runtime(e.to_string()))?;
    let text = rt
        .block_on(idgen::commands::inspect(&lease, args.json))
        .map_err(Failure::Runtime)?;
    write_stdout(format!("{text}\n").as_bytes())
}

/// What a command against the store (`idgen store …`, `idgen seq …`) starts with: its store
/// settings resolved (errors name what the user wrote: the flag, the variable or the file key),
/// logging to stderr (the audit events, the store's warnings; the answer is stdout's alone) and
/// a runtime to run it on.
fn against_the_store(
    store: &idgen::commands::InspectArgs,
    origins: Origins,
) -> Result<
    (
        idgen::commands::InspectArgs,
        idgen::config::LeaseSection,
        tokio::runtime::Runtime,
    ),
    Failure,
> {
    let args = idgen::commands::InspectArgs {
        origins,
        ..store.clone()
    };
    let (lease, log) = args.resolve()?;
    init_logging(&log)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Runtime(e.to_string()))?;
    Ok((args, lease, rt))
}

fn store(cmd: &idgen::commands::store::StoreCommand, origins: Origins) -> Result<(), Failure> {
    use idgen::commands::store::{layout_for_empty_store, StoreCommand};
    let (args, lease, rt) = against_the_store(cmd.store(), origins)?;
    let empty_layout = || match cmd {
        StoreCommand::Restored { layout, .. } => {
            layout_for_empty_store(layout, &args, SystemClock::new().wall_ms())
        }
        _ => Err(Failure::Runtime("no cluster record".into())),
    };
    let text = rt.block_on(idgen::commands::store::run(cmd, &lease, empty_layout))?;
    write_stdout(text.as_bytes())
}

fn layout_cmd(
    cmd: &idgen::commands::generations::LayoutCommand,
    origins: Origins,
) -> Result<(), Failure> {
    let (_, lease, rt) = against_the_store(&cmd.args().store, origins)?;
    let text = rt.block_on(idgen::commands::generations::run(cmd, &lease))?;
    write_stdout(text.as_bytes())
}

fn seq(cmd: &idgen::commands::seq::SeqCommand, origins: Origins) -> Result<(), Failure> {
    use idgen::commands::seq::SeqCommand;
    let store = match cmd {
        SeqCommand::Next {
            name,
            count,
            addr,
            timeout,
            tls,
        } => {
            let values = idgen::commands::seq::next(name, *count, addr, timeout, tls)?;
            let text: String = values.iter().map(|v| format!("{v}\n")).collect();
            return write_stdout(text.as_bytes());
        }
        other => other
            .store()
            .ok_or_else(|| Failure::Usage("no store settings".into()))?,
    };
    let (_, lease, rt) = against_the_store(store, origins)?;
    let text = rt.block_on(idgen::commands::seq::run(cmd, &lease))?;
    write_stdout(format!("{text}\n").as_bytes())
}

fn get(addr: &str, count: u32, tls: &idgen::commands::tls::ClientTls) -> Result<(), Failure> {
    use std::io::Write;
    let mut conn =
        idgen::commands::node_conn::NodeConn::connect(addr, tls).map_err(|e| match e {
            Failure::Runtime(m) => Failure::Runtime(format!("cannot connect to {addr}: {m}")),
            usage => usage,
        })?;
    let ids = conn
        .ids(u64::from(count))
        .map_err(|e| Failure::Runtime(format!("{addr}: {e}")))?;
    let written = (|| {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for id in ids {
            writeln!(out, "{id}")?;
        }
        out.flush()
    })();
    idgen::commands::exit::written(written)
}

fn health(
    addr: &str,
    ready: bool,
    timeout: &str,
    tls: &idgen::commands::tls::ClientTls,
) -> Result<(), Failure> {
    use idgen::commands::health::{check, Health};
    let timeout = idgen::config::parse_duration("timeout", timeout)?;
    let what = if ready { "ready" } else { "live" };
    match check(addr, ready, timeout, tls)? {
        Health::Ok => write_stdout(format!("{addr}: {what}\n").as_bytes()),
        Health::Not(status, body) => Err(Failure::Runtime(format!(
            "{addr}: not {what} ({status}): {body}"
        ))),
    }
}

fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli(), "idgen", &mut script);
    write_stdout(&script)
}

fn man(out_dir: Option<&std::path::Path>) -> Result<(), Failure> {
    match out_dir {
        None => write_stdout(&idgen::commands::man::page(cli())),
        Some(dir) => {
            let written = idgen::commands::man::write_pages(cli(), dir)
                .map_err(|e| Failure::Runtime(format!("{}: {e}", dir.display())))?;
            let mut out = String::new();
            for p in written {
                out.push_str(&format!("{}\n", p.display()));
            }
            write_stdout(out.as_bytes())
        }
    }
}

/// Installs the log subscriber ([`idgen::logging`]); a bad level is a configuration error.
fn init_logging(log: &LogSection) -> Result<(), Failure> {
    Ok(idgen::logging::init(log)?)
}

/// A fatal message on stderr (before or beside the logs): an error, also to journald.
fn fatal(message: &str) {
    eprintln!("{}", idgen::logging::error_line(message));
}

fn serve(args: ServeArgs) -> ExitCode {
    let config = match args.resolve_to_run(SystemClock::new().wall_ms()) {
        Ok(c) => c,
        Err(e) => {
            fatal(&format!("idgen: configuration error: {e}"));
            return ExitCode::from(2);
        }
    };
    // The TLS files are read and checked now, like the store's: a bad one is a configuration
    // error (exit 2, which the unit does not restart on), also under --check-config.
    if let Err(e) = idgen::node::tls::ServerTls::new(&config.tls) {
        fatal(&format!(
            "idgen: configuration error: cannot set up TLS: {e}"
        ));
        return ExitCode::from(2);
    }
    // The log level, also one from RUST_LOG, is checked before anything starts.
    if let Err(e) = config.log.filter() {
        fatal(&format!("idgen: configuration error: {e}"));
        return ExitCode::from(2);
    }
    if args.check_config {
        // The file on stdout (`--check-config > resolved.toml` keeps it), the verdict apart.
        return match config.to_toml() {
            Ok(text) => {
                print!("{text}");
                eprintln!("configuration ok");
                ExitCode::SUCCESS
            }
            Err(e) => {
                fatal(&format!("idgen: configuration error: {e}"));
                ExitCode::from(2)
            }
        };
    }
    if let Err(e) = init_logging(&config.log) {
        fatal(&format!("idgen: configuration error: {}", e.message()));
        return ExitCode::from(e.code());
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("idgen-control")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            fatal(&format!("idgen: cannot start the control runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let json_logs = config.log.log_format == LogFormat::Json;
    rt.block_on(async move {
        let node = match Node::start(config).await {
            Ok(n) => n,
            Err(e) => {
                failed(json_logs, "start_failed", &e);
                return ExitCode::FAILURE;
            }
        };
        let view = node.lease().current();
        // In JSON mode stdout stays empty: a log pipeline reads one stream, and the addresses
        // are in the `node_started` event. In text mode, a banner for people and scripts.
        if !json_logs {
            if let Some(tls) = node.tls_addr() {
                println!("listening with TLS on {tls}");
            }
            if let Some(addr) = node.local_addr() {
                println!("listening on {addr}");
            }
            if let Some(admin) = node.admin_addr() {
                let scheme = if node.admin_is_tls() { "https" } else { "http" };
                println!("admin on {scheme}://{admin}");
            }
            if let Some(http) = node.http_addr() {
                let scheme = if node.http_is_tls() { "https" } else { "http" };
                println!("HTTP ID API on {scheme}://{http}");
            }
            if let Some(v) = &view {
                println!(
                    "worker IDs {} (generation {}), store {}",
                    v.grant.workers,
                    v.grant.generation,
                    node.config().lease.store
                );
            }
        }
        // The lease is held and every listener is up: tell systemd (Type=notify), if it
        // started us; without NOTIFY_SOCKET this does nothing.
        let status = format!(
            "serving on {}; worker IDs {}",
            node.local_addr()
                .or(node.tls_addr())
                .map_or_else(String::new, |a| a.to_string()),
            view.as_ref()
                .map_or_else(|| "none".to_string(), |v| v.grant.workers.to_string())
        );
        notify_systemd(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&status),
        ]);
        if let Err(e) = wait_for_signal().await {
            failed(
                json_logs,
                "signals_failed",
                &format!("cannot wait for signals: {e}"),
            );
        }
        notify_systemd(&[
            sd_notify::NotifyState::Stopping,
            sd_notify::NotifyState::Status("draining, then releasing the lease"),
        ]);
        match node.shutdown().await {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                failed(json_logs, "shutdown_failed", &format!("shutdown: {e}"));
                ExitCode::FAILURE
            }
        }
    })
}

/// A failure of a running node: in JSON mode an error event (stderr carries JSON only),
/// else a line `idgen: …`.
fn failed(json_logs: bool, event: &str, error: &dyn std::fmt::Display) {
    if json_logs {
        tracing::error!(event, error = %error, "idgen failed");
    } else {
        fatal(&format!("idgen: {error}"));
    }
}

/// Sends `states` to systemd's notification socket, if there is one; a failure is logged, never
/// fatal (the node serves either way).
fn notify_systemd(states: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(event = "systemd_notify_failed", error = %e, "cannot notify systemd");
    }
}

async fn wait_for_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!(event = "signal", signal = "SIGTERM", "shutting down"),
        _ = int.recv() => tracing::info!(event = "signal", signal = "SIGINT", "shutting down"),
    }
    Ok(())
}

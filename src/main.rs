//! The `idgen` command: `serve` runs a node; the other subcommands help operate one.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use idgen::clock::{Clock, SystemClock};
use idgen::commands::LayoutSource;
use idgen::config::{LeaseSection, ListenSection, LogFormat, ServeArgs};
use idgen::node::Node;
use mimalloc::MiMalloc;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// idgen: 64-bit, time-ordered, unique IDs, with timestamp-fenced worker leases.
#[derive(Parser)]
#[command(name = "idgen", version = idgen::build_info::VERSION_LINE.as_str(), about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node: lease worker IDs and answer the ID protocol.
    Serve(Box<ServeArgs>),
    /// Decode IDs: time (RFC 3339, UTC), region, worker, sequence.
    Decode {
        /// IDs in decimal (or the base62 / base32 forms of the clients).
        #[arg(required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        layout: LayoutSource,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a cluster from its store: layout, every lease, free worker IDs per region.
    Inspect {
        /// The store URL, as for `idgen serve --store`.
        #[arg(long, env = "IDGEN_STORE")]
        store: Option<String>,
        /// Directory of the embedded store.
        #[arg(long, env = "IDGEN_DATA_DIR")]
        data_dir: Option<std::path::PathBuf>,
        /// The cluster's namespace.
        #[arg(long, env = "IDGEN_NAMESPACE")]
        namespace: Option<String>,
        /// The cluster's lease safety period (counts expired leases as held for this long).
        #[arg(long)]
        lease_safety: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Work out a bit layout for a deployment: nodes, regions, peak rate, years.
    Layout(idgen::commands::calc::LayoutCalcArgs),
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
}

fn main() -> ExitCode {
    // `serve` and `inspect` show their settings' defaults from the configuration's sections.
    let command = Cli::command()
        .mut_subcommand("serve", idgen::config::with_defaults_in_help)
        .mut_subcommand("inspect", idgen::config::with_defaults_in_help);
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Get { addr, count, tls } => get(&addr, count, &tls),
        Command::Health {
            addr,
            ready,
            timeout,
            tls,
        } => health(&addr, ready, &timeout, &tls),
        Command::Layout(args) => layout_calc(&args),
        Command::Decode { ids, layout, json } => decode(&ids, &layout, json),
        Command::Inspect {
            store,
            data_dir,
            namespace,
            lease_safety,
            json,
        } => {
            // The `[lease]` section's defaults, as `idgen serve` has them.
            let d = LeaseSection::default();
            inspect(
                &store.unwrap_or_else(|| d.store.to_string()),
                &data_dir.unwrap_or(d.data_dir),
                &namespace.unwrap_or(d.namespace),
                &lease_safety.unwrap_or_else(|| idgen::config::format_duration(d.lease_safety)),
                json,
            )
        }
    }
}

fn layout_calc(args: &idgen::commands::calc::LayoutCalcArgs) -> ExitCode {
    match args.needs().and_then(|n| idgen::commands::calc::report(&n)) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idgen layout: {e}");
            ExitCode::from(2)
        }
    }
}

fn decode(ids: &[String], layout: &LayoutSource, json: bool) -> ExitCode {
    let layout = match layout.layout() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("idgen decode: {e}");
            return ExitCode::from(2);
        }
    };
    match idgen::commands::decode(&layout, ids, json) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idgen decode: {e}");
            ExitCode::from(2)
        }
    }
}

fn inspect(
    store: &str,
    data_dir: &std::path::Path,
    namespace: &str,
    safety: &str,
    json: bool,
) -> ExitCode {
    let url: idgen::store::StoreUrl = match store.parse() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("idgen inspect: store: {e}");
            return ExitCode::from(2);
        }
    };
    let safety = match idgen::config::parse_duration("lease_safety", safety) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("idgen inspect: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idgen inspect: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(idgen::commands::inspect(
        &url, data_dir, namespace, safety, json,
    )) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idgen inspect: {e}");
            ExitCode::FAILURE
        }
    }
}

fn get(addr: &str, count: u32, tls: &idgen::commands::tls::ClientTls) -> ExitCode {
    use std::io::Write;
    let mut conn = match idgen::commands::node_conn::NodeConn::connect(addr, tls) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("idgen get: cannot connect to {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ids = match conn.ids(u64::from(count)) {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("idgen get: {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for id in ids {
        if writeln!(out, "{id}").is_err() {
            return ExitCode::FAILURE;
        }
    }
    if out.flush().is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn health(
    addr: &str,
    ready: bool,
    timeout: &str,
    tls: &idgen::commands::tls::ClientTls,
) -> ExitCode {
    use idgen::commands::health::{check, Health};
    let timeout = match idgen::config::parse_duration("timeout", timeout) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("idgen health: {e}");
            return ExitCode::from(2);
        }
    };
    let what = if ready { "ready" } else { "live" };
    match check(addr, ready, timeout, tls) {
        Ok(Health::Ok) => {
            println!("{addr}: {what}");
            ExitCode::SUCCESS
        }
        Ok(Health::Not(status, body)) => {
            eprintln!("idgen health: {addr}: not {what} ({status}): {body}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("idgen health: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let config = match args.resolve(SystemClock::new().wall_ms()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("idgen: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    // The TLS files are read and checked now, like the store's: a bad one is a configuration
    // error (exit 2, which the unit does not restart on), also under --check-config.
    if let Err(e) = idgen::node::tls::ServerTls::new(&config.tls) {
        eprintln!("idgen: configuration error: cannot set up TLS: {e}");
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
                eprintln!("idgen: configuration error: {e}");
                ExitCode::from(2)
            }
        };
    }
    init_logging(config.log.log_format);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("idgen-control")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idgen: cannot start the control runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let node = match Node::start(config).await {
            Ok(n) => n,
            Err(e) => {
                eprintln!("idgen: {e}");
                return ExitCode::FAILURE;
            }
        };
        let view = node.lease().current();
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
                "worker IDs {}..{} (generation {}), store {}",
                v.grant.first,
                v.grant.first + v.grant.count,
                v.grant.generation,
                node.config().lease.store
            );
        }
        // The lease is held and every listener is up: tell systemd (Type=notify), if it
        // started us; without NOTIFY_SOCKET this does nothing.
        let status = format!(
            "serving on {}; worker IDs {}",
            node.local_addr()
                .or(node.tls_addr())
                .map_or_else(String::new, |a| a.to_string()),
            view.as_ref()
                .map_or_else(|| "none".to_string(), |v| v.grant.workers().to_string())
        );
        notify_systemd(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&status),
        ]);
        if let Err(e) = wait_for_signal().await {
            eprintln!("idgen: cannot wait for signals: {e}");
        }
        notify_systemd(&[
            sd_notify::NotifyState::Stopping,
            sd_notify::NotifyState::Status("draining, then releasing the lease"),
        ]);
        match node.shutdown().await {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("idgen: shutdown: {e}");
                ExitCode::FAILURE
            }
        }
    })
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

//! `ithaca-bench`: measures the MCP edge side by side with a bare axum
//! handler and a FastMCP server, plus trace appends, memory and start-up, in
//! one run that starts everything it measures on loopback and stops it.
//!
//! ```sh
//! cargo build --release -p ithaca -p ithaca-bench
//! target/release/ithaca-bench
//! ```
//!
//! The load comes from this binary's own driver on `hyper` (see
//! [`driver`]); every phase is bounded in requests and in time.

mod alerts;
mod appends;
mod backend;
mod bare;
mod disk;
mod driver;
mod fastmcp;
mod filters;
mod lateness;
mod live;
mod mcp;
mod procs;
mod report;
mod run;
mod toollist;

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "ithaca-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the probe backend (`bench_ping`); started by the benchmark.
    #[command(hide = true)]
    Backend {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Also listen on this unix socket.
        #[arg(long)]
        unix_socket: Option<PathBuf>,
    },
    /// Drive one MCP server with `tools/call bench_ping` and print the
    /// figures (for profiling by hand; the session must already be open).
    Load {
        /// `host:port` of the server.
        #[arg(long)]
        addr: String,
        /// Bearer token.
        #[arg(long)]
        token: String,
        /// `2026-07-28` or `2025-06-18` (which then initializes first).
        #[arg(long, default_value = "2026-07-28")]
        era: String,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, default_value_t = 1_000_000)]
        requests: u64,
        /// Requests per second (open loop); as fast as possible without it.
        #[arg(long)]
        rate: Option<f64>,
        /// Also print, per 100 ms of the run (see --slow-window-ms), how
        /// many calls took at least this many milliseconds (and the
        /// slowest): a tail from stalls shows as a few full windows.
        #[arg(long)]
        slow_ms: Option<f64>,
        /// The window of --slow-ms, in milliseconds.
        #[arg(long, default_value_t = 100.0)]
        slow_window_ms: f64,
        /// With --rate: send in bursts of --burst-s seconds, each after
        /// this many seconds of quiet (as agents pause between tasks).
        #[arg(long, requires = "burst_s", requires = "rate")]
        quiet_s: Option<f64>,
        /// The length of each burst of --quiet-s, in seconds.
        #[arg(long, requires = "quiet_s")]
        burst_s: Option<f64>,
    },
    /// Only the trace-append phases: concurrent appends into one session on
    /// SQLite and PostgreSQL (on the AppendEvents stream, or unary
    /// AppendEvent calls with --append-unary), with the gap-free check.
    Appends(RunArgs),
    /// The alerts phase: a large archive of cloned ZTF packets ingested into
    /// SQLite and PostgreSQL, 5″/30-day cone searches and crossmatches.
    Alerts(alerts::AlertsArgs),
    /// The filters phase: a counterpart-search pipeline previewed over a
    /// million-alert archive (SQLite; PostgreSQL smaller), alerts evaluated
    /// per second in total and per core, and what bounds it.
    Filters(filters::FiltersArgs),
    /// The live filter path: alerts ingested while active filter versions
    /// run on every new alert (none, ten on the candidate, one reading the
    /// history), ingest alerts/s and the filters' own alerts/s.
    FiltersLive(live::LiveArgs),
    /// The tool list an agent reads before it can work: `tools/list` as the
    /// agent key of `ithaca up` in bytes and in tokens (cl100k_base,
    /// o200k_base), and where the bytes go.
    ToolList(RunArgs),
    /// Serve the bare limit: a plain axum handler returning a fixed body;
    /// started by the benchmark.
    #[command(hide = true)]
    Bare {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// The response body to return for every POST /mcp.
        #[arg(long)]
        body_file: PathBuf,
    },
}

/// What one benchmark run measures and how hard.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Open connections (each sends its next request when the previous
    /// answer is in).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Requests per load phase, at most.
    #[arg(long, default_value_t = 40_000)]
    pub requests: u64,
    /// Seconds per load phase, at most.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Requests sent before each phase and not counted.
    #[arg(long, default_value_t = 300)]
    pub warmup: u64,
    /// Trace appends per database, at most (also bounded by --seconds).
    #[arg(long, default_value_t = 20_000)]
    pub appends: u64,
    /// Concurrent appenders to one session in the trace-append phases.
    #[arg(long, default_value_t = 16)]
    pub append_writers: usize,
    /// Send the trace appends as unary `AppendEvent` calls, as edges of
    /// earlier releases did, instead of as messages on the `AppendEvents`
    /// stream the edge uses.
    #[arg(long)]
    pub append_unary: bool,
    /// PostgreSQL for the trace-append phase; a fresh schema is created and
    /// dropped. `none` skips it.
    #[arg(
        long,
        env = "ITHACA_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub postgres_url: String,
    /// Skip the FastMCP anchor (no Python needed then).
    #[arg(long)]
    pub no_fastmcp: bool,
    /// The `ithaca` binary (default: next to this one).
    #[arg(long)]
    pub ithaca: Option<PathBuf>,
    /// Where the JSON report goes (default target/ithaca-bench/report.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Before each phase, wait up to this many seconds for the rest of the
    /// machine to go quiet (under 0.25 of a core busy over one second), so
    /// another build on a shared machine skews fewer figures. 0 never waits.
    #[arg(long, default_value_t = 60.0)]
    pub idle_wait: f64,
    /// The bench's edge reaches `ithaca up`'s services and the probe over
    /// loopback TCP, instead of over their unix sockets as `ithaca up`'s
    /// own edge does (and as every run before this switch did not).
    #[arg(long)]
    pub tcp_hops: bool,
    /// The Python that creates the FastMCP venv.
    #[arg(long, default_value = "python3")]
    pub python: String,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The probe backend stands for one of Ithaca's services, so it runs as
    // `ithaca` runs them: half the cores (one on two). Everything else
    // drives load or starts processes, and gets two.
    let workers = match cli.command {
        Some(Command::Backend { .. }) => {
            std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
        }
        _ => 2,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    match cli.command {
        Some(Command::Backend {
            listen,
            unix_socket,
        }) => runtime.block_on(backend::serve(listen, unix_socket)),
        Some(Command::Bare { listen, body_file }) => {
            runtime.block_on(bare::serve(listen, body_file))
        }
        Some(Command::Load {
            addr,
            token,
            era,
            concurrency,
            seconds,
            requests,
            rate,
            slow_ms,
            slow_window_ms,
            quiet_s,
            burst_s,
        }) => runtime.block_on(async move {
            if let Some(ms) = slow_ms {
                anyhow::ensure!(
                    ms.is_finite() && ms >= 0.0,
                    "--slow-ms: a number of milliseconds, 0 or more, not {ms}"
                );
            }
            anyhow::ensure!(
                slow_window_ms.is_finite() && slow_window_ms >= 1.0,
                "--slow-window-ms: a number of milliseconds, 1 or more, not {slow_window_ms}"
            );
            if let Some(rate) = rate {
                anyhow::ensure!(
                    rate.is_finite() && rate > 0.0,
                    "--rate: calls a second, more than 0, not {rate}"
                );
            }
            let quiet = match (quiet_s, burst_s) {
                (Some(quiet), Some(burst)) => {
                    anyhow::ensure!(
                        quiet.is_finite() && quiet >= 0.0 && burst.is_finite() && burst >= 0.001,
                        "--quiet-s and --burst-s: seconds, --quiet-s 0 or more and --burst-s \
                         0.001 or more, not {quiet} and {burst}"
                    );
                    Some(driver::Quiet {
                        quiet: std::time::Duration::from_secs_f64(quiet),
                        burst: std::time::Duration::from_secs_f64(burst),
                    })
                }
                _ => None,
            };
            let target = if era == mcp::LEGACY {
                mcp::initialize(&addr, &token).await?;
                mcp::legacy_call(&addr, &token)?
            } else {
                mcp::modern_call(&addr, &token)?
            };
            let spec = driver::Spec {
                concurrency,
                requests,
                duration: std::time::Duration::from_secs_f64(seconds),
                warmup: 100,
                rate,
                slow: slow_ms.map(|ms| std::time::Duration::from_secs_f64(ms / 1000.0)),
                quiet,
            };
            let wakes = lateness::Sampler::start();
            let outcome = driver::load(target, spec).await?;
            let late = wakes.finish();
            println!("{}", serde_json::to_string_pretty(&outcome)?);
            println!(
                "a 1 ms sleep beside the load woke late by p50 {:.3} ms, p99 {:.2} ms, at worst {:.1} ms; \
                 {:.1} % of the run in sleeps 1 ms late or more; a hand-off to another thread and back \
                 took p50 {:.3} ms, p99 {:.2} ms, at worst {:.1} ms",
                late.p50_ms,
                late.p99_ms,
                late.max_ms,
                late.stalled_share * 100.0,
                late.handoff_p50_ms,
                late.handoff_p99_ms,
                late.handoff_max_ms
            );
            if let Some(ms) = slow_ms {
                println!(
                    "calls of {ms} ms or more, by the {slow_window_ms} ms of the run they started in \
                     (the run started at {:.3} s after the Unix epoch):",
                    outcome.started_unix_ms / 1000.0
                );
                for b in driver::bursts(&outcome.slow, slow_window_ms) {
                    println!(
                        "  at {:>8.3} s: {:>5} calls, the slowest {:.2} ms",
                        b.from_ms / 1000.0,
                        b.calls,
                        b.slowest_ms
                    );
                }
            }
            Ok(())
        }),
        Some(Command::Alerts(args)) => {
            runtime.block_on(async move { alerts::run(args).await.map(|_| ()) })
        }
        Some(Command::ToolList(args)) => runtime.block_on(toollist::run(args)),
        Some(Command::Appends(args)) => runtime.block_on(run::appends_only(args)),
        Some(Command::Filters(args)) => {
            runtime.block_on(async move { filters::run(args).await.map(|_| ()) })
        }
        Some(Command::FiltersLive(args)) => {
            runtime.block_on(async move { live::run(args).await.map(|_| ()) })
        }
        None => runtime.block_on(run::run(cli.run)),
    }
}

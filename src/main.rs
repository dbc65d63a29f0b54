//! `ithaca`: one binary for every Ithaca process.
//!
//! - `ithaca up` runs the local stack (every service in one process, each on
//!   its own loopback port, real gRPC between them, SQLite files).
//! - `ithaca serve <service>` runs one service, as a Kubernetes pod does.
//! - `ithaca keys …` / `ithaca tenants …` administer a running auth service
//!   over gRPC, so they work against a laptop and a cluster alike.
//! - `ithaca connect <agent>` writes an agent's MCP configuration (stdio
//!   or HTTP) into that agent's own file.
//!
//! The commands live in the `ithaca` library (`src/lib.rs`); this file is
//! the command line and the runtime.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use ithaca::{accounts, admin, approvals, brokers, connect, ingest, mcp, serve, sessions, up};
use ithaca_kit::config::CommonArgs;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ithaca",
    version,
    about = "One MCP endpoint into a research platform of gRPC services"
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    /// Threads of the async runtime (0: half the cores, at least one). On a
    /// two-core machine one thread measured 30–40 % more tool calls per
    /// second than two: hand-offs between threads cost more than the work,
    /// and the other core is left to SQLite's and the kernel's threads.
    #[arg(
        long,
        env = "ITHACA_WORKER_THREADS",
        default_value_t = 0,
        global = true
    )]
    worker_threads: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the local stack: every service in one process, each on its own
    /// loopback port, SQLite under the data directory.
    Up(up::UpArgs),
    /// Run one service (edge, auth, session, skills, broker, approvals).
    Serve(serve::ServeArgs),
    /// Apply one service's database migrations and exit (the init step of
    /// a rolling upgrade).
    Migrate(serve::MigrateArgs),
    /// Create, list, revoke and verify API keys on a running auth service.
    #[command(subcommand)]
    Keys(admin::KeysCommand),
    /// Show or change a tenant's policy (administrators).
    #[command(subcommand)]
    Policy(approvals::PolicyCommand),
    /// List and decide approval requests (administrators).
    #[command(subcommand)]
    Approvals(approvals::ApprovalsCommand),
    /// List, show, close and archive research sessions (operators).
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// Add provider accounts (credentials are stored encrypted, never shown).
    #[command(subcommand)]
    Accounts(accounts::AccountsCommand),
    /// Configure alert brokers (credentials are stored sealed, never shown).
    #[command(subcommand)]
    Brokers(brokers::BrokersCommand),
    /// Load data into a running stack (daily bars, ZTF alerts, reference
    /// catalogs and GCN circulars and notices into the broker).
    #[command(subcommand)]
    Ingest(ingest::IngestCommand),
    /// Create and list tenants on a running auth service.
    #[command(subcommand)]
    Tenants(admin::TenantsCommand),
    /// Speak MCP over stdio for an agent that launches Ithaca (services run
    /// in-process unless their URLs are given).
    Mcp(mcp::McpArgs),
    /// Connect a local agent: write Ithaca's MCP server into its config
    /// file (Claude Desktop, Claude Code, Cursor, VS Code, Codex, Gemini
    /// CLI, Windsurf), after showing the diff.
    ///
    /// The stdio form (default) has the agent launch `ithaca mcp`; the HTTP
    /// form (`--url`, or the running stack's URL, and a key from
    /// `--key-env VAR` or `--key-stdin`) has it call `ithaca up`. `--print`
    /// writes nothing; keys are masked unless `--print --show-secret`.
    #[command(
        after_help = "Examples:\n  ithaca connect claude-code\n  ithaca connect cursor --key-env ITHACA_AGENT_KEY\n  ithaca connect codex --print"
    )]
    Connect(connect::ConnectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let threads = match cli.worker_threads {
        0 => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
        n => n,
    };
    builder.worker_threads(threads);
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("ithaca: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Up(args) => up::run(&cli.common, args).await,
            Command::Serve(args) => serve::run(&cli.common, args).await,
            Command::Migrate(args) => serve::migrate(&cli.common, args).await,
            Command::Keys(cmd) => admin::keys(&cli.common, cmd).await,
            Command::Tenants(cmd) => admin::tenants(&cli.common, cmd).await,
            Command::Ingest(cmd) => ingest::run(&cli.common, cmd).await,
            Command::Accounts(cmd) => accounts::run(&cli.common, cmd).await,
            Command::Brokers(cmd) => brokers::run(&cli.common, cmd).await,
            Command::Policy(cmd) => approvals::policy(&cli.common, cmd).await,
            Command::Approvals(cmd) => approvals::approvals(&cli.common, cmd).await,
            Command::Sessions(cmd) => sessions::run(&cli.common, cmd).await,
            Command::Mcp(args) => mcp::run(&cli.common, args).await,
            Command::Connect(args) => connect::run(&cli.common, args),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // The full cause chain, once, where the error leaves the process.
            eprintln!("ithaca: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

//! `ithaca connect <agent>`: the installer. It writes (or prints) the MCP
//! client configuration that makes a local agent reach Ithaca, in that
//! agent's own file and format.
//!
//! Two forms: **stdio**, where the agent launches this very binary as
//! `ithaca mcp` (absolute path, data directory and database in its
//! environment), and **HTTP**, where the agent calls the edge of a running
//! `ithaca up` (its URL read from the stack's `stack.json`) with a bearer
//! key the person hands over through an environment variable or stdin.
//!
//! Layout: [`agents`] knows each agent's file, format and fields; [`json`]
//! and [`toml`] merge one entry into a file's text without disturbing the
//! rest; [`secret`] masks what is printed; [`file`] reads and atomically
//! replaces the file.
//!
//! What it guarantees: the user's other servers and settings survive
//! (order, comments and layout included), our entry is replaced in place
//! and a second identical run writes nothing, a file that does not parse is
//! refused and left alone, nothing is written without a look at the diff
//! and a yes, and no secret is printed unless `--print --show-secret` asks.

mod agents;
mod file;
mod json;
mod secret;
mod toml;

use crate::mcp::Transport;
use crate::stack::{self, StackInfo};
use agents::{Agent, Entry, Env, Format, Target};
use anyhow::{Context, bail};
use ithaca_kit::config::CommonArgs;
use secret::Masker;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

pub use crate::stack::DEFAULT_NAME;

/// What merging an entry into a file came to.
#[derive(Debug)]
pub enum Outcome {
    /// The file already says what we would write.
    Unchanged,
    /// The file's new text.
    Changed(String),
}

#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// The agent whose configuration to write.
    #[arg(value_enum)]
    agent: Agent,
    /// stdio: the agent launches `ithaca mcp` itself. http: the agent calls
    /// a running `ithaca up`. [default: http when --url or a key flag is
    /// given, else stdio]
    #[arg(long, value_enum, ignore_case = true)]
    transport: Option<Transport>,
    /// The MCP URL for the HTTP form (default: the running stack's, from
    /// stack.json in the data directory).
    #[arg(long)]
    url: Option<String>,
    /// Read the bearer key from this environment variable (HTTP form).
    #[arg(long, value_name = "VAR", conflicts_with_all = ["key_stdin", "no_key"])]
    key_env: Option<String>,
    /// Read the bearer key from standard input, e.g. piped from a password
    /// manager (HTTP form; confirm with --yes, since stdin is taken).
    #[arg(long, conflicts_with = "no_key")]
    key_stdin: bool,
    /// Write the URL without a key, for an agent that signs in itself with
    /// OAuth (HTTP form; the edge does not offer OAuth yet).
    #[arg(long)]
    no_key: bool,
    /// The server's name in the agent's file.
    #[arg(long, default_value = DEFAULT_NAME)]
    name: String,
    /// Write this file instead of the agent's usual one.
    #[arg(long, value_name = "PATH", conflicts_with = "project")]
    file: Option<PathBuf>,
    /// Write the agent's file inside this project (workspace) directory,
    /// e.g. `.mcp.json` for Claude Code or `.vscode/mcp.json` for VS Code.
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// Print the snippet and write nothing.
    #[arg(long)]
    print: bool,
    /// With --print: show the key instead of masking it.
    #[arg(long, requires = "print")]
    show_secret: bool,
    /// Write without asking (needed when standard input is not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// The data directory: the one `ithaca mcp` uses (stdio form), or the
    /// one whose stack.json names the URL (HTTP form).
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// For the stdio form: the database `ithaca mcp` uses (see `ithaca up
    /// --database`).
    #[arg(long = "database", env = "DOOMBERG_DB", hide_env_values = true)]
    database: Option<String>,
}

pub fn run(common: &CommonArgs, args: ConnectArgs) -> anyhow::Result<()> {
    agents::check_name(&args.name)?;
    let target = match transport_of(&args)? {
        Transport::Stdio => stdio_target(common, &args)?,
        Transport::Http => http_target(&args)?,
    };
    let entry = args.agent.entry(&target)?;
    let masker = Masker::new(secrets(&target));
    let path = match (&args.file, &args.project) {
        (Some(file), _) => file.clone(),
        (None, Some(project)) => args.agent.project_file(project)?,
        (None, None) => args.agent.user_file(&Env::from_process())?,
    };
    if args.print {
        return print_snippet(&args, &entry, &path, &masker, holds_secret(&target));
    }

    let current = file::read(&path)?;
    let shown = current.path.display().to_string();
    let outcome = merge(args.agent, &current.text, &args.name, &entry).map_err(|e| {
        anyhow::anyhow!(
            "refusing to change {shown}: {}; nothing was written",
            masker.line(&format!("{e:#}"))
        )
    })?;
    let text = match outcome {
        Outcome::Unchanged => {
            println!(
                "{shown} already has the `{}` server as asked; nothing to change",
                args.name
            );
            return Ok(());
        }
        Outcome::Changed(text) => text,
    };

    let old_name = if current.exists {
        shown.as_str()
    } else {
        "/dev/null"
    };
    let diff = similar::TextDiff::from_lines(current.text.as_str(), text.as_str())
        .unified_diff()
        .context_radius(3)
        .header(old_name, &shown)
        .to_string();
    print!("{}", masker.text(&diff));
    std::io::stdout().flush().ok();

    if !args.yes && !confirm(&shown)? {
        println!("nothing written");
        return Ok(());
    }
    // A key is for the owner's eyes only; otherwise the file keeps the
    // mode its owner gave it.
    let mode = match (holds_secret(&target), current.mode) {
        (true, _) => 0o600,
        (false, Some(mode)) => mode,
        (false, None) => 0o644,
    };
    file::replace(&current, &text, mode)?;
    println!("wrote {shown} (mode {mode:o})");
    println!("next: {}", args.agent.reload_hint());
    Ok(())
}

fn merge(agent: Agent, text: &str, name: &str, entry: &Entry) -> anyhow::Result<Outcome> {
    match agent.format() {
        Format::Json {
            servers_key,
            comments,
        } => json::merge(text, servers_key, name, entry, comments),
        Format::CodexToml => toml::merge(text, name, entry),
    }
}

fn print_snippet(
    args: &ConnectArgs,
    entry: &Entry,
    path: &Path,
    masker: &Masker,
    secret: bool,
) -> anyhow::Result<()> {
    let (snippet, place) = match args.agent.format() {
        Format::Json { servers_key, .. } => (
            json::snippet(servers_key, &args.name, entry),
            format!("under \"{servers_key}\""),
        ),
        Format::CodexToml => (toml::snippet(&args.name, entry), "as a table".to_owned()),
    };
    if args.show_secret {
        print!("{snippet}");
    } else {
        print!("{}", masker.text(&snippet));
    }
    eprintln!(
        "nothing written; {} reads this {place} in {}",
        args.agent.title(),
        path.display()
    );
    if secret && !args.show_secret {
        eprintln!("the key is masked; add --show-secret to print it");
    }
    Ok(())
}

/// Ask on the terminal; refuse without one.
fn confirm(path: &str) -> anyhow::Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        bail!(
            "{path} not written: standard input is not a terminal to confirm on; \
             pass --yes to write it (the diff above is the change)"
        );
    }
    eprint!("write {path}? [y/N] ");
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    stdin.read_line(&mut answer).context("reading the answer")?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

fn transport_of(args: &ConnectArgs) -> anyhow::Result<Transport> {
    let http_flags = args.url.is_some() || args.key_env.is_some() || args.key_stdin || args.no_key;
    match args.transport {
        Some(Transport::Stdio) if http_flags => bail!(
            "--url, --key-env, --key-stdin and --no-key are for --transport http; \
             the stdio form needs no key"
        ),
        Some(transport) => Ok(transport),
        None if http_flags => Ok(Transport::Http),
        None => Ok(Transport::Stdio),
    }
}

/// The agent launches this binary as `ithaca mcp`, with what it needs to
/// find the same data from whatever directory the agent starts it in.
fn stdio_target(common: &CommonArgs, args: &ConnectArgs) -> anyhow::Result<Target> {
    if common.internal_key.is_some() {
        bail!(
            "the internal key is given inline (--internal-key or ITHACA_INTERNAL_KEY), and \
             ithaca connect never copies it into an agent's file: keep it in a file and pass \
             --internal-key-file FILE (the agent's `ithaca mcp` gets that path), or unset it \
             to use the data directory's internal.key"
        );
    }
    let exe = std::env::current_exe().context("finding the ithaca binary")?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    let data_dir = absolute(&args.data_dir)?;
    let mut env = vec![
        ("DOOMBERG_MCP_TRANSPORT".to_owned(), "stdio".to_owned()),
        ("ITHACA_DATA_DIR".to_owned(), utf8(&data_dir)?),
    ];
    if let Some(db) = args
        .database
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        env.push(("DOOMBERG_DB".to_owned(), absolute_database(db)?));
    }
    if let Some(key_file) = &common.internal_key_file {
        env.push((
            "ITHACA_INTERNAL_KEY_FILE".to_owned(),
            utf8(&absolute(key_file)?)?,
        ));
    }
    if !data_dir.exists() {
        eprintln!(
            "note: {} does not exist yet; the agent's first `ithaca mcp` creates it",
            data_dir.display()
        );
    }
    Ok(Target::Stdio {
        command: utf8(&exe)?,
        args: vec!["mcp".to_owned()],
        env,
    })
}

/// The agent calls the edge of a running stack.
fn http_target(args: &ConnectArgs) -> anyhow::Result<Target> {
    let url = match &args.url {
        Some(url) => check_url(url)?,
        None => stack_url(&args.data_dir)?,
    };
    let key = if let Some(var) = &args.key_env {
        Some(key_from_env(var)?)
    } else if args.key_stdin {
        Some(key_from_stdin()?)
    } else if args.no_key {
        None
    } else {
        bail!(
            "the HTTP form needs the agent's key: --key-env VAR or --key-stdin \
             (or --no-key for an agent that signs in with OAuth, which the edge does not offer yet)"
        );
    };
    if key.is_some() && url.starts_with("http://") && !is_loopback_url(&url) {
        eprintln!(
            "warning: {url} is plain HTTP to another machine; the key would travel unencrypted"
        );
    }
    Ok(Target::Http { url, key })
}

fn stack_url(data_dir: &Path) -> anyhow::Result<String> {
    let file = stack::stack_file(data_dir);
    if !file.exists() {
        bail!(
            "no running stack in {} (no stack.json): start `ithaca up` with the same \
             --data-dir, or pass --url",
            data_dir.display()
        );
    }
    StackInfo::read(data_dir).mcp_url.with_context(|| {
        format!(
            "{} does not name the MCP URL (a stack started by an older ithaca?): \
             restart `ithaca up` or pass --url",
            file.display()
        )
    })
}

/// An http(s) URL a header-less config can carry; a bare origin gets `/mcp`.
fn check_url(url: &str) -> anyhow::Result<String> {
    let url = url.trim();
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .context("--url must start with http:// or https://")?;
    if rest.is_empty() || rest.starts_with('/') {
        bail!("--url has no host");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!("--url must not contain spaces or control characters");
    }
    if rest.contains('/') {
        Ok(url.to_owned())
    } else {
        Ok(format!("{url}/mcp"))
    }
}

fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split('/').next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    host == "localhost"
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

fn key_from_env(var: &str) -> anyhow::Result<String> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() => check_key(value.trim()),
        Ok(_) | Err(std::env::VarError::NotPresent) => bail!("{var} is not set or is empty"),
        Err(std::env::VarError::NotUnicode(_)) => bail!("{var} is not valid text"),
    }
}

fn key_from_stdin() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        // Typing it would echo it on the screen.
        bail!(
            "--key-stdin reads a piped key (e.g. `pass show ithaca | ithaca connect … --key-stdin --yes`); \
             standard input is a terminal, so use --key-env VAR instead"
        );
    }
    let mut text = String::new();
    stdin
        .lock()
        .take(64 * 1024)
        .read_to_string(&mut text)
        .context("reading the key from standard input")?;
    if text.trim().is_empty() {
        bail!("standard input held no key");
    }
    check_key(text.trim())
}

/// A key must fit in an `Authorization` header as it is.
fn check_key(key: &str) -> anyhow::Result<String> {
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("the key has characters an HTTP header cannot carry (spaces or control characters)");
    }
    if !key.starts_with("dmbg_") {
        eprintln!("warning: the key does not look like an Ithaca key (dmbg_…); writing it anyway");
    }
    Ok(key.to_owned())
}

/// What must never be printed: the key, and a database password.
fn secrets(target: &Target) -> Vec<String> {
    match target {
        Target::Http { key: Some(key), .. } => vec![key.clone()],
        Target::Http { key: None, .. } => Vec::new(),
        Target::Stdio { env, .. } => env.iter().filter_map(|(_, v)| url_password(v)).collect(),
    }
}

fn holds_secret(target: &Target) -> bool {
    !secrets(target).is_empty()
}

fn url_password(value: &str) -> Option<String> {
    let (_, rest) = value.split_once("://")?;
    let authority = rest.split('/').next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then(|| password.to_owned())
}

/// A PostgreSQL URL as it is; a SQLite path made absolute, since the agent
/// starts `ithaca mcp` in a directory of its own choosing.
fn absolute_database(db: &str) -> anyhow::Result<String> {
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        return Ok(db.to_owned());
    }
    let path = db
        .strip_prefix("sqlite://")
        .or_else(|| db.strip_prefix("sqlite:"))
        .unwrap_or(db);
    utf8(&absolute(Path::new(path))?)
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("making {} absolute", path.display()))
}

fn utf8(path: &Path) -> anyhow::Result<String> {
    path.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{} is not valid UTF-8", path.display()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use agents::{Entry, Val};

    /// The stdio entry the format tests merge.
    pub(crate) fn stdio_entry() -> Entry {
        Entry {
            fields: vec![
                ("command".to_owned(), Val::Str("/bin/ithaca".to_owned())),
                ("args".to_owned(), Val::List(vec!["mcp".to_owned()])),
                (
                    "env".to_owned(),
                    Val::Map(vec![("ITHACA_DATA_DIR".to_owned(), "/d".to_owned())]),
                ),
            ],
        }
    }

    /// The text of a merge that changed the file.
    pub(crate) fn changed(outcome: Outcome) -> String {
        match outcome {
            Outcome::Changed(text) => text,
            Outcome::Unchanged => panic!("expected a change"),
        }
    }

    #[test]
    fn urls_are_checked_and_completed() {
        assert_eq!(
            check_url("http://127.0.0.1:8080").expect("ok"),
            "http://127.0.0.1:8080/mcp"
        );
        assert_eq!(check_url(" https://h/mcp ").expect("ok"), "https://h/mcp");
        for bad in [
            "ftp://h",
            "http://",
            "http:///x",
            "127.0.0.1:8080",
            "http://h/a b",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        assert!(is_loopback_url("http://127.0.0.1:8080/mcp"));
        assert!(is_loopback_url("http://localhost/mcp"));
        assert!(is_loopback_url("http://[::1]:80/mcp"));
        assert!(!is_loopback_url("http://10.0.0.1/mcp"));
        assert!(!is_loopback_url("http://127.0.0.1.evil.example/mcp"));
    }

    #[test]
    fn keys_must_fit_a_header() {
        assert!(check_key("dmbg_test_abc_def").is_ok());
        assert!(check_key("dmbg a").is_err());
        assert!(check_key("dmbg\r\nX-Evil: 1").is_err());
        assert!(check_key("dmbgé").is_err());
    }

    #[test]
    fn database_passwords_count_as_secrets() {
        assert_eq!(url_password("postgres://u:pw@h/db").as_deref(), Some("pw"));
        assert_eq!(url_password("postgres://u@h/db"), None);
        assert_eq!(url_password("/tmp/x.db"), None);
        assert_eq!(
            absolute_database("postgres://u:pw@h/db").expect("ok"),
            "postgres://u:pw@h/db"
        );
        let sqlite = absolute_database("sqlite:rel.db").expect("ok");
        assert!(Path::new(&sqlite).is_absolute(), "{sqlite}");
        assert!(sqlite.ends_with("rel.db"), "{sqlite}");
    }
}

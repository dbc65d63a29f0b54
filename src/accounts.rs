//! `ithaca accounts add`: register a provider account and its credential with
//! the broker. The credential is read from stdin or a file, never from the
//! command line (which other users of the machine can see), and the broker
//! stores it encrypted.

use crate::stack::{self, StackInfo};
use anyhow::{Context, bail};
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum AccountsCommand {
    /// Add a provider account with its credential.
    Add {
        /// Provider id, for example `ibkr`.
        #[arg(long)]
        provider: String,
        /// A label to recognise the account by.
        #[arg(long)]
        label: String,
        /// Connection details as a JSON object (host, quote_path, …); never shown to agents.
        #[arg(long, default_value = "{}")]
        config_json: String,
        /// Read the credential from this file.
        #[arg(long, conflicts_with = "credential_stdin")]
        credential_file: Option<PathBuf>,
        /// Read the credential from standard input.
        #[arg(long)]
        credential_stdin: bool,
        /// The broker service URL (default: the local stack's).
        #[arg(long, env = "ITHACA_BROKER_URL")]
        broker_url: Option<String>,
        /// The tenant (default: the local stack's).
        #[arg(long, env = "ITHACA_TENANT")]
        tenant: Option<String>,
        /// The local stack's data directory.
        #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
    },
}

pub async fn run(common: &CommonArgs, cmd: AccountsCommand) -> anyhow::Result<()> {
    let AccountsCommand::Add {
        provider,
        label,
        config_json,
        credential_file,
        credential_stdin,
        broker_url,
        tenant,
        data_dir,
    } = cmd;
    let config: serde_json::Value =
        serde_json::from_str(&config_json).context("--config-json is not JSON")?;
    if !config.is_object() {
        bail!("--config-json must be a JSON object");
    }
    let credential = match (credential_file, credential_stdin) {
        (Some(path), _) => {
            std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?
        }
        (None, true) => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the credential from stdin")?;
            text
        }
        (None, false) => String::new(),
    };
    let info = StackInfo::read(&data_dir);
    let url = broker_url
        .or(info.broker_url)
        .unwrap_or_else(|| crate::services::Service::Broker.local_url());
    let tenant_id = tenant
        .or(info.tenant_id)
        .context("no tenant: pass --tenant (or run against the local stack)")?;
    let key = common.internal_key(&stack::key_file(&data_dir))?;
    let mut broker = crate::ingest::broker_client(&url, key)?;
    let account = broker
        .add_account(pb::AddAccountRequest {
            tenant_id,
            provider,
            label,
            config: Some(ithaca_kit::json::to_struct(config)),
            credential: credential.trim().to_owned(),
        })
        .await
        .map_err(|s| anyhow::anyhow!("{}: {}", s.code().description(), s.message()))?
        .into_inner();
    println!(
        "account {} ({}, {}): credential {}",
        account.account_id,
        account.provider,
        account.label,
        if account.credential_configured {
            "stored encrypted"
        } else {
            "not configured"
        }
    );
    Ok(())
}

//! `ithaca brokers add`: configure an alert broker with the operations it
//! answers and its connection details (`altdata`) and credential, which the
//! broker service stores sealed and never returns. The credential is read
//! from stdin or a file, never from the command line.

use crate::ingest::Target;
use anyhow::{Context, bail};
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::alert_service_client::AlertServiceClient;
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum BrokersCommand {
    /// Add a broker.
    Add {
        /// Broker id (what agents pass as `broker_id`).
        #[arg(long)]
        id: String,
        /// Human-readable name.
        #[arg(long)]
        name: String,
        /// Operations it answers: alerts, photometry, crossmatch (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        operations: Vec<String>,
        /// Survey (default ZTF).
        #[arg(long, default_value = "ZTF")]
        survey: String,
        /// Connection details as a JSON object (hosts, topics, group ids); sealed.
        #[arg(long, default_value = "{}")]
        altdata_json: String,
        /// Read the credential from this file.
        #[arg(long, conflicts_with = "credential_stdin")]
        credential_file: Option<PathBuf>,
        /// Read the credential from standard input.
        #[arg(long)]
        credential_stdin: bool,
        #[command(flatten)]
        target: Target,
    },
}

pub async fn run(common: &CommonArgs, cmd: BrokersCommand) -> anyhow::Result<()> {
    let BrokersCommand::Add {
        id,
        name,
        operations,
        survey,
        altdata_json,
        credential_file,
        credential_stdin,
        target,
    } = cmd;
    let altdata: serde_json::Value =
        serde_json::from_str(&altdata_json).context("--altdata-json is not JSON")?;
    if !altdata.is_object() {
        bail!("--altdata-json must be a JSON object");
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
    let mut alerts = AlertServiceClient::new(crate::ingest::channel(common, &target)?);
    let added = alerts
        .add_broker(pb::AddBrokerRequest {
            broker_id: id,
            name,
            survey,
            operations,
            altdata: Some(ithaca_kit::json::to_struct(altdata)),
            credential: credential.trim().to_owned(),
        })
        .await
        .map_err(|s| anyhow::anyhow!("{}: {}", s.code().description(), s.message()))?
        .into_inner();
    println!(
        "broker {} ({}): answers {}; credential {}",
        added.broker_id,
        added.name,
        added.operations.join(", "),
        if added.credential_configured {
            "stored encrypted"
        } else {
            "not configured"
        }
    );
    Ok(())
}

//! Administration commands that call a running auth service over gRPC with a
//! system principal signed by the internal key.

use crate::stack::{self, StackInfo};
use anyhow::{Context, bail};
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::config::CommonArgs;
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as pb;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use std::path::PathBuf;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// An auth client that signs as the system.
pub type AuthClient = AuthServiceClient<InterceptedService<Channel, Outbound>>;

/// Where to find the auth service and the tenant.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The auth service URL (default: the local stack's, from stack.json, or
    /// the auth service's default port on 127.0.0.1).
    #[arg(long, env = "ITHACA_AUTH_URL")]
    auth_url: Option<String>,
    /// The tenant (default: the local stack's, or the only tenant there is).
    #[arg(long, env = "ITHACA_TENANT")]
    tenant: Option<String>,
    /// The local stack's data directory (for stack.json and internal.key).
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
}

#[derive(Debug, clap::Subcommand)]
pub enum KeysCommand {
    /// Create a key and print its token (shown this once).
    Create {
        #[command(flatten)]
        target: Target,
        /// A scope to grant; repeat for several (data:read, strategy:author,
        /// runs:write, runs:cancel, approvals:read, approvals:decide,
        /// artifacts:read, filters:write, comments:write).
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Who will use the key: human or agent.
        #[arg(long)]
        actor: String,
        /// A label to recognise the key by.
        #[arg(long, default_value = "")]
        label: String,
        /// Deployment tag in the token (test, dev, staging, prod).
        #[arg(long, default_value = "test")]
        env: String,
    },
    /// List keys (never secrets).
    List {
        #[command(flatten)]
        target: Target,
        /// Include revoked keys.
        #[arg(long)]
        all: bool,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key by id.
    Revoke {
        #[command(flatten)]
        target: Target,
        /// The key id (32 hex digits, the third part of the token).
        key_id: String,
    },
    /// Check a token; exits non-zero when it does not verify.
    Verify {
        #[command(flatten)]
        target: Target,
        /// The token, or - to read it from stdin.
        token: String,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum TenantsCommand {
    /// Create a tenant.
    Create {
        #[command(flatten)]
        target: Target,
        /// Display name.
        name: String,
    },
    /// List tenants.
    List {
        #[command(flatten)]
        target: Target,
    },
}

impl Target {
    fn connect(&self, common: &CommonArgs) -> anyhow::Result<AuthClient> {
        let info = StackInfo::read(&self.data_dir);
        let url = self
            .auth_url
            .clone()
            .or(info.auth_url)
            .unwrap_or_else(|| crate::services::Service::Auth.local_url());
        let key = common.internal_key(&stack::key_file(&self.data_dir))?;
        Ok(AuthServiceClient::with_interceptor(
            client::channel(&url)?,
            Outbound::new(key, Principal::system("")),
        ))
    }

    async fn tenant(&self, auth: &mut AuthClient) -> anyhow::Result<String> {
        if let Some(t) = self
            .tenant
            .clone()
            .or(StackInfo::read(&self.data_dir).tenant_id)
        {
            return Ok(t);
        }
        let tenants = auth
            .list_tenants(pb::ListTenantsRequest {})
            .await
            .context("listing tenants")?
            .into_inner()
            .tenants;
        match tenants.as_slice() {
            [only] => Ok(only.tenant_id.clone()),
            [] => bail!("there are no tenants yet; create one with `ithaca tenants create <name>`"),
            _ => bail!("there are several tenants; choose one with --tenant"),
        }
    }
}

pub async fn keys(common: &CommonArgs, cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::Create {
            target,
            scopes,
            actor,
            label,
            env,
        } => {
            let actor = match actor.as_str() {
                "human" => pb::Actor::Human,
                "agent" => pb::Actor::Agent,
                other => bail!("--actor: {other:?} is neither human nor agent"),
            };
            let mut auth = target.connect(common)?;
            let tenant_id = target.tenant(&mut auth).await?;
            let created = auth
                .create_key(pb::CreateKeyRequest {
                    tenant_id,
                    scopes,
                    actor: actor as i32,
                    label,
                    env,
                })
                .await
                .map_err(status_error)?
                .into_inner();
            let key = created.key.context("auth returned no key")?;
            println!("key id  {}", key.key_id);
            println!("scopes  {}", key.scopes.join(" "));
            println!("token   {}", created.token);
            eprintln!("the token is shown this once; store it now");
        }
        KeysCommand::List { target, all, json } => {
            let mut auth = target.connect(common)?;
            let tenant_id = target.tenant(&mut auth).await?;
            let keys = auth
                .list_keys(pb::ListKeysRequest {
                    tenant_id,
                    include_revoked: all,
                })
                .await
                .map_err(status_error)?
                .into_inner()
                .keys;
            for k in &keys {
                let actor = if k.actor == pb::Actor::Human as i32 {
                    "human"
                } else {
                    "agent"
                };
                if json {
                    let line = serde_json::json!({
                        "key_id": k.key_id, "env": k.env, "actor": actor, "scopes": k.scopes,
                        "label": k.label, "created_at": k.created_at,
                        "last_used_at": k.last_used_at, "revoked_at": k.revoked_at,
                    });
                    println!("{line}");
                } else {
                    let state = if k.revoked_at.is_empty() {
                        "active"
                    } else {
                        "revoked"
                    };
                    let used = if k.last_used_at.is_empty() {
                        "never"
                    } else {
                        &k.last_used_at
                    };
                    println!(
                        "{}  {actor:<5}  {state:<7}  last used {used}  {}  [{}]",
                        k.key_id,
                        k.label,
                        k.scopes.join(" ")
                    );
                }
            }
            if keys.is_empty() && !json {
                println!("no keys");
            }
        }
        KeysCommand::Revoke { target, key_id } => {
            let mut auth = target.connect(common)?;
            let tenant_id = target.tenant(&mut auth).await?;
            let key = auth
                .revoke_key(pb::RevokeKeyRequest { tenant_id, key_id })
                .await
                .map_err(status_error)?
                .into_inner();
            println!("revoked {} at {}", key.key_id, key.revoked_at);
        }
        KeysCommand::Verify { target, token } => {
            let token = if token == "-" {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                line.trim().to_owned()
            } else {
                token
            };
            let mut auth = target.connect(common)?;
            let verified = auth
                .verify_key(pb::VerifyKeyRequest { token })
                .await
                .map_err(status_error)?
                .into_inner();
            println!(
                "valid: tenant {} key {} scopes [{}]",
                verified.tenant_id,
                verified.key_id,
                verified.scopes.join(" ")
            );
        }
    }
    Ok(())
}

pub async fn tenants(common: &CommonArgs, cmd: TenantsCommand) -> anyhow::Result<()> {
    match cmd {
        TenantsCommand::Create { target, name } => {
            let mut auth = target.connect(common)?;
            let t = auth
                .create_tenant(pb::CreateTenantRequest { name })
                .await
                .map_err(status_error)?
                .into_inner();
            println!("{}  {}", t.tenant_id, t.name);
        }
        TenantsCommand::List { target } => {
            let mut auth = target.connect(common)?;
            let list = auth
                .list_tenants(pb::ListTenantsRequest {})
                .await
                .map_err(status_error)?
                .into_inner()
                .tenants;
            for t in list {
                println!("{}  {}  created {}", t.tenant_id, t.name, t.created_at);
            }
        }
    }
    Ok(())
}

/// A gRPC status as a one-line error a person can act on.
fn status_error(status: tonic::Status) -> anyhow::Error {
    match status.code() {
        tonic::Code::Unavailable => anyhow::anyhow!(
            "the auth service is unreachable ({}); is `ithaca up` running?",
            status.message()
        ),
        code => anyhow::anyhow!("{}: {}", code.description(), status.message()),
    }
}

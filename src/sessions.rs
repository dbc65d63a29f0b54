//! `ithaca sessions …`: an operator's view of research sessions, over gRPC
//! with a system principal in one tenant.

use crate::stack::{self, StackInfo};
use anyhow::Context;
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::config::CommonArgs;
use ithaca_kit::json;
use ithaca_kit::principal::Principal;
use ithaca_proto::session::v1 as pb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use std::path::PathBuf;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Client = SessionServiceClient<InterceptedService<Channel, Outbound>>;

/// Where the session service is and which tenant to act in.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The session service URL (default: the local stack's).
    #[arg(long, env = "ITHACA_SESSION_URL")]
    session_url: Option<String>,
    /// The tenant (default: the local stack's).
    #[arg(long, env = "ITHACA_TENANT")]
    tenant: Option<String>,
    /// The local stack's data directory (for stack.json and internal.key).
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
}

impl Target {
    fn connect(&self, common: &CommonArgs) -> anyhow::Result<Client> {
        let info = StackInfo::read(&self.data_dir);
        let url = self
            .session_url
            .clone()
            .or(info.session_url)
            .unwrap_or_else(|| crate::services::Service::Session.local_url());
        let tenant = self
            .tenant
            .clone()
            .or(info.tenant_id)
            .context("no tenant: pass --tenant (or run against the local stack)")?;
        let key = common.internal_key(&stack::key_file(&self.data_dir))?;
        Ok(SessionServiceClient::with_interceptor(
            client::channel(&url)?,
            Outbound::new(key, Principal::system(tenant)),
        ))
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum SessionsCommand {
    /// The tenant's sessions, newest first.
    List {
        #[command(flatten)]
        target: Target,
        /// Only sessions with this status (open, closed, archived).
        #[arg(long)]
        status: Option<String>,
        /// Only sessions opened by this agent (a key id).
        #[arg(long)]
        agent: Option<String>,
        /// At most this many (at most 100).
        #[arg(long, default_value_t = 25)]
        limit: i32,
    },
    /// One session: its prompts and its trace.
    Show {
        #[command(flatten)]
        target: Target,
        session_id: String,
        /// Print at most this many trace events (from the start).
        #[arg(long, default_value_t = 1000)]
        events: i32,
    },
    /// Close a session; calls already running finish.
    Close {
        #[command(flatten)]
        target: Target,
        session_id: String,
    },
    /// Archive a closed session: its trace leaves the hot table.
    Archive {
        #[command(flatten)]
        target: Target,
        session_id: String,
    },
}

pub async fn run(common: &CommonArgs, cmd: SessionsCommand) -> anyhow::Result<()> {
    match cmd {
        SessionsCommand::List {
            target,
            status,
            agent,
            limit,
        } => {
            let mut client = target.connect(common)?;
            let page = client
                .list_sessions(pb::ListSessionsRequest {
                    status,
                    agent_id: agent,
                    limit,
                    ..Default::default()
                })
                .await?
                .into_inner();
            println!("SESSION\tSTATUS\tAGENT\tEVENTS\tUPDATED\tTITLE");
            for s in page.sessions {
                let d = s.session.unwrap_or_default();
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    d.session_id, d.status, s.agent_id, s.last_seq, s.updated_at, d.title
                );
            }
            if !page.next_page_token.is_empty() {
                eprintln!("(more: raise --limit or filter)");
            }
        }
        SessionsCommand::Show {
            target,
            session_id,
            events,
        } => {
            let mut client = target.connect(common)?;
            let d = client
                .get_session(pb::GetSessionRequest {
                    session_id: session_id.clone(),
                })
                .await?
                .into_inner();
            println!(
                "session  {}\ntitle    {}\nstatus   {}\nopened   {}",
                d.session_id, d.title, d.status, d.created_at
            );
            if let (Some(kind), Some(id)) = (&d.subject_kind, &d.subject_id) {
                println!("subject  {kind} {id}");
            }
            let prompts = client
                .list_prompts(pb::ListPromptsRequest {
                    session_id: session_id.clone(),
                })
                .await?
                .into_inner()
                .prompts;
            for p in prompts {
                println!("prompt {} ({}): {}", p.position, p.created_at, p.text);
            }
            let read = client
                .read_events(pb::ReadEventsRequest {
                    session_id,
                    after_seq: 0,
                    limit: Some(events),
                })
                .await?
                .into_inner();
            for e in read.events {
                let payload = e.payload.map(json::from_struct).unwrap_or_default();
                println!("{:>5} {} {:<16} {}", e.seq, e.created_at, e.r#type, payload);
            }
        }
        SessionsCommand::Close { target, session_id } => {
            let d = target
                .connect(common)?
                .close_session(pb::CloseSessionRequest {
                    session_id: Some(session_id),
                })
                .await?
                .into_inner();
            println!("{} {}", d.session_id, d.status);
        }
        SessionsCommand::Archive { target, session_id } => {
            let d = target
                .connect(common)?
                .archive_session(pb::ArchiveSessionRequest { session_id })
                .await?
                .into_inner();
            println!("{} {}", d.session_id, d.status);
        }
    }
    Ok(())
}

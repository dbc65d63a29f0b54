//! Ithaca's gRPC contract.
//!
//! Generated prost messages and tonic clients/servers for every service
//! package, plus [`FILE_DESCRIPTOR_SET`]: the encoded descriptor set of all
//! `.proto` files (imports and source info included). The MCP edge reflects on
//! it to turn annotated RPCs into tools, and every service serves it through
//! gRPC server reflection.
//!
//! This crate depends on nothing of Ithaca's; every other crate may depend on it.

#![allow(clippy::all, missing_docs)]

pub mod annotations;
pub mod codes;

pub use codes::DomainCode;

/// The encoded `google.protobuf.FileDescriptorSet` of every Ithaca proto file,
/// with source info (comments) and imported well-known types.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/ithaca_descriptor.bin"));

pub mod mcp {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/ithaca.mcp.v1.rs"));
    }
}

pub mod auth {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/ithaca.auth.v1.rs"));
    }
}

pub mod session {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/ithaca.session.v1.rs"));
    }
}

pub mod skills {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/ithaca.skills.v1.rs"));
    }
}

pub mod approvals {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/ithaca.approvals.v1.rs"));
    }
}

pub mod broker {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/ithaca.broker.v1.rs"));
    }
}

/// Fully qualified names of the gRPC services, as health checks and
/// reflection name them.
pub mod service_names {
    pub const AUTH: &str = "ithaca.auth.v1.AuthService";
    pub const SESSION: &str = "ithaca.session.v1.SessionService";
    /// Market data and provider accounts.
    pub const BROKER: &str = "ithaca.broker.v1.BrokerService";
    /// The alert archive, its brokers and time conversion, served by the
    /// broker process.
    pub const ALERTS: &str = "ithaca.broker.v1.AlertService";
    /// Reference catalogs and the crossmatch, served by the broker process.
    pub const CATALOGS: &str = "ithaca.broker.v1.CatalogService";
    /// Broker filters, served by the broker process beside `BROKER`.
    pub const FILTERS: &str = "ithaca.broker.v1.FilterService";
    /// GCN events, served by the broker process.
    pub const GCN: &str = "ithaca.broker.v1.GcnService";
    /// SEC fundamentals, filings and insider activity, served by the broker
    /// process.
    pub const FUNDAMENTALS: &str = "ithaca.broker.v1.FundamentalsService";
    pub const SKILLS: &str = "ithaca.skills.v1.SkillsService";
    pub const APPROVALS: &str = "ithaca.approvals.v1.ApprovalsService";
}

/// The scopes a key may be granted (seed 000's table): the one list the auth
/// service parses, the edge advertises and local callers hold.
pub mod scopes {
    pub const DATA_READ: &str = "data:read";
    pub const STRATEGY_AUTHOR: &str = "strategy:author";
    pub const RUNS_WRITE: &str = "runs:write";
    pub const RUNS_CANCEL: &str = "runs:cancel";
    pub const APPROVALS_READ: &str = "approvals:read";
    pub const APPROVALS_DECIDE: &str = "approvals:decide";
    pub const ARTIFACTS_READ: &str = "artifacts:read";
    /// Create broker filters and their versions, validate and activate them
    /// (seed 003; activation by an agent still needs a person's approval).
    pub const FILTERS_WRITE: &str = "filters:write";
    /// Post comments in a GCN event's discussion (seed 003).
    pub const COMMENTS_WRITE: &str = "comments:write";

    /// Every scope: seed 000's table in its order, then seed 003's writes.
    pub const ALL: [&str; 9] = [
        DATA_READ,
        STRATEGY_AUTHOR,
        RUNS_WRITE,
        RUNS_CANCEL,
        APPROVALS_READ,
        APPROVALS_DECIDE,
        ARTIFACTS_READ,
        FILTERS_WRITE,
        COMMENTS_WRITE,
    ];
}

/// What an agent is told when it calls a tool without an open session: the
/// session service's refusal and the edge's tool error say the same.
pub const NO_ACTIVE_SESSION_MESSAGE: &str = "Call session_context before calling any other tool.";

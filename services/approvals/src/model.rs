//! Approval domain types: where a request is in its life, what a person
//! decides, and where a strategy is promoted to.

ithaca_kit::text_enum! {
    /// Where an approval request is. `Pending` moves to `Approved`,
    /// `Denied` or `Expired`; `Approved` moves on to `Executed` or `Failed`
    /// once the call has run.
    pub enum ApprovalStatus {
        Pending = "pending",
        Approved = "approved",
        Denied = "denied",
        Expired = "expired",
        Executed = "executed",
        Failed = "failed",
    }
}

ithaca_kit::text_enum! {
    /// What a person decides about a pending request.
    pub enum Decision {
        Approve = "approve",
        Deny = "deny",
    }
}

ithaca_kit::text_enum! {
    /// Where a strategy is promoted to.
    pub enum Mode {
        Paper = "paper",
        Live = "live",
    }
}

impl Decision {
    /// The status a pending request moves to.
    pub fn status(self) -> ApprovalStatus {
        match self {
            Decision::Approve => ApprovalStatus::Approved,
            Decision::Deny => ApprovalStatus::Denied,
        }
    }
}

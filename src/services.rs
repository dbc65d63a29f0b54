//! The services the binary can run, chosen by name at run time.

use std::fmt;
use std::str::FromStr;

/// One Ithaca service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Edge,
    Auth,
    Session,
    Skills,
    Broker,
    Approvals,
}

impl Service {
    pub const ALL: [Service; 6] = [
        Service::Edge,
        Service::Auth,
        Service::Session,
        Service::Skills,
        Service::Broker,
        Service::Approvals,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Service::Edge => "edge",
            Service::Auth => "auth",
            Service::Session => "session",
            Service::Skills => "skills",
            Service::Broker => "broker",
            Service::Approvals => "approvals",
        }
    }

    /// The port a service listens on by default (`ithaca up` uses the same
    /// numbers on loopback).
    pub fn default_port(self) -> u16 {
        match self {
            Service::Edge => 8080,
            Service::Auth => 50051,
            Service::Session => 50052,
            Service::Skills => 50053,
            Service::Broker => 50054,
            Service::Approvals => 50055,
        }
    }

    /// Where the service listens in a local stack started with the default
    /// ports: `http://127.0.0.1:<default port>`, the fall-back of every
    /// command that talks to it when neither a flag nor stack.json says.
    pub fn local_url(self) -> String {
        format!("http://127.0.0.1:{}", self.default_port())
    }

    /// The services this one calls, which must be running before it starts
    /// in a local stack (the edge calls every other one).
    pub fn dependencies(self) -> &'static [Service] {
        match self {
            Service::Auth | Service::Broker => &[],
            // Session asks the broker whether a session's subject exists.
            Service::Session => &[Service::Broker],
            Service::Skills => &[Service::Broker, Service::Session],
            Service::Approvals => &[
                Service::Auth,
                Service::Session,
                Service::Skills,
                Service::Broker,
            ],
            Service::Edge => &[
                Service::Auth,
                Service::Session,
                Service::Broker,
                Service::Skills,
                Service::Approvals,
            ],
        }
    }

    /// Offset from the port base in `ithaca up`.
    pub fn port_offset(self) -> u16 {
        self.default_port().saturating_sub(50051)
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Service {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Service::ALL
            .into_iter()
            .find(|svc| svc.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Service::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "unknown service {s:?}; valid services: {}",
                    names.join(", ")
                )
            })
    }
}

//! The local stack's files: the data directory, per-service database URLs,
//! the internal key and `stack.json`, which tells admin commands where the
//! running stack listens.

use anyhow::Context;
use serde_json::json;
use std::path::{Path, PathBuf};

/// The default server name, the seed's (`doomberg://` resources, the
/// `doomberg-mcp` realm).
pub const DEFAULT_NAME: &str = "doomberg";

/// Where `ithaca up` keeps its data unless told otherwise.
pub const DEFAULT_DATA_DIR: &str = ".ithaca";

/// The internal key file inside a data directory.
pub fn key_file(data_dir: &Path) -> PathBuf {
    data_dir.join("internal.key")
}

/// The stack file inside a data directory.
pub fn stack_file(data_dir: &Path) -> PathBuf {
    data_dir.join("stack.json")
}

/// The database URL of `service` in the local stack.
///
/// `DOOMBERG_DB` wins when set: a PostgreSQL URL is shared (each service has
/// its own schema there); a SQLite path `x.db` becomes `x.<service>.db`
/// beside it, because each service owns its own file. Otherwise each service
/// gets `<data-dir>/<service>.db`.
pub fn database_url(doomberg_db: Option<&str>, data_dir: &Path, service: &str) -> String {
    match doomberg_db.map(str::trim).filter(|s| !s.is_empty()) {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            url.to_owned()
        }
        Some(path) => {
            let path = path
                .strip_prefix("sqlite://")
                .or_else(|| path.strip_prefix("sqlite:"))
                .unwrap_or(path);
            let p = Path::new(path);
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("ithaca");
            p.with_file_name(format!("{stem}.{service}.db"))
                .display()
                .to_string()
        }
        None => data_dir.join(format!("{service}.db")).display().to_string(),
    }
}

/// What `stack.json` records.
#[derive(Debug, Default, Clone)]
pub struct StackInfo {
    pub auth_url: Option<String>,
    pub session_url: Option<String>,
    pub broker_url: Option<String>,
    pub approvals_url: Option<String>,
    pub tenant_id: Option<String>,
    /// The edge's MCP URL (`{public_url}/mcp`), for `ithaca connect`.
    pub mcp_url: Option<String>,
}

impl StackInfo {
    pub fn read(data_dir: &Path) -> StackInfo {
        let Ok(text) = std::fs::read_to_string(stack_file(data_dir)) else {
            return StackInfo::default();
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            return StackInfo::default();
        };
        let field = |name: &str| v.get(name).and_then(|x| x.as_str()).map(str::to_owned);
        StackInfo {
            auth_url: field("auth_url"),
            session_url: field("session_url"),
            broker_url: field("broker_url"),
            approvals_url: field("approvals_url"),
            tenant_id: field("tenant_id"),
            mcp_url: field("mcp_url"),
        }
    }

    pub fn write(&self, data_dir: &Path) -> anyhow::Result<()> {
        let v = json!({
            "auth_url": self.auth_url,
            "session_url": self.session_url,
            "broker_url": self.broker_url,
            "approvals_url": self.approvals_url,
            "tenant_id": self.tenant_id,
            "mcp_url": self.mcp_url,
            "pid": std::process::id(),
        });
        let path = stack_file(data_dir);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            // Private like everything in the data directory.
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let text = serde_json::to_string_pretty(&v)? + "\n";
        options
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_follow_doomberg_db() {
        let dir = Path::new("/data");
        assert_eq!(database_url(None, dir, "auth"), "/data/auth.db");
        assert_eq!(
            database_url(Some("./doomberg.db"), dir, "session"),
            "./doomberg.session.db"
        );
        assert_eq!(
            database_url(Some("postgres://u@h/db"), dir, "auth"),
            "postgres://u@h/db"
        );
    }
}

//! The agents `ithaca connect` knows: where each keeps its MCP servers, in
//! which format, and the fields of one server entry in that format.
//!
//! Every path is derived from an [`Env`] (HOME, XDG_CONFIG_HOME, APPDATA,
//! CODEX_HOME and the operating system), never read from the process
//! environment here, so tests give each case its own temporary home.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// An agent whose MCP configuration file `ithaca connect` can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    /// Claude Desktop: `claude_desktop_config.json`, stdio servers only.
    ClaudeDesktop,
    /// Claude Code: `~/.claude.json` (user scope) or a project's `.mcp.json`.
    ClaudeCode,
    /// Cursor: `~/.cursor/mcp.json` or a project's `.cursor/mcp.json`.
    Cursor,
    /// VS Code: the user profile's `mcp.json` or a workspace's `.vscode/mcp.json`.
    #[value(name = "vscode", alias = "code")]
    VsCode,
    /// Codex: `~/.codex/config.toml` (or `$CODEX_HOME/config.toml`).
    Codex,
    /// Gemini CLI: `~/.gemini/settings.json` or a project's `.gemini/settings.json`.
    #[value(alias = "gemini-cli")]
    Gemini,
    /// Windsurf: `~/.codeium/windsurf/mcp_config.json`.
    Windsurf,
}

/// The operating system's conventions for per-user configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Os {
    /// Linux and the other Unix systems: XDG directories.
    Linux,
    Mac,
    Windows,
}

/// What decides where an agent's files are. Empty variables count as unset.
#[derive(Clone, Debug)]
pub struct Env {
    pub os: Os,
    /// HOME (USERPROFILE on Windows).
    pub home: Option<PathBuf>,
    /// XDG_CONFIG_HOME; only an absolute path counts, as the XDG spec says.
    pub xdg_config_home: Option<PathBuf>,
    /// APPDATA (Windows).
    pub appdata: Option<PathBuf>,
    /// CODEX_HOME, which moves Codex's whole `~/.codex`.
    pub codex_home: Option<PathBuf>,
}

/// How an agent's file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A JSON object whose member `servers_key` maps names to entries.
    /// `comments`: the agent reads JSON with comments and trailing commas
    /// (VS Code and Gemini CLI), so such a file is merged, not refused.
    Json {
        servers_key: &'static str,
        comments: bool,
    },
    /// Codex's TOML: `[mcp_servers.NAME]` tables.
    CodexToml,
}

/// One value of an entry: every field we write is a string, a list of
/// strings or a map of strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Str(String),
    List(Vec<String>),
    Map(Vec<(String, String)>),
}

/// One server entry, its fields in the order they are written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub fields: Vec<(String, Val)>,
}

/// How the agent reaches Ithaca.
#[derive(Clone, Debug)]
pub enum Target {
    /// The agent launches `command args…` with `env` and speaks MCP over
    /// its stdio.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// The agent calls a running edge at `url`, with `Authorization:
    /// Bearer KEY` when a key is given (none: the agent signs in itself).
    Http { url: String, key: Option<String> },
}

/// Every field name an entry of ours may have in any agent's format. A
/// field not listed here (an agent's `timeout`, `disabled`, `trust`, …) is
/// the user's and survives a replacement.
pub const OWNED_FIELDS: [&str; 9] = [
    "type",
    "command",
    "args",
    "env",
    "url",
    "headers",
    "httpUrl",
    "serverUrl",
    "http_headers",
];

impl Env {
    /// The running process's environment.
    pub fn from_process() -> Env {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let os = if cfg!(target_os = "macos") {
            Os::Mac
        } else if cfg!(windows) {
            Os::Windows
        } else {
            Os::Linux
        };
        let home = match os {
            Os::Windows => var("USERPROFILE").or_else(|| var("HOME")),
            _ => var("HOME"),
        };
        Env {
            os,
            home,
            xdg_config_home: var("XDG_CONFIG_HOME").filter(|p| p.is_absolute()),
            appdata: var("APPDATA"),
            codex_home: var("CODEX_HOME"),
        }
    }

    fn home(&self) -> anyhow::Result<&Path> {
        self.home
            .as_deref()
            .context("no home directory: HOME is not set (pass --file PATH)")
    }

    /// The directory desktop applications keep per-user settings in:
    /// `~/Library/Application Support`, `%APPDATA%`, or the XDG config home.
    fn app_config_dir(&self) -> anyhow::Result<PathBuf> {
        match self.os {
            Os::Mac => Ok(self.home()?.join("Library").join("Application Support")),
            Os::Windows => match &self.appdata {
                Some(dir) => Ok(dir.clone()),
                None => Ok(self.home()?.join("AppData").join("Roaming")),
            },
            Os::Linux => match &self.xdg_config_home {
                Some(dir) => Ok(dir.clone()),
                None => Ok(self.home()?.join(".config")),
            },
        }
    }
}

impl Agent {
    #[cfg(test)]
    pub const ALL: [Agent; 7] = [
        Agent::ClaudeDesktop,
        Agent::ClaudeCode,
        Agent::Cursor,
        Agent::VsCode,
        Agent::Codex,
        Agent::Gemini,
        Agent::Windsurf,
    ];

    /// The product's own name, for messages.
    pub fn title(self) -> &'static str {
        match self {
            Agent::ClaudeDesktop => "Claude Desktop",
            Agent::ClaudeCode => "Claude Code",
            Agent::Cursor => "Cursor",
            Agent::VsCode => "VS Code",
            Agent::Codex => "Codex",
            Agent::Gemini => "Gemini CLI",
            Agent::Windsurf => "Windsurf",
        }
    }

    pub fn format(self) -> Format {
        match self {
            Agent::VsCode => Format::Json {
                servers_key: "servers",
                comments: true,
            },
            Agent::Gemini => Format::Json {
                servers_key: "mcpServers",
                comments: true,
            },
            Agent::Codex => Format::CodexToml,
            Agent::ClaudeDesktop | Agent::ClaudeCode | Agent::Cursor | Agent::Windsurf => {
                Format::Json {
                    servers_key: "mcpServers",
                    comments: false,
                }
            }
        }
    }

    /// The agent's per-user file.
    pub fn user_file(self, env: &Env) -> anyhow::Result<PathBuf> {
        Ok(match self {
            Agent::ClaudeDesktop => env
                .app_config_dir()?
                .join("Claude")
                .join("claude_desktop_config.json"),
            Agent::ClaudeCode => env.home()?.join(".claude.json"),
            Agent::Cursor => env.home()?.join(".cursor").join("mcp.json"),
            Agent::VsCode => env
                .app_config_dir()?
                .join("Code")
                .join("User")
                .join("mcp.json"),
            Agent::Codex => match &env.codex_home {
                Some(dir) => dir.join("config.toml"),
                None => env.home()?.join(".codex").join("config.toml"),
            },
            Agent::Gemini => env.home()?.join(".gemini").join("settings.json"),
            Agent::Windsurf => env
                .home()?
                .join(".codeium")
                .join("windsurf")
                .join("mcp_config.json"),
        })
    }

    /// The agent's file inside a project (a workspace) directory.
    pub fn project_file(self, project: &Path) -> anyhow::Result<PathBuf> {
        Ok(match self {
            Agent::ClaudeCode => project.join(".mcp.json"),
            Agent::Cursor => project.join(".cursor").join("mcp.json"),
            Agent::VsCode => project.join(".vscode").join("mcp.json"),
            Agent::Codex => project.join(".codex").join("config.toml"),
            Agent::Gemini => project.join(".gemini").join("settings.json"),
            Agent::ClaudeDesktop | Agent::Windsurf => bail!(
                "{} has no per-project file; drop --project (or pass --file PATH)",
                self.title()
            ),
        })
    }

    /// The entry that makes this agent reach `target`.
    pub fn entry(self, target: &Target) -> anyhow::Result<Entry> {
        let str = |s: &str| Val::Str(s.to_owned());
        let mut fields: Vec<(String, Val)> = Vec::new();
        let mut push = |name: &str, val: Val| fields.push((name.to_owned(), val));
        match target {
            Target::Stdio { command, args, env } => {
                // Claude Code and VS Code document `type` for every entry;
                // the others infer stdio from `command`.
                if matches!(self, Agent::ClaudeCode | Agent::VsCode) {
                    push("type", str("stdio"));
                }
                push("command", str(command));
                push("args", Val::List(args.clone()));
                push("env", Val::Map(env.clone()));
            }
            Target::Http { url, key } => {
                let (type_field, url_field, headers_field) = match self {
                    Agent::ClaudeDesktop => bail!(
                        "Claude Desktop reads only stdio servers from claude_desktop_config.json: \
                         use --transport stdio, or add the URL under Settings → Connectors \
                         (which signs in with OAuth; Ithaca's edge does not offer OAuth yet)"
                    ),
                    Agent::ClaudeCode | Agent::VsCode => (Some("http"), "url", "headers"),
                    Agent::Cursor => (None, "url", "headers"),
                    Agent::Codex => (None, "url", "http_headers"),
                    Agent::Gemini => (None, "httpUrl", "headers"),
                    Agent::Windsurf => (None, "serverUrl", "headers"),
                };
                if let Some(t) = type_field {
                    push("type", str(t));
                }
                push(url_field, str(url));
                if let Some(key) = key {
                    push(
                        headers_field,
                        Val::Map(vec![("Authorization".to_owned(), format!("Bearer {key}"))]),
                    );
                }
            }
        }
        Ok(Entry { fields })
    }

    /// What the person does after the file changed.
    pub fn reload_hint(self) -> &'static str {
        match self {
            Agent::ClaudeDesktop => "quit Claude Desktop completely and open it again",
            Agent::ClaudeCode => "start a new Claude Code session (`/mcp` lists the servers)",
            Agent::Cursor => "reload Cursor's window or toggle the server in its MCP settings",
            Agent::VsCode => "run \"MCP: List Servers\" in VS Code and start the server",
            Agent::Codex => "start a new Codex session (`/mcp` lists the servers)",
            Agent::Gemini => "start Gemini CLI again (`/mcp` lists the servers)",
            Agent::Windsurf => "press refresh in Windsurf's MCP panel",
        }
    }
}

impl Val {
    /// The same value as JSON, to compare with what a file holds.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Val::Str(s) => Value::String(s.clone()),
            Val::List(items) => Value::Array(items.iter().cloned().map(Value::String).collect()),
            Val::Map(pairs) => Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            ),
        }
    }
}

impl Entry {
    pub fn get(&self, name: &str) -> Option<&Val> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// A server name every agent accepts: it becomes part of tool names
/// (`mcp__doomberg__…` in Claude Code) and a bare TOML key in Codex.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        bail!("--name must be 1 to 64 letters, digits, '-' or '_'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(os: Os) -> Env {
        Env {
            os,
            home: Some(PathBuf::from("/h")),
            xdg_config_home: None,
            appdata: None,
            codex_home: None,
        }
    }

    #[test]
    fn user_files_follow_each_platform() {
        let linux = env(Os::Linux);
        let path = |agent: Agent, env: &Env| agent.user_file(env).expect("path");
        assert_eq!(
            path(Agent::ClaudeDesktop, &linux),
            Path::new("/h/.config/Claude/claude_desktop_config.json")
        );
        let xdg = Env {
            xdg_config_home: Some(PathBuf::from("/x")),
            ..linux.clone()
        };
        assert_eq!(
            path(Agent::VsCode, &xdg),
            Path::new("/x/Code/User/mcp.json")
        );
        let mac = env(Os::Mac);
        assert_eq!(
            path(Agent::ClaudeDesktop, &mac),
            Path::new("/h/Library/Application Support/Claude/claude_desktop_config.json")
        );
        assert_eq!(
            path(Agent::VsCode, &mac),
            Path::new("/h/Library/Application Support/Code/User/mcp.json")
        );
        let win = Env {
            appdata: Some(PathBuf::from("/a")),
            ..env(Os::Windows)
        };
        assert_eq!(
            path(Agent::ClaudeDesktop, &win),
            Path::new("/a/Claude/claude_desktop_config.json")
        );
        assert_eq!(
            path(Agent::ClaudeCode, &linux),
            Path::new("/h/.claude.json")
        );
        assert_eq!(
            path(Agent::Cursor, &linux),
            Path::new("/h/.cursor/mcp.json")
        );
        assert_eq!(
            path(Agent::Codex, &linux),
            Path::new("/h/.codex/config.toml")
        );
        let codex_home = Env {
            codex_home: Some(PathBuf::from("/c")),
            ..linux.clone()
        };
        assert_eq!(path(Agent::Codex, &codex_home), Path::new("/c/config.toml"));
        assert_eq!(
            path(Agent::Gemini, &linux),
            Path::new("/h/.gemini/settings.json")
        );
        assert_eq!(
            path(Agent::Windsurf, &linux),
            Path::new("/h/.codeium/windsurf/mcp_config.json")
        );
        let homeless = Env {
            home: None,
            ..linux
        };
        let err = Agent::Cursor.user_file(&homeless).expect_err("no home");
        assert!(err.to_string().contains("HOME"), "{err}");
    }

    #[test]
    fn http_entries_use_each_agents_field_names() {
        let target = Target::Http {
            url: "http://127.0.0.1:8080/mcp".to_owned(),
            key: Some("dmbg_k".to_owned()),
        };
        let names = |agent: Agent| -> Vec<String> {
            agent
                .entry(&target)
                .expect("entry")
                .fields
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(names(Agent::ClaudeCode), ["type", "url", "headers"]);
        assert_eq!(names(Agent::VsCode), ["type", "url", "headers"]);
        assert_eq!(names(Agent::Cursor), ["url", "headers"]);
        assert_eq!(names(Agent::Codex), ["url", "http_headers"]);
        assert_eq!(names(Agent::Gemini), ["httpUrl", "headers"]);
        assert_eq!(names(Agent::Windsurf), ["serverUrl", "headers"]);
        let err = Agent::ClaudeDesktop.entry(&target).expect_err("stdio only");
        assert!(err.to_string().contains("stdio"), "{err}");
        let entry = Agent::Cursor.entry(&target).expect("entry");
        assert_eq!(
            entry.get("headers"),
            Some(&Val::Map(vec![(
                "Authorization".to_owned(),
                "Bearer dmbg_k".to_owned()
            )]))
        );
        // Every field we write is one we own.
        for agent in Agent::ALL {
            for (name, _) in agent.entry(&target).map(|e| e.fields).unwrap_or_default() {
                assert!(OWNED_FIELDS.contains(&name.as_str()), "{name}");
            }
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("doomberg").is_ok());
        assert!(check_name("ithaca-local_2").is_ok());
        for bad in ["", "a b", "a.b", "ü", &"x".repeat(65), "a\"b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}

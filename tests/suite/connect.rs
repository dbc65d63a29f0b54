//! `ithaca connect <agent>` from the outside, for every agent, against a
//! temporary home directory: the file lands where the agent reads it, in
//! its format, with its field names; other servers, settings and comments
//! survive a merge; a second run writes nothing; a malformed file is refused
//! and left as it was; keys are masked in everything printed; without a
//! terminal nothing is written unless `--yes` says so. Then the written
//! configuration is used the way the agent would: the stdio entry is
//! launched and answers MCP, and the HTTP entry reaches a running stack.

use crate::common;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

/// An agent and where its format puts things.
struct Case {
    agent: &'static str,
    /// The file under the home directory (Linux layout; macOS below).
    file: &'static str,
    /// The member that maps server names to entries (Codex: `mcp_servers`).
    servers: &'static str,
    /// The URL's field in the HTTP form, and the headers' field.
    url_field: &'static str,
    headers_field: &'static str,
    /// Whether entries carry `type` ("stdio" / "http").
    typed: bool,
    /// Whether the agent takes the HTTP form from its file.
    http: bool,
}

const CASES: [Case; 7] = [
    Case {
        agent: "claude-desktop",
        file: if cfg!(target_os = "macos") {
            "Library/Application Support/Claude/claude_desktop_config.json"
        } else {
            ".config/Claude/claude_desktop_config.json"
        },
        servers: "mcpServers",
        url_field: "",
        headers_field: "",
        typed: false,
        http: false,
    },
    Case {
        agent: "claude-code",
        file: ".claude.json",
        servers: "mcpServers",
        url_field: "url",
        headers_field: "headers",
        typed: true,
        http: true,
    },
    Case {
        agent: "cursor",
        file: ".cursor/mcp.json",
        servers: "mcpServers",
        url_field: "url",
        headers_field: "headers",
        typed: false,
        http: true,
    },
    Case {
        agent: "vscode",
        file: if cfg!(target_os = "macos") {
            "Library/Application Support/Code/User/mcp.json"
        } else {
            ".config/Code/User/mcp.json"
        },
        servers: "servers",
        url_field: "url",
        headers_field: "headers",
        typed: true,
        http: true,
    },
    Case {
        agent: "codex",
        file: ".codex/config.toml",
        servers: "mcp_servers",
        url_field: "url",
        headers_field: "http_headers",
        typed: false,
        http: true,
    },
    Case {
        agent: "gemini",
        file: ".gemini/settings.json",
        servers: "mcpServers",
        url_field: "httpUrl",
        headers_field: "headers",
        typed: false,
        http: true,
    },
    Case {
        agent: "windsurf",
        file: ".codeium/windsurf/mcp_config.json",
        servers: "mcpServers",
        url_field: "serverUrl",
        headers_field: "headers",
        typed: false,
        http: true,
    },
];

const KEY: &str = "dmbg_test_k3y1d0000001_S3cretS3cretS3cretS3cret";
const OLD_KEY: &str = "dmbg_test_k3y1d0000002_0ldSecret0ldSecret0ldSe";
const URL: &str = "http://127.0.0.1:9/mcp";

/// A temporary home directory and a data directory beside it.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn file(&self, case: &Case) -> PathBuf {
        self.home().join(case.file)
    }

    /// Put `text` where the agent's file goes.
    fn seed(&self, case: &Case, text: &str) -> PathBuf {
        let path = self.file(case);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("seed");
        path
    }

    /// `ithaca connect ARGS` with this home, no terminal on stdin, and the
    /// key (where asked) in `ITHACA_TEST_KEY`.
    fn connect(&self, args: &[&str], key: Option<&str>) -> Output {
        let mut cmd = self.command(args);
        if let Some(key) = key {
            cmd.env("ITHACA_TEST_KEY", key);
        }
        cmd.stdin(Stdio::null())
            .output()
            .expect("run ithaca connect")
    }

    /// The same with `input` piped to stdin.
    fn connect_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ithaca connect");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("wait")
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = common::ithaca();
        self.environment(&mut cmd);
        cmd.arg("connect")
            .args(args)
            .arg("--data-dir")
            .arg(self.data());
        cmd
    }

    /// Only this home decides where files go.
    fn environment(&self, cmd: &mut std::process::Command) {
        cmd.env_remove("ITHACA_INTERNAL_KEY")
            .env_remove("ITHACA_INTERNAL_KEY_FILE")
            .env_remove("ITHACA_DATA_DIR")
            .env_remove("DOOMBERG_DB")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("APPDATA")
            .env_remove("CODEX_HOME")
            .env("HOME", self.home());
    }
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn succeeded(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn assert_no_panic(out: &Output) {
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}

/// The agent's file as JSON, read by an independent parser for its format.
fn read(case: &Case, path: &Path) -> Value {
    let raw = std::fs::read_to_string(path).expect("read the agent's file");
    if case.agent == "codex" {
        let table: toml::Table = toml::from_str(&raw).expect("valid TOML");
        serde_json::to_value(table).expect("TOML as JSON")
    } else {
        serde_json::from_str(&raw)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {raw}", case.agent))
    }
}

fn entry<'v>(case: &Case, file: &'v Value, name: &str) -> &'v Value {
    let entry = &file[case.servers][name];
    assert!(
        entry.is_object(),
        "{}: no entry {name} in {file}",
        case.agent
    );
    entry
}

fn ithaca_binary() -> String {
    std::fs::canonicalize(env!("CARGO_BIN_EXE_ithaca"))
        .expect("canonical binary path")
        .display()
        .to_string()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[test]
fn stdio_entry_in_each_agents_file_and_format() {
    for case in &CASES {
        let home = Home::new();
        let out = home.connect(&[case.agent, "--yes"], None);
        succeeded(&out, case.agent);
        let path = home.file(case);
        let file = read(case, &path);
        let ours = entry(case, &file, "doomberg");
        assert_eq!(ours["command"], ithaca_binary(), "{}: {ours}", case.agent);
        assert_eq!(ours["args"], json!(["mcp"]), "{}", case.agent);
        assert_eq!(
            ours["env"]["ITHACA_DATA_DIR"],
            home.data().display().to_string(),
            "{}",
            case.agent
        );
        assert_eq!(
            ours["env"]["DOOMBERG_MCP_TRANSPORT"], "stdio",
            "{}",
            case.agent
        );
        if case.typed {
            assert_eq!(ours["type"], "stdio", "{}", case.agent);
        } else {
            assert!(ours.get("type").is_none(), "{}: {ours}", case.agent);
        }
        assert!(text(&out.stdout).contains("wrote "), "{}", case.agent);
        #[cfg(unix)]
        assert_eq!(
            mode(&path),
            0o644,
            "{}: no secret, ordinary mode",
            case.agent
        );
    }
}

#[test]
fn http_entry_in_each_agents_format() {
    for case in &CASES {
        let home = Home::new();
        let out = home.connect(
            &[
                case.agent,
                "--url",
                URL,
                "--key-env",
                "ITHACA_TEST_KEY",
                "--yes",
            ],
            Some(KEY),
        );
        assert_no_panic(&out);
        let path = home.file(case);
        if !case.http {
            assert!(!out.status.success(), "{}", case.agent);
            assert!(text(&out.stderr).contains("stdio"), "{}", text(&out.stderr));
            assert!(!path.exists(), "{}: nothing written", case.agent);
            continue;
        }
        succeeded(&out, case.agent);
        let file = read(case, &path);
        let ours = entry(case, &file, "doomberg");
        assert_eq!(ours[case.url_field], URL, "{}: {ours}", case.agent);
        assert_eq!(
            ours[case.headers_field]["Authorization"],
            format!("Bearer {KEY}"),
            "{}: {ours}",
            case.agent
        );
        assert!(ours.get("command").is_none(), "{}: {ours}", case.agent);
        if case.typed {
            assert_eq!(ours["type"], "http", "{}", case.agent);
        }
        #[cfg(unix)]
        assert_eq!(mode(&path), 0o600, "{}: a file holding a key", case.agent);
    }
}

#[test]
fn merge_keeps_other_servers_settings_order_and_comments() {
    for case in &CASES {
        let home = Home::new();
        let original = if case.agent == "codex" {
            "# keep me\nmodel = \"o3\" # and me\n\n[mcp_servers.other]\ncommand = \"npx\"\nargs = [\"x\"]\n\n[profiles.fast]\nmodel = \"mini\"\n".to_owned()
        } else {
            format!(
                "{{\n  \"theme\": \"dark\",\n  \"{}\": {{\n    \"other\": {{\n      \"command\": \"npx\",\n      \"args\": [\"x\"]\n    }}\n  }},\n  \"zzz\": [1, 2]\n}}\n",
                case.servers
            )
        };
        let path = home.seed(case, &original);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        }
        let out = home.connect(&[case.agent, "--yes"], None);
        succeeded(&out, case.agent);
        let written = std::fs::read_to_string(&path).expect("read");
        let file = read(case, &path);
        assert_eq!(
            file[case.servers]["other"]["command"], "npx",
            "{}",
            case.agent
        );
        assert_eq!(
            file[case.servers]["other"]["args"],
            json!(["x"]),
            "{}",
            case.agent
        );
        assert_eq!(entry(case, &file, "doomberg")["args"], json!(["mcp"]));
        if case.agent == "codex" {
            assert_eq!(file["model"], "o3");
            assert_eq!(file["profiles"]["fast"]["model"], "mini");
            assert!(
                written.starts_with("# keep me\nmodel = \"o3\" # and me\n"),
                "{written}"
            );
        } else {
            assert_eq!(file["theme"], "dark", "{}", case.agent);
            assert_eq!(file["zzz"], json!([1, 2]), "{}", case.agent);
            // Untouched text stays as it was, in its order.
            assert!(
                written.starts_with("{\n  \"theme\": \"dark\",\n"),
                "{written}"
            );
            assert!(
                written.ends_with("  },\n  \"zzz\": [1, 2]\n}\n"),
                "{written}"
            );
        }
        #[cfg(unix)]
        assert_eq!(
            mode(&path),
            0o640,
            "{}: the owner's mode is kept",
            case.agent
        );
        // The diff showed our lines being added; a line of the user's is
        // at most given the comma that separates it from ours.
        let diff = text(&out.stdout);
        assert!(diff.contains("+++ "), "{diff}");
        let added: Vec<&str> = diff.lines().filter_map(|l| l.strip_prefix('+')).collect();
        for removed in diff
            .lines()
            .filter(|l| !l.starts_with("---"))
            .filter_map(|l| l.strip_prefix('-'))
        {
            assert!(
                added.contains(&format!("{removed},").as_str()),
                "{}: the user's line {removed:?} was changed:\n{diff}",
                case.agent
            );
        }
    }
}

#[test]
fn comments_survive_where_the_agent_allows_them() {
    let vscode = &CASES[3];
    let home = Home::new();
    let original = "{\n  // servers for this machine\n  \"servers\": {\n    \"other\": {\"type\": \"stdio\", \"command\": \"npx\"}, /* theirs */\n  },\n}\n";
    let path = home.seed(vscode, original);
    let out = home.connect(&["vscode", "--yes"], None);
    succeeded(&out, "vscode");
    let written = std::fs::read_to_string(&path).expect("read");
    assert!(written.contains("// servers for this machine"), "{written}");
    assert!(written.contains("/* theirs */"), "{written}");
    assert!(written.contains("\"doomberg\": {"), "{written}");
    // The same file is refused for an agent whose file is strict JSON.
    let cursor = &CASES[2];
    let path = home.seed(cursor, original);
    let out = home.connect(&["cursor", "--yes"], None);
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&path).expect("read"), original);
}

#[test]
fn second_run_is_a_no_op() {
    for case in &CASES {
        let home = Home::new();
        let key_args = [
            case.agent,
            "--url",
            URL,
            "--key-env",
            "ITHACA_TEST_KEY",
            "--yes",
        ];
        let args: &[&str] = if case.http {
            &key_args
        } else {
            &[case.agent, "--yes"]
        };
        succeeded(&home.connect(args, Some(KEY)), case.agent);
        let path = home.file(case);
        let before = std::fs::read(&path).expect("read");
        // Without --yes and without a terminal: a no-op needs no confirmation.
        let again = &args[..args.len() - 1];
        let out = home.connect(again, Some(KEY));
        succeeded(&out, case.agent);
        assert!(
            text(&out.stdout).contains("nothing to change"),
            "{}: {}",
            case.agent,
            text(&out.stdout)
        );
        assert_eq!(
            std::fs::read(&path).expect("read"),
            before,
            "{}",
            case.agent
        );
        let entries = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .count();
        assert_eq!(entries, 1, "{}: no temporary file is left", case.agent);
    }
}

#[test]
fn malformed_file_is_refused_and_left_untouched() {
    for case in &CASES {
        let home = Home::new();
        let broken = if case.agent == "codex" {
            "[mcp_servers.other\ncommand = \"npx\"\n"
        } else {
            "{\n  \"mcpServers\": {\n    \"other\": {\"command\": \"npx\"\n"
        };
        let path = home.seed(case, broken);
        let out = home.connect(&[case.agent, "--yes"], None);
        assert_no_panic(&out);
        assert!(
            !out.status.success(),
            "{}: accepted a broken file",
            case.agent
        );
        let err = text(&out.stderr);
        assert!(
            err.contains(&path.display().to_string()),
            "{}: {err}",
            case.agent
        );
        assert!(err.contains("not valid"), "{}: {err}", case.agent);
        assert!(err.contains("line "), "{}: {err}", case.agent);
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            broken,
            "{}",
            case.agent
        );
    }
}

#[test]
fn keys_are_masked_unless_asked_for() {
    for case in CASES.iter().filter(|c| c.http) {
        let home = Home::new();
        let http = |key_flag: &'static str| -> Vec<&'static str> {
            vec![case.agent, "--url", URL, key_flag]
        };
        let mut first = http("--key-env");
        first.extend(["ITHACA_TEST_KEY", "--yes"]);
        let out = home.connect(&first, Some(OLD_KEY));
        succeeded(&out, case.agent);
        // A new key replaces the old one: the diff shows both lines.
        let mut second = http("--key-stdin");
        second.push("--yes");
        let out = home.connect_stdin(&second, &format!("{KEY}\n"));
        succeeded(&out, case.agent);
        let printed = format!("{}{}", text(&out.stdout), text(&out.stderr));
        for secret in [KEY, OLD_KEY, "S3cret", "0ldSecret"] {
            assert!(
                !printed.contains(secret),
                "{}: printed {secret}:\n{printed}",
                case.agent
            );
        }
        assert!(printed.contains("dmbg_…"), "{}: {printed}", case.agent);
        let file = read(case, &home.file(case));
        assert_eq!(
            entry(case, &file, "doomberg")[case.headers_field]["Authorization"],
            format!("Bearer {KEY}")
        );

        let mut print = http("--key-env");
        print.extend(["ITHACA_TEST_KEY", "--print"]);
        let out = home.connect(&print, Some(KEY));
        succeeded(&out, case.agent);
        let printed = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!printed.contains(KEY), "{}: {printed}", case.agent);
        assert!(printed.contains("--show-secret"), "{printed}");

        print.push("--show-secret");
        let out = home.connect(&print, Some(KEY));
        succeeded(&out, case.agent);
        assert!(
            text(&out.stdout).contains(KEY),
            "{}: asked to show it",
            case.agent
        );
        assert!(!text(&out.stderr).contains(KEY));
    }
}

#[test]
fn without_a_terminal_nothing_is_written_without_yes() {
    for case in &CASES {
        let home = Home::new();
        let out = home.connect(&[case.agent], None);
        assert_no_panic(&out);
        assert!(!out.status.success(), "{}", case.agent);
        assert!(text(&out.stderr).contains("--yes"), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("+++ "), "the diff is shown");
        assert!(!home.file(case).exists(), "{}: nothing written", case.agent);
        // The same for an existing file: it stays as it was.
        let path = home.seed(case, "");
        let out = home.connect(&[case.agent], None);
        assert!(!out.status.success());
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "");
    }
}

/// On a terminal the person is asked: "n" writes nothing, "y" writes. The
/// terminal is util-linux `script`'s (Debian's bsdutils, always installed).
#[test]
fn a_terminal_is_asked_before_writing() {
    let Some(script) = ["/usr/bin/script", "/bin/script"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
    else {
        eprintln!("NOT RUN: a_terminal_is_asked_before_writing needs util-linux `script`");
        return;
    };
    let home = Home::new();
    let case = &CASES[6];
    let line = format!(
        "{} connect windsurf --data-dir {}",
        env!("CARGO_BIN_EXE_ithaca"),
        home.data().display()
    );
    let answer = |reply: &str| -> String {
        let mut cmd = std::process::Command::new(script);
        home.environment(&mut cmd);
        let mut child = cmd
            .args(["-qec", &line, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn script");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(reply.as_bytes())
            .expect("answer");
        let out = child.wait_with_output().expect("wait");
        succeeded(&out, "connect on a terminal");
        text(&out.stdout)
    };
    let said = answer("n\n");
    assert!(said.contains("write "), "{said}");
    assert!(said.contains("[y/N]"), "{said}");
    assert!(said.contains("nothing written"), "{said}");
    assert!(!home.file(case).exists());
    let said = answer("y\n");
    assert!(said.contains("wrote "), "{said}");
    let file = read(case, &home.file(case));
    assert_eq!(entry(case, &file, "doomberg")["args"], json!(["mcp"]));
}

#[test]
fn print_writes_nothing() {
    for case in &CASES {
        let home = Home::new();
        let out = home.connect(&[case.agent, "--print"], None);
        succeeded(&out, case.agent);
        assert!(!home.file(case).exists(), "{}", case.agent);
        let snippet = text(&out.stdout);
        assert!(snippet.contains("doomberg"), "{snippet}");
        assert!(snippet.contains(&ithaca_binary()), "{snippet}");
        assert!(text(&out.stderr).contains(&home.file(case).display().to_string()));
    }
}

#[test]
fn file_project_and_name_choose_where_and_what() {
    let home = Home::new();
    let project = home.dir.path().join("proj");
    std::fs::create_dir_all(&project).expect("mkdir");
    let project_arg = project.display().to_string();
    let cases = [
        ("claude-code", ".mcp.json", "mcpServers"),
        ("cursor", ".cursor/mcp.json", "mcpServers"),
        ("vscode", ".vscode/mcp.json", "servers"),
        ("gemini", ".gemini/settings.json", "mcpServers"),
        ("codex", ".codex/config.toml", "mcp_servers"),
    ];
    for (agent, file, servers) in cases {
        let out = home.connect(
            &[
                agent,
                "--project",
                &project_arg,
                "--name",
                "ithaca-dev",
                "--yes",
            ],
            None,
        );
        succeeded(&out, agent);
        let case = CASES.iter().find(|c| c.agent == agent).expect("case");
        let value = read(case, &project.join(file));
        assert!(value[servers]["ithaca-dev"].is_object(), "{agent}: {value}");
        assert!(
            !home.file(case).exists(),
            "{agent}: the user file is not touched"
        );
    }
    let elsewhere = home.dir.path().join("elsewhere.json");
    let out = home.connect(
        &[
            "windsurf",
            "--file",
            &elsewhere.display().to_string(),
            "--yes",
        ],
        None,
    );
    succeeded(&out, "windsurf --file");
    assert!(read(&CASES[6], &elsewhere)["mcpServers"]["doomberg"].is_object());
}

#[test]
fn bad_input_gets_a_clear_error() {
    let home = Home::new();
    let refuse = |args: &[&str], key: Option<&str>, needle: &str| {
        let out = home.connect(args, key);
        assert_no_panic(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = text(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
    };
    refuse(
        &["notepad"],
        None,
        "claude-desktop, claude-code, cursor, vscode, codex, gemini, windsurf",
    );
    refuse(
        &["cursor", "--transport", "stdio", "--url", URL],
        None,
        "--transport http",
    );
    refuse(&["cursor", "--show-secret"], None, "--print");
    refuse(
        &["cursor", "--url", URL],
        None,
        "--key-env VAR or --key-stdin",
    );
    refuse(&["cursor", "--url", "ftp://x", "--no-key"], None, "http://");
    refuse(
        &["cursor", "--key-env", "ITHACA_TEST_KEY"],
        Some(KEY),
        "no running stack",
    );
    refuse(
        &["cursor", "--url", URL, "--key-env", "ITHACA_TEST_UNSET"],
        None,
        "ITHACA_TEST_UNSET is not set",
    );
    refuse(
        &["cursor", "--url", URL, "--key-env", "ITHACA_TEST_KEY"],
        Some("dmbg bad key"),
        "header",
    );
    refuse(&["cursor", "--name", "a b"], None, "--name");
    refuse(
        &["windsurf", "--project", "/tmp"],
        None,
        "no per-project file",
    );
    refuse(
        &["cursor", "--key-env", "A", "--no-key"],
        None,
        "cannot be used with",
    );
    // An inline internal key is never copied into an agent's file.
    let out = home
        .command(&["cursor", "--yes"])
        .env("ITHACA_INTERNAL_KEY", common::KEY_HEX)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--internal-key-file"),
        "{}",
        text(&out.stderr)
    );
    assert!(!text(&out.stderr).contains(common::KEY_HEX));
    assert!(!home.file(&CASES[2]).exists());
}

/// What the agent does with the stdio entry: launch it, from a directory of
/// its own, with the entry's environment, and speak MCP to it.
#[test]
fn the_stdio_entry_launches_a_working_server() {
    let home = Home::new();
    let case = &CASES[1];
    succeeded(
        &home.connect(&["claude-code", "--yes"], None),
        "claude-code",
    );
    let file = read(case, &home.file(case));
    let ours = entry(case, &file, "doomberg").clone();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let mut cmd = std::process::Command::new(ours["command"].as_str().expect("command"));
    for arg in ours["args"].as_array().expect("args") {
        cmd.arg(arg.as_str().expect("arg"));
    }
    for (k, v) in ours["env"].as_object().expect("env") {
        cmd.env(k, v.as_str().expect("value"));
    }
    let mut child = cmd
        .env_remove("ITHACA_INTERNAL_KEY")
        .env_remove("DOOMBERG_DB")
        .current_dir(elsewhere.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("launch the entry's command");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": common::http::modern_meta()}})
    )
    .expect("send");
    stdin.flush().expect("flush");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let reply = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer within 60 s");
        let message: Value = serde_json::from_str(&line).expect("JSON-RPC");
        if message["id"] == 1 {
            break message;
        }
    };
    assert!(
        reply["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "session_context")),
        "{reply}"
    );
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    // The data landed in the configured data directory, not the agent's
    // working directory.
    assert!(home.data().join("auth.db").exists());
    assert!(
        std::fs::read_dir(elsewhere.path())
            .expect("list")
            .next()
            .is_none()
    );
}

/// What the agent does with the HTTP entry: call the URL with the header,
/// both taken from the file `ithaca connect` wrote from stack.json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_entry_reaches_a_running_stack() {
    let home = Home::new();
    let mut up = common::ithaca();
    up.env_remove("ITHACA_INTERNAL_KEY")
        .args(["up", "--port-base", "0", "--data-dir"])
        .arg(home.data());
    let stack = common::Process::spawn(up);
    let lines = stack.wait_for("ithaca: ready", Duration::from_secs(60));
    let key = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("agent key"))
        .map(str::trim)
        .expect("agent key line")
        .to_owned();

    let case = &CASES[3];
    let out = home.connect(
        &["vscode", "--key-env", "ITHACA_TEST_KEY", "--yes"],
        Some(&key),
    );
    succeeded(&out, "vscode");
    assert!(!text(&out.stdout).contains(&key));
    let file = read(case, &home.file(case));
    let ours = entry(case, &file, "doomberg");
    let url = ours["url"].as_str().expect("url");
    let authorization = ours["headers"]["Authorization"].as_str().expect("header");
    let base = url.strip_suffix("/mcp").expect("an MCP URL");

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": common::http::modern_meta()}})
    .to_string();
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];
    let refused = common::http::request(base, "POST", "/mcp", &headers, body.as_bytes()).await;
    assert_eq!(refused.status, 401, "the header is what lets it in");
    let mut with_key = headers.to_vec();
    with_key.push(("Authorization", authorization));
    let reply = common::http::request(base, "POST", "/mcp", &with_key, body.as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.json()["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "session_context")),
        "{}",
        reply.text()
    );
}

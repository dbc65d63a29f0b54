//! `ithaca mcp` over stdio: an agent launches it, speaks both eras in
//! newline-delimited JSON-RPC, opens a session and calls tools; the services
//! run in-process on SQLite under the data directory.

use crate::common;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::mpsc;
use std::time::Duration;

struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Agent {
    fn launch(data_dir: &std::path::Path) -> Agent {
        let mut cmd = common::ithaca();
        cmd.env_remove("ITHACA_INTERNAL_KEY")
            .args(["mcp", "--data-dir"])
            .arg(data_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn ithaca mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout: ChildStdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Agent {
            child,
            stdin: Some(stdin),
            lines,
        }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").expect("write a line");
        stdin.flush().expect("flush");
    }

    /// The reply to request `id` (every stdout line must be JSON-RPC).
    fn reply(&mut self, id: i64) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("a reply within 60 s");
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"));
            assert_eq!(v["jsonrpc"], "2.0", "{line}");
            if v["id"] == json!(id) {
                return v;
            }
        }
    }
}

impl Agent {
    /// Close stdin, as a client does, and expect a clean exit.
    fn close_and_wait(&mut self) {
        self.stdin = None;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "exit status {status:?}");
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ithaca mcp did not exit after stdin closed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}})
}

#[test]
fn modern_era_over_stdio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut agent = Agent::launch(dir.path());

    agent.send(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}}));
    let d = agent.reply(1);
    assert_eq!(
        d["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{d}"
    );

    agent.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"_meta": meta(), "name": "session_close", "arguments": {}}}));
    let gated = agent.reply(2);
    assert_eq!(
        common::tool_error(&gated["result"])["error"],
        "no_active_session",
        "{gated}"
    );

    agent.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"_meta": meta(), "name": "session_context", "arguments": {"prompt": "stdio research"}}}));
    let opened = agent.reply(3);
    assert_eq!(opened["result"]["isError"], false, "{opened}");
    let sid = opened["result"]["structuredContent"]["session_id"]
        .as_str()
        .expect("id")
        .to_owned();
    // No HTTP edge runs here: no SSE link to a port nothing listens on, but
    // the resource that holds the trace.
    let descriptor = &opened["result"]["structuredContent"];
    assert_eq!(descriptor["trace_stream"], "", "{descriptor}");
    assert_eq!(
        descriptor["trace_resource"],
        format!("doomberg://sessions/{sid}/trace/0")
    );

    // ping is not a request of 2026-07-28, over stdio as over HTTP.
    agent.send(json!({"jsonrpc": "2.0", "id": 30, "method": "ping", "params": {"_meta": meta()}}));
    assert_eq!(agent.reply(30)["error"]["code"], -32601);

    agent.send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read",
        "params": {"_meta": meta(), "uri": format!("doomberg://sessions/{sid}")}}),
    );
    let read = agent.reply(4);
    assert!(
        read["result"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&sid)),
        "{read}"
    );
    // The trace itself, over stdio (no SSE here): session_open and the
    // prompt's reasoning, then nothing after the last one.
    let trace_uri = descriptor["trace_resource"].as_str().expect("uri");
    agent.send(
        json!({"jsonrpc": "2.0", "id": 40, "method": "resources/read",
        "params": {"_meta": meta(), "uri": trace_uri}}),
    );
    let read = agent.reply(40);
    let text = read["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let page: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("{read}"));
    let kinds: Vec<&str> = page["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(kinds[..2], ["session_open", "reasoning"], "{page}");
    let last = page["last_seq"].as_i64().expect("last_seq");
    agent.send(
        json!({"jsonrpc": "2.0", "id": 41, "method": "resources/read",
        "params": {"_meta": meta(), "uri": format!("doomberg://sessions/{sid}/trace/{last}")}}),
    );
    let rest = agent.reply(41);
    let text = rest["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("\"events\":[]"),
        "nothing after last_seq: {rest}"
    );

    // Requests are checked one by one: no _meta is an error, not a crash.
    agent.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}));
    assert_eq!(agent.reply(5)["error"]["code"], -32602);

    // The agent id is per process: the session opened above is current.
    agent.send(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"_meta": meta(), "name": "session_close", "arguments": {}}}));
    let closed = agent.reply(6);
    assert_eq!(
        closed["result"]["structuredContent"]["status"], "closed",
        "{closed}"
    );

    agent.close_and_wait();
    assert!(
        dir.path().join("session.db").exists(),
        "services keep their data under the data directory"
    );
}

#[test]
fn legacy_era_over_stdio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut agent = Agent::launch(dir.path());
    agent.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}));
    let init = agent.reply(1);
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert!(
        init["result"]["instructions"]
            .as_str()
            .is_some_and(|i| i.contains("session_context"))
    );
    agent.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    agent.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let list = agent.reply(2);
    assert!(
        list["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "session_context")),
        "{list}"
    );
    agent.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "session_context", "arguments": {"prompt": "legacy stdio"}}}));
    let opened = agent.reply(3);
    assert_eq!(opened["result"]["isError"], false, "{opened}");
    agent.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "session_context", "arguments": {"prompt": 1}}}));
    let bad = agent.reply(4);
    assert!(
        common::tool_error(&bad["result"])["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("prompt")),
        "{bad}"
    );
    agent.close_and_wait();
}

/// Over stdio the agent's host shows stderr to people: by default only
/// warnings, and no colour codes when stderr is not a terminal.
#[test]
fn stdio_logs_are_quiet_and_plain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = common::ithaca();
    cmd.env_remove("ITHACA_INTERNAL_KEY")
        .env_remove("RUST_LOG")
        .args(["mcp", "--data-dir"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ithaca mcp");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for (id, name) in [(1, "session_context"), (2, "list_symbols")] {
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"_meta": meta(), "name": name, "arguments": {"prompt": "quiet"}}});
            writeln!(stdin, "{call}").expect("write");
        }
        // Give the calls time to run before stdin closes.
        std::thread::sleep(Duration::from_secs(2));
    }
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains('\u{1b}'), "ANSI codes on a pipe: {stderr}");
    assert!(
        !stderr.contains(" INFO "),
        "INFO lines by default: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout.lines().count(),
        2,
        "both calls were answered: {stdout}"
    );
}

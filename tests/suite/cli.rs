//! The local stack from the outside: `ithaca up` prints keys, serves health
//! SERVING for auth and session, `ithaca keys` creates, verifies and revokes
//! against it, SIGTERM stops it cleanly and a second start keeps the data.

use crate::common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

fn keys(data_dir: &Path, args: &[&str]) -> Output {
    let mut cmd = common::ithaca();
    cmd.arg("keys").args(args).arg("--data-dir").arg(data_dir);
    cmd.env_remove("ITHACA_INTERNAL_KEY"); // use the stack's key file, as a user would
    cmd.output().expect("run ithaca keys")
}

fn value_after<'a>(lines: &'a [String], label: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label:?} line in {lines:#?}"))
}

async fn serving(url: &str, service: &str) -> i32 {
    let channel = ithaca_kit::client::channel(url).expect("url");
    HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .expect("health check")
        .into_inner()
        .status
}

fn up(data_dir: &Path) -> common::Process {
    let mut cmd = common::ithaca();
    cmd.env_remove("ITHACA_INTERNAL_KEY")
        .args(["up", "--port-base", "0", "--data-dir"])
        .arg(data_dir);
    common::Process::spawn(cmd)
}

// Multi-threaded so the health clients' connections are driven (and closed)
// while the test blocks on child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_keys_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("stack");

    let mut stack = up(&data);
    let lines = stack.wait_for("ithaca: ready", Duration::from_secs(60));
    let agent_key = value_after(&lines, "agent key").to_owned();
    let human_key = value_after(&lines, "human key").to_owned();
    assert!(agent_key.starts_with("dmbg_test_"), "{agent_key}");
    assert!(human_key.starts_with("dmbg_test_"), "{human_key}");
    assert!(data.join("auth.db").exists() && data.join("session.db").exists());

    // Each service is printed with its port and the unix socket beside it,
    // in the data directory; both serve it.
    let sockets = std::fs::canonicalize(&data)
        .expect("data dir")
        .join("sockets");
    for (label, name) in [
        ("auth", ithaca_proto::service_names::AUTH),
        ("session", ithaca_proto::service_names::SESSION),
    ] {
        let urls: Vec<&str> = value_after(&lines, label).split_whitespace().collect();
        let [tcp, unix] = urls[..] else {
            panic!("{label}: expected a port and a socket, got {urls:?}");
        };
        assert!(tcp.starts_with("http://127.0.0.1:"), "{tcp}");
        assert_eq!(
            unix,
            format!("unix:{}", sockets.join(format!("{label}.sock")).display())
        );
        for url in [tcp, unix] {
            assert_eq!(
                serving(url, name).await,
                ServingStatus::Serving as i32,
                "{label} at {url}"
            );
        }
    }

    // MCP is served at the printed URL, for the printed agent key.
    let mcp_url = value_after(&lines, "mcp").to_owned();
    let base = mcp_url.trim_end_matches("/mcp");
    let bearer = format!("Bearer {agent_key}");
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"cli-test","version":"1"}}}"#;
    let reply = common::http::request(
        base,
        "POST",
        "/mcp",
        &[
            ("Authorization", &bearer),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        init.as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["result"]["serverInfo"]["name"], "ithaca");
    assert!(
        lines.iter().any(|l| l.contains("\"mcpServers\"")),
        "a client config is printed"
    );

    // Trace ids are recorded even though this stack logs at RUST_LOG=warn.
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"session_context","arguments":{"prompt":"trace ids"}}}"#;
    let reply = common::http::request(
        base,
        "POST",
        "/mcp",
        &[
            ("Authorization", &bearer),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        call.as_bytes(),
    )
    .await;
    let sid = reply.json()["result"]["structuredContent"]["session_id"]
        .as_str()
        .expect("a session")
        .to_owned();
    let stream = common::http::read_until(
        base,
        &format!("/api/sessions/{sid}/events/stream?after=0"),
        &[("Authorization", &bearer)],
        |t| t.contains("id: 2\n"),
    )
    .await;
    let trace_id = stream
        .split("\"trace_id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default();
    assert_eq!(trace_id.len(), 32, "events carry a trace id: {stream}");

    // The printed keys verify.
    for key in [&agent_key, &human_key] {
        let out = keys(&data, &["verify", key]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Create, verify, revoke, verify again.
    let out = keys(
        &data,
        &[
            "create",
            "--actor",
            "agent",
            "--scope",
            "data:read",
            "--scope",
            "runs:write",
            "--label",
            "ci",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let created: Vec<String> = stdout.lines().map(str::to_owned).collect();
    let token = value_after(&created, "token").to_owned();
    let key_id = value_after(&created, "key id").to_owned();
    assert!(keys(&data, &["verify", &token]).status.success());

    let listed = keys(&data, &["list", "--json"]);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(
        !listed.contains(&token[token.len() - 20..]),
        "no secret in the listing"
    );

    let out = keys(&data, &["revoke", &key_id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = keys(&data, &["verify", &token]);
    assert!(!out.status.success(), "a revoked key fails");
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid api key"));

    // Bad input is named.
    let out = keys(
        &data,
        &["create", "--actor", "robot", "--scope", "data:read"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--actor"));
    let out = keys(&data, &["create", "--actor", "agent", "--scope", "root"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scope"));

    // ctrl-c / SIGTERM stops it cleanly.
    let status = stack.terminate();
    assert!(status.success(), "clean exit: {status:?}");
    stack.wait_for("ithaca: stopped", Duration::from_secs(5));
    let left: Vec<_> = std::fs::read_dir(&sockets)
        .expect("the sockets folder")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "sockets outlived the stack: {left:?}");

    // A second start keeps the data and prints no new keys.
    let stack = up(&data);
    let lines = stack.wait_for("ithaca: ready", Duration::from_secs(60));
    assert!(
        lines.iter().any(|l| l.contains("data kept in")),
        "{lines:#?}"
    );
    assert!(!lines.iter().any(|l| l.contains("agent key")));
    let out = keys(&data, &["verify", &agent_key]);
    assert!(out.status.success(), "the first key survives a restart");
    let out = keys(&data, &["verify", &token]);
    assert!(!out.status.success(), "the revocation survives a restart");
}

#[test]
fn unknown_services_are_clear_errors() {
    let out = common::ithaca()
        .args(["serve", "billing"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("valid services: edge, auth, session"), "{err}");
}

#[test]
fn keys_without_a_stack_say_what_is_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = common::ithaca();
    cmd.env_remove("ITHACA_INTERNAL_KEY")
        .args(["keys", "list", "--data-dir"])
        .arg(dir.path());
    let out = cmd.output().expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no internal key"));
}

#[test]
fn an_unauthenticated_edge_refuses_non_loopback_addresses() {
    let out = common::ithaca()
        .args(["serve", "edge", "--auth", "off", "--listen", "0.0.0.0:0"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to serve MCP without authentication"),
        "{err}"
    );
}

/// An explicit edge port wins over `--port-base 0`, whether given as
/// `DOOMBERG_MCP_PORT` or `--mcp-port` (it used to be ignored silently),
/// for `ithaca up` and for `ithaca mcp` over HTTP (seed 000's
/// `DOOMBERG_MCP_TRANSPORT=http` with `DOOMBERG_MCP_PORT`, which listened on
/// 8080 whatever the port said).
#[test]
fn an_explicit_mcp_port_wins_over_port_base_zero() {
    for how in [&["up"][..], &["mcp"][..]] {
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = free.local_addr().expect("addr").port();
        drop(free);
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = common::ithaca();
        cmd.env_remove("ITHACA_INTERNAL_KEY")
            .env("DOOMBERG_MCP_PORT", port.to_string())
            .env("DOOMBERG_MCP_TRANSPORT", "http")
            .args(how)
            .args(["--port-base", "0", "--data-dir"])
            .arg(dir.path().join("stack"));
        let mut stack = common::Process::spawn(cmd);
        let lines = stack.wait_for("ithaca: ready", Duration::from_secs(60));
        assert_eq!(
            value_after(&lines, "mcp"),
            format!("http://127.0.0.1:{port}/mcp"),
            "ithaca {how:?}"
        );
        assert!(stack.terminate().success());
    }
}

/// `ithaca serve <service> --unix-socket PATH` serves on the socket beside
/// its port (one `listening on` line each), callers reach it with a
/// `unix:` URL, and the socket's file goes when the service stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_also_serves_on_the_unix_socket_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("auth.sock");
    let mut cmd = common::ithaca();
    cmd.args(["serve", "auth", "--listen", "127.0.0.1:0", "--database-url"])
        .arg(dir.path().join("auth.db"))
        .arg("--unix-socket")
        .arg(&socket);
    let mut auth = common::Process::spawn(cmd);
    let lines = auth.wait_for("listening on unix:", Duration::from_secs(60));
    let url = format!("unix:{}", socket.display());
    assert!(
        lines
            .iter()
            .any(|l| l == &format!("ithaca: auth listening on {url}")),
        "{lines:#?}"
    );
    let tcp = lines
        .iter()
        .find_map(|l| l.strip_prefix("ithaca: auth listening on 127.0.0.1:"))
        .map(|port| format!("http://127.0.0.1:{port}"))
        .expect("the port's line");
    for url in [&tcp, &url] {
        assert_eq!(
            serving(url, ithaca_proto::service_names::AUTH).await,
            ServingStatus::Serving as i32,
            "{url}"
        );
    }
    assert!(auth.terminate().success());
    assert!(!socket.exists(), "the socket outlived the service");
}

/// Two stacks on one data directory (`ithaca mcp` over stdio beside
/// `ithaca up`): the first holds the services' sockets, the second reaches
/// its own services over TCP instead of failing, and each answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stack_on_one_data_directory_talks_tcp_where_the_first_holds_the_sockets() {
    use ithaca::services::Service;
    use ithaca::up::{StackOptions, start_services};
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = ithaca::serve::BrokerArgs::default();
    let options = StackOptions {
        services: &[Service::Auth],
        ..StackOptions::local(dir.path(), 0, None, "", &broker)
    };
    let key = common::key();
    let (one, two) = (
        ithaca_kit::shutdown::CancellationToken::new(),
        ithaca_kit::shutdown::CancellationToken::new(),
    );
    let first = start_services(&options, &key, &one).await.expect("first");
    let second = start_services(&options, &key, &two).await.expect("second");
    let socket = std::fs::canonicalize(dir.path())
        .expect("dir")
        .join("sockets/auth.sock");
    assert_eq!(
        first.url(Service::Auth),
        Some(format!("unix:{}", socket.display()))
    );
    assert_eq!(second.url(Service::Auth), second.tcp_url(Service::Auth));
    for url in [first.url(Service::Auth), second.url(Service::Auth)] {
        let url = url.expect("an auth url");
        assert_eq!(
            serving(&url, ithaca_proto::service_names::AUTH).await,
            ServingStatus::Serving as i32,
            "{url}"
        );
    }
    // The second stack's stop leaves the first's socket alone.
    two.cancel();
    ithaca::up::join_all(second.tasks).await;
    assert!(socket.exists(), "the first stack's socket was removed");
    one.cancel();
    ithaca::up::join_all(first.tasks).await;
    assert!(!socket.exists(), "the socket outlived its stack");
}

//! Traces in a real collector (issue 15): Arize Phoenix, installed from PyPI
//! by `tests/otel/install.sh`, receives the stack's spans over OTLP/gRPC and
//! stores them; the test reads them back through Phoenix's REST API.
//!
//! The stack runs as separate `ithaca serve` processes (auth, session,
//! broker, edge), each exporting with `OTEL_EXPORTER_OTLP_ENDPOINT`, as a
//! deployment does. One agent tool call through the edge must be one trace:
//! its root the edge's MCP server span (with the MCP semantic-convention
//! attributes), the session's and the broker's gRPC server spans inside it,
//! every span's parent in the same trace, and the `trace_id` the session
//! recorded on the call's trace events equal to that trace's id.
//!
//! Without Phoenix the test prints `NOT RUN`; with
//! `ITHACA_TEST_REQUIRE_PHOENIX` set (as `.ci/run` does) it fails instead.
//! `ITHACA_TEST_PHOENIX` names the `phoenix` executable (default
//! `.ci/tools/phoenix/bin/phoenix`).

use crate::common;

use common::{Process, http};
use ithaca_kit::json;
use ithaca_proto::session::v1 as pb;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long Phoenix may take to start (it creates its SQLite schema with
/// some forty migrations; on a busy two-core machine that took over two
/// minutes), and spans to become queryable.
const PATIENCE: Duration = Duration::from_secs(300);

/// The `phoenix` executable, or `None` after saying the test did not run.
fn phoenix_executable() -> Option<PathBuf> {
    let path = std::env::var_os("ITHACA_TEST_PHOENIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/tools/phoenix/bin/phoenix")
        });
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("ITHACA_TEST_REQUIRE_PHOENIX").is_none(),
        "ITHACA_TEST_REQUIRE_PHOENIX is set but there is no Phoenix at {} \
         (install it with tests/otel/install.sh)",
        path.display()
    );
    eprintln!(
        "NOT RUN: traces_reach_a_real_collector needs Arize Phoenix; install it with \
         tests/otel/install.sh (or set ITHACA_TEST_PHOENIX to its phoenix executable)"
    );
    None
}

/// Phoenix serving on loopback, killed when dropped; its output goes to a
/// log file shown when the test fails.
struct Phoenix {
    child: Child,
    log: PathBuf,
    /// `http://127.0.0.1:<port>`: the UI and the REST API.
    http: String,
    /// `http://127.0.0.1:<port>`: the OTLP/gRPC receiver.
    otlp: String,
}

impl Phoenix {
    fn start(executable: &Path, dir: &Path) -> Phoenix {
        // Phoenix takes its ports from the environment and cannot report a
        // port the OS chose, so free ports are found first (another process
        // could take one in between; then Phoenix fails to start and says
        // so).
        let (http_port, grpc_port) = {
            let a = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let b = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            (
                a.local_addr().expect("addr").port(),
                b.local_addr().expect("addr").port(),
            )
        };
        let work = dir.join("phoenix");
        std::fs::create_dir_all(&work).expect("phoenix working dir");
        let log = dir.join("phoenix.log");
        let out = std::fs::File::create(&log).expect("phoenix log");
        let child = Command::new(executable)
            .arg("serve")
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", http_port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            .env("PHOENIX_WORKING_DIR", &work)
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("PHOENIX_LOG_MIGRATIONS", "false")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", executable.display()));
        Phoenix {
            child,
            log,
            http: format!("http://127.0.0.1:{http_port}"),
            otlp: format!("http://127.0.0.1:{grpc_port}"),
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Wait until the REST API answers and the OTLP port accepts
    /// connections (an exporter that finds no receiver drops its spans).
    async fn ready(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        let grpc = self.otlp.trim_start_matches("http://").to_owned();
        loop {
            if let Some(status) = self.child.try_wait().expect("phoenix status") {
                panic!("phoenix exited ({status}):\n{}", self.log_tail());
            }
            let up = tokio::net::TcpStream::connect(&grpc).await.is_ok()
                && tokio::net::TcpStream::connect(self.http.trim_start_matches("http://"))
                    .await
                    .is_ok()
                && http::request(&self.http, "GET", "/healthz", &[], b"")
                    .await
                    .status
                    == 200;
            if up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "phoenix not ready within {PATIENCE:?}:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every span Phoenix stored for `trace_id`, in the OTLP JSON form
    /// (`attributes` as a list of `{key, value}`).
    async fn spans(&self, trace_id: &str) -> Vec<Value> {
        let path = format!("/v1/projects/default/spans/otlpv1?trace_id={trace_id}&limit=1000");
        let reply = http::request(&self.http, "GET", &path, &[], b"").await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        reply.json()["data"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s["trace_id"] == trace_id)
            .collect()
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ithaca serve <service>` on a free loopback port, exporting its spans to
/// `otlp`; the process and its URL.
fn serve(service: &str, otlp: &str, args: &[&str]) -> (Process, String) {
    let mut cmd = common::ithaca();
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
        // Export batches every 200 ms, not every 5 s; the processes are
        // stopped (which flushes) before Phoenix is asked anyway.
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .args(["serve", service, "--listen", "127.0.0.1:0"])
        .args(args);
    let process = Process::spawn(cmd);
    let lines = process.wait_for("listening on", Duration::from_secs(60));
    let addr = lines
        .last()
        .and_then(|l| l.rsplit(' ').next())
        .expect("listening line has an address")
        .to_owned();
    (process, format!("http://{addr}"))
}

/// Run an `ithaca` admin command against `auth`; its standard output.
fn admin(data_dir: &Path, args: &[&str]) -> String {
    let out = common::ithaca()
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("run ithaca");
    assert!(
        out.status.success(),
        "ithaca {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn call(edge: &str, token: &str, tool: &str, arguments: Value) -> Value {
    let reply = http::modern(
        edge,
        token,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    assert_eq!(reply.status, 200, "{tool}: {}", reply.text());
    let body = reply.json();
    assert_eq!(body["result"]["isError"], false, "{tool}: {body}");
    body
}

/// A string attribute of an OTLP JSON span.
fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["string_value"]
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_a_real_collector() {
    let Some(executable) = phoenix_executable() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut phoenix = Phoenix::start(&executable, dir.path());
    phoenix.ready().await;
    let otlp = phoenix.otlp.clone();

    let (auth_db, session_db, broker_db) = (
        common::sqlite_path(&dir, "auth"),
        common::sqlite_path(&dir, "session"),
        common::sqlite_path(&dir, "broker"),
    );
    let (mut auth, auth_url) = serve("auth", &otlp, &["--database-url", &auth_db]);
    let (mut session, session_url) = serve("session", &otlp, &["--database-url", &session_db]);
    let (mut broker, broker_url) = serve("broker", &otlp, &["--database-url", &broker_db]);
    let (mut edge, edge_url) = serve(
        "edge",
        &otlp,
        &[
            "--auth-url",
            &auth_url,
            "--session-url",
            &session_url,
            "--broker-url",
            &broker_url,
        ],
    );

    let admin_dir = dir.path().join("admin");
    let created = admin(
        &admin_dir,
        &["tenants", "create", "--auth-url", &auth_url, "otel"],
    );
    let tenant = created
        .split_whitespace()
        .next()
        .expect("tenant id printed")
        .to_owned();
    let created = admin(
        &admin_dir,
        &[
            "keys",
            "create",
            "--auth-url",
            &auth_url,
            "--tenant",
            &tenant,
            "--actor",
            "agent",
            "--scope",
            "data:read",
        ],
    );
    let token = created
        .lines()
        .find_map(|l| l.strip_prefix("token"))
        .map(str::trim)
        .expect("token printed")
        .to_owned();

    // The agent opens a session, then makes the call under test.
    let opened = call(
        &edge_url,
        &token,
        "session_context",
        json!({"prompt": "otel"}),
    )
    .await;
    let session_id = opened["result"]["structuredContent"]["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();
    call(&edge_url, &token, "list_symbols", json!({})).await;

    // The session's record of that call, and the trace id it carries.
    let mut reader = common::session_client(&session_url, common::human(&tenant, "reader"));
    let events = reader
        .read_events(pb::ReadEventsRequest {
            session_id: session_id.clone(),
            after_seq: 0,
            limit: Some(100),
        })
        .await
        .expect("read the session's trace")
        .into_inner()
        .events;
    let of_call: Vec<&pb::TraceEvent> = events
        .iter()
        .filter(|e| {
            e.payload
                .clone()
                .map(json::from_struct)
                .is_some_and(|p| p["name"] == "list_symbols")
        })
        .collect();
    let result = of_call
        .iter()
        .find(|e| e.r#type == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result of list_symbols in {events:#?}"));
    let trace_id = result.trace_id.clone();
    assert_eq!(
        trace_id.len(),
        32,
        "a trace id of 32 hex digits: {trace_id:?}"
    );
    let provenance =
        json::from_struct(result.payload.clone().expect("payload"))["provenance"]["trace_id"]
            .clone();
    assert_eq!(
        provenance, trace_id,
        "the edge's provenance names the same trace"
    );
    for e in &of_call {
        assert_eq!(e.trace_id, trace_id, "every event of the call: {e:?}");
    }
    let opening_trace = events
        .iter()
        .find(|e| e.seq == 1)
        .map(|e| e.trace_id.clone())
        .expect("the session's first event");
    assert_ne!(opening_trace, trace_id, "each agent call is its own trace");

    // Stopping the processes flushes whatever they have not exported yet.
    for p in [&mut edge, &mut broker, &mut session, &mut auth] {
        assert!(p.terminate().success());
    }

    // Phoenix stores spans shortly after it receives them.
    let deadline = Instant::now() + PATIENCE;
    let spans = loop {
        let spans = phoenix.spans(&trace_id).await;
        let names: HashSet<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
        let complete = names.contains("tools/call list_symbols")
            && names.contains("ithaca.broker.v1.BrokerService/ListSymbols")
            && names.contains("ithaca.session.v1.SessionService/AppendEvent");
        if complete {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "trace {trace_id} incomplete in Phoenix after {PATIENCE:?}: {names:?}\n{}",
            phoenix.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // One root: the edge's MCP server span, with the MCP semantic
    // conventions' attributes.
    let ids: HashMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["span_id"].as_str().expect("span id"), s))
        .collect();
    let roots: Vec<&Value> = spans
        .iter()
        .filter(|s| s["parent_span_id"].as_str().unwrap_or("").is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "one root in {spans:#?}");
    let root = roots[0];
    assert_eq!(root["name"], "tools/call list_symbols");
    assert_eq!(attribute(root, "mcp.method.name"), Some("tools/call"));
    assert_eq!(attribute(root, "gen_ai.tool.name"), Some("list_symbols"));
    assert_eq!(
        attribute(root, "gen_ai.operation.name"),
        Some("execute_tool")
    );
    assert_eq!(attribute(root, "mcp.protocol.version"), Some("2026-07-28"));
    // Every other span hangs from a span of the same trace.
    for span in &spans {
        if let Some(parent) = span["parent_span_id"].as_str().filter(|p| !p.is_empty()) {
            assert!(
                ids.contains_key(parent),
                "{} has a parent outside the trace",
                span["name"]
            );
        }
    }
    // The session and the broker answered inside it, as gRPC servers, each
    // a child of the edge's span.
    for (name, service) in [
        (
            "ithaca.session.v1.SessionService/AppendEvent",
            "ithaca.session.v1.SessionService",
        ),
        (
            "ithaca.broker.v1.BrokerService/ListSymbols",
            "ithaca.broker.v1.BrokerService",
        ),
    ] {
        let span = spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} span"));
        assert_eq!(attribute(span, "rpc.system"), Some("grpc"), "{name}");
        assert_eq!(attribute(span, "rpc.service"), Some(service), "{name}");
        assert_eq!(span["parent_span_id"], root["span_id"], "{name}");
    }
    let mut names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
    names.sort_unstable();
    eprintln!(
        "phoenix: trace {trace_id} of one tools/call holds {} spans: {names:?}",
        spans.len()
    );
    drop(phoenix);
}

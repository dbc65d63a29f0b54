//! The web console in a real browser: Debian's Chromium driven through
//! chromedriver (WebDriver, `fantoccini`), against `ithaca up`, with an MCP
//! client (raw HTTP JSON-RPC) playing the agent.
//!
//! Without Chromium these tests print NOT RUN and pass, like the PostgreSQL
//! ones; with `ITHACA_TEST_REQUIRE_BROWSER` set (as `.ci/run` does) they
//! fail instead. Screenshots of each main page land in
//! `<target>/console-screenshots/`.

use crate::common;

use common::http;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Up;

fn up() -> Up {
    common::up(&[])
}

/// One `tools/call` as an MCP client sends it (2026-07-28, stateless),
/// with the agent's key.
async fn call(up: &Up, tool: &str, arguments: Value) -> Value {
    call_as(up, &up.agent.clone(), tool, arguments).await
}

/// One `tools/call` with `token`.
async fn call_as(up: &Up, token: &str, tool: &str, arguments: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "console-test", "version": "1"},
        },
    }});
    let auth = format!("Bearer {token}");
    let reply = http::request(
        &up.url,
        "POST",
        "/mcp",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", tool),
        ],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 200, "{tool}: {}", reply.text());
    reply.json()["result"].clone()
}

/// A browser session, or `None` (after saying NOT RUN) without Chromium.
struct Browser {
    client: Client,
    _driver: common::Process,
    _profile: tempfile::TempDir,
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

async fn browser(test: &str) -> Option<Browser> {
    if !(have("chromium") && have("chromedriver")) {
        assert!(
            std::env::var_os("ITHACA_TEST_REQUIRE_BROWSER").is_none(),
            "ITHACA_TEST_REQUIRE_BROWSER is set but chromium or chromedriver is missing \
             (apt-get install chromium chromium-driver)"
        );
        eprintln!(
            "NOT RUN: {test} needs chromium and chromedriver (apt-get install chromium chromium-driver)"
        );
        return None;
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("addr").port()
    };
    let mut cmd = Command::new("chromedriver");
    cmd.arg(format!("--port={port}"));
    let driver = common::Process::spawn(cmd);
    driver.wait_for("started successfully", Duration::from_secs(30));
    let profile = tempfile::tempdir().expect("profile dir");
    let args = [
        "--headless=new".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--no-first-run".to_owned(),
        "--window-size=1440,960".to_owned(),
        format!("--user-data-dir={}", profile.path().display()),
    ];
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({"binary": "/usr/bin/chromium", "args": args}),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("start a browser session");
    Some(Browser {
        client,
        _driver: driver,
        _profile: profile,
    })
}

impl Browser {
    async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    async fn text(&self, css: &str) -> String {
        self.client
            .wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
            .text()
            .await
            .expect("text")
    }

    async fn click(&self, css: &str) {
        self.client
            .wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} to click: {e}"))
            .click()
            .await
            .expect("click");
    }

    async fn fill(&self, css: &str, text: &str) {
        self.client
            .wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} to fill: {e}"))
            .send_keys(text)
            .await
            .expect("type");
    }

    /// Run `script` (a function body returning a value) in the page.
    async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("script failed ({e}): {script}"))
    }

    /// Wait until `script` returns true.
    async fn until(&self, what: &str, script: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.js(script).await == json!(true) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    async fn path(&self) -> String {
        self.client
            .current_url()
            .await
            .expect("url")
            .path()
            .to_owned()
    }

    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("target dir")
            .join("console-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }

    /// Mark the current document, so [`Browser::new_page`] can tell when
    /// another one has loaded (a form post may land on the same URL).
    async fn mark(&self) {
        self.js("window.__stale = true; return true").await;
    }

    async fn new_page(&self) {
        self.until(
            "the next page",
            "return !window.__stale && document.readyState === 'complete'",
        )
        .await;
    }

    /// Click something that loads a new page, and wait for it.
    async fn submit(&self, css: &str) {
        self.mark().await;
        self.click(css).await;
        self.new_page().await;
    }

    async fn sign_in(&self, up: &Up, key: &str) {
        self.goto(&format!("{}/console/sign-in", up.url)).await;
        self.fill("#key", key).await;
        self.submit("#sign-in").await;
    }
}

/// The seqs shown in the trace: (count, distinct, largest).
const SEQS: &str = "const s = [...document.querySelectorAll('#trace [data-seq]')].map(e => +e.dataset.seq); \
    return [s.length, new Set(s).size, s.length ? Math.max(...s) : 0];";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_sign_in_csrf_tenants_revocation_and_sign_out() {
    let Some(b) = browser("browser_sign_in_csrf_tenants_revocation_and_sign_out").await else {
        return;
    };
    let up = up();

    // Signed out, every page leads to the sign-in form.
    b.goto(&format!("{}/console/sessions", up.url)).await;
    assert_eq!(b.path().await, "/console/sign-in");

    // An agent key is refused with a clear message.
    b.sign_in(&up, &up.agent).await;
    let refused = b.text("#sign-in-error").await;
    assert!(refused.contains("agent key"), "{refused}");
    b.screenshot("sign-in-agent-refused").await;
    let cookies = b.client.get_all_cookies().await.expect("cookies");
    assert!(
        cookies.is_empty(),
        "no cookie for an agent key: {cookies:?}"
    );

    // A human key signs in; the cookie is HttpOnly and Strict, and holds no key.
    b.sign_in(&up, &up.human).await;
    assert_eq!(b.path().await, "/console/sessions");
    let empty = b.text("#empty").await;
    assert!(empty.contains("No sessions yet"), "{empty}");
    b.screenshot("sessions-empty").await;
    let cookie = b
        .client
        .get_named_cookie("ithaca_console")
        .await
        .expect("console cookie");
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(
        cookie.same_site().map(|s| s.to_string()),
        Some("Strict".to_owned())
    );
    // The secret is everything after the token's first three `_`; it is
    // base64url and may hold `_` itself (splitting on the last one gave a
    // tail of a few characters that a cookie could contain by chance).
    let secret = up.human.splitn(4, '_').nth(3).expect("secret");
    assert!(secret.len() >= 32, "{secret}");
    assert!(!cookie.value().contains(secret));
    assert_eq!(
        b.js("return document.cookie").await,
        json!(""),
        "scripts cannot read it"
    );

    // A page of another site (same host, another port) posts a form to the
    // console: refused, and nothing is created.
    let attacker = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let attacker_url = format!("http://{}", attacker.local_addr().expect("addr"));
    let target = format!("{}/console/sessions", up.url);
    let page = format!(
        "<!doctype html><form id=f method=post action='{target}'>\
         <input name=prompt value='csrf attack'></form><script>document.getElementById('f').submit()</script>"
    );
    tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let page = page.clone();
                async move { axum::response::Html(page) }
            }),
        );
        let _ = axum::serve(attacker, app).await;
    });
    b.goto(&attacker_url).await;
    let message = b.text("#error-message").await;
    assert!(message.contains("Cross-site"), "{message}");
    b.screenshot("csrf-refused").await;
    // From the console's own origin but without the token: refused too.
    b.goto(&format!("{}/console/sessions", up.url)).await;
    let status = b
        .js("return fetch('/console/sessions', {method: 'POST', body: new URLSearchParams({prompt: 'no token'})}).then(r => r.status)")
        .await;
    assert_eq!(status, json!(403));
    b.goto(&format!("{}/console/sessions", up.url)).await;
    assert!(b.text("#empty").await.contains("No sessions yet"));

    // Another tenant's session is not found, page and stream alike.
    let mut auth = common::auth_client(&up.auth_url, ithaca_kit::principal::Principal::system(""));
    let other = auth
        .create_tenant(ithaca_proto::auth::v1::CreateTenantRequest {
            name: "other".into(),
        })
        .await
        .expect("tenant")
        .into_inner()
        .tenant_id;
    let session_url = {
        let lines = std::fs::read_to_string(up.data_dir.join("stack.json")).expect("stack.json");
        let v: Value = serde_json::from_str(&lines).expect("json");
        v["session_url"].as_str().expect("session url").to_owned()
    };
    let foreign = common::session_client(&session_url, common::agent(&other, "other-agent"))
        .session_context(ithaca_proto::session::v1::SessionContextRequest {
            prompt: Some("another tenant's secret research".into()),
            ..Default::default()
        })
        .await
        .expect("foreign session")
        .into_inner()
        .session_id;
    b.goto(&format!("{}/console/sessions/{foreign}", up.url))
        .await;
    assert_eq!(b.text("h2").await, "Not found");
    let page = b.client.source().await.expect("source");
    assert!(!page.contains("secret research"));
    let stream = b
        .js(&format!(
            "return fetch('/api/sessions/{foreign}/events/stream').then(r => r.status)"
        ))
        .await;
    assert_eq!(stream, json!(404));

    // Keys: create a person's key (its token shown once), sign in with it,
    // revoke it from its own page: the console session ends within the
    // key cache window.
    b.goto(&format!("{}/console/keys", up.url)).await;
    b.fill("#label", "second person").await;
    b.js("document.getElementById('actor').value = 'human'; return true")
        .await;
    b.submit("#create-key button[type=submit]").await;
    let token = b.text("#created-token").await;
    assert!(token.starts_with("dmbg_"), "{token}");
    b.screenshot("keys-created").await;
    b.submit("header .who button").await; // sign out
    assert_eq!(b.path().await, "/console/sign-in");
    assert!(b.text("#notice").await.contains("signed out"));
    b.goto(&format!("{}/console/sessions", up.url)).await;
    assert_eq!(b.path().await, "/console/sign-in", "signed out for good");
    b.sign_in(&up, &token).await;
    assert_eq!(b.path().await, "/console/sessions");
    // Watching a session's live trace, the person revokes their own key
    // (through the console's revoke route, as the Keys page's button does):
    // the open stream stops and the next page asks to sign in again.
    b.fill("#prompt", "watched while revoked").await;
    b.submit("#start-session button[type=submit]").await;
    b.until(
        "the live stream",
        "return document.getElementById('live-state').textContent === 'live'",
    )
    .await;
    let key_id = token.split('_').nth(2).expect("key id").to_owned();
    let revoked = b
        .js(&format!(
            "const csrf = document.querySelector('input[name=csrf]').value; \
             return fetch('/console/keys/{key_id}/revoke', {{method: 'POST', body: new URLSearchParams({{csrf}})}}) \
               .then(r => r.text().then(t => [r.status, new URL(r.url).pathname + new URL(r.url).search, t.includes('was revoked')]))"
        ))
        .await;
    // The revoke answers with the keys page, which the revoked key can no
    // longer open: it lands on the sign-in page, saying why (and the
    // cookie is cleared there).
    assert_eq!(
        revoked,
        json!([200, "/console/sign-in?reason=ended", true]),
        "revoked, then sent to sign in"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = b.text("#live-state").await;
        if state.starts_with("stopped") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stream went on after revocation: {state}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    b.screenshot("session-stream-stopped").await;
    b.goto(&format!("{}/console/sessions", up.url)).await;
    assert_eq!(
        b.path().await,
        "/console/sign-in",
        "revocation ended the sign-in"
    );
    let _ = b.client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_live_trace_reload_and_close() {
    let Some(b) = browser("browser_live_trace_reload_and_close").await else {
        return;
    };
    let up = up();
    b.sign_in(&up, &up.human).await;

    // A person starts a session; the page gives its id and a join snippet.
    b.fill("#prompt", "How volatile was AAPL in 2012?").await;
    b.fill("#title", "AAPL volatility").await;
    b.submit("#start-session button[type=submit]").await;
    let session_id = b.text("#session-id").await;
    assert!(b.text("#join-snippet").await.contains(&session_id));
    b.until(
        "the live stream",
        "return document.getElementById('live-state').textContent === 'live'",
    )
    .await;

    // An agent joins it over MCP; its calls appear live.
    let joined = call(
        &up,
        "session_context",
        json!({"session_id": session_id, "prompt": "joining from the console's snippet"}),
    )
    .await;
    assert_eq!(joined["structuredContent"]["session_id"], json!(session_id));
    call(
        &up,
        "run_skill",
        json!({"skill_id": "vol.realized", "inputs": {"symbol": "AAPL", "window": 21}}),
    )
    .await;
    let failed = call(&up, "describe_skill", json!({"skill_id": "no.such.skill"})).await;
    assert_eq!(failed["isError"], json!(true));
    b.until(
        "run_skill to appear with its result",
        "return [...document.querySelectorAll('#trace li.type-tool_call')].some(li => \
            li.textContent.includes('run_skill') && li.querySelector('.outcome.good'))",
    )
    .await;
    b.until(
        "the failed call, highlighted",
        "return [...document.querySelectorAll('#trace li.is-error')].some(li => li.textContent.includes('describe_skill'))",
    )
    .await;
    // A failed call's event is not the stream's own error: the page stays
    // live (an event named `error` made EventSource report a broken
    // connection, and the page said "reconnecting…" for good).
    assert_eq!(
        b.text("#live-state").await,
        "live",
        "the live indicator after a failed call"
    );
    b.js(
        "document.querySelectorAll('#trace details.call').forEach(d => d.open = true); return true",
    )
    .await;
    b.screenshot("session-live").await;
    let before = b.js(SEQS).await;
    assert_eq!(before[0], before[1], "no duplicate: {before}");
    assert_eq!(before[0], before[2], "no gap from seq 1: {before}");

    // Reload: the same trace, replayed from seq 0, without duplicates.
    b.client.refresh().await.expect("reload");
    let want = before[2].as_i64().expect("max seq");
    b.until(
        "the replay",
        &format!("return document.querySelectorAll('#trace [data-seq]').length >= {want}"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.js(SEQS).await, before, "the same trace after a reload");

    // Close from the page: the trace ends with session_closed, and the
    // agent's next call is refused.
    b.mark().await;
    b.click("#close-session").await;
    b.client.accept_alert().await.expect("confirm closing");
    b.new_page().await;
    b.until(
        "session_closed in the trace",
        "return !!document.querySelector('#trace li.type-session_closed')",
    )
    .await;
    assert_eq!(b.text("#session-status").await, "closed");
    b.until(
        "the stream to end",
        "return document.getElementById('live-state').textContent.startsWith('ended')",
    )
    .await;
    b.screenshot("session-closed").await;
    let refused = call(&up, "describe_skill", json!({"skill_id": "vol.realized"})).await;
    let error = common::tool_error(&refused);
    assert_eq!(error["error"], json!("no_active_session"), "{refused}");

    // The list shows it, filtered by status.
    b.goto(&format!("{}/console/sessions?status=closed", up.url))
        .await;
    assert!(b.text("#sessions").await.contains("AAPL volatility"));
    b.screenshot("sessions-list").await;
    b.goto(&format!("{}/console/sessions?status=open", up.url))
        .await;
    assert!(b.text("#empty").await.contains("No sessions match"));
    let _ = b.client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_approval_decided_and_run_artifacts() {
    let Some(b) = browser("browser_approval_decided_and_run_artifacts").await else {
        return;
    };
    let up = up();
    b.sign_in(&up, &up.human).await;

    // An agent proposes a strategy and asks to promote it.
    let opened = call(
        &up,
        "session_context",
        json!({"prompt": "A momentum strategy on AAPL and MSFT"}),
    )
    .await;
    let session_id = opened["structuredContent"]["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let strategy = call(
        &up,
        "propose_strategy",
        json!({"name": "tech momentum", "universe": ["AAPL", "MSFT"], "lookback": 60, "rebalance": 20}),
    )
    .await;
    let strategy_id = strategy["structuredContent"]["strategy_id"]
        .as_str()
        .unwrap_or_else(|| panic!("strategy: {strategy}"))
        .to_owned();
    let backtest = call(
        &up,
        "run_skill",
        json!({"skill_id": "backtest.momentum", "inputs": {"strategy_id": strategy_id}}),
    )
    .await;
    assert_eq!(
        backtest["structuredContent"]["status"], "succeeded",
        "{backtest}"
    );
    let mut policy = common::ithaca();
    policy
        .args(["policy", "set", "--trading", "on", "--data-dir"])
        .arg(&up.data_dir);
    let status = policy.status().expect("ithaca policy set");
    assert!(status.success());
    let promoted = call(
        &up,
        "promote_strategy",
        json!({"strategy_id": strategy_id, "mode": "paper"}),
    )
    .await;
    let approval_id = promoted["structuredContent"]["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("promotion: {promoted}"))
        .to_owned();

    // The inbox shows it; the person approves with a reason.
    b.goto(&format!("{}/console/approvals", up.url)).await;
    let card = format!("article[data-approval='{approval_id}']");
    let text = b.text(&card).await;
    assert!(text.contains("promote_strategy"), "{text}");
    assert!(text.contains(&strategy_id), "arguments shown: {text}");
    assert!(
        text.contains("paper trading enabled"),
        "policy shown: {text}"
    );
    assert!(
        text.contains("promote strategy \"tech momentum\" to paper trading"),
        "what it would do: {text}"
    );
    b.screenshot("approvals-inbox").await;
    b.fill(&format!("{card} input[name=note]"), "backtest looks sane")
        .await;
    b.submit(&format!("{card} button[value=approve]")).await;
    assert_eq!(b.path().await, format!("/console/approvals/{approval_id}"));
    assert_eq!(b.text("#approval-status").await, "executed");
    assert_eq!(b.text("#approval-note").await, "backtest looks sane");
    assert!(b.text("#approval-result").await.contains("paper"));
    // What was approved: the strategy's spec and its backtest's figures.
    let what = b.text("#approval-summary").await;
    for shown in ["AAPL", "MSFT", "total_return", "sharpe", "max_drawdown"] {
        assert!(what.contains(shown), "{shown} on the approval page: {what}");
    }
    b.screenshot("approval-decided").await;

    // The session's trace holds the request, the decision and the execution.
    b.goto(&format!("{}/console/sessions/{session_id}", up.url))
        .await;
    b.until(
        "approval events in the trace",
        "return document.querySelectorAll('#trace li.type-approval').length >= 3",
    )
    .await;

    // A run with an SVG chart and a CSV: the chart is drawn, the CSV downloads.
    let run = call(
        &up,
        "run_skill",
        json!({"skill_id": "backtest.momentum", "inputs": {"symbol": "AAPL", "lookback": 60, "rebalance": 20}}),
    )
    .await;
    let run_id = run["structuredContent"]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("run: {run}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = call(&up, "get_run", json!({"run_id": run_id})).await;
        let status = got["structuredContent"]["status"].clone();
        if status == json!("succeeded") {
            break;
        }
        assert!(
            status != json!("failed") && Instant::now() < deadline,
            "run: {got}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    b.goto(&format!("{}/console/runs/{run_id}", up.url)).await;
    b.until(
        "the SVG chart to render",
        "const i = document.querySelector('img.svg'); return !!i && i.complete && i.naturalWidth > 0",
    )
    .await;
    assert!(b.text("#transitions").await.contains("succeeded"));
    b.screenshot("run").await;
    let csv = b
        .js("return fetch(document.querySelector('a.download').href).then(r => r.text())")
        .await;
    assert!(
        csv.as_str().unwrap_or("").starts_with("date,equity"),
        "{csv}"
    );
    let headers = b
        .js("return fetch(document.querySelector('img.svg').src).then(r => [r.headers.get('content-type'), r.headers.get('content-security-policy')])")
        .await;
    assert_eq!(headers[0], json!("image/svg+xml"));
    assert!(headers[1].as_str().unwrap_or("").contains("sandbox"));
    let _ = b.client.close().await;
}

/// The structured content of a successful tool result.
fn ok(result: &Value) -> Value {
    assert_eq!(result["isError"], false, "{result}");
    result["structuredContent"].clone()
}

/// The console over plain HTTP, as a replayed request reaches it: no
/// browser, so these run everywhere (issue 28, items 10 to 12).
mod plain {
    use super::*;
    use ithaca_kit::principal::Principal;
    use ithaca_proto::auth::v1 as apb;

    /// `application/x-www-form-urlencoded` of `pairs`.
    fn form(pairs: &[(&str, &str)]) -> String {
        pairs
            .iter()
            .map(|(k, v)| {
                let mut out = format!("{k}=");
                for b in v.bytes() {
                    match b {
                        b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                            out.push(b as char)
                        }
                        b' ' => out.push('+'),
                        _ => out.push_str(&format!("%{b:02X}")),
                    }
                }
                out
            })
            .collect::<Vec<_>>()
            .join("&")
    }

    fn origin(up: &Up) -> String {
        up.url.trim_end_matches('/').to_owned()
    }

    async fn get(up: &Up, path: &str, cookie: &str) -> http::Reply {
        let cookie = format!("ithaca_console={cookie}");
        http::request(&up.url, "GET", path, &[("Cookie", &cookie)], b"").await
    }

    async fn post(up: &Up, path: &str, cookie: Option<&str>, body: &str) -> http::Reply {
        let origin = origin(up);
        let cookie = cookie.map(|c| format!("ithaca_console={c}"));
        let mut headers = vec![
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Origin", origin.as_str()),
        ];
        if let Some(c) = &cookie {
            headers.push(("Cookie", c.as_str()));
        }
        http::request(&up.url, "POST", path, &headers, body.as_bytes()).await
    }

    /// Sign in with `key`: the cookie's value.
    async fn sign_in(up: &Up, key: &str) -> String {
        let reply = post(up, "/console/sign-in", None, &form(&[("key", key)])).await;
        assert_eq!(reply.status, 303, "{}", reply.text());
        reply
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
            .find_map(|(_, v)| {
                let value = v.strip_prefix("ithaca_console=")?.split(';').next()?;
                (!value.is_empty()).then(|| value.to_owned())
            })
            .unwrap_or_else(|| panic!("no cookie: {:?}", reply.headers))
    }

    /// The CSRF token of a signed-in page.
    fn csrf(page: &http::Reply) -> String {
        let text = page.text();
        let at = text
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no csrf field: {text}"));
        let rest = &text[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').expect("end of value")].to_owned()
    }

    /// Whether `reply` sends the browser to sign in.
    fn to_sign_in(reply: &http::Reply) -> bool {
        reply.status == 303
            && reply
                .header("location")
                .is_some_and(|l| l.starts_with("/console/sign-in"))
    }

    fn stack_info(up: &Up) -> Value {
        let text = std::fs::read_to_string(up.data_dir.join("stack.json")).expect("stack.json");
        serde_json::from_str(&text).expect("json")
    }

    /// A new human key of the stack's tenant: (token, key id).
    async fn human_key(up: &Up) -> (String, String) {
        let tenant = stack_info(up)["tenant_id"]
            .as_str()
            .expect("tenant")
            .to_owned();
        let created = common::auth_client(&up.auth_url, Principal::system(""))
            .create_key(apb::CreateKeyRequest {
                tenant_id: tenant,
                scopes: vec!["data:read".into()],
                actor: apb::Actor::Human as i32,
                label: "replay".into(),
                env: String::new(),
            })
            .await
            .expect("create key")
            .into_inner();
        (created.token, created.key.expect("key").key_id)
    }

    /// How many sessions the tenant has, by title.
    async fn sessions_titled(up: &Up, title: &str) -> usize {
        let info = stack_info(up);
        let mut client = common::session_client(
            info["session_url"].as_str().expect("session url"),
            Principal::system(info["tenant_id"].as_str().expect("tenant")),
        );
        let listed = client
            .list_sessions(ithaca_proto::session::v1::ListSessionsRequest {
                limit: 100,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        listed
            .sessions
            .iter()
            .filter(|s| s.session.as_ref().is_some_and(|d| d.title == title))
            .count()
    }

    /// Item 10: a cookie kept from before sign-out, or from before the
    /// key was revoked, is refused at once: it reads nothing and creates
    /// nothing. (Before, it worked for its eight hours.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cookie_replayed_after_sign_out_or_revocation_is_refused() {
        let up = up();
        let cookie = sign_in(&up, &up.human).await;
        let page = get(&up, "/console/keys", &cookie).await;
        assert_eq!(page.status, 200, "{}", page.text());
        let token = csrf(&page);
        let start =
            |title: &str| form(&[("csrf", &token), ("prompt", "replayed"), ("title", title)]);
        let made = post(
            &up,
            "/console/sessions",
            Some(&cookie),
            &start("before sign-out"),
        )
        .await;
        assert_eq!(made.status, 303, "{}", made.text());
        assert_eq!(sessions_titled(&up, "before sign-out").await, 1);

        let out = post(
            &up,
            "/console/sign-out",
            Some(&cookie),
            &form(&[("csrf", &token)]),
        )
        .await;
        assert!(to_sign_in(&out), "{} {:?}", out.status, out.headers);
        // The same cookie, replayed: every page and form sends it to sign in.
        for path in ["/console/keys", "/console/sessions", "/console/approvals"] {
            let replayed = get(&up, path, &cookie).await;
            assert!(
                to_sign_in(&replayed),
                "{path}: {} {}",
                replayed.status,
                replayed.text()
            );
        }
        let replayed = post(
            &up,
            "/console/sessions",
            Some(&cookie),
            &start("after sign-out"),
        )
        .await;
        assert!(
            to_sign_in(&replayed),
            "{} {}",
            replayed.status,
            replayed.text()
        );
        assert_eq!(
            sessions_titled(&up, "after sign-out").await,
            0,
            "nothing created"
        );
        // A new sign-in with the same key works (sign-out ended that one only).
        let again = sign_in(&up, &up.human).await;
        assert_eq!(get(&up, "/console/keys", &again).await.status, 200);

        // Revoking the key ends its sign-in at once.
        let (key, key_id) = human_key(&up).await;
        let cookie = sign_in(&up, &key).await;
        let page = get(&up, "/console/sessions", &cookie).await;
        assert_eq!(page.status, 200, "{}", page.text());
        let token = csrf(&page);
        common::auth_client(&up.auth_url, Principal::system(""))
            .revoke_key(apb::RevokeKeyRequest {
                tenant_id: stack_info(&up)["tenant_id"]
                    .as_str()
                    .expect("tenant")
                    .to_owned(),
                key_id,
            })
            .await
            .expect("revoke");
        let replayed = get(&up, "/console/keys", &cookie).await;
        assert!(
            to_sign_in(&replayed),
            "{} {}",
            replayed.status,
            replayed.text()
        );
        let body = form(&[
            ("csrf", &token),
            ("prompt", "replayed"),
            ("title", "after revocation"),
        ]);
        let replayed = post(&up, "/console/sessions", Some(&cookie), &body).await;
        assert!(
            to_sign_in(&replayed),
            "{} {}",
            replayed.status,
            replayed.text()
        );
        assert_eq!(sessions_titled(&up, "after revocation").await, 0);
    }

    /// Item 12: the key form refuses an actor it does not know, naming the
    /// field and the allowed values; nothing is created. (Before, `system`
    /// and `admin` made agent keys.) The auth RPC refuses the same.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_key_form_refuses_an_unknown_actor() {
        let up = up();
        let cookie = sign_in(&up, &up.human).await;
        let page = get(&up, "/console/keys", &cookie).await;
        let token = csrf(&page);
        let keys = || async {
            common::auth_client(&up.auth_url, Principal::system(""))
                .list_keys(apb::ListKeysRequest {
                    tenant_id: stack_info(&up)["tenant_id"]
                        .as_str()
                        .expect("tenant")
                        .to_owned(),
                    include_revoked: true,
                })
                .await
                .expect("list")
                .into_inner()
                .keys
                .len()
        };
        let before = keys().await;
        for actor in ["system", "admin", "", "Human", "agent ", "<b>x</b>"] {
            let body = form(&[
                ("csrf", &token),
                ("label", "probe"),
                ("actor", actor),
                ("scope", "data:read"),
            ]);
            let reply = post(&up, "/console/keys", Some(&cookie), &body).await;
            let text = reply.text();
            if actor.trim() == "agent" {
                // Surrounding blanks are trimmed; still a known value.
                assert_eq!(reply.status, 200, "{actor:?}: {text}");
                continue;
            }
            assert_eq!(reply.status, 400, "{actor:?}: {text}");
            assert!(text.contains("actor"), "{actor:?}: {text}");
            assert!(text.contains("agent, human"), "{actor:?}: {text}");
            assert!(!text.contains("<b>x</b>"), "escaped: {text}");
            assert!(!text.contains("dmbg_"), "no token: {text}");
        }
        assert_eq!(keys().await, before + 1, "only the known actor made a key");

        // The RPC: no actor, and a number that is no actor.
        for actor in [apb::Actor::Unspecified as i32, 7] {
            let err = common::auth_client(&up.auth_url, Principal::system(""))
                .create_key(apb::CreateKeyRequest {
                    tenant_id: stack_info(&up)["tenant_id"]
                        .as_str()
                        .expect("tenant")
                        .to_owned(),
                    scopes: vec!["data:read".into()],
                    actor,
                    label: "probe".into(),
                    env: String::new(),
                })
                .await
                .expect_err("no such actor");
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
            assert!(err.message().starts_with("actor:"), "{}", err.message());
            assert!(err.message().contains("human"), "{}", err.message());
        }
        assert_eq!(keys().await, before + 1);
    }

    /// Item 11: a session opened from the console on a subject must name
    /// an object the person can see: another tenant's filter, or an id
    /// that names no filter or event, is refused naming the subject, and
    /// no session is made. (Before, both were accepted.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_subject_must_exist_in_the_persons_tenant() {
        let up = up();
        // Another tenant's filter.
        let system = Principal::system("");
        let mut auth = common::auth_client(&up.auth_url, system.clone());
        let other = auth
            .create_tenant(apb::CreateTenantRequest {
                name: "other".into(),
            })
            .await
            .expect("tenant")
            .into_inner()
            .tenant_id;
        let info = stack_info(&up);
        let broker_url = info["broker_url"].as_str().expect("broker url").to_owned();
        let mut filters =
            ithaca_proto::broker::v1::filter_service_client::FilterServiceClient::with_interceptor(
                ithaca_kit::client::channel(&broker_url).expect("url"),
                ithaca_kit::client::Outbound::new(common::key(), Principal::system(&other)),
            );
        let group = filters
            .add_filter_group(ithaca_proto::broker::v1::AddFilterGroupRequest {
                tenant_id: other.clone(),
                name: "theirs".into(),
                stream_ids: vec!["ztf-public".into()],
            })
            .await
            .expect("group")
            .into_inner()
            .group_id;
        let mut their_person =
            ithaca_proto::broker::v1::filter_service_client::FilterServiceClient::with_interceptor(
                ithaca_kit::client::channel(&broker_url).expect("url"),
                ithaca_kit::client::Outbound::new(
                    common::key(),
                    Principal::verified(ithaca_kit::principal::VerifiedKey {
                        tenant_id: other.clone(),
                        key_id: "their-person".into(),
                        scopes: vec!["data:read".into(), "filters:write".into()],
                        human: true,
                    }),
                ),
            );
        let theirs = their_person
            .post_filter(ithaca_proto::broker::v1::PostFilterRequest {
                name: "theirs".into(),
                group_id: group,
                stream_id: "ztf-public".into(),
                ..Default::default()
            })
            .await
            .expect("their filter")
            .into_inner()
            .filter_id;
        // The person's own filter.
        ok(&call_as(
            &up,
            &up.human,
            "session_context",
            json!({"prompt": "set up"}),
        )
        .await);
        let targets = ok(&call_as(&up, &up.human, "get_filter_targets", json!({})).await);
        let group = targets["groups"][0]["group_id"].clone();
        let mine = ok(&call_as(
            &up,
            &up.human,
            "post_filter",
            json!({"name": "mine", "group_id": group, "stream_id": "ztf-public"}),
        )
        .await)["filter_id"]
            .as_str()
            .expect("filter_id")
            .to_owned();

        let cookie = sign_in(&up, &up.human).await;
        let token = csrf(&get(&up, "/console/sessions", &cookie).await);
        let start = |kind: &str, id: &str, title: &str| {
            form(&[
                ("csrf", &token),
                ("prompt", "on a subject"),
                ("title", title),
                ("subject_kind", kind),
                ("subject_id", id),
            ])
        };
        for (kind, id, status, title) in [
            ("filter", theirs.as_str(), 404, "theirs"),
            ("filter", "not-a-filter", 400, "not a filter"),
            (
                "filter",
                "0191d2a4-0000-7000-8000-000000000000",
                404,
                "no filter",
            ),
            ("gcn_event", "GRB 990101A", 404, "no event"),
        ] {
            let reply = post(
                &up,
                "/console/sessions",
                Some(&cookie),
                &start(kind, id, title),
            )
            .await;
            let text = reply.text();
            assert_eq!(reply.status, status, "{kind} {id}: {text}");
            assert!(text.contains("subject_id"), "{kind} {id}: {text}");
            assert!(text.contains(id), "names the subject: {text}");
            assert_eq!(
                sessions_titled(&up, title).await,
                0,
                "{kind} {id}: no session"
            );
        }
        // Over MCP too, where a person's key opens a session on a subject.
        let refused = call_as(
            &up,
            &up.human,
            "session_context",
            json!({"prompt": "p", "subject_kind": "filter", "subject_id": theirs}),
        )
        .await;
        let error = common::tool_error(&refused);
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains(&theirs)),
            "{error}"
        );
        // The person's own filter is fine.
        let reply = post(
            &up,
            "/console/sessions",
            Some(&cookie),
            &start("filter", &mine, "mine"),
        )
        .await;
        assert_eq!(reply.status, 303, "{}", reply.text());
        assert_eq!(sessions_titled(&up, "mine").await, 1);
    }
}

/// What every object page shows once its images have loaded: the name, the
/// light curve drawn, three 63×63 cutouts, the alerts, and the survey's
/// own crossmatch.
async fn object_page_is_whole(b: &Browser, object: &str) {
    assert_eq!(b.text("#object-id").await, object);
    b.until(
        "the light curve and the cutouts to load",
        "const imgs = [...document.querySelectorAll('#lightcurve img, #cutouts img')]; \
         return imgs.length === 4 && imgs.every(i => i.complete && i.naturalWidth > 0)",
    )
    .await;
    let sizes = b
        .js("return [...document.querySelectorAll('#cutouts img')].map(i => [i.naturalWidth, i.naturalHeight])")
        .await;
    assert_eq!(sizes, json!([[63, 63], [63, 63], [63, 63]]));
    let rows = b
        .js("return document.querySelectorAll('#alerts tbody tr').length")
        .await;
    assert!(rows.as_i64().unwrap_or(0) >= 1, "{rows}");
    let survey = b
        .js("return document.querySelectorAll('#survey-crossmatch dt').length")
        .await;
    assert!(
        survey.as_i64().unwrap_or(0) >= 1,
        "the survey's crossmatch: {survey}"
    );
    assert!(
        b.text("#lightcurve figcaption")
            .await
            .contains("Difference magnitudes")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_filter_and_gcn_event_pages() {
    let Some(b) = browser("browser_filter_and_gcn_event_pages").await else {
        return;
    };
    let up = up();
    let human = up.human.clone();
    b.sign_in(&up, &human).await;

    // Empty states first.
    b.goto(&format!("{}/console/filters", up.url)).await;
    assert!(b.text("#empty").await.contains("No filters yet"));
    b.goto(&format!("{}/console/gcn", up.url)).await;
    assert!(b.text("#empty").await.contains("ithaca ingest gcn"));

    // A night of alerts, the reference catalogs, and the GCN circulars and
    // notices.
    up.ingest("ztf", &[common::astro::alerts_dir().join("v4.02")]);
    for name in ["hipparcos2_hp_le_6.0.csv", "openngc_galaxies_z_le_0.01.csv"] {
        up.ingest(
            "catalog",
            &[common::astro::data().join("catalogs").join(name)],
        );
    }
    up.ingest(
        "gcn",
        &[common::gcn::circulars_file(), common::gcn::notices_dir()],
    );

    // A person creates a filter and opens a session on it; the agent joins,
    // previews two pipelines, posts both as versions, and asks to activate
    // the second; the person approves.
    ok(&call_as(&up, &human, "session_context", json!({"prompt": "set up"})).await);
    let targets = ok(&call_as(&up, &human, "get_filter_targets", json!({})).await);
    let group = targets["groups"][0]["group_id"].clone();
    let filter = ok(&call_as(
        &up,
        &human,
        "post_filter",
        json!({"name": "bright and real", "group_id": group, "stream_id": "ztf-public"}),
    )
    .await);
    let filter_id = filter["filter_id"].as_str().expect("filter_id").to_owned();
    let opened = ok(&call_as(
        &up,
        &human,
        "session_context",
        json!({"prompt": "Catch bright, real transients", "title": "Bright transients",
               "subject_kind": "filter", "subject_id": filter_id}),
    )
    .await);
    let sid = opened["session_id"].as_str().expect("sid").to_owned();
    ok(&call(
        &up,
        "session_context",
        json!({"prompt": "joining", "session_id": sid}),
    )
    .await);
    let first = json!([{"$match": {"candidate.magpsf": {"$lt": 18.5}}}]);
    let second =
        json!([{"$match": {"candidate.magpsf": {"$lt": 18.5}, "candidate.drb": {"$gt": 0.9}}}]);
    let mut version = 0;
    for pipeline in [&first, &second] {
        ok(&call(
            &up,
            "run_broker_filter",
            json!({"filter_id": filter_id, "pipeline": pipeline}),
        )
        .await);
        let verdict = ok(&call(
            &up,
            "post_broker_filter_version",
            json!({"filter_id": filter_id, "pipeline": pipeline}),
        )
        .await);
        assert_eq!(verdict["passed"], true, "{verdict}");
        version = verdict["version"].as_i64().expect("version");
    }
    // A diagnostic preview after posting is not a proposal: the page shows
    // the posted version.
    ok(&call(
        &up,
        "run_broker_filter",
        json!({"filter_id": filter_id, "pipeline": [{"$match": {"candidate.magpsf": {"$lt": 12.25}}}]}),
    )
    .await);
    let pending = ok(&call(
        &up,
        "activate_broker_filter_version",
        json!({"filter_id": filter_id, "version": version}),
    )
    .await);
    let approval_id = pending["approval_id"].clone();
    let decided = ok(&call_as(
        &up,
        &human,
        "decide_approval",
        json!({"approval_id": approval_id, "decision": "approve", "note": "fine"}),
    )
    .await);
    assert_eq!(decided["status"], "executed", "{decided}");
    // The next night's alerts pass through the active version.
    up.ingest("ztf", &[common::astro::alerts_dir().join("v4.01")]);

    // The list, then the filter's page.
    b.goto(&format!("{}/console/filters", up.url)).await;
    assert!(b.text("#filters").await.contains("bright and real"));
    // The list finds it by name, whatever the case, and says when nothing
    // matches.
    b.goto(&format!("{}/console/filters?q=BRIGHT", up.url))
        .await;
    assert!(b.text("#filters").await.contains("bright and real"));
    b.goto(&format!("{}/console/filters?q=kilonova", up.url))
        .await;
    assert!(b.text("#empty").await.contains("kilonova"));
    b.goto(&format!("{}/console/filters", up.url)).await;
    b.submit(&format!("tr[data-filter='{filter_id}'] a")).await;
    assert_eq!(b.path().await, format!("/console/filters/{filter_id}"));
    assert_eq!(
        b.text("#active-version").await,
        format!("v{version} active")
    );
    let versions = b
        .js("return document.querySelectorAll('#versions tbody tr').length")
        .await;
    assert_eq!(versions, json!(2));
    assert!(b.text("tr.active-version").await.contains("passed"));
    // The default diff is the last version against the one before: the
    // added condition shows as an added line.
    let added = b
        .js("return [...document.querySelectorAll('#diff .add')].map(e => e.textContent).join('\\n')")
        .await;
    assert!(
        added.as_str().unwrap_or("").contains("candidate.drb"),
        "{added}"
    );
    let matches = b
        .js("return document.querySelectorAll('#matches tbody tr').length")
        .await;
    assert!(
        matches.as_i64().unwrap_or(0) > 0,
        "the active version saved matches: {matches}"
    );
    // The record of the answer: the agent's calls and its proposal.
    let record = b
        .text(&format!("article.record[data-session='{sid}']"))
        .await;
    assert!(record.contains("Bright transients"), "{record}");
    b.js("document.querySelectorAll('details.calls').forEach(d => d.open = true); return true")
        .await;
    let calls = b
        .text(&format!(
            "article.record[data-session='{sid}'] .record-calls"
        ))
        .await;
    for tool in [
        "run_broker_filter",
        "post_broker_filter_version",
        "activate_broker_filter_version",
    ] {
        assert!(calls.contains(tool), "{tool} in {calls}");
    }
    assert!(
        b.text(&format!(
            "article.record[data-session='{sid}'] .proposal pre"
        ))
        .await
        .contains("candidate.drb"),
        "the proposal is the posted version"
    );
    assert!(
        !b.text(&format!(
            "article.record[data-session='{sid}'] .proposal pre"
        ))
        .await
        .contains("12.25"),
        "not the diagnostic preview after it"
    );
    b.screenshot("filter").await;
    // Any two versions: v1 against itself is identical.
    b.mark().await;
    b.js("const f = document.getElementById('diff-form'); f.from.value = '1'; f.to.value = '1'; f.submit(); return true")
        .await;
    b.new_page().await;
    assert!(b.text("#diff-identical").await.contains("same pipeline"));
    // The session page links back to its subject.
    b.goto(&format!("{}/console/sessions/{sid}", up.url)).await;
    b.submit("#session-subject").await;
    assert_eq!(b.path().await, format!("/console/filters/{filter_id}"));
    // A match opens its object's page: the light curve, the alerts, the
    // three cutouts drawn, the filter that matched it, the catalogs.
    b.goto(&format!("{}/console/filters/{filter_id}", up.url))
        .await;
    let object = b.text("#matches a.object-link code").await;
    b.submit("#matches a.object-link").await;
    assert_eq!(b.path().await, format!("/console/objects/{object}"));
    object_page_is_whole(&b, &object).await;
    assert!(
        b.text("#filter-matches").await.contains("bright and real"),
        "the filter that matched it"
    );
    assert!(b.text("#filter-matches").await.contains("active"));
    b.screenshot("object").await;
    // Below the fold: the three cutouts, drawn (each image decoded by the
    // browser), then the alerts.
    let drawn = b
        .js("const c = document.getElementById('cutouts'); c.scrollIntoView(); \
             return [...c.querySelectorAll('img')].filter(i => i.complete && i.naturalWidth > 0).length")
        .await;
    assert_eq!(drawn.as_i64(), Some(3), "three cutouts drawn: {drawn}");
    b.screenshot("object-cutouts").await;
    // Another alert's cutouts, from the alerts table.
    let alerts = b
        .js("return document.querySelectorAll('#alerts tbody tr').length")
        .await;
    if alerts.as_i64().unwrap_or(0) > 1 {
        let other = b
            .js("return document.querySelectorAll('#alerts tbody tr')[1].dataset.candid")
            .await;
        let other = other.as_str().expect("a candid").to_owned();
        b.submit(&format!("#alerts tr[data-candid='{other}'] a"))
            .await;
        assert_eq!(b.text("#cutouts-candid").await, other);
        object_page_is_whole(&b, &object).await;
    }
    // The agent looks the object up in the session: the trace links it.
    ok(&call(
        &up,
        "get_broker_alerts",
        json!({"broker_id": "ztf-archive", "objectId": object}),
    )
    .await);
    b.goto(&format!("{}/console/sessions/{sid}", up.url)).await;
    b.submit(&format!(
        "#trace a.object-link[href='/console/objects/{object}']"
    ))
    .await;
    assert_eq!(b.path().await, format!("/console/objects/{object}"));
    // Someone else's, or no, filter: not found.
    b.goto(&format!(
        "{}/console/filters/0191d2a4-0000-7000-8000-000000000000",
        up.url
    ))
    .await;
    assert_eq!(b.text("h2").await, "Not found");

    // GCN events: search, open one, start a session on it from its page;
    // the agent joins and comments; the comment shows on the page.
    b.goto(&format!("{}/console/gcn", up.url)).await;
    let listed = b
        .js("return document.querySelectorAll('#events tbody tr').length")
        .await;
    assert_eq!(listed, json!(25), "a full first page");
    assert!(b.client.find(Locator::Css("#next-page")).await.is_ok());
    b.screenshot("gcn-events").await;
    b.fill("#gcn-search input[name=q]", "GRB 230812B").await;
    b.submit("#gcn-search button").await;
    let rows = b
        .js("return document.querySelectorAll('#events tbody tr').length")
        .await;
    assert_eq!(rows, json!(1), "one event goes by that name");
    b.submit("#events tbody tr a").await;
    assert_eq!(b.text("#event-name").await, "GRB 230812B");
    // Its optical afterglow, named in the circulars, links to its page.
    assert!(
        b.client
            .find(Locator::Css(
                "#event-objects a[href='/console/objects/ZTF23aaxeacr']"
            ))
            .await
            .is_ok(),
        "{}",
        b.text("#event-objects").await
    );
    let circulars = b
        .js("return document.querySelectorAll('#circulars > li').length")
        .await;
    assert!(circulars.as_i64().unwrap_or(0) >= 60, "{circulars}");
    assert!(b.text("#no-comments").await.contains("No comments yet"));
    let dateobs = b.text("#event-dateobs").await;
    b.click("#start-on-subject summary").await;
    b.fill("#subject-prompt", "Summarise the optical counterpart")
        .await;
    b.submit("#start-on-subject button[type=submit]").await;
    assert_eq!(b.text("#session-subject").await, dateobs);
    let event_session = b.text("#session-id").await;
    ok(&call(
        &up,
        "session_context",
        json!({"prompt": "joining", "session_id": event_session}),
    )
    .await);
    ok(&call(
        &up,
        "post_gcn_event_comment",
        json!({"dateobs": dateobs, "text": "ZTF23aaxeacr fades by 1 mag/day."}),
    )
    .await);
    b.submit("#session-subject").await;
    assert!(b.text("#comments").await.contains("fades by 1 mag/day"));
    assert!(
        b.text(&format!("article.record[data-session='{event_session}']"))
            .await
            .contains("Summarise the optical counterpart")
    );
    b.js("document.querySelector('#circulars details').open = true; return true")
        .await;
    b.screenshot("gcn-event").await;
    let _ = b.client.close().await;
}

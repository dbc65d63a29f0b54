//! The MCP requests the benchmark sends, in both protocol eras.

use crate::driver::{self, Target};
use anyhow::{Context, bail};
use serde_json::{Value, json};

pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-06-18";

/// The tool both servers expose and its arguments.
pub const TOOL: &str = "bench_ping";
pub fn tool_arguments() -> Value {
    json!({"note": "bench"})
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "ithaca-bench", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// A 2026-07-28 request: `_meta` in the params, and the
/// MCP-Protocol-Version, Mcp-Method and Mcp-Name headers.
pub fn modern(addr: &str, token: &str, method: &str, mut params: Value) -> anyhow::Result<Target> {
    params["_meta"] = meta();
    let name = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", method),
    ];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name.as_str()));
    }
    Target::post(addr, "/mcp", &headers, body.to_string())
}

/// A 2025-06-18 request (after `initialize`): the MCP-Protocol-Version header.
pub fn legacy(addr: &str, token: &str, message: Value) -> anyhow::Result<Target> {
    let auth = format!("Bearer {token}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", LEGACY),
    ];
    Target::post(addr, "/mcp", &headers, message.to_string())
}

pub fn modern_call(addr: &str, token: &str) -> anyhow::Result<Target> {
    Ok(modern(
        addr,
        token,
        "tools/call",
        json!({"name": TOOL, "arguments": tool_arguments()}),
    )?
    .expecting("\"isError\":false"))
}

pub fn legacy_call(addr: &str, token: &str) -> anyhow::Result<Target> {
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": TOOL, "arguments": tool_arguments()}});
    Ok(legacy(addr, token, message)?.expecting("\"isError\":false"))
}

/// Send one request; the JSON body of a 200 answer.
pub async fn rpc(target: &Target) -> anyhow::Result<Value> {
    let (status, _, body) = driver::send_once(target).await?;
    if status != 200 {
        bail!("status {status}: {}", String::from_utf8_lossy(&body));
    }
    serde_json::from_slice(&body)
        .with_context(|| format!("not JSON: {}", String::from_utf8_lossy(&body)))
}

/// The raw body of one 200 answer.
pub async fn raw(target: &Target) -> anyhow::Result<bytes::Bytes> {
    let (status, _, body) = driver::send_once(target).await?;
    if status != 200 {
        bail!("status {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(body)
}

/// The legacy handshake: `initialize` then `notifications/initialized`.
pub async fn initialize(addr: &str, token: &str) -> anyhow::Result<()> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "ithaca-bench", "version": env!("CARGO_PKG_VERSION")},
    }});
    let auth = format!("Bearer {token}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let reply = rpc(&Target::post(addr, "/mcp", &headers, init.to_string())?).await?;
    let version = reply["result"]["protocolVersion"].as_str().unwrap_or("");
    if version != LEGACY {
        bail!("initialize answered protocol version {version:?}: {reply}");
    }
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, body) = driver::send_once(&legacy(addr, token, note)?).await?;
    if !status.is_success() {
        bail!(
            "notifications/initialized: status {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(())
}

/// Check that a tool call answered without a tool error.
pub fn check_call(reply: &Value) -> anyhow::Result<()> {
    if reply["result"]["isError"] != json!(false) {
        bail!("tool call failed: {reply}");
    }
    Ok(())
}

//! The size of what an agent reads before it can work: `tools/list` as the
//! agent key `ithaca up` prints (every scope an agent may hold) sees it, in
//! bytes on the wire and in tokens of two real tokenizers (OpenAI's
//! `cl100k_base` and `o200k_base`), with where the bytes go; and the part a
//! host puts before the model: each tool's name, description and input
//! schema ([`model_view`]). Output schemas, titles and annotations stay with
//! the client (it validates results and asks for confirmation with them).

use crate::RunArgs;
use crate::mcp;
use crate::run::{field, ithaca_binary, start_up};
use anyhow::{Context, bail};
use ithaca_kit::principal::InternalKey;
use serde_json::Value;
use std::time::Duration;

/// What one tool list costs an agent.
#[derive(Debug)]
pub struct ToolListSize {
    pub tools: usize,
    /// The whole JSON-RPC answer, as sent.
    pub bytes: usize,
    pub cl100k_tokens: usize,
    pub o200k_tokens: usize,
    /// What the model reads ([`model_view`]), in bytes and in tokens.
    pub model_bytes: usize,
    pub model_cl100k_tokens: usize,
    pub model_o200k_tokens: usize,
    /// Bytes of the tools' descriptions, input schemas and output schemas
    /// (each serialised compactly on its own).
    pub description_bytes: usize,
    pub input_schema_bytes: usize,
    pub output_schema_bytes: usize,
}

/// Start `ithaca up`, read its tool list as the agent, and print the sizes.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let ithaca = ithaca_binary(&args)?;
    let work = std::env::temp_dir().join(format!("ithaca-bench-tools-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = measure(&ithaca, &work).await;
    let _ = std::fs::remove_dir_all(&work);
    let size = result?;
    println!("| what | value |");
    println!("|---|---|");
    println!("| tools an agent sees | {} |", size.tools);
    println!("| `tools/list` bytes | {} |", size.bytes);
    println!("| tokens, cl100k_base | {} |", size.cl100k_tokens);
    println!("| tokens, o200k_base | {} |", size.o200k_tokens);
    println!("| what the model reads: bytes | {} |", size.model_bytes);
    println!(
        "| what the model reads: tokens, cl100k_base / o200k_base | {} / {} |",
        size.model_cl100k_tokens, size.model_o200k_tokens
    );
    println!("| description bytes | {} |", size.description_bytes);
    println!("| inputSchema bytes | {} |", size.input_schema_bytes);
    println!("| outputSchema bytes | {} |", size.output_schema_bytes);
    Ok(())
}

async fn measure(ithaca: &std::path::Path, work: &std::path::Path) -> anyhow::Result<ToolListSize> {
    let key_hex = InternalKey::generate_hex();
    let (up, _, lines) = start_up(ithaca, &key_hex, &work.join("data"))?;
    let token = field(&lines, "agent key")?;
    let url = field(&lines, "mcp ")?;
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .context("no address in the mcp line")?
        .to_owned();
    let target = mcp::modern(&addr, &token, "tools/list", serde_json::json!({}))?;
    let body = tokio::time::timeout(Duration::from_secs(30), mcp::raw(&target))
        .await
        .context("tools/list did not answer within 30 s")??;
    up.stop()?;
    measure_body(&body)
}

/// The sizes of one `tools/list` answer.
pub fn measure_body(body: &[u8]) -> anyhow::Result<ToolListSize> {
    let reply: Value = serde_json::from_slice(body).context("tools/list is not JSON")?;
    let Some(tools) = reply["result"]["tools"].as_array() else {
        bail!("tools/list answered no tools: {reply}");
    };
    let part = |key: &str| -> usize {
        tools
            .iter()
            .filter_map(|t| t.get(key))
            .map(|v| v.to_string().len())
            .sum()
    };
    let text = std::str::from_utf8(body).context("tools/list is not UTF-8")?;
    let model = model_view(tools).to_string();
    let cl100k = tiktoken_rs::cl100k_base().context("loading cl100k_base")?;
    let o200k = tiktoken_rs::o200k_base().context("loading o200k_base")?;
    Ok(ToolListSize {
        tools: tools.len(),
        bytes: body.len(),
        cl100k_tokens: cl100k.encode_ordinary(text).len(),
        o200k_tokens: o200k.encode_ordinary(text).len(),
        model_bytes: model.len(),
        model_cl100k_tokens: cl100k.encode_ordinary(&model).len(),
        model_o200k_tokens: o200k.encode_ordinary(&model).len(),
        description_bytes: part("description"),
        input_schema_bytes: part("inputSchema"),
        output_schema_bytes: part("outputSchema"),
    })
}

/// The tools as a host hands them to the model: name, description and input
/// schema of each, the three parts of a tool definition in the model APIs
/// agent hosts call (`input_schema` or `parameters` there).
pub fn model_view(tools: &[Value]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t["name"],
                    "description": t["description"],
                    "inputSchema": t["inputSchema"],
                })
            })
            .collect(),
    )
}

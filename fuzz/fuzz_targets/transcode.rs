//! Tool arguments against a tool's schema: JSON through
//! `ithaca_edge::transcode::to_message` for one of the catalog's tools (every
//! annotated RPC of the embedded descriptors). Refusals must not panic;
//! accepted arguments must render back (`to_json`) into JSON that is
//! accepted again and renders the same.
//!
//! Input: a tool name, a NUL byte, then the arguments as JSON. An unknown
//! name picks a tool by its length.

#![no_main]

use ithaca_edge::catalog::Catalog;
use ithaca_edge::transcode;
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    Catalog::from_pool(ithaca_proto::annotations::pool()).expect("the embedded catalog builds")
});

fuzz_target!(|data: &[u8]| {
    let (name, json) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&[][..], data),
    };
    let tools = &CATALOG.tools;
    let tool = std::str::from_utf8(name)
        .ok()
        .and_then(|n| CATALOG.tool(n))
        .unwrap_or(&tools[name.len() % tools.len()]);
    let Ok(arguments) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    let input = tool.method.input();
    let Ok(message) = transcode::to_message(&input, Some(&arguments)) else {
        return;
    };
    let rendered = transcode::to_json(&message);
    let again = transcode::to_message(&input, Some(&rendered))
        .unwrap_or_else(|e| panic!("{}: rendered arguments refused ({e}): {rendered}", tool.name));
    assert_eq!(transcode::to_json(&again), rendered, "{}", tool.name);
});

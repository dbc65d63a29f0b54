//! Prometheus text metrics: MCP request counts and the
//! `mcp.server.operation.duration` histogram (exported as
//! `mcp_server_operation_duration_seconds`), labelled by method and error
//! type. A few lines of our own instead of a metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Histogram bucket bounds in seconds (the OpenTelemetry MCP convention's
/// advice, trimmed).
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Series {
    counts: [u64; BUCKETS.len()],
    total: u64,
    sum: f64,
}

/// At most this many distinct client (name, version) pairs are counted;
/// later ones count as `other`, so a client cannot grow `/metrics` at will.
const MAX_CLIENTS: usize = 200;

/// All MCP operation metrics of a process.
#[derive(Default)]
pub struct Metrics {
    series: Mutex<BTreeMap<(String, String), Series>>,
    /// Handshakes by (era, client name, client version): which clients still
    /// use the `initialize` profile, so an operator can tell when it is safe
    /// to remove.
    handshakes: Mutex<BTreeMap<(&'static str, String, String), u64>>,
    /// `tools/call`s the edge answered itself (`front/direct.rs`), not
    /// through rmcp's service: an operator sees what share of calls take
    /// the short path.
    direct_calls: AtomicU64,
}

/// A label value taken from a client: printable ASCII of a safe set, cut to
/// 64 characters, `unknown` when empty.
fn client_label(s: &str) -> String {
    let clean: String = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-@/+ ".contains(*c))
        .take(64)
        .collect();
    if clean.is_empty() {
        "unknown".to_owned()
    } else {
        clean
    }
}

impl Metrics {
    /// Record one operation. `error_type` is empty on success.
    pub fn record(&self, method: &str, error_type: &str, elapsed: Duration) {
        let Ok(mut series) = self.series.lock() else {
            return;
        };
        // Labels are bounded (a few dozen series), so finding one by a scan
        // costs less than the two strings a keyed lookup would allocate on
        // every request.
        let known = |(m, e): &(String, String)| m == method && e == error_type;
        if !series.keys().any(known) {
            series.insert(
                (method.to_owned(), error_type.to_owned()),
                Series::default(),
            );
        }
        let Some(s) = series.iter_mut().find(|(k, _)| known(k)).map(|(_, s)| s) else {
            return;
        };
        let secs = elapsed.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                s.counts[i] += 1;
            }
        }
        s.total += 1;
        s.sum += secs;
    }

    /// Count one handshake: `initialize` (era `legacy`) or
    /// `server/discover` (era `2026-07-28`), by the client's own name.
    pub fn handshake(&self, era: &'static str, client_name: &str, client_version: &str) {
        let Ok(mut handshakes) = self.handshakes.lock() else {
            return;
        };
        let mut key = (era, client_label(client_name), client_label(client_version));
        if !handshakes.contains_key(&key) && handshakes.len() >= MAX_CLIENTS {
            key = (era, "other".to_owned(), "other".to_owned());
        }
        *handshakes.entry(key).or_default() += 1;
    }

    /// Count one `tools/call` answered by the edge itself.
    pub fn direct_call(&self) {
        self.direct_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP mcp_server_operation_duration_seconds Duration of MCP requests handled by the edge.\n");
        out.push_str("# TYPE mcp_server_operation_duration_seconds histogram\n");
        let Ok(series) = self.series.lock() else {
            return out;
        };
        for ((method, error), s) in series.iter() {
            let labels = if error.is_empty() {
                format!("mcp_method_name=\"{}\"", escape(method))
            } else {
                format!(
                    "mcp_method_name=\"{}\",error_type=\"{}\"",
                    escape(method),
                    escape(error)
                )
            };
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "mcp_server_operation_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {}",
                    s.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "mcp_server_operation_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                s.total
            );
            let _ = writeln!(
                out,
                "mcp_server_operation_duration_seconds_sum{{{labels}}} {}",
                s.sum
            );
            let _ = writeln!(
                out,
                "mcp_server_operation_duration_seconds_count{{{labels}}} {}",
                s.total
            );
        }
        out.push_str("# HELP mcp_server_requests_total MCP requests handled by the edge.\n");
        out.push_str("# TYPE mcp_server_requests_total counter\n");
        for ((method, error), s) in series.iter() {
            let outcome = if error.is_empty() { "ok" } else { "error" };
            let _ = writeln!(
                out,
                "mcp_server_requests_total{{mcp_method_name=\"{}\",outcome=\"{outcome}\"}} {}",
                escape(method),
                s.total
            );
        }
        drop(series);
        out.push_str("# HELP ithaca_edge_direct_tool_calls_total tools/call requests the edge answered itself, without the SDK's per-request service.\n");
        out.push_str("# TYPE ithaca_edge_direct_tool_calls_total counter\n");
        let _ = writeln!(
            out,
            "ithaca_edge_direct_tool_calls_total {}",
            self.direct_calls.load(Ordering::Relaxed)
        );
        out.push_str("# HELP mcp_client_handshakes_total Handshakes by protocol era and client (clientInfo).\n");
        out.push_str("# TYPE mcp_client_handshakes_total counter\n");
        if let Ok(handshakes) = self.handshakes.lock() {
            for ((era, name, version), n) in handshakes.iter() {
                let _ = writeln!(
                    out,
                    "mcp_client_handshakes_total{{era=\"{era}\",client_name=\"{}\",client_version=\"{}\"}} {n}",
                    escape(name),
                    escape(version)
                );
            }
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_counted_by_client_and_bounded() {
        let m = Metrics::default();
        m.handshake("legacy", "claude-code", "1.2.3");
        m.handshake("legacy", "claude-code", "1.2.3");
        m.handshake("2026-07-28", "bad\"name\n\0", "");
        for i in 0..(MAX_CLIENTS + 50) {
            m.handshake("legacy", &format!("flood-{i}"), "1");
        }
        let text = m.render();
        assert!(text.contains(
            "mcp_client_handshakes_total{era=\"legacy\",client_name=\"claude-code\",client_version=\"1.2.3\"} 2"
        ));
        assert!(text.contains("client_name=\"badname\",client_version=\"unknown\""));
        assert!(text.contains("client_name=\"other\""), "{text}");
        assert!(
            text.lines()
                .filter(|l| l.starts_with("mcp_client_handshakes_total"))
                .count()
                <= MAX_CLIENTS + 1
        );
    }

    #[test]
    fn renders_cumulative_buckets() {
        let m = Metrics::default();
        m.record("tools/call", "", Duration::from_millis(3));
        m.record("tools/call", "", Duration::from_millis(30));
        m.record("tools/list", "-32602", Duration::from_millis(1));
        let text = m.render();
        assert!(text.contains("mcp_server_operation_duration_seconds_bucket{mcp_method_name=\"tools/call\",le=\"0.005\"} 1"));
        assert!(text.contains("mcp_server_operation_duration_seconds_bucket{mcp_method_name=\"tools/call\",le=\"0.05\"} 2"));
        assert!(text.contains(
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\"} 2"
        ));
        assert!(text.contains("error_type=\"-32602\""));
    }
}

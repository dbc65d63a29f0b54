//! The report: a Markdown table on stdout and the same figures as JSON.

use crate::RunArgs;
use crate::appends::AppendOutcome;
use crate::driver::Outcome;
use serde::Serialize;
use serde_json::{Value, json};
use std::fmt::Write;

#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub name: String,
    pub concurrency: usize,
    /// Offered requests per second (open loop), if rate-limited.
    pub rate: Option<f64>,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// CPU time of the server processes (user + system) per request,
    /// warm-up included, in microseconds.
    pub server_cpu_us_per_request: Option<f64>,
    /// The same, process by process.
    pub server_cpu_us_per_request_by_process: std::collections::BTreeMap<String, f64>,
    /// CPU the load driver used, in cores (averaged over the phase).
    pub driver_cores: f64,
    /// CPU everything else on the machine used meanwhile, in cores: noise.
    pub other_cores: f64,
    /// The same in the busiest window of
    /// [`crate::procs::OtherLoadSampler::WINDOW`]: a short burst of other
    /// work that the phase's mean dilutes.
    pub other_peak_cores: f64,
    /// Of the machine's time, the part its host took from it (the `steal`
    /// of `/proc/stat`), in cores.
    pub steal_cores: f64,
    /// How late a thread that sleeps 1 ms at a time woke meanwhile, and
    /// how long it took to hand a token to another thread and get it back.
    pub lateness: crate::lateness::Lateness,
    pub servers: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessMemory {
    pub process: String,
    /// `ithaca` (ours, held to the target), `bench` or `python`.
    pub role: String,
    pub rest_kib: u64,
    pub load_kib: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Startup {
    pub first_start_s: f64,
    pub restart_s: f64,
}

pub struct Report {
    pub machine: Value,
    pub commit: String,
    pub date: String,
    pub driver: String,
    pub fastmcp_version: Option<String>,
    pub args: RunArgs,
    pub up_mcp_url: String,
    pub startup: Startup,
    pub phases: Vec<Phase>,
    pub appends: Vec<AppendOutcome>,
    pub memory: Vec<ProcessMemory>,
}

/// Issue 5's targets.
const RATIO_FASTMCP: f64 = 30.0;
const RATIO_BARE: f64 = 0.25;
const P99_HALF_MS: f64 = 10.0;
const RSS_MIB: f64 = 64.0;
const READY_S: f64 = 2.0;

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

struct Target {
    what: String,
    measured: String,
    met: Option<bool>,
}

impl Report {
    fn rps(&self, name: &str) -> Option<f64> {
        self.phases
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.outcome.rps)
    }

    fn ratios(&self) -> Value {
        let full_m = self.rps("full path, 2026-07-28");
        let full_l = self.rps("full path, 2025-06-18");
        let bare = self.rps("bare limit (axum)");
        let fm_m = self.rps("FastMCP, 2026-07-28");
        let fm_l = self.rps("FastMCP, 2025-06-18");
        let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        json!({
            "full_over_fastmcp_2026_07_28": div(full_m, fm_m),
            "full_over_fastmcp_2025_06_18": div(full_l, fm_l),
            "full_over_bare_2026_07_28": div(full_m, bare),
            "full_over_bare_2025_06_18": div(full_l, bare),
        })
    }

    fn targets(&self) -> Vec<Target> {
        let r = self.ratios();
        let get = |k: &str| r[k].as_f64();
        let mut out = Vec::new();
        let (a, b) = (
            get("full_over_fastmcp_2026_07_28"),
            get("full_over_fastmcp_2025_06_18"),
        );
        out.push(Target {
            what: format!("full path ≥ {RATIO_FASTMCP}× FastMCP (req/s)"),
            measured: format!("{} (2026-07-28), {} (2025-06-18)", times(a), times(b)),
            met: a
                .zip(b)
                .map(|(a, b)| a >= RATIO_FASTMCP && b >= RATIO_FASTMCP),
        });
        let (a, b) = (
            get("full_over_bare_2026_07_28"),
            get("full_over_bare_2025_06_18"),
        );
        out.push(Target {
            what: format!(
                "full path ≥ {:.0} % of the bare limit (req/s)",
                RATIO_BARE * 100.0
            ),
            measured: format!("{} (2026-07-28), {} (2025-06-18)", percent(a), percent(b)),
            met: a.zip(b).map(|(a, b)| a >= RATIO_BARE && b >= RATIO_BARE),
        });
        let half = self
            .phases
            .iter()
            .find(|p| p.name == "full path, 2026-07-28, half of peak");
        out.push(Target {
            what: format!("full-path p99 ≤ {P99_HALF_MS} ms at half of peak throughput"),
            measured: half.map_or("not run".to_owned(), |p| {
                format!(
                    "{:.2} ms at {:.0} req/s offered",
                    p.outcome.p99_ms,
                    p.rate.unwrap_or(0.0)
                )
            }),
            met: half.map(|p| p.outcome.p99_ms <= P99_HALF_MS && p.outcome.errors == 0),
        });
        let ours: Vec<&ProcessMemory> = self.memory.iter().filter(|m| m.role == "ithaca").collect();
        let worst = ours.iter().max_by_key(|m| m.load_kib);
        out.push(Target {
            what: format!("≤ {RSS_MIB} MiB resident per `ithaca` process under load"),
            measured: worst.map_or("not measured".to_owned(), |m| {
                format!("largest: {} at {:.1} MiB", m.process, mib(m.load_kib))
            }),
            met: worst.map(|m| mib(m.load_kib) <= RSS_MIB),
        });
        out.push(Target {
            what: format!("`ithaca up` ready ≤ {READY_S} s after launch"),
            measured: format!(
                "{:.2} s first start, {:.2} s restart",
                self.startup.first_start_s, self.startup.restart_s
            ),
            met: Some(self.startup.first_start_s <= READY_S && self.startup.restart_s <= READY_S),
        });
        out
    }

    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "## ithaca-bench, {} (commit {})\n",
            self.date, self.commit
        );
        let _ = writeln!(
            s,
            "Machine: {} CPUs ({}), {} GiB, Linux {}. Load: {}; each phase at most {} requests or {} s, after {} warm-up requests. Everything on loopback; the edge reaches the services and the probe over {}; `RUST_LOG=warn`.\n",
            m["cpus"],
            m["cpu_model"].as_str().unwrap_or(""),
            m["memory_gib"],
            m["kernel"].as_str().unwrap_or(""),
            self.driver,
            self.args.requests,
            self.args.seconds,
            self.args.warmup,
            if self.args.tcp_hops {
                "TCP (--tcp-hops)"
            } else {
                "their unix sockets"
            },
        );
        let _ = writeln!(
            s,
            "### MCP requests (`tools/call` of `bench_ping` unless the phase names another)\n\n\
             | phase | requests | errors | req/s | p50 ms | p90 ms | p99 ms | server CPU µs/req | other load, mean / busiest {} ms (cores) | a 1 ms sleep woke late, p99 / worst ms (time in stalls) | a hand-off and back, p99 / worst ms |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
            crate::procs::OtherLoadSampler::WINDOW.as_millis()
        );
        for p in &self.phases {
            let name = match p.rate {
                Some(rate) => format!("{} ({rate:.0} req/s offered)", p.name),
                None => p.name.clone(),
            };
            let o = &p.outcome;
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {:.2} / {:.2} | {:.2} / {:.1} ({:.1} %) | {:.2} / {:.1} |",
                o.requests,
                o.errors,
                o.rps,
                o.p50_ms,
                o.p90_ms,
                o.p99_ms,
                p.server_cpu_us_per_request
                    .map_or("–".to_owned(), |c| format!("{c:.0}")),
                p.other_cores,
                p.other_peak_cores,
                p.lateness.p99_ms,
                p.lateness.max_ms,
                p.lateness.stalled_share * 100.0,
                p.lateness.handoff_p99_ms,
                p.lateness.handoff_max_ms,
            );
        }
        let r = self.ratios();
        let _ = writeln!(
            s,
            "\nRatios (req/s): full path ÷ FastMCP = {} (2026-07-28), {} (2025-06-18); full path ÷ bare limit = {} (2026-07-28), {} (2025-06-18).\n",
            times(r["full_over_fastmcp_2026_07_28"].as_f64()),
            times(r["full_over_fastmcp_2025_06_18"].as_f64()),
            percent(r["full_over_bare_2026_07_28"].as_f64()),
            percent(r["full_over_bare_2025_06_18"].as_f64()),
        );
        let _ = writeln!(
            s,
            "### Trace appends ({}, {} concurrent writers, one session)\n\n\
             | database | appends | errors | appends/s | p50 ms | p99 ms | gap-free seq |\n\
             |---|--:|--:|--:|--:|--:|---|",
            if self.args.append_unary {
                "unary `AppendEvent` calls"
            } else {
                "messages on the `AppendEvents` stream, as the edge sends them"
            },
            self.args.append_writers
        );
        for a in &self.appends {
            match &a.not_run {
                Some(why) => {
                    let _ = writeln!(s, "| {} | NOT RUN: {why} | | | | | |", a.database);
                }
                None => {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} |",
                        a.database,
                        a.appends,
                        a.errors,
                        a.per_second,
                        a.p50_ms,
                        a.p99_ms,
                        if a.gap_free { "yes" } else { "NO" }
                    );
                }
            }
        }
        let _ = writeln!(
            s,
            "\n### Start-up of `ithaca up` (launch to `ithaca: ready`)\n\n\
             | first start (empty data directory) | restart (existing data) |\n|--:|--:|\n\
             | {:.3} s | {:.3} s |\n",
            self.startup.first_start_s, self.startup.restart_s
        );
        let _ = writeln!(
            s,
            "### Resident memory (VmRSS; under load = peak sampled every 100 ms)\n\n\
             | process | at rest MiB | under load MiB |\n|---|--:|--:|"
        );
        for p in &self.memory {
            let _ = writeln!(
                s,
                "| {} | {:.1} | {:.1} |",
                p.process,
                mib(p.rest_kib),
                mib(p.load_kib)
            );
        }
        let _ = writeln!(
            s,
            "\n### Targets (issue 5)\n\n| target | measured | met |\n|---|---|---|"
        );
        for t in self.targets() {
            let met = match t.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "not measured",
            };
            let _ = writeln!(s, "| {} | {} | {met} |", t.what, t.measured);
        }
        s
    }

    pub fn json(&self) -> Value {
        let targets: Vec<Value> = self
            .targets()
            .into_iter()
            .map(|t| json!({"target": t.what, "measured": t.measured, "met": t.met}))
            .collect();
        json!({
            "date": self.date,
            "commit": self.commit,
            "machine": self.machine,
            "driver": self.driver,
            "fastmcp_version": self.fastmcp_version,
            "settings": {
                "concurrency": self.args.concurrency,
                "requests_per_phase": self.args.requests,
                "seconds_per_phase": self.args.seconds,
                "warmup_requests": self.args.warmup,
                "appends": self.args.appends,
                "append_writers": self.args.append_writers,
                "hops": if self.args.tcp_hops { "tcp" } else { "unix" },
            },
            "up_mcp_url": self.up_mcp_url,
            "phases": self.phases,
            "ratios": self.ratios(),
            "trace_appends": self.appends,
            "startup": self.startup,
            "memory": self.memory,
            "targets": targets,
        })
    }
}

fn times(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.1}×"))
}

fn percent(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{:.0} %", v * 100.0))
}

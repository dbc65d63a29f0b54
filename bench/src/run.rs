//! One benchmark run: start everything, measure each phase, stop
//! everything, report.

use crate::RunArgs;
use crate::appends::{self, AppendOutcome};
use crate::driver::{self, Outcome, Quiet, Spec, Target};
use crate::fastmcp;
use crate::mcp;
use crate::procs::{self, OtherLoadSampler, Proc, RssSampler};
use crate::report::{Phase, ProcessMemory, Report, Startup};
use anyhow::{Context, bail};
use ithaca_kit::principal::InternalKey;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Memory of the processes measured, by name: (at rest, peak under load).
#[derive(Default)]
struct Memory {
    order: Vec<String>,
    seen: BTreeMap<String, ProcessMemory>,
}

impl Memory {
    fn rest(&mut self, proc: &Proc, role: &str) {
        let kib = proc.rss_kib().unwrap_or(0);
        let entry = self.entry(&proc.name, role);
        if entry.rest_kib == 0 {
            entry.rest_kib = kib;
        }
    }

    fn load(&mut self, name: &str, role: &str, kib: u64) {
        let entry = self.entry(name, role);
        entry.load_kib = entry.load_kib.max(kib);
    }

    fn entry(&mut self, name: &str, role: &str) -> &mut ProcessMemory {
        if !self.seen.contains_key(name) {
            self.order.push(name.to_owned());
        }
        self.seen
            .entry(name.to_owned())
            .or_insert_with(|| ProcessMemory {
                process: name.to_owned(),
                role: role.to_owned(),
                ..ProcessMemory::default()
            })
    }

    fn into_vec(mut self) -> Vec<ProcessMemory> {
        self.order
            .iter()
            .filter_map(|n| self.seen.remove(n))
            .collect()
    }
}

/// A process measured in a phase and whether it is one of ours.
struct Measured<'a> {
    proc: &'a Proc,
    role: &'static str,
}

struct Bench {
    args: RunArgs,
    ticks: u64,
    memory: Memory,
    phases: Vec<Phase>,
}

impl Bench {
    /// Run one load phase against `target` while sampling the memory and CPU
    /// time of `procs`.
    async fn phase(
        &mut self,
        name: &str,
        target: &Target,
        rate: Option<f64>,
        procs: &[Measured<'_>],
    ) -> anyhow::Result<Outcome> {
        self.phase_in_bursts(name, target, rate, None, procs).await
    }

    /// [`Bench::phase`], in bursts after quiet spells with `quiet`: as many
    /// bursts as fill half the phase's seconds, each after its pause.
    async fn phase_in_bursts(
        &mut self,
        name: &str,
        target: &Target,
        rate: Option<f64>,
        quiet: Option<Quiet>,
        procs: &[Measured<'_>],
    ) -> anyhow::Result<Outcome> {
        let (duration, busy_s) = match quiet {
            Some(q) => {
                let bursts = (self.args.seconds / 2.0 / q.burst.as_secs_f64())
                    .ceil()
                    .max(1.0);
                (
                    (q.quiet + q.burst).mul_f64(bursts),
                    q.burst.as_secs_f64() * bursts,
                )
            }
            None => (
                Duration::from_secs_f64(self.args.seconds),
                self.args.seconds,
            ),
        };
        let requests = match rate {
            Some(r) => self.args.requests.min((r * busy_s).ceil() as u64),
            None => self.args.requests,
        };
        let spec = Spec {
            concurrency: self.args.concurrency,
            requests,
            duration,
            warmup: self.args.warmup,
            rate,
            slow: None,
            quiet,
        };
        if self.args.idle_wait > 0.0 {
            let busy =
                procs::wait_for_quiet(0.25, Duration::from_secs_f64(self.args.idle_wait)).await;
            if busy >= 0.25 {
                eprintln!(
                    "ithaca-bench: the machine is still busy ({busy:.2} cores) after {} s; measuring anyway",
                    self.args.idle_wait
                );
            }
        }
        eprintln!("ithaca-bench: {name} …");
        for m in procs {
            self.memory.rest(m.proc, m.role);
        }
        let before: Vec<u64> = procs
            .iter()
            .map(|m| m.proc.cpu_ticks().unwrap_or(0))
            .collect();
        let me = std::process::id();
        let machine_before = procs::machine_busy_ticks().unwrap_or(0);
        let me_before = procs::cpu_ticks(me).unwrap_or(0);
        let steal_before = procs::machine_steal_ticks().unwrap_or(0);
        let sampler = RssSampler::start(procs.iter().map(|m| m.proc.pid()).collect());
        let others = OtherLoadSampler::start(
            procs
                .iter()
                .map(|m| m.proc.pid())
                .chain(std::iter::once(me))
                .collect(),
        );
        let wakes = crate::lateness::Sampler::start();
        let loading = std::time::Instant::now();
        let outcome = driver::load(target.clone(), spec).await?;
        // The whole phase's time, its quiet spells included: a phase in
        // bursts reports its calls a second over the bursts alone, but the
        // machine's counters ran all along.
        let phase_s = loading.elapsed().as_secs_f64();
        let lateness = wakes.finish();
        let machine_ticks = procs::machine_busy_ticks()
            .unwrap_or(0)
            .saturating_sub(machine_before);
        let steal_ticks = procs::machine_steal_ticks()
            .unwrap_or(0)
            .saturating_sub(steal_before);
        let driver_ticks = procs::cpu_ticks(me).unwrap_or(0).saturating_sub(me_before);
        let peaks = sampler.finish().await;
        let other_peak_cores = others.finish().await;
        let after: Vec<u64> = procs
            .iter()
            .map(|m| m.proc.cpu_ticks().unwrap_or(0))
            .collect();
        for (m, peak) in procs.iter().zip(&peaks) {
            self.memory.load(&m.proc.name, m.role, *peak);
        }
        // The warm-up's CPU time is included; count its requests too.
        let total = outcome.requests + self.args.warmup;
        let ticks: u64 = after
            .iter()
            .zip(&before)
            .map(|(a, b)| a.saturating_sub(*b))
            .sum();
        // CPU the rest of the machine used meanwhile (another build, say),
        // in cores: it competes with what is measured.
        let wall = phase_s.max(1e-9) * self.ticks as f64;
        let driver_cores = driver_ticks as f64 / wall;
        let other_cores = machine_ticks.saturating_sub(ticks + driver_ticks) as f64 / wall;
        let steal_cores = steal_ticks as f64 / wall;
        let per_request = |t: u64| t as f64 * 1e6 / self.ticks as f64 / total.max(1) as f64;
        let cpu_us = (total > 0).then(|| per_request(ticks));
        let cpu_by_process: Vec<(String, f64)> = procs
            .iter()
            .zip(after.iter().zip(&before))
            .map(|(m, (a, b))| (m.proc.name.clone(), per_request(a.saturating_sub(*b))))
            .collect();
        eprintln!(
            "ithaca-bench: {name}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
            outcome.rps, outcome.p50_ms, outcome.p99_ms, outcome.errors
        );
        eprintln!(
            "ithaca-bench: {name}: driver {driver_cores:.2} cores, everything else on the machine {other_cores:.2} cores (of it stolen by the host {steal_cores:.3}), at most {other_peak_cores:.2} in a {} ms window",
            OtherLoadSampler::WINDOW.as_millis()
        );
        eprintln!(
            "ithaca-bench: {name}: a 1 ms sleep woke late by p50 {:.3} ms, p99 {:.2} ms, at worst {:.1} ms; {:.1} % of the time in sleeps 1 ms late or more; a hand-off to another thread and back took p50 {:.3} ms, p99 {:.2} ms, at worst {:.1} ms",
            lateness.p50_ms,
            lateness.p99_ms,
            lateness.max_ms,
            lateness.stalled_share * 100.0,
            lateness.handoff_p50_ms,
            lateness.handoff_p99_ms,
            lateness.handoff_max_ms
        );
        if cpu_by_process.len() > 1 {
            let parts: Vec<String> = cpu_by_process
                .iter()
                .map(|(n, us)| format!("{n} {us:.0}"))
                .collect();
            eprintln!(
                "ithaca-bench: {name}: server CPU µs/request: {}",
                parts.join(", ")
            );
        }
        if let Some(why) = &outcome.first_error {
            eprintln!("ithaca-bench: {name}: first error: {why}");
        }
        self.phases.push(Phase {
            name: name.to_owned(),
            concurrency: spec.concurrency,
            rate,
            outcome: outcome.clone(),
            server_cpu_us_per_request: cpu_us,
            server_cpu_us_per_request_by_process: cpu_by_process.into_iter().collect(),
            driver_cores,
            other_cores,
            other_peak_cores,
            steal_cores,
            lateness,
            servers: procs.iter().map(|m| m.proc.name.clone()).collect(),
        });
        Ok(outcome)
    }
}

pub(crate) fn ithaca_command(ithaca: &Path, key_hex: &str) -> Command {
    let mut cmd = Command::new(ithaca);
    cmd.env("ITHACA_INTERNAL_KEY", key_hex)
        .env("RUST_LOG", "warn")
        .env_remove("DOOMBERG_DB")
        .env_remove("DOOMBERG_MCP_PORT")
        .env_remove("ITHACA_DATABASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    cmd
}

/// `ithaca up` on `data`: the process, launch-to-ready time, and its lines.
pub(crate) fn start_up(
    ithaca: &Path,
    key_hex: &str,
    data: &Path,
) -> anyhow::Result<(Proc, f64, Vec<String>)> {
    let mut cmd = ithaca_command(ithaca, key_hex);
    cmd.args(["up", "--port-base", "0", "--data-dir"]).arg(data);
    let mut proc = Proc::spawn("ithaca up", cmd)?;
    let (lines, at) = proc.wait_for("ithaca: ready", Duration::from_secs(60))?;
    let ready = at.duration_since(proc.started).as_secs_f64();
    Ok((proc, ready, lines))
}

/// The value after `label` on a line of `ithaca up`'s output.
pub(crate) fn field(lines: &[String], label: &str) -> anyhow::Result<String> {
    lines
        .iter()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .map(|v| v.trim().to_owned())
        .with_context(|| format!("`ithaca up` printed no {label:?} line: {lines:?}"))
}

fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|kib| (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned();
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "memory_gib": memory_gib,
        "kernel": kernel,
    })
}

fn output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Only the trace-append phases (SQLite, then PostgreSQL), printed as a
/// table: for measuring the session service's write path alone.
pub async fn appends_only(args: RunArgs) -> anyhow::Result<()> {
    let ithaca = ithaca_binary(&args)?;
    let key_hex = InternalKey::generate_hex();
    let work = std::env::temp_dir().join(format!("ithaca-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let sqlite = appends::run(appends::Setup {
        ithaca: &ithaca,
        key_hex: &key_hex,
        database_url: work.join("appends.session.db").display().to_string(),
        schema: "ithaca_session".to_owned(),
        label: "SQLite",
        writers: args.append_writers,
        unary: args.append_unary,
        appends: args.appends,
        duration: Duration::from_secs_f64(args.seconds),
        idle_wait: args.idle_wait,
    })
    .await;
    let _ = std::fs::remove_dir_all(&work);
    let results = vec![sqlite?, postgres_appends(&args, &ithaca, &key_hex).await];
    println!("| database | writers | appends | per second | p50 ms | p99 ms | gap-free |");
    println!("|---|---|---|---|---|---|---|");
    for a in &results {
        match &a.not_run {
            Some(why) => println!("| {} | NOT RUN: {why} | | | | | |", a.database),
            None => println!(
                "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} |",
                a.database, a.writers, a.appends, a.per_second, a.p50_ms, a.p99_ms, a.gap_free
            ),
        }
    }
    Ok(())
}

pub(crate) fn ithaca_binary(args: &RunArgs) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let ithaca = match &args.ithaca {
        Some(p) => p.clone(),
        None => exe
            .parent()
            .map(|d| d.join("ithaca"))
            .context("no directory for this binary")?,
    };
    if !ithaca.exists() {
        bail!(
            "no ithaca binary at {}: build both with `cargo build --release -p ithaca -p ithaca-bench`, or pass --ithaca",
            ithaca.display()
        );
    }
    Ok(ithaca)
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let ithaca = ithaca_binary(&args)?;
    let out = args.out.clone().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/ithaca-bench/report.json")
    });
    let work = std::env::temp_dir().join(format!("ithaca-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = measure(&args, &ithaca, &exe, &work).await;
    let _ = std::fs::remove_dir_all(&work);
    let report = result?;
    println!("{}", report.markdown());
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&report.json())?)?;
    eprintln!("ithaca-bench: JSON report in {}", out.display());
    Ok(())
}

async fn measure(args: &RunArgs, ithaca: &Path, exe: &Path, work: &Path) -> anyhow::Result<Report> {
    let key_hex = InternalKey::generate_hex();
    let mut bench = Bench {
        args: args.clone(),
        ticks: procs::ticks_per_second(),
        memory: Memory::default(),
        phases: Vec::new(),
    };

    // Start-up: a first start on an empty data directory (migrations, a
    // tenant, two keys), then a restart on the data it left.
    eprintln!("ithaca-bench: ithaca up, first start and restart …");
    let data = work.join("data");
    let (up, first_start, lines) = start_up(ithaca, &key_hex, &data)?;
    let token = field(&lines, "agent key")?;
    up.stop()?;
    let (up, restart, lines) = start_up(ithaca, &key_hex, &data)?;
    // `  session  http://127.0.0.1:port  unix:/…/session.sock`: the unix
    // socket unless --tcp-hops (or `ithaca up` bound none).
    let hop = |label: &str| -> anyhow::Result<String> {
        let urls = field(&lines, label)?;
        let mut urls = urls.split_whitespace();
        let tcp = urls.next().unwrap_or_default().to_owned();
        Ok(match urls.next() {
            Some(unix) if !args.tcp_hops => unix.to_owned(),
            _ => tcp,
        })
    };
    let auth_url = hop("auth ")?;
    let session_url = hop("session ")?;
    let up_mcp = field(&lines, "mcp ")?;
    let startup = Startup {
        first_start_s: first_start,
        restart_s: restart,
    };
    eprintln!(
        "ithaca-bench: ready after {first_start:.3} s (first start), {restart:.3} s (restart)"
    );

    // The probe backend and an edge that learns it by reflection, in front
    // of the auth and session services of `ithaca up`.
    let mut cmd = Command::new(exe);
    cmd.args(["backend", "--listen", "127.0.0.1:0"])
        .env("ITHACA_INTERNAL_KEY", &key_hex);
    if !args.tcp_hops {
        cmd.arg("--unix-socket").arg(work.join("probe.sock"));
    }
    let mut backend = Proc::spawn("probe backend (bench)", cmd)?;
    let mut backend_url = format!(
        "http://{}",
        backend.listening("ithaca-bench backend listening on")?
    );
    if !args.tcp_hops {
        backend_url = backend.listening("ithaca-bench backend listening on unix:")?;
    }
    let mut cmd = ithaca_command(ithaca, &key_hex);
    cmd.args(["serve", "edge", "--listen", "127.0.0.1:0", "--auth-url"])
        .arg(&auth_url)
        .arg("--session-url")
        .arg(&session_url)
        .arg("--backend")
        .arg(&backend_url);
    let mut edge = Proc::spawn("ithaca serve edge", cmd)?;
    let edge_addr = edge.listening("ithaca: edge listening on")?;

    // The agent opens a session, then the probe tool answers in both eras.
    let list = mcp::rpc(&mcp::modern(&edge_addr, &token, "tools/list", json!({}))?).await?;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    if !names.contains(&mcp::TOOL) {
        bail!(
            "the edge does not offer {}: tools/list gave {names:?}",
            mcp::TOOL
        );
    }
    let gated = mcp::rpc(&mcp::modern_call(&edge_addr, &token)?).await?;
    if !gated.to_string().contains("no_active_session") {
        bail!("{} ran before session_context: {gated}", mcp::TOOL);
    }
    let opened = mcp::rpc(&mcp::modern(
        &edge_addr,
        &token,
        "tools/call",
        json!({"name": "session_context", "arguments": {"prompt": "ithaca-bench: full-path load"}}),
    )?)
    .await?;
    mcp::check_call(&opened)?;
    let session_id = opened["result"]["structuredContent"]["session_id"]
        .as_str()
        .context("session_context gave no session_id")?
        .to_owned();
    let full_modern = mcp::modern_call(&edge_addr, &token)?;
    let answer = mcp::raw(&full_modern).await?;
    mcp::check_call(&serde_json::from_slice(&answer)?)?;
    mcp::initialize(&edge_addr, &token).await?;
    let full_legacy = mcp::legacy_call(&edge_addr, &token)?;
    mcp::check_call(&mcp::rpc(&full_legacy).await?)?;

    // The bare limit answers with the edge's own bytes.
    let body_file = work.join("answer.json");
    std::fs::write(&body_file, &answer)?;
    let mut cmd = Command::new(exe);
    cmd.args(["bare", "--listen", "127.0.0.1:0", "--body-file"])
        .arg(&body_file);
    let mut bare = Proc::spawn("bare axum (bench)", cmd)?;
    let bare_addr = bare.listening("ithaca-bench bare listening on")?;
    let bare_target = mcp::modern_call(&bare_addr, &token)?;

    // The Python anchor.
    let anchor = if args.no_fastmcp {
        None
    } else {
        let python = fastmcp::ensure_venv(&args.python)?;
        let version = fastmcp::version(&python);
        let (proc, addr) = fastmcp::start(&python, &token)?;
        mcp::check_call(&mcp::rpc(&mcp::modern_call(&addr, &token)?).await?)
            .context("FastMCP, 2026-07-28")?;
        mcp::initialize(&addr, &token)
            .await
            .context("FastMCP initialize")?;
        mcp::check_call(&mcp::rpc(&mcp::legacy_call(&addr, &token)?).await?)
            .context("FastMCP, 2025-06-18")?;
        Some((proc, addr, version))
    };

    let full = [
        Measured {
            proc: &edge,
            role: "ithaca",
        },
        Measured {
            proc: &up,
            role: "ithaca",
        },
        Measured {
            proc: &backend,
            role: "bench",
        },
    ];
    let peak = bench
        .phase("full path, 2026-07-28", &full_modern, None, &full)
        .await?;
    let legacy_peak = bench
        .phase("full path, 2025-06-18", &full_legacy, None, &full)
        .await?;
    // The same edge with fewer hops behind it, to show what each costs:
    // tools/list answers from the catalog (the key is cached, so no hop);
    // resources/read of the session is one gRPC hop and one SQLite read,
    // with no session gate and no trace appends.
    let list = mcp::modern(&edge_addr, &token, "tools/list", json!({}))?.expecting(mcp::TOOL);
    bench
        .phase("edge only: tools/list, no hop", &list, None, &full)
        .await?;
    let read = mcp::modern(
        &edge_addr,
        &token,
        "resources/read",
        json!({"uri": format!("doomberg://sessions/{session_id}")}),
    )?
    .expecting("\"contents\"");
    bench
        .phase(
            "edge + 1 hop: resources/read of the session",
            &read,
            None,
            &full,
        )
        .await?;
    // Half of the better of the two eras' peaks: one era's phase disturbed
    // by other work on the machine does not make this easier.
    let half = peak.rps.max(legacy_peak.rps) / 2.0;
    bench
        .phase(
            "full path, 2026-07-28, half of peak",
            &full_modern,
            Some(half),
            &full,
        )
        .await?;
    // The same rate as agents send it, with pauses: what the services'
    // idle-time habits (timers that back off, a log not checkpointed while
    // quiet) cost the first calls after each pause.
    bench
        .phase_in_bursts(
            "full path, 2026-07-28, half of peak in 1 s bursts after 3 s quiet",
            &full_modern,
            Some(half),
            Some(Quiet {
                quiet: Duration::from_secs(3),
                burst: Duration::from_secs(1),
            }),
            &full,
        )
        .await?;
    bench
        .phase(
            "bare limit (axum)",
            &bare_target,
            None,
            &[Measured {
                proc: &bare,
                role: "bench",
            }],
        )
        .await?;
    let mut fastmcp_version = None;
    if let Some((proc, addr, version)) = &anchor {
        let m = [Measured {
            proc,
            role: "python",
        }];
        bench
            .phase(
                "FastMCP, 2026-07-28",
                &mcp::modern_call(addr, &token)?,
                None,
                &m,
            )
            .await?;
        bench
            .phase(
                "FastMCP, 2025-06-18",
                &mcp::legacy_call(addr, &token)?,
                None,
                &m,
            )
            .await?;
        fastmcp_version = Some(version.clone());
    }

    // Every full-path call left a tool_call and a tool_result in the trace.
    let resource = mcp::rpc(&mcp::modern(
        &edge_addr,
        &token,
        "resources/read",
        json!({"uri": format!("doomberg://sessions/{session_id}")}),
    )?)
    .await?;
    if resource.get("result").is_none() {
        bail!("reading the session back failed: {resource}");
    }

    if let Some((proc, _, _)) = anchor {
        proc.stop()?;
    }
    bare.stop()?;
    edge.stop()?;
    backend.stop()?;
    up.stop()?;

    // Trace appends.
    let mut append_results = Vec::new();
    let sqlite = appends::run(appends::Setup {
        ithaca,
        key_hex: &key_hex,
        database_url: work.join("appends.session.db").display().to_string(),
        schema: "ithaca_session".to_owned(),
        label: "SQLite",
        writers: args.append_writers,
        unary: args.append_unary,
        appends: args.appends,
        duration: Duration::from_secs_f64(args.seconds),
        idle_wait: args.idle_wait,
    })
    .await?;
    eprintln!(
        "ithaca-bench: trace appends, SQLite: {:.0}/s, gap-free: {}",
        sqlite.per_second, sqlite.gap_free
    );
    append_results.push(sqlite);
    append_results.push(postgres_appends(args, ithaca, &key_hex).await);

    for a in &append_results {
        if a.not_run.is_none() {
            let name = format!("ithaca serve session ({})", a.database);
            bench.memory.entry(&name, "ithaca").rest_kib = a.rss_rest_kib;
            bench.memory.load(&name, "ithaca", a.rss_load_kib);
        }
    }

    Ok(Report {
        machine: machine(),
        commit: output(
            "git",
            &[
                "-C",
                env!("CARGO_MANIFEST_DIR"),
                "rev-parse",
                "--short",
                "HEAD",
            ],
        ),
        date: output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        driver: format!(
            "ithaca-bench's own driver on hyper 1 (HTTP/1.1 keep-alive, one thread), {} connections",
            args.concurrency
        ),
        fastmcp_version,
        args: args.clone(),
        up_mcp_url: up_mcp,
        startup,
        phases: bench.phases,
        appends: append_results,
        memory: bench.memory.into_vec(),
    })
}

async fn postgres_appends(args: &RunArgs, ithaca: &Path, key_hex: &str) -> AppendOutcome {
    let not_run = |why: String| {
        eprintln!("ithaca-bench: NOT RUN: trace appends on PostgreSQL: {why}");
        AppendOutcome {
            database: "PostgreSQL".to_owned(),
            not_run: Some(why),
            ..AppendOutcome::default()
        }
    };
    let url = args.postgres_url.trim().to_owned();
    if url.is_empty() || url == "none" {
        return not_run("no --postgres-url".to_owned());
    }
    if let Err(e) = appends::postgres_answers(&url).await {
        return not_run(format!("PostgreSQL does not answer at {url}: {e}"));
    }
    let schema = format!("bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let result = appends::run(appends::Setup {
        ithaca,
        key_hex,
        database_url: url.clone(),
        schema: schema.clone(),
        label: "PostgreSQL",
        writers: args.append_writers,
        unary: args.append_unary,
        appends: args.appends,
        duration: Duration::from_secs_f64(args.seconds),
        idle_wait: args.idle_wait,
    })
    .await;
    if let Err(e) = appends::drop_schema(&url, &schema).await {
        eprintln!("ithaca-bench: dropping schema {schema}: {e}");
    }
    match result {
        Ok(r) => {
            eprintln!(
                "ithaca-bench: trace appends, PostgreSQL: {:.0}/s, gap-free: {}",
                r.per_second, r.gap_free
            );
            r
        }
        Err(e) => not_run(format!("failed: {e:#}")),
    }
}

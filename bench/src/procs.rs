//! Child processes the benchmark starts, their stdout lines, their memory
//! (VmRSS) and CPU time from /proc, and a clean stop (SIGTERM, then kill).

use anyhow::{Context, bail};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Resolves on SIGTERM or ctrl-c.
pub async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// A child process, killed when dropped, with its stdout lines on a channel.
pub struct Proc {
    pub name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    pub started: Instant,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command) -> anyhow::Result<Proc> {
        let started = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {name} ({cmd:?})"))?;
        let stdout = child.stdout.take().context("stdout is piped")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc {
            name: name.to_owned(),
            child,
            lines,
            started,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Read lines until one contains `needle`; returns every line read and
    /// when the last one arrived.
    pub fn wait_for(
        &mut self,
        needle: &str,
        timeout: Duration,
    ) -> anyhow::Result<(Vec<String>, Instant)> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains(needle);
                    seen.push(line);
                    if done {
                        return Ok((seen, Instant::now()));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!(
                        "{} did not print {needle:?} within {timeout:?}; printed: {seen:?}",
                        self.name
                    )
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.try_wait().ok().flatten();
                    bail!(
                        "{} exited ({status:?}) before printing {needle:?}; printed: {seen:?}",
                        self.name
                    )
                }
            }
        }
    }

    /// The address in a `… listening on ADDR` line.
    pub fn listening(&mut self, needle: &str) -> anyhow::Result<String> {
        let (lines, _) = self.wait_for(needle, Duration::from_secs(60))?;
        let last = lines.last().cloned().unwrap_or_default();
        last.rsplit(' ')
            .next()
            .map(str::to_owned)
            .with_context(|| format!("no address in {last:?}"))
    }

    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid())
    }

    pub fn cpu_ticks(&self) -> Option<u64> {
        cpu_ticks(self.pid())
    }

    /// SIGTERM, then wait up to 20 s, then kill.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> anyhow::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "ithaca-bench: {} did not stop on SIGTERM; killing it",
            self.name
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// VmRSS of a process, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// User plus system CPU time of a process (all its threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
pub fn ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// Samples the RSS of some processes while a phase runs; keeps the peak.
pub struct RssSampler {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<u64>>,
}

impl RssSampler {
    pub fn start(pids: Vec<u32>) -> RssSampler {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut peak = vec![0u64; pids.len()];
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                for (i, pid) in pids.iter().enumerate() {
                    if let Some(kib) = rss_kib(*pid) {
                        peak[i] = peak[i].max(kib);
                    }
                }
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
            }
            peak
        });
        RssSampler { stop, task }
    }

    /// The peak RSS of each process, in KiB.
    pub async fn finish(self) -> Vec<u64> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// The busiest stretch of the rest of the machine while a phase runs: CPU
/// that neither `ours` (the processes measured and the bench itself) nor
/// idle took, per window of [`OtherLoadSampler::WINDOW`], and the largest.
/// A phase's mean dilutes a short burst (another program starting for
/// 200 ms is 0.02 cores over 8 s); the peak shows it. The counters move in
/// clock ticks (10 ms), so a window's figure is good to about 0.1 core.
pub struct OtherLoadSampler {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<f64>,
}

impl OtherLoadSampler {
    pub const WINDOW: Duration = Duration::from_millis(250);

    pub fn start(ours: Vec<u32>) -> OtherLoadSampler {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let per_s = ticks_per_second() as f64;
            let read = || {
                let ours: u64 = ours.iter().filter_map(|pid| cpu_ticks(*pid)).sum();
                (Instant::now(), machine_busy_ticks().unwrap_or(0), ours)
            };
            let mut last = read();
            let mut peak = 0.0f64;
            let mut tick = tokio::time::interval(Self::WINDOW);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                let now = read();
                let seconds = now.0.duration_since(last.0).as_secs_f64();
                let other = now
                    .1
                    .saturating_sub(last.1)
                    .saturating_sub(now.2.saturating_sub(last.2));
                if seconds > 0.0 {
                    peak = peak.max(other as f64 / per_s / seconds);
                }
                last = now;
            }
            peak
        });
        OtherLoadSampler { stop, task }
    }

    /// The largest load of the rest of the machine in any window, in cores.
    pub async fn finish(self) -> f64 {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// The machine's CPU time by kind (the `cpu` line of `/proc/stat`, all
/// CPUs): user nice system idle iowait irq softirq steal …, in clock ticks.
fn machine_cpu_ticks() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    Some(
        line.split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect(),
    )
}

/// Busy CPU time of the whole machine (all CPUs), in clock ticks.
pub fn machine_busy_ticks() -> Option<u64> {
    let v = machine_cpu_ticks()?;
    Some(v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)? + v.get(7).unwrap_or(&0))
}

/// Time the machine's host took from all its CPUs (`steal`), in clock ticks.
pub fn machine_steal_ticks() -> Option<u64> {
    machine_cpu_ticks()?.get(7).copied()
}

/// Wait until the machine has been quiet for one second (busy CPU under
/// `max_cores`), for at most `limit`. Returns the busy cores of the last
/// second measured.
pub async fn wait_for_quiet(max_cores: f64, limit: Duration) -> f64 {
    let ticks = ticks_per_second() as f64;
    let deadline = Instant::now() + limit;
    loop {
        let before = machine_busy_ticks().unwrap_or(0);
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let busy = machine_busy_ticks().unwrap_or(0).saturating_sub(before) as f64
            / ticks
            / started.elapsed().as_secs_f64();
        if busy < max_cores || Instant::now() >= deadline {
            return busy;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::OtherLoadSampler;
    use std::time::Duration;

    /// A process that spins for a second is another program's load: the
    /// sampler, told only of this one, sees at least half a core of it in
    /// its busiest window.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_busiest_window_shows_a_short_burst_of_other_work() {
        let sampler = OtherLoadSampler::start(vec![std::process::id()]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut spinner = std::process::Command::new("sh")
            .args([
                "-c",
                "end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do :; done",
            ])
            .spawn()
            .expect("start a spinning shell");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let peak = sampler.finish().await;
        let _ = spinner.kill();
        let _ = spinner.wait();
        assert!(
            peak >= 0.5,
            "the busiest window held {peak:.2} cores of other work"
        );
    }
}

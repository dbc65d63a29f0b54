//! The load driver: a small HTTP/1.1 client on `hyper` 1. Each of
//! `concurrency` workers holds one keep-alive connection and sends its next
//! request when the previous answer is in (closed loop), or, with a rate,
//! at its scheduled time (open loop). The whole driver runs on one thread
//! (a current-thread runtime), so it takes at most one of the machine's
//! cores away from the servers it measures.

use anyhow::Context;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// A request to repeat.
#[derive(Clone, Debug)]
pub struct Target {
    /// `host:port`.
    pub addr: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// A response must be 200 and contain this to count as a success.
    pub expect: Option<String>,
}

impl Target {
    pub fn post(
        addr: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> anyhow::Result<Target> {
        let mut map = HeaderMap::new();
        map.insert(http::header::HOST, HeaderValue::from_str(addr)?);
        for (k, v) in headers {
            map.append(
                HeaderName::from_bytes(k.as_bytes())?,
                HeaderValue::from_str(v)?,
            );
        }
        Ok(Target {
            addr: addr.to_owned(),
            path: path.to_owned(),
            headers: map,
            body: body.into(),
            expect: None,
        })
    }

    pub fn expecting(mut self, text: &str) -> Target {
        self.expect = Some(text.to_owned());
        self
    }

    fn request(&self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.path.parse().unwrap_or_default();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// How hard and how long.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub concurrency: usize,
    pub requests: u64,
    pub duration: Duration,
    pub warmup: u64,
    /// Requests per second in all (open loop); `None` is as fast as answers come.
    pub rate: Option<f64>,
    /// Keep each call at least this slow, with when it started, to show
    /// whether a tail comes in bursts (see [`bursts`]).
    pub slow: Option<Duration>,
    /// With a rate: send in bursts, each after a quiet spell (see
    /// [`Quiet`]), instead of evenly.
    pub quiet: Option<Quiet>,
}

/// An open-loop load that pauses, as agents do: `quiet`, then `burst` at
/// the phase's rate, then quiet again, until the phase's time or requests
/// run out. What it measures is what a service's idle-time habits (timers
/// that back off, caches that cool) cost the first calls of each burst.
#[derive(Clone, Copy, Debug)]
pub struct Quiet {
    pub quiet: Duration,
    pub burst: Duration,
}

impl Quiet {
    /// When request `n` is due, from the phase's start, at `rate` a second.
    fn due(&self, n: u64, rate: f64) -> Duration {
        let per_burst = ((rate * self.burst.as_secs_f64()).floor() as u64).max(1);
        let (cycle, within) = (n / per_burst, n % per_burst);
        (self.quiet + self.burst) * u32::try_from(cycle).unwrap_or(u32::MAX)
            + self.quiet
            + Duration::from_secs_f64(within as f64 / rate)
    }

    /// The time spent quiet in `elapsed` of a phase.
    fn quiet_in(&self, elapsed: Duration) -> Duration {
        let cycle = self.quiet + self.burst;
        let whole = (elapsed.as_secs_f64() / cycle.as_secs_f64()).floor();
        let into = elapsed.saturating_sub(cycle.mul_f64(whole));
        self.quiet.mul_f64(whole) + into.min(self.quiet)
    }
}

/// What a phase measured. Latencies in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    pub rps: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// With [`Spec::slow`]: each call at least that slow, as (its start in
    /// ms from the phase's start, its latency in ms).
    #[serde(skip)]
    pub slow: Vec<(f64, f64)>,
    /// When the phase started, in ms since the Unix epoch (the wall clock),
    /// so its slow calls can be lined up with another recorder's times.
    #[serde(skip)]
    pub started_unix_ms: f64,
}

/// One window of a phase and the slow calls that started in it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Burst {
    pub from_ms: f64,
    pub calls: usize,
    pub slowest_ms: f64,
}

/// The slow calls of a phase counted by the `window_ms` in which they
/// started, windows without any left out: a tail that comes from a stall
/// shows as a few full windows, one spread thinly over all of them as
/// many small ones.
pub fn bursts(slow: &[(f64, f64)], window_ms: f64) -> Vec<Burst> {
    let mut windows = std::collections::BTreeMap::<i64, Burst>::new();
    for &(start, latency) in slow {
        let n = (start / window_ms).floor() as i64;
        let b = windows.entry(n).or_insert(Burst {
            from_ms: n as f64 * window_ms,
            calls: 0,
            slowest_ms: latency,
        });
        b.calls += 1;
        b.slowest_ms = b.slowest_ms.max(latency);
    }
    windows.into_values().collect()
}

/// One request and its whole answer.
pub async fn send_once(target: &Target) -> anyhow::Result<(StatusCode, HeaderMap, Bytes)> {
    let mut sender = connect(&target.addr).await?;
    let (status, headers, body) = exchange(&mut sender, target.request())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((status, headers, body))
}

async fn connect(addr: &str) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts.status, parts.headers, body))
}

/// Run one phase on a thread of its own; blocks that thread.
pub fn load_blocking(target: Target, spec: Spec) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        if spec.warmup > 0 {
            let warm = Spec {
                requests: spec.warmup,
                duration: Duration::from_secs(10),
                rate: None,
                quiet: None,
                ..spec
            };
            phase(&target, warm).await?;
        }
        phase(&target, spec).await
    })
}

/// Run one phase from async code (on a separate thread).
pub async fn load(target: Target, spec: Spec) -> anyhow::Result<Outcome> {
    tokio::task::spawn_blocking(move || load_blocking(target, spec)).await?
}

/// How late an open-loop send may start (timer granularity is 1 ms) before
/// its latency is counted from the scheduled time instead of the send.
const TIMER_SLACK: Duration = Duration::from_millis(2);

struct Worker {
    latencies_us: Vec<u32>,
    slow: Vec<(f64, f64)>,
    errors: u64,
    first_error: Option<String>,
}

async fn phase(target: &Target, spec: Spec) -> anyhow::Result<Outcome> {
    let target = Arc::new(target.clone());
    let issued = Arc::new(AtomicU64::new(0));
    // Connect everyone first, so connection set-up is not timed.
    let mut senders = Vec::with_capacity(spec.concurrency);
    for _ in 0..spec.concurrency {
        senders.push(connect(&target.addr).await?);
    }
    let started = Instant::now();
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let deadline = started + spec.duration;
    let mut workers = Vec::new();
    for mut sender in senders {
        let target = target.clone();
        let issued = issued.clone();
        workers.push(tokio::spawn(async move {
            let mut w = Worker {
                latencies_us: Vec::with_capacity(1024),
                slow: Vec::new(),
                errors: 0,
                first_error: None,
            };
            loop {
                let n = issued.fetch_add(1, Ordering::Relaxed);
                if n >= spec.requests || Instant::now() >= deadline {
                    break;
                }
                let scheduled = spec.rate.map(|rate| match spec.quiet {
                    Some(quiet) => started + quiet.due(n, rate),
                    None => started + Duration::from_secs_f64(n as f64 / rate),
                });
                if let Some(at) = scheduled {
                    if at >= deadline {
                        break;
                    }
                    tokio::time::sleep_until(at.into()).await;
                }
                let sent = Instant::now();
                // Coordinated omission: a send that starts late because
                // every connection was busy counts from its scheduled time.
                let from = match scheduled {
                    Some(at) if sent.saturating_duration_since(at) > TIMER_SLACK => at,
                    _ => sent,
                };
                let result = exchange(&mut sender, target.request()).await;
                let elapsed = from.elapsed();
                let failure = match &result {
                    Ok((status, _, _)) if *status != StatusCode::OK => {
                        Some(format!("status {status}: {}", body_text(&result)))
                    }
                    Ok((_, _, body)) => match &target.expect {
                        Some(text) if !contains(body, text.as_bytes()) => {
                            Some(format!("unexpected answer: {}", body_text(&result)))
                        }
                        _ => None,
                    },
                    Err(e) => Some(e.clone()),
                };
                if spec.slow.is_some_and(|slow| elapsed >= slow) {
                    w.slow.push((
                        from.duration_since(started).as_secs_f64() * 1000.0,
                        elapsed.as_secs_f64() * 1000.0,
                    ));
                }
                match failure {
                    None => w
                        .latencies_us
                        .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX)),
                    Some(why) => {
                        w.errors += 1;
                        w.first_error.get_or_insert(why);
                        if result.is_err() {
                            match connect(&target.addr).await {
                                Ok(s) => sender = s,
                                Err(_) => break,
                            }
                        }
                    }
                }
            }
            w
        }));
    }
    let mut latencies = Vec::new();
    let mut slow = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    for worker in workers {
        let w = worker.await?;
        latencies.extend(w.latencies_us);
        slow.extend(w.slow);
        errors += w.errors;
        if first_error.is_none() {
            first_error = w.first_error;
        }
    }
    // In bursts, the rate is over the bursts' time, not the quiet spells'.
    let elapsed = started.elapsed();
    let seconds = match spec.quiet {
        Some(quiet) if spec.rate.is_some() => elapsed.saturating_sub(quiet.quiet_in(elapsed)),
        _ => elapsed,
    }
    .as_secs_f64();
    latencies.sort_unstable();
    let pct = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
        f64::from(latencies[rank - 1]) / 1000.0
    };
    let requests = latencies.len() as u64 + errors;
    Ok(Outcome {
        requests,
        errors,
        seconds,
        rps: latencies.len() as f64 / seconds,
        p50_ms: pct(0.50),
        p90_ms: pct(0.90),
        p99_ms: pct(0.99),
        max_ms: pct(1.0),
        first_error,
        slow,
        started_unix_ms,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn body_text(result: &Result<(StatusCode, HeaderMap, Bytes), String>) -> String {
    match result {
        Ok((_, _, body)) => String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
        Err(e) => e.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_calls_are_counted_by_the_window_they_started_in() {
        let slow = [
            (4_810.0, 12.0),
            (4_850.5, 9.0),
            (120.0, 5.0),
            (4_899.9, 30.0),
            (5_800.0, 7.0),
        ];
        assert_eq!(
            bursts(&slow, 100.0),
            vec![
                Burst {
                    from_ms: 100.0,
                    calls: 1,
                    slowest_ms: 5.0
                },
                Burst {
                    from_ms: 4_800.0,
                    calls: 3,
                    slowest_ms: 30.0
                },
                Burst {
                    from_ms: 5_800.0,
                    calls: 1,
                    slowest_ms: 7.0
                },
            ]
        );
        assert!(bursts(&[], 100.0).is_empty());
    }

    #[test]
    fn a_load_in_bursts_sends_after_each_quiet_spell_at_its_rate() {
        let q = Quiet {
            quiet: Duration::from_secs(3),
            burst: Duration::from_secs(1),
        };
        let ms = |n| q.due(n, 1000.0).as_secs_f64() * 1000.0;
        // 1,000 a burst, the first 3 s in, one every millisecond.
        assert!((ms(0) - 3000.0).abs() < 1e-6);
        assert!((ms(999) - 3999.0).abs() < 1e-6);
        // The next burst after the next quiet spell.
        assert!((ms(1000) - 7000.0).abs() < 1e-6);
        assert!((ms(2500) - 11_500.0).abs() < 1e-6);
        // Time spent quiet: all of a spell, then none during its burst.
        let quiet_in = |s: f64| q.quiet_in(Duration::from_secs_f64(s)).as_secs_f64();
        assert!((quiet_in(2.0) - 2.0).abs() < 1e-9);
        assert!((quiet_in(3.5) - 3.0).abs() < 1e-9);
        assert!((quiet_in(4.0) - 3.0).abs() < 1e-9);
        assert!((quiet_in(9.0) - 7.0).abs() < 1e-9);
    }
}

//! How late the machine wakes a thread that only sleeps, measured beside a
//! load phase: the delay every hand-off of a call pays on top of its work.
//!
//! A call on the full path wakes a thread about eight times (driver, edge,
//! `ithaca up`, probe, and back). When the machine itself is slow to run a
//! woken thread (the guest's vCPU descheduled by its host, a long flush
//! holding a CPU, another process), every call in that window is slow,
//! whatever the code does. This sampler sleeps 1 ms at a time on its own
//! thread and records how much longer than that each sleep took, so a
//! phase's p99 can be read against the machine's own wake-up delays in
//! the same seconds. After each sleep it hands a token to a second thread
//! and waits for it back, the way a call hands work to another thread and
//! waits for the answer, and records that round trip too (two wake-ups,
//! each of a thread that was asleep, often on the other CPU). It wakes
//! about 2,000 times a second and does nothing else: a few thousandths of
//! a CPU.

use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_millis(1);

/// A sleep at least this late counts as a stall.
const STALL: Duration = Duration::from_millis(1);

/// What the sampler saw over a phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Lateness {
    /// Sleeps taken.
    pub samples: usize,
    /// How late a sleep ended, past its 1 ms: median, p99 and the worst, in ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The share of the phase's time spent in sleeps that ended at least
    /// 1 ms late, past their 1 ms: how much of the time a hand-off would
    /// have waited a millisecond or more.
    pub stalled_share: f64,
    /// A token handed to a sleeping thread and back: median, p99 and the
    /// worst round trip, in ms.
    pub handoff_p50_ms: f64,
    pub handoff_p99_ms: f64,
    pub handoff_max_ms: f64,
}

/// The running sampler; [`Sampler::finish`] stops it.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    started: Instant,
    thread: Option<JoinHandle<(Vec<Duration>, Vec<Duration>)>>,
}

impl Sampler {
    pub fn start() -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("bench-lateness".into())
            .spawn(move || {
                let (to_echo, echo_in) = std::sync::mpsc::sync_channel::<()>(1);
                let (echo_out, back) = std::sync::mpsc::sync_channel::<()>(1);
                let echo = std::thread::Builder::new()
                    .name("bench-echo".into())
                    .spawn(move || {
                        while echo_in.recv().is_ok() {
                            if echo_out.send(()).is_err() {
                                break;
                            }
                        }
                    })
                    .ok();
                let mut late = Vec::with_capacity(16_384);
                let mut trips = Vec::with_capacity(16_384);
                while !flag.load(Ordering::Relaxed) {
                    let asleep = Instant::now();
                    std::thread::sleep(PERIOD);
                    late.push(asleep.elapsed().saturating_sub(PERIOD));
                    if echo.is_some() {
                        let sent = Instant::now();
                        if to_echo.send(()).is_err() || back.recv().is_err() {
                            break;
                        }
                        trips.push(sent.elapsed());
                    }
                }
                drop(to_echo);
                if let Some(echo) = echo {
                    let _ = echo.join();
                }
                (late, trips)
            })
            .ok();
        Sampler {
            stop,
            started: Instant::now(),
            thread,
        }
    }

    /// Stop sampling and summarize; all zeros when the thread could not start.
    pub fn finish(mut self) -> Lateness {
        self.stop.store(true, Ordering::Relaxed);
        let wall = self.started.elapsed();
        let (late, trips) = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let mut summary = summarize(late, wall);
        let trips = Tail::of(trips);
        summary.handoff_p50_ms = trips.p50_ms;
        summary.handoff_p99_ms = trips.p99_ms;
        summary.handoff_max_ms = trips.max_ms;
        summary
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The median, p99 and largest of some durations, in ms (zeros for none).
#[derive(Default)]
struct Tail {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

impl Tail {
    fn of(mut d: Vec<Duration>) -> Tail {
        if d.is_empty() {
            return Tail::default();
        }
        d.sort_unstable();
        let at = |q: f64| {
            let i = ((d.len() as f64 * q).ceil() as usize).clamp(1, d.len()) - 1;
            d[i].as_secs_f64() * 1e3
        };
        Tail {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

fn summarize(late: Vec<Duration>, wall: Duration) -> Lateness {
    if late.is_empty() {
        return Lateness::default();
    }
    let stalled: Duration = late.iter().filter(|d| **d >= STALL).sum();
    let samples = late.len();
    let tail = Tail::of(late);
    Lateness {
        samples,
        p50_ms: tail.p50_ms,
        p99_ms: tail.p99_ms,
        max_ms: tail.max_ms,
        stalled_share: if wall.is_zero() {
            0.0
        } else {
            (stalled.as_secs_f64() / wall.as_secs_f64()).min(1.0)
        },
        ..Lateness::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_summary_reads_the_tail_and_the_time_lost_to_stalls() {
        // 98 sleeps on time, one 2 ms late, one 10 ms late, over a second.
        let mut late = vec![Duration::ZERO; 98];
        late.push(ms(2));
        late.push(ms(10));
        let s = summarize(late, Duration::from_secs(1));
        assert_eq!(s.samples, 100);
        assert_eq!(s.p50_ms, 0.0);
        assert_eq!(s.p99_ms, 2.0);
        assert_eq!(s.max_ms, 10.0);
        assert!(
            (s.stalled_share - 0.012).abs() < 1e-9,
            "{}",
            s.stalled_share
        );
    }

    #[test]
    fn no_sleep_no_figures() {
        assert_eq!(summarize(Vec::new(), ms(5)), Lateness::default());
    }

    #[test]
    fn the_sampler_sleeps_and_stops() {
        let sampler = Sampler::start();
        std::thread::sleep(ms(30));
        let s = sampler.finish();
        assert!(s.samples >= 5, "{s:?}");
        assert!(s.max_ms >= s.p99_ms && s.p99_ms >= s.p50_ms, "{s:?}");
        // The token went to the echo thread and back after every sleep.
        assert!(s.handoff_p50_ms > 0.0, "{s:?}");
        assert!(
            s.handoff_max_ms >= s.handoff_p99_ms && s.handoff_p99_ms >= s.handoff_p50_ms,
            "{s:?}"
        );
    }
}

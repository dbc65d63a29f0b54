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
//! the same seconds. It wakes 1,000 times a second and does nothing else:
//! a few thousandths of a CPU.

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
}

/// The running sampler; [`Sampler::finish`] stops it.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    started: Instant,
    thread: Option<JoinHandle<Vec<Duration>>>,
}

impl Sampler {
    pub fn start() -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("bench-lateness".into())
            .spawn(move || {
                let mut late = Vec::with_capacity(16_384);
                while !flag.load(Ordering::Relaxed) {
                    let asleep = Instant::now();
                    std::thread::sleep(PERIOD);
                    late.push(asleep.elapsed().saturating_sub(PERIOD));
                }
                late
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
        let late = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        summarize(late, wall)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn summarize(mut late: Vec<Duration>, wall: Duration) -> Lateness {
    if late.is_empty() {
        return Lateness::default();
    }
    let stalled: Duration = late.iter().filter(|d| **d >= STALL).sum();
    late.sort_unstable();
    let at = |q: f64| {
        let i = ((late.len() as f64 * q).ceil() as usize).clamp(1, late.len()) - 1;
        late[i].as_secs_f64() * 1e3
    };
    Lateness {
        samples: late.len(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        stalled_share: if wall.is_zero() {
            0.0
        } else {
            (stalled.as_secs_f64() / wall.as_secs_f64()).min(1.0)
        },
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
    }
}

//! Stopping an interactive run once nobody waits for it.
//!
//! An interactive run computes for its caller only: when the caller goes
//! away (it cancels the call, its connection drops, tonic drops the
//! handler) or its deadline (`grpc-timeout`) passes, the computation stops
//! and the run is recorded `cancelled` with the reason, at once. A [`Stop`]
//! carries that signal from the gRPC handler to the computation: the
//! service races the computation against [`Stop::stopped`], and
//! computations call [`crate::skills::Context::check`] in their loops so a
//! stretch of work between two awaits ends within milliseconds too.
//!
//! Batch runs are given [`Stop::never`]: they go on by design, on the
//! background worker or on a task of their own, whoever waits for them.
//! cancel_run stops any run computing in its process, batch runs too.

use std::sync::{Arc, OnceLock};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why an interactive run was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The caller cancelled the call or went away.
    CallerLeft,
    /// The caller's deadline passed.
    DeadlinePassed,
    /// cancel_run cancelled the run (batch runs too).
    RunCancelled,
}

impl Reason {
    /// What the run records as its error.
    pub fn message(self) -> &'static str {
        match self {
            Reason::CallerLeft => "cancelled: the caller went away before the run finished",
            Reason::DeadlinePassed => {
                "cancelled: the caller's deadline passed before the run finished"
            }
            Reason::RunCancelled => "cancelled by the caller",
        }
    }
}

/// The stop signal of one run: a token the handler (or a drop guard)
/// cancels, and the caller's deadline, whichever comes first. Clones share
/// the signal.
#[derive(Clone, Debug)]
pub struct Stop {
    token: CancellationToken,
    /// The first reason given; later ones are ignored.
    reason: Arc<OnceLock<Reason>>,
    deadline: Option<Instant>,
}

impl Stop {
    /// A stop signal that never fires (batch runs).
    pub fn never() -> Stop {
        Stop::until(None)
    }

    /// A stop signal that also fires at `deadline`, when there is one.
    pub fn until(deadline: Option<Instant>) -> Stop {
        Stop {
            token: CancellationToken::new(),
            reason: Arc::new(OnceLock::new()),
            deadline,
        }
    }

    /// Stop the run for `reason` (the first reason given sticks).
    pub fn stop(&self, reason: Reason) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }

    /// Why the run must stop, if it must. Cheap enough to call in a loop.
    pub fn reason(&self) -> Option<Reason> {
        if let Some(reason) = self.reason.get() {
            return Some(*reason);
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.stop(Reason::DeadlinePassed);
            return self.reason.get().copied();
        }
        None
    }

    /// Wait until the run must stop; why.
    pub async fn stopped(&self) -> Reason {
        match self.deadline {
            Some(deadline) => {
                tokio::select! {
                    () = self.token.cancelled() => {}
                    () = tokio::time::sleep_until(deadline) => self.stop(Reason::DeadlinePassed),
                }
            }
            None => self.token.cancelled().await,
        }
        self.reason.get().copied().unwrap_or(Reason::CallerLeft)
    }

    /// A guard that stops the run as the caller having left when dropped:
    /// held by a handler whose future tonic drops when its caller goes.
    pub fn on_drop(&self) -> StopOnDrop {
        StopOnDrop(self.clone())
    }
}

/// How much earlier than the handler's reading of the deadline tonic may
/// act on it (see [`StopOnDrop`]).
const DEADLINE_SLACK: std::time::Duration = std::time::Duration::from_millis(100);

/// Stops its [`Stop`] when dropped (see [`Stop::on_drop`]). Dropping it
/// after the run finished changes nothing.
#[derive(Debug)]
pub struct StopOnDrop(Stop);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        // Tonic drops a unary handler at the request's deadline, which it
        // counts from the request's arrival, a little before the handler
        // read it: a deadline this close is the reason.
        let at_deadline = self
            .0
            .deadline
            .is_some_and(|d| Instant::now() + DEADLINE_SLACK >= d);
        self.0.stop(if at_deadline {
            Reason::DeadlinePassed
        } else {
            Reason::CallerLeft
        });
    }
}

/// The deadline a gRPC request carries in its `grpc-timeout` header
/// (`<digits><unit>`, unit one of H M S m u n), from now. `None` without
/// one, or with one that does not parse (tonic refuses those itself).
pub fn deadline(metadata: &tonic::metadata::MetadataMap) -> Option<Instant> {
    let text = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    // The gRPC spec allows at most 8 digits.
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let value: u64 = digits.parse().ok()?;
    let timeout = match unit {
        "H" => std::time::Duration::from_secs(value * 3600),
        "M" => std::time::Duration::from_secs(value * 60),
        "S" => std::time::Duration::from_secs(value),
        "m" => std::time::Duration::from_millis(value),
        "u" => std::time::Duration::from_micros(value),
        "n" => std::time::Duration::from_nanos(value),
        _ => return None,
    };
    Instant::now().checked_add(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_timeout(value: &str) -> tonic::metadata::MetadataMap {
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert("grpc-timeout", value.parse().expect("ascii"));
        metadata
    }

    #[test]
    fn reads_grpc_timeouts() {
        let now = Instant::now();
        let in_2s = deadline(&with_timeout("2000m")).expect("parses");
        assert!(in_2s >= now + std::time::Duration::from_millis(1900));
        assert!(in_2s <= Instant::now() + std::time::Duration::from_millis(2000));
        assert!(deadline(&with_timeout("1H")).is_some());
        for bad in ["", "m", "12", "123456789S", "5x", "-1S"] {
            assert!(deadline(&with_timeout(bad)).is_none(), "{bad:?}");
        }
        assert!(deadline(&tonic::metadata::MetadataMap::new()).is_none());
    }

    #[tokio::test]
    async fn the_first_reason_sticks_and_the_deadline_fires() {
        let stop = Stop::never();
        assert_eq!(stop.reason(), None);
        drop(stop.on_drop());
        stop.stop(Reason::DeadlinePassed);
        assert_eq!(stop.reason(), Some(Reason::CallerLeft));
        assert_eq!(stop.stopped().await, Reason::CallerLeft);

        let soon = Stop::until(Some(Instant::now() + std::time::Duration::from_millis(20)));
        assert_eq!(soon.reason(), None);
        assert_eq!(soon.stopped().await, Reason::DeadlinePassed);
        assert_eq!(soon.reason(), Some(Reason::DeadlinePassed));
    }
}

//! The write gate of a SQLite database: the queue of this process's
//! writers, the word, passed through it, that the next write starts the
//! write-ahead log over, and the first write after a quiet spell waking
//! the checkpointer ([`WriteGate::idle`]).
//!
//! SQLite starts its log over at the first write transaction that begins
//! while every frame of the log is copied back into the database, and that
//! transaction syncs the log's new header to disk (`synchronous=NORMAL`
//! syncs nothing else on a commit). A writer that runs its statements on
//! the async runtime (the session service's append committer) hands that
//! one transaction to a pool connection, whose own thread may block on the
//! disk. The checkpointer says when the log is all copied
//! ([`WriteGate::log_copied`]); a gated checkpoint says so before it lets
//! the writers go. A writer asks after its turn has come
//! ([`WriteGate::turn`]), never before: a writer that waited at the gate
//! while such a checkpoint held it is the one whose write starts the log
//! over, and asking before the wait would tell it no.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Mutex, MutexGuard, Notify};

/// SQLite allows one writer at a time; this process's writers queue here
/// instead of spinning on `SQLITE_BUSY`.
#[derive(Debug, Default)]
pub struct WriteGate {
    gate: Mutex<()>,
    log_copied: AtomicBool,
    /// Set while the checkpointer sleeps through a quiet spell, so that the
    /// first write after it wakes the checkpointer.
    checkpointer_idle: AtomicBool,
    written: Notify,
}

/// A writer's turn at the gate: the gate stays held while this lives.
#[derive(Debug)]
pub struct Turn<'a> {
    _held: MutexGuard<'a, ()>,
    /// Whether a checkpoint copied the whole log since the last writer
    /// asked, so that this turn's first write transaction most likely
    /// starts the log over (unless a read that began earlier still uses
    /// the log; then a later checkpoint says so again).
    pub restarts_log: bool,
}

impl WriteGate {
    /// Wait for the gate, then ask whether the log was all copied, in that
    /// order (see the module's comment).
    pub async fn turn(&self) -> Turn<'_> {
        let held = self.gate.lock().await;
        self.wrote();
        let restarts_log = self.log_copied.swap(false, Ordering::Relaxed);
        Turn {
            _held: held,
            restarts_log,
        }
    }

    /// Hold the gate, for a writer that does not ask.
    pub async fn hold(&self) -> MutexGuard<'_, ()> {
        let held = self.gate.lock().await;
        self.wrote();
        held
    }

    /// Hold the gate for a checkpoint: the writers wait, and nothing is
    /// written.
    pub(crate) async fn hold_for_checkpoint(&self) -> MutexGuard<'_, ()> {
        self.gate.lock().await
    }

    /// A writer took its turn: wake the checkpointer if it sleeps through a
    /// quiet spell (one relaxed load otherwise).
    fn wrote(&self) {
        if self.checkpointer_idle.load(Ordering::Relaxed)
            && self.checkpointer_idle.swap(false, Ordering::Relaxed)
        {
            self.written.notify_one();
        }
    }

    /// The checkpointer's wait while nothing is written: `longest`, or
    /// until a writer takes its turn, whichever comes first.
    pub(crate) async fn idle(&self, longest: Duration) {
        // Set before waiting: a writer that clears it first leaves its
        // wake-up stored in `written`, and the wait below takes it at once.
        self.checkpointer_idle.store(true, Ordering::Relaxed);
        tokio::select! {
            () = tokio::time::sleep(longest) => {}
            () = self.written.notified() => {}
        }
        self.checkpointer_idle.store(false, Ordering::Relaxed);
    }

    /// Said by a checkpoint that found every frame of the log copied. A
    /// checkpoint at the gate says it while it still holds the gate.
    pub fn log_copied(&self) {
        self.log_copied.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// The committer's case: its batch waits at the gate while a checkpoint
    /// holds it and copies the whole log. When its turn comes, it must
    /// hear that its write starts the log over (asking before the wait, as
    /// the committer once did, it heard no, and synced the log's header on
    /// the runtime's thread).
    #[tokio::test]
    async fn a_writer_that_waited_out_a_checkpoint_at_the_gate_hears_of_it() {
        let gate = Arc::new(WriteGate::default());
        let checkpoint = gate.hold().await;
        let writer = tokio::spawn({
            let gate = gate.clone();
            async move { gate.turn().await.restarts_log }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!writer.is_finished(), "the writer waits at the gate");
        gate.log_copied();
        drop(checkpoint);
        assert!(
            writer.await.expect("writer"),
            "the writer heard of the copy"
        );
    }

    /// The word is for one writer: the next hears nothing until another
    /// checkpoint copies the whole log again.
    #[tokio::test]
    async fn the_word_goes_to_one_writer() {
        let gate = WriteGate::default();
        assert!(!gate.turn().await.restarts_log, "nothing said yet");
        gate.log_copied();
        assert!(gate.turn().await.restarts_log);
        assert!(!gate.turn().await.restarts_log, "already taken");
    }

    /// The first write after a quiet spell wakes the checkpointer, which
    /// would otherwise sleep out its longest wait; a checkpoint's own hold
    /// of the gate writes nothing and wakes nobody.
    #[tokio::test]
    async fn a_write_wakes_an_idle_checkpointer() {
        for writer_holds in [false, true] {
            let gate = Arc::new(WriteGate::default());
            let idle = tokio::spawn({
                let gate = gate.clone();
                async move { gate.idle(Duration::from_secs(600)).await }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(!idle.is_finished(), "nothing written yet");
            drop(gate.hold_for_checkpoint().await);
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(!idle.is_finished(), "a checkpoint is no write");
            if writer_holds {
                drop(gate.hold().await);
            } else {
                drop(gate.turn().await);
            }
            tokio::time::timeout(Duration::from_secs(10), idle)
                .await
                .expect("the write woke the checkpointer")
                .expect("idle task");
        }
    }

    /// Writes made while the checkpointer was busy leave no wake-up
    /// behind: its next quiet spell lasts, instead of ending at once.
    #[tokio::test]
    async fn writes_between_quiet_spells_do_not_cut_the_next_short() {
        let gate = WriteGate::default();
        for _ in 0..3 {
            drop(gate.turn().await);
            drop(gate.hold().await);
        }
        let started = std::time::Instant::now();
        gate.idle(Duration::from_millis(200)).await;
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "woken after {:?} with nothing written during the wait",
            started.elapsed()
        );
    }
}

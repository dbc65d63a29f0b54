//! `QuietUnix`: a unix socket whose process is not woken when its peer
//! reads, and that still waits for room when the peer reads slowly.

use ithaca_kit::quiet_unix::QuietUnix;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Context switches of the thread at `/proc/<task>/status` so far.
fn switches(task: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{task}/status")).expect("the status");
    status
        .lines()
        .filter(|l| l.contains("voluntary_ctxt_switches"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// How many times a runtime's thread, idle and waiting to read from its
/// socket, is woken when the peer reads what it wrote earlier.
fn wake_ups_when_the_peer_reads<S, F>(wrap: F) -> u64
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(tokio::net::UnixStream) -> S + Send + 'static,
{
    let (ours, mut peer) = UnixStream::pair().expect("a socket pair");
    ours.set_nonblocking(true).expect("non-blocking");
    let (tell, told) = std::sync::mpsc::channel();
    let sender = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let mut ours = wrap(tokio::net::UnixStream::from_std(ours).expect("registered"));
            ours.write_all(&[1u8; 100]).await.expect("written");
            let task = std::fs::read_link("/proc/thread-self").expect("this thread");
            tell.send(task.display().to_string()).expect("told");
            let mut done = [0u8; 4];
            ours.read_exact(&mut done).await.expect("the end");
        });
    });
    let task = told.recv().expect("the sender's thread");
    // Let the sender settle into waiting.
    std::thread::sleep(Duration::from_millis(200));
    let before = switches(&task);
    let mut read = [0u8; 100];
    peer.read_exact(&mut read).expect("the peer reads");
    std::thread::sleep(Duration::from_millis(200));
    let after = switches(&task);
    peer.write_all(b"done").expect("the end sent");
    sender.join().expect("the sender");
    after - before
}

#[test]
fn reading_what_it_wrote_does_not_wake_the_writer() {
    // The measurement sees the wake-up of a socket registered the usual way.
    assert!(
        wake_ups_when_the_peer_reads(|s| s) >= 1,
        "tokio's own socket is woken by its peer's read"
    );
    assert_eq!(
        wake_ups_when_the_peer_reads(|s| QuietUnix::new(s).expect("quiet")),
        0,
        "a quiet socket sleeps through its peer's read"
    );
}

/// Megabytes both ways at once, far past the socket's buffer, with a peer
/// that reads in small bites: every byte arrives, in order, and the end
/// after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_every_byte_and_then_the_end() {
    const SIZE: usize = 4 << 20;
    let (a, b) = tokio::net::UnixStream::pair().expect("a socket pair");
    let (a, b) = (
        QuietUnix::new(a).expect("quiet"),
        QuietUnix::new(b).expect("quiet"),
    );
    let pattern = |seed: u8| -> Vec<u8> {
        (0..SIZE)
            .map(|i| (i % 251) as u8 ^ seed)
            .collect::<Vec<u8>>()
    };
    let run = |mut me: QuietUnix, seed: u8| async move {
        let (mut rd, mut wr) = tokio::io::split(&mut me);
        let out = pattern(seed);
        let send = async {
            for chunk in out.chunks(100_000) {
                wr.write_all(chunk).await.expect("written");
            }
            wr.shutdown().await.expect("the write side shut");
        };
        let receive = async {
            let mut got = Vec::new();
            let mut bite = [0u8; 977];
            loop {
                let n = rd.read(&mut bite).await.expect("read");
                if n == 0 {
                    break got;
                }
                got.extend_from_slice(&bite[..n]);
                if got.len() % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        };
        let ((), got) = tokio::join!(send, receive);
        got
    };
    let (got_a, got_b) = tokio::join!(tokio::spawn(run(a, 0x5a)), tokio::spawn(run(b, 0xa5)));
    assert!(got_a.expect("a") == pattern(0xa5), "a got b's bytes");
    assert!(got_b.expect("b") == pattern(0x5a), "b got a's bytes");
}

/// A peer that has gone makes writes fail, not hang.
#[tokio::test]
async fn writing_to_a_peer_that_has_gone_fails() {
    let (a, b) = tokio::net::UnixStream::pair().expect("a socket pair");
    let mut a = QuietUnix::new(a).expect("quiet");
    drop(b);
    let mut failed = false;
    for _ in 0..1000 {
        if a.write_all(&[0u8; 65536]).await.is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "writes to a closed peer fail");
    let mut buf = [0u8; 8];
    assert_eq!(a.read(&mut buf).await.expect("the end"), 0);
}

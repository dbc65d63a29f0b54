//! A connection the server is done with is closed gently: the peer reads
//! every byte the server wrote, then the end, even when it had sent bytes
//! the server never read and goes on sending after the server is done. A
//! plain close with unread bytes resets the connection (TCP RST; a unix
//! socket's peer sees ECONNRESET), and the peer's writes then fail before
//! it has read the answers, which is how a graceful shutdown once turned
//! answered appends into appends in doubt.

use futures::StreamExt;
use ithaca_kit::server::{Conn, LINGER, Listener, UnixSocket};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::task::TaskTracker;

/// What the peer sends that the server never reads, before and after the
/// server is done.
const UNREAD: usize = 16 * 1024;

/// The server's side of one connection `connect` makes to `listener`, the
/// peer's side, and the tracker of the server side's lingering close.
async fn accept_one<C, F>(listener: Listener, connect: F) -> (Conn, C, TaskTracker)
where
    F: std::future::Future<Output = std::io::Result<C>>,
{
    let lingering = TaskTracker::new();
    let mut incoming = Box::pin(listener.incoming(lingering.clone()));
    let (accepted, peer) = tokio::join!(incoming.next(), connect);
    let conn = accepted.expect("a connection").expect("accepted");
    (conn, peer.expect("connected"), lingering)
}

/// A listener on a loopback port, and its address.
async fn loopback() -> (Listener, std::net::SocketAddr) {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = tcp.local_addr().expect("an address");
    (Listener::from(tcp), address)
}

/// Accept one connection on `listener` while `connect` makes it, then play
/// the story: the peer sends, the server answers without reading and is
/// done, the peer sends more, then reads the answer and the end.
async fn the_peer_reads_the_answer_after_the_server_is_done<C, F>(listener: Listener, connect: F)
where
    C: AsyncRead + AsyncWrite + Unpin,
    F: std::future::Future<Output = std::io::Result<C>>,
{
    let (mut conn, mut peer, lingering) = accept_one(listener, connect).await;

    peer.write_all(&[7u8; UNREAD])
        .await
        .expect("the peer sends");
    conn.write_all(b"the answer")
        .await
        .expect("the server answers");
    // What hyper does when a connection is finished: shut the write side,
    // then let the connection go.
    conn.shutdown().await.expect("the write side shut");
    drop(conn);
    // Time for a reset, were there one, to reach the peer.
    tokio::time::sleep(Duration::from_millis(100)).await;

    peer.write_all(&[8u8; UNREAD])
        .await
        .expect("the peer's writes still land after the server is done");
    let mut read = Vec::new();
    peer.read_to_end(&mut read)
        .await
        .expect("the peer reads the answer and then the end, not a reset");
    assert_eq!(read, b"the answer");

    // The peer closes; the lingering close ends with it, not at LINGER.
    drop(peer);
    lingering.close();
    let started = Instant::now();
    lingering.wait().await;
    assert!(
        started.elapsed() < LINGER,
        "the close lingered past its peer's end: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_tcp_peer_reads_the_answer_after_the_server_is_done() {
    let (listener, address) = loopback().await;
    the_peer_reads_the_answer_after_the_server_is_done(
        listener,
        tokio::net::TcpStream::connect(address),
    )
    .await;
}

#[tokio::test]
async fn a_unix_socket_peer_reads_the_answer_after_the_server_is_done() {
    let path = std::env::temp_dir().join(format!("ithaca-kit-linger-{}.sock", std::process::id()));
    let socket = UnixSocket::bind(&path).await.expect("the socket");
    the_peer_reads_the_answer_after_the_server_is_done(
        Listener::unix(socket),
        tokio::net::UnixStream::connect(&path),
    )
    .await;
    assert!(!path.exists(), "the socket's file goes with its listener");
}

/// A peer that never closes is let go after LINGER: a server's shutdown
/// waits for its lingering closes, and must not wait forever.
#[tokio::test]
async fn a_peer_that_never_closes_is_let_go_after_the_linger() {
    let (listener, address) = loopback().await;
    let (conn, mut peer, lingering) =
        accept_one(listener, tokio::net::TcpStream::connect(address)).await;
    drop(conn);
    lingering.close();
    lingering.wait().await;
    // The server's side is gone: the silent peer reads the end.
    let mut read = Vec::new();
    peer.read_to_end(&mut read).await.expect("the end");
    assert!(read.is_empty());
}

//! A server listens on its TCP port and on a unix socket beside it; a
//! `unix:<path>` URL reaches it over the socket. The socket's file is
//! claimed only from a server that is gone, and removed when the server
//! stops.

use ithaca_kit::server::{Listener, ServeOptions, UnixSocket, serve};
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// A fresh folder of this test's own, removed at the end.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ithaca-kit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test folder");
        Folder(dir)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The health service's answer through `url`: the server's own status, so
/// an answer proves the call reached this server.
async fn health(url: &str) -> Result<ServingStatus, tonic::Status> {
    let channel = ithaca_kit::client::channel(url).expect("a usable url");
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await?;
    Ok(answer.into_inner().status())
}

/// Serve only the standard services on `listener` until `shutdown`.
fn start(listener: Listener, shutdown: &CancellationToken) -> tokio::task::JoinHandle<()> {
    let token = shutdown.clone();
    tokio::spawn(async move {
        serve(
            listener,
            ServeOptions::new(vec![], Routes::default()),
            token,
        )
        .await
        .expect("the server runs");
    })
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[tokio::test]
async fn one_server_answers_on_its_port_and_on_its_socket_and_removes_the_socket_when_it_stops() {
    let folder = Folder::new("both");
    let path = folder.0.join("svc.sock");
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let tcp_url = format!("http://{}", tcp.local_addr().expect("addr"));
    let socket = UnixSocket::bind(&path).await.expect("bind the socket");
    let unix_url = socket.url();
    assert_eq!(unix_url, format!("unix:{}", path.display()));
    let shutdown = CancellationToken::new();
    let server = start(Listener::from(tcp).with_unix(socket), &shutdown);

    assert_eq!(
        health(&tcp_url).await.expect("over TCP"),
        ServingStatus::Serving
    );
    assert_eq!(
        health(&unix_url).await.expect("over the socket"),
        ServingStatus::Serving
    );
    // `unix://` with an absolute path names the same socket.
    let slashes = format!("unix://{}", path.display());
    assert_eq!(
        health(&slashes).await.expect("unix://"),
        ServingStatus::Serving
    );

    shutdown.cancel();
    server.await.expect("join");
    assert!(!path.exists(), "the socket's file outlived its server");
    // A call to a socket nobody serves fails as unavailable, promptly.
    let gone = health(&unix_url).await.expect_err("no server");
    assert_eq!(gone.code(), tonic::Code::Unavailable, "{gone:?}");
}

#[tokio::test]
async fn a_socket_left_by_a_stopped_server_is_claimed_but_a_live_one_or_another_file_is_not() {
    let folder = Folder::new("claim");
    let path = folder.0.join("svc.sock");

    // A stopped server's file: bound, then the listener dropped without
    // removing it (as after a crash).
    let left = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    drop(left);
    assert!(is_socket(&path), "the crash left its file");
    let socket = UnixSocket::bind(&path)
        .await
        .expect("a dead socket is claimed");
    let shutdown = CancellationToken::new();
    let server = start(Listener::unix(socket), &shutdown);
    let url = format!("unix:{}", path.display());
    assert_eq!(health(&url).await.expect("served"), ServingStatus::Serving);

    // While it serves, a second server may not take its socket, and the
    // first keeps answering.
    let taken = UnixSocket::bind(&path)
        .await
        .expect_err("the socket is live");
    assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
    assert!(
        taken.to_string().contains("another server listens"),
        "{taken}"
    );
    assert!(
        taken.to_string().contains(&path.display().to_string()),
        "{taken}"
    );
    assert_eq!(
        health(&url).await.expect("still served"),
        ServingStatus::Serving
    );
    shutdown.cancel();
    server.await.expect("join");

    // A file that is not a socket is never removed.
    let plain = folder.0.join("notes.txt");
    std::fs::write(&plain, "keep me").expect("write");
    let refused = UnixSocket::bind(&plain).await.expect_err("not a socket");
    assert!(refused.to_string().contains("is not a socket"), "{refused}");
    assert_eq!(std::fs::read_to_string(&plain).expect("kept"), "keep me");
}

#[test]
fn a_unix_url_without_a_path_is_refused_by_name() {
    for url in ["unix:", "unix://"] {
        let err = ithaca_kit::client::channel(url).expect_err("no path");
        let text = err.to_string();
        assert!(text.contains(&format!("{url:?}")), "{text}");
        assert!(text.contains("no socket path"), "{text}");
    }
}

//! The probe backend: `bench_ping`, a read tool that does no I/O, served
//! with gRPC reflection (so the edge learns it as it learns any backend),
//! the health service, and the principal check every real service makes.

use ithaca_kit::principal::{self, InternalKey, Verifier};
use ithaca_kit::server::{Listener, UnixSocket};
use std::net::SocketAddr;
use std::path::PathBuf;
use tonic::{Request, Response, Status};

pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/ithaca.bench.v1.rs"));
}

use pb::bench_probe_server::{BenchProbe, BenchProbeServer};

const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/bench_descriptor.bin"));

/// The service's fully qualified name.
pub const SERVICE: &str = "ithaca.bench.v1.BenchProbe";

struct Probe;

#[tonic::async_trait]
impl BenchProbe for Probe {
    async fn ping(
        &self,
        request: Request<pb::PingRequest>,
    ) -> Result<Response<pb::PingReply>, Status> {
        principal::of(&request)?;
        Ok(Response::new(pb::PingReply {
            ok: true,
            note: request.into_inner().note.unwrap_or_default(),
        }))
    }
}

/// The internal key shared with the `ithaca` processes.
pub fn internal_key() -> anyhow::Result<InternalKey> {
    let hex = std::env::var("ITHACA_INTERNAL_KEY")
        .map_err(|_| anyhow::anyhow!("ITHACA_INTERNAL_KEY is not set"))?;
    InternalKey::new(hex.trim().as_bytes().to_vec())
        .map_err(|_| anyhow::anyhow!("ITHACA_INTERNAL_KEY is shorter than 32 bytes"))
}

/// Serve until SIGTERM or ctrl-c, on `listen` and on `unix_socket` when
/// given (one line each: `ithaca-bench backend listening on <where>`).
pub async fn serve(listen: SocketAddr, unix_socket: Option<PathBuf>) -> anyhow::Result<()> {
    let key = internal_key()?;
    let tcp = tokio::net::TcpListener::bind(listen).await?;
    println!("ithaca-bench backend listening on {}", tcp.local_addr()?);
    let mut listener = Listener::from(tcp);
    if let Some(path) = unix_socket {
        let socket = UnixSocket::bind(&path).await?;
        println!("ithaca-bench backend listening on {}", socket.url());
        listener = listener.with_unix(socket);
    }
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTORS)
        .with_service_name(SERVICE)
        .build_v1()?;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<BenchProbeServer<Probe>>().await;
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection)
        .add_service(BenchProbeServer::with_interceptor(
            Probe,
            Verifier::new(key),
        ))
        .serve_with_incoming_shutdown(
            listener.incoming(Default::default()),
            crate::procs::terminated(),
        )
        .await?;
    Ok(())
}

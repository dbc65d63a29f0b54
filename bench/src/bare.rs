//! The bare limit: a plain axum handler that reads the request body and
//! returns a fixed JSON-RPC response (the edge's own answer to the same
//! call, captured by the benchmark), with none of the edge's work.

use axum::Router;
use axum::http::header;
use axum::routing::post;
use bytes::Bytes;
use std::net::SocketAddr;
use std::path::PathBuf;

pub async fn serve(listen: SocketAddr, body_file: PathBuf) -> anyhow::Result<()> {
    let body = Bytes::from(std::fs::read(&body_file)?);
    let app = Router::new().route(
        "/mcp",
        post(move |_request: Bytes| {
            let body = body.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("ithaca-bench bare listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(crate::procs::terminated())
        .await?;
    Ok(())
}

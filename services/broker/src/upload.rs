//! One file sent to the broker as a stream of chunks (`ithaca ingest`):
//! what its first chunk names (the source file, a broker) and its bytes.

use ithaca_kit::error::ServiceError;
use tonic::{Status, Streaming};

/// Read `stream` to its end. `split` parts a chunk into what it names and
/// its bytes; the names are the first chunk's, the bytes all of them, at
/// most `limit` (a longer file is refused as soon as it passes the limit,
/// naming the source when the first chunk gave one). An empty stream is an
/// empty file with default names, for the service to refuse in its words.
pub async fn read_file<C, H: Default>(
    mut stream: Streaming<C>,
    limit: usize,
    source_of: impl Fn(&H) -> &str,
    split: impl Fn(C) -> (H, Vec<u8>),
) -> Result<(H, Vec<u8>), Status> {
    let mut head = None;
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await? {
        let (names, bytes) = split(chunk);
        let names = head.get_or_insert(names);
        if data.len() + bytes.len() > limit {
            let source = source_of(names);
            let prefix = if source.is_empty() {
                String::new()
            } else {
                format!("{source}: ")
            };
            return Err(ServiceError::invalid(format!(
                "{prefix}data: a file may hold at most {limit} bytes"
            ))
            .into());
        }
        data.extend_from_slice(&bytes);
    }
    Ok((head.unwrap_or_default(), data))
}

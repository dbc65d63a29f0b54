//! Progress of an ingest, for the RPCs that stream it (the streaming
//! mapping's `progress` events, `ithaca/mcp/v1/stream.proto`).

/// Where an ingest's progress goes: packets done of total. A report the
/// follower is too slow for is dropped, never waited for: progress is a
/// hint, never a reason to slow the ingest.
pub type Progress = tokio::sync::mpsc::Sender<(u64, u64)>;

/// Report `done` of `total` packets, if someone follows.
pub fn report(progress: Option<&Progress>, done: u64, total: u64) {
    if let Some(progress) = progress {
        let _ = progress.try_send((done, total));
    }
}

/// Packets done of total as a stream event.
pub fn event(step: (u64, u64)) -> ithaca_proto::mcp::v1::CallEvent {
    event_of(step, "packets")
}

/// Done of total as a stream event, its message naming what is counted
/// (`sources` for a catalog, whose rows are stars and galaxies, not packets).
pub fn event_of((done, total): (u64, u64), unit: &str) -> ithaca_proto::mcp::v1::CallEvent {
    use ithaca_proto::mcp::v1 as mcp;
    mcp::CallEvent {
        event: Some(mcp::call_event::Event::Progress(mcp::Progress {
            progress: done as f64,
            total: Some(total as f64),
            message: format!("{done} of {total} {unit}"),
        })),
    }
}

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

/// What an ingest with progress streams (`stream.proto`'s events).
pub type Events = std::pin::Pin<
    Box<
        dyn tokio_stream::Stream<Item = Result<ithaca_proto::mcp::v1::CallEvent, tonic::Status>>
            + Send
            + 'static,
    >,
>;

/// Run an ingest on a task of its own and stream what it reports: its
/// progress (done of total `unit`), then its answer (`reply` of the
/// outcome) as the terminal `reply` event, or its error as the stream's
/// status. The ingest runs to its end (one transaction) even if the caller
/// goes away.
pub fn streamed<T, M, F, Fut>(unit: &'static str, ingest: F, reply: fn(T) -> M) -> Events
where
    F: FnOnce(Progress) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, ithaca_kit::error::ServiceError>> + Send,
    T: Send + 'static,
    M: prost::Message + 'static,
{
    use ithaca_proto::mcp::v1 as mcp;
    let (events, received) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let (progress, mut steps) = tokio::sync::mpsc::channel::<(u64, u64)>(64);
        let ingesting = ingest(progress);
        tokio::pin!(ingesting);
        let outcome = loop {
            tokio::select! {
                biased;
                Some(step) = steps.recv() => {
                    let _ = events.send(Ok(event_of(step, unit))).await;
                }
                outcome = &mut ingesting => break outcome,
            }
        };
        while let Ok(step) = steps.try_recv() {
            let _ = events.send(Ok(event_of(step, unit))).await;
        }
        let last = match outcome {
            Ok(answer) => Ok(mcp::CallEvent {
                event: Some(mcp::call_event::Event::Reply(reply(answer).encode_to_vec())),
            }),
            Err(err) => Err(tonic::Status::from(err)),
        };
        let _ = events.send(last).await;
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(received))
}

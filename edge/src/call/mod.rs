//! The tool pipeline: one stage a file, in the order a call runs them.
//!
//! 1. [`lookup`]: the tool exists and the caller may use it (an
//!    [`lookup::Offered`] tool, which only that stage builds);
//! 2. [`gate`]: `BeginCall`, the session gate, the subject check and the
//!    durable `tool_call`, in one round trip;
//! 3. [`invoke`]: the call (unary, or a streaming RPC's rounds), or
//!    [`approval`]: the generic approval gate;
//! 4. [`record`]: the durable `tool_result`, and the `error` or `denial`
//!    of a failure;
//! 5. [`render`]: the answer.
//!
//! [`failure`] is how a tool fails, for every stage.

pub mod approval;
pub mod failure;
pub mod gate;
pub mod invoke;
pub mod lookup;
pub mod record;
pub mod render;

use crate::core::{Answer, Core, RpcError};
use crate::stream::CallIo;
use crate::transcode;
use ithaca_kit::principal::Principal;
use serde_json::Value;
use std::time::Instant;

impl Core {
    /// Run one tool call: its `CallToolResult` JSON, or the input a
    /// 2026-07-28 client must give first. `io` is how the call reaches its
    /// client while it runs (progress, logs, input requests).
    ///
    /// The guarantees: the `tool_call` is durable before the tool runs
    /// (stage 2 precedes stage 3), and the `tool_result` before the caller
    /// is answered (stage 4 precedes stage 5); no tool but
    /// `session_context` passes stage 2 without an open session.
    pub async fn call_tool(
        &self,
        caller: &Principal,
        pin: Option<&str>,
        name: &str,
        arguments: Option<Value>,
        io: &CallIo<'_>,
    ) -> Result<Answer, RpcError> {
        // 1. Lookup. A tool the caller may not use looks exactly like a
        //    missing one; a retry's sealed state is opened before anything
        //    runs.
        let offered = self.lookup(caller, name)?;
        let tool = offered.tool();
        let round = self.open_round(tool, caller, io)?;
        let started = Instant::now();
        // Borrowed by every stage: validated, transcoded and recorded from
        // the one tree the request was parsed into.
        let traced = transcode::traceable(arguments.as_ref());
        // 2. Gate, with the durable `tool_call`.
        let admitted = match self.admit(offered, caller, pin, &traced).await {
            Ok(admitted) => admitted,
            Err(answered) => return answered,
        };
        // 3. Invoke.
        let ran = self
            .run(
                tool,
                &admitted.principal,
                arguments.as_ref(),
                &traced,
                io,
                round,
            )
            .await;
        let outcome = ran.outcome();
        // 4. Record, before anyone hears how it went.
        let recorded = self
            .record(tool, &admitted, &traced, &outcome.recorded, started)
            .await;
        // 5. Render.
        render::answer(outcome.recorded, outcome.reply, recorded, admitted.notice)
    }
}

#[cfg(test)]
mod tests {
    use crate::catalog::Catalog;
    use crate::core::Core;
    use crate::stream::{CallIo, ClientCaps, Retry, Silent};
    use ithaca_kit::principal::{InternalKey, Principal};
    use std::collections::HashMap;
    use tokio_util::sync::CancellationToken;

    /// The largest a tool call's future may be in a test build. A future is
    /// as large as the largest it may await, and is copied whole as it is
    /// created and moved, so the paths few calls take are boxed where they
    /// are awaited (`invoke::run`). With them inline this future measured
    /// 9,688 bytes; boxed, 4,512 (the test profile and release alike).
    const CALL_FUTURE_AT_MOST: usize = 6 * 1024;

    #[test]
    fn a_calls_future_stays_small() {
        let catalog = Catalog::from_pool(ithaca_proto::annotations::pool()).expect("catalog");
        let key = InternalKey::new(vec![7u8; 32]).expect("a long enough key");
        let core = Core::new(catalog, HashMap::new(), key);
        let caller = Principal::local_agent("tenant-a", "agent-a", ["research:read"]);
        let io = CallIo {
            sink: &Silent,
            client: ClientCaps::assumed(),
            asks_inline: false,
            retry: Retry::default(),
            cancelled: CancellationToken::new(),
        };
        let call = core.call_tool(&caller, None, "session_context", None, &io);
        let size = std::mem::size_of_val(&call);
        println!("a tool call's future: {size} bytes");
        assert!(
            size <= CALL_FUTURE_AT_MOST,
            "a tool call's future is {size} bytes, over {CALL_FUTURE_AT_MOST}: box the rare path that grew it"
        );
    }
}

//! Prompts: `prompts/get`, unary or as a streaming RPC's input rounds.

use crate::call::render;
use crate::core::{Answer, Core, RpcError};
use crate::stream::{self, CallIo, Rounds, Streamed, Terminal};
use crate::transcode;
use ithaca_kit::principal::Principal;
use ithaca_proto::mcp::v1 as mcp;
use serde_json::{Value, json};

impl Core {
    /// Get a prompt: the `GetPromptResult` JSON, or (a streaming prompt)
    /// the input a 2026-07-28 client must give first.
    pub async fn get_prompt(
        &self,
        caller: &Principal,
        name: &str,
        arguments: Option<Value>,
        io: &CallIo<'_>,
    ) -> Result<Answer, RpcError> {
        let Some(prompt) = self.catalog.prompt(name) else {
            return Err(RpcError::invalid_params(
                format!("unknown prompt: {name}"),
                Some(json!({"prompt": name})),
            ));
        };
        let request = transcode::to_message(&prompt.method.input(), arguments.as_ref())
            .map_err(|e| RpcError::invalid_params(e.message, None))?;
        let backend = self
            .backend(&prompt.method)
            .map_err(|s| RpcError::internal(&s))?;
        let reply: mcp::PromptReply = if prompt.streaming {
            let target = format!("prompt:{name}");
            let round = stream::open_retry(&self.sealer, caller, &target, &io.retry)
                .map_err(|e| RpcError::invalid_params(e, Some(json!({"prompt": name}))))?;
            let rounds = Rounds {
                backend,
                method: &prompt.method,
                target: &target,
                principal: caller,
                key: &self.key,
                sealer: &self.sealer,
                deadline: None,
                io,
            };
            match rounds.run(request, round).await {
                Streamed::Done(Ok(Terminal::Prompt(reply))) => reply,
                Streamed::Done(Ok(_)) => {
                    return Err(RpcError {
                        code: RpcError::INTERNAL,
                        message: "the service answered a prompt with a tool result".to_owned(),
                        data: None,
                    });
                }
                Streamed::Done(Err(status)) => return Err(RpcError::internal(&status)),
                Streamed::Input(input) => return Ok(Answer::InputRequired(input)),
                Streamed::MissingCapability(capability) => {
                    return Err(RpcError::missing_capability(capability));
                }
            }
        } else {
            let response = backend
                .unary(&prompt.method, request, caller, &self.key)
                .await
                .map_err(|s| RpcError::internal(&s))?;
            response.transcode_to().map_err(|e| RpcError {
                code: RpcError::INTERNAL,
                message: format!("prompt reply: {e}"),
                data: None,
            })?
        };
        let messages: Vec<Value> = reply
            .messages
            .into_iter()
            .map(|m| {
                let content = m
                    .content
                    .map(render::content_block)
                    .unwrap_or(json!({"type": "text", "text": ""}));
                json!({"role": m.role, "content": content})
            })
            .collect();
        let mut result = json!({"messages": messages});
        if !reply.description.is_empty() {
            result["description"] = json!(reply.description);
        }
        Ok(Answer::Complete(result))
    }
}

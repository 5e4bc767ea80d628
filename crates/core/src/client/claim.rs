//! Fetching a result that came as a claim (it was larger than one message on the bus): chunk
//! by chunk from the `result` verb of the module instance that keeps it, bounded, and checked against the claim's digest
//! before it is read as the call's result.

use std::time::{Duration, Instant};

use async_nats::Message;

use super::{CallError, Client};
use crate::subjects::claim::{
    self, CLAIM_META, Claim, Fetch, HEADER_CLAIM, HEADER_SEQ, MAX_FETCHED,
};
use crate::subjects::{FullName, HEADER_SERVICE_ERROR_CODE, ToolResult};

/// Whether an answer is a claim rather than the result.
pub(super) fn is_claim(msg: &Message) -> bool {
    msg.headers
        .as_ref()
        .is_some_and(|h| h.get(HEADER_CLAIM).is_some())
}

impl Client {
    /// The result a claim stands for, fetched from `tool`'s module within what is left of
    /// `deadline` since `started`.
    pub(super) async fn fetch_claimed(
        &self,
        tool: &FullName,
        answer: &ToolResult,
        started: Instant,
        deadline: Duration,
    ) -> Result<ToolResult, CallError> {
        let bad = |why: String| CallError::BadReply {
            target: tool.to_string(),
            why,
        };
        let claim: Claim = answer
            .extra
            .get("_meta")
            .and_then(|m| m.get(CLAIM_META))
            .cloned()
            .ok_or_else(|| bad("a claim without its _meta".into()))
            .and_then(|c| {
                serde_json::from_value(c).map_err(|e| bad(format!("not a claim: {e}")))
            })?;
        if claim.size > MAX_FETCHED {
            return Err(bad(format!(
                "its result is {} bytes, more than this client takes ({MAX_FETCHED} bytes)",
                claim.size
            )));
        }
        // A module writes chunks of at least MIN_CHUNK bytes: more chunks than that allows
        // would only make this client ask and ask.
        if claim.chunks > claim.size.div_ceil(claim::MIN_CHUNK).max(1) {
            return Err(bad("a claim of more chunks than its size allows".into()));
        }
        // The instance that keeps it names a token of the module's own verb, nothing else.
        if !claim::is_instance(&claim.instance) {
            return Err(bad("a claim naming no instance to fetch from".into()));
        }
        let subject = claim::result_subject(tool.module(), &claim.instance);
        // Grown as chunks come, not sized by what the claim says.
        let mut body = Vec::new();
        let mut after = 0;
        for chunk in 0..claim.chunks {
            let fetch = Fetch {
                id: claim.id.clone(),
                chunk,
                after,
            };
            let left = deadline.saturating_sub(started.elapsed());
            let msg = self
                .request_with(
                    tool,
                    &subject,
                    serde_json::to_vec(&fetch).expect("a fetch serialises"),
                    left,
                    None,
                    None,
                    false,
                )
                .await?;
            let headers = msg.headers.as_ref();
            if let Some(code) = headers.and_then(|h| h.get(HEADER_SERVICE_ERROR_CODE)) {
                let said: Option<ToolResult> = serde_json::from_slice(&msg.payload).ok();
                return Err(bad(format!(
                    "its result could not be fetched ({code}): {}",
                    said.map(|r| r.text_content()).unwrap_or_default()
                )));
            }
            after = headers
                .and_then(|h| h.get(HEADER_SEQ))
                .and_then(|v| v.as_str().parse().ok())
                .ok_or_else(|| bad("a chunk without its place".into()))?;
            if body.len() + msg.payload.len() > claim.size {
                return Err(bad("more bytes than the claim said".into()));
            }
            body.extend_from_slice(&msg.payload);
        }
        if body.len() != claim.size || claim::digest(&body) != claim.digest {
            return Err(bad(
                "the fetched result does not match its claim's digest".into()
            ));
        }
        serde_json::from_slice(&body).map_err(|e| bad(format!("not a CallToolResult: {e}")))
    }
}

//! A module's large results: kept in this instance's memory when the answer would not fit in
//! one message on the bus, and given back a chunk at a time on this instance's `result` verb
//! to the caller they belong to (the identity nats-server stamped on the call, and on the
//! fetch). Bounded per caller and in all; forgotten when fetched whole or after ten minutes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_nats::{HeaderMap, Message};
use bytes::Bytes;

use super::serve::header_safe;
use crate::actor::{Caller, IdentityError, Layout};
use crate::subjects::claim::{self, Claim, Fetch, HEADER_SEQ, KEPT_SECS};
use crate::subjects::{HEADER_SERVICE_ERROR, HEADER_SERVICE_ERROR_CODE, ToolResult};

/// The owner of a claim: who nats-server says made the call (a module acting for a person
/// fetches what it asked for itself, so the claim is the module's).
pub(crate) fn owner(caller: &Caller) -> String {
    match caller {
        Caller::Person(a) => match &a.via {
            Some(m) => Caller::Module(m.clone()).id().unwrap_or_default(),
            None => a.to_string(),
        },
        other => other.id().unwrap_or_default(),
    }
}

/// One result waiting to be fetched.
struct Kept {
    owner: String,
    since: Instant,
    body: Bytes,
    chunk: usize,
}

impl Kept {
    fn chunks(&self) -> usize {
        self.body.len().div_ceil(self.chunk).max(1)
    }
}

/// The results this instance keeps, by claim id.
pub(crate) struct Claims {
    /// This instance's id: the claims it makes name it, and fetches come to it alone.
    instance: String,
    kept: Mutex<HashMap<String, Kept>>,
}

impl Claims {
    pub fn new(instance: String) -> Claims {
        Claims {
            instance,
            kept: Mutex::new(HashMap::new()),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let within = Duration::from_secs(KEPT_SECS);
        kept.retain(|_, k| k.since.elapsed() < within);
        kept
    }

    /// Whether no result waits to be fetched (those kept past their time count no more).
    pub fn is_empty(&self) -> bool {
        self.kept().is_empty()
    }

    /// Keeps `body` for `owner`, in chunks that each fit in one message of at most `chunk`,
    /// within the owner's quota ([`claim::MAX_KEPT_PER_OWNER`]) and the instance's bound
    /// ([`claim::MAX_KEPT_BYTES`]), or says why not.
    pub fn put(&self, owner: &str, body: Bytes, chunk: usize) -> Result<Claim, String> {
        let size = body.len();
        let mut kept = self.kept();
        let held: usize = kept
            .values()
            .filter(|k| k.owner == owner)
            .map(|k| k.body.len())
            .sum();
        if held + size > claim::MAX_KEPT_PER_OWNER {
            return Err(format!(
                "{held} bytes of this caller's large results wait to be fetched, and this one is {size} more than their quota of {} bytes",
                claim::MAX_KEPT_PER_OWNER
            ));
        }
        let all: usize = kept.values().map(|k| k.body.len()).sum();
        if all + size > claim::MAX_KEPT_BYTES {
            return Err(format!(
                "this instance keeps {all} bytes of large results waiting to be fetched, and this one is {size} more than it keeps ({} bytes)",
                claim::MAX_KEPT_BYTES
            ));
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let k = Kept {
            owner: owner.to_owned(),
            since: Instant::now(),
            body,
            chunk: chunk.max(claim::MIN_CHUNK),
        };
        let made = Claim {
            id: id.clone(),
            size,
            chunks: k.chunks(),
            digest: claim::digest(&k.body),
            instance: self.instance.clone(),
        };
        kept.insert(id, k);
        Ok(made)
    }

    /// Answers one fetch from `caller` (as the serving loop identified it): the chunk asked
    /// for, to the caller the claim belongs to.
    pub async fn answer(
        &self,
        client: &async_nats::Client,
        layout: Layout,
        msg: &Message,
        caller: Result<Caller, IdentityError>,
    ) {
        let Some(reply) = msg.reply.clone() else {
            return;
        };
        let (headers, body) = match self.chunk(layout, msg, caller) {
            Ok((place, payload)) => {
                let mut h = HeaderMap::new();
                h.insert(HEADER_SEQ, place.to_string().as_str());
                (h, payload)
            }
            Err((code, why)) => {
                let mut h = HeaderMap::new();
                // One line: the id in the text is the caller's, and may hold anything.
                h.insert(HEADER_SERVICE_ERROR, header_safe(&why).as_str());
                h.insert(HEADER_SERVICE_ERROR_CODE, code.to_string().as_str());
                let body = serde_json::to_vec(&ToolResult::error(why)).expect("serialises");
                (h, body.into())
            }
        };
        if let Err(e) = client.publish_with_headers(reply, headers, body).await {
            tracing::warn!("a fetch's answer was not sent: {e}");
        }
    }

    /// The chunk a fetch asks for and its place; the last one read forgets the result.
    fn chunk(
        &self,
        layout: Layout,
        msg: &Message,
        caller: Result<Caller, IdentityError>,
    ) -> Result<(usize, Bytes), (usize, String)> {
        let caller = caller.map_err(|e| (403, e.to_string()))?;
        if msg.payload.len() > 1024 {
            return Err((400, "a fetch is {\"id\", \"chunk\", \"after\"}".into()));
        }
        let fetch: Fetch = serde_json::from_slice(&msg.payload).map_err(|e| {
            (
                400,
                format!("not a fetch ({e}): send {{\"id\", \"chunk\", \"after\"}}"),
            )
        })?;
        let gone = || {
            (
                404,
                format!(
                    "no result {} here: fetched whole already, kept no longer ({KEPT_SECS} s), or never made",
                    fetch.id
                ),
            )
        };
        let mut kept = self.kept();
        let k = kept.get(&fetch.id).ok_or_else(gone)?;
        // In local mode nobody is named: the id, never shown to another, is the key.
        if layout == Layout::Accounts && k.owner != owner(&caller) {
            return Err(gone());
        }
        let chunks = k.chunks();
        if fetch.chunk >= chunks {
            return Err(gone());
        }
        let from = fetch.chunk * k.chunk;
        let to = (from + k.chunk).min(k.body.len());
        let payload = k.body.slice(from..to);
        if fetch.chunk + 1 == chunks {
            // Read whole: nobody needs it again.
            kept.remove(&fetch.id);
        }
        Ok((fetch.chunk + 1, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_cut_into_chunks_and_bounded_per_owner() {
        let claims = Claims::new("abc".into());
        let body = Bytes::from(vec![7u8; 2500]);
        let c = claims.put("ann@PEOPLE", body.clone(), 1024).unwrap();
        assert_eq!((c.size, c.chunks, c.instance.as_str()), (2500, 3, "abc"));
        assert_eq!(c.digest, claim::digest(&body));
        let big = Bytes::from(vec![0u8; claim::MAX_KEPT_PER_OWNER]);
        let refused = claims.put("ann@PEOPLE", big.clone(), 1024).unwrap_err();
        assert!(refused.contains("quota"), "{refused}");
        // Another caller's share is theirs.
        claims.put("bob@PEOPLE", big, 1024).unwrap();
    }
}

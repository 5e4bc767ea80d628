//! A module's large results: kept in its account's object store bucket when the answer would
//! not fit in one message on the bus, and given back a chunk at a time on its `result` verb to
//! the caller they belong to (the identity nats-server stamped on the call, and on the fetch).

use std::time::Duration;

use async_nats::jetstream::{self, object_store, stream};
use async_nats::{HeaderMap, Message};
use tokio::sync::OnceCell;

use super::serve::header_safe;
use crate::actor::{Caller, IdentityError, Layout};
use crate::subjects::claim::{self, BUCKET, Claim, Fetch, HEADER_SEQ, KEPT_SECS};
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

/// The bucket, made when first needed.
pub(crate) struct Claims {
    js: jetstream::Context,
    bucket: OnceCell<(object_store::ObjectStore, stream::Stream)>,
    /// The results kept on this instance and not yet fetched whole, by id: whose, since when,
    /// how large. One caller who never fetches fills their own quota, not the bucket
    /// everyone's results share.
    kept: std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant, usize)>>,
}

impl Claims {
    pub fn new(client: async_nats::Client) -> Claims {
        Claims {
            js: jetstream::new(client),
            bucket: OnceCell::new(),
            kept: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    async fn bucket(&self) -> Result<&(object_store::ObjectStore, stream::Stream), String> {
        self.bucket
            .get_or_try_init(|| async {
                let store = match self.js.get_object_store(BUCKET).await {
                    Ok(s) => s,
                    Err(_) => self
                        .js
                        .create_object_store(object_store::Config {
                            bucket: BUCKET.to_owned(),
                            description: Some(
                                "results too large for one message, until fetched".into(),
                            ),
                            max_age: Duration::from_secs(KEPT_SECS),
                            // Half the account's bound: whatever fills it, the account keeps
                            // room for the rest of its JetStream.
                            max_bytes: claim::MAX_KEPT_BYTES,
                            storage: stream::StorageType::File,
                            ..Default::default()
                        })
                        .await
                        .map_err(|e| format!("cannot make the object store {BUCKET}: {e}"))?,
                };
                let stream = self
                    .js
                    .get_stream(format!("OBJ_{BUCKET}"))
                    .await
                    .map_err(|e| format!("cannot open the object store's stream: {e}"))?;
                Ok((store, stream))
            })
            .await
    }

    /// Keeps `body` for `owner`, in chunks that each fit in one message of at most `chunk`.
    pub async fn put(&self, owner: &str, body: &[u8], chunk: usize) -> Result<Claim, String> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        self.within_quota(&id, owner, body.len())?;
        let kept = self.keep(&id, owner, body, chunk).await;
        if kept.is_err() {
            self.forget(&id);
        }
        kept
    }

    async fn keep(
        &self,
        id: &str,
        owner: &str,
        body: &[u8],
        chunk: usize,
    ) -> Result<Claim, String> {
        let (store, _) = self.bucket().await?;
        let meta = object_store::ObjectMetadata {
            name: id.to_owned(),
            chunk_size: Some(chunk.max(claim::MIN_CHUNK)),
            metadata: [("owner".to_owned(), owner.to_owned())].into(),
            ..Default::default()
        };
        let info = store
            .put(meta, &mut &body[..])
            .await
            .map_err(|e| format!("cannot keep the result in {BUCKET}: {e}"))?;
        Ok(Claim {
            id: id.to_owned(),
            size: info.size,
            chunks: info.chunks,
            digest: info.digest.unwrap_or_else(|| claim::digest(body)),
        })
    }

    /// Counts `size` bytes (claim `id`) against `owner`'s quota of results kept and not yet
    /// fetched whole (at most [`claim::MAX_KEPT_PER_OWNER`]; those older than the bucket
    /// keeps them no longer count), or says why not.
    fn within_quota(&self, id: &str, owner: &str, size: usize) -> Result<(), String> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let within = Duration::from_secs(KEPT_SECS);
        kept.retain(|_, (_, at, _)| at.elapsed() < within);
        let held: usize = kept
            .values()
            .filter(|(o, _, _)| o == owner)
            .map(|(_, _, n)| n)
            .sum();
        if held + size > claim::MAX_KEPT_PER_OWNER {
            return Err(format!(
                "{held} bytes of this caller's large results wait to be fetched, and this one is {size} more than their quota of {} bytes",
                claim::MAX_KEPT_PER_OWNER
            ));
        }
        kept.insert(
            id.to_owned(),
            (owner.to_owned(), std::time::Instant::now(), size),
        );
        Ok(())
    }

    /// A result fetched whole (or never kept) counts against nobody's quota.
    fn forget(&self, id: &str) {
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
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
        let (headers, body) = match self.chunk(layout, msg, caller).await {
            Ok((seq, payload, last, id)) => {
                let mut h = HeaderMap::new();
                h.insert(HEADER_SEQ, seq.to_string().as_str());
                if let Err(e) = client.publish_with_headers(reply, h, payload).await {
                    tracing::warn!("a result's chunk was not sent: {e}");
                    return;
                }
                if last && let Ok((store, _)) = self.bucket().await {
                    // Read whole: nobody needs it again (and the bucket forgets it anyway).
                    let _ = store.delete(&id).await;
                    self.forget(&id);
                }
                return;
            }
            Err((code, why)) => {
                let mut h = HeaderMap::new();
                // One line: the id in the text is the caller's, and may hold anything.
                h.insert(HEADER_SERVICE_ERROR, header_safe(&why).as_str());
                h.insert(HEADER_SERVICE_ERROR_CODE, code.to_string().as_str());
                let body = serde_json::to_vec(&ToolResult::error(why)).expect("serialises");
                (h, body)
            }
        };
        if let Err(e) = client
            .publish_with_headers(reply, headers, body.into())
            .await
        {
            tracing::warn!("a fetch's refusal was not sent: {e}");
        }
    }

    /// The chunk a fetch asks for: its sequence, bytes, whether it is the last, the claim id.
    async fn chunk(
        &self,
        layout: Layout,
        msg: &Message,
        caller: Result<Caller, IdentityError>,
    ) -> Result<(u64, bytes::Bytes, bool, String), (usize, String)> {
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
        let (store, stream) = self.bucket().await.map_err(|e| (500, e))?;
        let info = store.info(&fetch.id).await.map_err(|_| gone())?;
        let mine = owner(&caller);
        // In local mode nobody is named: the id, never shown to another, is the key.
        if layout == Layout::Accounts
            && info.metadata.get("owner").map(String::as_str) != Some(mine.as_str())
        {
            return Err(gone());
        }
        if fetch.chunk >= info.chunks {
            return Err(gone());
        }
        let subject = format!("$O.{BUCKET}.C.{}", info.nuid);
        let m = stream
            .direct_get_next_for_subject(subject, Some(fetch.after.saturating_add(1)))
            .await
            .map_err(|_| gone())?;
        Ok((
            m.sequence,
            m.payload,
            fetch.chunk + 1 == info.chunks,
            fetch.id,
        ))
    }
}

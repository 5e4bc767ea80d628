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
use crate::subjects::limits::Busy;
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
    /// A task's result, read again by whoever reads the task: kept its whole time, not
    /// forgotten when read whole.
    rereadable: bool,
}

impl Kept {
    fn chunks(&self) -> usize {
        self.body.len().div_ceil(self.chunk).max(1)
    }
}

/// One owner's part of the room: what they keep, and what is reserved for their calls
/// running now (shared by those calls).
#[derive(Default)]
struct Owner {
    held: usize,
    running: usize,
    reserved: usize,
}

/// What the instance keeps and has promised, by owner. `owners` holds only owners with
/// something kept or running.
#[derive(Default)]
struct Store {
    kept: HashMap<String, Kept>,
    owners: HashMap<String, Owner>,
    held: usize,
    reserved: usize,
    swept: Option<Instant>,
}

impl Store {
    /// Forgets results kept past their time (looked for at most once a second).
    fn sweep(&mut self) {
        if self
            .swept
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.swept = Some(Instant::now());
        let within = Duration::from_secs(KEPT_SECS);
        let old: Vec<String> = self
            .kept
            .iter()
            .filter(|(_, k)| k.since.elapsed() >= within)
            .map(|(id, _)| id.clone())
            .collect();
        for id in old {
            self.forget(&id);
        }
    }

    /// Forgets one result, giving its bytes back to its owner's part.
    fn forget(&mut self, id: &str) {
        let Some(k) = self.kept.remove(id) else {
            return;
        };
        self.held -= k.body.len();
        if let Some(o) = self.owners.get_mut(&k.owner) {
            o.held -= k.body.len();
            if o.held == 0 && o.running == 0 {
                self.owners.remove(&k.owner);
            }
        }
    }

    fn free(&self) -> usize {
        claim::MAX_KEPT_BYTES.saturating_sub(self.held + self.reserved)
    }
}

/// The results this instance keeps, by claim id, and the room promised to calls running.
///
/// Room before running: a call's owner has room reserved for a large result before the
/// tool runs — their part of the instance's bytes (the bytes ÷ the owners keeping or
/// running now and one more, so a newcomer finds room; at most their quota), less what
/// they keep — or the call is answered busy and nothing runs. A result within that room is
/// always kept: a writing tool is never committed and then reported unkept for a caller
/// within their part.
pub(crate) struct Claims {
    /// This instance's id: the claims it makes name it, and fetches come to it alone.
    instance: String,
    store: Mutex<Store>,
}

/// Room reserved for one call's large result; given back when the call ends.
pub(crate) struct Room<'a> {
    claims: &'a Claims,
    owner: String,
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        let mut s = self.claims.lock();
        let s = &mut *s;
        if let Some(o) = s.owners.get_mut(&self.owner) {
            o.running -= 1;
            if o.running == 0 {
                s.reserved -= o.reserved;
                o.reserved = 0;
                if o.held == 0 {
                    s.owners.remove(&self.owner);
                }
            }
        }
    }
}

impl Claims {
    pub fn new(instance: String) -> Claims {
        Claims {
            instance,
            store: Mutex::new(Store::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether no result waits to be fetched (those kept past their time count no more).
    pub fn is_empty(&self) -> bool {
        let within = Duration::from_secs(KEPT_SECS);
        self.lock()
            .kept
            .values()
            .all(|k| k.since.elapsed() >= within)
    }

    /// Reserves room for a large result of `owner`'s before their call runs: `least` bytes
    /// (a message's worth, or the tool's largest result yet), within the owner's part of the
    /// instance's room; or says, as busy, why the call cannot run now. The owner's calls
    /// running at once share one reservation.
    pub fn reserve(&self, owner: &str, least: usize) -> Result<Room<'_>, Busy> {
        let mut s = self.lock();
        s.sweep();
        let s = &mut *s;
        let among = s.owners.len() + usize::from(!s.owners.contains_key(owner));
        let free = s.free();
        let part = claim::MAX_KEPT_PER_OWNER.min(claim::MAX_KEPT_BYTES / (among + 1));
        // No more than a part: one caller's huge result sets no bar the others cannot pass.
        let want = least.min(part);
        let o = s.owners.entry(owner.to_owned()).or_default();
        let have = o.reserved;
        if have >= want || (o.held + want <= part && have + free >= want) {
            let room = want.max(have);
            o.running += 1;
            o.reserved = room;
            s.reserved += room - have;
            return Ok(Room {
                claims: self,
                owner: owner.to_owned(),
            });
        }
        let held = o.held;
        if held == 0 && o.running == 0 {
            s.owners.remove(owner);
        }
        let kept_longest = s
            .kept
            .values()
            .filter(|k| k.owner == owner)
            .map(|k| k.since.elapsed())
            .max();
        Err(match kept_longest {
            // Theirs fill their part: until the oldest is fetched or forgotten.
            Some(age) if held + want > part => Busy {
                retry_after: Duration::from_secs(KEPT_SECS)
                    .saturating_sub(age)
                    .max(Duration::from_secs(1)),
                why: format!(
                    "{held} bytes of your large results wait to be fetched here, and {part} are your part of this instance's room for them while {among} callers keep or run; fetch them (mesh's clients do at once) or let them be forgotten"
                ),
            },
            _ => Busy {
                retry_after: Duration::from_secs(1),
                why: format!(
                    "this instance's room for large results is taken ({} bytes kept, {} promised to calls running)",
                    s.held, s.reserved
                ),
            },
        })
    }

    /// Keeps `body` for `owner`, in chunks that each fit in one message of at most `chunk`:
    /// from the room reserved for their call, or more if the instance has it free within
    /// their quota ([`claim::MAX_KEPT_PER_OWNER`]); or says why not.
    /// `rereadable`: a task's result, kept its whole time however often it is read.
    pub fn put(
        &self,
        owner: &str,
        body: Bytes,
        chunk: usize,
        rereadable: bool,
    ) -> Result<Claim, String> {
        let size = body.len();
        let mut s = self.lock();
        let s = &mut *s;
        let free = s.free();
        let among = s.owners.len() + usize::from(!s.owners.contains_key(owner));
        let part = claim::MAX_KEPT_PER_OWNER.min(claim::MAX_KEPT_BYTES / (among + 1));
        let o = s.owners.entry(owner.to_owned()).or_default();
        let from_room = size.min(o.reserved);
        let beyond = size - from_room;
        // Past the room reserved, only what is free and within their part now.
        if beyond > 0 && (beyond > free || o.held + size > part) {
            let why = format!(
                "it is {size} bytes; {} were reserved for this call, beside the {} of this caller's waiting to be fetched, and their part of this instance's room is {part} bytes while {among} callers keep or run (quota {} bytes)",
                o.reserved,
                o.held,
                claim::MAX_KEPT_PER_OWNER
            );
            if o.held == 0 && o.running == 0 {
                s.owners.remove(owner);
            }
            return Err(why);
        }
        o.reserved -= from_room;
        o.held += size;
        s.reserved -= from_room;
        s.held += size;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let k = Kept {
            owner: owner.to_owned(),
            since: Instant::now(),
            body,
            chunk: chunk.max(claim::MIN_CHUNK),
            rereadable,
        };
        let made = Claim {
            id: id.clone(),
            size,
            chunks: k.chunks(),
            digest: claim::digest(&k.body),
            instance: self.instance.clone(),
        };
        s.kept.insert(id, k);
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
        let mut s = self.lock();
        s.sweep();
        let k = s
            .kept
            .get(&fetch.id)
            .filter(|k| k.since.elapsed() < Duration::from_secs(KEPT_SECS))
            .ok_or_else(gone)?;
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
        if fetch.chunk + 1 == chunks && !k.rereadable {
            // Read whole: nobody needs it again.
            s.forget(&fetch.id);
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
        let room = claims.reserve("ann@PEOPLE", 1024).unwrap();
        let c = claims.put("ann@PEOPLE", body.clone(), 1024, false).unwrap();
        assert_eq!((c.size, c.chunks, c.instance.as_str()), (2500, 3, "abc"));
        assert_eq!(c.digest, claim::digest(&body));
        let big = Bytes::from(vec![0u8; claim::MAX_KEPT_PER_OWNER]);
        let refused = claims
            .put("ann@PEOPLE", big.clone(), 1024, false)
            .unwrap_err();
        // Past her part (128 MiB while she alone keeps: her quota), which the text names.
        assert!(
            refused.contains("their part of this instance's room is 134217728 bytes"),
            "{refused}"
        );
        drop(room);
        // Another caller's share is theirs.
        let _room = claims.reserve("bob@PEOPLE", 1024).unwrap();
        claims.put("bob@PEOPLE", big, 1024, false).unwrap();
    }

    const MIB: usize = 1024 * 1024;

    #[test]
    fn four_keepers_leave_a_fifth_room_and_a_keeper_past_their_part_runs_nothing() {
        let claims = Claims::new("abc".into());
        // Four people each keep as much as their part lets them, never fetching.
        for who in ["a", "b", "c", "d"] {
            let room = claims.reserve(who, MIB).unwrap();
            let mut kept = 0;
            while claims
                .put(who, Bytes::from(vec![0u8; 8 * MIB]), MIB, false)
                .is_ok()
            {
                kept += 8 * MIB;
            }
            drop(room);
            assert!(
                kept > 0 && kept <= claim::MAX_KEPT_PER_OWNER,
                "{who}: {kept}"
            );
        }
        // The fifth's call has room before it runs, and a large result within it is kept.
        let room = claims.reserve("vic", MIB).unwrap();
        claims
            .put("vic", Bytes::from(vec![1u8; 16 * MIB]), MIB, false)
            .expect("vic's result within her room");
        drop(room);
        // A keeper whose results fill their part is told so before anything runs, with
        // when to come back.
        let Err(busy) = claims.reserve("a", MIB) else {
            panic!("a keeper past their part was given room")
        };
        assert!(busy.why.contains("your part"), "{}", busy.why);
        assert!(busy.retry_after > Duration::from_secs(60), "{busy:?}");
    }

    #[test]
    fn a_crowd_of_callers_each_gets_room_and_one_huge_result_bars_nobody() {
        let claims = Claims::new("abc".into());
        // Two hundred people with calls running at once: each has a message's worth.
        let rooms: Vec<_> = (0..200)
            .map(|n| {
                claims
                    .reserve(&format!("p{n}"), MIB)
                    .expect("room for each")
            })
            .collect();
        drop(rooms);
        // A tool whose largest result was 200 MiB asks no more than a caller's part.
        let _room = claims
            .reserve("q", 200 * MIB)
            .expect("no more than a part is asked");
    }

    #[test]
    fn room_is_given_back_when_the_calls_end() {
        let claims = Claims::new("abc".into());
        let rooms: Vec<_> = (0..3).map(|_| claims.reserve("a", MIB).unwrap()).collect();
        assert!(claims.lock().reserved > 0);
        drop(rooms);
        let s = claims.lock();
        assert_eq!((s.reserved, s.held, s.owners.len()), (0, 0, 0));
    }
}

//! Results larger than the bus carries, both sides of their wire: the module keeps the result
//! in a JetStream object store bucket of its own account (`mesh_results`, ten minutes at most)
//! and answers the call with a claim; the caller fetches it chunk by chunk from the module's
//! `result` verb, which gives it to the caller the claim was made for only, and checks the
//! digest. The last chunk fetched removes it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The verb a module answers fetches on: `mesh.<module>.result` (a reserved tool name).
pub const RESULT_VERB: &str = "result";

/// The header on an answer that is a claim, not the result: the claim's id.
pub const HEADER_CLAIM: &str = "Mesh-Claim";

/// The header on a fetched chunk: its place in the bucket's stream, to ask for the next after.
pub const HEADER_SEQ: &str = "Mesh-Claim-Seq";

/// The `_meta` key of the claim in the answer's body.
pub const CLAIM_META: &str = "mesh/claim";

/// The bucket every module keeps its large results in (in its own account).
pub const BUCKET: &str = "mesh_results";

/// How long a result waits to be fetched.
pub const KEPT_SECS: u64 = 600;

/// The most bytes a module keeps waiting to be fetched (its bucket's bound).
pub const MAX_KEPT_BYTES: i64 = 512 * 1024 * 1024;

/// The most bytes of one caller's results waiting to be fetched on one module instance
/// (fetched whole, or older than [`KEPT_SECS`], they count no more): whoever never fetches
/// fills only their own share of the bucket.
pub const MAX_KEPT_PER_OWNER: usize = 128 * 1024 * 1024;

/// The smallest chunk a module writes: a claim of more chunks than this allows is not one a
/// module made.
pub const MIN_CHUNK: usize = 1024;

/// The largest result a client fetches: past it, the claim is refused, not followed.
pub const MAX_FETCHED: usize = 64 * 1024 * 1024;

/// A claim: where the result is and how to know it whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub id: String,
    pub size: usize,
    pub chunks: usize,
    /// `SHA-256=<base64url>` of the whole result, as the object store writes it.
    pub digest: String,
}

/// One fetch: chunk `chunk` (from 0) of claim `id`, the stream's next after `after`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fetch {
    pub id: String,
    pub chunk: usize,
    #[serde(default)]
    pub after: u64,
}

/// The object store's digest of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("SHA-256={}", URL_SAFE.encode(sha2::Sha256::digest(bytes)))
}

/// The verb's subject for `module`.
pub fn result_subject(module: &str) -> String {
    format!("{}.{module}.{RESULT_VERB}", super::PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_the_object_stores() {
        // sha256("abc"), base64url with padding, as async-nats's object store writes it.
        assert_eq!(
            digest(b"abc"),
            "SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0="
        );
    }
}

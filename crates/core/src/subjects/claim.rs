//! Results larger than the bus carries, both sides of their wire: the module instance that ran
//! the call keeps the result in its memory (ten minutes at most, bounded per caller and in all)
//! and answers the call with a claim naming itself; the caller fetches it chunk by chunk from
//! that instance's `result` verb (`mesh.<module>.result.<instance>`), which gives it to the
//! caller the claim was made for only, and checks the digest. The last chunk fetched removes
//! it. A module's account has no JetStream (its JetStream could publish into the call log), so
//! no instance keeps a result anywhere another could read it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The verb a module instance answers fetches on: `mesh.<module>.result.<instance>` (`result`
/// is a reserved tool name).
pub const RESULT_VERB: &str = "result";

/// The header on an answer that is a claim, not the result: the claim's id.
pub const HEADER_CLAIM: &str = "Mesh-Claim";

/// The header on a fetched chunk: its place (the chunk's number, from 1), sent back as `after`.
pub const HEADER_SEQ: &str = "Mesh-Claim-Seq";

/// The `_meta` key of the claim in the answer's body.
pub const CLAIM_META: &str = "mesh/claim";

/// How long a result waits to be fetched.
pub const KEPT_SECS: u64 = 600;

/// The most bytes one module instance keeps waiting to be fetched, all callers together.
pub const MAX_KEPT_BYTES: usize = 512 * 1024 * 1024;

/// The most bytes of one caller's results waiting to be fetched on one module instance
/// (fetched whole, or older than [`KEPT_SECS`], they count no more): whoever never fetches
/// fills only their own share of what the instance keeps.
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
    /// `SHA-256=<base64url>` of the whole result.
    pub digest: String,
    /// The instance that keeps it (its id in the NATS services protocol): fetched from
    /// `mesh.<module>.result.<instance>`.
    pub instance: String,
}

/// One fetch: chunk `chunk` (from 0) of claim `id`; `after` is the last chunk's place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fetch {
    pub id: String,
    pub chunk: usize,
    #[serde(default)]
    pub after: u64,
}

/// The digest of `bytes`: `SHA-256=<base64url, padded>`.
pub fn digest(bytes: &[u8]) -> String {
    // Written straight into its room: every call's word takes two of these.
    let mut out = String::with_capacity(52);
    out.push_str("SHA-256=");
    URL_SAFE.encode_string(sha2::Sha256::digest(bytes), &mut out);
    out
}

/// The verb's subject for `module`'s `instance`.
pub fn result_subject(module: &str, instance: &str) -> String {
    format!("{}.{module}.{RESULT_VERB}.{instance}", super::PREFIX)
}

/// The verb's subjects of every instance of `module` (what a grant to fetch names).
pub fn result_subjects(module: &str) -> String {
    format!("{}.{module}.{RESULT_VERB}.*", super::PREFIX)
}

/// Whether `instance` can be a token of a subject (an instance id is letters and digits).
pub fn is_instance(instance: &str) -> bool {
    !instance.is_empty()
        && instance.len() <= 64
        && instance.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256_in_base64url() {
        // sha256("abc"), base64url with padding (as async-nats's object store writes it).
        assert_eq!(
            digest(b"abc"),
            "SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0="
        );
    }
}

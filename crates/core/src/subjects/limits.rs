//! Limits per caller, both sides of their wire: what the grants file says a person (or role)
//! may have of a module's capacity — calls in flight and calls a minute — as the catalogue
//! publishes it (`mesh.catalog.limits`) and every module's runtime enforces it, and the
//! answer a call refused for load gets ("busy", with when to try again).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where a module asks for the limits table (a verb of the catalogue).
pub const LIMITS_SUBJECT: &str = "mesh.catalog.limits";

/// The error code of a call refused for load.
pub const CODE_BUSY: usize = 429;

/// The header of a busy answer: milliseconds after which to try again.
pub const HEADER_RETRY_AFTER: &str = "Mesh-Retry-After";

/// What one caller may have of one module instance at a time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Calls of theirs running at once; more wait their turn (bounded), behind their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u32>,
    /// Calls a minute; more are refused as busy until the minute allows one again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
}

impl Limits {
    /// Each bound the more generous of the two (a person with two roles has the larger).
    pub fn widest(self, other: Limits) -> Limits {
        let max = |a: Option<u32>, b: Option<u32>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            // No bound in one of them: none.
            _ => None,
        };
        Limits {
            in_flight: max(self.in_flight, other.in_flight),
            per_minute: max(self.per_minute, other.per_minute),
        }
    }

    pub fn is_none(&self) -> bool {
        self.in_flight.is_none() && self.per_minute.is_none()
    }
}

/// Every caller's limits, as the catalogue answers them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsTable {
    /// For callers not named below.
    #[serde(default)]
    pub default: Limits,
    /// By caller, `user@ACCOUNT`.
    #[serde(default)]
    pub callers: BTreeMap<String, Limits>,
    /// The tools (full names) whose argument and result values the call log keeps, as the
    /// grants file's `log { values: [...] }` says (on the first page; others keep only a
    /// digest and a size).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_values: Vec<String>,
    /// On a page of the catalogue's answer: more callers follow; ask again with this as
    /// `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A request for a page of the limits table: `{}` or `{"after": "<caller>"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

impl LimitsTable {
    pub fn of(&self, caller: &str) -> Limits {
        self.callers.get(caller).copied().unwrap_or(self.default)
    }
}

/// Why a call was refused for load, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    pub retry_after: Duration,
    pub why: String,
}

impl Busy {
    /// The text of the busy answer.
    pub fn text(&self, tool: &str) -> String {
        format!(
            "busy: {tool} is not taking more of your calls now ({}); try again in {:.1} s",
            self.why,
            self.retry_after.as_secs_f64()
        )
    }
}

impl Busy {
    /// The busy answer on the wire, for `what` was refused: the services protocol's error
    /// headers (code 429), when to try again, and the text as a tool error's body.
    pub fn reply(&self, what: &str) -> (async_nats::HeaderMap, bytes::Bytes) {
        let text = self.text(what);
        let body = serde_json::to_vec(&super::ToolResult::error(text.as_str()))
            .expect("a ToolResult always serialises");
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            super::HEADER_SERVICE_ERROR,
            super::header_line(&text).as_str(),
        );
        headers.insert(
            super::HEADER_SERVICE_ERROR_CODE,
            CODE_BUSY.to_string().as_str(),
        );
        headers.insert(
            HEADER_RETRY_AFTER,
            self.retry_after.as_millis().max(1).to_string().as_str(),
        );
        (headers, body.into())
    }
}

/// The retry-after of a busy answer, from its headers.
pub fn retry_after(headers: Option<&async_nats::HeaderMap>) -> Option<Duration> {
    let h = headers?;
    let code = h.get(super::HEADER_SERVICE_ERROR_CODE)?;
    if code.as_str() != CODE_BUSY.to_string() {
        return None;
    }
    let ms = h
        .get(HEADER_RETRY_AFTER)
        .and_then(|v| v.as_str().parse::<u64>().ok())
        .unwrap_or(1000);
    Some(Duration::from_millis(ms.min(3_600_000)))
}

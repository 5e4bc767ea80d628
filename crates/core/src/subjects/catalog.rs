//! The catalogue's part of the contract: the key-value bucket modules register in, and the
//! reply of `catalog_modules`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ListedTool;

/// The catalogue module's name.
pub const MODULE: &str = "catalog";
/// Where a module registers itself (and refreshes): `catalog_register`.
pub const REGISTER_SUBJECT: &str = "mesh.catalog.register";
/// Where a module's instance says it stopped: `catalog_unregister`.
pub const UNREGISTER_SUBJECT: &str = "mesh.catalog.unregister";
/// The catalogue's listing verb: every module with the tools it registered, in pages
/// ([`ListingRequest`] → [`ListingPage`]). A verb, not a tool: its reply is the listing
/// itself, written from the JSON the modules registered, not a `CallToolResult`.
pub const LISTING_SUBJECT: &str = "mesh.catalog.listing";
/// Where the catalogue says that what a module serves changed ([`Changed`]): it registered
/// for the first time or with other tools, an instance came or went, it was forgotten.
pub const CHANGED_SUBJECT: &str = "mesh.catalog.changed";

/// The JetStream key-value bucket that holds registrations.
pub const BUCKET: &str = "mesh_catalog";

/// How often a running instance refreshes its registration by default.
pub const REFRESH_SECS: u64 = 30;

/// An instance that has not refreshed for this many refresh periods is not counted running.
pub const STALE_AFTER_REFRESHES: u64 = 3;

/// `modules.<module>`: what a module is, written when an instance registers something new
/// (refreshes that change nothing leave it alone: the instances carry the time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleRecord {
    pub module: String,
    pub version: String,
    pub description: String,
    pub tools: Vec<String>,
    /// The tools in full, when the module registered them (a module that sends names only
    /// is asked its `tools` verb by discovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specs: Option<Vec<ListedTool>>,
    /// Unix milliseconds when the record was written.
    pub last_seen_ms: u64,
}

/// `instances.<module>.<id>`: one running instance, refreshed while it runs and deleted
/// when it stops cleanly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub module: String,
    pub id: String,
    pub version: String,
    pub started_ms: u64,
    pub last_seen_ms: u64,
    /// How often it said it refreshes, when not every [`REFRESH_SECS`]: it is taken for gone
    /// after [`STALE_AFTER_REFRESHES`] of them missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_ms: Option<u64>,
}

impl InstanceRecord {
    /// How long it may go unseen before it is taken for gone (crashed: it never said it
    /// stopped).
    pub fn fresh_for_ms(&self) -> u64 {
        STALE_AFTER_REFRESHES * self.refresh_ms.unwrap_or(REFRESH_SECS * 1000)
    }
}

/// The most tools one module registers.
pub const MAX_TOOLS: usize = 1024;

/// The arguments of `catalog_register`: a module instance says what it serves. The catalogue
/// stamps the time itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    #[schemars(length(max = 32))]
    pub module: String,
    #[schemars(length(max = 64))]
    pub version: String,
    #[serde(default)]
    #[schemars(length(max = 4096))]
    pub description: String,
    #[schemars(length(max = MAX_TOOLS), inner(length(max = 64)))]
    pub tools: Vec<String>,
    /// The tools in full, in the order of `tools`, as its `tools` verb answers: discovery
    /// then lists them from the catalogue in one round trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TOOLS))]
    pub specs: Option<Vec<ListedTool>>,
    /// The instance's id in the NATS services protocol.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{1,64}$"))]
    pub instance: String,
    pub started_ms: u64,
    /// How often it refreshes, when not every [`REFRESH_SECS`] (1 s at least).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1000, max = 30000))]
    pub refresh_ms: Option<u64>,
}

/// The arguments of `catalog_unregister`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Unregistration {
    #[schemars(length(max = 32))]
    pub module: String,
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{1,64}$"))]
    pub instance: String,
}

/// One module in the reply of `catalog_modules` (its `structuredContent.modules`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModuleEntry {
    pub module: String,
    pub version: String,
    pub description: String,
    pub tools: Vec<String>,
    /// Instances that refreshed recently.
    pub instances: usize,
    pub last_seen_ms: u64,
}

impl ModuleEntry {
    /// The full names of the tools it lists.
    pub fn full_names(&self) -> impl Iterator<Item = String> + '_ {
        self.tools.iter().map(|t| super::full_name(&self.module, t))
    }
}

/// The request of the listing verb: the first page, or the page after a module.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListingRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Digests of tools the reader keeps ([`super::tools_digest`]): a module whose tools
    /// have one of them is listed with its digest but without its tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known: Vec<String>,
}

/// The most digests one listing request says it knows.
pub const MAX_KNOWN: usize = 4096;

/// Whether `s` is a digest as [`super::tools_digest`] writes it: 32 lower-case hex digits.
pub fn is_digest(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One page of the listing: modules in name order, as many as fit in one message; `next`
/// (the last module's name) when more follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListingPage {
    #[serde(default)]
    pub modules: Vec<ListedModule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Why the request could not be answered (and `modules` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A module in the listing: its catalogue entry and, when it registered them, its tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListedModule {
    pub module: String,
    pub version: String,
    pub description: String,
    pub tools: Vec<String>,
    pub instances: usize,
    pub last_seen_ms: u64,
    /// The digest of the tools it registered in full ([`super::tools_digest`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Those tools, unless the request said it knows the digest (or they do not fit a page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specs: Option<Vec<ListedTool>>,
}

impl ListedModule {
    /// The catalogue entry, the digest of the module's tools, and those tools when the
    /// page carries them.
    pub fn split(self) -> (ModuleEntry, Option<String>, Option<Vec<ListedTool>>) {
        let entry = ModuleEntry {
            module: self.module,
            version: self.version,
            description: self.description,
            tools: self.tools,
            instances: self.instances,
            last_seen_ms: self.last_seen_ms,
        };
        (entry, self.digest, self.specs)
    }
}

/// A module as `catalog_modules` lists it: by its tools' names, without their specs.
impl From<ModuleEntry> for ListedModule {
    fn from(e: ModuleEntry) -> Self {
        ListedModule {
            module: e.module,
            version: e.version,
            description: e.description,
            tools: e.tools,
            instances: e.instances,
            last_seen_ms: e.last_seen_ms,
            digest: None,
            specs: None,
        }
    }
}

/// The event on [`CHANGED_SUBJECT`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Changed {
    pub module: String,
}

impl Changed {
    /// An event as the catalogue writes it, and nothing else: anyone in `PEOPLE` can make a
    /// module's answer land on the subject (a request's reply subject is not checked by
    /// nats-server), so a message there counts only when it has exactly this shape.
    pub fn read(payload: &[u8]) -> Option<Changed> {
        if payload.len() > 256 {
            return None;
        }
        let event: Changed = serde_json::from_slice(payload).ok()?;
        super::check_module(&event.module).ok()?;
        Some(event)
    }
}

pub fn module_key(module: &str) -> String {
    format!("modules.{module}")
}

pub fn instance_key(module: &str, id: &str) -> String {
    format!("instances.{module}.{id}")
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

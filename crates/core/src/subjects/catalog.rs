//! The catalogue's part of the contract: the key-value bucket modules register in, and the
//! reply of `catalog_modules`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The catalogue module's name.
pub const MODULE: &str = "catalog";
/// Where a module registers itself (and refreshes): `catalog_register`.
pub const REGISTER_SUBJECT: &str = "mesh.catalog.register";
/// Where a module's instance says it stopped: `catalog_unregister`.
pub const UNREGISTER_SUBJECT: &str = "mesh.catalog.unregister";

/// The JetStream key-value bucket that holds registrations.
pub const BUCKET: &str = "mesh_catalog";

/// How often a running instance refreshes its registration by default.
pub const REFRESH_SECS: u64 = 30;

/// An instance that has not refreshed for this many refresh periods is not counted running.
pub const STALE_AFTER_REFRESHES: u64 = 3;

/// `modules.<module>`: what a module is, written by each of its instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleRecord {
    pub module: String,
    pub version: String,
    pub description: String,
    pub tools: Vec<String>,
    /// Unix milliseconds of the last refresh by any instance.
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
    /// The instance's id in the NATS services protocol.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{1,64}$"))]
    pub instance: String,
    pub started_ms: u64,
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

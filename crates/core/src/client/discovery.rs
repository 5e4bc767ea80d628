//! Discovery: the catalogue's modules, then every module's `tools` verb at once, all under
//! one deadline — one round trip plus the slowest module.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{CallError, Client};
use crate::subjects::catalog::ModuleEntry;
use crate::subjects::{FullName, ToolResult, ToolsReply};

/// The full name of the catalogue's listing tool.
pub const CATALOG_MODULES: &str = "catalog_modules";

/// What discovery found: every module the catalogue knows, with its tools or why they could
/// not be had, and which tools this credential may call.
#[derive(Debug)]
pub struct Discovery {
    pub modules: Vec<Found>,
    /// Full names of the catalogue's tools this credential may call, as the server reports
    /// its permissions; or why the server could not say.
    pub yours: Result<BTreeSet<String>, String>,
}

/// The `_meta` key by which the console says whether a listed tool is its credential's.
pub const YOURS_META: &str = "mesh/yours";

/// One module: its catalogue entry and its own answer to the `tools` verb.
#[derive(Debug)]
pub struct Found {
    pub entry: ModuleEntry,
    pub tools: Result<ToolsReply, CallError>,
}

impl Client {
    /// What the catalogue lists (all modules, or only `module`), without asking the modules:
    /// one round trip.
    pub async fn catalogue(
        &self,
        module: Option<&str>,
        deadline: Duration,
    ) -> Result<Vec<ModuleEntry>, CallError> {
        catalog_entries(
            self.call(&catalog_name(), &catalog_args(module), deadline)
                .await?,
        )
    }

    /// Lists the catalogue's modules (or only `module`) and asks each for its tools.
    pub async fn discover(
        &self,
        module: Option<&str>,
        deadline: Duration,
    ) -> Result<Discovery, CallError> {
        let started = Instant::now();
        let (entries, rule) = tokio::join!(
            self.catalogue(module, deadline),
            self.publish_rule(deadline)
        );
        let entries = entries?;
        let yours = rule
            .map(|rule| {
                entries
                    .iter()
                    .flat_map(|e| e.tools.iter().map(move |t| (e, t)))
                    .filter(|(e, t)| rule.permits(&crate::subjects::tool_subject(&e.module, t)))
                    .map(|(e, t)| crate::subjects::full_name(&e.module, t))
                    .collect()
            })
            // Shown as it is (the YOURS column, `yours_unknown`), also for a console's answer.
            .map_err(|e| e.to_string());
        let left = deadline.saturating_sub(started.elapsed());
        let asks = entries.iter().map(|e| self.tools(&e.module, left));
        let answers = futures_util::future::join_all(asks).await;
        Ok(Discovery {
            yours,
            modules: entries
                .into_iter()
                .zip(answers)
                .map(|(entry, tools)| Found { entry, tools })
                .collect(),
        })
    }
}

pub fn catalog_name() -> FullName {
    FullName::parse(CATALOG_MODULES).expect("a valid name")
}

/// `catalog_modules`' arguments: all modules, or one.
pub fn catalog_args(module: Option<&str>) -> serde_json::Value {
    match module {
        Some(m) => json!({ "module": m }),
        None => json!({}),
    }
}

/// The modules a `catalog_modules` result lists.
pub fn catalog_entries(result: ToolResult) -> Result<Vec<ModuleEntry>, CallError> {
    if result.is_error {
        return Err(CallError::BadReply {
            target: CATALOG_MODULES.into(),
            why: result.text_content(),
        });
    }
    Ok(result
        .structured_content
        .as_ref()
        .and_then(|s| s.get("modules"))
        .cloned()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| CallError::BadReply {
            target: CATALOG_MODULES.into(),
            why: format!("modules list: {e}"),
        })?
        .unwrap_or_default())
}

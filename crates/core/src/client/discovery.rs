//! Discovery: the catalogue's listing (every module with the tools it registered, in one
//! round trip), then whether each module answers now — one `$SRV.PING` to all at once, heard
//! only for modules the catalogue says run (any module may answer a ping in another's name),
//! else the module's own `tools` verb — all under one deadline.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use futures_util::StreamExt;
use std::time::{Duration, Instant};

use serde_json::json;

use super::access::Access;
use super::{CallError, Client};
use crate::subjects::catalog::{self, ListedModule, ListingPage, ListingRequest, ModuleEntry};
use crate::subjects::{FullName, ListedTool, Listing, ToolResult};

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

/// One module: its catalogue entry and its tools — or why not: it did not answer now.
#[derive(Debug)]
pub struct Found {
    pub entry: ModuleEntry,
    pub tools: Result<Listing, CallError>,
}

/// A module's tools, shared with what the client keeps.
type Tools = Arc<[ListedTool]>;

/// How long discovery waits, after the listing, for the pongs of modules it lists running.
const PONG_GRACE: Duration = Duration::from_millis(20);

/// The most pages one listing follows: far past any bus (a page is up to the bus's maximum
/// message size), so a catalogue that always says "more" cannot keep discovery going.
const MAX_PAGES: usize = 1024;

impl Client {
    /// What the catalogue lists (all modules, or only `module`), without asking the modules:
    /// one round trip.
    pub async fn catalogue(
        &self,
        module: Option<&str>,
        deadline: Duration,
    ) -> Result<Vec<ModuleEntry>, CallError> {
        catalogue_pages(self, module, deadline).await
    }

    /// Every module the catalogue lists (or only `module`), each with its tools if it
    /// answers now.
    pub async fn discover(
        &self,
        module: Option<&str>,
        deadline: Duration,
    ) -> Result<Discovery, CallError> {
        let started = Instant::now();
        // A whole listing says which tools this client keeps: those modules come without
        // their tools, read from what is kept.
        let known = match module {
            None => self.kept.known(),
            Some(_) => Vec::new(),
        };
        // Every module is asked whether it answers while the catalogue is read: one
        // `$SRV.PING` to all, its answers gathered until the listing is in.
        let mut pongs = self.ping_all().await;
        let mut answered = HashSet::new();
        let listing = async {
            tokio::join!(
                self.listing(module, &known, deadline),
                self.publish_rule(deadline)
            )
        };
        let gather = async {
            match pongs.as_mut() {
                Some(pongs) => {
                    while let Some(pong) = pongs.next().await {
                        if let Ok(p) = serde_json::from_slice::<Pong>(&pong.payload) {
                            answered.insert(p.name);
                        }
                    }
                }
                None => std::future::pending().await,
            }
        };
        let (listed, rule) = tokio::select! {
            both = listing => both,
            () = gather => unreachable!("a subscription ends only when it is dropped"),
        };
        let listed = listed?;
        let mut seen = HashSet::new();
        let (entries, registered): (Vec<ModuleEntry>, Vec<Option<Tools>>) = listed
            .into_iter()
            .map(|m| {
                let (entry, digest, specs) = m.split();
                let tools = match (specs, digest) {
                    (Some(specs), digest) => {
                        let specs: Arc<[ListedTool]> = specs.into();
                        if let Some(d) = digest {
                            self.kept.keep(&entry.module, Some(&d), &specs);
                            seen.insert(d);
                        }
                        Some(specs)
                    }
                    (None, Some(d)) => {
                        let kept = self.kept.get(&d);
                        seen.insert(d);
                        kept
                    }
                    (None, None) => None,
                };
                (entry, tools)
            })
            .unzip();
        if module.is_none() {
            self.kept.retain(&seen);
        }
        // The pongs of running modules not heard yet, a short while: a module that does not
        // answer by then is asked alone (one that is gone is said at once).
        let mut waiting: HashSet<&str> = entries
            .iter()
            .zip(&registered)
            .filter(|(e, r)| r.is_some() && e.instances > 0 && !answered.contains(&e.module))
            .map(|(e, _)| e.module.as_str())
            .collect();
        if let Some(pongs) = pongs.as_mut()
            && !waiting.is_empty()
        {
            let grace = PONG_GRACE.min(deadline.saturating_sub(started.elapsed()));
            let _ = tokio::time::timeout(grace, async {
                while let Some(pong) = pongs.next().await {
                    if let Ok(p) = serde_json::from_slice::<Pong>(&pong.payload)
                        && waiting.remove(p.name.as_str())
                    {
                        answered.insert(p.name);
                        if waiting.is_empty() {
                            return;
                        }
                    }
                }
            })
            .await;
        }
        drop(pongs);
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
        let answered = &answered;
        let asks = entries
            .iter()
            .zip(registered)
            .map(|(e, listing)| async move {
                match listing {
                    // Any module may answer `$SRV.PING` under any name (each hears `$SRV.>`,
                    // and a person's `$SRV` reaches every module's account), so a pong counts
                    // only for a module the catalogue says has an instance running.
                    Some(tools) if e.instances > 0 && answered.contains(&e.module) => Ok(Listing {
                        module: e.module.clone(),
                        version: e.version.clone(),
                        description: e.description.clone(),
                        tools,
                    }),
                    // Not heard, none running, or registered by name: asked alone on its
                    // `tools` verb, which only the module itself serves (one that is gone is
                    // said at once).
                    _ => self.tools_as::<Listing>(&e.module, left).await,
                }
            });
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

/// The one field of a `$SRV.PING` answer discovery reads: the service's (module's) name.
#[derive(serde::Deserialize)]
struct Pong {
    name: String,
}

impl Client {
    /// `$SRV.PING` to every module at once, its answers coming to a fresh inbox; `None` when
    /// that cannot be sent (each module is then asked alone).
    async fn ping_all(&self) -> Option<async_nats::Subscriber> {
        let inbox = self.nats.new_inbox();
        let pongs = self.nats.subscribe(inbox.clone()).await.ok()?;
        self.nats
            .publish_with_reply("$SRV.PING", inbox, bytes::Bytes::new())
            .await
            .ok()?;
        Some(pongs)
    }

    /// The catalogue's listing, every page; or, for one module or from a catalogue without
    /// the listing verb, `catalog_modules` (the modules' tools are then asked of each).
    pub(super) async fn listing(
        &self,
        module: Option<&str>,
        known: &[String],
        deadline: Duration,
    ) -> Result<Vec<ListedModule>, CallError> {
        let names_only =
            |entries: Vec<ModuleEntry>| entries.into_iter().map(ListedModule::from).collect();
        if module.is_some() {
            return self.catalogue(module, deadline).await.map(names_only);
        }
        let started = Instant::now();
        let mut modules = Vec::new();
        // What is kept is said within half a message on this bus (a digest and its quotes
        // take 35 bytes): the rest comes in full.
        let room = self.nats.server_info().max_payload / 2 / 35;
        let mut request = ListingRequest {
            after: None,
            known: known.iter().take(room).cloned().collect(),
        };
        for _ in 0..MAX_PAGES {
            let left = deadline.saturating_sub(started.elapsed());
            let body = serde_json::to_vec(&request).expect("a request serialises");
            let page = match self
                .request(&LISTING, catalog::LISTING_SUBJECT, body, left)
                .await
            {
                Ok(msg) => read_page(&msg.payload)?,
                // A catalogue (or a layout) from before the listing verb.
                Err(CallError::NobodyServes { .. } | CallError::Denied { .. })
                    if modules.is_empty() =>
                {
                    return self.catalogue(None, left).await.map(names_only);
                }
                Err(e) => return Err(e),
            };
            modules.extend(page.modules);
            match page.next {
                Some(next) if request.after.as_ref() != Some(&next) => request.after = Some(next),
                _ => return Ok(modules),
            }
        }
        Err(CallError::BadReply {
            target: LISTING.into(),
            why: format!("still more after {MAX_PAGES} pages"),
        })
    }
}

/// What the listing verb is called in messages.
const LISTING: &str = "the catalogue's listing (mesh.catalog.listing)";

fn read_page(payload: &[u8]) -> Result<ListingPage, CallError> {
    let page: ListingPage = serde_json::from_slice(payload).map_err(|e| CallError::BadReply {
        target: LISTING.into(),
        why: format!("not a listing page: {e}"),
    })?;
    match page.error {
        Some(why) => Err(CallError::BadReply {
            target: LISTING.into(),
            why,
        }),
        None => Ok(page),
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

/// Every module `catalog_modules` lists (or only `module`), page after page, all within
/// `deadline`: through the bus or a console alike.
pub async fn catalogue_pages<A: Access>(
    access: &A,
    module: Option<&str>,
    deadline: Duration,
) -> Result<Vec<ModuleEntry>, CallError> {
    let started = Instant::now();
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        let args = catalog_page_args(module, cursor.as_deref());
        let page = access.call(&catalog_name(), &args, left).await?;
        let next = catalog_next(&page);
        all.extend(catalog_entries(page)?);
        match next {
            None => return Ok(all),
            // Pages go forward by name: a catalogue that says otherwise would loop.
            Some(n) if cursor.as_ref().is_some_and(|c| n <= *c) => {
                return Err(CallError::BadReply {
                    target: CATALOG_MODULES.into(),
                    why: format!("its next page ({n}) does not follow the last"),
                });
            }
            Some(n) => cursor = Some(n),
        }
    }
}

/// The arguments of the `catalog_modules` page after `cursor` (the previous page's `next`).
pub fn catalog_page_args(module: Option<&str>, cursor: Option<&str>) -> serde_json::Value {
    let mut args = catalog_args(module);
    if let Some(c) = cursor {
        args["cursor"] = json!(c);
    }
    args
}

/// Where the next page of a `catalog_modules` result starts, if more follow.
pub fn catalog_next(result: &ToolResult) -> Option<String> {
    result
        .structured_content
        .as_ref()?
        .get("next")?
        .as_str()
        .map(str::to_owned)
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

//! The callers' limits verb (`mesh.catalog.limits`): the table the grants file's limits make
//! (`mesh up` and `mesh accounts` write it as `limits.json`), read again whenever the file
//! changes, so a reload reaches every module at its next refresh.

use std::path::PathBuf;
use std::sync::Arc;

use async_nats::{Client, Subscriber};
use futures_util::StreamExt;

use mesh_core::subjects::catalog;
use mesh_core::subjects::limits::{LIMITS_SUBJECT, LimitsRequest, LimitsTable};

use crate::watched::Watched;

/// Where the table comes from.
pub(crate) struct LimitsFile {
    file: Option<Watched<LimitsTable>>,
}

impl LimitsFile {
    pub fn new(path: Option<PathBuf>) -> LimitsFile {
        LimitsFile {
            file: path.map(Watched::new),
        }
    }

    /// The table: the file's when it reads, else none (every caller the default).
    fn table(&self) -> Arc<LimitsTable> {
        let Some(file) = &self.file else {
            return Arc::default();
        };
        file.get().unwrap_or_else(|e| {
            tracing::warn!("the callers' limits: {e}; none apply");
            Arc::default()
        })
    }

    /// One page of the table, at most `budget` bytes: the callers after the request's
    /// `after`, `next` naming the last when more follow (a mesh of many people with limits of
    /// their own does not fit in one message).
    fn answer(&self, request: &[u8], budget: usize) -> Vec<u8> {
        let after = serde_json::from_slice::<LimitsRequest>(request)
            .ok()
            .and_then(|r| r.after);
        let table = self.table();
        let mut page = LimitsTable {
            default: table.default,
            // What the call log keeps of which tools: once, on the first page.
            log_values: if after.is_none() {
                table.log_values.clone()
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        let mut size = serde_json::to_vec(&page).expect("serialises").len() + 64;
        let from = match &after {
            Some(a) => std::ops::Bound::Excluded(a.clone()),
            None => std::ops::Bound::Unbounded,
        };
        for (who, limits) in table.callers.range((from, std::ops::Bound::Unbounded)) {
            let entry = who.len() + serde_json::to_vec(limits).expect("serialises").len() + 8;
            if size + entry > budget && !page.callers.is_empty() {
                page.next = page.callers.keys().next_back().cloned();
                break;
            }
            size += entry;
            page.callers.insert(who.clone(), *limits);
        }
        serde_json::to_vec(&page).expect("serialises")
    }
}

pub(crate) async fn subscribe(client: &Client) -> Result<Subscriber, String> {
    client
        .queue_subscribe(LIMITS_SUBJECT, catalog::MODULE.to_owned())
        .await
        .map_err(|e| format!("cannot subscribe to {LIMITS_SUBJECT}: {e}"))
}

/// Answers the limits verb until the subscription ends.
pub(crate) async fn serve(file: LimitsFile, client: Client, mut requests: Subscriber) {
    while let Some(msg) = requests.next().await {
        let Some(reply) = msg.reply else { continue };
        let budget = client
            .server_info()
            .max_payload
            .saturating_sub(4096)
            .max(1024);
        let body = file.answer(&msg.payload, budget);
        if let Err(e) = client.publish(reply, body.into()).await {
            tracing::warn!("cannot answer a limits request: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::subjects::limits::Limits;

    #[test]
    fn a_table_larger_than_a_message_goes_in_pages() {
        let dir = std::env::temp_dir().join(format!("mesh-limits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("limits.json");
        let mut table = LimitsTable::default();
        for i in 0..5000 {
            let l = Limits {
                in_flight: Some(i % 7 + 1),
                per_minute: Some(60),
            };
            table.callers.insert(format!("person{i:05}@PEOPLE"), l);
        }
        std::fs::write(&path, serde_json::to_vec(&table).unwrap()).unwrap();
        let file = LimitsFile::new(Some(path));
        let (mut all, mut after, mut pages) = (LimitsTable::default(), None::<String>, 0);
        loop {
            let request = serde_json::to_vec(&LimitsRequest {
                after: after.clone(),
            })
            .unwrap();
            let body = file.answer(&request, 16 * 1024);
            assert!(body.len() <= 16 * 1024, "{}", body.len());
            let page: LimitsTable = serde_json::from_slice(&body).unwrap();
            all.callers.extend(page.callers);
            pages += 1;
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert!(pages > 10, "{pages}");
        assert_eq!(all.callers, table.callers);
        let _ = std::fs::remove_dir_all(dir);
    }
}

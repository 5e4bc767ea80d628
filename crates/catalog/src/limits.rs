//! The callers' limits verb (`mesh.catalog.limits`): the table the grants file's limits make
//! (`mesh up` and `mesh accounts` write it as `limits.json`), read again whenever the file
//! changes, so a reload reaches every module at its next refresh.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use async_nats::{Client, Subscriber};
use futures_util::StreamExt;

use mesh_core::subjects::catalog;
use mesh_core::subjects::limits::{LIMITS_SUBJECT, LimitsTable};

/// Where the table comes from, and the last one read.
pub(crate) struct LimitsFile {
    path: Option<PathBuf>,
    read: Mutex<Option<(SystemTime, Vec<u8>)>>,
}

impl LimitsFile {
    pub fn new(path: Option<PathBuf>) -> LimitsFile {
        LimitsFile {
            path,
            read: Mutex::new(None),
        }
    }

    /// The table as JSON: the file's when it reads, else none (every caller the default).
    fn answer(&self) -> Vec<u8> {
        let empty = || serde_json::to_vec(&LimitsTable::default()).expect("serialises");
        let Some(path) = &self.path else {
            return empty();
        };
        let Ok(modified) = std::fs::metadata(path).and_then(|m| m.modified()) else {
            return empty();
        };
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, body)) = &*read
            && *at == modified
        {
            return body.clone();
        }
        let body = match std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<LimitsTable>(&b).map_err(|e| e.to_string()))
        {
            Ok(table) => serde_json::to_vec(&table).expect("serialises"),
            Err(e) => {
                tracing::warn!(
                    "the limits in {} do not read ({e}); none apply",
                    path.display()
                );
                empty()
            }
        };
        *read = Some((modified, body.clone()));
        body
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
        let body = file.answer();
        if let Err(e) = client.publish(reply, body.into()).await {
            tracing::warn!("cannot answer a limits request: {e}");
        }
    }
}

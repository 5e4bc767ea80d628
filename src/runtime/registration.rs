//! Registers a serving module in the catalogue's bucket, refreshes it while it runs, and
//! removes the instance when it stops, so the catalogue lists installed modules and knows
//! which of them run.

use async_nats::Client;
use async_nats::jetstream::{self, kv};
use tokio::sync::OnceCell;

use crate::subjects::catalog::{self, InstanceRecord, ModuleRecord};

pub(crate) struct Registrar {
    client: Client,
    store: OnceCell<kv::Store>,
    module: ModuleRecord,
    instance: InstanceRecord,
}

impl Registrar {
    pub fn new(client: Client, module: ModuleRecord, id: &str) -> Self {
        let instance = InstanceRecord {
            module: module.module.clone(),
            id: id.to_owned(),
            version: module.version.clone(),
            started_ms: catalog::now_ms(),
            last_seen_ms: 0,
        };
        Registrar {
            client,
            store: OnceCell::new(),
            module,
            instance,
        }
    }

    /// The bucket, created on first use by whichever module comes first.
    async fn store(&self) -> Result<&kv::Store, String> {
        self.store
            .get_or_try_init(|| open_bucket(self.client.clone()))
            .await
    }

    /// Writes the module and this instance with the current time.
    pub async fn refresh(&self) -> Result<(), String> {
        let store = self.store().await?;
        let now = catalog::now_ms();
        let module = ModuleRecord {
            last_seen_ms: now,
            ..self.module.clone()
        };
        let instance = InstanceRecord {
            last_seen_ms: now,
            ..self.instance.clone()
        };
        store
            .put(catalog::module_key(&module.module), encode(&module))
            .await
            .map_err(|e| format!("cannot register module {}: {e}", module.module))?;
        store
            .put(
                catalog::instance_key(&instance.module, &instance.id),
                encode(&instance),
            )
            .await
            .map_err(|e| format!("cannot register instance of {}: {e}", instance.module))?;
        Ok(())
    }

    /// Removes this instance; the module itself stays listed until someone forgets it.
    pub async fn remove_instance(&self) {
        let Some(store) = self.store.get() else {
            return;
        };
        let key = catalog::instance_key(&self.instance.module, &self.instance.id);
        if let Err(e) = store.purge(key).await {
            tracing::warn!(module = %self.instance.module, "cannot remove instance from catalogue: {e}");
        }
    }
}

/// Opens the catalogue bucket, creating it when it does not exist yet.
pub(crate) async fn open_bucket(client: Client) -> Result<kv::Store, String> {
    let js = jetstream::new(client);
    if let Ok(store) = js.get_key_value(catalog::BUCKET).await {
        return Ok(store);
    }
    let config = kv::Config {
        bucket: catalog::BUCKET.to_owned(),
        description: "mesh catalogue: modules and their running instances".to_owned(),
        history: 1,
        ..Default::default()
    };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another module may have created it meanwhile.
        Err(create) => js.get_key_value(catalog::BUCKET).await.map_err(|_| {
            format!(
                "cannot open the catalogue bucket {} (is JetStream enabled on this bus?): {create}",
                catalog::BUCKET
            )
        }),
    }
}

fn encode<T: serde::Serialize>(record: &T) -> bytes::Bytes {
    serde_json::to_vec(record)
        .expect("a record always serialises")
        .into()
}

//! Registers a serving module with the catalogue, refreshes it while it runs, and removes the
//! instance when it stops, so the catalogue lists installed modules and knows which run.
//!
//! A module registers by calling `catalog_register` (`mesh.catalog.register`) like any tool:
//! the catalogue checks the stamped caller, so a module writes its own entries only and no
//! module needs JetStream. The catalogue itself writes its bucket directly ([`Registry`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::Client;
use async_nats::jetstream::{self, kv};

use crate::subjects::ToolResult;
use crate::subjects::catalog::{self, Registration, Unregistration};

/// How long one registration request waits for the catalogue.
const ASK_WITHIN: Duration = Duration::from_secs(5);

/// Why a registration did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("no catalogue is answering on {}", catalog::REGISTER_SUBJECT)]
    NobodyServes,
    #[error("the catalogue refused the registration: {0}")]
    Refused(String),
    #[error("the catalogue did not answer within {ASK_WITHIN:?}")]
    Slow,
    #[error("cannot register: {0}")]
    Other(String),
}

/// A boxed future, for the object-safe [`Registry`].
pub type RegistryFuture<'a> = Pin<Box<dyn Future<Output = Result<(), RegisterError>> + Send + 'a>>;

/// Where a module's registrations go. The runtime uses the catalogue over the bus unless the
/// module brings its own (the catalogue does: it owns the bucket).
pub trait Registry: Send + Sync {
    fn register<'a>(&'a self, registration: &'a Registration) -> RegistryFuture<'a>;
    fn unregister<'a>(&'a self, unregistration: &'a Unregistration) -> RegistryFuture<'a>;
}

/// `catalog_register` / `catalog_unregister` over the bus.
pub(crate) struct BusRegistry {
    pub client: Client,
}

impl BusRegistry {
    async fn ask(&self, subject: &'static str, body: Vec<u8>) -> Result<(), RegisterError> {
        let request = self.client.request(subject, body.into());
        let reply = match tokio::time::timeout(ASK_WITHIN, request).await {
            Err(_) => return Err(RegisterError::Slow),
            Ok(Err(e)) => {
                return Err(match e.kind() {
                    async_nats::RequestErrorKind::NoResponders => RegisterError::NobodyServes,
                    async_nats::RequestErrorKind::TimedOut => RegisterError::Slow,
                    _ => RegisterError::Other(e.to_string()),
                });
            }
            Ok(Ok(reply)) => reply,
        };
        let result: ToolResult = serde_json::from_slice(&reply.payload).map_err(|e| {
            RegisterError::Other(format!("the catalogue's reply is not a result: {e}"))
        })?;
        if result.is_error {
            return Err(RegisterError::Refused(result.text_content()));
        }
        Ok(())
    }
}

impl Registry for BusRegistry {
    fn register<'a>(&'a self, registration: &'a Registration) -> RegistryFuture<'a> {
        let mut body = serde_json::to_vec(registration).expect("a registration serialises");
        // Tools too large for one message on this bus are registered by name; discovery
        // then asks the module's own `tools` verb.
        if body.len() > self.client.server_info().max_payload && registration.specs.is_some() {
            let names_only = Registration {
                specs: None,
                ..registration.clone()
            };
            body = serde_json::to_vec(&names_only).expect("a registration serialises");
        }
        Box::pin(self.ask(catalog::REGISTER_SUBJECT, body))
    }

    fn unregister<'a>(&'a self, unregistration: &'a Unregistration) -> RegistryFuture<'a> {
        let body = serde_json::to_vec(unregistration).expect("an unregistration serialises");
        Box::pin(self.ask(catalog::UNREGISTER_SUBJECT, body))
    }
}

/// A serving instance's registration and where it goes.
pub(crate) struct Registrar {
    registry: Arc<dyn Registry>,
    registration: Registration,
}

impl Registrar {
    pub fn new(registry: Arc<dyn Registry>, registration: Registration) -> Self {
        Registrar {
            registry,
            registration,
        }
    }

    pub fn module(&self) -> &str {
        &self.registration.module
    }

    /// Registers (again): the catalogue stamps the time.
    pub async fn refresh(&self) -> Result<(), RegisterError> {
        self.registry.register(&self.registration).await
    }

    /// Removes this instance; the module itself stays listed until someone forgets it.
    pub async fn remove_instance(&self) {
        let u = Unregistration {
            module: self.registration.module.clone(),
            instance: self.registration.instance.clone(),
        };
        if let Err(e) = self.registry.unregister(&u).await {
            tracing::warn!(module = %u.module, "cannot remove the instance from the catalogue: {e}");
        }
    }

    /// Refreshes every `every`; after a failure, again sooner (1 s, doubling up to `every`),
    /// so a module that started before the catalogue is listed soon after it comes.
    pub async fn keep_fresh(&self, every: Duration, first_ok: bool) {
        let retry_from = Duration::from_secs(1).min(every);
        let mut wait = if first_ok { every } else { retry_from };
        let mut quiet = false;
        loop {
            tokio::time::sleep(wait).await;
            match self.refresh().await {
                Ok(()) => {
                    wait = every;
                    quiet = false;
                }
                Err(e) => {
                    // Said once per outage, not at every retry.
                    if !quiet {
                        tracing::warn!(module = %self.module(), "{e}; retrying");
                        quiet = true;
                    }
                    wait = if wait >= every {
                        retry_from
                    } else {
                        (wait * 2).min(every)
                    };
                }
            }
        }
    }
}

/// The catalogue bucket could be neither opened nor created.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot open the catalogue bucket {bucket} (is JetStream enabled for this account?): {source}"
)]
pub struct BucketError {
    pub bucket: &'static str,
    #[source]
    pub source: jetstream::context::CreateKeyValueError,
}

/// How many copies of the catalogue bucket a bus keeps: on a cluster, one per server up to
/// three (one server can go and the catalogue stays readable and writable), else one.
pub fn bucket_replicas(info: &async_nats::ServerInfo) -> usize {
    match info.cluster {
        Some(_) => info.connect_urls.len().clamp(1, 3),
        None => 1,
    }
}

/// How long opening the bucket keeps trying while JetStream cannot answer yet (the servers
/// of a new cluster first elect a leader).
const BUCKET_WITHIN: Duration = Duration::from_secs(30);

/// Opens the catalogue bucket, creating it when it does not exist yet, with as many copies
/// as [`bucket_replicas`] says; one made with fewer (on a bus that has grown into a cluster)
/// gets more.
pub async fn open_bucket(client: Client) -> Result<kv::Store, BucketError> {
    let config = kv::Config {
        bucket: catalog::BUCKET.to_owned(),
        description: "mesh catalogue: modules and their running instances".to_owned(),
        history: 1,
        ..Default::default()
    };
    open_bucket_with(client, catalog::BUCKET, config).await
}

/// Opens bucket `bucket`, creating it with `config` (its copies as [`bucket_replicas`] says)
/// when it does not exist yet, as [`open_bucket`] does the catalogue's.
pub async fn open_bucket_with(
    client: Client,
    bucket: &'static str,
    config: kv::Config,
) -> Result<kv::Store, BucketError> {
    let info = client.server_info();
    let mut replicas = bucket_replicas(&info);
    let js = jetstream::new(client);
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(100);
    loop {
        let config = kv::Config {
            num_replicas: replicas,
            ..config.clone()
        };
        match open_or_create(&js, bucket, config).await {
            Ok(store) => {
                more_copies(&js, bucket, replicas).await;
                return Ok(store);
            }
            // Without JetStream on the server nothing will change by waiting.
            Err(e) if !info.jetstream || started.elapsed() >= BUCKET_WITHIN => return Err(e),
            // Fewer JetStream servers than the addresses the server advertised (a host with
            // several interfaces advertises each): one copy fewer, at once.
            Err(e) if replicas > 1 && says(&e, "insufficient resources") => {
                replicas -= 1;
                tracing::info!(
                    "the catalogue bucket: fewer servers than counted; trying {replicas} copies"
                );
            }
            Err(e) => {
                tracing::debug!("the catalogue bucket cannot be opened yet: {e}; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Whether an error or any of its causes says `what`.
fn says(e: &(dyn std::error::Error + 'static), what: &str) -> bool {
    let mut at = Some(e);
    while let Some(e) = at {
        if e.to_string().contains(what) {
            return true;
        }
        at = e.source();
    }
    false
}

async fn open_or_create(
    js: &jetstream::Context,
    bucket: &'static str,
    config: kv::Config,
) -> Result<kv::Store, BucketError> {
    if let Ok(store) = js.get_key_value(bucket).await {
        return Ok(store);
    }
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another catalogue instance may have created it meanwhile.
        Err(create) => js.get_key_value(bucket).await.map_err(|_| BucketError {
            bucket,
            source: create,
        }),
    }
}

/// Gives the bucket's stream `replicas` copies if it has fewer; a failure is said and left
/// (the catalogue works on the copies it has).
async fn more_copies(js: &jetstream::Context, bucket: &str, replicas: usize) {
    let name = format!("KV_{bucket}");
    let Ok(mut stream) = js.get_stream(&name).await else {
        return;
    };
    let Ok(info) = stream.info().await else {
        return;
    };
    if info.config.num_replicas >= replicas {
        return;
    }
    let mut config = info.config.clone();
    config.num_replicas = replicas;
    match js.update_stream(config).await {
        Ok(_) => tracing::info!(
            replicas,
            "bucket {bucket} now has a copy on {replicas} servers"
        ),
        Err(e) => tracing::warn!("cannot give bucket {bucket} {replicas} copies: {e}"),
    }
}

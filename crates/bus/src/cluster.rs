//! The nats-servers of a mesh on one machine: one, or a cluster on loopback, as `mesh up`,
//! the tests and the load benchmark run them. For a cluster: ports chosen, a configuration
//! per server (the same accounts, a name, routes to the others, a JetStream directory of its
//! own), every server started together; any one stopped and started again, all reloaded.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_core::client::{Client, ConnectConfig};

use crate::layout::{self, ClusterNode, cluster_block};
use crate::natsd::{NatsServer, NatsdError, ReloadError};

/// The cluster's name in every server's configuration.
pub const CLUSTER_NAME: &str = "mesh";

/// The most servers `mesh up --cluster` runs on one machine.
pub const MAX_SERVERS: usize = 9;

/// Why the servers could not start, or take a new configuration.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("a mesh runs 1 to {MAX_SERVERS} servers on one machine, not {0}")]
    Size(usize),
    #[error("cannot find free ports on loopback: {0}")]
    Ports(std::io::Error),
    #[error("cannot write the configuration {path}: {source}")]
    Config {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("server {index}: {source}")]
    Server { index: usize, source: NatsdError },
    #[error("server {index}: {source}")]
    Reload { index: usize, source: ReloadError },
}

/// What server `index` gets: its client port (0: a free one), where its JetStream lives.
pub struct Slot<'a> {
    pub index: usize,
    pub port: u16,
    pub store_dir: &'a Path,
}

impl Slot<'_> {
    /// The port a configuration names: -1 (the server picks a free one) for 0.
    pub fn config_port(&self) -> i32 {
        if self.port == 0 {
            -1
        } else {
            i32::from(self.port)
        }
    }
}

/// One server's files and its place in the cluster.
struct Node {
    port: u16,
    store_dir: PathBuf,
    config: PathBuf,
    /// What a server of a cluster adds to the accounts; none for a lone server.
    block: Option<String>,
}

/// The running servers, in order.
pub struct Cluster {
    pub servers: Vec<NatsServer>,
    nodes: Vec<Node>,
}

impl Cluster {
    /// Starts `n` servers in `dir`, `accounts` rendering what every server has besides its
    /// place in the cluster. A lone server keeps `nats-server.conf`, `nats-server.log` and
    /// `jetstream/`; server `i` of a cluster `nats-server-<i>.conf`, `nats-server-<i>.log`
    /// and `jetstream/n<i>`. `first_port`, when given, is server 0's client port and server
    /// `i` has the `i`-th after it; else each has a free one.
    pub async fn start(
        n: usize,
        dir: &Path,
        binary: PathBuf,
        first_port: Option<u16>,
        accounts: impl Fn(&Slot) -> String,
    ) -> Result<Cluster, ClusterError> {
        if !(1..=MAX_SERVERS).contains(&n) {
            return Err(ClusterError::Size(n));
        }
        let mut attempt = 1;
        loop {
            let cluster = Cluster {
                servers: Vec::new(),
                nodes: nodes(n, dir, first_port)?,
            };
            match cluster.started(&binary, &accounts).await {
                // A route port found free was taken by another process before its server
                // bound it: new ports, again (ports given by the caller are theirs to fix).
                Err(e) if n > 1 && attempt < PORT_ATTEMPTS && e.port_taken() => {
                    tracing::debug!(attempt, error = %e, "a port was taken; choosing others");
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    /// Writes the configurations and starts every server of `self.nodes`.
    async fn started(
        mut self,
        binary: &Path,
        accounts: &impl Fn(&Slot) -> String,
    ) -> Result<Cluster, ClusterError> {
        self.rewrite(accounts)?;
        let starting = self.nodes.iter().enumerate().map(|(index, node)| {
            let (binary, config) = (binary.to_owned(), node.config.clone());
            let log = config.with_extension("log");
            let port = (node.port != 0).then_some(node.port);
            async move {
                NatsServer::start_using(binary, &config, port, &log)
                    .await
                    .map_err(|source| ClusterError::Server { index, source })
            }
        });
        // Together: each waits for nothing but itself, and routes retry until the others
        // are there.
        self.servers = futures_util::future::try_join_all(starting).await?;
        Ok(self)
    }

    /// Writes every server's configuration again from `accounts`, each keeping its place
    /// (and its port: a server that picked a free one keeps that one).
    pub fn rewrite(&self, accounts: &impl Fn(&Slot) -> String) -> Result<(), ClusterError> {
        for (index, node) in self.nodes.iter().enumerate() {
            let port = self.servers.get(index).map_or(node.port, NatsServer::port);
            let slot = Slot {
                index,
                port,
                store_dir: &node.store_dir,
            };
            let mut config = accounts(&slot);
            if let Some(block) = &node.block {
                config.push('\n');
                config.push_str(block);
            }
            mesh_core::client::write_private(&node.config, &config).map_err(|source| {
                ClusterError::Config {
                    path: node.config.clone(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// Has every server read its configuration again; the first refusal ends it.
    pub async fn reload(&mut self) -> Result<(), ClusterError> {
        for (index, server) in self.servers.iter_mut().enumerate() {
            server
                .reload()
                .await
                .map_err(|source| ClusterError::Reload { index, source })?;
        }
        Ok(())
    }

    /// Server `index`'s configuration file.
    pub fn config(&self, index: usize) -> &Path {
        &self.nodes[index].config
    }

    /// Every server's client URL, comma-separated: what a context names.
    pub fn urls(&self) -> String {
        self.servers
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The servers' process ids, in order.
    pub fn pids(&self) -> Vec<u32> {
        self.servers.iter().filter_map(NatsServer::pid).collect()
    }

    /// Waits until a server exits by itself: which, and how.
    pub async fn exited(&mut self) -> (usize, Option<std::process::ExitStatus>) {
        let waits = self
            .servers
            .iter_mut()
            .enumerate()
            .map(|(i, s)| Box::pin(async move { (i, s.exited().await) }));
        futures_util::future::select_all(waits).await.0
    }

    /// Waits until a client connecting to server 0 with `config` hears of every server (the
    /// routes are up, so what starts next sees the whole cluster: the catalogue keeps its
    /// bucket on as many servers as it hears of); false if that did not happen `within`.
    pub async fn formed(&self, config: &ConnectConfig, within: Duration) -> bool {
        let n = self.servers.len();
        if n < 2 {
            return true;
        }
        let config = ConnectConfig {
            server: Some(self.servers[0].url()),
            ..config.clone()
        };
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            if let Ok(client) = Client::connect(&config).await {
                let heard = client.nats().server_info().connect_urls.len();
                let _ = client.nats().drain().await;
                if heard >= n {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Stops every server cleanly (SIGTERM), each within `grace`.
    pub async fn terminate(&mut self, grace: Duration) {
        let stopping = self.servers.iter_mut().map(|s| s.terminate(grace));
        futures_util::future::join_all(stopping).await;
    }
}

/// Where each of `n` servers lives and listens. A cluster's client ports are the servers' own
/// choice unless `first_port` names them; its route ports are found free now, since every
/// server's configuration names them all.
fn nodes(n: usize, dir: &Path, first_port: Option<u16>) -> Result<Vec<Node>, ClusterError> {
    if n == 1 {
        return Ok(vec![Node {
            port: first_port.unwrap_or(0),
            store_dir: dir.join("jetstream"),
            config: dir.join("nats-server.conf"),
            block: None,
        }]);
    }
    let routes: Vec<String> = free_ports(n)
        .map_err(ClusterError::Ports)?
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    // Made for this start: every server starts (and restarts) from these files.
    let secret = layout::route_secret();
    Ok((0..n)
        .map(|i| Node {
            port: first_port.map_or(0, |p| p.saturating_add(i as u16)),
            store_dir: dir.join("jetstream").join(format!("n{i}")),
            config: dir.join(format!("nats-server-{i}.conf")),
            block: Some(cluster_block(&ClusterNode {
                cluster: CLUSTER_NAME.to_owned(),
                server: format!("{CLUSTER_NAME}-{i}"),
                listen: routes[i].clone(),
                routes: routes.clone(),
                secret: secret.clone(),
                tls: None,
            })),
        })
        .collect())
}

/// How many times a cluster starts on newly found route ports before saying a port was taken.
const PORT_ATTEMPTS: u32 = 3;

impl ClusterError {
    /// A server exited because a port it was to listen on was in use.
    fn port_taken(&self) -> bool {
        matches!(self, ClusterError::Server { source: NatsdError::Exited { log }, .. }
            if log.contains("address already in use"))
    }
}

/// `n` ports free on loopback now (each bound and let go: a port another process takes in
/// between makes that server's start fail, and says so).
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real nats-server told to listen where another process already does exits with the
    /// words the retry looks for.
    #[tokio::test]
    async fn a_port_another_process_holds_is_told_as_taken() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("nats-server.conf");
        std::fs::write(&config, "").unwrap();
        let binary = NatsServer::binary().unwrap_or_else(|e| panic!("{e}"));
        let log = dir.path().join("nats-server.log");
        let source = match NatsServer::start_using(binary, &config, Some(port), &log).await {
            Ok(_) => panic!("nats-server started on a port another process holds"),
            Err(e) => e,
        };
        let error = ClusterError::Server { index: 0, source };
        assert!(error.port_taken(), "not told as a taken port: {error}");
        let other = ClusterError::Server {
            index: 0,
            source: NatsdError::Exited {
                log: "[FTL] some other failure".into(),
            },
        };
        assert!(!other.port_taken());
    }
}

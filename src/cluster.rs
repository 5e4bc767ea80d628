//! A cluster of nats-servers on loopback, as `mesh up --cluster`, the tests and the load
//! benchmark run one: ports chosen, a configuration per server (the same accounts, a name,
//! routes to the others, a JetStream directory of its own), every server started, any one
//! stopped and started again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::layout::{ClusterNode, cluster_block};
use crate::natsd::{NatsServer, NatsdError};

/// The cluster's name in every server's configuration.
pub const CLUSTER_NAME: &str = "mesh";

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("a cluster needs at least 2 servers, not {0}")]
    TooSmall(usize),
    #[error("cannot find free ports on loopback: {0}")]
    Ports(std::io::Error),
    #[error("cannot write the configuration {path}: {source}")]
    Config {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("server {index} of the cluster: {source}")]
    Server { index: usize, source: NatsdError },
}

/// The servers of a running cluster, in order; server `i` is named `<prefix>-<i>`.
pub struct Cluster {
    pub servers: Vec<NatsServer>,
}

/// What server `index` of a cluster gets: its client port, and where its JetStream lives.
pub struct Slot<'a> {
    pub index: usize,
    pub port: u16,
    pub store_dir: &'a Path,
}

impl Cluster {
    /// Starts `n` servers in `dir` (a configuration, a log and a JetStream directory each,
    /// `n<i>.conf`, `n<i>.log`, `jetstream/n<i>`), `accounts` rendering what every server
    /// has besides its cluster block. `ports`, when given, are the client ports to use.
    pub async fn start(
        n: usize,
        dir: &Path,
        binary: PathBuf,
        ports: Option<&[u16]>,
        accounts: impl Fn(&Slot) -> String,
    ) -> Result<Cluster, ClusterError> {
        if n < 2 {
            return Err(ClusterError::TooSmall(n));
        }
        let client_ports = match ports {
            Some(p) => p.to_vec(),
            None => free_ports(n).map_err(ClusterError::Ports)?,
        };
        let route_ports = free_ports(n).map_err(ClusterError::Ports)?;
        let routes: Vec<String> = route_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let mut starting = Vec::with_capacity(n);
        for (index, route) in routes.iter().enumerate() {
            let store_dir = dir.join("jetstream").join(format!("n{index}"));
            let slot = Slot {
                index,
                port: client_ports[index],
                store_dir: &store_dir,
            };
            let node = ClusterNode {
                cluster: CLUSTER_NAME.to_owned(),
                server: format!("{CLUSTER_NAME}-{index}"),
                listen: route.clone(),
                routes: routes.clone(),
            };
            let config = format!("{}\n{}", accounts(&slot), cluster_block(&node));
            let path = dir.join(format!("n{index}.conf"));
            mesh_core::client::write_private(&path, &config).map_err(|source| {
                ClusterError::Config {
                    path: path.clone(),
                    source,
                }
            })?;
            let log = dir.join(format!("n{index}.log"));
            let binary = binary.clone();
            let port = client_ports[index];
            starting.push(async move {
                NatsServer::start_using(binary, &path, Some(port), &log)
                    .await
                    .map_err(|source| ClusterError::Server { index, source })
            });
        }
        // Together: each waits for nothing but itself, and routes retry until the others
        // are there.
        let servers = futures_util::future::try_join_all(starting).await?;
        Ok(Cluster { servers })
    }

    /// Every server's client URL, comma-separated: what a context names.
    pub fn urls(&self) -> String {
        self.servers
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Stops every server cleanly (SIGTERM), each within `grace`.
    pub async fn terminate(&mut self, grace: Duration) {
        let stopping = self.servers.iter_mut().map(|s| s.terminate(grace));
        futures_util::future::join_all(stopping).await;
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

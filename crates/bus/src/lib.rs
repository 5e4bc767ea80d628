//! mesh-bus: the bus's own house. Who may call what (`grants`), written for nats-server as
//! accounts (`layout`, `natsconf`) and read back (`audit`); the call log nats-server keeps
//! (`calllog`); the servers `mesh up` runs (`natsd`, `cluster`) and the state directory it
//! keeps (`statedir`, `learned`). Built on `mesh-core` alone; no relay depends on it.

pub mod audit;
pub mod calllog;
pub mod callout;
pub mod cluster;
pub mod duration;
pub mod grants;
pub mod jwt;
pub mod layout;
pub mod learned;
pub mod natsconf;
pub mod natsd;
pub mod operator;
pub mod process;
pub mod site;
pub mod statedir;

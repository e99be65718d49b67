//! NFQUEUE workers: one OS thread per queue, each running the one loop of
//! [`runtime`] with a handler. [`connection`] answers the first packet of
//! each new connection with the verdict of the pure [`crate::decide`]
//! step; [`dns`] learns the answers of DNS replies into the FQDN sets
//! ([`fqdn_sets`]) before it releases them; [`l7`] follows connections
//! under L7 rules request by request, closing denied ones through
//! [`inject`]. Workers never block on I/O and never log per packet: they
//! count, and hand audit records to a bounded channel.

pub mod connection;
pub mod dns;
pub mod fqdn_sets;
pub mod inject;
pub mod l7;
pub mod runtime;

pub use connection::{ConnectionCounters, Observers, Worker, WorkerConfig};
pub use dns::{DnsCounters, DnsWorker, DnsWorkerConfig};
pub use l7::{L7Counters, L7WorkerConfig};
pub use runtime::{Handler, Queue, QueueCounters, QueueError, QueueSpec, Verdicts};

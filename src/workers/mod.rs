//! NFQUEUE workers: one OS thread per queue. [`connection`] reads the
//! first packet of each new connection and answers with the verdict of the
//! pure [`crate::decide`] step; [`dns`] learns the answers of DNS replies
//! into the FQDN sets before it releases them; [`l7`] follows connections
//! under L7 rules request by request. Workers never block on I/O and never
//! log per packet: they count, and hand audit records to a bounded channel.

pub mod connection;
pub mod dns;
pub mod l7;
pub mod runtime;

pub use connection::{ConnectionCounters, Observers, Worker, WorkerConfig};
pub use dns::{DnsCounters, DnsWorker, DnsWorkerConfig};
pub use l7::{L7Counters, L7Worker, L7WorkerConfig};
pub use runtime::{Handler, Queue, QueueCounters, QueueError, QueueSpec, Verdicts};

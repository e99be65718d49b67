//! NFQUEUE workers: one OS thread per queue, each the [`runtime`] loop with
//! a handler: [`connection`] (new connections), [`dns`] (learn FQDN answers
//! before the release) and [`l7`] (request by request); and the
//! [`resolver`] thread that asks for exact FQDN names ahead; the threads
//! the workers hand writes to without waiting ([`cache`]: verdict-cache
//! entries, [`fqdn_sets`]: learned addresses, [`audit`]: the audit log,
//! [`observe`]: the decisions `tollgate observe` shows). The runtime
//! restarts a worker that panics; the [`watchdog`] ends the process when
//! one stops draining. Workers never block on I/O and never log per
//! packet: they count and hand audit records on.

pub mod audit;
pub mod cache;
pub mod connection;
pub mod dns;
#[cfg(debug_assertions)]
mod fault;
pub mod fqdn_sets;
pub mod inject;
pub mod l7;
pub mod nflog;
pub mod nfqueue;
pub mod observe;
pub mod resolver;
pub(crate) mod route;
pub mod runtime;
pub mod watchdog;

pub use crate::fqdn::DnsCounters;
pub use connection::{ConnectionCounters, Observers, Worker};
pub use dns::DnsWorker;
pub use l7::L7Counters;
pub use nfqueue::Queue;
pub use runtime::{Handler, QueueCounters, QueueError, QueueSpec, Verdicts};

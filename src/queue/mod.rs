//! NFQUEUE workers: one OS thread per queue reads the first packet of each
//! new connection, reduces it to a [`crate::flow::Flow`], asks the current
//! policy, and answers with a verdict and mark. The per-packet decision is
//! the pure [`step`], which also returns the decision's audit records;
//! [`worker`] is the thin socket loop around it. Workers never block on
//! I/O and never log per packet: they count, and hand audit records to a
//! bounded channel. [`dns`] is the DNS reply queue that feeds the FQDN
//! mirror connection workers consult.

pub mod dns;
pub mod packet;
pub mod step;
pub mod worker;

pub use dns::{DnsStats, DnsWorker, DnsWorkerConfig, FqdnMirror};
pub use packet::{parse_flow, PacketError};
pub use step::{local_side, step, Action, DecidedBy, Outcome, Policy, Ruling, Step};
pub use worker::{
    parse_kernel_counters, KernelCounters, Observers, QueueError, QueueStats, Worker, WorkerConfig,
    PROC_QUEUES,
};

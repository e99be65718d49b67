//! NFQUEUE workers: one OS thread per queue reads the first packet of each
//! new connection, reduces it to a [`crate::flow::Flow`], asks the current
//! policy, and answers with a verdict and mark. The per-packet decision is
//! the pure [`step`]; [`worker`] is the thin socket loop around it. Workers
//! never block on a lock and never log per packet: they count.

pub mod packet;
pub mod step;
pub mod worker;

pub use packet::{parse_flow, PacketError};
pub use step::{step, Action, Admit, Outcome, Policy, Step};
pub use worker::{
    parse_kernel_counters, KernelCounters, QueueError, QueueStats, Worker, WorkerConfig,
    PROC_QUEUES,
};

//! What the agent tells operators about itself while it runs: counter sets
//! declared once ([`counters`]) and registered per queue, the kernel's
//! queue counters ([`kernel`]), the Prometheus metrics ([`metrics`]) and
//! their HTTP endpoint ([`http`]). Nothing here decides anything, and
//! nothing here imports a worker: workers hand their counters in.

pub mod counters;
pub mod http;
pub mod kernel;
pub mod metrics;

pub use counters::{CounterSet, QueueSnapshot, Registry};
pub use metrics::{
    AuditSkip, Metrics, ReloadResult, WorkerMetrics, MAX_RULE_SERIES, TIER_K8S, TIER_NONE,
};

//! What the running agent tells operators: counter sets declared once
//! ([`counters`]), the kernel's queue counters ([`kernel`]), Prometheus
//! metrics ([`metrics`]) and their endpoint ([`http`]). It decides nothing
//! and imports no worker: workers hand their counters in.

pub mod counters;
pub mod http;
pub mod kernel;
pub mod metrics;

pub use counters::{CounterSet, QueueSnapshot, Registry};
pub use metrics::{
    AuditSkip, Metrics, ReloadResult, WorkerMetrics, MAX_RULE_SERIES, TIER_K8S, TIER_NONE,
};

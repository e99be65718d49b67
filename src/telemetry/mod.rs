//! What the running agent tells operators: counter sets declared once
//! ([`counters`]) and registered per queue ([`registry`]), the kernel's
//! queue counters ([`kernel`]), the workers' heartbeats and the probes
//! ([`health`]), Prometheus metrics ([`metrics`]) and their endpoint with
//! `/livez` and `/readyz` ([`http`]), the process's own figures ([`process`]). It decides nothing
//! and imports no worker: workers hand their counters in.

pub mod health;
pub mod http;
pub mod kernel;
pub mod metrics;
pub mod process;
pub mod registry;

pub use crate::counters::CounterSet;
pub use health::{Check, Health, Heartbeat, Probes};
pub use metrics::{
    AuditSkip, KubeEvent, Metrics, ReloadResult, WorkerMetrics, MAX_RULE_SERIES, TIER_K8S,
    TIER_NONE,
};
pub use registry::{QueueSnapshot, Registry};

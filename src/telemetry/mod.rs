//! What the running agent tells operators: the counter sets each subsystem
//! declares once with `counters!` (`crate::counters`), registered per queue
//! or per subsystem ([`registry`]), the kernel's queue counters
//! ([`kernel`]), the workers' heartbeats and the probes ([`health`]),
//! Prometheus metrics ([`metrics`]) and their endpoint with `/livez` and
//! `/readyz` ([`http`]), the process's own figures ([`process`]). It
//! decides nothing and imports no worker or source: they hand their
//! counters in.

pub mod health;
pub mod http;
pub mod kernel;
pub mod metrics;
pub mod process;
pub mod registry;

pub use crate::counters::CounterSet;
pub use health::{Check, Health, Heartbeat, Probes};
pub use metrics::{Metrics, WorkerMetrics, MAX_RULE_SERIES, TIER_K8S, TIER_NONE};
pub use registry::{QueueSnapshot, Registry};

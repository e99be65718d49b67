//! # tollgate
//!
//! A Linux node firewall that enforces Antrea-native network policies,
//! Kubernetes NetworkPolicy and the network-policy-api kinds with the
//! host's own netfilter: iptables sends new connections, DNS queries and
//! replies and L7 payload to NFQUEUE, and worker threads decide them
//! against a compiled ruleset.
//!
//! ```text
//!  policy file / API object ──▶ source ──▶ Snapshot ──▶ validate ──▶ compile ──▶ Ruleset ──▶ datapath plan ──▶ kernel
//!                                (edge)    (core)        (core)       (core)     (core)     (edge, pure)     (edge)
//!
//!  queued packet ──▶ packet::Queued ──▶ Flow ──▶ decide / fqdn::step / l7::Gate ──▶ Verdict (+ set writes, audit)
//!     (workers, edge)       (core)        (core)            (core)                        (workers apply, in order)
//! ```
//!
//! ## The core: the `tollgate-core` crate (`core/`)
//! Pure: no I/O, no clock, no `unsafe`, none of the clients below in its
//! dependency tree. Its modules are re-exported here under their own names
//! (`crate::model`, `crate::decide`, …), so the edge and the tests name
//! them as before; `core/src/lib.rs` says what each must never do.
//!
//! ## The edge: thin, tested end to end in network namespaces
//! - [`workers`]: one NFQUEUE runtime and its connection, DNS and L7
//!   handlers, and the threads the workers hand writes to (verdict cache,
//!   FQDN sets, the audit log); never decides anything a core step did not.
//! - [`datapath`]: plans (pure) and installs the iptables chains and ipsets
//!   (`datapath::kernel`, the only code that runs iptables/ipset); never
//!   touches a rule, chain or set it does not own.
//! - [`source`]: the policy directory and the Kubernetes API to snapshots;
//!   never judges an object.
//! - [`agent`]: `tollgate run` wired — start, serve, stop — with the
//!   reconciler over a `Kernel` trait; never writes the kernel but through
//!   `datapath`.
//! - [`config`]: the agent configuration in sections; [`cli`]: every clap
//!   type; [`commands`]: every subcommand but `run`, and its rendering;
//!   [`status`]: the status API (protocol, server, client);
//!   [`telemetry`]: counters declared once, metrics and their endpoint;
//!   [`logging`]; [`privilege`]: drops every capability but `CAP_NET_ADMIN`
//!   and `CAP_NET_RAW` before any thread starts.
//! - `sys`: the one module allowed `unsafe`, one safe wrapper per system
//!   call.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub use tollgate_core::{
    audit, compile, counters, decide, decode, dns, explain, fqdn, http, l7, marks, model, netlink,
    observe, packet, review, ruleset, selection, suggest, tls, validate,
};

pub mod agent;
pub mod cli;
pub mod commands;
pub mod config;
pub mod controller;
pub mod datapath;
pub mod logging;
pub mod privilege;
pub mod source;
pub mod status;
mod sys;
pub mod telemetry;
pub mod workers;

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
//!                                (edge)    (model)       (core)       (core)     (core)        (core)         (edge)
//!
//!  queued packet ──▶ packet::Queued ──▶ Flow ──▶ decide / fqdn::step / l7::Gate ──▶ Verdict (+ set writes, audit)
//!     (workers, edge)       (core)        (core)            (core)                        (workers apply, in order)
//! ```
//!
//! ## The core: pure, unit-tested without root
//! Never does I/O, never reads the clock (time is passed in), never runs a
//! program — `clippy.toml` fences the last two, `unsafe_code` the first
//! kind of escape.
//! - [`model`]: the typed objects (Antrea CRDs, K8s NetworkPolicy,
//!   inventory); never judges them.
//! - [`validate`]: Antrea's admission rules; never changes an object.
//! - [`compile`]: selectors and groups to addresses, rules to effective
//!   priority order; never reads a packet.
//! - [`ruleset`]: the immutable compiled [`ruleset::Ruleset`] and its
//!   classifier (also behind `tollgate trace`); never mutated once built.
//! - [`explain`]: what `trace` and `get endpoints` answer, one function for
//!   the offline command and the running agent (names, named ports, every
//!   rule consulted); never reads a file or the clock.
//! - [`packet`]: bytes to [`packet::Flow`] and TCP segments; never panics on
//!   any input.
//! - [`marks`]: the mark bits and the fail mode; never reads configuration.
//! - [`decide`]: the first packet of a connection to a verdict, mark and
//!   audit records; never blocks.
//! - [`dns`], [`fqdn`]: DNS answers to learned addresses and the set writes
//!   that must happen before a reply is released; never sends a query.
//! - [`http`], [`tls`], [`l7`]: every request on an L7 connection decided,
//!   segments withheld until their head is complete; never lets an
//!   uninspected byte through, never buffers a body.
//! - [`audit`]: the `np.log` line format, dedup and rate limit (its
//!   `writer` is the one edge file inside it).
//!
//! ## The edge: thin, tested end to end in network namespaces
//! - [`workers`]: one NFQUEUE runtime and its connection, DNS and L7
//!   handlers; never decides anything a core step did not.
//! - [`datapath`]: plans (pure) and installs the iptables chains and ipsets
//!   (`datapath::kernel`, the only code that runs iptables/ipset); never
//!   touches a rule, chain or set it does not own.
//! - [`source`]: the policy directory and the Kubernetes API to snapshots;
//!   never judges an object.
//! - [`agent`]: `tollgate run` wired — start, serve, stop — with the
//!   reconciler over a `Kernel` trait; never writes the kernel but through
//!   `datapath`.
//! - [`config`]: the agent configuration in sections; [`cli`]: every clap
//!   type; [`commands`]: the reading subcommands rendered; [`status`]: the status API;
//!   [`telemetry`]: counters declared once, metrics and their endpoint;
//!   [`logging`]; [`privilege`]: drops every capability but `CAP_NET_ADMIN`
//!   and `CAP_NET_RAW` before any thread starts.
//! - `sys`: the one module allowed `unsafe`, one safe wrapper per system
//!   call.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod agent;
pub mod audit;
pub mod cli;
pub mod commands;
pub mod compile;
pub mod config;
pub mod datapath;
pub mod decide;
pub mod dns;
pub mod explain;
pub mod fqdn;
pub mod http;
pub mod l7;
pub mod logging;
pub mod marks;
pub mod model;
pub mod packet;
pub mod privilege;
pub mod ruleset;
pub mod source;
pub mod status;
mod sys;
pub mod telemetry;
pub mod tls;
pub mod validate;
pub mod workers;

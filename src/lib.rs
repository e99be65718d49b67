//! # tollgate
//!
//! A Linux node firewall that enforces Antrea-native network policies with
//! netfilter. Data flows through the modules in this order:
//!
//! 1. [`source`] reads a snapshot of objects (YAML directory).
//! 2. [`model`] holds the typed objects: Antrea CRDs, K8s NetworkPolicy, inventory.
//! 3. [`validate`] applies the admission rules of the Antrea spec.
//! 4. [`compile`] resolves selectors and groups and orders rules into an
//!    immutable [`ruleset::Ruleset`].
//! 5. [`ruleset`] decides a [`flow::Flow`] against it (pure; also behind
//!    `tollgate trace`).
//!
//! Everything listed so far is pure and unit-tested without root, as are
//! [`dns`] and [`fqdn`] (learning addresses from DNS answers), [`http`] and
//! [`tls`] (L7 request and ClientHello matching) and [`audit`] (the
//! `np.log` format). The agent ([`agent`], `tollgate run`, configured by
//! [`config`]) puts them to work:
//! [`datapath`] plans and installs the iptables chains and ipsets that send
//! new connections of enforced endpoints to NFQUEUE, and [`queue`] workers
//! decide them with the current ruleset, handing audit records to the
//! [`audit`] writer and counts to [`metrics`]; while rules have `fqdn`
//! peers, DNS replies go to a queue of their own, whose worker learns the
//! answers into the FQDN ipsets and the mirror the classifier reads before
//! releasing each reply; connections allowed by L7 rules are followed
//! request by request on another queue by [`l7`]. [`status`] answers the
//! CLI about the running agent over a Unix socket; [`logging`] sets up the
//! operational log; [`privilege`] reduces the agent to `CAP_NET_ADMIN` and
//! `CAP_NET_RAW` before it starts any of this.
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

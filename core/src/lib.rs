//! # tollgate-core
//!
//! tollgate's pure core: everything that decides, and nothing that does
//! I/O. The agent (the `tollgate` crate) feeds it objects, packets and the
//! time, and carries out what it returns.
//!
//! ```text
//!  objects ──▶ model ──▶ validate ──▶ compile ──▶ ruleset::Ruleset ──▶ explain (trace, get)
//!  packet bytes ──▶ packet::Flow / Segment ──▶ decide / fqdn::step / l7::Gate ──▶ verdict, set writes, audit
//! ```
//!
//! Never does I/O, never reads the clock (time is passed in), never runs a
//! program: `unsafe` is forbidden here and `clippy.toml` bans the clock and
//! `Command`; `tests/layering.rs` checks that no client, runtime or TLS
//! crate is in this crate's dependency tree. Each module says what it must
//! never do:
//! - [`model`]: the typed objects (Antrea CRDs, K8s NetworkPolicy,
//!   network-policy-api, inventory); never judges them.
//! - [`decode`]: a file's YAML/JSON text to typed objects, each undecodable
//!   document a problem naming it; never reads a file.
//! - [`validate`]: Antrea's admission rules; never changes an object.
//! - [`compile`]: selectors and groups to addresses, rules to effective
//!   priority order; never reads a packet.
//! - [`ruleset`]: the immutable compiled [`ruleset::Ruleset`] and its
//!   classifier (also behind `tollgate trace`); never mutated once built.
//! - [`explain`]: what `trace` and `get endpoints` answer, one function for
//!   the offline command and the running agent; never reads a file.
//! - [`review`]: `tollgate diff` and `get matrix`, every flow whose
//!   verdict two snapshots decide differently, found exhaustively and
//!   decided by the classifier; never samples, never matches a rule itself.
//! - [`packet`]: bytes to [`packet::Flow`] and TCP segments, and the
//!   NFQUEUE netlink wire format; never panics on any input.
//! - [`marks`]: the mark bits and the fail mode; never reads configuration.
//! - [`decide`]: the first packet of a connection to a verdict, mark and
//!   audit records; never blocks.
//! - [`dns`], [`fqdn`]: DNS answers to learned addresses and the set writes
//!   that must happen before a reply is released; never sends a query.
//! - [`http`], [`tls`], [`l7`]: every request on an L7 connection decided,
//!   segments withheld until their head is complete; never lets an
//!   uninspected byte through, never buffers a body.
//! - [`netlink`]: the netlink wire format (messages, attributes, errors)
//!   of the NFQUEUE, ipset and route sockets; never opens a socket.
//! - [`audit`]: the `np.log` line format, dedup and rate limit; never
//!   writes a file.
//! - [`observe`]: the decisions `tollgate observe` shows (the record a
//!   worker hands over, the event, the filter, the bounded history);
//!   never holds more than its capacity.
//! - [`counters`]: counter sets declared once (the `counters!` macro), read
//!   by metrics, status and the shutdown log; never names a Prometheus type.
//! - [`suggest`]: the known name nearest to a misspelt one, for "did you
//!   mean" hints; never changes a name.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod audit;
pub mod compile;
pub mod counters;
pub mod decide;
pub mod decode;
pub mod dns;
pub mod explain;
pub mod fqdn;
pub mod http;
pub mod l7;
pub mod marks;
pub mod model;
pub mod netlink;
pub mod observe;
pub mod packet;
pub mod review;
pub mod ruleset;
pub mod selection;
pub mod suggest;
pub mod tls;
pub mod validate;

//! Change review: what `tollgate diff` and `tollgate get matrix` answer,
//! from the enforcement engine itself.
//!
//! A [`Side`] is a snapshot compiled for every Node it names, as each
//! Node's agent would compile it; [`diff`] finds every flow whose verdict
//! differs between two sides — exhaustively, without sampling: endpoints
//! grouped by what the rules of both sides can tell apart, transports cut
//! at every boundary of those rules, and one flow per piece decided by
//! both sides with [`crate::ruleset::Ruleset::classify`] (`engine.rs`
//! says why a piece's flows all share its decision). [`matrix`] decides
//! every pair of endpoints on a few ports. Pure: no I/O, no clock; the
//! edge reads the inputs and renders the answers.
//!
//! - `side.rs`: [`Side`], one side compiled per Node, and its decision
//!   of a flow across the cluster;
//! - `universe.rs`: the points flows go from and to (endpoint addresses,
//!   ClusterIPs, the pieces ipBlocks cut the address space into, FQDN
//!   selectors);
//! - `keys.rs`: rule and rule-list contents compared across sides, and
//!   which rules a point is a peer of;
//! - `fields.rs`: protocols and port (type, group) intervals;
//! - `engine.rs`: the comparison; `rows.rs`: its cells as merged,
//!   named rows; `report.rs`: the JSON contract;
//! - `matrix.rs`: `get matrix`.
//!
//! What it cannot decide statically it marks: a destination given by an
//! FQDN selector is symbolic (`fqdn:PATTERN`, uncertain `dns`: which
//! addresses it is depends on DNS answers), and an allow subject to L7
//! rules lists the rules' requests (uncertain `l7`: each request is
//! decided on the wire).

mod engine;
mod fields;
mod keys;
mod matrix;
mod report;
mod rows;
mod side;
pub(crate) mod universe;

pub use fields::Protocol;
pub use matrix::{matrix, rule_ports, Mark, Matrix, MatrixPort};
pub use report::{Change, ChangeKind, Effect, Report, Summary, Uncertain};
pub use side::{rule_text, EndpointInfo, Side, Verdicts};

/// Every change from `before` to `after`, merged into rows as far as they
/// stay exact (`expand`: one row per pair of endpoint names).
pub fn diff(before: &Side, after: &Side, expand: bool) -> Report {
    let engine = engine::Engine::run(before, after);
    Report::new(rows::changes(&engine, expand))
}

#[cfg(test)]
mod tests;

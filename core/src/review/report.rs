//! What `tollgate diff` reports — its JSON contract, which scripts and CI
//! jobs read (documented in `docs/guide/running.md`, "Reviewing a change";
//! keep it stable: add
//! optional fields, never change or remove one).
//!
//! ```json
//! {"changes": [{"from": ["frontend/client1"], "to": ["backend/web"],
//!   "protocol": "TCP", "ports": ["80", "8000-8080"],
//!   "before": {"verdict": "Allow", "rule": "…"},
//!   "after": {"verdict": "Drop", "rule": null},
//!   "uncertain": null}],
//!  "summary": {"opened": 0, "closed": 1, "changed": 0}}
//! ```

use serde::{Deserialize, Serialize};

/// A change review: every change, opened first, and how many of each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub changes: Vec<Change>,
    pub summary: Summary,
}

/// How many changes open, close or otherwise change traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub opened: usize,
    pub closed: usize,
    pub changed: usize,
}

/// One change: every flow from each of `from` to each of `to` over the
/// protocol and ports was decided `before` and is decided `after`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// `namespace/name` of Pods, ExternalEntities and containers,
    /// `node:NAME` of Nodes, networks (CIDR text) for addresses that are
    /// no endpoint, `fqdn:PATTERN` for the addresses an FQDN selector's
    /// names resolve to. A name holding only some of its endpoint's
    /// addresses of the family carries them: `node:n1[10.0.0.1]`.
    pub from: Vec<String>,
    pub to: Vec<String>,
    /// `TCP`, `UDP`, `SCTP`, `ICMP`, `IGMP`, `IP` (any other protocol), or
    /// `any` (all of them, every port).
    pub protocol: String,
    /// Destination ports and ranges (`80`, `8000-8080`); ICMP `type T`
    /// [`code C`]; IGMP `type T` [`group G`]; `any`; empty for `IP` and
    /// `any`.
    pub ports: Vec<String>,
    /// The client's ports when the change holds for some only
    /// (`sourcePort`); absent when it holds whatever the source port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_ports: Vec<String>,
    /// `IPv4` or `IPv6` when the change holds for one family only and the
    /// endpoints have addresses of both; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    pub before: Effect,
    pub after: Effect,
    /// `dns`: the destination is an FQDN selector (what its names resolve
    /// to decides which addresses this is); `l7`: a side allows subject to
    /// L7 rules (each request is decided on the wire); `null`: certain.
    pub uncertain: Option<Uncertain>,
    /// The Namespace the change is listed under (the destination's, else
    /// the source's); not part of the JSON.
    #[serde(skip)]
    pub namespace: Option<String>,
}

/// How one side decides the change's flows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effect {
    /// `Allow`, `Drop` or `Reject` (a `Pass` resolved to where it lands).
    pub verdict: String,
    /// `Kind:namespace/name rule NAME (tier T)`, `isolated by
    /// K8sNetworkPolicy:…`, or `null` when no policy decides.
    pub rule: Option<String>,
    /// When allowed subject to L7 rules: each deciding rule's
    /// `l7Protocols`, alternatives separated by ` | ` (`http GET
    /// www.example.com/api/*`, `tls sni=*.example.com`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub l7: Vec<String>,
}

/// What the diff cannot decide statically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Uncertain {
    Dns,
    L7,
}

/// Whether a change opens, closes or otherwise changes traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Denied before, allowed after (an L7-constrained allow included).
    Opened,
    /// Allowed before, denied after.
    Closed,
    /// Drop and Reject swapped, or the L7 constraints changed.
    Changed,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Opened => "opened",
            ChangeKind::Closed => "closed",
            ChangeKind::Changed => "changed",
        }
    }
}

impl Change {
    pub fn kind(&self) -> ChangeKind {
        match (
            self.before.verdict == "Allow",
            self.after.verdict == "Allow",
        ) {
            (false, true) => ChangeKind::Opened,
            (true, false) => ChangeKind::Closed,
            _ => ChangeKind::Changed,
        }
    }
}

impl Report {
    /// The report of `changes`, sorted: by Namespace (cluster-wide ones
    /// last), opened first, then closed, then changed.
    pub fn new(mut changes: Vec<Change>) -> Report {
        changes.sort_by(|a, b| {
            (
                a.namespace.is_none(),
                &a.namespace,
                a.kind(),
                &a.from,
                &a.to,
            )
                .cmp(&(
                    b.namespace.is_none(),
                    &b.namespace,
                    b.kind(),
                    &b.from,
                    &b.to,
                ))
                .then_with(|| {
                    (&a.protocol, &a.ports, &a.family).cmp(&(&b.protocol, &b.ports, &b.family))
                })
        });
        let mut summary = Summary::default();
        for change in &changes {
            match change.kind() {
                ChangeKind::Opened => summary.opened += 1,
                ChangeKind::Closed => summary.closed += 1,
                ChangeKind::Changed => summary.changed += 1,
            }
        }
        Report { changes, summary }
    }
}

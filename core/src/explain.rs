//! What `tollgate trace` and `tollgate get endpoints` answer, as pure
//! functions of a [`Ruleset`] and the FQDN addresses known: the offline
//! commands call them with the ruleset of the given files, the running
//! agent with the ruleset in force and the addresses it has learned, so the
//! two answers cannot differ. Endpoint names and named ports are resolved
//! here, against the ruleset's inventory. No I/O, no clock.

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

use crate::fqdn::{FqdnLookup, FqdnPattern, StaticFqdn};
use crate::http::{self, HttpEvent, RequestHead, RequestTracker, DEFAULT_MAX_HEAD};
use crate::model::PortProtocol;
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::ruleset::{
    Consulted, Decision, DirectionDecision, DryRunCause, Endpoint, Miss, Outcome, PolicyRef,
    Ruleset,
};

mod why;

/// Why a flow could not be traced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("{given:?} is neither an address nor an endpoint of the inventory (namespace/name of a Pod, ExternalEntity or container, node:NAME of a Node){}", did_you_mean(.nearest))]
    UnknownEndpoint {
        given: String,
        /// The inventory's name nearest to `given`, if one is near.
        nearest: Option<String>,
    },
    #[error("the endpoint {name} has no address")]
    NoAddress { name: String },
    #[error("--src and --dst have no address family in common")]
    Family,
    #[error("--dst-port is required for {protocol}")]
    PortRequired { protocol: &'static str },
    #[error("the destination {dst} has no container port named {name:?} for {protocol}")]
    UnknownNamedPort {
        dst: String,
        name: String,
        protocol: &'static str,
    },
    #[error("IGMP is IPv4 only")]
    IgmpOverIpv6,
    #[error("the --http-* flags do not form a valid HTTP request: {0}")]
    Http(String),
}

/// Transport of a traced flow (the command line takes any case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceProtocol {
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Igmp,
}

impl TraceProtocol {
    /// Every protocol, as the command line lists them.
    pub const ALL: [TraceProtocol; 5] = [
        TraceProtocol::Tcp,
        TraceProtocol::Udp,
        TraceProtocol::Sctp,
        TraceProtocol::Icmp,
        TraceProtocol::Igmp,
    ];

    /// The lower-case name, as JSON and the command line spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceProtocol::Tcp => "tcp",
            TraceProtocol::Udp => "udp",
            TraceProtocol::Sctp => "sctp",
            TraceProtocol::Icmp => "icmp",
            TraceProtocol::Igmp => "igmp",
        }
    }
}

/// What to trace. Endpoints are addresses or inventory names; the
/// destination port a number or the name of a container port of the
/// destination Pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceRequest {
    pub src: String,
    pub dst: String,
    pub protocol: TraceProtocol,
    pub src_port: u16,
    #[serde(default)]
    pub dst_port: Option<String>,
    #[serde(default)]
    pub icmp_type: u8,
    #[serde(default)]
    pub icmp_code: u8,
    #[serde(default)]
    pub igmp_type: u8,
    #[serde(default)]
    pub igmp_group: Option<Ipv4Addr>,
    /// Treat the destination as an address this name resolved to.
    #[serde(default)]
    pub fqdn: Option<String>,
    #[serde(default)]
    pub http_method: Option<String>,
    #[serde(default)]
    pub http_host: Option<String>,
    #[serde(default)]
    pub http_path: Option<String>,
}

/// One side of a traced flow: its address and, when the inventory knows
/// it, its name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEndpoint {
    pub address: IpAddr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A rule met while deciding one direction, in evaluation order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsultedRule {
    pub policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    pub action: String,
    pub matched: bool,
    /// The condition it missed when it did not match: `peer`, `protocol`,
    /// `port`, `sourcePort`, `nodePort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miss: Option<Miss>,
    /// Why it did not match, one sentence (`destination port 80: the rule
    /// takes TCP/53`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// How one direction was decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectionReport {
    pub direction: String,
    pub endpoint: Option<String>,
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_by: Option<String>,
    /// Every rule met, in order, up to the one that decided.
    #[serde(default)]
    pub consulted: Vec<ConsultedRule>,
    /// The Kubernetes NetworkPolicies that isolate the endpoint in this
    /// direction (a deny-all among them, which has no rule to consult):
    /// when no Antrea rule decides, only their rules can allow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isolated_by: Vec<String>,
}

/// The answer of `tollgate trace`, offline or from the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceReport {
    pub verdict: String,
    pub protocol: String,
    pub src: TraceEndpoint,
    pub dst: TraceEndpoint,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_port: Option<u16>,
    pub egress: DirectionReport,
    pub ingress: DirectionReport,
    /// FQDN selectors the destination is known to have resolved from
    /// (given with `--fqdn`, or learned by the agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fqdn: Vec<String>,
    /// `Allow` or `Drop`: the HTTP request given, against the L7 rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// Why the HTTP request given fails the deciding rules'
    /// `l7Protocols`: one sentence per entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_why: Vec<String>,
    /// Set when the flow is allowed subject to L7 inspection and no
    /// request was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l7: Option<String>,
    /// The agent's `datapath.privileged` entry that accepts the flow ahead
    /// of any policy (the decision above is what policy alone would say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<String>,
    /// What the dry-run policies would decide, when a side of the flow
    /// carries any (the verdict above never counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<DryRunReport>,
}

/// What the dry-run policies (`tollgate.io/dry-run: "true"`) would decide
/// about a traced flow: the verdict with all of them enforced, and the
/// dry-run rule (or Kubernetes NetworkPolicy isolation) it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRunReport {
    pub verdict: String,
    /// It differs from the enforced verdict: the datapath writes a
    /// `DryRun<verdict>` audit line for such a connection and counts it.
    pub changed: bool,
    /// The direction, policy and rule it comes from; `None` when no
    /// dry-run rule decided (the enforced outcome stands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The rule's name; `None` for a Kubernetes rule, or the isolation of a
    /// Kubernetes NetworkPolicy (its default drop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

impl TraceReport {
    /// Whether the flow passes (for `--exit-code`).
    pub fn allowed(&self) -> bool {
        self.verdict == Verdict::Allow.to_string()
    }
}

/// Learned addresses, or the one `--fqdn` names.
struct Either<'a>(&'a dyn FqdnLookup, StaticFqdn);

impl FqdnLookup for Either<'_> {
    fn resolves_to(&self, pattern: &FqdnPattern, ip: IpAddr) -> bool {
        self.1.resolves_to(pattern, ip) || self.0.resolves_to(pattern, ip)
    }
}

/// Traces `request` through `ruleset`, `learned` answering which FQDN
/// selectors resolved to an address (the agent's table; `NoFqdn` offline).
pub fn trace(
    ruleset: &Ruleset,
    learned: &dyn FqdnLookup,
    request: &TraceRequest,
) -> Result<TraceReport, TraceError> {
    let (src, dst) = addresses(ruleset, &request.src, &request.dst)?;
    let transport = transport(ruleset, request, dst)?;
    let flow = Flow {
        src,
        dst,
        transport,
        local: None,
    };
    let given = request.fqdn.iter().map(|name| (name.clone(), dst));
    let fqdn = Either(learned, StaticFqdn(given.collect()));
    let decision = ruleset.classify(&flow, &fqdn);
    let [egress, ingress] = ruleset.consulted(&flow, &fqdn);
    let isolating = ruleset.isolating(&flow);
    let head = http_request(request)?;
    let http_allowed = match (&head, decision.l7.is_empty()) {
        (Some(head), false) => Some(decision.l7.iter().all(|protocols| {
            let alternatives: Vec<_> = protocols.iter().filter_map(|p| p.http.clone()).collect();
            http::decide(&alternatives, head)
        })),
        _ => None,
    };
    let mut report = report(
        ruleset,
        &flow,
        &fqdn,
        &decision,
        [egress, ingress],
        isolating,
        http_allowed,
    );
    if let (Some(head), Some(false)) = (&head, http_allowed) {
        report.http_why = decision
            .l7
            .iter()
            .flat_map(|protocols| why::http(protocols, head))
            .collect();
    }
    Ok(report)
}

fn report(
    ruleset: &Ruleset,
    flow: &Flow,
    fqdn: &dyn FqdnLookup,
    decision: &Decision,
    [egress, ingress]: [Vec<Consulted>; 2],
    [egress_isolation, ingress_isolation]: [&[PolicyRef]; 2],
    http_allowed: Option<bool>,
) -> TraceReport {
    let verdict = match http_allowed {
        Some(false) => Verdict::Drop,
        _ => decision.verdict,
    };
    let side = |address: IpAddr| TraceEndpoint {
        address,
        name: ruleset.name_of(address).map(str::to_string),
    };
    let (src_port, dst_port) = match flow.transport {
        Transport::Tcp { src_port, dst_port }
        | Transport::Udp { src_port, dst_port }
        | Transport::Sctp { src_port, dst_port } => (Some(src_port), Some(dst_port)),
        _ => (None, None),
    };
    let l7 = (http_allowed.is_none() && !decision.l7.is_empty()).then(|| {
        "the flow is allowed subject to L7 inspection; pass --http-* to evaluate a request"
            .to_string()
    });
    TraceReport {
        verdict: verdict.to_string(),
        protocol: flow.transport.name().to_string(),
        src: side(flow.src),
        dst: side(flow.dst),
        src_port,
        dst_port,
        egress: direction(flow, &decision.egress, egress, egress_isolation),
        ingress: direction(flow, &decision.ingress, ingress, ingress_isolation),
        fqdn: ruleset
            .fqdn_patterns()
            .iter()
            .filter(|p| fqdn.resolves_to(p, flow.dst))
            .map(ToString::to_string)
            .collect(),
        http: http_allowed.map(|a| if a { "Allow" } else { "Drop" }.to_string()),
        http_why: Vec::new(),
        l7,
        privileged: None,
        dry_run: dry_run_report(decision),
    }
}

/// The dry-run part of a trace: attributed as the audit line of a changed
/// connection is, else to the direction that settles the dry-run verdict.
fn dry_run_report(decision: &Decision) -> Option<DryRunReport> {
    let outcome = decision.dry_run.as_deref()?;
    let change = outcome.change(decision);
    let attributed = match change {
        Some(change) => Some((change.direction, change.cause)),
        None => outcome.attributed(),
    };
    let mut report = DryRunReport {
        verdict: outcome.verdict.to_string(),
        changed: change.is_some(),
        direction: None,
        policy: None,
        tier: None,
        rule: None,
        action: None,
    };
    if let Some((direction, cause)) = attributed {
        report.direction = Some(direction.direction.as_str().to_string());
        report.policy = Some(cause.policy().to_string());
        match cause {
            DryRunCause::Rule { rule } => {
                report.tier = rule.tier.clone();
                report.rule = rule.name.clone();
                report.action = Some(format!("{:?}", rule.action));
            }
            DryRunCause::Isolation { .. } => {
                report.action = Some(Verdict::Drop.to_string());
            }
        }
    }
    Some(report)
}

fn direction(
    flow: &Flow,
    d: &DirectionDecision,
    consulted: Vec<Consulted>,
    isolated_by: &[PolicyRef],
) -> DirectionReport {
    let rule = d.rule();
    DirectionReport {
        direction: d.direction.as_str().to_string(),
        endpoint: d.endpoint.as_ref().map(ToString::to_string),
        outcome: outcome_name(&d.outcome).to_string(),
        policy: rule.map(|r| r.policy.to_string()),
        kind: rule.map(|r| r.policy.kind.as_str().to_string()),
        tier: rule.and_then(|r| r.tier.clone()),
        rule: rule.and_then(|r| r.name.clone()),
        action: rule.map(|r| format!("{:?}", r.action)),
        passed_by: d.passed_by.as_ref().map(|pass| {
            format!(
                "{} {}",
                pass.policy,
                pass.name.as_deref().unwrap_or("<nil>")
            )
        }),
        consulted: consulted
            .into_iter()
            .map(|c| ConsultedRule {
                policy: c.rule.policy.to_string(),
                tier: c.rule.tier.clone(),
                rule: c.rule.name.clone(),
                action: format!("{:?}", c.rule.action),
                matched: c.matched,
                miss: c.why.as_ref().map(|w| w.miss),
                why: c.why.as_ref().map(|w| why::rule(flow, d.direction, w)),
            })
            .collect(),
        isolated_by: isolated_by.iter().map(ToString::to_string).collect(),
    }
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::NotEnforced => "NotEnforced",
        Outcome::NoRuleMatched => "NoRuleMatched",
        Outcome::Rule { .. } => "Rule",
        Outcome::K8sDefaultDeny => "K8sDefaultDeny",
        Outcome::NodeToLocalPod => "NodeToLocalPod",
    }
}

/// The addresses of both sides, of one family: an address as given, a
/// name by its inventory addresses (IPv4 first when both sides have it).
fn addresses(ruleset: &Ruleset, src: &str, dst: &str) -> Result<(IpAddr, IpAddr), TraceError> {
    let src = candidates(ruleset, src)?;
    let dst = candidates(ruleset, dst)?;
    for v4 in [true, false] {
        let pick = |ips: &[IpAddr]| ips.iter().copied().find(|ip| ip.is_ipv4() == v4);
        if let (Some(s), Some(d)) = (pick(&src), pick(&dst)) {
            return Ok((s, d));
        }
    }
    Err(TraceError::Family)
}

fn candidates(ruleset: &Ruleset, given: &str) -> Result<Vec<IpAddr>, TraceError> {
    if let Ok(ip) = given.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    match ruleset.addresses_of(given) {
        Some([]) => Err(TraceError::NoAddress {
            name: given.to_string(),
        }),
        Some(ips) => Ok(ips.to_vec()),
        None => Err(TraceError::UnknownEndpoint {
            given: given.to_string(),
            nearest: crate::suggest::nearest(given, ruleset.endpoint_names()).map(str::to_string),
        }),
    }
}

fn did_you_mean(nearest: &Option<String>) -> String {
    nearest
        .as_ref()
        .map_or_else(String::new, |n| format!(": did you mean {n:?}?"))
}

fn transport(
    ruleset: &Ruleset,
    request: &TraceRequest,
    dst: IpAddr,
) -> Result<Transport, TraceError> {
    let port = |protocol: PortProtocol, name: &'static str| {
        let given = request
            .dst_port
            .as_deref()
            .ok_or(TraceError::PortRequired { protocol: name })?;
        match given.parse::<u16>() {
            Ok(port) => Ok(port),
            Err(_) => ruleset.named_port(dst, given, protocol).ok_or_else(|| {
                TraceError::UnknownNamedPort {
                    dst: ruleset
                        .name_of(dst)
                        .map_or_else(|| dst.to_string(), str::to_string),
                    name: given.to_string(),
                    protocol: name,
                }
            }),
        }
    };
    let src_port = request.src_port;
    Ok(match request.protocol {
        TraceProtocol::Tcp => Transport::Tcp {
            src_port,
            dst_port: port(PortProtocol::Tcp, "TCP")?,
        },
        TraceProtocol::Udp => Transport::Udp {
            src_port,
            dst_port: port(PortProtocol::Udp, "UDP")?,
        },
        TraceProtocol::Sctp => Transport::Sctp {
            src_port,
            dst_port: port(PortProtocol::Sctp, "SCTP")?,
        },
        TraceProtocol::Icmp => Transport::Icmp {
            icmp_type: request.icmp_type,
            icmp_code: request.icmp_code,
        },
        TraceProtocol::Igmp if dst.is_ipv6() => return Err(TraceError::IgmpOverIpv6),
        TraceProtocol::Igmp => Transport::Igmp {
            igmp_type: request.igmp_type,
            group: request.igmp_group.unwrap_or(Ipv4Addr::UNSPECIFIED),
        },
    })
}

/// The request the `--http-*` flags describe, parsed exactly as the
/// datapath parses live requests (same normalisation and checks).
fn http_request(request: &TraceRequest) -> Result<Option<RequestHead>, TraceError> {
    if request.http_method.is_none() && request.http_host.is_none() && request.http_path.is_none() {
        return Ok(None);
    }
    let mut raw = format!(
        "{} {} HTTP/1.1\r\n",
        request.http_method.as_deref().unwrap_or("GET"),
        request.http_path.as_deref().unwrap_or("/")
    );
    if let Some(host) = &request.http_host {
        raw.push_str(&format!("Host: {host}\r\n"));
    }
    raw.push_str("\r\n");
    let mut tracker = RequestTracker::new(DEFAULT_MAX_HEAD);
    match tracker.feed(raw.as_bytes()).into_iter().next() {
        Some(HttpEvent::Request(head)) => Ok(Some(head)),
        Some(other) => Err(TraceError::Http(format!("{other:?}"))),
        None => Err(TraceError::Http("incomplete".into())),
    }
}

/// One enforced endpoint of `tollgate get endpoints`: its addresses and
/// the policies applied to it, in evaluation order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointReport {
    pub endpoint: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub addresses: Vec<IpAddr>,
    pub policies: Vec<String>,
    /// FQDN selectors its egress rules name (`get fqdn -n/-p`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fqdn: Vec<String>,
}

/// Every endpoint the ruleset enforces for (the local Node first) with its
/// effective policies, as `antctl get podmembers`/`get netpol -p` show.
pub fn endpoints(ruleset: &Ruleset) -> Vec<EndpointReport> {
    ruleset
        .endpoints()
        .iter()
        .enumerate()
        .map(|(position, endpoint)| {
            let shown = endpoint.to_string();
            let (kind, namespace, key) = match endpoint {
                Endpoint::Node { name } => ("Node", None, format!("node:{name}")),
                Endpoint::Pod { namespace, .. } => ("Pod", Some(namespace.clone()), shown.clone()),
            };
            EndpointReport {
                kind: kind.to_string(),
                namespace,
                addresses: ruleset.addresses_of(&key).unwrap_or_default().to_vec(),
                policies: ruleset
                    .policies()
                    .iter()
                    .filter(|p| p.applied_to.contains(&shown))
                    .map(|p| p.policy.to_string())
                    .collect(),
                fqdn: ruleset
                    .egress_fqdn_patterns(position)
                    .into_iter()
                    .map(ToString::to_string)
                    .collect(),
                endpoint: shown,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;

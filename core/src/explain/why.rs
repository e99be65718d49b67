//! Why a rule `trace -v` consulted did not match, and why an HTTP request
//! fails a rule's `l7Protocols`, in one sentence each: the condition the
//! flow missed (peer, protocol, port, source port, NodePort), the flow's
//! value there and what the rule takes. Pure: from the classifier's
//! [`NoMatch`] and the flow; it decides nothing.

use crate::http::{HttpRule, RequestHead};
use crate::model::{Direction, L7Protocol};
use crate::packet::flow::{Flow, Transport};
use crate::ruleset::{Miss, NoMatch};

/// The sentence for a rule of `direction` that missed `flow`:
/// `destination port 80: the rule takes TCP/53, UDP/53`.
pub fn rule(flow: &Flow, direction: Direction, why: &NoMatch) -> String {
    let wanted = why.wanted.join(", ");
    let protocol = flow.transport.name();
    let value = match (why.miss, &flow.transport) {
        (Miss::Peer, _) => {
            let (side, peer) = match direction {
                Direction::Egress => ("destination", flow.dst),
                Direction::Ingress => ("source", flow.src),
            };
            return match why.wanted.as_slice() {
                [] => format!("{side} {peer}: the rule's peers select no address"),
                wanted => format!(
                    "{side} {peer} is none of the rule's peers: {}",
                    wanted.join("; ")
                ),
            };
        }
        (Miss::Protocol, _) => format!("protocol {protocol}"),
        (Miss::SourcePort, t) => match t.src_port() {
            Some(port) => format!("source port {port}"),
            None => format!("protocol {protocol}"),
        },
        (
            Miss::Port,
            Transport::Icmp {
                icmp_type,
                icmp_code,
            },
        ) => format!("ICMP type {icmp_type} code {icmp_code}"),
        (Miss::Port, Transport::Igmp { igmp_type, group }) => {
            format!("IGMP type {igmp_type:#04x} group {group}")
        }
        (Miss::Port | Miss::NodePort, t) => match t.dst_port() {
            Some(port) => format!("{protocol} destination port {port}"),
            None => format!("protocol {protocol}"),
        },
    };
    match why.miss {
        Miss::NodePort => format!("{value}: the rule's NodePort Service takes {wanted}"),
        _ => format!("{value}: the rule takes {wanted}"),
    }
}

/// Why `request` fails one rule's `l7Protocols` (`l7`, any entry of which
/// would allow it): one sentence per HTTP entry,
/// `l7Protocols[1].http: path /admin: the rule takes /api/*`; a TLS-only
/// entry never allows an HTTP request. Empty when an entry allows it.
pub fn http(l7: &[L7Protocol], request: &RequestHead) -> Vec<String> {
    let mut reasons = Vec::new();
    for (i, entry) in l7.iter().enumerate() {
        let Some(http) = &entry.http else {
            reasons.push(format!("l7Protocols[{i}]: not an http entry"));
            continue;
        };
        let Some(mismatch) = HttpRule::new(http).mismatch(request) else {
            return Vec::new();
        };
        let actual = match mismatch.field {
            "method" => request.method.clone(),
            "host" => match (&request.host, request.port) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                (Some(host), None) => host.clone(),
                (None, _) => "(none)".into(),
            },
            _ => request.path.clone(),
        };
        reasons.push(format!(
            "l7Protocols[{i}].http: {} {actual}: the rule takes {}",
            mismatch.field, mismatch.wanted
        ));
    }
    reasons
}

//! The privileged entries' part of the plan: the rules that accept a
//! `datapath.privileged` entry's traffic on the hooks it names, and the
//! DNS queries among it shown to the DNS worker first. Pure.

use crate::config::{DatapathConfig, Privileged, PrivilegedProtocol, QueueNumbers};

use super::dns::dns_query_target;
use super::Family;

/// A privileged entry's rule on one side (`dir`: `-s` or `-d`): its range,
/// protocol and port, then `except` (the endpoints it never matches, or
/// nothing), accepted.
pub(super) fn privileged_rule(
    entry: &Privileged,
    dir: &str,
    except: &str,
    family: Family,
) -> String {
    let mut rule = privileged_range(entry, dir);
    match entry.protocol {
        Some(protocol) => {
            let name = match (protocol, family) {
                (PrivilegedProtocol::Tcp, _) => "tcp",
                (PrivilegedProtocol::Udp, _) => "udp",
                (PrivilegedProtocol::Sctp, _) => "sctp",
                (PrivilegedProtocol::Icmp, Family::V4) => "icmp",
                (PrivilegedProtocol::Icmp, Family::V6) => "ipv6-icmp",
            };
            rule.push_str(&format!("-p {name} {except}"));
            if let Some(port) = entry.port {
                rule.push_str(&format!("-m {name} --dport {port} "));
            }
        }
        None => rule.push_str(except),
    }
    rule.push_str("-j ACCEPT");
    rule
}

/// `-s CIDR ` or `-d CIDR ` as iptables-save prints it: the network
/// address of the range, and nothing for a range of every address
/// (`0.0.0.0/0`, `::/0`), which it leaves out.
fn privileged_range(entry: &Privileged, dir: &str) -> String {
    if entry.cidr.prefix_len() == 0 {
        return String::new();
    }
    format!("{dir} {} ", entry.cidr.trunc())
}

/// The DNS queries a privileged entry accepts, shown to the DNS worker
/// first ([`dns_query_target`]: copied, or queued and accepted by the
/// worker) so that their replies can be learned from: the entry's match
/// narrowed to UDP and TCP port 53.
pub(super) fn privileged_dns_query_rules(
    entry: &Privileged,
    dir: &str,
    except: &str,
    (config, queues): (&DatapathConfig, &QueueNumbers),
) -> Vec<String> {
    if entry.port.is_some_and(|port| port != 53) {
        return Vec::new();
    }
    [
        (PrivilegedProtocol::Udp, "udp"),
        (PrivilegedProtocol::Tcp, "tcp"),
    ]
    .into_iter()
    .filter(|(protocol, _)| entry.protocol.is_none_or(|p| p == *protocol))
    .map(|(_, name)| {
        format!(
            "{}-p {name} {except}-m {name} --dport 53 -j {}",
            privileged_range(entry, dir),
            dns_query_target(config, queues, name)
        )
    })
    .collect()
}

//! Where the plan sends an allowed DNS query so that the DNS worker knows
//! it was asked (a reply is learned from only if it answers a query the
//! worker saw). Pure.

use crate::config::{DatapathConfig, QueueNumbers};

use super::bypass;

/// The target of an allowed DNS query's rule, by protocol. A query over
/// UDP is copied to the DNS worker's NFLOG group and goes on to the rule
/// after, which accepts it: it is not held, and with a threshold of one
/// packet its copy is in the worker's socket before the query leaves, so
/// before any reply to it can be queued. A query over TCP goes to the DNS
/// queue (the worker accepts it; the queue fails as the datapath does):
/// the TCP snooper reassembles each
/// stream from its segments and drops one after a gap to have it sent
/// again, which a copy could not do.
pub(super) fn dns_query_target(
    config: &DatapathConfig,
    queues: &QueueNumbers,
    protocol: &str,
) -> String {
    match protocol {
        "udp" => format!("NFLOG --nflog-group {} --nflog-threshold 1", queues.dns_log),
        _ => format!("NFQUEUE --queue-num {}{}", queues.dns, bypass(config)),
    }
}

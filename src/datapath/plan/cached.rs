//! The verdict cache's part of the plan: the rules that answer a new
//! connection from the cache's lookup sets ahead of the queue rules, and
//! the chains that carry out each cached verdict. Pure.
//!
//! No rule names a generation: the lookup rules name the `list:set` of
//! their hook, family and verdict, which holds the generation's set, and
//! jump to one of those chains. A new generation changes what the lookup
//! sets hold and leaves every rule, and with them the packet counters the
//! hits are read from ([`super::super::cache::hit_counters`]), in place.

use crate::config::{DatapathConfig, QueueNumbers};

use super::super::cache::{
    cache_list, CachedVerdict, CACHED_ALLOW_CHAIN, CACHED_DROP_CHAIN, CACHED_REJECT_CHAIN,
};
use super::dns::dns_query_target;
use super::{Family, Hook, TableKind};

/// What a cached Allow does, as the rules at the top of the hook chains do
/// for a worker's Allow: the allow mark, saved into the connmark, DNS
/// queries shown to the DNS worker (which remembers them, so that their
/// replies are learned from; [`dns_query_target`]), then accept.
pub(super) fn cached_allow_rules(
    config: &DatapathConfig,
    queues: &QueueNumbers,
    snoop_dns: bool,
) -> Vec<String> {
    let marks = &config.mark_mask;
    let mut rules = vec![
        format!("-j MARK --set-xmark {:#x}/{:#x}", marks.allow, marks.mask),
        format!(
            "-j CONNMARK --save-mark --nfmask {mask:#x} --ctmask {mask:#x}",
            mask = marks.mask
        ),
    ];
    if snoop_dns {
        for protocol in ["udp", "tcp"] {
            rules.push(format!(
                "-p {protocol} -m {protocol} --dport 53 -j {}",
                dns_query_target(config, queues, protocol)
            ));
        }
    }
    rules.push("-j ACCEPT".to_string());
    rules
}

/// What a cached Drop does: drop.
pub(super) fn cached_drop_rules() -> Vec<String> {
    vec!["-j DROP".to_string()]
}

/// What a cached Reject does in `table`: the filter table rejects (a TCP
/// reset, or ICMP administratively prohibited); the mangle table, which
/// decides forwarded connections, marks the packet for the filter table
/// to reject, as a worker's Reject does.
pub(super) fn cached_reject_rules(
    config: &DatapathConfig,
    family: Family,
    table: TableKind,
) -> Vec<String> {
    if table == TableKind::Mangle {
        let marks = &config.mark_mask;
        return vec![
            format!("-j MARK --set-xmark {:#x}/{:#x}", marks.reject, marks.mask),
            "-j ACCEPT".to_string(),
        ];
    }
    let reject_with = match family {
        Family::V4 => "icmp-admin-prohibited",
        Family::V6 => "icmp6-adm-prohibited",
    };
    vec![
        "-p tcp -j REJECT --reject-with tcp-reset".to_string(),
        format!("-j REJECT --reject-with {reject_with}"),
    ]
}

/// The rules that answer a new connection from the verdict cache, ahead
/// of the rule that would queue it (`prefix` names its interface): an
/// entry for (source, protocol:destination port, destination) in a set
/// the lookup set of its hook, family and verdict holds jumps to that
/// verdict's chain.
pub(super) fn cached_verdict_rules((family, hook): (Family, Hook), prefix: &str) -> Vec<String> {
    [
        (CachedVerdict::Allow, CACHED_ALLOW_CHAIN),
        (CachedVerdict::Drop, CACHED_DROP_CHAIN),
        (CachedVerdict::Reject, CACHED_REJECT_CHAIN),
    ]
    .into_iter()
    .map(|(verdict, chain)| {
        format!(
            "{prefix}-m conntrack --ctstate NEW -m set --match-set {} src,dst,dst -j {chain}",
            cache_list(hook, verdict, family)
        )
    })
    .collect()
}

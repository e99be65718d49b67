//! The verdict cache's part of the plan: the rules that answer a new
//! connection from the cache's sets ahead of the queue rules, and what a
//! cached Allow does. Pure.

use crate::config::{DatapathConfig, QueueNumbers};
use crate::ruleset::VerdictCache;

use super::super::cache::{cache_set, CachedVerdict, CACHED_ALLOW_CHAIN};
use super::dns::dns_query_target;
use super::{Family, Hook, TableKind, CACHED_REJECT_CHAIN};

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

/// The rules that answer a new connection from the verdict cache, ahead
/// of the rule that would queue it (`prefix` names its interface): an
/// entry for (source, protocol:destination port, destination) in the set
/// of its hook, family and verdict.
pub(super) fn cached_verdict_rules(
    cache: &VerdictCache,
    (family, hook, table): (Family, Hook, TableKind),
    prefix: &str,
) -> Vec<String> {
    let set = |verdict| cache_set(cache.generation, hook, verdict, family);
    let matching = |verdict| {
        format!(
            "-m conntrack --ctstate NEW -m set --match-set {} src,dst,dst",
            set(verdict)
        )
    };
    let reject_with = match family {
        Family::V4 => "icmp-admin-prohibited",
        Family::V6 => "icmp6-adm-prohibited",
    };
    let mut rules = vec![
        format!(
            "{prefix}{} -j {CACHED_ALLOW_CHAIN}",
            matching(CachedVerdict::Allow)
        ),
        format!("{prefix}{} -j DROP", matching(CachedVerdict::Drop)),
    ];
    if table == TableKind::Mangle {
        rules.push(format!(
            "{prefix}{} -j {CACHED_REJECT_CHAIN}",
            matching(CachedVerdict::Reject)
        ));
        return rules;
    }
    rules.push(format!(
        "{prefix}-p tcp {} -j REJECT --reject-with tcp-reset",
        matching(CachedVerdict::Reject)
    ));
    rules.push(format!(
        "{prefix}{} -j REJECT --reject-with {reject_with}",
        matching(CachedVerdict::Reject)
    ));
    rules
}

//! The desired netfilter state for the datapath configuration, the queue
//! numbers, the endpoints the compiled ruleset enforces and its FQDN
//! selectors: rule text exactly as
//! `iptables-save` prints it, so that the installed state parses back to an
//! equal value. Pure.
//!
//! INPUT and OUTPUT are decided in the filter table. FORWARD is decided in
//! the mangle table, which runs before the filter table on the same hook
//! and where no container runtime writes (Docker, netavark, CNI and
//! firewalld's reloads insert their ACCEPTs at the top of the filter
//! table's FORWARD): a runtime rule can never decide a forwarded
//! connection before tollgate. REJECT is valid only in the filter table,
//! so the mangle chain marks a rejected connection and passes it on; the
//! filter table's `TOLLGATE-FORWARD` rejects it and accepts what tollgate
//! allowed, and should a runtime's ACCEPT come first there, the mangle
//! table's POSTROUTING drops what still carries the reject mark.

use std::collections::{BTreeMap, BTreeSet};

use sha1::{Digest, Sha1};

use crate::config::{DatapathConfig, PrivilegedHook, QueueNumbers, QueueRange};
use crate::fqdn::FqdnPattern;
use crate::marks::{FailMode, MarkLayout};
use crate::ruleset::{Enforced, VerdictCache};

use super::cache::{
    cache_list, cache_set, CachedVerdict, CACHED_ALLOW_CHAIN, CACHED_DROP_CHAIN,
    CACHED_REJECT_CHAIN,
};
pub use super::state::Hook;
use super::state::{
    CacheSet, Family, IpSet, LearnedSet, RangeSet, State, Table, TableKind, DOCKER_USER,
};

mod cached;
mod dns;
mod forward;
mod l7;
mod local;
mod privileged;

use cached::{cached_allow_rules, cached_drop_rules, cached_reject_rules, cached_verdict_rules};
use forward::reject_rules;
use l7::{bypass, l7_queue_rules, l7_queue_target, l7_rules};
pub use l7::{l7_queue_of, L7_CHAIN, L7_QUEUE_CHAIN};
pub use local::{published_port, unknown_set};
use local::{published_rule, unknown_addresses, unknown_rules};
use privileged::{privileged_dns_query_rules, privileged_rule};

/// Name of the ipset of enforced endpoint addresses of a family.
pub fn endpoints_set(family: Family) -> &'static str {
    match family {
        Family::V4 => "tollgate-endpoints-v4",
        Family::V6 => "tollgate-endpoints-v6",
    }
}

/// Name of the ipset of a family's addresses of endpoints that only
/// dry-run policies apply to ([`Enforced::dry_run_endpoints`]): their
/// queue rules always carry `--queue-bypass`, below those of the enforced
/// endpoints, so a connection with an enforced side meets the fail mode.
pub fn dry_run_set(family: Family) -> &'static str {
    match family {
        Family::V4 => "tollgate-dryrun-v4",
        Family::V6 => "tollgate-dryrun-v6",
    }
}

/// The mangle table's chain on POSTROUTING: drops what still carries the
/// reject mark, which only a foreign ACCEPT ahead of the filter table's
/// `TOLLGATE-FORWARD` can have let through.
pub const POSTROUTING_CHAIN: &str = "TOLLGATE-POSTROUTING";

/// Prefix of the FQDN sets' names.
pub const FQDN_SET_PREFIX: &str = "tollgate-fqdn-";

/// Name of the ipset of addresses learned for an FQDN selector:
/// `tollgate-fqdn-<first 10 hex digits of SHA-1(pattern)>-v4` (27 bytes;
/// the kernel allows 31). Deterministic, so a restarted agent finds the
/// sets of the selectors it still has.
pub fn fqdn_set(pattern: &FqdnPattern, family: Family) -> String {
    let digest = Sha1::digest(pattern.as_str().as_bytes());
    let hex: String = digest[..5].iter().map(|b| format!("{b:02x}")).collect();
    let suffix = match family {
        Family::V4 => "v4",
        Family::V6 => "v6",
    };
    format!("{FQDN_SET_PREFIX}{hex}-{suffix}")
}

/// ICMPv6 neighbour discovery (router solicitation/advertisement, neighbour
/// solicitation/advertisement, redirect): allowed on the link it was sent
/// on, which its hop limit of 255 proves (a router lowers it; receivers
/// discard neighbour discovery with any other, RFC 4861).
const NEIGHBOUR_DISCOVERY: [u8; 5] = [133, 134, 135, 136, 137];

/// ICMPv6 multicast listener discovery (MLDv1 query, report, done; MLDv2
/// report): allowed from a link-local source, which no router forwards
/// (receivers ignore MLD from any other, RFC 2710 and 3810).
const LISTENER_DISCOVERY: [u8; 4] = [130, 131, 132, 143];

/// The full desired state: what `config`, the `queues`, the endpoints the
/// compiled ruleset enforces and its FQDN selectors require. With any selector, DNS
/// replies are queued to the DNS queue and each selector has one empty
/// learned set per family (reconcile never touches their entries). With
/// a closed `startupPolicy`, new connections from and to the unknown
/// addresses of the local endpoint ranges are dropped (their set per
/// family; [`Enforced::is_unknown`]). Endpoints that only dry-run
/// policies apply to have their own set per family (planned when the
/// ruleset has any), queued whatever the fail mode only while a worker
/// reads the queue ([`dry_run_set`]).
pub fn desired(
    config: &DatapathConfig,
    queues: &QueueNumbers,
    enforced: &Enforced,
    fqdn: &[FqdnPattern],
) -> State {
    let mut state = planned(config, queues, Selection::Enforced(enforced), fqdn);
    for family in Family::ALL {
        for pattern in fqdn {
            state.learned.insert(
                fqdn_set(pattern, family),
                LearnedSet {
                    family,
                    entries: Vec::new(),
                },
            );
        }
        let members = enforced
            .endpoints
            .iter()
            .filter(|a| Family::of(a) == family)
            .copied()
            .collect();
        state
            .sets
            .insert(endpoints_set(family).into(), IpSet { family, members });
        if !enforced.dry_run_endpoints.is_empty() {
            let members = enforced
                .dry_run_endpoints
                .iter()
                .filter(|a| Family::of(a) == family)
                .copied()
                .collect();
            state
                .sets
                .insert(dry_run_set(family).into(), IpSet { family, members });
        }
        if let Some(set) = unknown_addresses(config, Selection::Enforced(enforced), family) {
            state.ranges.insert(unknown_set(family), set);
        }
    }
    if let Some(cache) = &enforced.verdict_cache {
        state.cache.extend(cache_sets(cache));
        state.cache_lists.extend(cache_lists(cache));
    }
    state
}

/// Every (family, hook, verdict) the verdict cache has a set for.
fn cache_slots() -> impl Iterator<Item = (Family, Hook, CachedVerdict)> {
    Family::ALL.into_iter().flat_map(|family| {
        Hook::ALL.into_iter().flat_map(move |hook| {
            CachedVerdict::ALL
                .into_iter()
                .map(move |verdict| (family, hook, verdict))
        })
    })
}

/// The lookup sets of a verdict cache, each holding the set of its hook,
/// verdict and family of the cache's generation. Whether the kernel
/// answers from them is the lookup rules' (`lookup`): a bridge that
/// answers from no cache removes the rules and leaves the lookup sets as
/// they are, so that it needs no set write.
fn cache_lists(cache: &VerdictCache) -> impl Iterator<Item = (String, BTreeSet<String>)> + '_ {
    cache_slots().map(|(family, hook, verdict)| {
        (
            cache_list(hook, verdict, family),
            BTreeSet::from([cache_set(cache.generation, hook, verdict, family)]),
        )
    })
}

/// The sets of a verdict cache: one per family, hook and verdict.
pub fn cache_sets(cache: &VerdictCache) -> impl Iterator<Item = (String, CacheSet)> + '_ {
    cache_slots().map(|(family, hook, verdict)| {
        (
            cache_set(cache.generation, hook, verdict, family),
            CacheSet {
                family,
                timeout_secs: cache.timeout_secs,
                max_entries: cache.max_entries,
            },
        )
    })
}

/// The state a starting agent installs when it finds none and its
/// `startupPolicy` is closed, until its first complete snapshot: that of
/// an empty ruleset, except that the queue rules select every new
/// connection through INPUT and FORWARD (on the configured interfaces)
/// and never carry `--queue-bypass`, and ICMP without a connection is
/// dropped there alike. No worker reads the queues yet, so
/// those connections are dropped whatever the fail mode; loopback,
/// privileged entries, OUTPUT (the agent must reach its API server) and
/// established connections pass.
pub fn startup(config: &DatapathConfig, queues: &QueueNumbers) -> State {
    let mut state = planned(config, queues, Selection::Startup, &[]);
    for family in Family::ALL {
        state.sets.insert(
            endpoints_set(family).into(),
            IpSet {
                family,
                members: Default::default(),
            },
        );
    }
    state
}

/// The tables of both families for `selection`: the filter tables
/// (INPUT and OUTPUT decided, FORWARD completed) and the mangle tables
/// (FORWARD decided).
fn planned(
    config: &DatapathConfig,
    queues: &QueueNumbers,
    selection: Selection,
    fqdn: &[FqdnPattern],
) -> State {
    let mut state = State::default();
    let snoop_dns = !fqdn.is_empty();
    for family in Family::ALL {
        let unknown = unknown_addresses(config, selection, family).is_some();
        let plan = Plan {
            config,
            queues,
            selection,
            snoop_dns,
            unknown,
            family,
        };
        *state.table_mut(family) = plan.filter_table();
        *state.mangle_mut(family) = plan.mangle_table();
    }
    state
}

/// What the connection queue rules select.
#[derive(Clone, Copy)]
enum Selection<'a> {
    /// What a ruleset enforces, with the configured fail mode.
    Enforced(&'a Enforced),
    /// Every new connection through INPUT and FORWARD, never bypassed
    /// ([`startup`]).
    Startup,
}

/// What one family's tables are planned from.
#[derive(Clone, Copy)]
struct Plan<'a> {
    config: &'a DatapathConfig,
    queues: &'a QueueNumbers,
    selection: Selection<'a>,
    snoop_dns: bool,
    /// Whether the family's unknown addresses are dropped.
    unknown: bool,
    family: Family,
}

impl Plan<'_> {
    /// The filter table: INPUT and OUTPUT decided, FORWARD (and Docker's
    /// `DOCKER-USER`) completing what the mangle table decided.
    fn filter_table(&self) -> Table {
        let mut chains: BTreeMap<String, Vec<String>> = [Hook::Input, Hook::Output]
            .iter()
            .map(|&hook| {
                (
                    hook.chain().to_string(),
                    self.chain_rules(hook, TableKind::Filter),
                )
            })
            .collect();
        chains.insert(Hook::Forward.chain().to_string(), self.forward_completion());
        self.helper_chains(&mut chains, TableKind::Filter);
        let mut jumps: Vec<(String, String)> = Hook::ALL
            .iter()
            .map(|hook| (hook.builtin().to_string(), format!("-j {}", hook.chain())))
            .collect();
        // On a Docker host the forward hook is also Docker's place for user
        // policy (planned only where that chain exists, see `diff`).
        jumps.push((
            DOCKER_USER.to_string(),
            format!("-j {}", Hook::Forward.chain()),
        ));
        Table {
            chains,
            jumps,
            ..Table::default()
        }
    }

    /// The mangle table: FORWARD decided, and on POSTROUTING the drop of
    /// rejected packets a foreign ACCEPT let through. Only a packet with
    /// the reject mark takes the POSTROUTING jump: every packet the node
    /// sends meets that hook, and the others then cost one rule, not a
    /// jump and a rule.
    fn mangle_table(&self) -> Table {
        let rejected = format!(
            "-m mark --mark {}",
            mark_match(&self.config.mark_mask, self.config.mark_mask.reject)
        );
        let mut chains = BTreeMap::from([
            (
                Hook::Forward.chain().to_string(),
                self.chain_rules(Hook::Forward, TableKind::Mangle),
            ),
            (
                POSTROUTING_CHAIN.to_string(),
                vec![format!("{rejected} -j DROP")],
            ),
        ]);
        self.helper_chains(&mut chains, TableKind::Mangle);
        Table {
            chains,
            jumps: vec![
                (
                    "FORWARD".to_string(),
                    format!("-j {}", Hook::Forward.chain()),
                ),
                (
                    "POSTROUTING".to_string(),
                    format!("{rejected} -j {POSTROUTING_CHAIN}"),
                ),
            ],
            ..Table::default()
        }
    }

    /// The chains the hook chains of `table` jump to: L7 inspection, and
    /// the verdict cache's answers.
    fn helper_chains(&self, chains: &mut BTreeMap<String, Vec<String>>, table: TableKind) {
        let (config, queues) = (self.config, self.queues);
        chains.insert(L7_CHAIN.to_string(), l7_rules(config, queues, self.family));
        if queues.l7.first() != queues.l7.last() {
            chains.insert(
                L7_QUEUE_CHAIN.to_string(),
                l7_queue_rules(config, queues.l7, self.family),
            );
        }
        if let Selection::Enforced(Enforced {
            verdict_cache: Some(_),
            ..
        }) = self.selection
        {
            chains.insert(
                CACHED_ALLOW_CHAIN.to_string(),
                cached_allow_rules(config, queues, self.snoop_dns),
            );
            chains.insert(CACHED_DROP_CHAIN.to_string(), cached_drop_rules());
            chains.insert(
                CACHED_REJECT_CHAIN.to_string(),
                cached_reject_rules(config, self.family, table),
            );
        }
    }
}

impl Plan<'_> {
    /// The rules of the owned chain of `hook` in `table` (the filter table
    /// for INPUT and OUTPUT, the mangle table for FORWARD), top to bottom.
    fn chain_rules(&self, hook: Hook, table: TableKind) -> Vec<String> {
        let Plan {
            config,
            queues,
            selection,
            snoop_dns,
            family,
            ..
        } = *self;
        let marks = &config.mark_mask;
        let allow = mark_match(marks, marks.allow);
        let reject = mark_match(marks, marks.reject);
        let l7 = mark_match(marks, marks.l7);
        let l7_active = mark_match(marks, marks.l7_active());
        let l7_denied = mark_match(marks, marks.l7_denied());
        let mut rules = Vec::new();

        // Privileged: loopback.
        match hook {
            Hook::Input => rules.push("-i lo -j ACCEPT".to_string()),
            Hook::Output => rules.push("-o lo -j ACCEPT".to_string()),
            Hook::Forward => {}
        }
        // Connections a worker or the cache allowed, first: they are most of
        // the packets, and no rule below is for them (verdict marks are set on
        // new connections and on L7 connections only, whose connmarks differ).
        // With FQDN selectors, DNS (port 53 either way) goes on to the DNS
        // rules below, and so does any protocol without ports, to the same
        // shortcut further down.
        let allowed = format!(
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark {allow} -j ACCEPT"
        );
        if snoop_dns {
            for protocol in ["tcp", "udp"] {
                rules.push(format!("-p {protocol} -m multiport ! --ports 53 {allowed}"));
            }
        } else {
            rules.push(allowed.clone());
        }
        // Packets of inspected connections without a verdict mark, next:
        // client→server ones to the L7 chain, the rest accepted, ahead of the
        // dozen rules below they cannot match (those for verdict marks, for
        // denied and not yet inspected connections). Every other packet of
        // such a connection (a verdict's NF_REPEAT, a foreign mark in the
        // mask, DNS with FQDN selectors) meets the same two rules further
        // down, where they have always been.
        let unmarked = mark_match(marks, 0);
        let (to_inspect, to_accept) = if snoop_dns {
            let not_dns = "-p tcp -m multiport ! --ports 53 ";
            (not_dns, not_dns)
        } else {
            ("-p tcp ", "")
        };
        rules.push(format!(
            "{to_inspect}-m mark --mark {unmarked} -m connmark --mark {l7_active} \
             -m conntrack --ctdir ORIGINAL -j {L7_CHAIN}"
        ));
        rules.push(format!(
            "{to_accept}-m mark --mark {unmarked} -m conntrack --ctstate RELATED,ESTABLISHED \
             -m connmark --mark {l7_active} -j ACCEPT"
        ));
        // Verdicts the queue handed back with a mark and NF_REPEAT.
        rules.push(format!(
            "-m mark --mark {allow} -j CONNMARK --save-mark --nfmask {mask:#x} --ctmask {mask:#x}",
            mask = marks.mask
        ));
        let dns_queue = format!("NFQUEUE --queue-num {}{}", queues.dns, bypass(config));
        // DNS queries a worker has just allowed are shown to the DNS worker
        // before they are accepted (`dns_query_target`: copied or queued): it
        // remembers them (a reply is learned from only if it answers one).
        if snoop_dns {
            for protocol in ["udp", "tcp"] {
                rules.push(format!(
                    "-p {protocol} -m {protocol} --dport 53 -m mark --mark {allow} -j {}",
                    dns::dns_query_target(config, queues, protocol)
                ));
            }
        }
        rules.push(format!("-m mark --mark {allow} -j ACCEPT"));
        for (code, last) in [
            (&l7, "ACCEPT"),
            (&l7_active, "ACCEPT"),
            (&l7_denied, "DROP"),
        ] {
            rules.push(format!(
            "-m mark --mark {code} -j CONNMARK --save-mark --nfmask {mask:#x} --ctmask {mask:#x}",
            mask = marks.mask
        ));
            rules.push(format!("-m mark --mark {code} -j {last}"));
        }
        // REJECT is the filter table's: the mangle table passes a rejected
        // connection on to it (see the module doc).
        match table {
            TableKind::Mangle => rules.push(format!("-m mark --mark {reject} -j ACCEPT")),
            _ => rules.extend(reject_rules(&reject, family)),
        }
        // L7 connections: denied ones end here; until the worker has seen the
        // server's SYN-ACK every packet goes to it, then client→server packets
        // are inspected (those without payload return).
        rules.push(format!("-m connmark --mark {l7_denied} -j DROP"));
        rules.push(format!(
            "-p tcp -m connmark --mark {l7} -j {}",
            l7_queue_target(config, queues)
        ));
        rules.push(format!(
            "-p tcp -m connmark --mark {l7_active} -m conntrack --ctdir ORIGINAL -j {L7_CHAIN}"
        ));
        // DNS replies to learn from, ahead of the decided-connection shortcut
        // (the query's connection is usually decided already). Only the reply
        // direction of a tracked connection: a reply nobody asked for is NEW
        // and never reaches the learner. The worker learns from a reply only
        // if it came in on the interface of the route to its server and
        // answers a query it saw; the later queries of allowed connections
        // are shown to it here, ahead of the shortcut below. The queue
        // fails as `datapath.failMode` says: a reply let through unlearned
        // would leave an FQDN Drop rule without its address.
        if snoop_dns {
            for protocol in ["udp", "tcp"] {
                rules.push(format!(
                    "-p {protocol} -m {protocol} --sport 53 -m conntrack --ctstate ESTABLISHED \
                 --ctdir REPLY -j {dns_queue}"
                ));
            }
            for protocol in ["udp", "tcp"] {
                rules.push(format!(
                    "-p {protocol} -m {protocol} --dport 53 -m conntrack --ctstate ESTABLISHED \
                 --ctdir ORIGINAL -m connmark --mark {allow} -j {}",
                    dns::dns_query_target(config, queues, protocol)
                ));
            }
        }
        // Connections already decided stay in the kernel: the allowed ones the
        // first rules did not take (DNS, and protocols without ports, with
        // FQDN selectors), and L7 connections' packets the L7 rules return.
        if snoop_dns {
            rules.push(allowed);
        }
        rules.push(format!(
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark {l7_active} -j ACCEPT"
        ));
        let scope = enforced_scope(config, selection, family, hook);
        if family == Family::V6 && hook != Hook::Forward {
            rules.extend(NEIGHBOUR_DISCOVERY.iter().map(|t| {
                format!("-p ipv6-icmp -m icmp6 --icmpv6-type {t} -m hl --hl-eq 255 -j ACCEPT")
            }));
        }
        if let Some(scope) = &scope {
            rules.extend(unrelated_icmp_rules(scope, family, hook));
            // Addresses of local endpoints the inventory does not know yet
            // cannot ride the privileged entries nor the cache either.
            if self.unknown {
                rules.extend(unknown_rules(scope, family, hook));
            }
        }
        // Privileged entries, each on the hooks it names (by default only the
        // Node's own traffic: an entry for SSH must not exempt every routed
        // connection to port 22 from policy). On the Node's own hooks an entry
        // never matches an enforced endpoint's address (the source on INPUT,
        // the destination on OUTPUT): a Pod's connection to its own Node meets
        // its policy and the Node's, not the entry meant for the operator.
        let set = endpoints_set(family);
        let (privileged_hook, directions): (_, &[(&str, Option<&str>)]) = match hook {
            Hook::Input => (PrivilegedHook::Input, &[("-s", Some("src"))]),
            Hook::Output => (PrivilegedHook::Output, &[("-d", Some("dst"))]),
            Hook::Forward => (PrivilegedHook::Forward, &[("-s", None), ("-d", None)]),
        };
        for entry in config
            .privileged
            .iter()
            .filter(|p| Family::of(&p.cidr.addr()) == family && p.on(privileged_hook))
        {
            for (dir, endpoint) in directions {
                let except = endpoint
                    .map(|side| format!("-m set ! --match-set {set} {side} "))
                    .unwrap_or_default();
                if snoop_dns {
                    rules.extend(privileged_dns_query_rules(
                        entry,
                        dir,
                        &except,
                        (config, queues),
                    ));
                }
                rules.push(privileged_rule(entry, dir, &except, family));
            }
        }
        if let Some(scope) = &scope {
            rules.extend(queue_rules(
                config,
                queues.connection,
                selection,
                scope,
                (family, hook),
            ));
        }
        rules
    }
}

/// `--mark value/mask` as iptables-save prints it.
fn mark_match(marks: &MarkLayout, value: u32) -> String {
    format!("{value:#x}/{:#x}", marks.mask)
}

/// Where a hook enforces policy: the interface matches (`-i IF `, `-o IF `,
/// both on FORWARD; one empty match when every interface is enforced) and
/// the address selections (one empty match when the whole hook is
/// enforced, else the endpoints set as source and as destination); then
/// what it sends to a worker without enforcing (the dry-run set as source
/// and as destination, when the ruleset has dry-run endpoints and the
/// whole hook is not enforced).
struct Scope {
    interfaces: Vec<String>,
    selections: Vec<String>,
    dry_run_selections: Vec<String>,
}

/// The [`Scope`] of `hook`, or `None` where it enforces nothing (OUTPUT
/// before the first snapshot: the agent must reach its API server).
fn enforced_scope(
    config: &DatapathConfig,
    selection: Selection,
    family: Family,
    hook: Hook,
) -> Option<Scope> {
    let whole_hook = match selection {
        Selection::Enforced(enforced) => match hook {
            Hook::Input => enforced.node_ingress,
            Hook::Output => enforced.node_egress,
            Hook::Forward => false,
        },
        Selection::Startup if hook == Hook::Output => return None,
        Selection::Startup => true,
    };
    let by_set = |set: &str| -> Vec<String> {
        ["src", "dst"]
            .iter()
            .map(|dir| format!("-m set --match-set {set} {dir} "))
            .collect()
    };
    let selections = if whole_hook {
        vec![String::new()]
    } else {
        by_set(endpoints_set(family))
    };
    let dry_run_selections = match selection {
        Selection::Enforced(enforced) if !whole_hook && !enforced.dry_run_endpoints.is_empty() => {
            by_set(dry_run_set(family))
        }
        _ => Vec::new(),
    };
    let interfaces = if config.interfaces.is_empty() {
        vec![String::new()]
    } else {
        let flags: &[&str] = match hook {
            Hook::Input => &["-i"],
            Hook::Output => &["-o"],
            Hook::Forward => &["-i", "-o"],
        };
        flags
            .iter()
            .flat_map(|flag| {
                config
                    .interfaces
                    .iter()
                    .map(move |i| format!("{flag} {} ", i.as_iptables()))
            })
            .collect()
    };
    Some(Scope {
        interfaces,
        selections,
        dry_run_selections,
    })
}

/// ICMP that belongs to no connection conntrack knows, from or to what
/// `scope` enforces, is dropped: conntrack calls it `INVALID` (an echo or
/// timestamp reply nobody asked for, an error whose inner header names no
/// connection) or `UNTRACKED` (ICMPv6 neighbour and listener discovery),
/// and a policy can neither allow nor deny it, so accepting it would give
/// any endpoint a channel through every policy, both ways. Errors of real
/// connections are `RELATED` and pass, the kernel's own (REJECT's answer,
/// "fragmentation needed") included: it attaches them to the connection
/// that caused them. ICMPv6 discovery on the link passes first: neighbour
/// discovery with hop limit 255 (accepted above on INPUT and OUTPUT;
/// returned here on FORWARD, where only a bridge can carry it, hop limit
/// intact) and listener discovery from a link-local source. Nothing here
/// accepts: what passes returns to the built-in chain as before.
fn unrelated_icmp_rules(scope: &Scope, family: Family, hook: Hook) -> Vec<String> {
    let mut rules = Vec::new();
    let icmp = match family {
        Family::V4 => "icmp",
        Family::V6 => "ipv6-icmp",
    };
    if family == Family::V6 {
        if hook == Hook::Forward {
            rules.extend(NEIGHBOUR_DISCOVERY.iter().map(|t| {
                format!("-p ipv6-icmp -m icmp6 --icmpv6-type {t} -m hl --hl-eq 255 -j RETURN")
            }));
        }
        rules.extend(
            LISTENER_DISCOVERY
                .iter()
                .map(|t| format!("-s fe80::/10 -p ipv6-icmp -m icmp6 --icmpv6-type {t} -j RETURN")),
        );
    }
    for interface in &scope.interfaces {
        for selection in &scope.selections {
            rules.push(format!(
                "{interface}-p {icmp} {selection}-m conntrack --ctstate INVALID,UNTRACKED -j DROP"
            ));
        }
    }
    rules
}

/// New connections to hand to the workers, and packets conntrack could not
/// place (`INVALID`: a TCP FIN, NULL or XMAS probe without a connection,
/// an out-of-window segment), which would otherwise fall through the owned
/// chain unjudged: a closed port answering them with a reset would show
/// through a policy that drops everything. The workers decide them like a
/// first packet. ICMP is left out: what conntrack cannot place of it is
/// dropped before ([`unrelated_icmp_rules`]). Those of endpoints that only
/// dry-run policies apply to come last and always carry `--queue-bypass`:
/// with no worker reading the queue the kernel accepts them, as it would
/// without those policies, whatever the fail mode; a connection with an
/// enforced side (an enforced endpoint, the Node's enforced hook or
/// published port) is queued by the rules above, under the fail mode. The
/// Node ports published for them come last, with `--queue-bypass` too.
fn queue_rules(
    config: &DatapathConfig,
    queues: QueueRange,
    selection: Selection,
    scope: &Scope,
    (family, hook): (Family, Hook),
) -> Vec<String> {
    let bypass = matches!(selection, Selection::Enforced(_)) && config.fail_mode == FailMode::Open;
    let mut target = if queues.first() == queues.last() {
        format!("NFQUEUE --queue-num {}", queues.first())
    } else {
        format!(
            "NFQUEUE --queue-balance {}:{}",
            queues.first(),
            queues.last()
        )
    };
    let bypassed = format!("{target} --queue-bypass");
    if bypass {
        target = bypassed.clone();
    }
    let icmp = match family {
        Family::V4 => "icmp",
        Family::V6 => "ipv6-icmp",
    };
    let mut rules = Vec::new();
    for interface in &scope.interfaces {
        if let Selection::Enforced(Enforced {
            verdict_cache: Some(cache),
            ..
        }) = selection
        {
            if cache.lookup {
                rules.extend(cached_verdict_rules((family, hook), interface));
            }
        }
        for selection in &scope.selections {
            rules.push(format!(
                "{interface}{selection}-m conntrack --ctstate NEW -j {target}"
            ));
            rules.push(format!(
                "{interface}! -p {icmp} {selection}-m conntrack --ctstate INVALID -j {target}"
            ));
        }
        if let Selection::Enforced(enforced) = selection {
            if hook == Hook::Input && !enforced.node_ingress {
                rules.extend(
                    enforced
                        .published
                        .iter()
                        .map(|port| published_rule(interface, *port, &target)),
                );
            }
        }
        let dry_run_published = match selection {
            Selection::Enforced(enforced) if hook == Hook::Input && !enforced.node_ingress => {
                &enforced.dry_run_published[..]
            }
            _ => &[],
        };
        for selection in &scope.dry_run_selections {
            rules.push(format!(
                "{interface}{selection}-m conntrack --ctstate NEW -j {bypassed}"
            ));
            rules.push(format!(
                "{interface}! -p {icmp} {selection}-m conntrack --ctstate INVALID -j {bypassed}"
            ));
        }
        rules.extend(
            dry_run_published
                .iter()
                .map(|port| published_rule(interface, *port, &bypassed)),
        );
    }
    rules
}

#[cfg(test)]
mod tests;

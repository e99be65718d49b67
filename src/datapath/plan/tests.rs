use super::l7::U32_VALUES;
use super::*;
use crate::config::{AgentConfig, MachineDefaults};
use crate::datapath::diff::Changes;
use crate::datapath::state::State;
use crate::datapath::transition::{next_cache_sets, steps, NextCache, Step};
use crate::model::PortProtocol;
use crate::ruleset::VerdictCache;

/// The configuration `yaml` gives on a machine with two cores.
fn config(yaml: &str) -> AgentConfig {
    let machine = MachineDefaults {
        node_name: "node-a".into(),
        queues: 2,
    };
    AgentConfig::load(&machine, Some((std::path::Path::new("t.yaml"), yaml)), &[])
        .unwrap()
        .config
}

/// The plan for a whole configuration.
fn desired(config: &AgentConfig, enforced: &Enforced, fqdn: &[FqdnPattern]) -> State {
    super::desired(&config.datapath, &config.queue_numbers(), enforced, fqdn)
}

/// The chain that decides `hook`: the filter table's for INPUT and
/// OUTPUT, the mangle table's for FORWARD.
fn deciding(state: &State, family: Family, hook: Hook) -> &Vec<String> {
    match hook {
        Hook::Forward => &state.mangle(family).chains[hook.chain()],
        _ => &state.table(family).chains[hook.chain()],
    }
}

fn targets(node_ingress: bool, node_egress: bool, endpoints: &[&str]) -> Enforced {
    Enforced {
        node_ingress,
        node_egress,
        endpoints: endpoints.iter().map(|e| e.parse().unwrap()).collect(),
        verdict_cache: None,
        ..Enforced::default()
    }
}

/// What `iptables-save -t filter` prints once the default configuration is
/// installed with a node-ingress rule and one enforced endpoint (this text is
/// also in the module documentation).
const DEFAULT_V4_SAVE: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:TOLLGATE-FORWARD - [0:0]
:TOLLGATE-INPUT - [0:0]
:TOLLGATE-L7 - [0:0]
:TOLLGATE-L7-QUEUE - [0:0]
:TOLLGATE-OUTPUT - [0:0]
-A INPUT -j TOLLGATE-INPUT
-A FORWARD -j TOLLGATE-FORWARD
-A OUTPUT -j TOLLGATE-OUTPUT
-A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m mark --mark 0x100000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m mark --mark 0x400000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m mark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
-A TOLLGATE-FORWARD -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
-A TOLLGATE-FORWARD -m connmark --mark 0x400000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-INPUT -i lo -j ACCEPT
-A TOLLGATE-INPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
-A TOLLGATE-INPUT -p tcp -m mark --mark 0x0/0xf00000 -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
-A TOLLGATE-INPUT -m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-INPUT -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-INPUT -m mark --mark 0x100000/0xf00000 -j ACCEPT
-A TOLLGATE-INPUT -m mark --mark 0x400000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-INPUT -m mark --mark 0x400000/0xf00000 -j ACCEPT
-A TOLLGATE-INPUT -m mark --mark 0x500000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-INPUT -m mark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-INPUT -m mark --mark 0x600000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-INPUT -m mark --mark 0x600000/0xf00000 -j DROP
-A TOLLGATE-INPUT -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
-A TOLLGATE-INPUT -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
-A TOLLGATE-INPUT -m connmark --mark 0x600000/0xf00000 -j DROP
-A TOLLGATE-INPUT -p tcp -m connmark --mark 0x400000/0xf00000 -j TOLLGATE-L7-QUEUE
-A TOLLGATE-INPUT -p tcp -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
-A TOLLGATE-INPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-INPUT -p icmp -m conntrack --ctstate INVALID,UNTRACKED -j DROP
-A TOLLGATE-INPUT -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-INPUT ! -p icmp -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-L7 -m length --length 81:65535 -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7 -p tcp -m tcp --tcp-flags FIN FIN -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7 -p tcp -m tcp --tcp-flags RST RST -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7 -p tcp -m tcp --tcp-flags URG URG -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x28&&0x20>>0x1c=0x5\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x2c&&0x20>>0x1c=0x6\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x30&&0x20>>0x1c=0x7\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x34&&0x20>>0x1c=0x8\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x38&&0x20>>0x1c=0x9\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x3c&&0x20>>0x1c=0xa\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x40&&0x20>>0x1c=0xb\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x44&&0x20>>0x1c=0xc\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x48&&0x20>>0x1c=0xd\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x4c&&0x20>>0x1c=0xe\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x50&&0x20>>0x1c=0xf\" -j RETURN
-A TOLLGATE-L7 -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7-QUEUE -m conntrack --ctdir ORIGINAL -m u32 --u32 \"0x0>>0x16&0x3c@0x0>>0x11&0x1=0x1\" -j NFQUEUE --queue-num 104
-A TOLLGATE-L7-QUEUE -m conntrack --ctdir REPLY -m u32 --u32 \"0x0>>0x16&0x3c@0x0>>0x1&0x1=0x1\" -j NFQUEUE --queue-num 104
-A TOLLGATE-L7-QUEUE -j NFQUEUE --queue-num 103
-A TOLLGATE-OUTPUT -o lo -j ACCEPT
-A TOLLGATE-OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
-A TOLLGATE-OUTPUT -p tcp -m mark --mark 0x0/0xf00000 -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
-A TOLLGATE-OUTPUT -m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-OUTPUT -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-OUTPUT -m mark --mark 0x100000/0xf00000 -j ACCEPT
-A TOLLGATE-OUTPUT -m mark --mark 0x400000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-OUTPUT -m mark --mark 0x400000/0xf00000 -j ACCEPT
-A TOLLGATE-OUTPUT -m mark --mark 0x500000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-OUTPUT -m mark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-OUTPUT -m mark --mark 0x600000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-OUTPUT -m mark --mark 0x600000/0xf00000 -j DROP
-A TOLLGATE-OUTPUT -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
-A TOLLGATE-OUTPUT -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
-A TOLLGATE-OUTPUT -m connmark --mark 0x600000/0xf00000 -j DROP
-A TOLLGATE-OUTPUT -p tcp -m connmark --mark 0x400000/0xf00000 -j TOLLGATE-L7-QUEUE
-A TOLLGATE-OUTPUT -p tcp -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
-A TOLLGATE-OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-OUTPUT -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP
-A TOLLGATE-OUTPUT -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP
-A TOLLGATE-OUTPUT -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-OUTPUT ! -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-OUTPUT -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-OUTPUT ! -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
COMMIT
";

/// The mangle table of the same installation (also in the module
/// documentation): the forward hook decided.
const DEFAULT_V4_MANGLE_SAVE: &str = "\
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:TOLLGATE-FORWARD - [0:0]
:TOLLGATE-L7 - [0:0]
:TOLLGATE-L7-QUEUE - [0:0]
:TOLLGATE-POSTROUTING - [0:0]
-A FORWARD -j TOLLGATE-FORWARD
-A POSTROUTING -m mark --mark 0x200000/0xf00000 -j TOLLGATE-POSTROUTING
-A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -p tcp -m mark --mark 0x0/0xf00000 -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
-A TOLLGATE-FORWARD -m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-FORWARD -m mark --mark 0x100000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m mark --mark 0x400000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-FORWARD -m mark --mark 0x400000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m mark --mark 0x500000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-FORWARD -m mark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m mark --mark 0x600000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
-A TOLLGATE-FORWARD -m mark --mark 0x600000/0xf00000 -j DROP
-A TOLLGATE-FORWARD -m mark --mark 0x200000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -m connmark --mark 0x600000/0xf00000 -j DROP
-A TOLLGATE-FORWARD -p tcp -m connmark --mark 0x400000/0xf00000 -j TOLLGATE-L7-QUEUE
-A TOLLGATE-FORWARD -p tcp -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7
-A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT
-A TOLLGATE-FORWARD -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP
-A TOLLGATE-FORWARD -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP
-A TOLLGATE-FORWARD -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-FORWARD ! -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-FORWARD -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-FORWARD ! -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101
-A TOLLGATE-L7 -m length --length 81:65535 -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7 -p tcp -m tcp --tcp-flags FIN FIN -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7 -p tcp -m tcp --tcp-flags RST RST -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7 -p tcp -m tcp --tcp-flags URG URG -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x28&&0x20>>0x1c=0x5\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x2c&&0x20>>0x1c=0x6\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x30&&0x20>>0x1c=0x7\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x34&&0x20>>0x1c=0x8\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x38&&0x20>>0x1c=0x9\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x3c&&0x20>>0x1c=0xa\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x40&&0x20>>0x1c=0xb\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x44&&0x20>>0x1c=0xc\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x48&&0x20>>0x1c=0xd\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x4c&&0x20>>0x1c=0xe\" -j RETURN
-A TOLLGATE-L7 -m u32 --u32 \"0x0>>0x18=0x45&&0x0&0xffff=0x50&&0x20>>0x1c=0xf\" -j RETURN
-A TOLLGATE-L7 -j TOLLGATE-L7-QUEUE
-A TOLLGATE-L7-QUEUE -m conntrack --ctdir ORIGINAL -m u32 --u32 \"0x0>>0x16&0x3c@0x0>>0x11&0x1=0x1\" -j NFQUEUE --queue-num 104
-A TOLLGATE-L7-QUEUE -m conntrack --ctdir REPLY -m u32 --u32 \"0x0>>0x16&0x3c@0x0>>0x1&0x1=0x1\" -j NFQUEUE --queue-num 104
-A TOLLGATE-L7-QUEUE -j NFQUEUE --queue-num 103
-A TOLLGATE-POSTROUTING -m mark --mark 0x200000/0xf00000 -j DROP
COMMIT
";

const DEFAULT_IPSET_SAVE: &str = "\
create tollgate-endpoints-v4 hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x5e1f2b1a
add tollgate-endpoints-v4 10.0.0.5
create tollgate-endpoints-v6 hash:ip family inet6 hashsize 1024 maxelem 65536 bucketsize 12 initval 0x0c7c6dcd
";

#[test]
fn first_install_renders_the_whole_ruleset_in_one_batch() {
    let desired = desired(&config(""), &targets(true, false, &["10.0.0.5"]), &[]);
    let changes = Changes::between(&desired, &State::default());
    let expected_v4: String = DEFAULT_V4_SAVE
        .lines()
        .filter(|l| {
            !l.starts_with(":INPUT") && !l.starts_with(":FORWARD") && !l.starts_with(":OUTPUT")
        })
        .filter(|l| {
            !l.starts_with("-A INPUT")
                && !l.starts_with("-A FORWARD")
                && !l.starts_with("-A OUTPUT")
        })
        .filter(|l| *l != "COMMIT")
        .map(|l| format!("{l}\n"))
        .chain([
            "-I INPUT 1 -j TOLLGATE-INPUT\n".to_string(),
            "-I FORWARD 1 -j TOLLGATE-FORWARD\n".to_string(),
            "-I OUTPUT 1 -j TOLLGATE-OUTPUT\n".to_string(),
            "COMMIT\n".to_string(),
        ])
        .collect();
    assert_eq!(changes.v4.restore_text().unwrap(), expected_v4);
    let expected_mangle: String = DEFAULT_V4_MANGLE_SAVE
        .lines()
        .filter(|l| !l.ends_with(" ACCEPT [0:0]"))
        .filter(|l| !l.starts_with("-A FORWARD") && !l.starts_with("-A POSTROUTING"))
        .filter(|l| *l != "COMMIT")
        .map(|l| format!("{l}\n"))
        .chain([
            "-I FORWARD 1 -j TOLLGATE-FORWARD\n".to_string(),
            "-I POSTROUTING 1 -m mark --mark 0x200000/0xf00000 -j TOLLGATE-POSTROUTING\n"
                .to_string(),
            "COMMIT\n".to_string(),
        ])
        .collect();
    assert_eq!(
        changes
            .mangle_v4
            .restore_text_in(TableKind::Mangle)
            .unwrap(),
        expected_mangle
    );
    assert_eq!(
        changes.iptables_restore_text(Family::V4).unwrap(),
        expected_mangle + &expected_v4,
        "the mangle table first"
    );
    assert_eq!(
        changes.ipset_prepare_text().unwrap(),
        "create tollgate-endpoints-v4 hash:ip family inet\nadd tollgate-endpoints-v4 10.0.0.5\n\
         create tollgate-endpoints-v6 hash:ip family inet6\n"
    );
    assert!(changes.ipset_cleanup_text().is_none());
}

/// Every rule of every table of a state planned with everything a
/// ruleset can need (node hooks, endpoints, published ports, unknown
/// ranges, FQDN selectors, the verdict cache, privileged entries, L7
/// queues), written the way iptables-save prints it: the rules the kernel
/// reads back must be the planned text, or every drift check rewrites
/// them. The spellings iptables-save normalizes are checked here.
#[test]
fn every_planned_rule_is_spelled_as_iptables_save_prints_it() {
    let enforced = Enforced {
        ranges: vec![
            "10.1.0.0/24".parse().unwrap(),
            "fd00:1::/64".parse().unwrap(),
        ],
        known: vec!["10.1.0.5".parse().unwrap()],
        published: vec![(PortProtocol::Tcp, 8080)],
        verdict_cache: Some(crate::ruleset::VerdictCache {
            generation: 0xab,
            timeout_secs: 60,
            max_entries: 1024,
            lookup: true,
        }),
        ..targets(false, true, &["10.1.0.5", "fd00:1::5"])
    };
    let yaml = "datapath:\n  privileged: ['10.0.0.0/8,udp/53', {cidr: '::/0', hooks: [forward]}]\n";
    let fqdn = [crate::fqdn::FqdnPattern::new("*.example.test")];
    let state = desired(&config(yaml), &enforced, &fqdn);
    for family in Family::ALL {
        for table in [state.table(family), state.mangle(family)] {
            for rule in table.chains.values().flatten() {
                let order = ["INVALID", "NEW", "RELATED", "ESTABLISHED", "UNTRACKED"];
                for word in rule.split(' ') {
                    let listed: Vec<&str> = word.split(',').collect();
                    if listed.len() > 1 && listed.iter().all(|s| order.contains(s)) {
                        let mut sorted = listed.clone();
                        sorted.sort_by_key(|s| order.iter().position(|o| o == s));
                        assert_eq!(
                            listed, sorted,
                            "{rule}: conntrack states out of iptables-save's order"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn installed_state_parses_back_to_an_empty_diff() {
    let desired = desired(&config(""), &targets(true, false, &["10.0.0.5"]), &[]);
    let v6_save = render_save(&desired, Family::V6);
    let mut installed = State::parse(DEFAULT_V4_SAVE, &v6_save, DEFAULT_IPSET_SAVE);
    installed.mangle_v4 = Table::parse_in(DEFAULT_V4_MANGLE_SAVE, TableKind::Mangle);
    installed.mangle_v6 = Table::parse_in(
        &render_save_in(desired.mangle(Family::V6), TableKind::Mangle),
        TableKind::Mangle,
    );
    let changes = Changes::between(&desired, &installed);
    assert!(changes.is_empty(), "{changes:#?}");
}

/// iptables-save text for a desired filter table, as the kernel would
/// print it.
fn render_save(state: &State, family: Family) -> String {
    render_save_in(state.table(family), TableKind::Filter)
}

/// iptables-save text for a desired table of `kind`.
fn render_save_in(table: &Table, kind: TableKind) -> String {
    let mut out = format!("*{}\n", kind.name());
    for builtin in kind.builtins() {
        out.push_str(&format!(":{builtin} ACCEPT [0:0]\n"));
    }
    for name in table.chains.keys() {
        out.push_str(&format!(":{name} - [0:0]\n"));
    }
    for (chain, rule) in &table.jumps {
        out.push_str(&format!("-A {chain} {rule}\n"));
    }
    for (name, rules) in &table.chains {
        for rule in rules {
            out.push_str(&format!("-A {name} {rule}\n"));
        }
    }
    out.push_str("COMMIT\n");
    out
}

#[test]
fn ipv6_table_allows_neighbour_discovery_and_uses_icmp6_reject() {
    let desired = desired(&config(""), &targets(false, true, &["fd00::5"]), &[]);
    assert_eq!(
        desired.v6.chains["TOLLGATE-INPUT"],
        [
            "-i lo -j ACCEPT",
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT",
            "-p tcp -m mark --mark 0x0/0xf00000 -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7",
            "-m mark --mark 0x0/0xf00000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT",
            "-m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000",
            "-m mark --mark 0x100000/0xf00000 -j ACCEPT",
            "-m mark --mark 0x400000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000",
            "-m mark --mark 0x400000/0xf00000 -j ACCEPT",
            "-m mark --mark 0x500000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000",
            "-m mark --mark 0x500000/0xf00000 -j ACCEPT",
            "-m mark --mark 0x600000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000",
            "-m mark --mark 0x600000/0xf00000 -j DROP",
            "-p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset",
            "-m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp6-adm-prohibited",
            "-m connmark --mark 0x600000/0xf00000 -j DROP",
            "-p tcp -m connmark --mark 0x400000/0xf00000 -j TOLLGATE-L7-QUEUE",
            "-p tcp -m connmark --mark 0x500000/0xf00000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7",
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x500000/0xf00000 -j ACCEPT",
            "-p ipv6-icmp -m icmp6 --icmpv6-type 133 -m hl --hl-eq 255 -j ACCEPT",
            "-p ipv6-icmp -m icmp6 --icmpv6-type 134 -m hl --hl-eq 255 -j ACCEPT",
            "-p ipv6-icmp -m icmp6 --icmpv6-type 135 -m hl --hl-eq 255 -j ACCEPT",
            "-p ipv6-icmp -m icmp6 --icmpv6-type 136 -m hl --hl-eq 255 -j ACCEPT",
            "-p ipv6-icmp -m icmp6 --icmpv6-type 137 -m hl --hl-eq 255 -j ACCEPT",
            "-s fe80::/10 -p ipv6-icmp -m icmp6 --icmpv6-type 130 -j RETURN",
            "-s fe80::/10 -p ipv6-icmp -m icmp6 --icmpv6-type 131 -j RETURN",
            "-s fe80::/10 -p ipv6-icmp -m icmp6 --icmpv6-type 132 -j RETURN",
            "-s fe80::/10 -p ipv6-icmp -m icmp6 --icmpv6-type 143 -j RETURN",
            "-p ipv6-icmp -m set --match-set tollgate-endpoints-v6 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-p ipv6-icmp -m set --match-set tollgate-endpoints-v6 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-m set --match-set tollgate-endpoints-v6 src -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101",
            "! -p ipv6-icmp -m set --match-set tollgate-endpoints-v6 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101",
            "-m set --match-set tollgate-endpoints-v6 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101",
            "! -p ipv6-icmp -m set --match-set tollgate-endpoints-v6 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101",
        ]
    );
    assert_eq!(
        &desired.v6.chains["TOLLGATE-OUTPUT"][desired.v6.chains["TOLLGATE-OUTPUT"].len() - 2..],
        [
            "-m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101",
            "! -p ipv6-icmp -m conntrack --ctstate INVALID -j NFQUEUE --queue-balance 100:101"
        ]
    );
    assert_eq!(
        desired.sets["tollgate-endpoints-v6"]
            .members
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>(),
        ["fd00::5"]
    );
    assert!(desired.sets["tollgate-endpoints-v4"].members.is_empty());
    let l7 = &desired.v6.chains["TOLLGATE-L7"];
    assert_eq!(l7.len(), 16);
    assert_eq!(
        l7[..4],
        [
            "-m length --length 101:65535 -j TOLLGATE-L7-QUEUE",
            "-p tcp -m tcp --tcp-flags FIN FIN -j TOLLGATE-L7-QUEUE",
            "-p tcp -m tcp --tcp-flags RST RST -j TOLLGATE-L7-QUEUE",
            "-p tcp -m tcp --tcp-flags URG URG -j TOLLGATE-L7-QUEUE"
        ]
    );
    assert_eq!(
        l7[7],
        "-m u32 --u32 \"0x4>>0x8&0xff=0x6&&0x4>>0x10=0x20&&0x34>>0x1c=0x8\" -j RETURN"
    );
    assert_eq!(l7[15], "-j TOLLGATE-L7-QUEUE");
    let queue_rule = |direction: &str, shift: &str, layout: &str, ports: &str| {
        format!(
            "-m conntrack --ctdir {direction} -m u32 --u32 \"{layout}{ports}>>{shift}&0x1=0x1\" \
             -j NFQUEUE --queue-num 104"
        )
    };
    let one = "0x4>>0x8&0xff=0x0,0x2b,0x3c&&0x28>>0x18=0x6&&";
    let two = "0x4>>0x8&0xff=0x0,0x2b,0x3c&&0x28>>0x18=0x0,0x2b,0x3c&&\
               0x28>>0xd&0x7f8@0x30>>0x18=0x6&&";
    let mut expected = Vec::new();
    for (direction, shift) in [("ORIGINAL", "0x11"), ("REPLY", "0x1")] {
        expected.extend([
            queue_rule(direction, shift, "0x4>>0x8&0xff=0x6&&", "0x28"),
            queue_rule(direction, shift, one, "0x28>>0xd&0x7f8@0x30"),
            queue_rule(
                direction,
                shift,
                two,
                "0x28>>0xd&0x7f8@0x30>>0xd&0x7f8@0x38",
            ),
        ]);
    }
    expected.push("-j NFQUEUE --queue-num 103".to_string());
    assert_eq!(desired.v6.chains["TOLLGATE-L7-QUEUE"], expected);
}

#[test]
fn open_mode_single_queue_interfaces_and_privileged_entries() {
    let yaml = "queues: {count: 1, base: 7}\n\
                datapath:\n  failMode: open\n  interfaces: ['veth*', eth0]\n\
                \x20 privileged: ['10.0.0.0/24,tcp/22', 'fd00::/64,icmp', {cidr: 192.168.7.1/32, hooks: [forward, input]}]\n\
                \x20 markMask: '0x70000'\n";
    let desired = desired(&config(yaml), &targets(false, false, &[]), &[]);
    // The filter table's FORWARD carries out what the mangle table decided.
    assert_eq!(
        desired.v4.chains["TOLLGATE-FORWARD"],
        [
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x10000/0x70000 -j ACCEPT",
            "-m mark --mark 0x0/0x70000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x50000/0x70000 -j ACCEPT",
            "-m mark --mark 0x10000/0x70000 -j ACCEPT",
            "-m mark --mark 0x40000/0x70000 -j ACCEPT",
            "-m mark --mark 0x50000/0x70000 -j ACCEPT",
            "-p tcp -m mark --mark 0x20000/0x70000 -j REJECT --reject-with tcp-reset",
            "-m mark --mark 0x20000/0x70000 -j REJECT --reject-with icmp-admin-prohibited",
            "-m connmark --mark 0x40000/0x70000 -j ACCEPT",
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x50000/0x70000 -j ACCEPT",
            "-s 192.168.7.1/32 -j ACCEPT",
            "-d 192.168.7.1/32 -j ACCEPT",
        ]
    );
    assert_eq!(
        desired.mangle_v4.chains[POSTROUTING_CHAIN],
        ["-m mark --mark 0x20000/0x70000 -j DROP"]
    );
    let forward = &desired.mangle_v4.chains["TOLLGATE-FORWARD"];
    assert_eq!(
        forward,
        &[
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x10000/0x70000 -j ACCEPT",
            "-p tcp -m mark --mark 0x0/0x70000 -m connmark --mark 0x50000/0x70000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7",
            "-m mark --mark 0x0/0x70000 -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x50000/0x70000 -j ACCEPT",
            "-m mark --mark 0x10000/0x70000 -j CONNMARK --save-mark --nfmask 0x70000 --ctmask 0x70000",
            "-m mark --mark 0x10000/0x70000 -j ACCEPT",
            "-m mark --mark 0x40000/0x70000 -j CONNMARK --save-mark --nfmask 0x70000 --ctmask 0x70000",
            "-m mark --mark 0x40000/0x70000 -j ACCEPT",
            "-m mark --mark 0x50000/0x70000 -j CONNMARK --save-mark --nfmask 0x70000 --ctmask 0x70000",
            "-m mark --mark 0x50000/0x70000 -j ACCEPT",
            "-m mark --mark 0x60000/0x70000 -j CONNMARK --save-mark --nfmask 0x70000 --ctmask 0x70000",
            "-m mark --mark 0x60000/0x70000 -j DROP",
            "-m mark --mark 0x20000/0x70000 -j ACCEPT",
            "-m connmark --mark 0x60000/0x70000 -j DROP",
            "-p tcp -m connmark --mark 0x40000/0x70000 -j TOLLGATE-L7-QUEUE",
            "-p tcp -m connmark --mark 0x50000/0x70000 -m conntrack --ctdir ORIGINAL -j TOLLGATE-L7",
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x50000/0x70000 -j ACCEPT",
            // ICMP without a connection, on the enforced interfaces.
            "-i veth+ -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-i veth+ -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-i eth0 -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-i eth0 -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-o veth+ -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-o veth+ -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-o eth0 -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            "-o eth0 -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID,UNTRACKED -j DROP",
            // Only the entry that lists `forward`, not excepting endpoints
            // (routed traffic is exempted on purpose): the others are the
            // Node's own traffic.
            "-s 192.168.7.1/32 -j ACCEPT",
            "-d 192.168.7.1/32 -j ACCEPT",
            "-i veth+ -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7 --queue-bypass",
            "-i veth+ ! -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-num 7 --queue-bypass",
            "-i veth+ -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7 --queue-bypass",
            "-i veth+ ! -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-num 7 --queue-bypass",
            "-i eth0 -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7 --queue-bypass",
            "-i eth0 ! -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-num 7 --queue-bypass",
            "-i eth0 -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7 --queue-bypass",
            "-i eth0 ! -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-num 7 --queue-bypass",
            "-o veth+ -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7 --queue-bypass",
            "-o veth+ ! -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-num 7 --queue-bypass",
            "-o veth+ -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7 --queue-bypass",
            "-o veth+ ! -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-num 7 --queue-bypass",
            "-o eth0 -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7 --queue-bypass",
            "-o eth0 ! -p icmp -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate INVALID -j NFQUEUE --queue-num 7 --queue-bypass",
            "-o eth0 -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7 --queue-bypass",
            "-o eth0 ! -p icmp -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate INVALID -j NFQUEUE --queue-num 7 --queue-bypass",
        ]
    );
    let input_v6 = &desired.v6.chains["TOLLGATE-INPUT"];
    assert!(input_v6.contains(
        &"-s fd00::/64 -p ipv6-icmp -m set ! --match-set tollgate-endpoints-v6 src -j ACCEPT"
            .to_string()
    ));
    assert!(!input_v6.iter().any(|r| r.contains("10.0.0.0")));
    assert!(!desired.mangle_v6.chains["TOLLGATE-FORWARD"]
        .iter()
        .any(|r| r.contains("fd00::")));
    let output_v4 = &desired.v4.chains["TOLLGATE-OUTPUT"];
    assert!(output_v4.contains(
        &"-d 10.0.0.0/24 -p tcp -m set ! --match-set tollgate-endpoints-v4 dst -m tcp --dport 22 -j ACCEPT"
            .to_string()
    ));
    assert!(!output_v4.iter().any(|r| r.starts_with("-s 10.0.0.0")));
    assert!(!output_v4.iter().any(|r| r.contains("192.168.7.1")));
    let input_v4 = &desired.v4.chains["TOLLGATE-INPUT"];
    for rule in [
        "-s 10.0.0.0/24 -p tcp -m set ! --match-set tollgate-endpoints-v4 src -m tcp --dport 22 -j ACCEPT",
        "-s 192.168.7.1/32 -m set ! --match-set tollgate-endpoints-v4 src -j ACCEPT",
    ] {
        assert!(input_v4.contains(&rule.to_string()), "{input_v4:#?}");
    }
    let l7_v4 = &desired.v4.chains["TOLLGATE-L7"];
    assert_eq!(
        l7_v4[..2],
        [
            "-m length --length 81:65535 -j TOLLGATE-L7-QUEUE",
            "-p tcp -m tcp --tcp-flags FIN FIN -j TOLLGATE-L7-QUEUE"
        ]
    );
    assert_eq!(l7_v4.last().unwrap(), "-j TOLLGATE-L7-QUEUE");
    assert_eq!(
        desired.v4.chains["TOLLGATE-L7-QUEUE"],
        [
            "-m conntrack --ctdir ORIGINAL -m u32 --u32 \"0x0>>0x16&0x3c@0x0>>0x11&0x1=0x1\" \
             -j NFQUEUE --queue-num 10 --queue-bypass",
            "-m conntrack --ctdir REPLY -m u32 --u32 \"0x0>>0x16&0x3c@0x0>>0x1&0x1=0x1\" \
             -j NFQUEUE --queue-num 10 --queue-bypass",
            "-j NFQUEUE --queue-num 9 --queue-bypass",
        ]
    );
}

/// Reads a `u32` match as `xt_u32` does: each `&&`-joined test reads the
/// 32-bit word at its first number, then applies `&`, `<<`, `>>` and `@`
/// (move on by the value so far, read the word at the next number) in
/// turn, and passes when the result is one of its values or ranges; a read
/// past the packet fails the test.
fn u32_matches(expression: &str, packet: &[u8]) -> bool {
    let number = |text: &str| u32::from_str_radix(text.strip_prefix("0x").unwrap(), 16).unwrap();
    let word = |at: u64| -> Option<u32> {
        let at = usize::try_from(at).ok()?;
        let bytes = packet.get(at..at.checked_add(4)?)?;
        Some(u32::from_be_bytes(bytes.try_into().ok()?))
    };
    expression.split("&&").all(|test| {
        let (location, values) = test.split_once('=').unwrap();
        let location = location.replace(">>", ">").replace("<<", "<");
        let mut steps = Vec::new();
        let (mut op, mut start) = (' ', 0);
        for (i, c) in location.char_indices() {
            if "&<>@".contains(c) {
                steps.push((op, number(&location[start..i])));
                (op, start) = (c, i + 1);
            }
        }
        steps.push((op, number(&location[start..])));
        let (mut base, mut value) = (0u64, 0u32);
        for (op, n) in steps {
            let next = match op {
                ' ' => word(u64::from(n)),
                '&' => Some(value & n),
                '>' => Some(value >> n),
                '<' => Some(value << n),
                _ => {
                    base += u64::from(value);
                    word(base + u64::from(n))
                }
            };
            match next {
                Some(next) => value = next,
                None => return false,
            }
        }
        values.split(',').any(|range| {
            let (low, high) = range.split_once(':').unwrap_or((range, range));
            (number(low)..=number(high)).contains(&value)
        })
    })
}

/// The queue the L7 queue chain sends a TCP segment to: that of its first
/// rule whose conntrack direction and `u32` test match.
fn chosen_l7_queue(rules: &[String], original: bool, packet: &[u8]) -> u16 {
    for rule in rules {
        let (_, queue) = rule.split_once("--queue-num ").unwrap();
        let queue: u16 = queue.split(' ').next().unwrap().parse().unwrap();
        let Some(test) = rule.strip_prefix("-m conntrack --ctdir ") else {
            assert!(rule.starts_with("-j NFQUEUE"), "{rule}");
            return queue;
        };
        let (direction, test) = test.split_once(" -m u32 --u32 ").unwrap();
        let expression = test.split('"').nth(1).unwrap();
        if (direction == "ORIGINAL") == original && u32_matches(expression, packet) {
            return queue;
        }
    }
    panic!("the chain ended without queuing")
}

/// How a test segment's IP header is laid out.
#[derive(Clone, Copy, Debug)]
enum Ip {
    /// IPv4 with this many 4-byte words of options.
    V4 { option_words: u8 },
    /// IPv6 with these extension headers before TCP: (next header value,
    /// length in 8-byte units after the first).
    V6 { extensions: &'static [(u8, u8)] },
}

/// A TCP segment (20-byte header, no payload) from `sport` to `dport`.
fn tcp_segment(ip: Ip, sport: u16, dport: u16) -> Vec<u8> {
    let mut tcp = [0u8; 20];
    tcp[..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&dport.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = 0x18;
    let mut packet = Vec::new();
    match ip {
        Ip::V4 { option_words } => {
            let header = 20 + 4 * usize::from(option_words);
            let total = u16::try_from(header + tcp.len()).unwrap();
            packet.extend_from_slice(&[0x45 + option_words, 0]);
            packet.extend_from_slice(&total.to_be_bytes());
            packet.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
            packet.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
            packet.resize(header, 1); // NOP options
        }
        Ip::V6 { extensions } => {
            let kinds: Vec<u8> = extensions
                .iter()
                .map(|(kind, _)| *kind)
                .chain([6])
                .collect();
            let headers: Vec<u8> = extensions
                .iter()
                .zip(&kinds[1..])
                .flat_map(|(&(_, units), &next)| {
                    let mut header = vec![0u8; 8 * (usize::from(units) + 1)];
                    header[..2].copy_from_slice(&[next, units]);
                    header
                })
                .collect();
            let length = u16::try_from(headers.len() + tcp.len()).unwrap();
            packet.extend_from_slice(&[0x60, 0, 0, 0]);
            packet.extend_from_slice(&length.to_be_bytes());
            packet.extend_from_slice(&[kinds[0], 64]);
            packet.extend_from_slice(&[0xfd; 32]);
            packet.extend_from_slice(&headers);
        }
    }
    packet.extend_from_slice(&tcp);
    packet
}

#[test]
fn the_l7_queue_chain_sends_both_directions_of_a_connection_to_its_client_port_s_queue() {
    // Every bucket with both port parities, then ports across the range.
    let ports: Vec<u16> = (0..128).chain((128..=u16::MAX).step_by(251)).collect();
    for count in [2u16, 3, 4, 7, 64] {
        let config = config(&format!("l7: {{queues: {count}}}\n"));
        let l7 = config.queue_numbers().l7;
        let desired = desired(&config, &targets(false, false, &[]), &[]);
        let mut used = std::collections::BTreeMap::<u16, usize>::new();
        for port in (0..128).step_by(2) {
            *used.entry(l7_queue_of(l7, port)).or_default() += 1;
        }
        assert_eq!(
            used.keys().copied().collect::<Vec<_>>(),
            l7.iter().collect::<Vec<_>>()
        );
        let (fewest, most) = (used.values().min().unwrap(), used.values().max().unwrap());
        assert!(most - fewest <= 1, "{count} queues: {used:?}");
        for family in Family::ALL {
            let rules = &desired.table(family).chains[L7_QUEUE_CHAIN];
            for rule in rules {
                let values = rule
                    .split('"')
                    .nth(1)
                    .and_then(|e| e.rsplit('=').next())
                    .map_or(0, |values| values.matches(',').count() + 1);
                assert!(values <= U32_VALUES, "{rule}");
            }
            let layouts = match family {
                Family::V4 => vec![Ip::V4 { option_words: 0 }, Ip::V4 { option_words: 3 }],
                // None; destination options; hop-by-hop (16 bytes) then
                // destination options.
                Family::V6 => vec![
                    Ip::V6 { extensions: &[] },
                    Ip::V6 {
                        extensions: &[(60, 0)],
                    },
                    Ip::V6 {
                        extensions: &[(0, 1), (60, 0)],
                    },
                ],
            };
            for &port in &ports {
                let queue = l7_queue_of(l7, port);
                for &ip in &layouts {
                    let client = tcp_segment(ip, port, 8080);
                    let server = tcp_segment(ip, 8080, port);
                    assert_eq!(
                        chosen_l7_queue(rules, true, &client),
                        queue,
                        "{ip:?} {port}"
                    );
                    assert_eq!(
                        chosen_l7_queue(rules, false, &server),
                        queue,
                        "{ip:?} {port}"
                    );
                }
            }
            if family == Family::V6 {
                // Ports behind three extension headers, or behind an
                // authentication header, are out of reach.
                for extensions in [&[(0, 0), (43, 1), (60, 0)][..], &[(51, 1)]] {
                    for port in [2, 3] {
                        let hidden = tcp_segment(Ip::V6 { extensions }, port, 8080);
                        assert_eq!(chosen_l7_queue(rules, true, &hidden), l7.first());
                    }
                }
            }
        }
    }
}

#[test]
fn one_l7_queue_is_queued_to_directly() {
    let desired = desired(
        &config("l7: {queues: 1}\n"),
        &targets(true, false, &[]),
        &[],
    );
    for family in Family::ALL {
        let table = desired.table(family);
        assert!(!table.chains.contains_key(L7_QUEUE_CHAIN));
        assert!(table
            .chains
            .values()
            .flatten()
            .all(|r| !r.contains(L7_QUEUE_CHAIN)));
        assert_eq!(
            table.chains[L7_CHAIN].last().unwrap(),
            "-j NFQUEUE --queue-num 103"
        );
        assert!(table.chains[Hook::Input.chain()].contains(
            &"-p tcp -m connmark --mark 0x400000/0xf00000 -j NFQUEUE --queue-num 103".to_string()
        ));
    }
}

#[test]
fn membership_change_touches_only_the_set() {
    let config = config("");
    let before = desired(&config, &targets(false, false, &["10.0.0.5"]), &[]);
    let after = desired(
        &config,
        &targets(false, false, &["10.0.0.5", "10.0.0.6"]),
        &[],
    );
    let changes = Changes::between(&after, &before);
    assert!(changes.v4.is_empty() && changes.v6.is_empty());
    assert_eq!(changes.sets.len(), 1);
    assert!(changes.sets["tollgate-endpoints-v4"].exists);
}

#[test]
fn node_rule_change_rewrites_only_the_affected_chain() {
    let config = config("");
    let before = desired(&config, &targets(false, false, &[]), &[]);
    let after = desired(&config, &targets(true, false, &[]), &[]);
    let changes = Changes::between(&after, &before);
    assert_eq!(
        changes.v4.write.keys().collect::<Vec<_>>(),
        ["TOLLGATE-INPUT"]
    );
    assert_eq!(
        changes.v6.write.keys().collect::<Vec<_>>(),
        ["TOLLGATE-INPUT"]
    );
    assert!(changes.sets.is_empty() && changes.v4.insert_jumps.is_empty());
}

#[test]
fn teardown_removes_everything_owned_and_nothing_else() {
    let desired = desired(&config(""), &targets(true, false, &["10.0.0.5"]), &[]);
    let save = DEFAULT_V4_SAVE.replace(
        "-A INPUT -j TOLLGATE-INPUT\n",
        "-A INPUT -j TOLLGATE-INPUT\n-A INPUT -s 1.2.3.4/32 -j DROP\n",
    );
    let installed = State::parse(
        &save,
        &render_save(&desired, Family::V6),
        DEFAULT_IPSET_SAVE,
    );
    let changes = Changes::between(&State::default(), &installed);
    assert_eq!(
        changes.v4.restore_text().unwrap(),
        "*filter\n:TOLLGATE-FORWARD - [0:0]\n:TOLLGATE-INPUT - [0:0]\n:TOLLGATE-L7 - [0:0]\n\
         :TOLLGATE-L7-QUEUE - [0:0]\n:TOLLGATE-OUTPUT - [0:0]\n\
         -D INPUT -j TOLLGATE-INPUT\n-D FORWARD -j TOLLGATE-FORWARD\n-D OUTPUT -j TOLLGATE-OUTPUT\n\
         -X TOLLGATE-FORWARD\n-X TOLLGATE-INPUT\n-X TOLLGATE-L7\n-X TOLLGATE-L7-QUEUE\n\
         -X TOLLGATE-OUTPUT\nCOMMIT\n"
    );
    assert_eq!(
        changes.ipset_cleanup_text().unwrap(),
        "destroy tollgate-endpoints-v4\ndestroy tollgate-endpoints-v6\n"
    );
    assert!(changes.ipset_prepare_text().is_none());
}

#[test]
fn fqdn_selectors_queue_dns_replies_before_the_shortcut_and_get_learned_sets() {
    let patterns = [
        crate::fqdn::FqdnPattern::new("*.example.test"),
        crate::fqdn::FqdnPattern::new("www.other.test"),
    ];
    let desired = desired(&config(""), &targets(false, true, &[]), &patterns);
    for family in Family::ALL {
        for hook in Hook::ALL {
            let rules = deciding(&desired, family, hook);
            let udp = rules
                .iter()
                .position(|r| {
                    r == "-p udp -m udp --sport 53 -m conntrack --ctstate ESTABLISHED \
                          --ctdir REPLY -j NFQUEUE --queue-num 102"
                })
                .expect("UDP DNS rule");
            assert_eq!(
                rules[udp + 1],
                "-p tcp -m tcp --sport 53 -m conntrack --ctstate ESTABLISHED \
                 --ctdir REPLY -j NFQUEUE --queue-num 102"
            );
            // Later queries of allowed connections, ahead of the shortcut:
            // copied (UDP) or queued (TCP).
            for (i, (protocol, target)) in [
                ("udp", "NFLOG --nflog-group 101 --nflog-threshold 1"),
                ("tcp", "NFQUEUE --queue-num 102"),
            ]
            .iter()
            .enumerate()
            {
                assert_eq!(
                    rules[udp + 2 + i],
                    format!(
                        "-p {protocol} -m {protocol} --dport 53 -m conntrack --ctstate ESTABLISHED \
                         --ctdir ORIGINAL -m connmark --mark 0x100000/0xf00000 -j {target}"
                    )
                );
            }
            // Allowed connections are accepted first, but for DNS (either
            // port 53) and protocols without ports, which meet the shortcut
            // after the DNS rules.
            let first = usize::from(hook != Hook::Forward);
            for (i, protocol) in ["tcp", "udp"].iter().enumerate() {
                assert_eq!(
                    rules[first + i],
                    format!(
                        "-p {protocol} -m multiport ! --ports 53 -m conntrack --ctstate \
                         RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT"
                    )
                );
            }
            let shortcut = rules
                .iter()
                .position(|r| {
                    r == "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark \
                          --mark 0x100000/0xf00000 -j ACCEPT"
                })
                .unwrap();
            assert_eq!(shortcut, udp + 4, "{rules:#?}");
            // The first query of a connection a worker has just allowed:
            // after its mark is saved, before it is accepted.
            let accept = rules
                .iter()
                .position(|r| r == "-m mark --mark 0x100000/0xf00000 -j ACCEPT")
                .unwrap();
            for (i, (protocol, target)) in [
                ("udp", "NFLOG --nflog-group 101 --nflog-threshold 1"),
                ("tcp", "NFQUEUE --queue-num 102"),
            ]
            .iter()
            .enumerate()
            {
                assert_eq!(
                    rules[accept - 2 + i],
                    format!(
                        "-p {protocol} -m {protocol} --dport 53 -m mark --mark 0x100000/0xf00000 \
                         -j {target}"
                    )
                );
            }
            assert!(rules[accept - 3].contains("--save-mark"));
        }
    }
    let names: Vec<&String> = desired.learned.keys().collect();
    assert_eq!(names.len(), 4);
    let wildcard_v4 = fqdn_set(&patterns[0], Family::V4);
    assert!(wildcard_v4.starts_with("tollgate-fqdn-") && wildcard_v4.ends_with("-v4"));
    assert_eq!(wildcard_v4.len(), 27);
    assert!(desired.learned[&wildcard_v4].entries.is_empty());
    assert_eq!(
        desired.learned[&fqdn_set(&patterns[1], Family::V6)].family,
        Family::V6
    );
    // Without selectors: no DNS rule, no learned set.
    let plain = self::desired(&config(""), &targets(false, true, &[]), &[]);
    assert!(plain.learned.is_empty());
    assert!(!plain.v4.chains["TOLLGATE-INPUT"]
        .iter()
        .any(|r| r.contains("--sport 53") || r.contains("--dport 53")));
}

#[test]
fn queries_to_privileged_resolvers_are_shown_to_the_dns_worker_first() {
    let patterns = [crate::fqdn::FqdnPattern::new("*.example.test")];
    let config = config(
        "datapath:\n  privileged: [10.96.0.10/32, '10.0.0.0/8,udp/53', '10.1.0.0/16,tcp/22', {cidr: 'fd00::/64', protocol: TCP, hooks: [FORWARD]}]",
    );
    let desired = desired(&config, &targets(false, true, &[]), &patterns);
    let output = &desired.v4.chains["TOLLGATE-OUTPUT"];
    let at = |rule: &str| output.iter().position(|r| r == rule);
    let queue = "-j NFQUEUE --queue-num 102";
    let copy = "-j NFLOG --nflog-group 101 --nflog-threshold 1";
    // On the Node's own hooks, queries of enforced endpoints are not the
    // entry's: they go to the workers like any connection of theirs.
    let except = "-m set ! --match-set tollgate-endpoints-v4 dst";
    let any = at(&format!("-d 10.96.0.10/32 {except} -j ACCEPT")).unwrap();
    assert_eq!(
        output[any - 2..any],
        [
            format!("-d 10.96.0.10/32 -p udp {except} -m udp --dport 53 {copy}"),
            format!("-d 10.96.0.10/32 -p tcp {except} -m tcp --dport 53 {queue}"),
        ]
    );
    let dns = at(&format!(
        "-d 10.0.0.0/8 -p udp {except} -m udp --dport 53 -j ACCEPT"
    ))
    .unwrap();
    assert_eq!(
        output[dns - 1],
        format!("-d 10.0.0.0/8 -p udp {except} -m udp --dport 53 {copy}")
    );
    let ssh = at(&format!(
        "-d 10.1.0.0/16 -p tcp {except} -m tcp --dport 22 -j ACCEPT"
    ))
    .unwrap();
    assert!(!output[ssh - 1].ends_with(queue), "{output:#?}");
    let forward = &desired.mangle_v6.chains["TOLLGATE-FORWARD"];
    for dir in ["-s", "-d"] {
        let rule = format!("{dir} fd00::/64 -p tcp -m tcp --dport 53 {queue}");
        assert!(forward.contains(&rule), "{forward:#?}");
    }
    assert!(!desired.v6.chains["TOLLGATE-OUTPUT"]
        .iter()
        .any(|r| r.contains("fd00::/64")));
    // Without selectors nothing is queued.
    let plain = self::desired(&config, &targets(false, true, &[]), &[]);
    assert!(!plain.v4.chains["TOLLGATE-OUTPUT"]
        .iter()
        .any(|r| r.contains("--dport 53 -j NFQUEUE")));
}

/// The shipped no-lock-out entries (TCP 22 from anywhere) exempt the
/// Node's own SSH, on INPUT and OUTPUT, for every peer but an enforced
/// endpoint (a Pod's connection to its own Node meets its policy and the
/// Node's, a worker decides it), and nothing routed: a Pod's connection to
/// port 22 of another Pod is still queued and decided. A range of every
/// address is written as iptables-save prints it (no `-s 0.0.0.0/0`),
/// others as their network address.
#[test]
fn privileged_entries_never_exempt_an_enforced_endpoint() {
    let config = config(
        "datapath:\n  privileged:\n  - {cidr: 0.0.0.0/0, protocol: TCP, port: 22}\n  - '::/0,tcp/22'\n  - {cidr: 10.1.2.3/8, protocol: UDP}\n",
    );
    let desired = desired(&config, &targets(true, true, &["10.0.0.5"]), &[]);
    for (family, set) in [
        (&desired.v4, "tollgate-endpoints-v4"),
        (&desired.v6, "tollgate-endpoints-v6"),
    ] {
        let input = &family.chains["TOLLGATE-INPUT"];
        let entry = format!("-p tcp -m set ! --match-set {set} src -m tcp --dport 22 -j ACCEPT");
        let at = input.iter().position(|r| *r == entry).expect("INPUT entry");
        // Behind it, the whole hook goes to the workers: the enforced
        // endpoint's connection is queued there.
        assert!(input[at + 1..]
            .iter()
            .any(|r| r == "-m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101"));
        assert!(family.chains["TOLLGATE-OUTPUT"].contains(&format!(
            "-p tcp -m set ! --match-set {set} dst -m tcp --dport 22 -j ACCEPT"
        )));
        let forward = &family.chains["TOLLGATE-FORWARD"];
        assert!(
            !forward.iter().any(|r| r.contains("--dport 22")),
            "{forward:#?}"
        );
    }
    assert!(desired.v4.chains["TOLLGATE-INPUT"].contains(
        &"-s 10.0.0.0/8 -p udp -m set ! --match-set tollgate-endpoints-v4 src -j ACCEPT"
            .to_string()
    ));
    // Listed explicitly, forward is privileged too, both ways, for routed
    // traffic of endpoints as well: that is what listing it asks for.
    let config = self::config(
        "datapath:\n  privileged: [{cidr: 10.0.0.0/8, protocol: TCP, port: 22, hooks: [forward]}]\n",
    );
    let desired = self::desired(&config, &targets(true, true, &[]), &[]);
    let v4 = &desired.v4.chains;
    for dir in ["-s", "-d"] {
        let rule = format!("{dir} 10.0.0.0/8 -p tcp -m tcp --dport 22 -j ACCEPT");
        assert!(v4["TOLLGATE-FORWARD"].contains(&rule));
    }
    for chain in ["TOLLGATE-INPUT", "TOLLGATE-OUTPUT"] {
        assert!(
            !v4[chain].iter().any(|r| r.contains("10.0.0.0/8")),
            "{chain}"
        );
    }
}

/// Whether `rule` can take a packet conntrack places in no connection
/// (`INVALID`, `UNTRACKED`) out of the chain: everything but the drops
/// themselves, the rules that need a connection or a worker's verdict
/// (ctstate, connmark, packet mark), loopback, and neighbour discovery
/// with hop limit 255 (on-link, excepted on purpose).
fn can_pass_unconnected(rule: &str) -> bool {
    let leaves = [" -j ACCEPT", " -j NFQUEUE", " -j TOLLGATE-", " -j RETURN"]
        .iter()
        .any(|t| rule.contains(t));
    let needs_state = rule.contains("--ctstate NEW")
        || rule.contains("--ctstate RELATED,ESTABLISHED")
        || rule.contains("--ctstate ESTABLISHED")
        || rule.contains("-m connmark")
        || rule.contains("-m mark")
        || rule.starts_with("-i lo ")
        || rule.starts_with("-o lo ")
        || rule.contains("--hl-eq 255")
        || rule.contains("! -p icmp")
        || rule.contains("! -p ipv6-icmp");
    leaves && !needs_state
}

/// ICMP that belongs to no connection is dropped for what each hook
/// enforces (the endpoints as source and as destination; the whole hook
/// where a Node policy applies; every interface configured), IPv4 and
/// IPv6, ahead of the privileged entries and the verdict cache, and no rule
/// above the drops lets such a packet out of the chain but on-link
/// neighbour discovery (hop limit 255) and listener discovery from a
/// link-local source.
#[test]
fn icmp_without_a_connection_is_dropped_before_any_rule_could_pass_it() {
    let config = config(
        "datapath:\n  interfaces: [eth0]\n  privileged: ['0.0.0.0/0', '::/0', {cidr: 10.0.0.0/8, hooks: [forward]}, {cidr: 'fd00::/8', hooks: [forward]}]\n",
    );
    let cache = VerdictCache {
        generation: 7,
        timeout_secs: 30,
        max_entries: 1000,
        lookup: true,
    };
    let patterns = [FqdnPattern::new("*.example.test")];
    for (ingress, egress) in [(true, false), (false, true)] {
        let enforced = Enforced {
            verdict_cache: Some(cache),
            ..targets(ingress, egress, &["10.0.0.5", "fd00::5"])
        };
        let state = desired(&config, &enforced, &patterns);
        for family in Family::ALL {
            let (icmp, set) = match family {
                Family::V4 => ("icmp", "tollgate-endpoints-v4"),
                Family::V6 => ("ipv6-icmp", "tollgate-endpoints-v6"),
            };
            for hook in Hook::ALL {
                let rules = deciding(&state, family, hook);
                let whole = match hook {
                    Hook::Input => ingress,
                    Hook::Output => egress,
                    Hook::Forward => false,
                };
                let flags: &[&str] = match hook {
                    Hook::Input => &["-i"],
                    Hook::Output => &["-o"],
                    Hook::Forward => &["-i", "-o"],
                };
                let mut drops = Vec::new();
                for flag in flags {
                    let selections: Vec<String> = if whole {
                        vec![String::new()]
                    } else {
                        ["src", "dst"]
                            .iter()
                            .map(|d| format!("-m set --match-set {set} {d} "))
                            .collect()
                    };
                    for selection in selections {
                        drops.push(format!(
                            "{flag} eth0 -p {icmp} {selection}-m conntrack --ctstate INVALID,UNTRACKED -j DROP"
                        ));
                    }
                }
                let first = rules
                    .iter()
                    .position(|r| *r == drops[0])
                    .unwrap_or_else(|| panic!("{family:?} {hook:?}: {rules:#?}"));
                assert_eq!(rules[first..first + drops.len()], drops[..]);
                let before: Vec<&String> = rules[..first]
                    .iter()
                    .filter(|r| can_pass_unconnected(r))
                    .collect();
                let discovery: Vec<String> = match family {
                    Family::V4 => Vec::new(),
                    Family::V6 => [130, 131, 132, 143]
                        .iter()
                        .map(|t| {
                            format!(
                                "-s fe80::/10 -p ipv6-icmp -m icmp6 --icmpv6-type {t} -j RETURN"
                            )
                        })
                        .collect(),
                };
                assert_eq!(
                    before.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                    discovery,
                    "{family:?} {hook:?}"
                );
                // The privileged entries and the cache come after.
                let later = |r: &String| {
                    r.contains("! --match-set")
                        || r.contains("0.0.0/8 -j ACCEPT")
                        || r.contains("fd00::/8 -j ACCEPT")
                        || r.contains("tollgate-vc-")
                };
                assert!(rules.iter().any(later), "{family:?} {hook:?}: {rules:#?}");
                assert!(
                    !rules[..first].iter().any(later),
                    "{family:?} {hook:?}: {rules:#?}"
                );
            }
        }
    }
    // Before the first snapshot: INPUT and FORWARD whole, OUTPUT nothing.
    let held = startup(&config.datapath, &config.queue_numbers());
    for family in Family::ALL {
        let icmp = match family {
            Family::V4 => "icmp",
            Family::V6 => "ipv6-icmp",
        };
        let chains = &held.table(family).chains;
        assert!(chains["TOLLGATE-INPUT"].contains(&format!(
            "-i eth0 -p {icmp} -m conntrack --ctstate INVALID,UNTRACKED -j DROP"
        )));
        assert!(deciding(&held, family, Hook::Forward).contains(&format!(
            "-o eth0 -p {icmp} -m conntrack --ctstate INVALID,UNTRACKED -j DROP"
        )));
        assert!(!chains["TOLLGATE-OUTPUT"]
            .iter()
            .any(|r| r.contains("INVALID,UNTRACKED") || r.contains("--icmpv6-type 130")));
    }
}

/// Neighbour discovery in FORWARD is exempt only with hop limit 255: a
/// bridge carries it intact, a router lowers it (and receivers discard it
/// then). On the Node's own hooks it is accepted with that hop limit, as
/// before, whatever the policy.
#[test]
fn only_on_link_neighbour_discovery_passes_the_icmp_drops() {
    let state = desired(&config(""), &targets(false, false, &["fd00::5"]), &[]);
    let forward = &state.mangle_v6.chains["TOLLGATE-FORWARD"];
    let nd: Vec<String> = [133, 134, 135, 136, 137]
        .iter()
        .map(|t| format!("-p ipv6-icmp -m icmp6 --icmpv6-type {t} -m hl --hl-eq 255 -j RETURN"))
        .collect();
    let at = forward
        .iter()
        .position(|r| *r == nd[0])
        .expect("ND on FORWARD");
    assert_eq!(forward[at..at + 5], nd[..]);
    let drop = forward
        .iter()
        .position(|r| r.contains("INVALID,UNTRACKED -j DROP"))
        .unwrap();
    assert!(at < drop);
    for chain in ["TOLLGATE-INPUT", "TOLLGATE-OUTPUT"] {
        let rules = &state.v6.chains[chain];
        assert!(rules.contains(
            &"-p ipv6-icmp -m icmp6 --icmpv6-type 135 -m hl --hl-eq 255 -j ACCEPT".to_string()
        ));
        assert!(!rules.iter().any(|r| r.contains("--icmpv6-type 135 -j")));
    }
    // IPv4 has no discovery in ICMP (ARP is not IP).
    assert!(!state
        .v4
        .chains
        .values()
        .flatten()
        .any(|r| r.contains("RETURN") && r.contains("icmp")));
}

#[test]
fn cached_verdicts_are_answered_ahead_of_the_queue_from_the_generations_sets() {
    let config = config("interfaces: [eth0]\n");
    let cache = VerdictCache {
        generation: 0xab,
        timeout_secs: 30,
        max_entries: 1000,
        lookup: true,
    };
    let enforced = Enforced {
        verdict_cache: Some(cache),
        ..targets(true, false, &["10.0.0.5"])
    };
    let pattern = FqdnPattern::new("*.example.test");
    let state = desired(&config, &enforced, std::slice::from_ref(&pattern));
    assert_eq!(state.cache.len(), 18, "3 hooks × 3 verdicts × 2 families");
    assert_eq!(
        state.cache["tollgate-vc-00000000ab-fr-v6"],
        CacheSet {
            family: Family::V6,
            timeout_secs: 30,
            max_entries: 1000
        }
    );
    // The rules name a lookup set per hook, verdict and family, which
    // holds the generation's set.
    assert_eq!(state.cache_lists.len(), 18);
    assert_eq!(
        state.cache_lists["tollgate-vcl-fr-v6"],
        BTreeSet::from(["tollgate-vc-00000000ab-fr-v6".to_string()])
    );
    let input = &state.v4.chains["TOLLGATE-INPUT"];
    let cached = "-i eth0 -m conntrack --ctstate NEW -m set --match-set tollgate-vcl-ia-v4 src,dst,dst -j TOLLGATE-CACHED-ALLOW";
    let at = input.iter().position(|r| r == cached).expect(cached);
    assert_eq!(
        input[at + 1..at + 3],
        [
            "-i eth0 -m conntrack --ctstate NEW -m set --match-set tollgate-vcl-id-v4 src,dst,dst -j TOLLGATE-CACHED-DROP",
            "-i eth0 -m conntrack --ctstate NEW -m set --match-set tollgate-vcl-ir-v4 src,dst,dst -j TOLLGATE-CACHED-REJECT",
        ]
    );
    assert_eq!(
        input[at + 3],
        "-i eth0 -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101"
    );
    // Each verdict is carried out by a chain that names no generation, so
    // that its counters (the hits) run on across generations.
    assert_eq!(state.v4.chains[CACHED_DROP_CHAIN], ["-j DROP"]);
    assert_eq!(state.mangle_v6.chains[CACHED_DROP_CHAIN], ["-j DROP"]);
    assert_eq!(
        state.v4.chains[CACHED_REJECT_CHAIN],
        [
            "-p tcp -j REJECT --reject-with tcp-reset",
            "-j REJECT --reject-with icmp-admin-prohibited"
        ]
    );
    assert_eq!(
        state.v6.chains[CACHED_REJECT_CHAIN],
        [
            "-p tcp -j REJECT --reject-with tcp-reset",
            "-j REJECT --reject-with icmp6-adm-prohibited"
        ]
    );
    // FORWARD's cache answers in the mangle table: a cached Reject is
    // marked there and rejected by the filter table.
    assert_eq!(
        state.mangle_v6.chains["TOLLGATE-FORWARD"]
            .iter()
            .rfind(|r| r.contains("tollgate-vcl-fr-v6"))
            .unwrap(),
        "-o eth0 -m conntrack --ctstate NEW -m set --match-set tollgate-vcl-fr-v6 src,dst,dst -j TOLLGATE-CACHED-REJECT"
    );
    assert_eq!(
        state.mangle_v6.chains[CACHED_REJECT_CHAIN],
        ["-j MARK --set-xmark 0x200000/0xf00000", "-j ACCEPT"]
    );
    assert_eq!(
        state.mangle_v4.chains[CACHED_ALLOW_CHAIN],
        state.v4.chains[CACHED_ALLOW_CHAIN]
    );
    // A cached allow does what a worker's does, DNS snooping included.
    assert_eq!(
        state.v4.chains[CACHED_ALLOW_CHAIN],
        [
            "-j MARK --set-xmark 0x100000/0xf00000",
            "-j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000",
            "-p udp -m udp --dport 53 -j NFLOG --nflog-group 101 --nflog-threshold 1",
            "-p tcp -m tcp --dport 53 -j NFQUEUE --queue-num 102",
            "-j ACCEPT",
        ]
    );

    // The next generation: new empty sets, the lookup sets holding them
    // instead of the old ones (taken out first), the old ones destroyed
    // after; no rule changes.
    let next = Enforced {
        verdict_cache: Some(VerdictCache {
            generation: 0xac,
            ..cache
        }),
        ..enforced.clone()
    };
    let changes = Changes::between(&desired(&config, &next, &[pattern]), &state);
    assert_eq!(changes.create_cache.len(), 18);
    assert_eq!(changes.cache_lists.len(), 18);
    for table in [
        &changes.v4,
        &changes.mangle_v4,
        &changes.v6,
        &changes.mangle_v6,
    ] {
        assert!(table.is_empty(), "a new generation wrote rules: {table:?}");
    }
    assert_eq!(
        changes
            .destroy_sets
            .iter()
            .filter(|s| s.starts_with("tollgate-vc-00000000ab-"))
            .count(),
        18
    );
    assert_eq!(changes.destroy_sets.len(), 18, "the lookup sets stay");
    let prepare = changes.ipset_prepare_text().unwrap();
    let created =
        "create tollgate-vc-00000000ac-oa-v4 hash:ip,port,ip family inet timeout 30 maxelem 1000\n";
    let (out, put) = (
        "del tollgate-vcl-oa-v4 tollgate-vc-00000000ab-oa-v4\n",
        "add tollgate-vcl-oa-v4 tollgate-vc-00000000ac-oa-v4\n",
    );
    let at = |line: &str| {
        prepare
            .find(line)
            .unwrap_or_else(|| panic!("{line}{prepare}"))
    };
    assert!(at(created) < at(out) && at(out) < at(put), "{prepare}");

    // Off: nothing of the cache.
    let off = desired(&config, &targets(true, false, &["10.0.0.5"]), &[]);
    assert!(off.cache.is_empty() && off.cache_lists.is_empty());
    assert!(!off.v4.chains.contains_key(CACHED_ALLOW_CHAIN));
    assert!(off
        .v4
        .chains
        .values()
        .flatten()
        .all(|r| !r.contains("tollgate-vc-")));
}

#[test]
fn installed_cache_sets_parse_back_without_their_entries() {
    let save = "\
create tollgate-vc-00000000ab-ia-v4 hash:ip,port,ip family inet hashsize 1024 maxelem 1000 timeout 30 bucketsize 12 initval 0x4b58167d
add tollgate-vc-00000000ab-ia-v4 10.0.0.1,tcp:80,10.0.0.2 timeout 60
create tollgate-vc-00000000ab-ia-v6 hash:ip,port,ip family inet6 hashsize 1024 maxelem 1000 timeout 30
create tollgate-fqdn-0123456789-v4 hash:ip family inet hashsize 1024 maxelem 65536 timeout 300
create tollgate-vcl-ia-v4 list:set size 8
add tollgate-vcl-ia-v4 tollgate-vc-00000000ab-ia-v4
create tollgate-vcl-ia-v6 list:set size 8
";
    let state = State::parse("", "", save);
    assert_eq!(state.cache.len(), 2);
    assert_eq!(
        state.cache_lists,
        BTreeMap::from([
            (
                "tollgate-vcl-ia-v4".to_string(),
                BTreeSet::from(["tollgate-vc-00000000ab-ia-v4".to_string()])
            ),
            ("tollgate-vcl-ia-v6".to_string(), BTreeSet::new()),
        ])
    );
    assert_eq!(
        state.cache["tollgate-vc-00000000ab-ia-v6"],
        CacheSet {
            family: Family::V6,
            timeout_secs: 30,
            max_entries: 1000
        }
    );
    assert_eq!(state.learned.len(), 1);
    assert!(state.sets.is_empty());
}

#[test]
fn a_bridge_answers_nothing_from_the_cache_and_writes_no_cache_set() {
    let config = config("");
    let cache = |generation| VerdictCache {
        generation,
        timeout_secs: 30,
        max_entries: 1000,
        lookup: true,
    };
    let with = |generation| Enforced {
        verdict_cache: Some(cache(generation)),
        ..targets(true, false, &[])
    };
    let plan = |e: &Enforced, f: &[FqdnPattern]| desired(&config, e, f);
    let installed = plan(&with(1), &[]);
    let bridge = crate::datapath::transition::bridge(
        plan,
        (&with(1), &[]),
        (&with(2), &[]),
        NextCache::Deferred,
    );
    // No rule looks up the cache; its sets, lookup sets included, stay
    // as they are: the bridge writes no set.
    let rules = |state: &State| -> Vec<String> {
        [&state.v4, &state.v6, &state.mangle_v4, &state.mangle_v6]
            .iter()
            .flat_map(|table| table.chains.values().flatten().cloned())
            .collect()
    };
    assert!(rules(&installed)
        .iter()
        .any(|r| r.contains("tollgate-vcl-")));
    assert!(rules(&bridge).iter().all(|r| !r.contains("tollgate-vcl-")));
    assert_eq!(bridge.cache_lists, installed.cache_lists);
    let changes = Changes::between(&bridge, &installed);
    assert!(
        changes.create_cache.is_empty()
            && changes.cache_lists.is_empty()
            && changes.destroy_sets.is_empty(),
        "{changes:?}"
    );
    assert_eq!(
        steps(&changes),
        [Step::Table(Family::V4), Step::Table(Family::V6)]
    );
    // The narrowing creates the next generation's sets and destroys the
    // current one's.
    let narrow = Changes::between(&plan(&with(2), &[]), &bridge);
    assert_eq!(
        (narrow.create_cache.len(), narrow.destroy_sets.len()),
        (18, 18)
    );
    // With the next generation's sets created ahead (their own `ipset`
    // write), the bridge answers from them, destroys the current ones,
    // and leaves the narrowing nothing to write.
    let mut ahead = installed.clone();
    ahead
        .cache
        .extend(next_cache_sets(&with(1), &with(2), &installed));
    assert_eq!(ahead.cache.len(), 36);
    assert!(next_cache_sets(&with(1), &with(2), &ahead).is_empty());
    assert!(next_cache_sets(&with(1), &with(1), &installed).is_empty());
    let bridge = crate::datapath::transition::bridge(
        plan,
        (&with(1), &[]),
        (&with(2), &[]),
        NextCache::Ready,
    );
    assert!(rules(&bridge) == rules(&installed), "no rule changes");
    let held: Vec<&String> = bridge.cache_lists.values().flatten().collect();
    assert_eq!(held.len(), 18);
    assert!(held
        .iter()
        .all(|s| s.starts_with("tollgate-vc-0000000002-")));
    let widen = Changes::between(&bridge, &ahead);
    assert!(widen.create_cache.is_empty(), "{widen:?}");
    assert_eq!(widen.destroy_sets.len(), 18);
    assert!(Changes::between(&plan(&with(2), &[]), &bridge).is_empty());
    // One generation (a restart or a reload with the same inputs): the
    // bridge is the installed state, entries and all.
    let same = crate::datapath::transition::bridge(
        plan,
        (&with(1), &[]),
        (&with(1), &[]),
        NextCache::Ready,
    );
    assert_eq!(same, installed);
    assert_eq!(
        crate::datapath::transition::adopted(&installed).verdict_cache,
        Some(cache(1))
    );
}

/// With a closed startup policy, the unknown addresses of the local
/// endpoint ranges (ranges minus what the inventory knows) are one
/// `hash:net` set per family, and new connections from and to them are
/// dropped on every hook, ahead of the privileged entries and the queue;
/// an open startup policy plans neither.
#[test]
fn unknown_addresses_of_the_endpoint_ranges_are_dropped_ahead_of_everything_that_accepts() {
    let enforced = Enforced {
        ranges: vec![
            "10.1.0.0/24".parse().unwrap(),
            "fd00:1::/64".parse().unwrap(),
        ],
        known: ["10.1.0.1", "10.1.0.5", "fd00:1::5"]
            .iter()
            .map(|ip| ip.parse().unwrap())
            .collect(),
        ..targets(false, false, &["10.1.0.5", "fd00:1::5"])
    };
    let yaml = "datapath:\n  privileged: ['0.0.0.0/0,tcp/22', {cidr: '::/0', hooks: [forward]}]\n";
    let closed = desired(&config(yaml), &enforced, &[]);
    let v4 = &closed.ranges["tollgate-unknown-v4"];
    assert_eq!(v4.ranges, ["10.1.0.0/24".parse().unwrap()].into());
    assert_eq!(
        v4.except,
        ["10.1.0.1".parse().unwrap(), "10.1.0.5".parse().unwrap()].into()
    );
    assert_eq!(
        closed.ranges["tollgate-unknown-v6"].except,
        ["fd00:1::5".parse().unwrap()].into()
    );
    for family in Family::ALL {
        let set = unknown_set(family);
        for (hook, sides) in [
            (Hook::Input, &["src"][..]),
            (Hook::Output, &["dst"][..]),
            (Hook::Forward, &["src", "dst"][..]),
        ] {
            let rules = deciding(&closed, family, hook);
            let drops: Vec<usize> = sides
                .iter()
                .map(|side| {
                    let rule = format!(
                        "-m set --match-set {set} {side} -m conntrack --ctstate INVALID,NEW -j DROP"
                    );
                    rules
                        .iter()
                        .position(|r| *r == rule)
                        .unwrap_or_else(|| panic!("{hook:?} {family:?}: no {rule} in {rules:#?}"))
                })
                .collect();
            assert_eq!(
                rules.iter().filter(|r| r.contains(&set)).count(),
                sides.len(),
                "{hook:?}: only these sides"
            );
            let first_accepting = rules
                .iter()
                .position(|r| {
                    // A privileged entry, or the connection queue (not
                    // loopback, decided connections, on-link discovery).
                    (r.ends_with("-j ACCEPT")
                        && !r.contains("--mark")
                        && !r.contains(" lo ")
                        && !r.contains("--hl-eq 255"))
                        || r.contains("-j NFQUEUE --queue-balance 100:101")
                })
                .unwrap();
            assert!(
                drops.iter().all(|d| *d < first_accepting),
                "{hook:?} {family:?}: the drops come first\n{rules:#?}"
            );
        }
    }
    let open = desired(&config("datapath: {startupPolicy: open}\n"), &enforced, &[]);
    assert!(open.ranges.is_empty());
    for family in Family::ALL {
        for hook in Hook::ALL {
            assert!(!deciding(&open, family, hook)
                .iter()
                .any(|r| r.contains("tollgate-unknown")));
        }
    }
    // Installed, the set parses back to the same value.
    let changes = Changes::between(&closed, &State::default());
    let text = changes.ipset_prepare_text().unwrap();
    assert!(
        text.contains(
            "create tollgate-unknown-v4 hash:net family inet\n\
             add tollgate-unknown-v4 10.1.0.0/24\n\
             add tollgate-unknown-v4 10.1.0.1 nomatch\n\
             add tollgate-unknown-v4 10.1.0.5 nomatch\n"
        ),
        "{text}"
    );
    let save = "create tollgate-unknown-v4 hash:net family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\n\
                add tollgate-unknown-v4 10.1.0.5 nomatch\n\
                add tollgate-unknown-v4 10.1.0.0/24\n\
                add tollgate-unknown-v4 10.1.0.1 nomatch\n\
                create tollgate-unknown-v6 hash:net family inet6 hashsize 1024 maxelem 65536\n\
                add tollgate-unknown-v6 fd00:1::/64\n\
                add tollgate-unknown-v6 fd00:1::5 nomatch\n";
    assert_eq!(
        crate::datapath::state::parse_range_sets(save),
        closed.ranges
    );
}

/// A Node port published for an enforced endpoint is queued on INPUT
/// (where a userland proxy receives it), read back from the installed
/// rule; a Node whose ingress is queued whole needs no rule of its own.
#[test]
fn published_ports_of_enforced_endpoints_are_queued_on_input() {
    let enforced = Enforced {
        published: vec![(PortProtocol::Tcp, 8080), (PortProtocol::Udp, 5353)],
        ..targets(false, false, &["10.1.0.5"])
    };
    let state = desired(&config(""), &enforced, &[]);
    for family in Family::ALL {
        let input = &state.table(family).chains["TOLLGATE-INPUT"];
        let queued: Vec<_> = input.iter().filter_map(|r| published_port(r)).collect();
        assert_eq!(queued, enforced.published, "{input:#?}");
        assert!(input.contains(
            &"-p tcp -m tcp --dport 8080 -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101"
                .to_string()
        ));
    }
    let whole = desired(
        &config(""),
        &Enforced {
            node_ingress: true,
            ..enforced
        },
        &[],
    );
    assert!(whole.v4.chains["TOLLGATE-INPUT"]
        .iter()
        .all(|r| published_port(r).is_none()));
}

/// An endpoint that only dry-run policies apply to is queued from its own
/// set, below every rule that queues an enforced side (the enforced
/// endpoints, a published port), and always with `--queue-bypass` (its
/// published ports too, last): with
/// no worker reading the queue the kernel accepts its connections, as it
/// would without those policies, while the enforced endpoints' rules keep
/// `failMode: closed`. Its unrelated ICMP is not dropped either (a dry-run
/// policy must not strengthen enforcement); a ruleset without dry-run
/// endpoints plans neither the set nor its rules.
#[test]
fn dry_run_only_endpoints_are_queued_with_bypass_below_the_enforced_ones() {
    let enforced = Enforced {
        dry_run_endpoints: vec!["10.1.0.6".parse().unwrap(), "fd00::6".parse().unwrap()],
        published: vec![(PortProtocol::Tcp, 8080)],
        dry_run_published: vec![(PortProtocol::Udp, 9090)],
        ..targets(false, false, &["10.1.0.5", "fd00::5"])
    };
    for (yaml, enforced_bypass) in [("", false), ("datapath: {failMode: open}\n", true)] {
        let state = desired(&config(yaml), &enforced, &[]);
        for family in Family::ALL {
            let (dry, normal) = (dry_run_set(family), endpoints_set(family));
            let members = &state.sets[dry].members;
            assert_eq!(members.len(), 1, "{members:?}");
            assert!(members
                .iter()
                .all(|a| enforced.dry_run_endpoints.contains(a) && Family::of(a) == family));
            assert!(state.sets[normal]
                .members
                .iter()
                .all(|a| !enforced.dry_run_endpoints.contains(a)));
            for hook in Hook::ALL {
                let rules = deciding(&state, family, hook);
                let queued = |set: &str| -> Vec<usize> {
                    (0..rules.len())
                        .filter(|&i| rules[i].contains(&format!("--match-set {set} ")))
                        .filter(|&i| rules[i].contains("-j NFQUEUE"))
                        .collect()
                };
                let (dry_rules, normal_rules) = (queued(dry), queued(normal));
                assert_eq!(dry_rules.len(), 4, "{hook:?} {rules:#?}");
                assert_eq!(normal_rules.len(), 4, "{hook:?} {rules:#?}");
                assert!(dry_rules
                    .iter()
                    .all(|&i| rules[i].ends_with(" --queue-bypass")));
                assert!(normal_rules
                    .iter()
                    .all(|&i| rules[i].ends_with(" --queue-bypass") == enforced_bypass));
                let last_enforced = rules
                    .iter()
                    .rposition(|r| {
                        r.contains("-j NFQUEUE")
                            && !r.contains(dry)
                            && published_port(r) != Some((PortProtocol::Udp, 9090))
                    })
                    .unwrap();
                assert!(last_enforced < dry_rules[0], "{hook:?} {rules:#?}");
                assert!(rules
                    .iter()
                    .filter(|r| r.contains(dry))
                    .all(|r| r.contains("-j NFQUEUE")));
                let published: Vec<_> = (0..rules.len())
                    .filter_map(|i| published_port(&rules[i]).map(|port| (i, port)))
                    .collect();
                if hook != Hook::Input {
                    assert!(published.is_empty(), "{hook:?} {rules:#?}");
                    continue;
                }
                let [(enforced_at, enforced_port), (dry_at, dry_port)] = published[..] else {
                    panic!("{rules:#?}");
                };
                assert_eq!(
                    (enforced_port, dry_port),
                    ((PortProtocol::Tcp, 8080), (PortProtocol::Udp, 9090))
                );
                assert!(enforced_at < dry_rules[0] && dry_at > dry_rules[3]);
                assert!(rules[dry_at].ends_with(" --queue-bypass"));
                assert_eq!(
                    rules[enforced_at].ends_with(" --queue-bypass"),
                    enforced_bypass
                );
            }
        }
    }
    let without = desired(&config(""), &targets(false, false, &["10.1.0.5"]), &[]);
    for family in Family::ALL {
        assert!(!without.sets.contains_key(dry_run_set(family)));
        for hook in Hook::ALL {
            assert!(deciding(&without, family, hook)
                .iter()
                .all(|r| !r.contains("tollgate-dryrun")));
        }
    }
    // A Node whose ingress is queued whole queues the dry-run endpoints'
    // connections to it under the fail mode, as any other.
    let whole = desired(
        &config(""),
        &Enforced {
            node_ingress: true,
            ..enforced.clone()
        },
        &[],
    );
    assert!(whole.v4.chains["TOLLGATE-INPUT"]
        .iter()
        .all(|r| !r.contains("tollgate-dryrun")));
}

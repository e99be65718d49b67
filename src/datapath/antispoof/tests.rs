use super::*;
use crate::datapath::state::{Family, Table};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn endpoint(id: &str, addresses: &[&str]) -> Endpoint {
    let (namespace, name) = id.split_once('/').unwrap();
    Endpoint {
        namespace: namespace.into(),
        name: name.into(),
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        interface: None,
    }
}

const MAC_A: Mac = Mac([0x0a, 0, 0, 0, 0, 0x0a]);
const MAC_B: Mac = Mac([0x0a, 0, 0, 0, 0, 0x0b]);

fn peer(mac: Mac, addresses: &[&str]) -> Option<Peer> {
    Some(Peer {
        mac: Some(mac),
        addresses: addresses.iter().map(|a| ip(a)).collect(),
    })
}

fn link(index: u32, name: &str, kind: Option<&str>, master: Option<u32>) -> Link {
    Link {
        index,
        name: name.into(),
        kind: kind.map(str::to_string),
        master,
        peer: None,
    }
}

/// lo, eth0 (uplink), a routed veth to apps/a, bridge br0 with ports
/// to apps/b and apps/c and one whose far end is unreadable.
fn facts() -> Facts {
    let mut veth_a = link(3, "veth-a", Some("veth"), None);
    veth_a.peer = peer(MAC_A, &["10.1.0.2", "fd01::2"]);
    let mut port_b = link(5, "vb", Some("veth"), Some(4));
    port_b.peer = peer(MAC_B, &["10.2.0.2", "fd02::2", "fe80::b"]);
    let mut port_c = link(6, "vc", Some("veth"), Some(4));
    port_c.peer = peer(Mac([0x0a, 0, 0, 0, 0, 0x0c]), &["10.2.0.3"]);
    Facts {
        links: vec![
            link(1, "lo", None, None),
            link(2, "eth0", None, None),
            veth_a,
            link(4, "br0", Some("bridge"), None),
            port_b,
            port_c,
            link(7, "vd", Some("veth"), Some(4)),
        ],
        routes: [
            ("10.1.0.2", Some(3)),
            ("fd01::2", Some(3)),
            ("10.2.0.2", Some(4)),
            ("fd02::2", Some(4)),
            ("10.2.0.3", Some(4)),
            ("10.2.0.9", Some(4)),
            ("10.0.0.1", Some(1)),
            ("192.0.2.7", Some(2)),
        ]
        .into_iter()
        .map(|(a, i)| (ip(a), i))
        .collect(),
        bridge_guards: true,
    }
}

#[test]
fn routed_veths_and_bridge_ports_are_found_the_rest_is_named_unguarded() {
    let endpoints = [
        endpoint("apps/a", &["10.1.0.2", "fd01::2"]),
        endpoint("apps/b", &["10.2.0.2", "fd02::2"]),
        endpoint("apps/host", &["10.0.0.1"]),
        endpoint("apps/far", &["192.0.2.7"]),
        endpoint("apps/gone", &["10.9.9.9"]),
        endpoint("apps/silent", &["10.2.0.9"]),
    ];
    let guards = attach(&endpoints, &facts(), &[], &Guards::default());
    assert_eq!(
        guards.guarded,
        vec![
            Guarded {
                endpoint: "apps/a".into(),
                attachment: Attachment::Routed {
                    interface: "veth-a".into(),
                    mac: Some(MAC_A)
                },
                addresses: vec![ip("10.1.0.2"), ip("fd01::2")],
                allowed: vec![],
                any_source: false,
            },
            Guarded {
                endpoint: "apps/b".into(),
                attachment: Attachment::Bridged {
                    bridge: "br0".into(),
                    port: "vb".into(),
                    mac: Some(MAC_B)
                },
                addresses: vec![ip("10.2.0.2"), ip("fd02::2")],
                allowed: vec![],
                any_source: false,
            },
        ]
    );
    let reasons: Vec<String> = guards
        .unguarded
        .iter()
        .map(|u| format!("{}: {}", u.endpoint, u.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            "apps/host: 10.0.0.1 is the node's own address (host network)",
            "apps/far: the route to 192.0.2.7 leaves by eth0 (a device), not a veth or bridge of the endpoint's own",
            "apps/gone: the node has no route to 10.9.9.9",
            "apps/silent: no port of bridge br0 holds 10.2.0.9 at its far end",
        ]
    );
}

#[test]
fn ambiguous_addresses_a_missing_ebtables_and_named_interfaces() {
    let mut facts = facts();
    // A second port claims b's address at its far end.
    facts.links[6].peer = peer(MAC_A, &["10.2.0.2"]);
    let b = [endpoint("apps/b", &["10.2.0.2"])];
    let guards = attach(&b, &facts, &[], &Guards::default());
    assert!(guards.guarded.is_empty());
    assert_eq!(
        guards.unguarded[0].reason,
        "ports vb, vd of bridge br0 all hold 10.2.0.2: it is dropped from every port until one lets it go"
    );
    // Held: dropped from every interface and port, b's own included.
    let planned = plan(&guards);
    assert!(planned.raw_v4.chains[CHAIN].contains(&"-s 10.2.0.2/32 -j DROP".to_string()));
    assert!(
        planned.bridge.chains[CHAIN].contains(&"-p ARP --arp-ip-src 10.2.0.2 -j DROP".to_string())
    );
    // Bound before the second port claimed it: it stays with b's port.
    let earlier = attach(&b, &self::facts(), &[], &Guards::default());
    let guards = attach(&b, &facts, &[], &earlier);
    assert_eq!(guards.guarded, earlier.guarded);
    assert!(guards.held.is_empty() && guards.unguarded.is_empty());
    let twice = attach(
        &[
            endpoint("apps/a", &["10.1.0.2"]),
            endpoint("apps/x", &["10.1.0.2"]),
        ],
        &facts,
        &[],
        &Guards::default(),
    );
    assert!(twice.guarded.is_empty());
    assert_eq!(twice.unguarded.len(), 2);
    facts.bridge_guards = false;
    let guards = attach(
        &[endpoint("apps/c", &["10.2.0.3"])],
        &facts,
        &[],
        &Guards::default(),
    );
    assert!(guards.guarded.is_empty());
    assert!(
        guards.unguarded[0].reason.contains("needs ebtables-nft"),
        "{:?}",
        guards.unguarded
    );
    // Files mode: the inventory names the interface, a bridge port or an
    // uplink the route alone would not trust.
    let mut named = endpoint("apps/vm", &["192.0.2.7"]);
    named.interface = Some("eth0".into());
    let mut port = endpoint("apps/c", &["10.2.0.3"]);
    port.interface = Some("vc".into());
    let mut missing = endpoint("apps/m", &["10.9.0.1"]);
    missing.interface = Some("nope0".into());
    facts.bridge_guards = true;
    let guards = attach(&[named, port, missing], &facts, &[], &Guards::default());
    assert_eq!(
        guards
            .guarded
            .iter()
            .map(|g| g.attachment.to_string())
            .collect::<Vec<_>>(),
        ["eth0", "br0 port vc"]
    );
    assert_eq!(
        guards.unguarded[0].reason,
        "interface nope0 (named by the inventory) does not exist"
    );
}

#[test]
fn allowed_sources_widen_one_endpoint_or_unbind_a_shared_prefix() {
    let allowed: Vec<AllowedSource> = ["apps/a=10.50.0.0/16", "apps/b", "*=10.2.0.0/30"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let guards = attach(
        &[
            endpoint("apps/a", &["10.1.0.2"]),
            endpoint("apps/b", &["10.2.0.2"]),
        ],
        &facts(),
        &allowed,
        &Guards::default(),
    );
    let a = &guards.guarded[0];
    assert_eq!(
        a.allowed,
        vec![
            "10.50.0.0/16".parse().unwrap(),
            "10.2.0.0/30".parse().unwrap()
        ]
    );
    assert!(!a.any_source);
    assert!(guards.guarded[1].any_source);
    let planned = plan(&guards);
    let raw = &planned.raw_v4.chains[CHAIN];
    let pairs = &planned.sources[source_set(Family::V4)].entries;
    for net in ["10.1.0.2/32", "10.50.0.0/16"] {
        assert!(
            pairs.contains(&(net.parse().unwrap(), "veth-a".into())),
            "{pairs:?}"
        );
    }
    assert_eq!(pairs.len(), 2, "{pairs:?}");
    // The shared prefix is one rule, not a pair per veth (a bucket of the
    // set holds 64 interfaces for one prefix).
    assert!(
        raw.contains(
            &"-s 10.2.0.0/30 -m set ! --match-set tollgate-antispoof-bound-v4 src -j RETURN"
                .to_string()
        ),
        "{raw:#?}"
    );
    // b's address is in the shared prefix: bound to nobody.
    assert!(raw.contains(&"-s 10.1.0.2/32 ! -i veth-a -j DROP".to_string()));
    assert!(!raw.iter().any(|r| r.contains("10.2.0.2/32 !")), "{raw:#?}");
    // b may send anything from its port.
    assert_eq!(planned.bridge.chains[CHAIN][0], "-i vb -j RETURN");
}

#[test]
fn a_prefix_allowed_by_name_to_many_veths_is_a_rule_per_veth() {
    // n routed Pods on veths of their own, each allowed 10.50.0.0/16 by
    // name, and apps/p0 alone 10.60.0.0/16.
    let pods = |n: u32| {
        let mut facts = facts();
        let mut endpoints = Vec::new();
        let mut allowed: Vec<AllowedSource> = vec!["apps/p0=10.60.0.0/16".parse().unwrap()];
        for i in 0..n {
            let (index, address) = (100 + i, format!("10.9.{}.{}", i / 200, i % 200 + 2));
            let mut veth = link(index, &format!("vp{i}"), Some("veth"), None);
            veth.peer = peer(Mac([0x0a, 1, 0, 0, 0, i as u8]), &[&address]);
            facts.links.push(veth);
            facts.routes.insert(ip(&address), Some(index));
            endpoints.push(endpoint(&format!("apps/p{i}"), &[&address]));
            allowed.push(format!("apps/p{i}=10.50.0.0/16").parse().unwrap());
        }
        plan(&attach(&endpoints, &facts, &allowed, &Guards::default()))
    };
    let shared: IpNet = "10.50.0.0/16".parse().unwrap();
    let returns = |planned: &Planned| {
        planned.raw_v4.chains[CHAIN]
            .iter()
            .filter(|r| r.starts_with("-s 10.50.0.0/16 -i "))
            .count()
    };
    // Up to the bound: pairs in the set, one lookup.
    let few = pods(rules::INTERFACES_PER_SOURCE as u32);
    let pairs = &few.sources[source_set(Family::V4)].entries;
    assert_eq!(
        pairs.iter().filter(|(net, _)| *net == shared).count(),
        rules::INTERFACES_PER_SOURCE
    );
    assert_eq!(returns(&few), 0);
    // Past it: no pair of that prefix in the set (the kernel would refuse
    // a 65th), a RETURN rule per veth ahead of the drop rules; the other
    // sources stay pairs.
    let many = pods(100);
    let pairs = &many.sources[source_set(Family::V4)].entries;
    assert!(pairs.iter().all(|(net, _)| *net != shared), "{pairs:?}");
    assert!(pairs.contains(&("10.60.0.0/16".parse().unwrap(), "vp0".into())));
    assert!(pairs.contains(&("10.9.0.101/32".parse().unwrap(), "vp99".into())));
    assert_eq!(returns(&many), 100);
    let raw = &many.raw_v4.chains[CHAIN];
    let rule = raw
        .iter()
        .position(|r| r == "-s 10.50.0.0/16 -i vp7 -j RETURN")
        .expect("vp7's rule");
    let first_drop = raw.iter().position(|r| r.ends_with("-j DROP")).unwrap();
    assert!(rule < first_drop, "{raw:#?}");
}

#[test]
fn the_raw_chains_bind_each_veth_to_its_sources_and_each_address_to_its_interface() {
    let endpoints = [
        endpoint("apps/a", &["10.1.0.2", "fd01::2"]),
        endpoint("apps/b", &["10.2.0.2", "fd02::2"]),
    ];
    let planned = plan(&attach(&endpoints, &facts(), &[], &Guards::default()));
    // IPv4: a packet the set holds does not enter the chain.
    assert_eq!(
        planned.raw_v4.jumps,
        vec![(
            "PREROUTING".to_string(),
            format!("-m set ! --match-set tollgate-antispoof-v4 src,src -j {CHAIN}")
        )]
    );
    // A packet from another interface (the uplink, the bridge) with a
    // source bound to nobody returns ahead of the drop rules, whatever
    // the number of endpoints; the drop rules are for the rest.
    let other = |family: &str, interface: &str| {
        format!(
            "-i {interface} -m set ! --match-set tollgate-antispoof-bound-{family} src -j RETURN"
        )
    };
    assert_eq!(
        planned.raw_v4.chains[CHAIN],
        [
            "-i lo -j RETURN".to_string(),
            other("v4", "br0"),
            other("v4", "eth0"),
            "-i veth-a -j DROP".into(),
            "-s 10.1.0.2/32 ! -i veth-a -j DROP".into(),
            "-s 10.2.0.2/32 ! -i br0 -j DROP".into(),
        ]
    );
    // IPv6: every ICMPv6 packet meets the neighbour discovery check first.
    assert_eq!(
        planned.raw_v6.jumps,
        vec![("PREROUTING".to_string(), format!("-j {CHAIN}"))]
    );
    assert_eq!(
        planned.raw_v6.chains[CHAIN],
        [
            "-i lo -j RETURN".to_string(),
            "-p ipv6-icmp -j TOLLGATE-ANTISPOOF-ND".into(),
            "-m set --match-set tollgate-antispoof-v6 src,src -j RETURN".into(),
            // Every interface's own: one rule each, not a pair per veth.
            "-s fe80::/10 -j RETURN".into(),
            "-s ::/128 -j RETURN".into(),
            other("v6", "br0"),
            other("v6", "eth0"),
            "-i veth-a -j DROP".into(),
            "-s fd01::2/128 ! -i veth-a -j DROP".into(),
            "-s fd02::2/128 ! -i br0 -j DROP".into(),
        ]
    );
    // The routed veth's sources and the bridged endpoint's addresses on
    // its bridge (what `-s … ! -i br0` lets in), one lookup for all.
    let pairs = |family| {
        planned.sources[source_set(family)]
            .entries
            .iter()
            .map(|(net, interface)| format!("{net},{interface}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(pairs(Family::V4), ["10.1.0.2/32,veth-a", "10.2.0.2/32,br0"]);
    assert_eq!(pairs(Family::V6), ["fd01::2/128,veth-a", "fd02::2/128,br0"]);
    let bound = |family| {
        planned.bound[bound_set(family)]
            .members
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(bound(Family::V4), ["10.1.0.2", "10.2.0.2"]);
    assert_eq!(bound(Family::V6), ["fd01::2", "fd02::2"]);
    let nd = &planned.raw_v6.chains[ND_CHAIN];
    let routed = "-i veth-a -p ipv6-icmp -m icmp6 --icmpv6-type";
    let bridged = "-p ipv6-icmp -m physdev --physdev-in vb -m icmp6 --icmpv6-type";
    assert_eq!(nd[0], format!("{routed} 134 -j DROP"));
    assert_eq!(nd[1], format!("{routed} 137 -j DROP"));
    // A target of its own, with no option or its MAC as target
    // link-layer address (type 2, length 1, 0a:00:00:00:00:0a).
    assert_eq!(
        nd[2],
        format!(
            "{routed} 136 -m u32 --u32 \"0x4>>0x8&0xff=0x3a&&0x4>>0x10=0x18\
             &&0x30=0xfd010000&&0x34=0x0&&0x38=0x0&&0x3c=0x2\" -j RETURN"
        )
    );
    assert_eq!(
        nd[3],
        format!(
            "{routed} 136 -m u32 --u32 \"0x4>>0x8&0xff=0x3a&&0x4>>0x10=0x20\
             &&0x30=0xfd010000&&0x34=0x0&&0x38=0x0&&0x3c=0x2\
             &&0x40=0x2010a00&&0x44=0xa\" -j RETURN"
        )
    );
    assert_eq!(
        nd[4],
        format!("{routed} 136 -m u32 --u32 \"0x4>>0x8&0xff=0x3a&&0x4>>0x10=0x18&&0x30>>0x16=0x3fa\" -j RETURN")
    );
    assert_eq!(nd[6], format!("{routed} 136 -j DROP"));
    assert!(nd.contains(&format!(
        "{routed} 135 -m u32 --u32 \"0x4>>0x8&0xff=0x3a&&0x4>>0x10=0x20&&0x40=0x1010a00&&0x44=0xa\" -j RETURN"
    )));
    assert!(nd.contains(&format!(
        "{routed} 133 -m u32 --u32 \"0x4>>0x8&0xff=0x3a&&0x4>>0x10=0x10&&0x30=0x1010a00&&0x34=0xa\" -j RETURN"
    )));
    assert!(nd.contains(&format!("{bridged} 136 -j DROP")));
    // Every drop rule counts for someone.
    for rule in planned.raw_v6.chains.values().flatten() {
        let chain = if rule.contains("icmpv6-type") {
            ND_CHAIN
        } else {
            CHAIN
        };
        let counted = planned
            .drops
            .contains_key(&rule_key(Place::Raw(Family::V6), chain, rule));
        assert_eq!(counted, rule.ends_with("-j DROP"), "{rule}");
    }
    assert_eq!(
        planned.drops[&rule_key(Place::Raw(Family::V4), CHAIN, "-i veth-a -j DROP")],
        ("apps/a".to_string(), Reason::Source)
    );
    assert_eq!(
        planned.drops[&rule_key(
            Place::Raw(Family::V4),
            CHAIN,
            "-s 10.2.0.2/32 ! -i br0 -j DROP"
        )],
        ("apps/b".to_string(), Reason::Address)
    );
}

#[test]
fn the_other_interfaces_are_every_link_but_loopback_bridge_ports_and_guarded_veths() {
    let mut facts = facts();
    for (index, name) in [(8, "tun+"), (9, "-x"), (10, "flannel.1"), (11, "veth_z")] {
        facts.links.push(link(index, name, None, None));
    }
    let guards = attach(
        &[
            endpoint("apps/a", &["10.1.0.2"]),
            endpoint("apps/b", &["10.2.0.2"]),
        ],
        &facts,
        &[],
        &Guards::default(),
    );
    // Not lo, not vb/vc/vd (br0's ports), not veth-a (guarded); `tun+`
    // would be a pattern to iptables and `-x` an option: they only miss
    // the short way.
    assert_eq!(guards.others, ["br0", "eth0", "flannel.1", "veth_z"]);
}

#[test]
fn the_bridge_chain_holds_each_port_to_its_mac_addresses_and_arp_claims() {
    let endpoints = [
        endpoint("apps/a", &["10.1.0.2"]),
        endpoint("apps/b", &["10.2.0.2", "fd02::2"]),
    ];
    let planned = plan(&attach(&endpoints, &facts(), &[], &Guards::default()));
    let from = "-s 0a:00:00:00:00:0b -i vb";
    assert_eq!(
        planned.bridge.chains[CHAIN],
        [
            format!("-p IPv4 {from} --ip-src 10.2.0.2 -j RETURN"),
            format!(
                "-p ARP {from} --arp-ip-src 10.2.0.2 --arp-mac-src 0a:00:00:00:00:0b -j RETURN"
            ),
            format!("-p ARP {from} --arp-ip-src 0.0.0.0 --arp-mac-src 0a:00:00:00:00:0b -j RETURN"),
            "-p IPv6 -i vb --ip6-proto ipv6-icmp --ip6-icmp-type router-advertisement -j DROP"
                .into(),
            "-p IPv6 -i vb --ip6-proto ipv6-icmp --ip6-icmp-type redirect -j DROP".into(),
            format!("-p IPv6 {from} --ip6-src :: -j RETURN"),
            format!("-p IPv6 {from} --ip6-src fd02::2 -j RETURN"),
            format!("-p IPv6 {from} --ip6-src fe80::/10 -j RETURN"),
            "-p ARP -i vb -j DROP".into(),
            "-i vb -j DROP".into(),
            "-p IPv4 --ip-src 10.1.0.2 -j DROP".into(),
            "-p ARP --arp-ip-src 10.1.0.2 -j DROP".into(),
            "-p IPv4 --ip-src 10.2.0.2 -j DROP".into(),
            "-p ARP --arp-ip-src 10.2.0.2 -j DROP".into(),
            "-p IPv6 --ip6-src fd02::2 -j DROP".into(),
        ]
    );
    // Only routed endpoints: no bridge table at all.
    let routed = plan(&attach(&endpoints[..1], &facts(), &[], &Guards::default()));
    assert_eq!(routed.bridge, Table::default());
    assert_eq!(plan(&Guards::default()), Planned::default());
}

#[test]
fn drop_counters_are_read_by_rule_and_counted_per_endpoint() {
    let endpoints = [
        endpoint("apps/a", &["10.1.0.2"]),
        endpoint("apps/b", &["10.2.0.2"]),
    ];
    let planned = plan(&attach(&endpoints, &facts(), &[], &Guards::default()));
    let reading = |a: u64, b: u64, arp: u64| {
        let raw = format!(
            "*raw\n:PREROUTING ACCEPT [0:0]\n[9:900] -A PREROUTING -j TOLLGATE-ANTISPOOF\n\
             [3:300] -A TOLLGATE-ANTISPOOF -s 10.1.0.2/32 -i veth-a -j RETURN\n\
             [{a}:0] -A TOLLGATE-ANTISPOOF -i veth-a -j DROP\n\
             [{b}:0] -A TOLLGATE-ANTISPOOF -s 10.2.0.2/32 ! -i br0 -j DROP\nCOMMIT\n"
        );
        let bridge = format!("*nat\n[{arp}:0] -A TOLLGATE-ANTISPOOF -p ARP -i vb -j DROP\n");
        let mut r = drop_counters(&raw, Place::Raw(Family::V4));
        r.extend(drop_counters(&bridge, Place::Bridge));
        r
    };
    assert_eq!(
        reading(1, 2, 3).len(),
        4,
        "the PREROUTING jump is not ours to count"
    );
    let mut count = DropCount::default();
    let gained = count.gained(reading(2, 1, 0), &planned);
    assert_eq!(
        gained,
        [
            (("apps/a".to_string(), Reason::Source), 2),
            (("apps/b".to_string(), Reason::Address), 1)
        ]
        .into()
    );
    let gained = count.gained(reading(5, 1, 4), &planned);
    assert_eq!(
        gained,
        [
            (("apps/a".to_string(), Reason::Source), 3),
            (("apps/b".to_string(), Reason::Neighbour), 4)
        ]
        .into()
    );
    // Chains written again: counters from zero.
    let gained = count.gained(reading(1, 0, 0), &planned);
    assert_eq!(gained, [(("apps/a".to_string(), Reason::Source), 1)].into());
}

#[test]
fn local_pods_with_addresses_are_the_endpoints() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: apps, annotations: {tollgate.io/interface: veth-a}}\n\
                spec: {nodeName: n1}\nstatus: {podIP: 10.1.0.2}\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: other}\nspec: {nodeName: n2}\nstatus: {podIP: 10.3.0.2}\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: pending}\nspec: {nodeName: n1}\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nstatus: {podIPs: [{ip: 10.2.0.2}, {ip: 'fd02::2'}]}\n";
    let (objects, problems) = crate::decode::parse_documents(std::path::Path::new("t.yaml"), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let snapshot = Snapshot { objects };
    let found = endpoints(&snapshot, "n1", true);
    assert_eq!(
        found,
        vec![
            Endpoint {
                namespace: "apps".into(),
                name: "a".into(),
                addresses: vec![ip("10.1.0.2")],
                interface: Some("veth-a".into()),
            },
            endpoint("default/b", &["10.2.0.2", "fd02::2"]),
        ]
    );
    assert_eq!(endpoints(&snapshot, "n1", false)[0].interface, None);
}

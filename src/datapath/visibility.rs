//! Which local endpoints' traffic crosses this node's netfilter at all.
//! tollgate sees an endpoint's connections only where the node's own IP
//! stack carries them: a routed veth (ptp and routed CNIs), a Linux bridge
//! port (bridge CNIs, Docker and podman; same-bridge traffic only with
//! `br_netfilter`, which the agent's bridge check reports), or the
//! node's own addresses (host network). Behind Open vSwitch (Antrea,
//! OVN-Kubernetes), on a macvlan or ipvlan of an uplink, or beyond a veth
//! whose far end does not hold the address, traffic between endpoints is
//! switched before it reaches netfilter. Pure: [`unseen`] reads the same
//! interface facts as the anti-spoofing guards (`agent::links`) and says
//! which endpoint addresses are not seen and why. It never decides a
//! verdict and never changes the kernel; an eBPF datapath that redirects
//! packets between veths (Cilium) is not visible in these facts (the
//! operator's guide says so).

use std::net::IpAddr;

use super::antispoof::{Endpoint, Facts, Link};

/// `namespace/name address: why`, for each local endpoint address whose
/// traffic does not cross the node's netfilter, in endpoint order.
pub fn unseen(endpoints: &[Endpoint], facts: &Facts) -> Vec<String> {
    let mut out = Vec::new();
    for endpoint in endpoints {
        for address in &endpoint.addresses {
            if let Some(why) = why_unseen(*address, facts) {
                out.push(format!(
                    "{}/{} {address}: {why}",
                    endpoint.namespace, endpoint.name
                ));
            }
        }
    }
    out.dedup();
    out
}

fn why_unseen(address: IpAddr, facts: &Facts) -> Option<String> {
    let link = |index: u32| facts.links.iter().find(|l| l.index == index);
    // No route (or an unknown interface): nothing to say about a path.
    let out: &Link = link(facts.routes.get(&address).copied().flatten()?)?;
    let master = out.master.and_then(link);
    let ovs = |l: &Link| l.kind.as_deref() == Some("openvswitch");
    if ovs(out) || master.is_some_and(ovs) {
        return Some(format!(
            "reached over {}, an Open vSwitch port: an OVS-based CNI (Antrea, OVN-Kubernetes) switches same-node traffic before netfilter",
            out.name
        ));
    }
    match out.kind.as_deref() {
        _ if out.name == "lo" => None,
        Some("bridge") => None,
        Some("veth") => match &out.peer {
            Some(peer) if !peer.addresses.is_empty() && !peer.addresses.contains(&address) => {
                Some(format!(
                    "reached over {}, whose far end does not hold it (a macvlan or ipvlan endpoint there, or one a hop further): its traffic with its neighbours there never crosses this node's netfilter",
                    out.name
                ))
            }
            _ => None,
        },
        kind => Some(format!(
            "reached over {} ({}), not a veth or bridge: a macvlan or ipvlan endpoint on it, or one behind a tunnel, talks to its neighbours there without crossing this node's netfilter",
            out.name,
            kind.unwrap_or("a device")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::antispoof::Peer;

    fn link(
        index: u32,
        name: &str,
        kind: Option<&str>,
        master: Option<u32>,
        peer: &[&str],
    ) -> Link {
        Link {
            index,
            name: name.into(),
            kind: kind.map(str::to_string),
            master,
            peer: (!peer.is_empty()).then(|| Peer {
                mac: None,
                addresses: peer.iter().map(|a| a.parse().unwrap()).collect(),
            }),
        }
    }

    fn endpoint(name: &str, address: &str) -> Endpoint {
        Endpoint {
            namespace: "ns".into(),
            name: name.into(),
            addresses: vec![address.parse().unwrap()],
            interface: None,
        }
    }

    /// Mutation: treating a veth as seen whatever its far end holds — the
    /// macvlan endpoint behind `veth-b` is no longer named.
    #[test]
    fn routed_bridged_and_host_endpoints_are_seen_the_rest_named_with_the_path() {
        let facts = Facts {
            links: vec![
                link(1, "lo", None, None, &[]),
                link(2, "veth-a", Some("veth"), None, &["10.0.0.2"]),
                link(3, "cni0", Some("bridge"), None, &[]),
                link(4, "veth-b", Some("veth"), None, &["10.0.1.2"]),
                link(5, "eth0", None, None, &[]),
                link(6, "antrea-gw0", Some("openvswitch"), None, &[]),
                link(7, "ovs-port", Some("veth"), Some(8), &[]),
                link(8, "br-int", Some("openvswitch"), None, &[]),
            ],
            routes: [
                ("10.0.0.2", Some(2)),  // routed veth: seen
                ("10.0.2.5", Some(3)),  // bridge: seen
                ("10.0.9.9", Some(1)),  // host network: seen
                ("10.0.1.3", Some(4)),  // behind a veth that does not hold it
                ("192.0.2.7", Some(5)), // on the uplink (macvlan)
                ("10.1.0.4", Some(6)),  // Antrea's gateway
                ("10.1.0.5", Some(7)),  // a port of an OVS bridge
                ("10.9.9.9", None),     // no route: nothing said
            ]
            .into_iter()
            .map(|(a, i)| (a.parse().unwrap(), i))
            .collect(),
            bridge_guards: true,
        };
        let endpoints: Vec<Endpoint> = [
            ("routed", "10.0.0.2"),
            ("bridged", "10.0.2.5"),
            ("host", "10.0.9.9"),
            ("macvlan", "10.0.1.3"),
            ("uplink", "192.0.2.7"),
            ("antrea", "10.1.0.4"),
            ("ovs", "10.1.0.5"),
            ("nowhere", "10.9.9.9"),
        ]
        .iter()
        .map(|(n, a)| endpoint(n, a))
        .collect();
        let unseen = unseen(&endpoints, &facts);
        let names: Vec<&str> = unseen
            .iter()
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        assert_eq!(
            names,
            ["ns/macvlan", "ns/uplink", "ns/antrea", "ns/ovs"],
            "{unseen:#?}"
        );
        assert!(unseen[0].starts_with(
            "ns/macvlan 10.0.1.3: reached over veth-b, whose far end does not hold it"
        ));
        assert!(unseen[1].contains("reached over eth0 (a device), not a veth or bridge"));
        assert!(unseen[2].contains("antrea-gw0, an Open vSwitch port"));
        assert!(unseen[3].contains("ovs-port, an Open vSwitch port"));
    }
}

//! The kernel verdict cache on the wire (issue 17 item 1): a decided tuple
//! is answered by the kernel without a worker (the connection queues'
//! packet counter stays still), a policy or inventory change invalidates
//! it before the new ruleset's first verdict (IPv4 and IPv6), cached allows
//! keep working while the agent is down and not past a restart with a
//! changed policy, `--verdict-cache off` caches nothing, and a SYN flood at
//! a denied port stays out of userspace after its first packets (the counts
//! are printed as `VERDICT-CACHE-FLOOD`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::harness::probe::total_queued;
use crate::harness::{poll_until, Lab, Service, TcpOutcome, AGENT_WAIT};

const PORT: u16 = 8080;
/// A port no rule names: allowed, but never connected to before the
/// restart test needs a tuple the cache cannot know.
const UNCACHED: u16 = 8081;

/// The node's ingress: `action` for TCP `PORT` from everywhere, and a
/// Reject on port 9 so that the node's ingress is enforced either way.
fn node_policy(action: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: node-ingress}}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{{nodeSelector: {{matchLabels: {{kubernetes.io/os: linux}}}}}}]
  ingress:
    - action: {action}
      ports: [{{protocol: TCP, port: {PORT}}}]
    - action: Reject
      ports: [{{protocol: TCP, port: 9}}]
"
    )
}

fn lab(test: &'static str) -> Option<Lab> {
    let lab = Lab::builder(test).peer("client").ipv6().build()?;
    for port in [PORT, UNCACHED] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    Some(lab)
}

fn targets(lab: &Lab, port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::new(IpAddr::from(lab.node_addr("client")), port),
        SocketAddr::new(IpAddr::from(lab.node_addr6("client")), port),
    ]
}

/// Packets ever queued to the connection queues (100 and 101) of the node.
fn queued(lab: &Lab) -> u64 {
    let counters = lab.queue_counters();
    total_queued(
        &counters
            .into_iter()
            .filter(|c| c.queue == 100 || c.queue == 101)
            .collect::<Vec<_>>(),
    )
}

/// The entries of the verdict cache sets, as `ipset save` lists them
/// (`add <set> <src>,tcp:<port>,<dst> timeout N`).
fn entries(lab: &Lab) -> Vec<String> {
    lab.node()
        .run(&["ipset", "save"])
        .stdout
        .lines()
        .filter(|l| l.starts_with("add tollgate-vc-"))
        .map(str::to_string)
        .collect()
}

/// Waits until the cache holds an entry for `target` in a set of
/// `verdict` (`a`, `d` or `r`) of the INPUT hook.
#[track_caller]
fn wait_cached(lab: &Lab, target: SocketAddr, verdict: char) {
    let tuple = format!(",tcp:{},{} ", target.port(), target.ip());
    let set = format!("-i{verdict}");
    let found = poll_until(AGENT_WAIT, || {
        entries(lab)
            .iter()
            .any(|e| e.contains(&tuple) && e.split(' ').nth(1).is_some_and(|s| s.contains(&set)))
            .then_some(())
    });
    assert!(
        found.is_some(),
        "no {verdict} entry for {target}: {:?}",
        entries(lab)
    );
}

/// The connection to `target` ends as `expected` and no packet reached a
/// connection queue meanwhile.
#[track_caller]
fn assert_from_cache(lab: &Lab, target: SocketAddr, expected: TcpOutcome) {
    let before = queued(lab);
    lab.assert_tcp("client", target, expected);
    assert_eq!(queued(lab), before, "{target}: queued to a worker");
}

#[test]
fn a_cached_verdict_is_answered_by_the_kernel_and_a_policy_change_replaces_it() {
    let Some(lab) =
        lab("a_cached_verdict_is_answered_by_the_kernel_and_a_policy_change_replaces_it")
    else {
        return;
    };
    lab.write_policy("node.yaml", &node_policy("Allow"));
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    for target in targets(&lab, PORT) {
        let before = queued(&lab);
        lab.assert_tcp("client", target, TcpOutcome::Connected);
        assert!(
            queued(&lab) > before,
            "the first connection is decided by a worker"
        );
        wait_cached(&lab, target, 'a');
        // Every later connection (a new source port each) is answered by
        // the kernel, and is a working connection (mark, connmark, accept).
        for _ in 0..3 {
            assert_from_cache(&lab, target, TcpOutcome::Connected);
        }
    }

    // Allow → Drop: the next new connection is dropped, the cache held
    // nothing of the old ruleset.
    lab.write_policy("node.yaml", &node_policy("Drop"));
    agent.wait_generation(2);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::TimedOut);
        wait_cached(&lab, target, 'd');
        assert_from_cache(&lab, target, TcpOutcome::TimedOut);
    }
    assert!(
        entries(&lab)
            .iter()
            .all(|e| !e.contains("a4 ") && !e.contains("a6 ")),
        "an allow outlived the change: {:?}",
        entries(&lab)
    );

    // Drop → Reject → Allow: the reverse way too.
    lab.write_policy("node.yaml", &node_policy("Reject"));
    agent.wait_generation(3);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Refused);
        wait_cached(&lab, target, 'r');
        assert_from_cache(&lab, target, TcpOutcome::Refused);
    }
    lab.write_policy("node.yaml", &node_policy("Allow"));
    agent.wait_generation(4);
    for target in targets(&lab, PORT) {
        lab.assert_tcp("client", target, TcpOutcome::Connected);
    }
    agent.stop();
    // `tollgate cleanup` leaves none of the cache behind (stop keeps it).
    assert!(lab.tollgate_cleanup().success());
    assert!(
        lab.firewall_state("node")
            .set_names()
            .iter()
            .all(|s| !s.starts_with("tollgate-")),
        "{:?}",
        lab.firewall_state("node").set_names()
    );
}

use super::*;
use crate::config::{AgentConfig, MachineDefaults};
use crate::datapath::plan::{desired, startup};
use crate::fqdn::FqdnPattern;
use crate::ruleset::Enforced;

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

/// What an agent with `yaml` installs for node ingress, one Pod, one Pod
/// under dry-run policies only and one FQDN selector (every kind of queue
/// rule the plan writes).
fn installed(yaml: &str) -> State {
    let config = config(yaml);
    let enforced = Enforced {
        node_ingress: true,
        node_egress: false,
        endpoints: vec!["10.0.0.5".parse().unwrap(), "fd00::5".parse().unwrap()],
        dry_run_endpoints: vec!["10.0.0.6".parse().unwrap(), "fd00::6".parse().unwrap()],
        verdict_cache: None,
        ranges: Vec::new(),
        known: Vec::new(),
        published: Vec::new(),
        dry_run_published: Vec::new(),
    };
    let fqdn = [FqdnPattern::new("*.example.com")];
    desired(&config.datapath, &config.queue_numbers(), &enforced, &fqdn)
}

fn queues(yaml: &str) -> QueueNumbers {
    config(yaml).queue_numbers()
}

#[test]
fn every_queue_rule_of_the_plan_is_read_back_in_its_role() {
    use Role::*;
    let routed = routed(&installed("l7: {queues: 3}"));
    let expected = [
        (100, vec![Connection]),
        (101, vec![Connection]),
        (102, vec![Dns]),
        (103, vec![L7]),
        (104, vec![L7]),
        (105, vec![L7]),
    ];
    assert_eq!(routed, expected.into_iter().collect());
    let startup = startup(&config("").datapath, &queues(""));
    let routed = super::routed(&startup);
    assert_eq!(routed[&100], [Connection]);
    assert_eq!(routed[&103], [L7]);
}

#[test]
fn the_same_layout_crosses_nothing() {
    for yaml in [
        "",
        "l7: {queues: 1}",
        "queues: {count: 3}",
        "datapath: {failMode: open}",
    ] {
        assert_eq!(crossed(&installed(yaml), &queues(yaml)), [], "{yaml}");
        let config = config(yaml);
        let startup = startup(&config.datapath, &config.queue_numbers());
        assert_eq!(
            crossed(&startup, &queues(yaml)),
            [],
            "startup state, {yaml}"
        );
    }
}

#[test]
fn more_or_fewer_l7_queues_cross_nothing() {
    // The L7 queues grow or shrink at their end, where no other role is.
    let (two, one) = ("l7: {queues: 2}", "l7: {queues: 1}");
    assert_eq!(crossed(&installed(two), &queues(one)), []);
    assert_eq!(crossed(&installed(one), &queues(two)), []);
}

#[test]
fn renumbered_queues_are_crossed() {
    use Role::*;
    let crossing = |kernel: &str, agent: &str| -> Vec<(u16, Role, Role)> {
        crossed(&installed(kernel), &queues(agent))
            .into_iter()
            .map(|c| (c.queue, c.kernel, c.agent))
            .collect()
    };
    // One connection queue (DNS 101, L7 102-103), then three (100-102,
    // DNS 103, L7 104-105): the old L7 queues are the new 102 and DNS.
    assert_eq!(
        crossing("queues: {count: 1}", "queues: {count: 3}"),
        [
            (101, Dns, Connection),
            (102, L7, Connection),
            (103, L7, Dns)
        ]
    );
    // And back: the old connection queues 101-102 are the new DNS and L7
    // queues, the old DNS queue 103 an L7 queue.
    assert_eq!(
        crossing("queues: {count: 3}", "queues: {count: 1}"),
        [
            (101, Connection, Dns),
            (102, Connection, L7),
            (103, Dns, L7)
        ]
    );
    // An L7 queue moved onto the DNS queue's number.
    assert_eq!(
        crossing("", "fqdn: {dnsQueue: 103}\nl7: {queue: 104}"),
        [(103, L7, Dns)]
    );
    let message = crossed(&installed("queues: {count: 1}"), &queues(""))[0].to_string();
    assert_eq!(
        message,
        "queue 101 gets DNS packets, this agent reads it as its connection queue"
    );
}

#[test]
fn a_queue_rule_the_plan_does_not_write_crosses_every_role() {
    let mut state = installed("");
    state
        .v4
        .chains
        .get_mut("TOLLGATE-INPUT")
        .unwrap()
        .push("-p tcp -m tcp --dport 22 -j NFQUEUE --queue-num 103".into());
    let crossed = crossed(&state, &queues(""));
    assert_eq!(
        crossed,
        [Crossed {
            queue: 103,
            kernel: Role::Unknown,
            agent: Role::L7
        }]
    );
}

#[test]
fn queue_numbers_are_read_from_each_target_form() {
    assert_eq!(numbers(" --queue-num 7 --queue-bypass"), [7]);
    assert_eq!(numbers(" --queue-balance 100:102"), [100, 101, 102]);
    assert_eq!(
        numbers(" --queue-balance 100:102 --queue-bypass"),
        [100, 101, 102]
    );
    assert_eq!(numbers(""), [0]);
    assert_eq!(numbers(" --queue-num x"), Vec::<u16>::new());
}

//! The network-policy-api kinds against everything else, as truth tables
//! over Namespaces x, y, z × Pods a, b, c: Antrea Tiers of priority up to
//! 220 > Admin-tier ClusterNetworkPolicy > the other Antrea Tiers (not
//! baseline) > AdminNetworkPolicy > Kubernetes NetworkPolicy > Antrea
//! baseline Tier > Baseline tier (Baseline ClusterNetworkPolicy, then the
//! BaselineAdminNetworkPolicy).

use std::net::IpAddr;

use crate::fqdn::StaticFqdn;
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::ruleset::{Outcome, PolicyKind};

use super::*;

fn anp(name: &str, priority: i32, body: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n  priority: {priority}\n{body}---\n"
    )
}

fn banp(body: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: BaselineAdminNetworkPolicy\nmetadata: {{name: default}}\nspec:\n{body}---\n"
    )
}

fn cnp(name: &str, tier: &str, priority: i32, body: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n  tier: {tier}\n  priority: {priority}\n{body}---\n"
    )
}

fn acnp(name: &str, tier: &str, body: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n  priority: 1\n  tier: {tier}\n{body}---\n"
    )
}

fn k8s(name: &str, ns: &str, body: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{body}---\n"
    )
}

/// `subject` / `appliedTo` for Namespace `ns`.
fn subject_ns(ns: &str) -> String {
    format!("  subject:\n    namespaces: {{matchLabels: {{ns: \"{ns}\"}}}}\n")
}

fn ingress_from_ns(action: &str, ns: &str) -> String {
    format!("  - action: {action}\n    from: [{{namespaces: {{matchLabels: {{ns: \"{ns}\"}}}}}}]\n")
}

const FROM_ALL: &str = "    from: [{namespaces: {}}]\n";

#[test]
fn truth_anp_deny_beats_k8s_allow() {
    let rs = ruleset(&format!(
        "{}{}",
        anp(
            "deny-y-to-x",
            10,
            &format!(
                "{}  ingress:\n{}",
                subject_ns("x"),
                ingress_from_ns("Deny", "y")
            )
        ),
        k8s("allow-all", "x", "  podSelector: {}\n  ingress:\n  - {}\n")
    ));
    assert_matrix(&rs, |from, to| !(to.0 == X && from.0 == Y));
}

#[test]
fn truth_antrea_tiers_beat_admin_tier() {
    let rs = ruleset(&format!(
        "{}{}",
        acnp(
            "app-allow-y-to-xa",
            "application",
            "  appliedTo: [{podSelector: {matchLabels: {app: a}}, namespaceSelector: {matchLabels: {ns: \"x\"}}}]\n  ingress:\n  - action: Allow\n    from: [{namespaceSelector: {matchLabels: {ns: \"y\"}}}]\n"
        ),
        anp(
            "deny-all-to-x",
            0,
            &format!("{}  ingress:\n  - action: Deny\n{FROM_ALL}", subject_ns("x"))
        ),
    ));
    assert_matrix(&rs, |from, to| to.0 != X || (to.1 == A && from.0 == Y));
}

#[test]
fn truth_admin_tier_cnp_sits_between_platform_and_application() {
    let deny_all_to_x = cnp(
        "deny-all-to-x",
        "Admin",
        0,
        &format!(
            "{}  ingress:\n  - action: Deny\n{FROM_ALL}",
            subject_ns("x")
        ),
    );
    let allow_y = |tier: &str| {
        acnp(
            "allow-y-to-x",
            tier,
            "  appliedTo: [{namespaceSelector: {matchLabels: {ns: \"x\"}}}]\n  ingress:\n  - action: Allow\n    from: [{namespaceSelector: {matchLabels: {ns: \"y\"}}}]\n",
        )
    };
    // An application-tier Allow (250) cannot undo the Admin-tier Deny...
    let rs = ruleset(&format!("{}{deny_all_to_x}", allow_y("application")));
    assert_matrix(&rs, |_, to| to.0 != X);
    // ...a platform (200) or securityops (100) Allow can, and so can a
    // custom Tier at 220 (an Antrea Tier of equal priority goes first).
    for tier in ["platform", "securityops", "at220"] {
        let custom = "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: at220}\nspec: {priority: 220}\n---\n";
        let rs = ruleset(&format!("{custom}{}{deny_all_to_x}", allow_y(tier)));
        assert_matrix(&rs, |from, to| to.0 != X || from.0 == Y);
    }
    let d = rs_decision(&ruleset(&format!(
        "{}{deny_all_to_x}",
        allow_y("application")
    )));
    let rule = d.ingress.rule().expect("rule");
    assert_eq!(
        rule.policy.to_string(),
        "ClusterNetworkPolicy:deny-all-to-x"
    );
    assert_eq!(rule.tier.as_deref(), Some("Admin"));
    assert_eq!(rule.tier_priority, Some(220));
}

fn rs_decision(rs: &Ruleset) -> crate::ruleset::Decision {
    rs.classify(&tcp(ip(Y, A), ip(X, A), 80), &NoFqdn)
}

#[test]
fn truth_admin_pass_hands_over_to_k8s_network_policy() {
    let rs = ruleset(&format!(
        "{}{}{}",
        cnp(
            "pass-y",
            "Admin",
            1,
            &format!("{}  ingress:\n{}", subject_ns("x"), ingress_from_ns("Pass", "y"))
        ),
        anp(
            "deny-all",
            2,
            &format!("{}  ingress:\n  - action: Deny\n{FROM_ALL}", subject_ns("x"))
        ),
        k8s(
            "allow-yb",
            "x",
            "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: \"y\"}}, podSelector: {matchLabels: {app: b}}}]\n"
        ),
    ));
    // y/b: passed (over the AdminNetworkPolicy too), then allowed by the K8s
    // policy; y/a, y/c: passed, then the K8s isolation drops them; x, z:
    // the AdminNetworkPolicy Deny.
    assert_matrix(&rs, |from, to| to.0 != X || from == (Y, B));
    let d = rs.classify(&tcp(ip(Y, A), ip(X, A), 80), &NoFqdn);
    assert_eq!(d.ingress.outcome, Outcome::K8sDefaultDeny);
    let pass = d.ingress.passed_by.expect("passed");
    assert_eq!(pass.policy.to_string(), "ClusterNetworkPolicy:pass-y");
    assert_eq!(pass.name.as_deref(), Some("ingress[0]"));
}

#[test]
fn truth_admin_pass_without_k8s_policy_reaches_the_baseline_tier() {
    let rs = ruleset(&format!(
        "{}{}",
        anp(
            "pass-y",
            1,
            &format!(
                "{}  ingress:\n{}",
                subject_ns("x"),
                ingress_from_ns("Pass", "y")
            )
        ),
        banp(&format!(
            "{}  ingress:\n  - action: Deny\n{FROM_ALL}",
            subject_ns("x")
        )),
    ));
    assert_matrix(&rs, |_, to| to.0 != X);
}

#[test]
fn truth_admin_priority_within_each_kind_and_cnp_before_anp() {
    let rs = ruleset(&format!(
        "{}{}{}",
        cnp(
            "allow-y",
            "Admin",
            10,
            &format!("{}  ingress:\n{}", subject_ns("x"), ingress_from_ns("Accept", "y"))
        ),
        cnp(
            "deny-yc",
            "Admin",
            5,
            &format!(
                "{}  ingress:\n  - action: Deny\n    from: [{{pods: {{namespaceSelector: {{}}, podSelector: {{matchLabels: {{app: c}}}}}}}}]\n",
                subject_ns("x")
            )
        ),
        // Priority 0, but AdminNetworkPolicies come after the Admin tier
        // of ClusterNetworkPolicies (and after the application Tier).
        anp(
            "deny-all",
            0,
            &format!("{}  ingress:\n  - action: Deny\n{FROM_ALL}", subject_ns("x"))
        ),
    ));
    assert_matrix(&rs, |from, to| to.0 != X || (from.0 == Y && from.1 != C));
}

#[test]
fn truth_banp_deny_undone_by_k8s_network_policy() {
    let rs = ruleset(&format!(
        "{}{}",
        banp(&format!("{}  ingress:\n  - action: Deny\n{FROM_ALL}", subject_ns("z"))),
        k8s(
            "allow-x",
            "z",
            "  podSelector: {matchLabels: {app: a}}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: \"x\"}}}]\n"
        ),
    ));
    assert_matrix(&rs, |from, to| to.0 != Z || (to.1 == A && from.0 == X));
}

#[test]
fn truth_antrea_baseline_tier_before_baseline_admin_policies() {
    let rs = ruleset(&format!(
        "{}{}",
        acnp(
            "baseline-allow-y",
            "baseline",
            "  appliedTo: [{namespaceSelector: {matchLabels: {ns: \"z\"}}}]\n  ingress:\n  - action: Allow\n    from: [{namespaceSelector: {matchLabels: {ns: \"y\"}}}]\n"
        ),
        cnp(
            "baseline-deny",
            "Baseline",
            1,
            &format!("{}  ingress:\n  - action: Deny\n{FROM_ALL}", subject_ns("z"))
        ),
    ));
    assert_matrix(&rs, |from, to| to.0 != Z || from.0 == Y);
}

#[test]
fn truth_baseline_pass_allows() {
    let rs = ruleset(&format!(
        "{}{}",
        cnp(
            "pass-x",
            "Baseline",
            1,
            &format!(
                "{}  ingress:\n{}",
                subject_ns("z"),
                ingress_from_ns("Pass", "x")
            )
        ),
        banp(&format!(
            "{}  ingress:\n  - action: Deny\n{FROM_ALL}",
            subject_ns("z")
        )),
    ));
    assert_matrix(&rs, |from, to| to.0 != Z || from.0 == X);
}

#[test]
fn truth_antrea_pass_skips_the_admin_tier() {
    let rs = ruleset(&format!(
        "{}{}",
        acnp(
            "pass-y",
            "securityops",
            "  appliedTo: [{namespaceSelector: {matchLabels: {ns: \"x\"}}}]\n  ingress:\n  - action: Pass\n    from: [{namespaceSelector: {matchLabels: {ns: \"y\"}}}]\n"
        ),
        anp(
            "deny-all",
            1,
            &format!("{}  ingress:\n  - action: Deny\n{FROM_ALL}", subject_ns("x"))
        ),
    ));
    assert_matrix(&rs, |from, to| to.0 != X || from.0 == Y);
}

#[test]
fn truth_egress_subject_pods_and_peer_namespaces() {
    let rs = ruleset(&cnp(
        "yb-not-to-z",
        "Admin",
        1,
        "  subject:\n    pods: {namespaceSelector: {matchLabels: {ns: \"y\"}}, podSelector: {matchLabels: {app: b}}}\n  egress:\n  - action: Deny\n    to: [{namespaces: {matchLabels: {ns: \"z\"}}}]\n",
    ));
    assert_matrix(&rs, |from, to| !(from == (Y, B) && to.0 == Z));
}

fn flow(src: IpAddr, dst: IpAddr, transport: Transport) -> Flow {
    Flow {
        src,
        dst,
        transport,
        local: None,
    }
}

#[test]
fn nodes_and_networks_peers_match_node_addresses_and_cidrs() {
    let rs = ruleset(&cnp(
        "no-node-no-net",
        "Admin",
        1,
        &format!(
            "{}  egress:\n  - action: Deny\n    to: [{{nodes: {{matchLabels: {{kubernetes.io/os: linux}}}}}}]\n  - action: Deny\n    to: [{{networks: [192.0.2.0/24]}}]\n",
            subject_ns("x")
        ),
    ));
    let node: IpAddr = NODE_IP.parse().unwrap();
    assert_eq!(verdict(&rs, ip(X, A), node, 22), Verdict::Drop);
    assert_eq!(verdict(&rs, ip(Y, A), node, 22), Verdict::Allow);
    let outside: IpAddr = "192.0.2.7".parse().unwrap();
    assert_eq!(verdict(&rs, ip(X, A), outside, 443), Verdict::Drop);
    assert_eq!(
        verdict(&rs, ip(X, A), "198.51.100.1".parse().unwrap(), 443),
        Verdict::Allow
    );
    let d = rs.classify(&tcp(ip(X, A), outside, 443), &NoFqdn);
    let rule = d.egress.rule().expect("rule");
    assert_eq!(
        rule.policy.to_string(),
        "ClusterNetworkPolicy:no-node-no-net"
    );
    assert_eq!(rule.name.as_deref(), Some("egress[1]"));
    assert_eq!(rule.tier.as_deref(), Some("Admin"));
}

#[test]
fn ports_ranges_and_named_ports() {
    let rs = ruleset(&format!(
        "{}{}",
        anp(
            "ports",
            1,
            &format!(
                "{}  ingress:\n  - action: Deny\n    from: [{{namespaces: {{}}}}]\n    ports: [{{portNumber: {{protocol: TCP, port: 22}}}}, {{portRange: {{protocol: UDP, start: 1000, end: 1010}}}}, {{namedPort: http}}]\n",
                subject_ns("x")
            )
        ),
        cnp(
            "protocols",
            "Admin",
            2,
            &format!(
                "{}  ingress:\n  - action: Deny\n    from: [{{namespaces: {{}}}}]\n    protocols: [{{sctp: {{destinationPort: {{range: {{start: 9000, end: 9005}}}}}}}}, {{destinationNamedPort: http}}]\n",
                subject_ns("y")
            )
        ),
    ));
    let udp = |port| Transport::Udp {
        src_port: 40000,
        dst_port: port,
    };
    let sctp = |port| Transport::Sctp {
        src_port: 40000,
        dst_port: port,
    };
    let v = |src, dst, t| rs.classify(&flow(src, dst, t), &NoFqdn).verdict;
    // AdminNetworkPolicy on x: TCP 22, UDP 1000-1010, named port http (80).
    assert_eq!(verdict(&rs, ip(Z, A), ip(X, A), 22), Verdict::Drop);
    assert_eq!(verdict(&rs, ip(Z, A), ip(X, A), 80), Verdict::Drop);
    assert_eq!(verdict(&rs, ip(Z, A), ip(X, A), 81), Verdict::Allow);
    assert_eq!(v(ip(Z, A), ip(X, A), udp(1010)), Verdict::Drop);
    assert_eq!(v(ip(Z, A), ip(X, A), udp(1011)), Verdict::Allow);
    assert_eq!(v(ip(Z, A), ip(X, A), udp(22)), Verdict::Allow);
    // ClusterNetworkPolicy on y: SCTP 9000-9005 and http.
    assert_eq!(v(ip(Z, A), ip(Y, A), sctp(9005)), Verdict::Drop);
    assert_eq!(v(ip(Z, A), ip(Y, A), sctp(9006)), Verdict::Allow);
    assert_eq!(verdict(&rs, ip(Z, A), ip(Y, A), 80), Verdict::Drop);
    assert_eq!(verdict(&rs, ip(Z, A), ip(Y, A), 22), Verdict::Allow);
}

#[test]
fn domain_names_star_is_one_or_more_whole_labels_beside_antrea_fqdn() {
    let server: IpAddr = "203.0.113.10".parse().unwrap();
    let rs = ruleset(&format!(
        "{}{}",
        cnp(
            "only-allowed",
            "Admin",
            1,
            &format!(
                "{}  egress:\n  - action: Accept\n    to: [{{domainNames: ['*.allowed.test']}}]\n  - action: Deny\n    to: [{{networks: [0.0.0.0/0]}}]\n",
                subject_ns("x")
            )
        ),
        acnp(
            "antrea-fqdn",
            "application",
            "  appliedTo: [{namespaceSelector: {matchLabels: {ns: \"y\"}}}]\n  egress:\n  - action: Allow\n    to: [{fqdn: '*allowed.test'}]\n  - action: Drop\n    to: [{ipBlock: {cidr: 0.0.0.0/0}}]\n"
        ),
    ));
    let decide = |ns: usize, name: &str| {
        let learned = StaticFqdn(vec![(name.to_string(), server)]);
        rs.classify(&tcp(ip(ns, A), server, 443), &learned).verdict
    };
    for name in ["a.allowed.test", "b.c.allowed.test", "A.ALLOWED.TEST."] {
        assert_eq!(decide(X, name), Verdict::Allow, "{name}");
    }
    for name in ["allowed.test", "notallowed.test", "a.allowed.test.evil"] {
        assert_eq!(decide(X, name), Verdict::Drop, "{name}");
    }
    // Antrea's `*` matches any run of characters: both of these.
    assert_eq!(decide(Y, "allowed.test"), Verdict::Allow);
    assert_eq!(decide(Y, "notallowed.test"), Verdict::Allow);
    assert_eq!(decide(Y, "other.test"), Verdict::Drop);
    let patterns: Vec<&str> = rs.fqdn_patterns().iter().map(|p| p.as_str()).collect();
    assert!(patterns.contains(&"*.allowed.test"), "{patterns:?}");
}

#[test]
fn policies_are_listed_in_effective_priority_order() {
    let rs = ruleset(&format!(
        "{}{}{}{}{}{}",
        banp(&format!(
            "{}  ingress:\n  - action: Deny\n{FROM_ALL}",
            subject_ns("z")
        )),
        cnp("b-cnp", "Baseline", 3, &subject_ns("z")),
        k8s("np", "x", "  podSelector: {}\n"),
        anp("anp-5", 5, &subject_ns("x")),
        cnp("a-cnp", "Admin", 5, &subject_ns("x")),
        acnp(
            "antrea",
            "application",
            "  appliedTo: [{podSelector: {}}]\n  ingress:\n  - action: Allow\n"
        ),
    ));
    let order: Vec<(String, Option<String>)> = rs
        .policies()
        .iter()
        .map(|p| (p.policy.to_string(), p.tier.clone()))
        .collect();
    let s = |a: &str, t: Option<&str>| (a.to_string(), t.map(str::to_string));
    assert_eq!(
        order,
        [
            s("ClusterNetworkPolicy:a-cnp", Some("Admin")),
            s("AntreaClusterNetworkPolicy:antrea", Some("application")),
            s("AdminNetworkPolicy:anp-5", Some("Admin")),
            s("K8sNetworkPolicy:x/np", None),
            s("ClusterNetworkPolicy:b-cnp", Some("Baseline")),
            s("BaselineAdminNetworkPolicy:default", Some("Baseline")),
        ]
    );
    let banp = rs.policies().last().unwrap();
    assert_eq!(banp.policy.kind, PolicyKind::BaselineAdminNetworkPolicy);
    assert_eq!(banp.rule_names, ["ingress[0]"]);
    assert_eq!(banp.applied_to, ["z/a", "z/b", "z/c"]);
}

#[test]
fn audit_lines_name_the_policy_as_antrea_np_log_does() {
    use crate::audit::{Subject, Timestamp};
    let rs = ruleset(&format!(
        "{}{}",
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata:\n  name: audited\n  annotations: {networkpolicy.antrea.io/enable-logging: \"true\"}\nspec:\n  priority: 3\n  subject:\n    namespaces: {matchLabels: {ns: \"x\"}}\n  ingress:\n  - name: deny-y\n    action: Deny\n    from: [{namespaces: {matchLabels: {ns: \"y\"}}}]\n---\n",
        anp(
            "quiet",
            4,
            &format!("{}  ingress:\n{}", subject_ns("z"), ingress_from_ns("Deny", "y"))
        ),
    ));
    let line = |to: (usize, usize)| {
        let flow = tcp(ip(Y, A), ip(to.0, to.1), 80);
        let d = rs.classify(&flow, &NoFqdn);
        Subject::of(&d, d.verdict, &rs)
            .into_iter()
            .map(|s| s.record(Timestamp::from_unix_micros(0), flow, 60).line())
            .collect::<Vec<_>>()
    };
    let lines = line((X, A));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("AntreaPolicyIngressRule AdminNetworkPolicy:audited deny-y Ingress Drop"),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains(" x/a 10.0.1.1 40000 10.0.0.1 80 TCP 60 <nil>"),
        "{}",
        lines[0]
    );
    // Without the annotation nothing is audited.
    assert!(line((Z, A)).is_empty());
}

#[test]
fn truth_v1alpha1_same_labels_and_not_same_labels_isolate_tenants() {
    // x and y are org a, z is org b (label `org`).
    let orgs = ["a", "a", "b"];
    let rs = ruleset_with(
        orgs,
        &anp(
            "tenants",
            1,
            "  subject:\n    namespaces: {}\n  ingress:\n  - action: Allow\n    from:\n    - namespaces: {sameLabels: [org]}\n  - action: Deny\n    from:\n    - pods:\n        namespaces: {notSameLabels: [org]}\n        podSelector: {}\n",
        ),
    );
    assert_matrix(&rs, |from, to| (from.0 == Z) == (to.0 == Z));
    // Without the key on the subject's Namespace, sameLabels selects
    // nothing and notSameLabels every Namespace.
    let rs = ruleset_with(
        ["a", "a", ""],
        &anp(
            "tenants",
            1,
            "  subject:\n    namespaces: {}\n  ingress:\n  - action: Allow\n    from:\n    - namespaces: {sameLabels: [org]}\n  - action: Deny\n    from:\n    - namespaces: {notSameLabels: [org]}\n",
        ),
    );
    assert_matrix(&rs, |from, to| to.0 != Z && (from.0 == Z) == (to.0 == Z));
}

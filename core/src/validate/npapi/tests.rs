//! One test per network-policy-api admission rule: an admitted and a
//! refused case, with the exact field and message, built from YAML
//! through the real decoder.

use std::path::Path;

use crate::decode::parse_documents;
use crate::model::Snapshot;
use crate::validate::{validate, Problem};

use super::{BANP_NAMED_PORT_PEERS, BANP_SINGLETON, INVALID_CIDR, NAMED_PORT_PEERS, RANGE_ORDER};

fn problems(yaml: &str) -> Vec<Problem> {
    let (objects, decode) = parse_documents(Path::new("t.yaml"), yaml);
    assert!(decode.is_empty(), "decoding failed: {decode:#?}");
    validate(&Snapshot { objects })
}

#[track_caller]
fn assert_valid(yaml: &str) {
    let found = problems(yaml);
    assert!(found.is_empty(), "unexpected problems: {found:#?}");
}

/// Exactly one problem, at `field`, with exactly `reason`.
#[track_caller]
fn assert_problem(yaml: &str, field: &str, reason: &str) {
    let found = problems(yaml);
    assert!(
        found.len() == 1 && found[0].field == field && found[0].reason == reason,
        "expected exactly `{field}: {reason}`, got: {found:#?}"
    );
}

/// The decoding problem of `yaml`, rendered.
fn decode_problem(yaml: &str) -> String {
    let (_, decode) = parse_documents(Path::new("t.yaml"), yaml);
    assert_eq!(decode.len(), 1, "{decode:#?}");
    decode[0].to_string()
}

fn indent(text: &str, by: usize) -> String {
    text.trim_start_matches('\n')
        .lines()
        .map(|l| format!("{}{l}\n", " ".repeat(by)))
        .collect()
}

const SUBJECT: &str = "subject:\n  namespaces: {matchLabels: {team: a}}\n";

fn anp(spec: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata:\n  name: p\nspec:\n{}",
        indent(spec, 2)
    )
}

fn banp(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: BaselineAdminNetworkPolicy\nmetadata:\n  name: {name}\nspec:\n{}",
        indent(spec, 2)
    )
}

fn cnp(spec: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata:\n  name: p\nspec:\n{}",
        indent(spec, 2)
    )
}

fn anp_egress(rule: &str) -> String {
    anp(&format!(
        "priority: 10\n{SUBJECT}egress:\n{}",
        indent(rule, 2)
    ))
}

fn cnp_egress(rule: &str) -> String {
    cnp(&format!(
        "tier: Admin\npriority: 10\n{SUBJECT}egress:\n{}",
        indent(rule, 2)
    ))
}

fn cnp_ingress(rule: &str) -> String {
    cnp(&format!(
        "tier: Admin\npriority: 10\n{SUBJECT}ingress:\n{}",
        indent(rule, 2)
    ))
}

#[test]
fn the_three_kinds_are_read_and_admitted() {
    assert_valid(&anp(&format!(
        "priority: 0\n{SUBJECT}ingress:\n- {{name: a, action: Allow, from: [{{namespaces: {{}}}}], ports: [{{portNumber: {{port: 80}}}}]}}\n"
    )));
    assert_valid(&banp(
        "default",
        &format!("{SUBJECT}egress:\n- {{action: Deny, to: [{{networks: [10.0.0.0/8]}}]}}\n"),
    ));
    assert_valid(&cnp(&format!(
        "tier: Baseline\npriority: 1000\n{SUBJECT}egress:\n- {{action: Accept, to: [{{domainNames: ['*.allowed.test']}}], protocols: [{{tcp: {{destinationPort: {{number: 443}}}}}}]}}\n"
    )));
}

#[test]
fn anp_priority_is_0_to_1000() {
    assert_valid(&anp(&format!("priority: 1000\n{SUBJECT}")));
    assert_problem(
        &anp(&format!("priority: 1001\n{SUBJECT}")),
        "spec.priority",
        "must be between 0 and 1000, got 1001",
    );
    assert_problem(
        &anp(&format!("priority: -1\n{SUBJECT}")),
        "spec.priority",
        "must be between 0 and 1000, got -1",
    );
}

#[test]
fn cnp_priority_is_0_to_1000_in_each_tier() {
    for tier in ["Admin", "Baseline"] {
        assert_valid(&cnp(&format!("tier: {tier}\npriority: 0\n{SUBJECT}")));
        assert_problem(
            &cnp(&format!("tier: {tier}\npriority: 2000\n{SUBJECT}")),
            "spec.priority",
            "must be between 0 and 1000, got 2000",
        );
    }
}

#[test]
fn cnp_tier_is_admin_or_baseline() {
    let message = decode_problem(&cnp(&format!("tier: Emergency\npriority: 1\n{SUBJECT}")));
    assert!(
        message.contains("spec.tier") && message.contains("unknown variant `Emergency`"),
        "{message}"
    );
}

#[test]
fn subject_is_exactly_one_of_namespaces_or_pods() {
    assert_valid(&anp(
        "priority: 1\nsubject:\n  pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: a}}}\n",
    ));
    for subject in [
        "subject: {}\n",
        "subject:\n  namespaces: {}\n  pods: {namespaceSelector: {}, podSelector: {}}\n",
    ] {
        assert_problem(
            &anp(&format!("priority: 1\n{subject}")),
            "spec.subject",
            "exactly one of namespaces or pods must be set",
        );
    }
}

#[test]
fn subject_selectors_are_checked() {
    assert_problem(
        &anp("priority: 1\nsubject:\n  namespaces: {matchLabels: {'bad key!': x}}\n"),
        "spec.subject.namespaces.matchLabels",
        "invalid label key `bad key!`: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
    );
}

#[test]
fn banp_is_a_singleton_named_default() {
    assert_valid(&banp("default", SUBJECT));
    assert_problem(&banp("other", SUBJECT), "metadata.name", BANP_SINGLETON);
}

#[test]
fn actions_per_kind() {
    let rule = |action: &str| format!("- {{action: {action}, to: [{{namespaces: {{}}}}]}}\n");
    assert_valid(&anp_egress(&rule("Pass")));
    assert_problem(
        &anp_egress(&rule("Accept")),
        "spec.egress[0].action",
        "`Accept` is not an action of AdminNetworkPolicy: use one of Allow, Deny, Pass",
    );
    assert_valid(&cnp_egress(&rule("Pass")));
    assert_problem(
        &cnp_egress(&rule("Allow")),
        "spec.egress[0].action",
        "`Allow` is not an action of ClusterNetworkPolicy: use one of Accept, Deny, Pass",
    );
    assert_problem(
        &banp("default", &format!("{SUBJECT}egress:\n{}", rule("Pass"))),
        "spec.egress[0].action",
        "`Pass` is not an action of BaselineAdminNetworkPolicy: use one of Allow, Deny",
    );
    let message = decode_problem(&anp_egress(&rule("Drop")));
    assert!(message.contains("spec.egress[0].action"), "{message}");
}

#[test]
fn at_most_100_rules_in_v1alpha1_and_25_in_v1alpha2() {
    let rules = |n: usize, action: &str| {
        format!("- {{action: {action}, to: [{{namespaces: {{}}}}]}}\n").repeat(n)
    };
    assert_valid(&anp_egress(&rules(100, "Deny")));
    assert_problem(
        &anp_egress(&rules(101, "Deny")),
        "spec.egress",
        "must have at most 100 rules, got 101",
    );
    assert_valid(&cnp_egress(&rules(25, "Deny")));
    assert_problem(
        &cnp_egress(&rules(26, "Deny")),
        "spec.egress",
        "must have at most 25 rules, got 26",
    );
}

#[test]
fn rules_need_1_to_n_peers() {
    assert_problem(
        &cnp_ingress("- {action: Deny, from: []}\n"),
        "spec.ingress[0].from",
        "must have at least 1 peer",
    );
    let peers = "{namespaces: {}}, ".repeat(26);
    assert_problem(
        &cnp_ingress(&format!("- {{action: Deny, from: [{peers}]}}\n")),
        "spec.ingress[0].from",
        "must have at most 25 peers, got 26",
    );
}

#[test]
fn rule_names_are_at_most_100_characters() {
    let ok = "n".repeat(100);
    assert_valid(&cnp_egress(&format!(
        "- {{name: {ok}, action: Deny, to: [{{namespaces: {{}}}}]}}\n"
    )));
    let long = "n".repeat(101);
    assert_problem(
        &cnp_egress(&format!(
            "- {{name: {long}, action: Deny, to: [{{namespaces: {{}}}}]}}\n"
        )),
        "spec.egress[0].name",
        "must be at most 100 characters",
    );
}

#[test]
fn a_peer_sets_exactly_one_field() {
    assert_problem(
        &cnp_egress("- {action: Deny, to: [{}]}\n"),
        "spec.egress[0].to[0]",
        "exactly one of namespaces, pods, nodes, networks, domainNames must be set, got none",
    );
    assert_problem(
        &cnp_egress("- {action: Deny, to: [{namespaces: {}, nodes: {}}]}\n"),
        "spec.egress[0].to[0]",
        "exactly one of namespaces, pods, nodes, networks, domainNames must be set, got namespaces, nodes",
    );
}

#[test]
fn ingress_peers_are_namespaces_or_pods() {
    assert_valid(&cnp_ingress(
        "- {action: Deny, from: [{pods: {namespaceSelector: {}, podSelector: {}}}]}\n",
    ));
    assert_problem(
        &cnp_ingress("- {action: Deny, from: [{networks: [10.0.0.0/8]}]}\n"),
        "spec.ingress[0].from[0].networks",
        "is not a ingress peer here: use one of namespaces, pods",
    );
}

#[test]
fn banp_has_no_domain_names() {
    assert_problem(
        &banp(
            "default",
            &format!("{SUBJECT}egress:\n- {{action: Allow, to: [{{domainNames: [a.test]}}]}}\n"),
        ),
        "spec.egress[0].to[0].domainNames",
        "is not a egress peer here: use one of namespaces, pods, nodes, networks",
    );
}

#[test]
fn networks_are_cidrs() {
    assert_valid(&cnp_egress(
        "- {action: Deny, to: [{networks: [10.0.0.0/8, '2001:db8::/32', 10.1.2.3/24]}]}\n",
    ));
    for bad in [
        "10.0.0.0",
        "10.0.0.0/33",
        "not-a-cidr/8",
        "'2001:db8::/129'",
    ] {
        assert_problem(
            &cnp_egress(&format!(
                "- {{action: Deny, to: [{{networks: [{bad}]}}]}}\n"
            )),
            "spec.egress[0].to[0].networks[0]",
            &format!("{INVALID_CIDR}: `{}`", bad.trim_matches('\'')),
        );
    }
    assert_problem(
        &cnp_egress("- {action: Deny, to: [{networks: []}]}\n"),
        "spec.egress[0].to[0].networks",
        "must have at least 1 item",
    );
}

#[test]
fn domain_names_follow_the_pattern() {
    assert_valid(&cnp_egress(
        "- {action: Accept, to: [{domainNames: ['*.allowed.test', 'www.example.com.', a_b.example.com]}]}\n",
    ));
    for bad in [
        "example",
        "*.com",
        "a.*.example.com",
        "*example.com",
        "-a.example.com",
        "a..b",
    ] {
        assert_problem(
            &cnp_egress(&format!(
                "- {{action: Accept, to: [{{domainNames: ['{bad}']}}]}}\n"
            )),
            "spec.egress[0].to[0].domainNames[0]",
            &format!("`{bad}` is not a domain name: letters, digits, '-' and '_' in dot-separated labels, optionally starting with `*.`"),
        );
    }
}

#[test]
fn domain_names_only_in_accept_rules() {
    assert_problem(
        &cnp_egress("- {action: Deny, to: [{domainNames: [a.example.com]}]}\n"),
        "spec.egress[0].to[0].domainNames",
        "is only allowed in Accept rules",
    );
    assert_problem(
        &anp_egress("- {action: Pass, to: [{domainNames: [a.example.com]}]}\n"),
        "spec.egress[0].to[0].domainNames",
        "is only allowed in Allow rules",
    );
    assert_valid(&anp_egress(
        "- {action: Allow, to: [{domainNames: [a.example.com]}]}\n",
    ));
}

#[test]
fn named_ports_not_towards_networks_nodes_or_domain_names() {
    assert_valid(&cnp_egress(
        "- {action: Accept, to: [{namespaces: {}}], protocols: [{destinationNamedPort: web}]}\n",
    ));
    for peer in [
        "networks: [10.0.0.0/8]",
        "nodes: {}",
        "domainNames: [a.test]",
    ] {
        assert_problem(
            &cnp_egress(&format!(
                "- {{action: Accept, to: [{{{peer}}}], protocols: [{{destinationNamedPort: web}}]}}\n"
            )),
            "spec.egress[0]",
            NAMED_PORT_PEERS,
        );
    }
    assert_problem(
        &anp_egress("- {action: Allow, to: [{nodes: {}}], ports: [{namedPort: web}]}\n"),
        "spec.egress[0]",
        NAMED_PORT_PEERS,
    );
    assert_problem(
        &banp(
            "default",
            &format!("{SUBJECT}egress:\n- {{action: Allow, to: [{{networks: [10.0.0.0/8]}}], ports: [{{namedPort: web}}]}}\n"),
        ),
        "spec.egress[0]",
        BANP_NAMED_PORT_PEERS,
    );
}

#[test]
fn port_ranges_need_start_below_end() {
    assert_valid(&cnp_egress(
        "- {action: Deny, to: [{namespaces: {}}], protocols: [{udp: {destinationPort: {range: {start: 1000, end: 2000}}}}]}\n",
    ));
    assert_problem(
        &cnp_egress(
            "- {action: Deny, to: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {range: {start: 2000, end: 2000}}}}]}\n",
        ),
        "spec.egress[0].protocols[0].tcp.destinationPort.range",
        RANGE_ORDER,
    );
    assert_problem(
        &anp_egress(
            "- {action: Deny, to: [{namespaces: {}}], ports: [{portRange: {protocol: UDP, start: 9, end: 3}}]}\n",
        ),
        "spec.egress[0].ports[0].portRange",
        RANGE_ORDER,
    );
}

#[test]
fn port_numbers_are_1_to_65535() {
    assert_problem(
        &anp_egress("- {action: Deny, to: [{namespaces: {}}], ports: [{portNumber: {port: 0}}]}\n"),
        "spec.egress[0].ports[0].portNumber.port",
        "must be between 1 and 65535, got 0",
    );
    assert_problem(
        &cnp_egress(
            "- {action: Deny, to: [{namespaces: {}}], protocols: [{sctp: {destinationPort: {number: 70000}}}]}\n",
        ),
        "spec.egress[0].protocols[0].sctp.destinationPort.number",
        "must be between 1 and 65535, got 70000",
    );
}

#[test]
fn a_port_entry_sets_exactly_one_field() {
    assert_problem(
        &anp_egress(
            "- {action: Deny, to: [{namespaces: {}}], ports: [{namedPort: web, portNumber: {port: 80}}]}\n",
        ),
        "spec.egress[0].ports[0]",
        "exactly one of portNumber, namedPort or portRange must be set",
    );
    assert_problem(
        &cnp_egress(
            "- {action: Deny, to: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {number: 80}}, destinationNamedPort: web}]}\n",
        ),
        "spec.egress[0].protocols[0]",
        "exactly one of tcp, udp, sctp or destinationNamedPort must be set",
    );
    assert_problem(
        &cnp_egress("- {action: Deny, to: [{namespaces: {}}], protocols: [{tcp: {}}]}\n"),
        "spec.egress[0].protocols[0].tcp",
        "must set destinationPort",
    );
    assert_problem(
        &cnp_egress(
            "- {action: Deny, to: [{namespaces: {}}], protocols: [{tcp: {destinationPort: {}}}]}\n",
        ),
        "spec.egress[0].protocols[0].tcp.destinationPort",
        "exactly one of number or range must be set",
    );
    assert_problem(
        &cnp_egress("- {action: Deny, to: [{namespaces: {}}], protocols: []}\n"),
        "spec.egress[0].protocols",
        "must have at least 1 item when set",
    );
}

#[test]
fn unknown_fields_are_refused_with_their_path() {
    let message = decode_problem(&cnp_egress(
        "- {action: Deny, to: [{namespaces: {}}], ports: [{portNumber: {port: 80}}]}\n",
    ));
    assert!(
        message.contains("spec.egress[0]") && message.contains("unknown field `ports`"),
        "{message}"
    );
}

#[test]
fn errors_name_file_object_and_field() {
    let found = problems(&anp(&format!("priority: 5000\n{SUBJECT}")));
    assert_eq!(
        found[0].to_string(),
        "t.yaml: AdminNetworkPolicy p: spec.priority: must be between 0 and 1000, got 5000"
    );
}

#[test]
fn v1alpha1_first_namespace_peer_shape_is_read() {
    // Antrea's docs still show it: `namespaces: {namespaceSelector: {}}`.
    assert_valid(&banp(
        "default",
        "subject:\n  namespaces: {}\ningress:\n- action: Deny\n  from:\n  - namespaces:\n      namespaceSelector: {}\n",
    ));
    assert_valid(&anp(&format!(
        "priority: 1\n{SUBJECT}ingress:\n- {{action: Allow, from: [{{namespaces: {{sameLabels: [tenant]}}}}, {{pods: {{namespaces: {{notSameLabels: [tenant]}}, podSelector: {{}}}}}}]}}\n"
    )));
    assert_problem(
        &anp(&format!(
            "priority: 1\n{SUBJECT}ingress:\n- {{action: Allow, from: [{{namespaces: {{sameLabels: [tenant], notSameLabels: [org]}}}}]}}\n"
        )),
        "spec.ingress[0].from[0].namespaces",
        "exactly one of namespaceSelector, sameLabels or notSameLabels must be set",
    );
    assert_problem(
        &anp(&format!(
            "priority: 1\n{SUBJECT}ingress:\n- {{action: Allow, from: [{{namespaces: {{sameLabels: ['bad key!']}}}}]}}\n"
        )),
        "spec.ingress[0].from[0].namespaces.sameLabels[0]",
        "invalid label key `bad key!`: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
    );
    assert_problem(
        &anp(&format!(
            "priority: 1\n{SUBJECT}ingress:\n- {{action: Allow, from: [{{pods: {{podSelector: {{}}}}}}]}}\n"
        )),
        "spec.ingress[0].from[0].pods",
        "exactly one of namespaceSelector or namespaces must be set",
    );
    assert_problem(
        &cnp_ingress("- {action: Deny, from: [{namespaces: {sameLabels: [tenant]}}]}\n"),
        "spec.ingress[0].from[0].namespaces",
        "namespaceSelector, sameLabels and notSameLabels are the v1alpha1 peer shape: in v1alpha2 write a label selector",
    );
}

#[test]
fn a_custom_tier_at_220_is_a_warning_for_admin_tier_policies() {
    let tier = "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: at220}\nspec: {priority: 220}\n---\n";
    let yaml = format!(
        "{tier}{}",
        cnp(&format!("tier: Admin\npriority: 1\n{SUBJECT}"))
    );
    let (objects, _) = parse_documents(Path::new("t.yaml"), &yaml);
    let findings = crate::validate::check(&Snapshot { objects });
    assert!(findings.errors.is_empty(), "{:#?}", findings.errors);
    assert_eq!(findings.warnings.len(), 1, "{:#?}", findings.warnings);
    assert_eq!(findings.warnings[0].field, "spec.tier");
    assert_eq!(
        findings.warnings[0].reason,
        "Tier `at220` has priority 220, the Admin tier's: it is evaluated first (Antrea refuses ClusterNetworkPolicies while such a Tier exists)"
    );
    assert_valid(&format!(
        "{tier}{}",
        cnp(&format!("tier: Baseline\npriority: 1\n{SUBJECT}"))
    ));
}

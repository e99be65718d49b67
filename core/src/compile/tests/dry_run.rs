//! Dry-run policies (`tollgate.io/dry-run: "true"`): compiled in place and
//! marked, left out of the enforced outcome (rules, Kubernetes isolation,
//! `trace -v`'s consulted rules) and evaluated in the dry-run outcome,
//! which names the rule or isolation each changed verdict comes from. The
//! proptests hold it for random policies of every kind over the x/y/z ×
//! a/b/c truth-table inventory: enforcement with dry-run policies is
//! enforcement without them, and the dry-run outcome is what promoting
//! them (removing the annotation) enforces.

use std::net::IpAddr;

use proptest::prelude::*;

use crate::fqdn::NoFqdn;
use crate::model::DRY_RUN_ANNOTATION;
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::packet::LocalSide;
use crate::ruleset::{Decision, DirectionDecision, DryRunCause, Outcome, Ruleset};

use super::*;

/// `metadata` lines of a policy, annotated dry-run when `dry_run`.
fn metadata(name: &str, namespace: Option<&str>, dry_run: bool) -> String {
    let mut out = format!("metadata:\n  name: {name}\n");
    if let Some(ns) = namespace {
        out.push_str(&format!("  namespace: {ns}\n"));
    }
    if dry_run {
        out.push_str(&format!(
            "  annotations:\n    {DRY_RUN_ANNOTATION}: \"true\"\n"
        ));
    }
    out
}

/// An Antrea ClusterNetworkPolicy in securityops, priority 1.
fn acnp(name: &str, dry_run: bool, spec: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\n{}spec:\n  priority: 1\n  tier: securityops\n{spec}---\n",
        metadata(name, None, dry_run)
    )
}

fn k8s(name: &str, ns: &str, dry_run: bool, spec: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n{}spec:\n{spec}---\n",
        metadata(name, Some(ns), dry_run)
    )
}

/// Ingress of Namespace x: `action` from Namespace y on TCP 80.
fn x_from_y(action: &str) -> String {
    format!(
        "  appliedTo: [{{namespaceSelector: {{matchLabels: {{ns: \"x\"}}}}}}]\n  ingress:\n  - action: {action}\n    name: {}-y\n    from: [{{namespaceSelector: {{matchLabels: {{ns: \"y\"}}}}}}]\n    ports: [{{protocol: TCP, port: 80}}]\n",
        action.to_lowercase()
    )
}

const DENY_ALL_X: &str = "  podSelector: {}\n  policyTypes: [Ingress]\n";

fn decide(rs: &Ruleset, from: (usize, usize), to: (usize, usize)) -> Decision {
    rs.classify(&tcp(ip(from.0, from.1), ip(to.0, to.1), 80), &NoFqdn)
}

fn cause_rule(cause: &DryRunCause) -> (String, Option<String>) {
    match cause {
        DryRunCause::Rule { rule } => (rule.policy.to_string(), rule.name.clone()),
        DryRunCause::Isolation { policy } => (policy.to_string(), None),
    }
}

#[test]
fn a_dry_run_drop_is_not_enforced_and_names_its_rule() {
    let rs = ruleset(&acnp("lockdown", true, &x_from_y("Drop")));
    // Enforced: as if the policy were absent.
    assert_matrix(&rs, |_, _| true);
    let d = decide(&rs, (Y, A), (X, B));
    assert_eq!(d.verdict, Verdict::Allow);
    assert_eq!(d.ingress.outcome, Outcome::NotEnforced);
    let dry = d.dry_run.as_ref().expect("x carries a dry-run rule");
    assert_eq!(dry.verdict, Verdict::Drop);
    let change = dry.change(&d).expect("Allow -> Drop");
    assert_eq!(change.verdict, Verdict::Drop);
    assert_eq!(change.direction.direction, crate::model::Direction::Ingress);
    assert_eq!(
        cause_rule(change.cause),
        (
            "AntreaClusterNetworkPolicy:lockdown".into(),
            Some("drop-y".into())
        )
    );
    // From z the dry-run rule does not match: an outcome, no change.
    let d = decide(&rs, (Z, A), (X, B));
    let dry = d.dry_run.as_ref().expect("x carries a dry-run rule");
    assert_eq!(dry.verdict, Verdict::Allow);
    assert!(dry.change(&d).is_none());
    assert!(dry.attributed().is_none(), "no dry-run rule decided");
    // Between sides that carry no dry-run rule there is no dry-run outcome.
    assert!(decide(&rs, (X, A), (Y, B)).dry_run.is_none());
    // Promoted: what dry-run said.
    let promoted = ruleset(&acnp("lockdown", false, &x_from_y("Drop")));
    assert_matrix(&promoted, |from, to| !(from.0 == Y && to.0 == X));
}

#[test]
fn a_dry_run_allow_under_an_enforced_deny_changes_nothing_enforced() {
    let policies = format!(
        "{}{}",
        k8s("deny-all", "x", false, DENY_ALL_X),
        acnp("open-y", true, &x_from_y("Allow"))
    );
    let rs = ruleset(&policies);
    assert_matrix(&rs, |_, to| to.0 != X);
    let d = decide(&rs, (Y, A), (X, A));
    assert_eq!(d.ingress.outcome, Outcome::K8sDefaultDeny);
    let dry = d.dry_run.as_ref().expect("dry-run rule");
    let change = dry.change(&d).expect("Drop -> Allow");
    assert_eq!(change.verdict, Verdict::Allow);
    assert_eq!(cause_rule(change.cause).1.as_deref(), Some("allow-y"));
}

#[test]
fn a_dry_run_kubernetes_policy_does_not_isolate_and_its_isolation_is_named() {
    let rs = ruleset(&k8s("deny-all", "x", true, DENY_ALL_X));
    assert_matrix(&rs, |_, _| true);
    let d = decide(&rs, (Y, A), (X, A));
    assert!(rs.isolating(&tcp(ip(Y, A), ip(X, A), 80))[1].is_empty());
    let dry = d.dry_run.as_ref().expect("dry-run isolation");
    assert_eq!(dry.ingress.outcome, Outcome::K8sDefaultDeny);
    let change = dry.change(&d).expect("Allow -> Drop");
    assert_eq!(
        cause_rule(change.cause),
        ("K8sNetworkPolicy:x/deny-all".into(), None)
    );
    // With an enforced isolation as well, the dry-run one changes nothing.
    let both = ruleset(&format!(
        "{}{}",
        k8s("deny-all", "x", true, DENY_ALL_X),
        k8s("enforced", "x", false, DENY_ALL_X)
    ));
    let d = decide(&both, (Y, A), (X, A));
    assert_eq!(d.verdict, Verdict::Drop);
    assert!(d
        .dry_run
        .as_ref()
        .is_none_or(|dry| dry.change(&d).is_none()));
    assert_eq!(
        both.isolating(&tcp(ip(Y, A), ip(X, A), 80))[1]
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["K8sNetworkPolicy:x/enforced"]
    );
}

#[test]
fn a_dry_run_pass_is_named_for_the_verdict_it_hands_over() {
    // Enforced: application-tier Drop from y. Dry-run: a securityops Pass
    // from y would skip it (to no K8s policy, no baseline: allowed).
    let drop = "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: app-drop}\nspec:\n  priority: 1\n  tier: application\n"
        .to_string()
        + &x_from_y("Drop")
        + "---\n";
    let rs = ruleset(&format!(
        "{drop}{}",
        acnp("pass-y", true, &x_from_y("Pass"))
    ));
    let d = decide(&rs, (Y, A), (X, A));
    assert_eq!(d.verdict, Verdict::Drop);
    let dry = d.dry_run.as_ref().expect("dry-run rule");
    assert_eq!(dry.verdict, Verdict::Allow);
    assert_eq!(dry.ingress.outcome, Outcome::NoRuleMatched);
    let change = dry.change(&d).expect("Drop -> Allow");
    assert_eq!(cause_rule(change.cause).1.as_deref(), Some("pass-y"));
}

#[test]
fn dry_run_policies_and_rules_are_marked_and_left_out_of_trace_consulted() {
    let rs = ruleset(&format!(
        "{}{}",
        acnp("lockdown", true, &x_from_y("Drop")),
        k8s("deny-all", "x", false, DENY_ALL_X)
    ));
    let marked: Vec<(String, bool)> = rs
        .policies()
        .iter()
        .map(|p| (p.policy.to_string(), p.dry_run))
        .collect();
    assert_eq!(
        marked,
        [
            ("AntreaClusterNetworkPolicy:lockdown".to_string(), true),
            ("K8sNetworkPolicy:x/deny-all".to_string(), false)
        ]
    );
    assert!(rs.rule_refs().all(|r| r.dry_run));
    let [_, ingress] = rs.consulted(&tcp(ip(Y, A), ip(X, A), 80), &NoFqdn);
    assert!(ingress.is_empty(), "{ingress:?}");
    // A side that only a dry-run policy applies to is still sent to a
    // worker (the dry-run outcome needs its connections), as a dry-run
    // endpoint; one an enforced policy applies to as well is enforced.
    let only_dry = ruleset(&acnp("lockdown", true, &x_from_y("Drop")));
    assert!(only_dry.enforced().dry_run_endpoints.contains(&ip(X, A)));
    assert!(!only_dry.enforced().endpoints.contains(&ip(X, A)));
    assert!(rs.enforced().endpoints.contains(&ip(X, A)));
    assert!(!rs.enforced().dry_run_endpoints.contains(&ip(X, A)));
}

// ------------------------------------------------------------ proptests

const NS_NAMES: [&str; 3] = ["x", "y", "z"];
const APPS: [&str; 3] = ["a", "b", "c"];

/// One random rule.
#[derive(Clone, Debug)]
struct GenRule {
    egress: bool,
    action: u8,
    /// 0-2 a Namespace, 3-5 an app label, 6 an ipBlock, 7 everyone.
    peer: u8,
    /// 0 none, 1 TCP 80, 2 UDP 53, 3 TCP 80-81.
    port: u8,
    logged: bool,
}

/// One random policy: `kind` 0 ACNP, 1 ANNP, 2 K8s NetworkPolicy, 3
/// AdminNetworkPolicy, 4 BaselineAdminNetworkPolicy (the first only,
/// later ones are AdminNetworkPolicies), 5 `v1alpha2` ClusterNetworkPolicy.
#[derive(Clone, Debug)]
struct GenPolicy {
    kind: u8,
    /// 0-2 a Namespace, 3-5 an app label, 6 every Pod, 7 the Node (ACNP).
    scope: u8,
    tier: u8,
    priority: u8,
    rules: Vec<GenRule>,
}

fn gen_rule() -> impl Strategy<Value = GenRule> {
    (any::<bool>(), 0u8..4, 0u8..8, 0u8..4, any::<bool>()).prop_map(
        |(egress, action, peer, port, logged)| GenRule {
            egress,
            action,
            peer,
            port,
            logged,
        },
    )
}

fn gen_policy() -> impl Strategy<Value = GenPolicy> {
    (
        0u8..6,
        0u8..8,
        0u8..3,
        0u8..3,
        proptest::collection::vec(gen_rule(), 0..4),
    )
        .prop_map(|(kind, scope, tier, priority, rules)| GenPolicy {
            kind,
            scope,
            tier,
            priority,
            rules,
        })
}

fn ns_selector(n: u8) -> String {
    format!("{{matchLabels: {{ns: \"{}\"}}}}", NS_NAMES[n as usize % 3])
}

fn app_selector(n: u8) -> String {
    format!("{{matchLabels: {{app: {}}}}}", APPS[n as usize % 3])
}

/// The kind each policy is rendered as: a BaselineAdminNetworkPolicy
/// after the first is an AdminNetworkPolicy (there is one, `default`).
fn kinds(policies: &[GenPolicy]) -> Vec<u8> {
    let mut banp = false;
    policies
        .iter()
        .map(|p| {
            if p.kind == 4 && std::mem::replace(&mut banp, true) {
                3
            } else {
                p.kind
            }
        })
        .collect()
}

/// The name policy `i` is rendered with.
fn name_of(kind: u8, i: usize) -> String {
    if kind == 4 {
        "default".to_string()
    } else {
        format!("p{i}")
    }
}

/// A random policy set as YAML, the policies at `dry_run` positions
/// annotated.
fn render(policies: &[GenPolicy], dry_run: &[bool]) -> String {
    let mut out = String::new();
    for ((i, p), kind) in policies.iter().enumerate().zip(kinds(policies)) {
        let dry = dry_run.get(i).copied().unwrap_or(false);
        out += &match kind {
            0 | 1 => render_antrea(i, p, kind == 1, dry),
            2 => render_k8s(i, p, dry),
            _ => render_np(i, p, kind, dry),
        };
    }
    out
}

fn render_antrea(i: usize, p: &GenPolicy, namespaced: bool, dry: bool) -> String {
    let tier = ["securityops", "application", "baseline"][p.tier as usize];
    let ns = NS_NAMES[p.scope as usize % 3];
    let applied = match (p.scope, namespaced) {
        (0..=2, false) => format!("[{{namespaceSelector: {}}}]", ns_selector(p.scope)),
        (3..=5, _) => format!("[{{podSelector: {}}}]", app_selector(p.scope)),
        (7, false) => "[{nodeSelector: {}}]".to_string(),
        _ => "[{podSelector: {}}]".to_string(),
    };
    let (api_kind, namespace) = if namespaced {
        ("NetworkPolicy", Some(ns))
    } else {
        ("ClusterNetworkPolicy", None)
    };
    let mut out = format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: {api_kind}\n{}spec:\n  priority: {}\n  tier: {tier}\n  appliedTo: {applied}\n",
        metadata(&format!("p{i}"), namespace, dry),
        p.priority + 1
    );
    for egress in [false, true] {
        let rules: Vec<&GenRule> = p.rules.iter().filter(|r| r.egress == egress).collect();
        if rules.is_empty() {
            continue;
        }
        out += if egress {
            "  egress:\n"
        } else {
            "  ingress:\n"
        };
        for r in rules {
            let mut action = ["Allow", "Drop", "Reject", "Pass"][r.action as usize];
            if tier == "baseline" && action == "Pass" {
                action = "Allow";
            }
            out += &format!("  - action: {action}\n    enableLogging: {}\n", r.logged);
            let peer = match r.peer {
                0..=2 => Some(format!("{{namespaceSelector: {}}}", ns_selector(r.peer))),
                3..=5 => Some(format!(
                    "{{podSelector: {}, namespaceSelector: {{}}}}",
                    app_selector(r.peer)
                )),
                6 => Some("{ipBlock: {cidr: 10.0.1.0/24, except: [10.0.1.2/32]}}".to_string()),
                _ => None,
            };
            if let Some(peer) = peer {
                out += &format!("    {}: [{peer}]\n", if egress { "to" } else { "from" });
            }
            out += match r.port {
                1 => "    ports: [{protocol: TCP, port: 80}]\n",
                2 => "    ports: [{protocol: UDP, port: 53}]\n",
                3 => "    ports: [{protocol: TCP, port: 80, endPort: 81}]\n",
                _ => "",
            };
        }
    }
    out + "---\n"
}

fn render_k8s(i: usize, p: &GenPolicy, dry: bool) -> String {
    let ns = NS_NAMES[p.scope as usize % 3];
    let selector = match p.scope {
        3..=5 => app_selector(p.scope),
        _ => "{}".to_string(),
    };
    let mut types = Vec::new();
    let mut out = String::new();
    for egress in [false, true] {
        let rules: Vec<&GenRule> = p.rules.iter().filter(|r| r.egress == egress).collect();
        if rules.is_empty() {
            // Ingress without rules: a deny-all, a third of the time.
            if !egress && p.tier == 0 {
                types.push("Ingress");
            }
            continue;
        }
        types.push(if egress { "Egress" } else { "Ingress" });
        out += if egress {
            "  egress:\n"
        } else {
            "  ingress:\n"
        };
        for r in rules {
            let peer = match r.peer {
                0..=2 => Some(format!("{{namespaceSelector: {}}}", ns_selector(r.peer))),
                3..=5 => Some(format!("{{podSelector: {}}}", app_selector(r.peer))),
                6 => Some("{ipBlock: {cidr: 10.0.1.0/24, except: [10.0.1.2/32]}}".to_string()),
                _ => None,
            };
            let mut fields: Vec<String> = peer
                .map(|peer| format!("{}: [{peer}]", if egress { "to" } else { "from" }))
                .into_iter()
                .collect();
            fields.extend(
                match r.port {
                    1 => Some("ports: [{protocol: TCP, port: 80}]"),
                    2 => Some("ports: [{protocol: UDP, port: 53}]"),
                    3 => Some("ports: [{protocol: TCP, port: 80, endPort: 81}]"),
                    _ => None,
                }
                .map(str::to_string),
            );
            out += &format!("  - {{{}}}\n", fields.join(", "));
        }
    }
    if types.is_empty() {
        types.push("Ingress");
    }
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n{}spec:\n  podSelector: {selector}\n  policyTypes: [{}]\n{out}---\n",
        metadata(&format!("p{i}"), Some(ns), dry),
        types.join(", ")
    )
}

fn render_np(i: usize, p: &GenPolicy, kind: u8, dry: bool) -> String {
    let subject = match p.scope {
        3..=5 => format!(
            "{{pods: {{namespaceSelector: {{}}, podSelector: {}}}}}",
            app_selector(p.scope)
        ),
        6 | 7 => "{namespaces: {}}".to_string(),
        _ => format!("{{namespaces: {}}}", ns_selector(p.scope)),
    };
    let baseline_cnp = kind == 5 && p.tier == 2;
    let (api, api_kind, head) = match kind {
        3 => (
            "v1alpha1",
            "AdminNetworkPolicy",
            format!("  priority: {}\n", i),
        ),
        4 => ("v1alpha1", "BaselineAdminNetworkPolicy", String::new()),
        _ => (
            "v1alpha2",
            "ClusterNetworkPolicy",
            format!(
                "  tier: {}\n  priority: {}\n",
                if baseline_cnp { "Baseline" } else { "Admin" },
                p.priority
            ),
        ),
    };
    let name = name_of(kind, i);
    let mut out = format!(
        "apiVersion: policy.networking.k8s.io/{api}\nkind: {api_kind}\n{}spec:\n{head}  subject: {subject}\n",
        metadata(&name, None, dry)
    );
    for egress in [false, true] {
        let rules: Vec<&GenRule> = p.rules.iter().filter(|r| r.egress == egress).collect();
        if rules.is_empty() {
            continue;
        }
        out += if egress {
            "  egress:\n"
        } else {
            "  ingress:\n"
        };
        for r in rules {
            let actions: &[&str] = match kind {
                3 => &["Allow", "Deny", "Pass"],
                4 => &["Allow", "Deny"],
                _ if baseline_cnp => &["Accept", "Deny"],
                _ => &["Accept", "Deny", "Pass"],
            };
            let action = actions[r.action as usize % actions.len()];
            let peer = match r.peer {
                0..=2 => format!("{{namespaces: {}}}", ns_selector(r.peer)),
                3..=5 => format!(
                    "{{pods: {{namespaceSelector: {{}}, podSelector: {}}}}}",
                    app_selector(r.peer)
                ),
                6 if egress => "{networks: [10.0.1.0/24]}".to_string(),
                _ => "{namespaces: {}}".to_string(),
            };
            out += &format!(
                "  - action: {action}\n    {}: [{peer}]\n",
                if egress { "to" } else { "from" }
            );
            let (tcp80, udp53) = if kind == 5 {
                (
                    "    protocols: [{tcp: {destinationPort: {number: 80}}}]\n",
                    "    protocols: [{udp: {destinationPort: {number: 53}}}]\n",
                )
            } else {
                (
                    "    ports: [{portNumber: {protocol: TCP, port: 80}}]\n",
                    "    ports: [{portNumber: {protocol: UDP, port: 53}}]\n",
                )
            };
            out += match r.port {
                1 | 3 => tcp80,
                2 => udp53,
                _ => "",
            };
        }
    }
    out + "---\n"
}

/// The universe's flows: between every two of the nine Pods, the Node and
/// an outside address, on TCP 80 and 81, UDP 53 and ICMP echo; the Node's
/// side named as its hook names it.
fn flows() -> Vec<Flow> {
    let node: IpAddr = NODE_IP.parse().unwrap();
    let mut addresses: Vec<IpAddr> = (0..9).map(|i| ip(i / 3, i % 3)).collect();
    addresses.extend([node, "192.0.2.9".parse().unwrap()]);
    let transports = [
        Transport::Tcp {
            src_port: 40000,
            dst_port: 80,
        },
        Transport::Tcp {
            src_port: 40000,
            dst_port: 81,
        },
        Transport::Udp {
            src_port: 40000,
            dst_port: 53,
        },
        Transport::Icmp {
            icmp_type: 8,
            icmp_code: 0,
        },
    ];
    let mut out = Vec::new();
    for &src in &addresses {
        for &dst in addresses.iter().filter(|&&d| d != src) {
            let local = if dst == node {
                Some(LocalSide::Destination)
            } else if src == node {
                Some(LocalSide::Source)
            } else {
                None
            };
            for transport in transports {
                out.push(Flow {
                    src,
                    dst,
                    transport,
                    local,
                });
            }
        }
    }
    out
}

/// What identifies a direction's outcome apart from ranks (which count
/// dry-run rules too) and the dry-run mark: outcome, deciding rule and
/// passing rule by policy, name, direction and action.
fn identity(d: &DirectionDecision) -> String {
    let rule = |r: &crate::ruleset::RuleRef| {
        format!(
            "{} {:?} {:?} {} {:?}",
            r.policy, r.name, r.direction, r.index, r.action
        )
    };
    format!(
        "{:?} {:?} {:?} {:?}",
        d.endpoint,
        std::mem::discriminant(&d.outcome),
        d.rule().map(|r| rule(r)),
        d.passed_by.as_deref().map(rule)
    )
}

/// The three rulesets of a random case: with the `dry_run` policies
/// annotated, without them, and with every policy enforced (promoted).
fn three(policies: &[GenPolicy], dry_run: &[bool]) -> Option<[Ruleset; 3]> {
    // The policies without the dry-run ones, named and kinded as in the
    // full list.
    let without: String = render(policies, dry_run)
        .split("---\n")
        .filter(|doc| !doc.contains(DRY_RUN_ANNOTATION))
        .map(|doc| format!("{doc}---\n"))
        .collect();
    let yamls = [render(policies, dry_run), without, render(policies, &[])];
    let mut out = Vec::new();
    for yaml in yamls {
        let snapshot = snapshot(&format!("{}{yaml}", inventory(["", "", ""])));
        if !crate::validate::validate(&snapshot).is_empty() {
            return None;
        }
        out.push(compile(
            &snapshot,
            &LocalNode {
                name: "node1".into(),
                ..Default::default()
            },
        ));
    }
    out.try_into().ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// For random policies of every kind, some of them in dry-run: on
    /// every flow of the universe, the enforced outcome (verdict, deciding
    /// and passing rules, L7, whether the key alone decided, the audited
    /// directions) is that of the ruleset without the dry-run policies;
    /// and the dry-run outcome is the enforced outcome of the ruleset with
    /// every policy enforced, a change being reported exactly where the
    /// two verdicts differ, attributed to a dry-run policy.
    #[test]
    fn dry_run_never_changes_enforcement_and_predicts_promotion(
        policies in proptest::collection::vec(gen_policy(), 1..5),
        dry_run in proptest::collection::vec(any::<bool>(), 5),
    ) {
        let Some([with, without, promoted]) = three(&policies, &dry_run) else {
            return Err(TestCaseError::reject("invalid policies"));
        };
        let dry_names: Vec<String> = kinds(&policies)
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| dry_run[i])
            .map(|(i, kind)| name_of(kind, i))
            .collect();
        for flow in flows() {
            let got = with.classify(&flow, &NoFqdn);
            let want = without.classify(&flow, &NoFqdn);
            prop_assert_eq!(got.verdict, want.verdict, "{:?}", flow);
            prop_assert_eq!(identity(&got.egress), identity(&want.egress), "{:?}", flow);
            prop_assert_eq!(identity(&got.ingress), identity(&want.ingress), "{:?}", flow);
            prop_assert_eq!(got.l7.len(), want.l7.len());
            prop_assert_eq!(got.key_only, want.key_only, "{:?}", flow);
            let audited = |rs: &Ruleset, d: &Decision| {
                crate::audit::Subject::of(d, d.verdict, rs)
                    .into_iter()
                    .map(|s| (s.decider, s.direction, s.verdict, s.applied_to))
                    .collect::<Vec<_>>()
            };
            prop_assert_eq!(audited(&with, &got), audited(&without, &want));

            let all = promoted.classify(&flow, &NoFqdn);
            match &got.dry_run {
                None => {
                    prop_assert_eq!(all.verdict, got.verdict, "{:?}", flow);
                }
                Some(dry) => {
                    prop_assert_eq!(dry.verdict, all.verdict, "{:?}", flow);
                    prop_assert_eq!(identity(&dry.egress), identity(&all.egress), "{:?}", flow);
                    prop_assert_eq!(identity(&dry.ingress), identity(&all.ingress), "{:?}", flow);
                    match dry.change(&got) {
                        None => prop_assert_eq!(dry.verdict, got.verdict),
                        Some(change) => {
                            prop_assert_ne!(change.verdict, got.verdict);
                            let name = &change.cause.policy().name;
                            prop_assert!(dry_names.contains(name), "{} {:?}", name, flow);
                        }
                    }
                }
            }
        }
    }
}

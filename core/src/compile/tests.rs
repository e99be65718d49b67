//! Semantics of compile + classify, one test per rule of the spec, and a
//! Kubernetes-e2e-style truth table over Namespaces x, y, z × Pods a, b, c.

use std::net::IpAddr;

use crate::fqdn::{NoFqdn, StaticFqdn};
use crate::model::Snapshot;
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::ruleset::{Outcome, Ruleset};

use super::{compile, LocalNode};

const NAMESPACES: [&str; 3] = ["x", "y", "z"];
const PODS: [&str; 3] = ["a", "b", "c"];
const NODE_IP: &str = "10.255.0.1";

/// Namespaces x, y, z (labels ns=<name>, org as given) with Pods a, b, c
/// (label app=<name>) at 10.0.<ns>.<pod+1>, named port `http` = 80.
fn inventory(orgs: [&str; 3]) -> String {
    let mut out = String::new();
    for (n, ns) in NAMESPACES.iter().enumerate() {
        let org = if orgs[n].is_empty() {
            String::new()
        } else {
            format!("\n    org: {}", orgs[n])
        };
        out.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    ns: \"{ns}\"{org}\n---\n"
        ));
        for (p, pod) in PODS.iter().enumerate() {
            out.push_str(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: {ns}\n  labels:\n    app: {pod}\nspec:\n  serviceAccountName: sa-{pod}\n  containers:\n  - name: main\n    ports:\n    - name: http\n      containerPort: 80\nstatus:\n  podIP: 10.0.{n}.{}\n---\n",
                p + 1
            ));
        }
    }
    out.push_str(&format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: node1\n  labels:\n    kubernetes.io/os: linux\nstatus:\n  addresses:\n  - type: InternalIP\n    address: {NODE_IP}\n---\n"
    ));
    out
}

fn snapshot(yaml: &str) -> Snapshot {
    let (objects, problems) = crate::decode::parse_documents("test.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    Snapshot { objects }
}

fn ruleset_with(orgs: [&str; 3], policies: &str) -> Ruleset {
    let yaml = format!("{}{}", inventory(orgs), policies);
    compile(
        &snapshot(&yaml),
        &LocalNode {
            name: "node1".into(),
            ..Default::default()
        },
    )
}

fn ruleset(policies: &str) -> Ruleset {
    ruleset_with(["", "", ""], policies)
}

fn ip(ns: usize, pod: usize) -> IpAddr {
    format!("10.0.{ns}.{}", pod + 1).parse().unwrap()
}

fn tcp(src: IpAddr, dst: IpAddr, port: u16) -> Flow {
    Flow {
        src,
        dst,
        transport: Transport::Tcp {
            src_port: 40000,
            dst_port: port,
        },
        local: None,
    }
}

fn verdict(rs: &Ruleset, src: IpAddr, dst: IpAddr, port: u16) -> Verdict {
    rs.classify(&tcp(src, dst, port), &NoFqdn).verdict
}

/// Asserts the 9×9 allowed matrix on TCP 80 (the diagonal is skipped: a Pod's
/// traffic to itself never leaves it).
fn assert_matrix(rs: &Ruleset, expect: impl Fn((usize, usize), (usize, usize)) -> bool) {
    let mut wrong = Vec::new();
    let cells = (0..9).map(|i| (i / 3, i % 3));
    for from in cells.clone() {
        for to in cells.clone() {
            if from == to {
                continue;
            }
            let got = verdict(rs, ip(from.0, from.1), ip(to.0, to.1), 80) == Verdict::Allow;
            let want = expect(from, to);
            if got != want {
                let show = |(n, p): (usize, usize)| format!("{}/{}", NAMESPACES[n], PODS[p]);
                let word = |b: bool| if b { "allowed" } else { "denied" };
                wrong.push(format!(
                    "{} -> {}: got {}, want {}",
                    show(from),
                    show(to),
                    word(got),
                    word(want)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "matrix mismatches:\n{}", wrong.join("\n"));
}

const X: usize = 0;
const Y: usize = 1;
const Z: usize = 2;
const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

#[test]
fn truth_no_policies_allows_everything() {
    assert_matrix(&ruleset(""), |_, _| true);
}

#[test]
fn truth_k8s_default_deny_ingress_in_namespace() {
    let rs = ruleset(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: x}\nspec:\n  podSelector: {}\n",
    );
    assert_matrix(&rs, |_, to| to.0 != X);
}

#[test]
fn truth_k8s_allow_same_namespace_to_one_pod() {
    let rs = ruleset(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: a}}\n  ingress:\n  - from:\n    - podSelector: {}\n",
    );
    assert_matrix(&rs, |from, to| to != (X, A) || from.0 == X);
}

#[test]
fn truth_k8s_allow_from_other_namespace_by_selector() {
    let rs = ruleset(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: \"y\"}}\n      podSelector: {matchLabels: {app: b}}\n",
    );
    assert_matrix(&rs, |from, to| to != (X, A) || from == (Y, B));
}

#[test]
fn truth_k8s_egress_deny_all() {
    let rs = ruleset(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: y}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n",
    );
    assert_matrix(&rs, |from, _| from.0 != Y);
}

#[test]
fn truth_acnp_drop_between_labels_cluster_wide() {
    let rs = ruleset(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p}\nspec:\n  priority: 1\n  appliedTo: [{podSelector: {matchLabels: {app: a}}}]\n  ingress:\n  - action: Drop\n    from: [{podSelector: {matchLabels: {app: b}}}]\n",
    );
    assert_matrix(&rs, |from, to| !(to.1 == A && from.1 == B));
}

#[test]
fn truth_strict_namespace_isolation_with_pass() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: strict-ns-isolation}
spec:
  priority: 5
  tier: securityops
  appliedTo:
  - namespaceSelector:
      matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}
  ingress:
  - action: Pass
    from: [{namespaces: {match: Self}}]
  - action: Drop
    from: [{namespaceSelector: {}}]
"#,
    );
    assert_matrix(&rs, |from, to| from.0 == to.0);
}

#[test]
fn truth_allow_self_namespace_then_drop() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-self-ns}
spec:
  priority: 1
  tier: platform
  appliedTo: [{namespaceSelector: {}}]
  ingress:
  - action: Allow
    from: [{namespaces: {match: Self}}]
  - action: Drop
"#,
    );
    assert_matrix(&rs, |from, to| from.0 == to.0);
}

#[test]
fn truth_deny_a_to_b_in_own_namespace_over_allow_self() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-self-ns}
spec:
  priority: 1
  tier: platform
  appliedTo: [{namespaceSelector: {}}]
  ingress:
  - action: Allow
    from: [{namespaces: {match: Self}}]
  - action: Drop
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: deny-self-ns-a-to-b}
spec:
  priority: 1
  tier: securityops
  appliedTo:
  - namespaceSelector: {}
    podSelector: {matchLabels: {app: b}}
  ingress:
  - action: Drop
    from:
    - namespaces: {match: Self}
      podSelector: {matchLabels: {app: a}}
"#,
    );
    assert_matrix(&rs, |from, to| {
        from.0 == to.0 && !(from.1 == A && to.1 == B)
    });
}

#[test]
fn truth_baseline_deny_lifted_by_k8s_policy() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: baseline-deny-z}
spec:
  priority: 1
  tier: baseline
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "z"}}}]
  ingress:
  - action: Drop
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-from-x, namespace: z}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "x"}}}]
"#,
    );
    // z/a: isolated by the K8s policy, allowed from x only. z/b, z/c: the
    // baseline drop applies (no K8s policy selects them).
    assert_matrix(&rs, |from, to| to.0 != Z || (to.1 == A && from.0 == X));
}

#[test]
fn truth_baseline_allow_cannot_undo_k8s_isolation() {
    let rs = ruleset(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: isolate, namespace: z}
spec:
  podSelector: {matchLabels: {app: a}}
  policyTypes: [Ingress]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: baseline-allow}
spec:
  priority: 1
  tier: baseline
  appliedTo: [{namespaceSelector: {}}]
  ingress:
  - action: Allow
"#,
    );
    assert_matrix(&rs, |_, to| to != (Z, A));
    let d = ruleset_k8s_isolation_decision(&rs);
    assert_eq!(d, Outcome::K8sDefaultDeny);
}

fn ruleset_k8s_isolation_decision(rs: &Ruleset) -> Outcome {
    rs.classify(&tcp(ip(X, A), ip(Z, A), 80), &NoFqdn)
        .ingress
        .outcome
}

#[test]
fn truth_tier_order_emergency_allow_beats_securityops_drop() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: drop-to-z}
spec:
  priority: 1
  tier: securityops
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "z"}}}]
  ingress:
  - action: Drop
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-x-to-z}
spec:
  priority: 100
  tier: emergency
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "z"}}}]
  ingress:
  - action: Allow
    from: [{namespaceSelector: {matchLabels: {ns: "x"}}}]
"#,
    );
    assert_matrix(&rs, |from, to| to.0 != Z || from.0 == X);
}

#[test]
fn truth_policy_priority_and_acnp_annp_interleave() {
    // ANNP priority 1 (Drop from y) beats ACNP priority 2 (Allow from y)
    // inside the same Tier, whatever the kind.
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-y}
spec:
  priority: 2
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "x"}}}]
  ingress:
  - action: Allow
    from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
  - action: Drop
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: drop-y, namespace: x}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {app: a}}}]
  ingress:
  - action: Drop
    from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
"#,
    );
    assert_matrix(&rs, |from, to| to.0 != X || (from.0 == Y && to.1 != A));
}

#[test]
fn truth_pass_skips_to_k8s_then_baseline() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: pass-from-y}
spec:
  priority: 1
  tier: securityops
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "x"}}}]
  ingress:
  - action: Pass
    from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: app-drop-x}
spec:
  priority: 1
  tier: application
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "x"}}}]
  ingress:
  - action: Drop
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: baseline-drop-yc}
spec:
  priority: 1
  tier: baseline
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "x"}}}]
  ingress:
  - action: Drop
    from: [{podSelector: {matchLabels: {app: c}}}]
"#,
    );
    // y → x passes the application drop; y/c then meets the baseline drop.
    assert_matrix(&rs, |from, to| to.0 != X || (from.0 == Y && from.1 != C));
}

#[test]
fn truth_same_labels_isolates_tenants() {
    let rs = ruleset_with(
        ["acc", "acc", "sales"],
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: isolation-based-on-org}
spec:
  priority: 1
  tier: securityops
  appliedTo: [{namespaceSelector: {}}]
  ingress:
  - action: Allow
    from: [{namespaces: {sameLabels: [org]}}]
  - action: Drop
"#,
    );
    assert_matrix(&rs, |from, to| (from.0 == Z) == (to.0 == Z));
}

#[test]
fn truth_same_labels_is_a_no_op_without_the_keys() {
    let rs = ruleset_with(
        ["acc", "acc", ""],
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: isolation-based-on-org}
spec:
  priority: 1
  appliedTo: [{namespaceSelector: {}}]
  ingress:
  - action: Allow
    from: [{namespaces: {sameLabels: [org]}}]
  - action: Drop
"#,
    );
    // z has no org label: the policy does nothing for z's Pods.
    assert_matrix(&rs, |from, to| to.0 == Z || from.0 != Z);
}

#[test]
fn truth_annp_lone_pod_selector_stays_in_its_namespace() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: p, namespace: y}
spec:
  priority: 1
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Allow
    from: [{podSelector: {matchLabels: {app: a}}}]
  - action: Drop
"#,
    );
    assert_matrix(&rs, |from, to| to.0 != Y || from == (Y, A));
}

#[test]
fn truth_cluster_group_applied_to_and_peer() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: z-c}
spec:
  podSelector: {matchLabels: {app: c}}
  namespaceSelector: {matchLabels: {ns: "z"}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: x-all}
spec:
  namespaceSelector: {matchLabels: {ns: "x"}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: parent}
spec:
  childGroups: [x-all]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 1
  appliedTo: [{group: z-c}]
  ingress:
  - action: Allow
    from: [{group: parent}]
  - action: Drop
"#,
    );
    assert_matrix(&rs, |from, to| to != (Z, C) || from.0 == X);
}

#[test]
fn truth_service_account_peer() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 1
  appliedTo: [{serviceAccount: {name: sa-b, namespace: x}}]
  egress:
  - action: Drop
    to: [{serviceAccount: {name: sa-c, namespace: y}}]
"#,
    );
    assert_matrix(&rs, |from, to| !(from == (X, B) && to == (Y, C)));
}

#[test]
fn truth_ip_block_except_falls_through() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 1
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "x"}}}]
  ingress:
  - action: Drop
    from:
    - ipBlock:
        cidr: 10.0.1.0/24
        except: [10.0.1.2/32]
"#,
    );
    assert_matrix(&rs, |from, to| to.0 != X || from.0 != Y || from.1 == B);
}

#[test]
fn truth_rule_level_applied_to() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: acnp-appliedto-per-rule}
spec:
  priority: 1
  ingress:
  - action: Drop
    appliedTo: [{podSelector: {matchLabels: {app: a}}}]
    from: [{podSelector: {matchLabels: {app: b}}}]
  - action: Drop
    appliedTo: [{podSelector: {matchLabels: {app: b}}}]
    from: [{podSelector: {matchLabels: {app: c}}}]
"#,
    );
    assert_matrix(&rs, |from, to| {
        !((to.1 == A && from.1 == B) || (to.1 == B && from.1 == C))
    });
}

// ---------------------------------------------------------------- details

fn one_policy(spec_rules: &str) -> Ruleset {
    ruleset(&format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {{name: p}}\nspec:\n  priority: 1\n  appliedTo: [{{podSelector: {{matchLabels: {{app: a}}}}}}]\n{spec_rules}"
    ))
}

#[test]
fn ports_ranges_and_named_ports() {
    let rs = one_policy(
        "  ingress:\n  - action: Allow\n    ports:\n    - {protocol: TCP, port: 8080, endPort: 9000}\n    - {port: http}\n  - action: Drop\n",
    );
    let (src, dst) = (ip(Y, B), ip(X, A));
    assert_eq!(
        verdict(&rs, src, dst, 80),
        Verdict::Allow,
        "named port http=80"
    );
    assert_eq!(verdict(&rs, src, dst, 8080), Verdict::Allow);
    assert_eq!(verdict(&rs, src, dst, 8500), Verdict::Allow);
    assert_eq!(verdict(&rs, src, dst, 9000), Verdict::Allow);
    assert_eq!(verdict(&rs, src, dst, 9001), Verdict::Drop);
    assert_eq!(verdict(&rs, src, dst, 443), Verdict::Drop);
    let udp = Flow {
        src,
        dst,
        transport: Transport::Udp {
            src_port: 1,
            dst_port: 8080,
        },
        local: None,
    };
    assert_eq!(rs.classify(&udp, &NoFqdn).verdict, Verdict::Drop);
}

#[test]
fn protocol_without_port_matches_every_port_of_it() {
    let rs = one_policy("  ingress:\n  - action: Reject\n    ports: [{protocol: UDP}]\n");
    let (src, dst) = (ip(Y, B), ip(X, A));
    let udp = |port| Flow {
        src,
        dst,
        transport: Transport::Udp {
            src_port: 1,
            dst_port: port,
        },
        local: None,
    };
    assert_eq!(rs.classify(&udp(53), &NoFqdn).verdict, Verdict::Reject);
    assert_eq!(rs.classify(&udp(9999), &NoFqdn).verdict, Verdict::Reject);
    assert_eq!(verdict(&rs, src, dst, 53), Verdict::Allow);
}

#[test]
fn icmp_type_and_code() {
    let rs = one_policy(
        "  ingress:\n  - action: Drop\n    protocols:\n    - icmp: {icmpType: 8, icmpCode: 0}\n",
    );
    let icmp = |t, c| Flow {
        src: ip(Y, B),
        dst: ip(X, A),
        transport: Transport::Icmp {
            icmp_type: t,
            icmp_code: c,
        },
        local: None,
    };
    assert_eq!(rs.classify(&icmp(8, 0), &NoFqdn).verdict, Verdict::Drop);
    assert_eq!(rs.classify(&icmp(8, 1), &NoFqdn).verdict, Verdict::Allow);
    assert_eq!(rs.classify(&icmp(0, 0), &NoFqdn).verdict, Verdict::Allow);
    assert_eq!(verdict(&rs, ip(Y, B), ip(X, A), 80), Verdict::Allow);
}

#[test]
fn fqdn_peers_match_learned_addresses_only() {
    let rs = one_policy(
        "  egress:\n  - action: Allow\n    to: [{fqdn: \"*foobar.com\"}]\n    ports: [{protocol: TCP, port: 8080}]\n  - action: Drop\n",
    );
    assert_eq!(rs.fqdn_patterns().len(), 1);
    let server: IpAddr = "203.0.113.7".parse().unwrap();
    let learned = StaticFqdn(vec![("test.uswest.FOOBAR.com.".into(), server)]);
    let flow = tcp(ip(X, A), server, 8080);
    assert_eq!(rs.classify(&flow, &learned).verdict, Verdict::Allow);
    assert_eq!(rs.classify(&flow, &NoFqdn).verdict, Verdict::Drop);
    let other = StaticFqdn(vec![("foobar.org".into(), server)]);
    assert_eq!(rs.classify(&flow, &other).verdict, Verdict::Drop);
    let wrong_port = tcp(ip(X, A), server, 80);
    assert_eq!(rs.classify(&wrong_port, &learned).verdict, Verdict::Drop);
}

#[test]
fn fqdn_selectors_are_listed_with_every_policy_that_uses_them() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: cluster}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {app: a}}}]
  egress:
  - action: Allow
    to: [{fqdn: shared.test}, {fqdn: "*.wild.test"}]
  - action: Drop
    to: [{fqdn: shared.test}]
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: admin, namespace: x}
spec:
  priority: 1
  appliedTo: [{podSelector: {}}]
  egress:
  - action: Allow
    to: [{fqdn: shared.test}, {fqdn: own.test}]
"#,
    );
    let owners: Vec<(String, &str)> = rs
        .fqdn_owners()
        .into_iter()
        .map(|(owner, pattern)| (owner, pattern.as_str()))
        .collect();
    assert_eq!(
        owners,
        [
            (
                "AntreaClusterNetworkPolicy:cluster".to_string(),
                "shared.test"
            ),
            (
                "AntreaClusterNetworkPolicy:cluster".to_string(),
                "*.wild.test"
            ),
            ("AntreaNetworkPolicy:x/admin".to_string(), "shared.test"),
            ("AntreaNetworkPolicy:x/admin".to_string(), "own.test"),
        ]
    );
}

#[test]
fn node_policies_apply_to_the_local_node() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: node-policy}
spec:
  priority: 5
  tier: securityops
  appliedTo:
  - nodeSelector:
      matchExpressions: [{key: kubernetes.io/os, operator: Exists}]
  ingress:
  - action: Allow
    ports: [{protocol: TCP, port: 6443}]
    from:
    - ipBlock: {cidr: 10.0.0.0/24}
    - nodeSelector: {}
  - action: Drop
"#,
    );
    let node: IpAddr = NODE_IP.parse().unwrap();
    assert!(rs.enforced().node_ingress);
    assert!(!rs.enforced().node_egress);
    assert!(rs.enforced().endpoints.is_empty());
    assert_eq!(verdict(&rs, ip(X, B), node, 6443), Verdict::Allow);
    assert_eq!(verdict(&rs, ip(Y, B), node, 6443), Verdict::Drop);
    assert_eq!(verdict(&rs, ip(X, B), node, 22), Verdict::Drop);
    // Node to its own Pods is always allowed.
    assert_eq!(verdict(&rs, node, ip(Y, B), 80), Verdict::Allow);
}

#[test]
fn to_services_match_cluster_ip_and_port() {
    let rs = ruleset(
        r#"apiVersion: v1
kind: Service
metadata: {name: svc, namespace: y}
spec:
  clusterIP: 10.96.0.10
  ports: [{port: 53, protocol: UDP}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {app: a}}}]
  egress:
  - action: Drop
    toServices: [{name: svc, namespace: y}]
"#,
    );
    let udp = |port| Flow {
        src: ip(X, A),
        dst: "10.96.0.10".parse().unwrap(),
        transport: Transport::Udp {
            src_port: 1,
            dst_port: port,
        },
        local: None,
    };
    assert_eq!(rs.classify(&udp(53), &NoFqdn).verdict, Verdict::Drop);
    assert_eq!(rs.classify(&udp(54), &NoFqdn).verdict, Verdict::Allow);
}

/// A namespaced policy's `toServices` without a namespace names a Service
/// of the policy's own Namespace (Antrea's controller reads it so); a
/// ClusterSet reference selects nothing here.
#[test]
fn to_services_default_to_the_policys_namespace_and_skip_cluster_set() {
    let rs = ruleset(&format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: svc, namespace: {x}}}
spec:
  clusterIP: 10.96.0.10
  ports: [{{port: 53, protocol: UDP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: svc, namespace: {y}}}
spec:
  clusterIP: 10.96.0.11
  ports: [{{port: 53, protocol: UDP}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {{name: p, namespace: {x}}}
spec:
  priority: 1
  appliedTo: [{{podSelector: {{matchLabels: {{app: a}}}}}}]
  egress:
  - action: Drop
    toServices: [{{name: svc}}, {{name: svc, namespace: {y}, scope: ClusterSet}}]
"#,
        x = NAMESPACES[X],
        y = NAMESPACES[Y],
    ));
    let udp = |dst: &str| Flow {
        src: ip(X, A),
        dst: dst.parse().unwrap(),
        transport: Transport::Udp {
            src_port: 1,
            dst_port: 53,
        },
        local: None,
    };
    assert_eq!(
        rs.classify(&udp("10.96.0.10"), &NoFqdn).verdict,
        Verdict::Drop
    );
    assert_eq!(
        rs.classify(&udp("10.96.0.11"), &NoFqdn).verdict,
        Verdict::Allow
    );
}

#[test]
fn node_port_service_applied_to() {
    let rs = ruleset(
        r#"apiVersion: v1
kind: Service
metadata: {name: svc-1, namespace: ns-1}
spec:
  type: NodePort
  ports: [{port: 80, nodePort: 30080}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 5
  appliedTo: [{service: {name: svc-1, namespace: ns-1}}]
  ingress:
  - action: Drop
    from: [{ipBlock: {cidr: 1.1.1.0/24}}]
"#,
    );
    let node: IpAddr = NODE_IP.parse().unwrap();
    let outside: IpAddr = "1.1.1.9".parse().unwrap();
    assert_eq!(verdict(&rs, outside, node, 30080), Verdict::Drop);
    assert_eq!(verdict(&rs, outside, node, 22), Verdict::Allow);
}

#[test]
fn decisions_name_the_rule_and_generated_names() {
    let rs =
        one_policy("  ingress:\n  - action: Reject\n    enableLogging: true\n    logLabel: lbl\n");
    let d = rs.classify(&tcp(ip(Y, B), ip(X, A), 80), &NoFqdn);
    assert_eq!(d.verdict, Verdict::Reject);
    let rule = d.ingress.rule().expect("rule");
    assert_eq!(rule.policy.to_string(), "AntreaClusterNetworkPolicy:p");
    assert_eq!(rule.tier.as_deref(), Some("application"));
    assert!(rule.name.as_deref().unwrap().starts_with("ingress-reject-"));
    assert!(rule.enable_logging);
    assert_eq!(rule.log_label.as_deref(), Some("lbl"));
    assert_eq!(d.egress.outcome, Outcome::NotEnforced);
    assert_eq!(d.deciding().direction, crate::model::Direction::Ingress);
}

#[test]
fn l7_rules_report_their_requirements() {
    let rs = one_policy(
        "  ingress:\n  - action: Allow\n    l7Protocols:\n    - http: {path: \"/api/v2/*\", method: GET}\n",
    );
    let d = rs.classify(&tcp(ip(Y, B), ip(X, A), 80), &NoFqdn);
    assert_eq!(d.verdict, Verdict::Allow);
    assert_eq!(d.l7.len(), 1);
    assert_eq!(
        d.l7[0][0].http.as_ref().unwrap().path.as_deref(),
        Some("/api/v2/*")
    );
}

#[test]
fn policies_are_listed_by_effective_priority() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: base}
spec: {priority: 1, tier: baseline, appliedTo: [{podSelector: {}}], ingress: [{action: Drop}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: k, namespace: x}
spec: {podSelector: {}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: app2}
spec: {priority: 2, appliedTo: [{podSelector: {}}], ingress: [{action: Drop}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: annp1, namespace: y}
spec: {priority: 1, appliedTo: [{podSelector: {}}], ingress: [{action: Drop}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: emerg}
spec: {priority: 9, tier: emergency, appliedTo: [{podSelector: {}}], ingress: [{action: Drop}]}
"#,
    );
    let order: Vec<String> = rs.policies().iter().map(|p| p.policy.to_string()).collect();
    assert_eq!(
        order,
        [
            "AntreaClusterNetworkPolicy:emerg",
            "AntreaNetworkPolicy:y/annp1",
            "AntreaClusterNetworkPolicy:app2",
            "K8sNetworkPolicy:x/k",
            "AntreaClusterNetworkPolicy:base",
        ]
    );
}

#[test]
fn enforced_lists_only_pods_with_rules() {
    let rs = one_policy("  ingress:\n  - action: Drop\n");
    let mut want: Vec<IpAddr> = (0..3).map(|n| ip(n, A)).collect();
    want.sort();
    assert_eq!(rs.enforced().endpoints, want);
    assert!(!rs.enforced().node_ingress);
}

#[test]
fn pods_on_other_nodes_are_peers_not_endpoints() {
    let yaml = format!(
        "{}apiVersion: v1\nkind: Pod\nmetadata: {{name: remote, namespace: x, labels: {{app: a}}}}\nspec: {{nodeName: node2}}\nstatus: {{podIP: 10.1.0.1}}\n---\n{}",
        inventory(["", "", ""]),
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p}\nspec:\n  priority: 1\n  appliedTo: [{podSelector: {matchLabels: {app: a}}}]\n  egress:\n  - action: Drop\n"
    );
    let rs = compile(
        &snapshot(&yaml),
        &LocalNode {
            name: "node1".into(),
            ..Default::default()
        },
    );
    let remote: IpAddr = "10.1.0.1".parse().unwrap();
    assert!(!rs.enforced().endpoints.contains(&remote));
    assert!(rs.endpoint_of(remote).is_none());
    assert_eq!(verdict(&rs, remote, ip(Y, B), 80), Verdict::Allow);
}

#[test]
fn block_index_finds_rules_of_every_prefix_length_and_family() {
    let rs = one_policy(
        r#"  ingress:
  - action: Allow
    from: [{ipBlock: {cidr: 192.0.2.128/25}}]
  - action: Reject
    from: [{ipBlock: {cidr: 192.0.2.0/24, except: [192.0.2.0/26]}}]
  - action: Drop
    from: [{ipBlock: {cidr: 192.0.0.0/16}}, {ipBlock: {cidr: "2001:db8::/32"}}]
"#,
    );
    let dst = ip(X, A);
    let v = |src: &str| verdict(&rs, src.parse().unwrap(), dst, 80);
    assert_eq!(v("192.0.2.200"), Verdict::Allow);
    assert_eq!(v("192.0.2.100"), Verdict::Reject);
    assert_eq!(
        v("192.0.2.10"),
        Verdict::Drop,
        "except falls through to the /16"
    );
    assert_eq!(v("192.0.9.9"), Verdict::Drop);
    assert_eq!(v("198.51.100.1"), Verdict::Allow);
    assert_eq!(v("2001:db8::1"), Verdict::Drop);
    assert_eq!(v("2001:db9::1"), Verdict::Allow);
}

#[test]
fn ip_block_groups_select_no_pods_in_a_namespaced_policy() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: outside, namespace: x}
spec:
  ipBlocks: [{cidr: 192.0.2.0/24}]
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  priority: 1
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Drop
    from: [{group: outside}]
"#,
    );
    assert_eq!(
        verdict(&rs, "192.0.2.9".parse().unwrap(), ip(X, A), 80),
        Verdict::Drop
    );
    assert_matrix(&rs, |_, _| true);
}

fn flow_from_port(transport: Transport) -> Flow {
    Flow {
        src: ip(Y, B),
        dst: ip(X, A),
        transport,
        local: None,
    }
}

#[test]
fn source_ports_truth_table() {
    let rs = one_policy(
        "  ingress:\n  - action: Drop\n    ports:\n    - {protocol: TCP, sourcePort: 32768, sourceEndPort: 60999}\n    - {protocol: UDP, port: 53, sourcePort: 5353}\n    - {port: http, sourcePort: 1000, sourceEndPort: 1000}\n",
    );
    let tcp = |src_port, dst_port| Transport::Tcp { src_port, dst_port };
    let udp = |src_port, dst_port| Transport::Udp { src_port, dst_port };
    let table = [
        (tcp(32768, 22), Verdict::Drop),
        (tcp(60999, 443), Verdict::Drop),
        (tcp(32767, 22), Verdict::Allow),
        (tcp(61000, 22), Verdict::Allow),
        (udp(5353, 53), Verdict::Drop),
        (udp(5353, 54), Verdict::Allow),
        (udp(5354, 53), Verdict::Allow),
        (udp(40000, 53), Verdict::Allow),
        // The named port http = 80 with source port 1000 exactly.
        (tcp(1000, 80), Verdict::Drop),
        (tcp(1001, 80), Verdict::Allow),
        (tcp(1000, 81), Verdict::Allow),
        (
            Transport::Icmp {
                icmp_type: 8,
                icmp_code: 0,
            },
            Verdict::Allow,
        ),
    ];
    for (transport, want) in table {
        let got = rs.classify(&flow_from_port(transport), &NoFqdn).verdict;
        assert_eq!(got, want, "{transport:?}");
    }
}

#[test]
fn decisions_carry_antreas_generated_names() {
    // Names from core/tests/data/antrea-rule-names/cases.json (Antrea's webhook).
    let rs = one_policy(
        "  ingress:\n  - action: Drop\n    ports: [{protocol: TCP, sourcePort: 32768, sourceEndPort: 60999}]\n  - action: Allow\n",
    );
    let named = |transport| {
        rs.classify(&flow_from_port(transport), &NoFqdn)
            .ingress
            .rule()
            .and_then(|r| r.name.clone())
    };
    assert_eq!(
        named(Transport::Tcp {
            src_port: 40000,
            dst_port: 80
        })
        .as_deref(),
        Some("ingress-drop-9df7773")
    );
    assert_eq!(
        named(Transport::Tcp {
            src_port: 1000,
            dst_port: 80
        })
        .as_deref(),
        Some("ingress-allow-216bba8")
    );
}

/// A second Node, labelled as a control-plane Node, beside `node1`.
const NODE2: &str = "apiVersion: v1\nkind: Node\nmetadata:\n  name: node2\n  labels:\n    role: control-plane\nstatus:\n  addresses:\n  - type: InternalIP\n    address: 10.255.0.2\n---\n";

#[test]
fn node_cluster_group_in_a_node_policy_truth_table() {
    // Antrea's node-policy example with the Nodes given by ClusterGroups:
    // applied to a group of Nodes (node1), allowing only a group of Nodes
    // (the control plane, node2) to reach port 10250.
    let rs = ruleset(&format!(
        r#"{NODE2}apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {{name: linux-nodes}}
spec:
  nodeSelector: {{matchLabels: {{kubernetes.io/os: linux}}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {{name: control-plane}}
spec:
  nodeSelector: {{matchLabels: {{role: control-plane}}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: kubelet-from-control-plane}}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{{group: linux-nodes}}]
  ingress:
  - action: Allow
    from: [{{group: control-plane}}]
    ports: [{{protocol: TCP, port: 10250}}]
  - action: Drop
    ports: [{{protocol: TCP, port: 10250}}]
"#
    ));
    assert!(rs.enforced().node_ingress);
    let node: IpAddr = NODE_IP.parse().unwrap();
    let control_plane: IpAddr = "10.255.0.2".parse().unwrap();
    let table = [
        (control_plane, 10250, Verdict::Allow),
        (ip(X, A), 10250, Verdict::Drop),
        ("1.2.3.4".parse().unwrap(), 10250, Verdict::Drop),
        (ip(X, A), 22, Verdict::Allow),
        (control_plane, 22, Verdict::Allow),
    ];
    for (src, port, want) in table {
        assert_eq!(verdict(&rs, src, node, port), want, "{src} -> node:{port}");
    }
    // Pods are not in a group of Nodes: their ingress is not enforced.
    assert_eq!(verdict(&rs, ip(Y, B), ip(X, A), 10250), Verdict::Allow);
}

#[test]
fn node_cluster_group_not_selecting_this_node_applies_nothing() {
    let rs = ruleset(&format!(
        "{NODE2}apiVersion: crd.antrea.io/v1beta1\nkind: ClusterGroup\nmetadata: {{name: cp}}\nspec:\n  nodeSelector: {{matchLabels: {{role: control-plane}}}}\n---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {{name: p}}\nspec:\n  priority: 5\n  appliedTo: [{{group: cp}}]\n  ingress: [{{action: Drop}}]\n"
    ));
    assert!(!rs.enforced().node_ingress);
    let node: IpAddr = NODE_IP.parse().unwrap();
    assert_eq!(verdict(&rs, ip(X, A), node, 22), Verdict::Allow);
}

/// ExternalEntities `vm-db` (role=db) in Namespace x and `vm-web` (role=web)
/// in y, and one of this Node's interfaces (`local-if`, ExternalNode node1).
const EXTERNAL_ENTITIES: &str = r#"apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: vm-db, namespace: x, labels: {role: db}}
spec:
  endpoints: [{ip: 192.168.9.10, name: eth0}, {ip: "fd09::10"}]
  externalNode: vm-1
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: vm-web, namespace: y, labels: {role: web}}
spec:
  endpoints: [{ip: 192.168.9.20}]
  externalNode: vm-2
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: local-if, namespace: x, labels: {role: host}}
spec:
  endpoints: [{ip: 10.255.0.1}]
  externalNode: node1
---
"#;

#[test]
fn external_entity_peers_truth_table() {
    let rs = ruleset(&format!(
        r#"{EXTERNAL_ENTITIES}apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {{name: db-vms-in-x}}
spec:
  externalEntitySelector: {{matchLabels: {{role: db}}}}
  namespaceSelector: {{matchLabels: {{ns: x}}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: p}}
spec:
  priority: 1
  appliedTo: [{{podSelector: {{matchLabels: {{app: a}}}}}}]
  ingress:
  - action: Allow
    from: [{{group: db-vms-in-x}}]
    ports: [{{protocol: TCP, port: 5432}}]
  - action: Allow
    from: [{{externalEntitySelector: {{matchLabels: {{role: web}}}}}}]
    ports: [{{protocol: TCP, port: 80}}]
  - action: Drop
"#
    ));
    let dst = ip(X, A);
    let db: IpAddr = "192.168.9.10".parse().unwrap();
    let db6: IpAddr = "fd09::10".parse().unwrap();
    let web: IpAddr = "192.168.9.20".parse().unwrap();
    let table = [
        (db, 5432, Verdict::Allow),
        (db6, 5432, Verdict::Allow),
        (web, 5432, Verdict::Drop),
        (web, 80, Verdict::Allow),
        (db, 80, Verdict::Drop),
        // Pods are not ExternalEntities, even with matching labels.
        (ip(Y, B), 80, Verdict::Drop),
    ];
    for (src, port, want) in table {
        assert_eq!(verdict(&rs, src, dst, port), want, "{src} -> {port}");
    }
}

#[test]
fn external_entity_selector_in_a_namespaced_policy_stays_in_its_namespace() {
    let rs = ruleset(&format!(
        "{EXTERNAL_ENTITIES}apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {{name: p, namespace: x}}\nspec:\n  priority: 1\n  appliedTo: [{{podSelector: {{matchLabels: {{app: a}}}}}}]\n  ingress:\n  - action: Allow\n    from: [{{externalEntitySelector: {{}}}}]\n  - action: Drop\n"
    ));
    let dst = ip(X, A);
    assert_eq!(
        verdict(&rs, "192.168.9.10".parse().unwrap(), dst, 80),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&rs, "192.168.9.20".parse().unwrap(), dst, 80),
        Verdict::Drop
    );
}

#[test]
fn applied_to_an_external_entity_of_this_node() {
    let policy = |selector: &str| {
        ruleset(&format!(
            "{EXTERNAL_ENTITIES}apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {{name: p}}\nspec:\n  priority: 1\n  appliedTo: [{{externalEntitySelector: {{matchLabels: {{role: {selector}}}}}}}]\n  ingress: [{{action: Drop, from: [{{ipBlock: {{cidr: 1.2.3.0/24}}}}]}}]\n"
        ))
    };
    let node: IpAddr = NODE_IP.parse().unwrap();
    let rs = policy("host");
    assert!(rs.enforced().node_ingress);
    assert_eq!(
        verdict(&rs, "1.2.3.4".parse().unwrap(), node, 22),
        Verdict::Drop
    );
    assert_eq!(
        verdict(&rs, "1.2.4.4".parse().unwrap(), node, 22),
        Verdict::Allow
    );
    // An ExternalEntity of another ExternalNode is enforced there, not here.
    let rs = policy("db");
    assert!(!rs.enforced().node_ingress);
}

#[test]
fn policy_summaries_list_rule_names_as_antrea_shows_them() {
    // `tollgate get policies`: given names, and Antrea's generated ones
    // (core/tests/data/antrea-rule-names/cases.json).
    let rs = one_policy(
        "  ingress:\n  - action: Allow\n  - {action: Drop, name: given}\n  egress:\n  - action: Drop\n",
    );
    assert_eq!(
        rs.policies()[0].rule_names,
        ["ingress-allow-216bba8", "given", "egress-drop-742ade5"]
    );
}

#[test]
fn node_cluster_group_as_a_child_group() {
    let rs = ruleset(&format!(
        "{NODE2}apiVersion: crd.antrea.io/v1beta1\nkind: ClusterGroup\nmetadata: {{name: cp}}\nspec:\n  nodeSelector: {{matchLabels: {{role: control-plane}}}}\n---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterGroup\nmetadata: {{name: trusted}}\nspec:\n  childGroups: [cp]\n---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {{name: p}}\nspec:\n  priority: 5\n  appliedTo: [{{podSelector: {{matchLabels: {{app: a}}}}}}]\n  ingress:\n  - {{action: Allow, from: [{{group: trusted}}]}}\n  - {{action: Drop}}\n"
    ));
    let dst = ip(X, A);
    assert_eq!(
        verdict(&rs, "10.255.0.2".parse().unwrap(), dst, 80),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&rs, NODE_IP.parse().unwrap(), dst, 80),
        Verdict::Allow,
        "node to its own Pods"
    );
    assert_eq!(verdict(&rs, ip(Y, B), dst, 80), Verdict::Drop);
}

// ---------------------------------------------------------- Antrea parity

#[test]
fn truth_ip_block_with_a_selector_in_one_peer_keeps_only_the_ip_block() {
    // Antrea keeps the first of ipBlock > group > fqdn > serviceAccount >
    // nodeSelector > selectors: app=b Pods outside 10.0.0.0/24 are not peers.
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 1
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "z"}}}]
  ingress:
  - action: Allow
    from: [{ipBlock: {cidr: 10.0.0.0/24}, podSelector: {matchLabels: {app: b}}}]
  - action: Drop
"#,
    );
    assert_matrix(&rs, |from, to| to.0 != Z || from.0 == X);
}

#[test]
fn fqdn_with_a_selector_in_one_peer_keeps_only_the_fqdn() {
    let rs = one_policy(
        "  egress:\n  - action: Allow\n    to: [{fqdn: \"*foobar.com\", podSelector: {}}]\n    ports: [{protocol: TCP, port: 8080}]\n  - action: Drop\n",
    );
    let server: IpAddr = "203.0.113.7".parse().unwrap();
    let learned = StaticFqdn(vec![("a.foobar.com".into(), server)]);
    assert_eq!(
        rs.classify(&tcp(ip(X, A), server, 8080), &learned).verdict,
        Verdict::Allow
    );
    // The podSelector is ignored: Pods are not peers of the Allow rule.
    assert_eq!(
        rs.classify(&tcp(ip(X, A), ip(Y, B), 8080), &learned)
            .verdict,
        Verdict::Drop
    );
}

/// A policy naming ClusterGroups, the groups, in either order.
const GROUP_REFERENCES: [&str; 2] = [
    r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 1
  appliedTo: [{group: z-c}]
  ingress:
  - action: Allow
    from: [{group: x-all}, {podSelector: {matchLabels: {app: a}}, namespaceSelector: {matchLabels: {ns: "y"}}}]
  - action: Drop
---
"#,
    r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: z-c}
spec:
  podSelector: {matchLabels: {app: c}}
  namespaceSelector: {matchLabels: {ns: "z"}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: x-all}
spec:
  namespaceSelector: {matchLabels: {ns: "x"}}
---
"#,
];

#[test]
fn truth_groups_defined_after_the_policy_mixed_with_selectors() {
    let [policy, groups] = GROUP_REFERENCES;
    let expect = |from: (usize, usize), to| to != (Z, C) || from.0 == X || from == (Y, A);
    assert_matrix(&ruleset(&format!("{policy}{groups}")), expect);
    assert_matrix(&ruleset(&format!("{groups}{policy}")), expect);
}

#[test]
fn truth_missing_groups_select_nothing() {
    let [policy, groups] = GROUP_REFERENCES;
    // No group at all: the appliedTo group selects no Pod, nothing changes.
    assert_matrix(&ruleset(policy), |_, _| true);
    // Only the appliedTo group: the peer group selects nothing yet.
    let applied_only = &groups[..groups.find("---").unwrap() + 4];
    assert_matrix(&ruleset(&format!("{policy}{applied_only}")), |from, to| {
        to != (Z, C) || from == (Y, A)
    });
}

#[test]
fn truth_legacy_capitalised_tier_names() {
    // `Emergency` is the emergency Tier (priority 50), ahead of securityops.
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: drop-to-z}
spec:
  priority: 1
  tier: SecurityOps
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "z"}}}]
  ingress:
  - action: Drop
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-x-to-z}
spec:
  priority: 100
  tier: Emergency
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "z"}}}]
  ingress:
  - action: Allow
    from: [{namespaceSelector: {matchLabels: {ns: "x"}}}]
"#,
    );
    assert_matrix(&rs, |from, to| to.0 != Z || from.0 == X);
    // `Baseline` is the baseline Tier: a Kubernetes NetworkPolicy decides first.
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: baseline-drop}
spec:
  priority: 1
  tier: Baseline
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "z"}}}]
  ingress:
  - action: Drop
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-from-y, namespace: z}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
"#,
    );
    assert_matrix(&rs, |from, to| to.0 != Z || (to.1 == A && from.0 == Y));
}

#[test]
fn truth_k8s_null_pod_selector_isolates_every_pod() {
    // `podSelector:` left null, as the upstream conformance manifests write it.
    let rs = ruleset(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: x}\nspec:\n  podSelector:\n  ingress:\n",
    );
    assert_matrix(&rs, |_, to| to.0 != X);
}

// Antrea's e2e scenarios (test/e2e/antreapolicy_test.go) that mix groups with
// stand-alone selectors, with the ClusterGroup written after the policy as
// those tests create it; Pod label `pod` is `app` here, port 81 is port 80.

#[test]
fn e2e_acnp_applied_to_deny_xb_to_cg_with_ya() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: acnp-deny-cg-with-ya-from-xb}
spec:
  priority: 2
  appliedTo: [{group: cg-pods-ya}]
  ingress:
  - action: Drop
    from: [{podSelector: {matchLabels: {app: b}}, namespaceSelector: {matchLabels: {ns: "x"}}}]
    ports: [{protocol: TCP, port: http}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-pods-ya}
spec:
  podSelector: {matchLabels: {app: a}}
  namespaceSelector: {matchLabels: {ns: "y"}}
"#,
    );
    assert_matrix(&rs, |from, to| !(from == (X, B) && to == (Y, A)));
}

#[test]
fn e2e_acnp_ingress_rule_deny_cg_with_xb_to_ya() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-pods-xb}
spec:
  podSelector: {matchLabels: {app: b}}
  namespaceSelector: {matchLabels: {ns: "x"}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: acnp-deny-cg-with-xb-to-ya}
spec:
  priority: 2
  appliedTo: [{podSelector: {matchLabels: {app: a}}, namespaceSelector: {matchLabels: {ns: "y"}}}]
  ingress:
  - action: Drop
    from: [{group: cg-pods-xb}]
    ports: [{protocol: TCP, port: http}]
"#,
    );
    assert_matrix(&rs, |from, to| !(from == (X, B) && to == (Y, A)));
}

#[test]
fn e2e_acnp_applied_to_rule_cg_with_pods_a_to_ns_z() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: acnp-deny-cg-with-a-to-z}
spec:
  priority: 1
  egress:
  - action: Drop
    appliedTo: [{group: cg-pods-a}]
    to: [{namespaceSelector: {matchLabels: {ns: "z"}}}]
    ports: [{protocol: TCP, port: 80}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-pods-a}
spec:
  podSelector: {matchLabels: {app: a}}
"#,
    );
    assert_matrix(&rs, |from, to| !(from.1 == A && to.0 == Z));
}

#[test]
fn e2e_acnp_egress_rule_pods_a_to_cg_with_ns_z() {
    let rs = ruleset(
        r#"apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: acnp-deny-a-to-cg-with-z-egress}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {app: a}}}]
  egress:
  - action: Drop
    to: [{group: cg-ns-z}]
    ports: [{protocol: TCP, port: 80}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-ns-z}
spec:
  namespaceSelector: {matchLabels: {ns: "z"}}
"#,
    );
    assert_matrix(&rs, |from, to| !(from.1 == A && to.0 == Z));
}

mod conformance;
mod dry_run;
mod npapi;
mod priority;

/// The local Node's Pod ranges (`spec.podCIDRs`, every Node object of its
/// name) and what in them the inventory knows: every local Pod's address,
/// enforced or not, and the Node's own; a remote Pod's address is not
/// known here, nor an address outside the ranges.
#[test]
fn the_local_nodes_pod_ranges_and_the_addresses_known_in_them() {
    let yaml = format!(
        "{}apiVersion: v1\nkind: Node\nmetadata: {{name: node1}}\nspec: {{podCIDR: 10.0.0.0/16, podCIDRs: [10.0.0.0/16, 'fd00::/64', not-a-cidr]}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: remote, namespace: x}}\nspec: {{nodeName: node2}}\nstatus: {{podIP: 10.0.9.9}}\n---\n{}",
        inventory(["", "", ""]),
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p}\nspec:\n  priority: 1\n  appliedTo: [{podSelector: {matchLabels: {app: a}}}]\n  ingress:\n  - action: Drop\n"
    );
    let rs = compile(
        &snapshot(&yaml),
        &LocalNode {
            name: "node1".into(),
            addresses: vec!["10.0.255.1".parse().unwrap(), "192.0.2.1".parse().unwrap()],
            ..Default::default()
        },
    );
    let enforced = rs.enforced();
    assert_eq!(
        enforced.ranges,
        ["10.0.0.0/16".parse().unwrap(), "fd00::/64".parse().unwrap()]
    );
    for n in 0..3 {
        for pod in [A, B, C] {
            assert!(enforced.known.contains(&ip(n, pod)), "{}", ip(n, pod));
            assert!(!enforced.is_unknown(ip(n, pod)));
        }
    }
    let known = |text: &str| enforced.known.contains(&text.parse().unwrap());
    assert!(known("10.0.255.1"), "the Node's own address in the range");
    assert!(!known("192.0.2.1"), "outside the ranges");
    assert!(!known("10.0.9.9"), "a remote Pod");
    assert!(enforced.is_unknown("10.0.9.9".parse().unwrap()));
    assert!(enforced.is_unknown("fd00::99".parse().unwrap()));
    assert!(!enforced.is_unknown("10.1.0.1".parse().unwrap()));
}

/// A connection that reaches the Node on a port published for a local
/// Pod (`hostPort`; on a Docker host `-p`, relayed by `docker-proxy`) is
/// decided as the client's connection to the Pod's port, whichever family
/// the client uses, and only on the address it is published on; the port
/// of an enforced Pod is in `Enforced::published`, that of a Pod only
/// dry-run policies apply to in `Enforced::dry_run_published`.
#[test]
fn a_published_port_reached_on_the_node_is_decided_as_the_client_to_the_pod() {
    let pod =
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: x, labels: {app: web}}\n\
               spec:\n  containers:\n  - name: main\n    ports:\n\
               \x20   - {containerPort: 80, hostPort: 8080}\n\
               \x20   - {containerPort: 53, protocol: UDP, hostPort: 5353, hostIP: 10.255.0.1}\n\
               status: {podIPs: [{ip: 10.0.7.1}, {ip: 'fd00::7:1'}]}\n---\n";
    let policy = "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p}\n\
                  spec:\n  priority: 1\n  appliedTo: [{podSelector: {matchLabels: {app: web}}}]\n  ingress:\n\
                  \x20 - action: Allow\n    ports: [{protocol: TCP, port: 80}, {protocol: UDP, port: 53}]\n\
                  \x20   from: [{ipBlock: {cidr: 192.0.2.0/24}}, {ipBlock: {cidr: '2001:db8::/32'}}]\n\
                  \x20 - action: Drop\n";
    let rs = ruleset(&format!("{pod}{policy}"));
    use crate::model::PortProtocol;
    assert_eq!(
        rs.enforced().published,
        [(PortProtocol::Udp, 5353), (PortProtocol::Tcp, 8080)]
    );
    // The policy in dry-run: the ports are the dry-run endpoint's.
    let dry_run = policy.replace(
        "{name: p}",
        "{name: p, annotations: {tollgate.io/dry-run: 'true'}}",
    );
    let dry = ruleset(&format!("{pod}{dry_run}"));
    assert!(dry.enforced().published.is_empty());
    assert_eq!(
        dry.enforced().dry_run_published,
        [(PortProtocol::Udp, 5353), (PortProtocol::Tcp, 8080)]
    );
    let to_node = |src: &str, node: &str, transport: Transport| {
        rs.classify(
            &Flow {
                src: src.parse().unwrap(),
                dst: node.parse().unwrap(),
                transport,
                local: Some(crate::packet::LocalSide::Destination),
            },
            &NoFqdn,
        )
    };
    let tcp = Transport::Tcp {
        src_port: 40000,
        dst_port: 8080,
    };
    for (client, node, verdict) in [
        ("192.0.2.9", NODE_IP, Verdict::Allow),
        ("198.51.100.9", NODE_IP, Verdict::Drop),
        ("2001:db8::9", "fd00::1", Verdict::Allow),
        ("2001:db9::9", "fd00::1", Verdict::Drop),
    ] {
        let decision = to_node(client, node, tcp);
        assert_eq!(decision.verdict, verdict, "{client} -> {node}:8080");
        assert_eq!(
            decision.ingress.endpoint.as_ref().map(ToString::to_string),
            Some("x/web".to_string())
        );
    }
    let udp = |node| {
        to_node(
            "198.51.100.9",
            node,
            Transport::Udp {
                src_port: 40000,
                dst_port: 5353,
            },
        )
        .verdict
    };
    assert_eq!(udp(NODE_IP), Verdict::Drop, "published on this address");
    assert_eq!(
        udp("10.255.0.2"),
        Verdict::Allow,
        "not on this one: the Node's"
    );
    // The Node itself, or a port nothing is published on, stays the Node's.
    let other = Transport::Tcp {
        src_port: 40000,
        dst_port: 8081,
    };
    assert_eq!(
        to_node("198.51.100.9", NODE_IP, other).verdict,
        Verdict::Allow
    );
}

//! Random policies of every kind the compiler reads, over the fixed
//! inventory [`INVENTORY`], for the property test: Antrea
//! ClusterNetworkPolicies and NetworkPolicies (Tiers, appliedTo of every
//! shape and per rule, every peer — Pod, Namespace, `namespaces` Self and
//! sameLabels, Node, ExternalEntity, group, ServiceAccount, ipBlock with
//! except, FQDN, toServices —, ports with ranges, named ports and
//! sourcePort, ICMP and IGMP, L7 HTTP, every action), Kubernetes
//! NetworkPolicies (policyTypes, deny-all, allow-all, ipBlock, ports),
//! AdminNetworkPolicies, BaselineAdminNetworkPolicies and v1alpha2
//! ClusterNetworkPolicies (subjects, every peer, port numbers, ranges and
//! named ports, Pass). A template's `NAME` is replaced by a name unique
//! in its side.

use proptest::prelude::*;
use proptest::sample::select;

/// Two Nodes (`n1` the default), three Namespaces, Pods on both Nodes (one
/// without `nodeName`), dual-stack ones with named ports, an
/// ExternalEntity, a NodePort Service, ClusterGroups and a Group.
pub const INVENTORY: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {role: worker}}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}, {type: InternalIP, address: "fd00::1"}]}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {role: edge}}
status: {addresses: [{type: InternalIP, address: 10.0.0.2}]}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns-a, labels: {env: prod, team: x}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns-b, labels: {env: dev, team: x}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns-c, labels: {env: dev}}
---
apiVersion: v1
kind: Pod
metadata: {name: a1, namespace: ns-a, labels: {app: web, tier: fe}}
spec:
  nodeName: n1
  serviceAccountName: web-sa
  containers:
  - name: c
    ports:
    - {name: http, containerPort: 80, protocol: TCP}
    - {name: dns, containerPort: 53, protocol: UDP}
status: {podIP: 10.1.0.1, podIPs: [{ip: 10.1.0.1}, {ip: "fd00:1::1"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a2, namespace: ns-a, labels: {app: db}}
spec: {nodeName: n1}
status: {podIP: 10.1.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: b1, namespace: ns-b, labels: {app: web}}
spec:
  nodeName: n2
  containers:
  - name: c
    ports:
    - {name: http, containerPort: 8080, protocol: TCP}
status: {podIP: 10.1.1.1, podIPs: [{ip: 10.1.1.1}, {ip: "fd00:1:1::1"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b2, namespace: ns-b, labels: {app: client}}
status: {podIP: 10.1.1.2}
---
apiVersion: v1
kind: Pod
metadata: {name: c1, namespace: ns-c, labels: {app: client}}
spec: {nodeName: n1}
status: {podIP: 10.2.0.1, podIPs: [{ip: 10.2.0.1}, {ip: "fd00:2::1"}]}
---
apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {name: vm1, namespace: ns-a, labels: {app: vm}}
spec: {endpoints: [{ip: 192.168.5.5}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns-a}
spec:
  type: NodePort
  selector: {app: web}
  clusterIP: 10.96.0.10
  ports: [{port: 80, protocol: TCP, nodePort: 30080}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-web}
spec: {podSelector: {matchLabels: {app: web}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-net}
spec: {ipBlocks: [{cidr: 192.168.0.0/16}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-nodes}
spec: {nodeSelector: {matchLabels: {role: worker}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: Group
metadata: {name: g-db, namespace: ns-a}
spec: {podSelector: {matchLabels: {app: db}}}
"#;

fn one(options: &'static [&'static str]) -> impl Strategy<Value = String> {
    select(options).prop_map(str::to_string)
}

fn pod_selector() -> impl Strategy<Value = String> {
    one(&[
        "{}",
        "{matchLabels: {app: web}}",
        "{matchLabels: {app: db}}",
        "{matchLabels: {app: client}}",
        "{matchLabels: {tier: fe}}",
        "{matchExpressions: [{key: app, operator: In, values: [web, db]}]}",
    ])
}

fn namespace_selector() -> impl Strategy<Value = String> {
    one(&[
        "{}",
        "{matchLabels: {env: prod}}",
        "{matchLabels: {env: dev}}",
        "{matchLabels: {team: x}}",
    ])
}

fn node_selector() -> impl Strategy<Value = String> {
    one(&[
        "{}",
        "{matchLabels: {role: worker}}",
        "{matchLabels: {role: edge}}",
    ])
}

fn block() -> impl Strategy<Value = String> {
    one(&[
        "{cidr: 10.1.0.0/16}",
        "{cidr: 10.1.0.0/16, except: [10.1.0.2/32]}",
        "{cidr: 10.0.0.0/8, except: [10.1.1.0/24]}",
        "{cidr: 0.0.0.0/0}",
        "{cidr: 203.0.113.0/24}",
        "{cidr: 192.168.0.0/16}",
        "{cidr: 10.96.0.0/12}",
        "{cidr: \"fd00::/16\"}",
        "{cidr: \"fd00:1::/32\", except: [\"fd00:1:1::/48\"]}",
        "{cidr: \"::/0\"}",
    ])
}

fn fqdn() -> impl Strategy<Value = String> {
    one(&["\"*.example.com\"", "www.example.com", "api.example.org"])
}

/// One Antrea peer; `cluster`: of a ClusterNetworkPolicy; `egress`: in
/// `to`.
fn antrea_peer(cluster: bool, egress: bool) -> BoxedStrategy<String> {
    let mut options: Vec<BoxedStrategy<String>> = vec![
        pod_selector()
            .prop_map(|s| format!("{{podSelector: {s}}}"))
            .boxed(),
        namespace_selector()
            .prop_map(|s| format!("{{namespaceSelector: {s}}}"))
            .boxed(),
        (pod_selector(), namespace_selector())
            .prop_map(|(p, n)| format!("{{podSelector: {p}, namespaceSelector: {n}}}"))
            .boxed(),
        block().prop_map(|b| format!("{{ipBlock: {b}}}")).boxed(),
        Just("{serviceAccount: {name: web-sa, namespace: ns-a}}".to_string()).boxed(),
        Just(
            "{externalEntitySelector: {matchLabels: {app: vm}}, namespaceSelector: {}}".to_string(),
        )
        .boxed(),
    ];
    if cluster {
        options.push(
            node_selector()
                .prop_map(|s| format!("{{nodeSelector: {s}}}"))
                .boxed(),
        );
        options.push(Just("{namespaces: {match: Self}}".to_string()).boxed());
        options.push(
            pod_selector()
                .prop_map(|p| format!("{{namespaces: {{match: Self}}, podSelector: {p}}}"))
                .boxed(),
        );
        options.push(Just("{namespaces: {sameLabels: [team]}}".to_string()).boxed());
        options.push(one(&["{group: cg-web}", "{group: cg-net}", "{group: cg-nodes}"]).boxed());
    } else {
        options.push(Just("{group: g-db}".to_string()).boxed());
    }
    if egress {
        options.push(fqdn().prop_map(|f| format!("{{fqdn: {f}}}")).boxed());
    }
    proptest::strategy::Union::new(options).boxed()
}

fn antrea_port() -> impl Strategy<Value = String> {
    one(&[
        "{protocol: TCP, port: 80}",
        "{protocol: TCP, port: 80, endPort: 90}",
        "{protocol: UDP, port: 53}",
        "{protocol: TCP, port: http}",
        "{protocol: UDP, port: dns}",
        "{protocol: SCTP}",
        "{protocol: TCP, port: 443, sourcePort: 1000, sourceEndPort: 2000}",
        "{protocol: UDP, sourcePort: 1500}",
        "{protocol: TCP, port: 30080}",
    ])
}

/// `ports:`/`protocols:`/`l7Protocols:` lines of an Antrea rule (and
/// whether the action must be Allow, for L7).
fn antrea_services() -> impl Strategy<Value = (String, bool)> {
    prop_oneof![
        3 => Just((String::new(), false)),
        4 => prop::collection::vec(antrea_port(), 1..3)
            .prop_map(|ports| (format!("    ports: [{}]\n", ports.join(", ")), false)),
        1 => one(&[
            "    protocols: [{icmp: {icmpType: 8, icmpCode: 0}}]\n",
            "    protocols: [{icmp: {icmpType: 0}}]\n",
            "    protocols: [{igmp: {igmpType: 22, groupAddress: 225.1.2.3}}]\n",
        ])
        .prop_map(|p| (p, false)),
        1 => one(&[
            "    ports: [{protocol: TCP, port: 80}]\n    l7Protocols: [{http: {method: GET, path: \"/api/*\"}}]\n",
            "    l7Protocols: [{http: {host: \"*.example.com\"}}, {http: {method: POST}}]\n",
        ])
        .prop_map(|p| (p, true)),
    ]
}

fn antrea_rule(cluster: bool, egress: bool, index: usize) -> impl Strategy<Value = String> {
    let actions: &'static [&'static str] = &["Allow", "Drop", "Reject", "Pass"];
    (
        select(actions),
        prop::collection::vec(antrea_peer(cluster, egress), 0..3),
        antrea_services(),
        any::<bool>(),
    )
        .prop_map(move |(action, peers, (services, l7), to_services)| {
            let action = if l7 { "Allow" } else { action };
            let field = if egress { "to" } else { "from" };
            let mut rule = format!("  - action: {action}\n    name: r{index}\n");
            if !peers.is_empty() {
                rule.push_str(&format!("    {field}: [{}]\n", peers.join(", ")));
            }
            if egress && to_services && !l7 && services.is_empty() {
                rule.push_str("    toServices: [{name: web, namespace: ns-a}]\n");
            }
            rule.push_str(&services);
            rule
        })
}

fn applied_to(cluster: bool) -> impl Strategy<Value = String> {
    let cluster_only: &'static [&'static str] = &[
        "{nodeSelector: {matchLabels: {role: worker}}}",
        "{group: cg-web}",
        "{group: cg-nodes}",
        "{service: {name: web, namespace: ns-a}}",
    ];
    let shared = prop_oneof![
        pod_selector().prop_map(|s| format!("{{podSelector: {s}}}")),
        namespace_selector().prop_map(|s| format!("{{namespaceSelector: {s}}}")),
        Just("{serviceAccount: {name: web-sa, namespace: ns-a}}".to_string()),
    ];
    if cluster {
        prop_oneof![3 => shared, 1 => select(cluster_only).prop_map(str::to_string)].boxed()
    } else {
        prop_oneof![
            shared.prop_filter("no namespaceSelector", |s| !s.contains("namespace")),
            Just("{group: g-db}".to_string())
        ]
        .boxed()
    }
}

/// An Antrea ClusterNetworkPolicy (`cluster`) or NetworkPolicy.
fn antrea(cluster: bool) -> impl Strategy<Value = String> {
    let tiers: &'static [&'static str] = &["securityops", "application", "baseline", "emergency"];
    (
        select(tiers),
        1..20u32,
        applied_to(cluster),
        prop::collection::vec(0..2usize, 0..3),
        any::<bool>(),
        select(&["ns-a", "ns-b"][..]),
    )
        .prop_flat_map(move |(tier, priority, applied, directions, per_rule, namespace)| {
            let rules: Vec<_> = directions
                .iter()
                .enumerate()
                .map(|(i, &d)| antrea_rule(cluster, d == 1, i).prop_map(move |r| (d, r)))
                .collect();
            let per_rule_target = applied_to(cluster);
            (rules, per_rule_target).prop_map(move |(rules, per_rule_target)| {
                let (kind, meta) = if cluster {
                    ("ClusterNetworkPolicy", "{name: NAME}".to_string())
                } else {
                    ("NetworkPolicy", format!("{{name: NAME, namespace: {namespace}}}"))
                };
                let tier = if cluster || tier != "baseline" { tier } else { "application" };
                let mut text = format!(
                    "apiVersion: crd.antrea.io/v1beta1\nkind: {kind}\nmetadata: {meta}\nspec:\n  priority: {priority}\n  tier: {tier}\n"
                );
                let per_rule = per_rule && !rules.is_empty() && !applied.contains("service");
                if !per_rule {
                    text.push_str(&format!("  appliedTo: [{applied}]\n"));
                }
                for (direction, name) in [(0, "ingress"), (1, "egress")] {
                    let mine: Vec<&String> =
                        rules.iter().filter(|(d, _)| *d == direction).map(|(_, r)| r).collect();
                    if mine.is_empty() {
                        continue;
                    }
                    text.push_str(&format!("  {name}:\n"));
                    for rule in mine {
                        text.push_str(rule);
                        if per_rule {
                            text.push_str(&format!("    appliedTo: [{per_rule_target}]\n"));
                        }
                    }
                }
                text
            })
        })
}

fn k8s_peer() -> impl Strategy<Value = String> {
    prop_oneof![
        pod_selector().prop_map(|s| format!("{{podSelector: {s}}}")),
        namespace_selector().prop_map(|s| format!("{{namespaceSelector: {s}}}")),
        (pod_selector(), namespace_selector())
            .prop_map(|(p, n)| format!("{{podSelector: {p}, namespaceSelector: {n}}}")),
        block().prop_map(|b| format!("{{ipBlock: {b}}}")),
    ]
}

fn k8s_rule(egress: bool) -> impl Strategy<Value = String> {
    let ports: &'static [&'static str] = &[
        "{protocol: TCP, port: 80}",
        "{port: 80, endPort: 90}",
        "{protocol: UDP, port: 53}",
        "{port: http}",
        "{protocol: SCTP, port: 9}",
    ];
    (
        prop::collection::vec(k8s_peer(), 0..3),
        prop::collection::vec(select(ports), 0..2),
    )
        .prop_map(move |(peers, ports)| {
            let field = if egress { "to" } else { "from" };
            let mut parts = Vec::new();
            if !peers.is_empty() {
                parts.push(format!("{field}: [{}]", peers.join(", ")));
            }
            if !ports.is_empty() {
                parts.push(format!("ports: [{}]", ports.join(", ")));
            }
            format!("{{{}}}", parts.join(", "))
        })
}

fn k8s() -> impl Strategy<Value = String> {
    let types: &'static [&'static str] = &["", "[Ingress]", "[Egress]", "[Ingress, Egress]"];
    (
        select(&["ns-a", "ns-b", "ns-c"][..]),
        pod_selector(),
        select(types),
        prop::collection::vec(k8s_rule(false), 0..3),
        prop::collection::vec(k8s_rule(true), 0..3),
    )
        .prop_map(|(namespace, selector, types, ingress, egress)| {
            let mut text = format!(
                "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: NAME, namespace: {namespace}}}\nspec:\n  podSelector: {selector}\n"
            );
            if !types.is_empty() {
                text.push_str(&format!("  policyTypes: {types}\n"));
            }
            if !ingress.is_empty() {
                text.push_str(&format!("  ingress: [{}]\n", ingress.join(", ")));
            }
            if !egress.is_empty() {
                text.push_str(&format!("  egress: [{}]\n", egress.join(", ")));
            }
            text
        })
}

fn np_peer(egress: bool, domains: bool) -> BoxedStrategy<String> {
    let mut options: Vec<BoxedStrategy<String>> = vec![
        namespace_selector()
            .prop_map(|s| format!("{{namespaces: {s}}}"))
            .boxed(),
        (namespace_selector(), pod_selector())
            .prop_map(|(n, p)| format!("{{pods: {{namespaceSelector: {n}, podSelector: {p}}}}}"))
            .boxed(),
    ];
    if egress {
        options.push(
            node_selector()
                .prop_map(|s| format!("{{nodes: {s}}}"))
                .boxed(),
        );
        options.push(
            one(&[
                "{networks: [10.1.0.0/16]}",
                "{networks: [0.0.0.0/0, \"::/0\"]}",
                "{networks: [203.0.113.0/24, \"fd00:1::/32\"]}",
            ])
            .boxed(),
        );
        if domains {
            options.push(
                one(&[
                    "{domainNames: [\"*.example.com\"]}",
                    "{domainNames: [www.example.com]}",
                ])
                .boxed(),
            );
        }
    }
    proptest::strategy::Union::new(options).boxed()
}

/// A v1alpha1 AdminNetworkPolicy or BaselineAdminNetworkPolicy rule.
fn anp_rule(egress: bool, baseline: bool, index: usize) -> impl Strategy<Value = String> {
    let actions: &'static [&'static str] = if baseline {
        &["Allow", "Deny"]
    } else {
        &["Allow", "Deny", "Pass"]
    };
    let ports: &'static [&'static str] = &[
        "{portNumber: {protocol: TCP, port: 80}}",
        "{portNumber: {protocol: UDP, port: 53}}",
        "{namedPort: http}",
        "{portRange: {protocol: TCP, start: 80, end: 90}}",
    ];
    (
        select(actions),
        prop::collection::vec(np_peer(egress, !baseline), 1..3),
        prop::collection::vec(select(ports), 0..2),
    )
        .prop_map(move |(action, peers, ports)| {
            let field = if egress { "to" } else { "from" };
            let mut rule = format!(
                "  - name: r{index}\n    action: {action}\n    {field}: [{}]\n",
                peers.join(", ")
            );
            if !ports.is_empty() {
                rule.push_str(&format!("    ports: [{}]\n", ports.join(", ")));
            }
            rule
        })
}

fn subject() -> impl Strategy<Value = String> {
    prop_oneof![
        namespace_selector().prop_map(|s| format!("{{namespaces: {s}}}")),
        (namespace_selector(), pod_selector())
            .prop_map(|(n, p)| format!("{{pods: {{namespaceSelector: {n}, podSelector: {p}}}}}")),
    ]
}

/// An AdminNetworkPolicy or (`baseline`) the BaselineAdminNetworkPolicy.
fn anp(baseline: bool) -> impl Strategy<Value = String> {
    (
        0..100u32,
        subject(),
        prop::collection::vec(0..2usize, 1..3),
    )
        .prop_flat_map(move |(priority, subject, directions)| {
            let rules: Vec<_> = directions
                .iter()
                .enumerate()
                .map(|(i, &d)| anp_rule(d == 1, baseline, i).prop_map(move |r| (d, r)))
                .collect();
            rules.prop_map(move |rules| {
                let mut text = if baseline {
                    format!("apiVersion: policy.networking.k8s.io/v1alpha1\nkind: BaselineAdminNetworkPolicy\nmetadata: {{name: default}}\nspec:\n  subject: {subject}\n")
                } else {
                    format!("apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {{name: NAME}}\nspec:\n  priority: {priority}\n  subject: {subject}\n")
                };
                for (direction, name) in [(0, "ingress"), (1, "egress")] {
                    let mine: Vec<&String> =
                        rules.iter().filter(|(d, _)| *d == direction).map(|(_, r)| r).collect();
                    if !mine.is_empty() {
                        text.push_str(&format!("  {name}:\n"));
                        mine.into_iter().for_each(|r| text.push_str(r));
                    }
                }
                text
            })
        })
}

/// A v1alpha2 ClusterNetworkPolicy rule.
fn cnp_rule(egress: bool, admin: bool, index: usize) -> impl Strategy<Value = String> {
    let actions: &'static [&'static str] = if admin {
        &["Accept", "Deny", "Pass"]
    } else {
        &["Accept", "Deny"]
    };
    let protocols: &'static [&'static str] = &[
        "{tcp: {destinationPort: {number: 80}}}",
        "{udp: {destinationPort: {range: {start: 50, end: 60}}}}",
        "{destinationNamedPort: http}",
        "{sctp: {}}",
    ];
    (
        select(actions),
        prop::collection::vec(np_peer(egress, true), 1..3),
        prop::collection::vec(select(protocols), 0..2),
    )
        .prop_map(move |(action, peers, protocols)| {
            let field = if egress { "to" } else { "from" };
            let mut rule = format!(
                "  - name: r{index}\n    action: {action}\n    {field}: [{}]\n",
                peers.join(", ")
            );
            if !protocols.is_empty() {
                rule.push_str(&format!("    protocols: [{}]\n", protocols.join(", ")));
            }
            rule
        })
}

fn cnp() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        0..100u32,
        subject(),
        prop::collection::vec(0..2usize, 1..3),
    )
        .prop_flat_map(|(admin, priority, subject, directions)| {
            let rules: Vec<_> = directions
                .iter()
                .enumerate()
                .map(|(i, &d)| cnp_rule(d == 1, admin, i).prop_map(move |r| (d, r)))
                .collect();
            rules.prop_map(move |rules| {
                let tier = if admin { "Admin" } else { "Baseline" };
                let mut text = format!("apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {{name: NAME}}\nspec:\n  tier: {tier}\n  priority: {priority}\n  subject: {subject}\n");
                for (direction, name) in [(0, "ingress"), (1, "egress")] {
                    let mine: Vec<&String> =
                        rules.iter().filter(|(d, _)| *d == direction).map(|(_, r)| r).collect();
                    if !mine.is_empty() {
                        text.push_str(&format!("  {name}:\n"));
                        mine.into_iter().for_each(|r| text.push_str(r));
                    }
                }
                text
            })
        })
}

/// One policy of any kind, its name `NAME`.
pub fn policy() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            4 => antrea(true),
            2 => antrea(false),
            3 => k8s(),
            1 => anp(false),
            1 => anp(true),
            1 => cnp(),
        ],
        prop::bool::weighted(0.2),
    )
        .prop_map(|(policy, dry_run)| {
            // One in five in dry-run: compiled, never enforced.
            if dry_run {
                policy.replacen(
                    "metadata: {",
                    "metadata: {annotations: {tollgate.io/dry-run: \"true\"}, ",
                    1,
                )
            } else {
                policy
            }
        })
}

use super::*;
use crate::compile::{compile, LocalNode};
use crate::fqdn::NoFqdn;
use crate::model::Snapshot;

/// Two Pods on node `n1` (one serving a named port), a remote one, and a
/// policy naming the port and an FQDN.
const OBJECTS: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  nodeName: n1
  containers: [{name: c, ports: [{name: http, containerPort: 8080}]}]
status: {podIP: 10.0.0.3, podIPs: [{ip: 10.0.0.3}, {ip: "fd00::3"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: shop, labels: {app: client}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.2, podIPs: [{ip: 10.0.0.2}, {ip: "fd00::2"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: far, namespace: shop, labels: {app: far}}
spec: {nodeName: n2}
status: {podIP: 10.0.9.9}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web-port}
spec:
  priority: 1
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - name: from-far
    action: Drop
    from: [{podSelector: {matchLabels: {app: far}}}]
  - name: http-from-client
    action: Allow
    from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{protocol: TCP, port: http}]
  - name: rest
    action: Drop
    from: [{podSelector: {}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: client-out}
spec:
  priority: 2
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: client}}}]
  egress:
  - name: to-example
    action: Allow
    to: [{fqdn: "*.example.test"}]
  - name: igmp-query
    action: Allow
    protocols: [{igmp: {igmpType: 0x11}}]
  - name: web
    action: Allow
    to: [{podSelector: {matchLabels: {app: web}}}]
  - name: rest
    action: Reject
    to: [{ipBlock: {cidr: 0.0.0.0/0}}]
"#;

fn ruleset() -> Ruleset {
    let (objects, problems) = crate::decode::parse_documents("test.yaml".as_ref(), OBJECTS);
    assert!(problems.is_empty(), "{problems:?}");
    let snapshot = Snapshot { objects };
    let local = LocalNode {
        name: "n1".into(),
        ..LocalNode::default()
    };
    compile(&snapshot, &local)
}

fn request(src: &str, dst: &str, protocol: TraceProtocol, port: Option<&str>) -> TraceRequest {
    TraceRequest {
        src: src.into(),
        dst: dst.into(),
        protocol,
        src_port: 40000,
        dst_port: port.map(str::to_string),
        icmp_type: 8,
        icmp_code: 0,
        igmp_type: 0x11,
        igmp_group: None,
        fqdn: None,
        http_method: None,
        http_host: None,
        http_path: None,
    }
}

#[test]
fn names_and_named_ports_resolve_against_the_inventory() {
    let ruleset = ruleset();
    let tcp = |port| request("shop/client", "shop/web", TraceProtocol::Tcp, Some(port));
    let named = trace(&ruleset, &NoFqdn, &tcp("http")).unwrap();
    assert_eq!(named.verdict, "Allow");
    assert_eq!(named.dst_port, Some(8080));
    assert_eq!(named.src.name.as_deref(), Some("shop/client"));
    assert_eq!(named.dst.address, "10.0.0.3".parse::<IpAddr>().unwrap());
    assert_eq!(named.ingress.rule.as_deref(), Some("http-from-client"));
    // The number the name stands for decides the same; another does not.
    assert_eq!(trace(&ruleset, &NoFqdn, &tcp("8080")).unwrap(), named);
    let other = trace(&ruleset, &NoFqdn, &tcp("81")).unwrap();
    assert_eq!(other.verdict, "Drop");
    assert_eq!(other.ingress.rule.as_deref(), Some("rest"));
    // IPv6 when a side only has IPv6.
    let v6 = request("fd00::2", "shop/web", TraceProtocol::Tcp, Some("http"));
    let v6 = trace(&ruleset, &NoFqdn, &v6).unwrap();
    assert_eq!(v6.dst.address, "fd00::3".parse::<IpAddr>().unwrap());
    assert_eq!(v6.verdict, "Allow");
    // A remote Pod and a Node by name.
    let far = request("shop/far", "shop/web", TraceProtocol::Tcp, Some("80"));
    assert_eq!(
        trace(&ruleset, &NoFqdn, &far)
            .unwrap()
            .ingress
            .rule
            .as_deref(),
        Some("from-far")
    );
    let node = request("node:n1", "shop/far", TraceProtocol::Icmp, None);
    assert_eq!(
        trace(&ruleset, &NoFqdn, &node).unwrap().src.address,
        "10.0.0.1".parse::<IpAddr>().unwrap()
    );
}

#[test]
fn bad_endpoints_and_ports_are_clear_errors() {
    let ruleset = ruleset();
    let error = |r: TraceRequest| trace(&ruleset, &NoFqdn, &r).unwrap_err();
    assert_eq!(
        error(request(
            "shop/nobody",
            "shop/web",
            TraceProtocol::Tcp,
            Some("80")
        )),
        TraceError::UnknownEndpoint {
            given: "shop/nobody".into(),
            nearest: None,
        }
    );
    assert_eq!(
        error(request(
            "shop/client",
            "shop/web",
            TraceProtocol::Udp,
            Some("http")
        )),
        TraceError::UnknownNamedPort {
            dst: "shop/web".into(),
            name: "http".into(),
            protocol: "UDP"
        }
    );
    assert_eq!(
        error(request("shop/client", "shop/web", TraceProtocol::Tcp, None)),
        TraceError::PortRequired { protocol: "TCP" }
    );
    assert_eq!(
        error(request(
            "fd00::2",
            "shop/far",
            TraceProtocol::Tcp,
            Some("80")
        )),
        TraceError::Family
    );
    assert_eq!(
        error(request("fd00::2", "fd00::3", TraceProtocol::Igmp, None)),
        TraceError::IgmpOverIpv6
    );
    assert!(error(request(
        "shop/client",
        "shop/web\n",
        TraceProtocol::Tcp,
        Some("80")
    ))
    .to_string()
    .contains("neither an address"));
}

#[test]
fn verbose_lists_every_rule_met_in_order_and_learned_names_decide() {
    let ruleset = ruleset();
    let out = request(
        "shop/client",
        "203.0.113.5",
        TraceProtocol::Tcp,
        Some("443"),
    );
    let denied = trace(&ruleset, &NoFqdn, &out).unwrap();
    assert_eq!(denied.verdict, "Reject");
    let met: Vec<(Option<&str>, bool)> = denied
        .egress
        .consulted
        .iter()
        .map(|c| (c.rule.as_deref(), c.matched))
        .collect();
    assert_eq!(
        met,
        [
            (Some("to-example"), false),
            (Some("igmp-query"), false),
            (Some("web"), false),
            (Some("rest"), true)
        ]
    );
    assert!(denied.fqdn.is_empty());
    // Learned addresses (the agent's table) decide as `--fqdn` does.
    let learned = StaticFqdn(vec![(
        "www.example.test".into(),
        "203.0.113.5".parse().unwrap(),
    )]);
    let allowed = trace(&ruleset, &learned, &out).unwrap();
    assert_eq!(allowed.verdict, "Allow");
    assert_eq!(allowed.egress.consulted.len(), 1);
    assert_eq!(allowed.fqdn, ["*.example.test"]);
    let given = TraceRequest {
        fqdn: Some("api.example.test".into()),
        ..out
    };
    assert_eq!(
        trace(&ruleset, &NoFqdn, &given).unwrap().egress,
        allowed.egress
    );
    // IGMP by type.
    let igmp = request("shop/client", "224.0.0.1", TraceProtocol::Igmp, None);
    let igmp = trace(&ruleset, &NoFqdn, &igmp).unwrap();
    assert_eq!(
        (igmp.protocol.as_str(), igmp.egress.rule.as_deref()),
        ("IGMP", Some("igmp-query"))
    );
    // The report crosses the status socket unchanged.
    let wire = serde_json::to_string(&allowed).unwrap();
    assert_eq!(serde_json::from_str::<TraceReport>(&wire).unwrap(), allowed);
}

#[test]
fn endpoints_carry_their_policies_in_order() {
    let ruleset = ruleset();
    let endpoints = endpoints(&ruleset);
    let shown: Vec<(&str, &str, Vec<&str>)> = endpoints
        .iter()
        .map(|e| {
            (
                e.endpoint.as_str(),
                e.kind.as_str(),
                e.policies.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("n1", "Node", vec![]),
            // Pods by Namespace and name.
            (
                "shop/client",
                "Pod",
                vec!["AntreaClusterNetworkPolicy:client-out"]
            ),
            (
                "shop/web",
                "Pod",
                vec!["AntreaClusterNetworkPolicy:web-port"]
            ),
        ]
    );
    assert_eq!(
        endpoints[0].addresses,
        ["10.0.0.1".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(endpoints[2].addresses.len(), 2);
    assert_eq!(endpoints[1].fqdn, ["*.example.test"]);
    assert!(endpoints[2].fqdn.is_empty());
}

/// The consulted list and the decision come from two walks of the same
/// lists (the classifier's through the index): for every flow of a grid,
/// the last rule the list marks matched is the rule that decided, and no
/// rule matched when none decided (a `Pass` aside).
#[test]
fn the_rules_consulted_end_at_the_deciding_rule() {
    let ruleset = ruleset();
    let names = [
        "shop/client",
        "shop/web",
        "shop/far",
        "node:n1",
        "203.0.113.5",
    ];
    let mut checked = 0;
    for src in names {
        for dst in names.iter().filter(|d| **d != src) {
            for port in ["80", "8080", "http", "443"] {
                let request = request(src, dst, TraceProtocol::Tcp, Some(port));
                let Ok(report) = trace(&ruleset, &NoFqdn, &request) else {
                    continue;
                };
                for d in [&report.egress, &report.ingress] {
                    let matched: Vec<&ConsultedRule> = d
                        .consulted
                        .iter()
                        .filter(|c| c.matched && c.action != "Pass")
                        .collect();
                    match &d.rule {
                        Some(rule) => {
                            let last = d.consulted.last().expect("the deciding rule is listed");
                            assert!(last.matched, "{src} -> {dst}:{port}: {d:?}");
                            assert_eq!(last.rule.as_ref(), Some(rule));
                            assert_eq!(last.policy, *d.policy.as_ref().unwrap());
                            assert_eq!(matched.len(), 1, "{d:?}");
                        }
                        None if d.outcome != "Rule" => assert!(matched.is_empty(), "{d:?}"),
                        None => {}
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 100, "{checked}");
}

/// A Kubernetes deny-all (a podSelector and no rule) isolates without a
/// rule to consult: the report names it, in the direction it isolates,
/// and only there.
#[test]
fn a_deny_all_kubernetes_policy_is_named_as_isolating() {
    let yaml = format!(
        "{OBJECTS}---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: deny-all, namespace: shop}}
spec:
  podSelector: {{matchLabels: {{app: client}}}}
  policyTypes: [Ingress]
"
    );
    let (objects, problems) = crate::decode::parse_documents("test.yaml".as_ref(), &yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let local = LocalNode {
        name: "n1".into(),
        ..LocalNode::default()
    };
    let ruleset = compile(&Snapshot { objects }, &local);
    let to_client = request("shop/web", "shop/client", TraceProtocol::Tcp, Some("80"));
    let report = trace(&ruleset, &NoFqdn, &to_client).unwrap();
    assert_eq!(report.verdict, "Drop");
    assert_eq!(report.ingress.outcome, "K8sDefaultDeny");
    assert!(report.ingress.consulted.is_empty(), "{report:?}");
    assert_eq!(
        report.ingress.isolated_by,
        ["K8sNetworkPolicy:shop/deny-all"]
    );
    assert!(report.egress.isolated_by.is_empty());
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["ingress"]["isolatedBy"],
        serde_json::json!(["K8sNetworkPolicy:shop/deny-all"])
    );
    assert!(json["egress"].get("isolatedBy").is_none());
    // The client's own egress is not isolated by an Ingress-only policy.
    let from_client = request("shop/client", "shop/web", TraceProtocol::Tcp, Some("http"));
    let report = trace(&ruleset, &NoFqdn, &from_client).unwrap();
    assert!(report.egress.isolated_by.is_empty(), "{report:?}");
}

#[test]
fn trace_shows_the_dry_run_verdict_beside_the_enforced_one() {
    let yaml = format!(
        "{OBJECTS}---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: lockdown
  annotations: {{tollgate.io/dry-run: \"true\"}}
spec:
  priority: 1
  tier: securityops
  appliedTo: [{{podSelector: {{matchLabels: {{app: web}}}}}}]
  ingress:
  - name: no-client
    action: Drop
    from: [{{podSelector: {{matchLabels: {{app: client}}}}}}]
"
    );
    let (objects, problems) = crate::decode::parse_documents("test.yaml".as_ref(), &yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let local = LocalNode {
        name: "n1".into(),
        ..LocalNode::default()
    };
    let ruleset = compile(&Snapshot { objects }, &local);
    let to_web = request("shop/client", "shop/web", TraceProtocol::Tcp, Some("http"));
    let report = trace(&ruleset, &NoFqdn, &to_web).unwrap();
    // Enforced: as without the dry-run policy.
    assert_eq!(report.verdict, "Allow");
    assert_eq!(report.ingress.rule.as_deref(), Some("http-from-client"));
    assert!(
        report
            .ingress
            .consulted
            .iter()
            .all(|c| c.policy != "AntreaClusterNetworkPolicy:lockdown"),
        "{report:?}"
    );
    assert_eq!(
        report.dry_run,
        Some(DryRunReport {
            verdict: "Drop".into(),
            changed: true,
            direction: Some("Ingress".into()),
            policy: Some("AntreaClusterNetworkPolicy:lockdown".into()),
            tier: Some("securityops".into()),
            rule: Some("no-client".into()),
            action: Some("Drop".into()),
        })
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["dryRun"]["verdict"], "Drop");
    assert_eq!(json["dryRun"]["changed"], true);
    // Its rule does not match the remote Pod: an unchanged dry-run verdict
    // (the enforced rule decides it).
    let far = request("shop/far", "shop/web", TraceProtocol::Tcp, Some("80"));
    let report = trace(&ruleset, &NoFqdn, &far).unwrap();
    let dry = report.dry_run.expect("web carries a dry-run rule");
    assert_eq!((dry.verdict.as_str(), dry.changed), ("Drop", false));
    assert_eq!(dry.policy, None);
    // Flows between sides without dry-run rules have none.
    let out = request("shop/client", "shop/far", TraceProtocol::Tcp, Some("80"));
    let report = trace(&ruleset, &NoFqdn, &out).unwrap();
    assert_eq!(report.dry_run, None);
    assert!(serde_json::to_value(&report)
        .unwrap()
        .get("dryRun")
        .is_none());
}

/// `trace -v`'s reasons: each rule that did not match says which of its
/// conditions the flow missed (peer, port, protocol, FQDN, source port),
/// the flow's value there and what the rule takes.
#[test]
fn each_rule_not_matched_says_why() {
    let ruleset = ruleset();
    let why = |report: &DirectionReport| -> Vec<(Option<Miss>, Option<String>)> {
        report
            .consulted
            .iter()
            .map(|c| (c.miss, c.why.clone()))
            .collect()
    };
    let to_81 = request("shop/client", "shop/web", TraceProtocol::Tcp, Some("81"));
    let report = trace(&ruleset, &NoFqdn, &to_81).unwrap();
    assert_eq!(
        why(&report.ingress),
        [
            (
                Some(Miss::Peer),
                Some(
                    "source 10.0.0.2 is none of the rule's peers: 1 selected address (10.0.9.9)"
                        .into()
                )
            ),
            (
                Some(Miss::Port),
                Some("TCP destination port 81: the rule takes TCP/http".into())
            ),
            (None, None),
        ]
    );
    let out = request("shop/client", "192.0.2.1", TraceProtocol::Udp, Some("53"));
    let report = trace(&ruleset, &NoFqdn, &out).unwrap();
    let reasons: Vec<String> = report
        .egress
        .consulted
        .iter()
        .filter_map(|c| c.why.clone())
        .collect();
    assert_eq!(
        reasons,
        [
            "destination 192.0.2.1 is none of the rule's peers: FQDN *.example.test (not known to resolve to 192.0.2.1)",
            "protocol UDP: the rule takes IGMP type 0x11",
            "destination 192.0.2.1 is none of the rule's peers: 2 selected addresses (10.0.0.3, fd00::3)",
        ]
    );
    // The name learned: the FQDN rule matches, nothing to explain.
    let learned = StaticFqdn(vec![(
        "www.example.test".into(),
        "192.0.2.1".parse().unwrap(),
    )]);
    let tcp = request("shop/client", "192.0.2.1", TraceProtocol::Tcp, Some("443"));
    let report = trace(&ruleset, &learned, &tcp).unwrap();
    assert_eq!(why(&report.egress), [(None, None)]);
    // JSON carries both.
    let json = serde_json::to_value(trace(&ruleset, &NoFqdn, &to_81).unwrap()).unwrap();
    assert_eq!(json["ingress"]["consulted"][1]["miss"], "port");
    assert!(json["ingress"]["consulted"][2].get("why").is_none());
}

/// A `sourcePort` range, an ICMP type and a CIDR with a hole: the source
/// port is named when only it fails, the ICMP type and code when they do,
/// the hole with its block.
#[test]
fn source_port_icmp_type_and_ip_block_holes_are_explained() {
    const POLICY: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: shop, labels: {app: db}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.5}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: db-in}
spec:
  priority: 1
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: db}}}]
  ingress:
  - name: low-ports
    action: Allow
    from: [{ipBlock: {cidr: 10.0.0.0/16}}]
    ports: [{protocol: TCP, port: 5432, sourcePort: 1000, sourceEndPort: 2000}]
  - name: ping
    action: Allow
    from: [{ipBlock: {cidr: 10.0.0.0/16}}]
    protocols: [{icmp: {icmpType: 0}}]
  - name: lan
    action: Allow
    from: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.0.7.0/24]}}]
"#;
    let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), POLICY);
    assert!(problems.is_empty(), "{problems:?}");
    let local = LocalNode {
        name: "n1".into(),
        ..LocalNode::default()
    };
    let ruleset = compile(&Snapshot { objects }, &local);
    let reasons = |r: TraceRequest| -> Vec<String> {
        let report = trace(&ruleset, &NoFqdn, &r).unwrap();
        report
            .ingress
            .consulted
            .iter()
            .filter_map(|c| c.why.clone())
            .collect()
    };
    assert_eq!(
        reasons(request(
            "10.0.7.9",
            "shop/db",
            TraceProtocol::Tcp,
            Some("5432")
        )),
        [
            "source port 40000: the rule takes TCP/5432 from ports 1000-2000",
            "protocol TCP: the rule takes ICMP type 0",
            "source 10.0.7.9 is none of the rule's peers: 10.0.0.0/16 except 10.0.7.0/24",
        ]
    );
    let ping = request("10.0.1.1", "shop/db", TraceProtocol::Icmp, None);
    assert_eq!(
        reasons(ping)[..2],
        [
            "protocol ICMP: the rule takes TCP/5432 from ports 1000-2000",
            "ICMP type 8 code 0: the rule takes ICMP type 0",
        ]
    );
}

/// An HTTP request denied by a rule's `l7Protocols` is explained entry by
/// entry: the first field each entry refuses.
#[test]
fn an_http_request_denied_says_which_field_each_entry_refuses() {
    const POLICY: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: api, namespace: shop, labels: {app: api}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.6}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: api-in}
spec:
  priority: 1
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: api}}}]
  ingress:
  - name: reads
    action: Allow
    l7Protocols: [{http: {method: GET, path: "/api/*"}}, {http: {host: "*.shop.test"}}]
"#;
    let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), POLICY);
    assert!(problems.is_empty(), "{problems:?}");
    let local = LocalNode {
        name: "n1".into(),
        ..LocalNode::default()
    };
    let ruleset = compile(&Snapshot { objects }, &local);
    let http = |method: &str, host: &str, path: &str| {
        let mut r = request("10.0.1.1", "shop/api", TraceProtocol::Tcp, Some("80"));
        r.http_method = Some(method.into());
        r.http_host = Some(host.into());
        r.http_path = Some(path.into());
        trace(&ruleset, &NoFqdn, &r).unwrap()
    };
    let denied = http("POST", "api.other.test", "/api/x");
    assert_eq!(denied.http.as_deref(), Some("Drop"));
    assert_eq!(
        denied.http_why,
        [
            "l7Protocols[0].http: method POST: the rule takes GET",
            "l7Protocols[1].http: host api.other.test: the rule takes *.shop.test",
        ]
    );
    assert_eq!(
        http("GET", "api.other.test", "/admin").http_why[0],
        "l7Protocols[0].http: path /admin: the rule takes /api/*"
    );
    let allowed = http("GET", "api.other.test", "/api/items");
    assert_eq!(allowed.http.as_deref(), Some("Allow"));
    assert!(allowed.http_why.is_empty());
}

//! One test per admission rule, each with an accepted and a rejected case,
//! built from YAML through the real decoder.

use std::path::Path;

use super::*;
use crate::decode::parse_documents;
use crate::model::{Direction, Kind, RuleAction};

fn snapshot(yaml: &str) -> Snapshot {
    let (objects, problems) = parse_documents(Path::new("t.yaml"), yaml);
    assert!(problems.is_empty(), "decoding failed: {problems:#?}");
    Snapshot { objects }
}

fn render(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}\n"))
        .collect::<String>()
}

#[track_caller]
fn assert_valid(yaml: &str) {
    let problems = validate(&snapshot(yaml));
    assert!(
        problems.is_empty(),
        "unexpected problems:\n{}",
        render(&problems)
    );
}

/// Exactly one problem, at `field`, whose reason contains `reason`.
#[track_caller]
fn assert_problem(yaml: &str, field: &str, reason: &str) {
    let problems = validate(&snapshot(yaml));
    assert!(
        problems.len() == 1 && problems[0].field == field && problems[0].reason.contains(reason),
        "expected exactly `{field}: …{reason}…`, got:\n{}",
        render(&problems)
    );
}

/// No error and exactly one warning, at `field`, whose reason contains `reason`.
#[track_caller]
fn assert_warning(yaml: &str, field: &str, reason: &str) {
    let findings = check(&snapshot(yaml));
    assert!(
        findings.errors.is_empty(),
        "unexpected errors:\n{}",
        render(&findings.errors)
    );
    let warnings = &findings.warnings;
    assert!(
        warnings.len() == 1 && warnings[0].field == field && warnings[0].reason.contains(reason),
        "expected exactly the warning `{field}: …{reason}…`, got:\n{}",
        render(warnings)
    );
}

/// The decoding problems of `yaml` (which must not decode cleanly).
fn decode_problems(yaml: &str) -> Vec<Problem> {
    let (_, problems) = parse_documents(Path::new("t.yaml"), yaml);
    assert!(!problems.is_empty(), "decoded cleanly");
    problems
}

fn indent(text: &str) -> String {
    text.trim_start_matches('\n')
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect()
}

fn acnp(spec: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata:\n  name: p\nspec:\n{}---\n",
        indent(spec)
    )
}

fn annp(spec: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata:\n  name: p\n  namespace: shop\nspec:\n{}---\n",
        indent(spec)
    )
}

fn cluster_group(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterGroup\nmetadata:\n  name: {name}\nspec:\n{}---\n",
        indent(spec)
    )
}

fn group(namespace: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: Group\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n{}---\n",
        indent(spec)
    )
}

fn tier(name: &str, priority: i32) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata:\n  name: {name}\nspec:\n  priority: {priority}\n---\n"
    )
}

fn k8s_np(spec: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: np\n  namespace: shop\nspec:\n{}---\n",
        indent(spec)
    )
}

/// An ACNP whose single ingress rule is `rule` (flow-style YAML mapping body).
fn acnp_ingress(rule: &str) -> String {
    acnp(&format!(
        "priority: 5\nappliedTo: [{{podSelector: {{}}}}]\ningress:\n- {{{rule}}}\n"
    ))
}

/// An ACNP whose single egress rule is `rule`.
fn acnp_egress(rule: &str) -> String {
    acnp(&format!(
        "priority: 5\nappliedTo: [{{podSelector: {{}}}}]\negress:\n- {{{rule}}}\n"
    ))
}

// ------------------------------------------------------------------ display

#[test]
fn problems_display_path_object_field_reason() {
    let p = validate(&snapshot(&acnp(
        "priority: 0\nappliedTo: [{podSelector: {}}]\n",
    )));
    assert_eq!(
        p[0].to_string(),
        "t.yaml: ClusterNetworkPolicy p: spec.priority: must be between 1.0 and 10000.0, got 0"
    );
    let p = validate(&snapshot(&annp(
        "priority: 0\nappliedTo: [{podSelector: {}}]\n",
    )));
    assert_eq!(
        p[0].to_string(),
        "t.yaml: NetworkPolicy.crd.antrea.io shop/p: spec.priority: must be between 1.0 and 10000.0, got 0"
    );
    let syntax = Problem {
        origin: "a.yaml".into(),
        object: ObjectRef::default(),
        field: "line 2, column 1".into(),
        reason: "YAML syntax: x".into(),
    };
    assert_eq!(
        syntax.to_string(),
        "a.yaml: line 2, column 1: YAML syntax: x"
    );
}

// ------------------------------------------------------------------- tiers

#[test]
fn policy_tier_must_exist() {
    let spec = "tier: mytier\npriority: 5\nappliedTo: [{podSelector: {}}]\n";
    assert_valid(&format!("{}{}", tier("mytier", 10), acnp(spec)));
    assert_valid(&acnp(&spec.replace("mytier", "emergency")));
    assert_problem(&acnp(spec), "spec.tier", "Tier `mytier` does not exist");
    assert_problem(&annp(spec), "spec.tier", "Tier `mytier` does not exist");
}

#[test]
fn custom_tier_priority_must_be_below_250() {
    assert_valid(&tier("mytier", 249));
    assert_valid(&tier("mytier", 0));
    assert_problem(
        &tier("mytier", 250),
        "spec.priority",
        "must be between 0 and 249",
    );
    assert_problem(&tier("mytier", 300), "spec.priority", "got 300");
    assert_problem(&tier("mytier", -1), "spec.priority", "got -1");
}

#[test]
fn tier_priorities_are_unique_including_static_tiers() {
    assert_valid(&format!("{}{}", tier("a", 10), tier("b", 11)));
    assert_problem(
        &format!("{}{}", tier("a", 10), tier("b", 10)),
        "spec.priority",
        "priority 10 is already used by Tier a",
    );
    assert_problem(
        &tier("mytier", 100),
        "spec.priority",
        "already used by Tier securityops",
    );
    let problems = validate(&snapshot(&format!("{}{}", tier("a", 10), tier("b", 10))));
    assert_eq!(problems[0].object.name, "b", "the later Tier is reported");
}

#[test]
fn custom_tiers_cannot_reuse_static_names() {
    // Restating a static Tier exactly (a `kubectl get tiers` dump) is fine.
    assert_valid(&format!(
        "{}{}",
        tier("application", 250),
        tier("baseline", 253)
    ));
    assert_problem(
        &tier("emergency", 10),
        "metadata.name",
        "`emergency` is a static Tier",
    );
}

#[test]
fn at_most_twenty_tiers() {
    let fourteen: String = (0..14).map(|i| tier(&format!("t{i}"), i)).collect();
    assert_valid(&fourteen);
    let fifteen = format!("{fourteen}{}", tier("t14", 14));
    assert_problem(&fifteen, "metadata.name", "at most 20 Tiers are supported");
}

// ------------------------------------------------------------ all objects

#[test]
fn duplicate_objects_are_rejected() {
    let ns = |name: &str, ns: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\n---\n")
    };
    assert_valid(&format!("{}{}{}", ns("a", "x"), ns("a", "y"), ns("b", "x")));
    // Different kinds with one name are different objects.
    assert_valid(&format!(
        "{}{}",
        cluster_group("g", "podSelector: {}"),
        tier("g", 10)
    ));
    assert_problem(
        &format!("{}{}", ns("a", "x"), ns("a", "x")),
        "metadata.name",
        "duplicate object: already defined in t.yaml",
    );
    assert_problem(
        &format!("{}{}", tier("t", 10), tier("t", 10)),
        "metadata.name",
        "duplicate object",
    );
}

#[test]
fn objects_need_a_name() {
    assert_valid("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n");
    assert_problem(
        "apiVersion: v1\nkind: Pod\nmetadata: {}\n",
        "metadata.name",
        "must not be empty",
    );
    assert_problem(
        &acnp("priority: 1\nappliedTo: [{podSelector: {}}]\n").replace("name: p", "name: ''"),
        "metadata.name",
        "must not be empty",
    );
}

#[test]
fn inventory_objects_need_nothing_else() {
    assert_valid(
        "apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/os: linux}}
status: {addresses: [{type: InternalIP, address: 10.0.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
spec: {type: NodePort, ports: [{port: 80, nodePort: 30080}]}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa, namespace: shop}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop}
",
    );
}

// ---------------------------------------------------------------- policies

#[test]
fn policy_priority_range() {
    for ok in ["1", "1.0", "5.5", "10000", "10000.0"] {
        assert_valid(&acnp(&format!(
            "priority: {ok}\nappliedTo: [{{podSelector: {{}}}}]\n"
        )));
    }
    for bad in ["0", "0.5", "10000.5", "-3", "1e9"] {
        assert_problem(
            &acnp(&format!(
                "priority: {bad}\nappliedTo: [{{podSelector: {{}}}}]\n"
            )),
            "spec.priority",
            "must be between 1.0 and 10000.0",
        );
    }
}

#[test]
fn pass_is_rejected_in_the_baseline_tier() {
    let spec = "tier: securityops\npriority: 1\nappliedTo: [{namespaceSelector: {}}]\ningress:\n- {action: Pass}\n";
    assert_valid(&acnp(spec));
    assert_valid(&acnp(
        &spec
            .replace("securityops", "baseline")
            .replace("Pass", "Drop"),
    ));
    assert_problem(
        &acnp(&spec.replace("securityops", "baseline")),
        "spec.ingress[0].action",
        "Pass is not allowed in the baseline Tier",
    );
}

#[test]
fn unknown_actions_are_refused_with_a_hint() {
    // Antrea's schema: action is one of Allow, Drop, Reject, Pass.
    let problems = decode_problems(&acnp_ingress("action: Deny"));
    assert_eq!(problems.len(), 1, "{}", render(&problems));
    assert_eq!(
        problems[0].to_string(),
        "t.yaml: ClusterNetworkPolicy p: spec.ingress[0].action: unknown action `Deny`, expected one of Allow, Drop, Reject, Pass (did you mean Drop?)"
    );
    let problems = decode_problems(&acnp_egress("action: allow, to: [{fqdn: example.com}]"));
    assert!(
        problems[0].to_string().ends_with(
            "spec.egress[0].action: unknown action `allow`, expected one of Allow, Drop, Reject, Pass (did you mean Allow?)"
        ),
        "{}",
        render(&problems)
    );
    let problems = decode_problems(&acnp_ingress("action: Block"));
    assert!(
        problems[0]
            .to_string()
            .ends_with("expected one of Allow, Drop, Reject, Pass"),
        "{}",
        render(&problems)
    );
}

#[test]
fn applied_to_at_policy_level_xor_every_rule() {
    let per_rule = "priority: 1
ingress:
- {action: Drop, appliedTo: [{podSelector: {}}]}
egress:
- {action: Drop, appliedTo: [{podSelector: {}}]}
";
    assert_valid(&acnp(per_rule));
    assert_valid(&acnp(
        "priority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Drop}\n",
    ));
    assert_problem(
        &acnp(
            &format!("appliedTo: [{{podSelector: {{}}}}]\n{per_rule}").replace(
                "egress:\n- {action: Drop, appliedTo: [{podSelector: {}}]}\n",
                "egress:\n- {action: Drop}\n",
            ),
        ),
        "spec.ingress[0].appliedTo",
        "cannot be set on a rule when spec.appliedTo is set",
    );
    assert_problem(
        &acnp(&per_rule.replace(
            "- {action: Drop, appliedTo: [{podSelector: {}}]}\negress",
            "- {action: Drop}\negress",
        )),
        "spec.ingress[0].appliedTo",
        "must be set on every rule when spec.appliedTo is not set",
    );
    assert_problem(
        &acnp("priority: 1\ningress:\n- {action: Drop}\n"),
        "spec.appliedTo",
        "must be set, either here or on every rule",
    );
}

#[test]
fn empty_applied_to_entry() {
    assert_valid(&acnp("priority: 1\nappliedTo: [{podSelector: {}}]\n"));
    assert_problem(
        &acnp("priority: 1\nappliedTo: [{podSelector: {}}, {}]\n"),
        "spec.appliedTo[1]",
        "empty entry",
    );
    assert_problem(
        &acnp("priority: 1\ningress:\n- {action: Drop, appliedTo: [{}]}\n"),
        "spec.ingress[0].appliedTo[0]",
        "empty entry",
    );
}

#[test]
fn group_references_and_stand_alone_selectors_mix() {
    // Antrea's webhook admits a policy mixing group references and
    // stand-alone selectors across appliedTo and peers.
    let groups = format!(
        "{}{}",
        cluster_group("db", "podSelector: {matchLabels: {role: db}}"),
        cluster_group("fe", "podSelector: {matchLabels: {role: fe}}")
    );
    let spec = "priority: 1
appliedTo: [{group: db}]
ingress:
- {action: Allow, from: [{group: fe}, {podSelector: {}}, {namespaces: {match: Self}}]}
";
    assert_valid(&format!("{groups}{}", acnp(spec)));
    assert_valid(&format!(
        "{groups}{}",
        acnp(&spec.replace("{group: db}", "{namespaceSelector: {}}"))
    ));
    let ns_groups = group("shop", "db", "podSelector: {}");
    assert_valid(&format!(
        "{ns_groups}{}",
        annp("priority: 1\nappliedTo: [{group: db}]\negress:\n- {action: Drop, to: [{podSelector: {}}]}\n")
    ));
}

#[test]
fn group_cannot_be_combined_with_other_fields() {
    let groups = cluster_group("g", "podSelector: {}");
    assert_valid(&format!(
        "{groups}{}",
        acnp("priority: 1\nappliedTo: [{group: g}]\n")
    ));
    assert_problem(
        &format!("{groups}{}", acnp("priority: 1\nappliedTo: [{group: g}]\ningress:\n- {action: Drop, from: [{group: g, ipBlock: {cidr: 10.0.0.0/8}}]}\n")),
        "spec.ingress[0].from[0].group",
        "cannot be set with other fields in the same peer (also set: ipBlock)",
    );
    let problems = validate(&snapshot(&format!(
        "{groups}{}",
        acnp("priority: 1\nappliedTo: [{group: g, podSelector: {}}]\n")
    )));
    assert!(
        problems.iter().any(|p| p.field == "spec.appliedTo[0].group"
            && p.reason
                .contains("cannot be set with other fields in the same appliedTo entry")),
        "{}",
        render(&problems)
    );
}

#[test]
fn except_must_be_strictly_inside_cidr() {
    let rule = |except: &str| {
        acnp_egress(&format!(
            "action: Drop, to: [{{ipBlock: {{cidr: 10.168.0.0/16, except: [{except}]}}}}]"
        ))
    };
    assert_valid(&rule("10.168.128.0/24, 10.168.0.1/32"));
    let field = "spec.egress[0].to[0].ipBlock.except[0]";
    assert_problem(
        &rule("10.169.0.0/24"),
        field,
        "10.169.0.0/24 is not strictly inside cidr 10.168.0.0/16",
    );
    assert_problem(&rule("10.168.0.0/16"), field, "not strictly inside");
    assert_problem(&rule("10.0.0.0/8"), field, "not strictly inside");
    assert_problem(
        &rule("fd00::/64"),
        field,
        "not in the address family of cidr 10.168.0.0/16",
    );
    assert_problem(
        &acnp_ingress("action: Drop, from: [{ipBlock: {cidr: 'fd00::/48', except: ['fd00:0:0:1::/64', 'fd01::/64']}}]"),
        "spec.ingress[0].from[0].ipBlock.except[1]",
        "not strictly inside",
    );
}

#[test]
fn ports_and_end_ports() {
    let rule = |ports: &str| acnp_ingress(&format!("action: Allow, ports: [{ports}]"));
    assert_valid(&rule("{port: 8080, endPort: 9000}, {protocol: UDP, port: 53}, {port: http}, {protocol: SCTP}, {port: 1, endPort: 65535}, {port: 80, endPort: 80}"));
    let f = "spec.ingress[0].ports[0]";
    assert_problem(
        &rule("{endPort: 9000}"),
        &format!("{f}.endPort"),
        "requires a numeric port",
    );
    assert_problem(
        &rule("{port: 9000, endPort: 8080}"),
        &format!("{f}.endPort"),
        "must not be lower than port 9000",
    );
    assert_problem(
        &rule("{port: 0}"),
        &format!("{f}.port"),
        "must be between 1 and 65535, got 0",
    );
    assert_problem(&rule("{port: 65536}"), &format!("{f}.port"), "got 65536");
    assert_problem(
        &rule("{port: 80, endPort: 70000}"),
        &format!("{f}.endPort"),
        "must be between 1 and 65535",
    );
    assert_problem(
        &rule("{port: http, endPort: 90}"),
        &format!("{f}.endPort"),
        "cannot be used with a named port",
    );
    assert_problem(
        &rule("{port: '8080'}"),
        &format!("{f}.port"),
        "neither a number nor a valid port name",
    );
    assert_problem(
        &rule("{port: Web_Port}"),
        &format!("{f}.port"),
        "valid port name",
    );
}

#[test]
fn to_services_restrictions() {
    assert_valid(&acnp_egress(
        "action: Drop, toServices: [{name: svc, namespace: ns}]",
    ));
    assert_problem(
        &acnp_egress(
            "action: Drop, toServices: [{name: svc, namespace: ns}], to: [{podSelector: {}}]",
        ),
        "spec.egress[0].toServices",
        "cannot be used with `to`, `ports` or `protocols` in the same rule",
    );
    assert_problem(
        &acnp_egress("action: Drop, toServices: [{name: svc, namespace: ns}], ports: [{port: 80}]"),
        "spec.egress[0].toServices",
        "cannot be used with `to`, `ports` or `protocols` in the same rule",
    );
    assert_problem(
        &acnp_egress("action: Drop, toServices: [{name: svc, namespace: ns}], protocols: [{icmp: {icmpType: 8}}]"),
        "spec.egress[0].toServices",
        "cannot be used with `to`, `ports` or `protocols` in the same rule",
    );
    assert_problem(
        &acnp_ingress("action: Drop, toServices: [{name: svc, namespace: ns}]"),
        "spec.ingress[0].toServices",
        "only allowed in egress rules",
    );
    assert_problem(
        &acnp_egress("action: Drop, toServices: [{name: '', namespace: ns}]"),
        "spec.egress[0].toServices[0].name",
        "must not be empty",
    );
}

/// Antrea's CRDs: a namespaced policy's reference may leave `namespace`
/// out (its own Namespace), a cluster-scoped one must name it; `scope` is
/// `Cluster` or `ClusterSet` (admitted, a Multicluster Service tollgate
/// cannot see: warned) in a ClusterNetworkPolicy, any string in a
/// NetworkPolicy (read as Cluster unless ClusterSet: warned).
#[test]
fn to_services_namespace_and_scope_as_antreas_crds_have_them() {
    let annp_egress = |services: &str| {
        annp(&format!(
            "priority: 1\nappliedTo: [{{podSelector: {{}}}}]\negress:\n  - action: Drop\n    toServices: {services}\n"
        ))
    };
    assert_valid(&annp_egress("[{name: svc}]"));
    assert_valid(&annp_egress("[{name: svc, scope: Cluster}]"));
    assert_valid(&acnp_egress(
        "action: Drop, toServices: [{name: svc, namespace: ns, scope: Cluster}]",
    ));
    assert_problem(
        &acnp_egress("action: Drop, toServices: [{name: svc}]"),
        "spec.egress[0].toServices[0].namespace",
        "must not be empty in a cluster-scoped policy",
    );
    assert_warning(
        &annp_egress("[{name: svc, scope: ClusterSet}]"),
        "spec.egress[0].toServices[0].scope",
        "Antrea Multicluster, which tollgate does not read",
    );
    assert_warning(
        &annp_egress("[{name: svc, scope: Region}]"),
        "spec.egress[0].toServices[0].scope",
        "`Region` is neither Cluster nor ClusterSet: read as Cluster",
    );
    assert_problem(
        &acnp_egress("action: Drop, toServices: [{name: svc, namespace: ns, scope: Region}]"),
        "spec.egress[0].toServices[0].scope",
        "must be Cluster or ClusterSet, got `Region`",
    );
}

#[test]
fn from_and_to_match_the_direction() {
    assert_valid(&acnp_ingress("action: Drop, from: [{podSelector: {}}]"));
    assert_valid(&acnp_egress("action: Drop, to: [{podSelector: {}}]"));
    assert_problem(
        &acnp_egress("action: Drop, from: [{podSelector: {}}]"),
        "spec.egress[0].from",
        "egress rules select peers with `to`",
    );
    assert_problem(
        &acnp_ingress("action: Drop, to: [{podSelector: {}}]"),
        "spec.ingress[0].to",
        "ingress rules select peers with `from`",
    );
}

#[test]
fn fqdn_restrictions() {
    assert_valid(&acnp_egress(
        "action: Allow, to: [{fqdn: '*foobar.com'}], ports: [{port: 8080}]",
    ));
    assert_problem(
        &acnp_ingress("action: Allow, from: [{fqdn: foobar.com}]"),
        "spec.ingress[0].from[0].fqdn",
        "only allowed in the `to` of egress rules",
    );
    assert_problem(
        &acnp_egress("action: Allow, to: [{fqdn: ''}]"),
        "spec.egress[0].to[0].fqdn",
        "must not be empty",
    );
    // Antrea's pattern: ^[-0-9a-zA-Z.*]+$
    assert_valid(&acnp_egress(
        "action: Allow, to: [{fqdn: '*.Foo-Bar.example.COM'}]",
    ));
    for bad in [
        "a b.com",
        "foo_bar.com",
        "foo.com.",
        "ex@mple.com",
        "föö.com",
        "foo.com/x",
    ] {
        if bad == "foo.com." {
            assert_valid(&acnp_egress(&format!(
                "action: Allow, to: [{{fqdn: '{bad}'}}]"
            )));
            continue;
        }
        assert_problem(
            &acnp_egress(&format!("action: Allow, to: [{{fqdn: '{bad}'}}]")),
            "spec.egress[0].to[0].fqdn",
            &format!(
                "invalid characters in `{bad}`: only letters, digits, '-', '.' and '*' are allowed"
            ),
        );
    }
}

#[test]
fn igmp_cannot_be_combined() {
    let igmp = "protocols: [{igmp: {igmpType: 0x16}}]";
    assert_valid(&acnp_egress(&format!("action: Drop, {igmp}")));
    let field = "spec.egress[0].protocols";
    assert_problem(
        &acnp_egress("action: Drop, protocols: [{igmp: {igmpType: 0x16}}, {icmp: {}}]"),
        field,
        "IGMP cannot be used with icmp",
    );
    assert_problem(
        &acnp_egress(&format!(
            "action: Drop, {igmp}, to: [{{podSelector: {{}}}}]"
        )),
        field,
        "IGMP cannot be used with to",
    );
    assert_problem(
        &acnp_egress(&format!("action: Drop, {igmp}, ports: [{{port: 80}}]")),
        field,
        "IGMP cannot be used with ports",
    );
    // With toServices, Antrea's first refusal is the toServices one.
    let problems = validate(&snapshot(&acnp_egress(&format!(
        "action: Drop, {igmp}, toServices: [{{name: s, namespace: n}}]"
    ))));
    assert_eq!(
        problems[0].to_string(),
        "t.yaml: ClusterNetworkPolicy p: spec.egress[0].toServices: cannot be used with `to`, `ports` or `protocols` in the same rule"
    );
    assert_eq!(problems[1].field, field);
    assert_eq!(problems[1].reason, "IGMP cannot be used with toServices");
    // The webhook remembers IGMP (and ICMP) across the rules of a policy.
    let ingress_igmp = "priority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Drop, protocols: [{igmp: {igmpType: 0x11}}]}\n";
    assert_valid(&acnp(ingress_igmp));
    assert_problem(
        &acnp(&format!(
            "{ingress_igmp}egress:\n- {{action: Drop, to: [{{podSelector: {{}}}}]}}\n"
        )),
        "spec.egress[0]",
        "cannot use to in a policy whose spec.ingress[0] uses IGMP (Antrea refuses the policy)",
    );
    assert_problem(
        &acnp(&format!(
            "{ingress_igmp}- {{action: Drop, protocols: [{{icmp: {{}}}}]}}\n"
        )),
        "spec.ingress[1]",
        "cannot use icmp in a policy whose spec.ingress[0] uses IGMP (Antrea refuses the policy)",
    );
    assert_problem(
        &acnp_ingress(
            "action: Drop, protocols: [{igmp: {igmpType: 0x11}}], from: [{podSelector: {}}]",
        ),
        "spec.ingress[0].protocols",
        "IGMP cannot be used with from",
    );
}

#[test]
fn igmp_types_and_group_addresses() {
    assert_valid(&acnp_ingress(
        "action: Drop, protocols: [{igmp: {igmpType: 0x11, groupAddress: 224.0.0.1}}]",
    ));
    assert_valid(&acnp_ingress("action: Allow, protocols: [{igmp: {}}]"));
    for t in ["0x12", "0x16", "0x22", "18"] {
        assert_valid(&acnp_egress(&format!(
            "action: Drop, protocols: [{{igmp: {{igmpType: {t}, groupAddress: 225.1.2.3}}}}]"
        )));
    }
    assert_problem(
        &acnp_ingress("action: Drop, protocols: [{igmp: {igmpType: 0x16}}]"),
        "spec.ingress[0].protocols[0].igmp.igmpType",
        "ingress rules only support the IGMP membership query (0x11), got 0x16",
    );
    // Antrea's webhook only asks for a multicast group address, in both
    // directions.
    assert_valid(&acnp_ingress(
        "action: Drop, protocols: [{igmp: {igmpType: 0x11, groupAddress: 225.1.2.3}}]",
    ));
    assert_problem(
        &acnp_ingress(
            "action: Drop, protocols: [{igmp: {igmpType: 0x11, groupAddress: 10.1.2.3}}]",
        ),
        "spec.ingress[0].protocols[0].igmp.groupAddress",
        "must be an IPv4 multicast address, got 10.1.2.3",
    );
    assert_problem(
        &acnp_egress("action: Drop, protocols: [{igmp: {igmpType: 0x11}}]"),
        "spec.egress[0].protocols[0].igmp.igmpType",
        "egress rules only support IGMP membership reports (0x12, 0x16, 0x22), got 0x11",
    );
    assert_problem(
        &acnp_egress("action: Drop, protocols: [{igmp: {groupAddress: 10.0.0.1}}]"),
        "spec.egress[0].protocols[0].igmp.groupAddress",
        "must be an IPv4 multicast address",
    );
}

#[test]
fn igmp_rules_cannot_pass_or_reject() {
    assert_valid(&acnp_egress("action: Allow, protocols: [{igmp: {}}]"));
    for action in ["Pass", "Reject"] {
        assert_problem(
            &acnp_egress(&format!("action: {action}, protocols: [{{igmp: {{}}}}]")),
            "spec.egress[0].action",
            &format!("{action} is not supported for IGMP rules"),
        );
    }
}

#[test]
fn multicast_ip_blocks_cannot_pass_or_reject() {
    assert_valid(&acnp_egress(
        "action: Drop, to: [{ipBlock: {cidr: 225.1.2.3/32}}]",
    ));
    assert_valid(&acnp_egress(
        "action: Reject, to: [{ipBlock: {cidr: 10.1.2.3/32}}]",
    ));
    assert_problem(
        &acnp_egress("action: Reject, to: [{ipBlock: {cidr: 225.1.2.3/32}}]"),
        "spec.egress[0].action",
        "Reject is not supported for multicast traffic",
    );
}

#[test]
fn protocol_entries_set_exactly_one_protocol() {
    assert_valid(&acnp_egress(
        "action: Reject, protocols: [{icmp: {icmpType: 8, icmpCode: 0}}, {icmp: {}}]",
    ));
    assert_problem(
        &acnp_egress("action: Reject, protocols: [{}]"),
        "spec.egress[0].protocols[0]",
        "set one of icmp or igmp",
    );
    assert_problem(
        &acnp_egress("action: Drop, protocols: [{icmp: {}, igmp: {}}]"),
        "spec.egress[0].protocols[0]",
        "set only one of icmp or igmp",
    );
}

#[test]
fn icmp_type_and_code() {
    assert_valid(&acnp_egress(
        "action: Drop, protocols: [{icmp: {icmpType: 255, icmpCode: 255}}, {icmp: {icmpType: 0}}]",
    ));
    let f = "spec.egress[0].protocols[0].icmp";
    assert_problem(
        &acnp_egress("action: Drop, protocols: [{icmp: {icmpCode: 0}}]"),
        &format!("{f}.icmpCode"),
        "requires icmpType",
    );
    assert_problem(
        &acnp_egress("action: Drop, protocols: [{icmp: {icmpType: 256}}]"),
        &format!("{f}.icmpType"),
        "must be between 0 and 255, got 256",
    );
    assert_problem(
        &acnp_egress("action: Drop, protocols: [{icmp: {icmpType: 3, icmpCode: -1}}]"),
        &format!("{f}.icmpCode"),
        "got -1",
    );
}

#[test]
fn l7_rules_only_allow() {
    let l7 = "l7Protocols: [{http: {path: '/api/v2/*', host: foo.bar.com, method: GET}}]";
    assert_valid(&acnp_ingress(&format!("action: Allow, {l7}")));
    for action in ["Drop", "Reject", "Pass"] {
        assert_problem(
            &acnp_ingress(&format!("action: {action}, {l7}")),
            "spec.ingress[0].l7Protocols",
            &format!("can only be used with action Allow, not {action}"),
        );
    }
}

#[test]
fn l7_entries_set_exactly_one_protocol() {
    assert_valid(&acnp_egress(
        "action: Allow, l7Protocols: [{http: {}}, {tls: {sni: '*.foo.com'}}]",
    ));
    assert_problem(
        &acnp_egress("action: Allow, l7Protocols: [{}]"),
        "spec.egress[0].l7Protocols[0]",
        "set one of http or tls",
    );
    assert_problem(
        &acnp_egress("action: Allow, l7Protocols: [{http: {}, tls: {}}]"),
        "spec.egress[0].l7Protocols[0]",
        "set only one of http or tls",
    );
}

#[test]
fn l7_http_needs_tcp_and_no_to_services() {
    assert_valid(&acnp_egress(
        "action: Allow, ports: [{protocol: TCP, port: 80}], l7Protocols: [{http: {}}]",
    ));
    assert_problem(
        &acnp_egress(
            "action: Allow, ports: [{protocol: UDP, port: 80}], l7Protocols: [{http: {}}]",
        ),
        "spec.egress[0].ports[0].protocol",
        "HTTP rules can only use TCP ports",
    );
    assert_problem(
        &acnp_egress(
            "action: Allow, toServices: [{name: s, namespace: n}], l7Protocols: [{http: {}}]",
        ),
        "spec.egress[0].l7Protocols",
        "cannot be used with toServices",
    );
}

#[test]
fn rule_names_are_unique_within_a_policy() {
    let two = |a: &str, b: &str| {
        acnp(&format!(
            "priority: 1\nappliedTo: [{{podSelector: {{}}}}]\ningress:\n- {{{a}}}\negress:\n- {{{b}}}\n"
        ))
    };
    assert_valid(&two("action: Drop, name: x", "action: Drop, name: y"));
    // Identical unnamed rules in different directions get different names.
    assert_valid(&two("action: Drop", "action: Drop"));
    assert_problem(
        &two("action: Drop, name: x", "action: Allow, name: x"),
        "spec.egress[0].name",
        "`x` is already the name of spec.ingress[0]",
    );
    let generated = crate::model::Rule {
        action: RuleAction::Drop,
        name: None,
        applied_to: vec![],
        from: vec![],
        to: vec![],
        to_services: vec![],
        ports: vec![],
        protocols: vec![],
        l7_protocols: vec![],
        enable_logging: false,
        log_label: None,
        generated: Default::default(),
    }
    .generated_name(Direction::Ingress);
    let spec = format!(
        "priority: 1\nappliedTo: [{{podSelector: {{}}}}]\ningress:\n- {{action: Drop}}\n- {{action: Allow, name: {generated}}}\n"
    );
    assert_problem(
        &acnp(&spec),
        "spec.ingress[1].name",
        &format!("`{generated}` is the generated name of spec.ingress[0]"),
    );
    let reversed = format!(
        "priority: 1\nappliedTo: [{{podSelector: {{}}}}]\ningress:\n- {{action: Allow, name: {generated}}}\n- {{action: Drop}}\n"
    );
    assert_problem(&acnp(&reversed), "spec.ingress[1]", "the generated name");
    assert_problem(
        &acnp("priority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Drop, from: [{podSelector: {}}]}\n- {action: Drop, from: [{podSelector: {}}]}\n"),
        "spec.ingress[1]",
        "duplicate rule: identical to spec.ingress[0]",
    );
}

#[test]
fn service_account_stands_alone() {
    assert_valid(&acnp("priority: 1\nappliedTo: [{serviceAccount: {name: sa-1, namespace: ns-1}}]\negress:\n- {action: Drop, to: [{serviceAccount: {name: sa-2, namespace: ns-2}}]}\n"));
    assert_problem(
        &acnp("priority: 1\nappliedTo: [{serviceAccount: {name: sa-1, namespace: ns-1}, podSelector: {}}]\n"),
        "spec.appliedTo[0].serviceAccount",
        "cannot be set with other fields in the same appliedTo entry (also set: podSelector)",
    );
    assert_problem(
        &acnp_egress("action: Drop, to: [{serviceAccount: {name: sa, namespace: ns}, ipBlock: {cidr: 10.0.0.0/8}}]"),
        "spec.egress[0].to[0].serviceAccount",
        "cannot be set with other fields in the same peer",
    );
    assert_problem(
        &acnp_egress("action: Drop, to: [{serviceAccount: {name: sa}}]"),
        "spec.egress[0].to[0].serviceAccount.namespace",
        "must be set in a cluster-scoped object",
    );
}

#[test]
fn namespaces_and_namespace_selector_are_exclusive() {
    assert_valid(&acnp_ingress(
        "action: Pass, from: [{namespaces: {match: Self}, podSelector: {}}]",
    ));
    assert_problem(
        &acnp_ingress("action: Pass, from: [{namespaces: {match: Self}, namespaceSelector: {}}]"),
        "spec.ingress[0].from[0].namespaces",
        "cannot be set with namespaceSelector",
    );
}

#[test]
fn namespaces_sets_exactly_one_criterion() {
    assert_valid(&acnp_ingress(
        "action: Allow, from: [{namespaces: {sameLabels: [org, env]}}]",
    ));
    assert_problem(
        &acnp_ingress("action: Allow, from: [{namespaces: {match: Self, sameLabels: [org]}}]"),
        "spec.ingress[0].from[0].namespaces",
        "set only one of match or sameLabels",
    );
    assert_problem(
        &acnp_ingress("action: Allow, from: [{namespaces: {}}]"),
        "spec.ingress[0].from[0].namespaces",
        "set one of match or sameLabels",
    );
}

#[test]
fn empty_peer_is_rejected() {
    assert_valid(&acnp_ingress(
        "action: Allow, from: [{namespaceSelector: {}}]",
    ));
    assert_problem(
        &acnp_ingress("action: Allow, from: [{}]"),
        "spec.ingress[0].from[0]",
        "empty peer",
    );
}

#[test]
fn annp_applied_to_restrictions() {
    assert_valid(&annp("priority: 1\nappliedTo: [{podSelector: {}}]\n"));
    for (entry, field) in [
        ("{namespaceSelector: {}}", "namespaceSelector"),
        (
            "{podSelector: {}, namespaceSelector: {}}",
            "namespaceSelector",
        ),
        ("{nodeSelector: {}}", "nodeSelector"),
        ("{service: {name: s, namespace: shop}}", "service"),
    ] {
        assert_problem(
            &annp(&format!("priority: 1\nappliedTo: [{entry}]\n")),
            &format!("spec.appliedTo[0].{field}"),
            "not allowed in the appliedTo of an Antrea NetworkPolicy",
        );
    }
}

#[test]
fn annp_peers_cannot_use_namespaces() {
    assert_valid(&annp("priority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Allow, from: [{podSelector: {}, namespaceSelector: {}}]}\n"));
    assert_problem(
        &annp("priority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Allow, from: [{namespaces: {match: Self}}]}\n"),
        "spec.ingress[0].from[0].namespaces",
        "not supported in an Antrea NetworkPolicy",
    );
}

#[test]
fn annp_applied_to_group_cannot_select_namespaces() {
    let g = group("shop", "g", "podSelector: {}");
    let spec = "priority: 1\nappliedTo: [{group: g}]\n";
    assert_valid(&format!("{g}{}", annp(spec)));
    let g = group("shop", "g", "podSelector: {}\nnamespaceSelector: {}");
    assert_problem(
        &format!("{g}{}", annp(spec)),
        "spec.appliedTo[0].group",
        "selects by namespaceSelector",
    );
}

#[test]
fn node_selector_stands_alone_in_applied_to() {
    assert_valid(&acnp(
        "priority: 1\nappliedTo: [{nodeSelector: {matchLabels: {kubernetes.io/os: linux}}}]\n",
    ));
    assert_problem(
        &acnp("priority: 1\nappliedTo: [{nodeSelector: {}, podSelector: {}}]\n"),
        "spec.appliedTo[0].nodeSelector",
        "cannot be set with other fields in the same appliedTo entry (also set: podSelector)",
    );
    assert_problem(
        &acnp_ingress("action: Drop, from: [{nodeSelector: {}, podSelector: {}}]"),
        "spec.ingress[0].from[0].nodeSelector",
        "cannot be set with other fields in the same peer",
    );
}

#[test]
fn node_port_service_applied_to() {
    let on_service = "priority: 5
appliedTo: [{service: {name: svc-1, namespace: ns-1}}]
ingress:
- {action: Drop, from: [{ipBlock: {cidr: 1.1.1.0/24}}]}
";
    assert_valid(&acnp(on_service));
    assert_problem(
        &acnp(&format!("{on_service}egress:\n- {{action: Drop}}\n")),
        "spec.egress[0]",
        "can only have ingress rules",
    );
    assert_problem(
        &acnp(&on_service.replace("{ipBlock: {cidr: 1.1.1.0/24}}", "{podSelector: {}}")),
        "spec.ingress[0].from[0]",
        "can only use ipBlock in from",
    );
    assert_problem(
        &acnp(
            &on_service
                .replace("appliedTo: [", "appliedTo: [{ipBlockless: 1}, ")
                .replace("{ipBlockless: 1}, ", "{nodeSelector: {}}, "),
        ),
        "spec.appliedTo",
        "cannot apply to a NodePort Service and to other entities at the same time",
    );
    assert_problem(
        &acnp("priority: 5\nappliedTo: [{service: {name: svc-1, namespace: ns-1}, podSelector: {}}]\n"),
        "spec.appliedTo[0].service",
        "cannot be set with other fields",
    );
    let per_rule = "priority: 5
ingress:
- {action: Drop, appliedTo: [{service: {name: s, namespace: n}}], from: [{ipBlock: {cidr: 1.1.1.0/24}}]}
egress:
- {action: Drop, appliedTo: [{podSelector: {}}]}
";
    assert_valid(&acnp(per_rule));
    assert_problem(
        &acnp(&per_rule.replace(
            "- {action: Drop, appliedTo: [{podSelector: {}}]}",
            "- {action: Drop, appliedTo: [{service: {name: s, namespace: n}}]}",
        )),
        "spec.egress[0].appliedTo",
        "only ingress rules can be applied to a NodePort Service",
    );
}

#[test]
fn dangling_group_references_are_warnings() {
    let spec = "priority: 1\nappliedTo: [{group: g}]\n";
    assert_valid(&format!(
        "{}{}",
        cluster_group("g", "podSelector: {}"),
        acnp(spec)
    ));
    assert_warning(
        &acnp(spec),
        "spec.appliedTo[0].group",
        "ClusterGroup `g` does not exist (yet): selects nothing until it is defined",
    );
    // A namespaced Group does not satisfy an ACNP reference.
    assert_warning(
        &format!("{}{}", group("shop", "g", "podSelector: {}"), acnp(spec)),
        "spec.appliedTo[0].group",
        "ClusterGroup `g` does not exist (yet): selects nothing until it is defined",
    );
    assert_valid(&format!(
        "{}{}",
        group("shop", "g", "podSelector: {}"),
        annp(spec)
    ));
    assert_warning(
        &format!("{}{}", group("other", "g", "podSelector: {}"), annp(spec)),
        "spec.appliedTo[0].group",
        "Group `g` does not exist in Namespace shop (yet): selects nothing until it is defined",
    );
    assert_warning(
        &format!("{}{}", cluster_group("g", "podSelector: {}"), annp(spec)),
        "spec.appliedTo[0].group",
        "Group `g` does not exist in Namespace shop (yet): selects nothing until it is defined",
    );
    assert_warning(
        &format!(
            "{}{}",
            cluster_group("g", "podSelector: {}"),
            acnp("priority: 1\nappliedTo: [{group: g}]\negress:\n- {action: Drop, to: [{group: missing}]}\n")
        ),
        "spec.egress[0].to[0].group",
        "ClusterGroup `missing` does not exist",
    );
}

// ------------------------------------------------------------------ groups

#[test]
fn group_sets_at_most_one_kind_of_member() {
    assert_valid(&cluster_group(
        "g",
        "podSelector: {}\nnamespaceSelector: {}",
    ));
    assert_valid(&cluster_group(
        "g",
        "serviceReference: {name: s, namespace: n}",
    ));
    assert_valid(&cluster_group("g", "ipBlocks: [{cidr: 10.0.0.0/8}]"));
    assert_valid(&cluster_group("g", "ipBlock: {cidr: 10.0.0.0/8}"));
    assert_problem(
        &cluster_group("g", "podSelector: {}\nipBlocks: [{cidr: 10.0.0.0/8}]"),
        "spec",
        "at most one of podSelector, nodeSelector, externalEntitySelector, serviceReference, ipBlock, ipBlocks or childGroups can be set (namespaceSelector only with podSelector or externalEntitySelector), found podSelector and ipBlocks",
    );
    assert_problem(
        &group(
            "shop",
            "g",
            "serviceReference: {name: s}\nnamespaceSelector: {}",
        ),
        "spec",
        "at most one of podSelector, externalEntitySelector, serviceReference, ipBlocks or childGroups can be set (namespaceSelector only with podSelector or externalEntitySelector), found namespaceSelector and serviceReference",
    );
}

#[test]
fn group_ip_block_and_ip_blocks_are_exclusive() {
    assert_problem(
        &cluster_group(
            "g",
            "ipBlock: {cidr: 10.0.0.0/8}\nipBlocks: [{cidr: 11.0.0.0/8}]",
        ),
        "spec.ipBlock",
        "cannot be set together with ipBlocks",
    );
}

#[test]
fn group_ip_blocks_check_except() {
    assert_valid(&cluster_group(
        "g",
        "ipBlocks: [{cidr: 10.168.0.0/16, except: [10.168.128.0/24]}]",
    ));
    assert_problem(
        &cluster_group(
            "g",
            "ipBlocks: [{cidr: 10.0.0.0/8}, {cidr: 10.168.0.0/16, except: [10.0.0.0/8]}]",
        ),
        "spec.ipBlocks[1].except[0]",
        "not strictly inside",
    );
}

#[test]
fn dangling_child_groups_are_warnings() {
    let children = format!(
        "{}{}",
        cluster_group("a", "podSelector: {}"),
        cluster_group("b", "ipBlocks: [{cidr: 10.0.0.0/8}]")
    );
    assert_valid(&format!(
        "{children}{}",
        cluster_group("parent", "childGroups: [a, b]")
    ));
    assert_warning(
        &format!(
            "{children}{}",
            cluster_group("parent", "childGroups: [a, c]")
        ),
        "spec.childGroups[1]",
        "ClusterGroup `c` does not exist",
    );
    assert_valid(&format!(
        "{}{}",
        group("shop", "a", "podSelector: {}"),
        group("shop", "parent", "childGroups: [a]")
    ));
    assert_warning(
        &format!(
            "{}{}",
            group("other", "a", "podSelector: {}"),
            group("shop", "parent", "childGroups: [a]")
        ),
        "spec.childGroups[0]",
        "Group `a` does not exist in Namespace shop",
    );
}

#[test]
fn child_groups_nest_one_level() {
    let yaml = format!(
        "{}{}{}",
        cluster_group("leaf", "podSelector: {}"),
        cluster_group("middle", "childGroups: [leaf]"),
        cluster_group("top", "childGroups: [middle]")
    );
    assert_problem(
        &yaml,
        "spec.childGroups[0]",
        "ClusterGroup `middle` has childGroups itself; only one level of nesting is supported",
    );
}

#[test]
fn group_cannot_list_itself() {
    assert_problem(
        &cluster_group("g", "childGroups: [g]"),
        "spec.childGroups[0]",
        "cannot list itself",
    );
    assert_problem(
        &format!(
            "{}{}",
            cluster_group("a", "podSelector: {}"),
            cluster_group("g", "childGroups: [a, a]")
        ),
        "spec.childGroups[1]",
        "listed twice",
    );
}

// ------------------------------------------------------ K8s NetworkPolicy

#[test]
fn k8s_ports() {
    assert_valid(&k8s_np(
        "podSelector: {}\ningress:\n- ports: [{port: 80, endPort: 90}, {port: http}]\n",
    ));
    assert_problem(
        &k8s_np("podSelector: {}\ningress:\n- ports: [{endPort: 90}]\n"),
        "spec.ingress[0].ports[0].endPort",
        "requires a numeric port",
    );
    assert_problem(
        &k8s_np("podSelector: {}\negress:\n- ports: [{port: 90, endPort: 80}]\n"),
        "spec.egress[0].ports[0].endPort",
        "must not be lower than port 90",
    );
    assert_problem(
        &k8s_np("podSelector: {}\negress:\n- ports: [{port: 0}]\n"),
        "spec.egress[0].ports[0].port",
        "must be between 1 and 65535",
    );
}

#[test]
fn k8s_ip_block_stands_alone_and_excepts_fit() {
    assert_valid(&k8s_np("podSelector: {}\ningress:\n- from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}, {podSelector: {}, namespaceSelector: {}}]\n"));
    assert_problem(
        &k8s_np(
            "podSelector: {}\ningress:\n- from: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]\n",
        ),
        "spec.ingress[0].from[0].ipBlock",
        "cannot be set with podSelector or namespaceSelector",
    );
    assert_problem(
        &k8s_np("podSelector: {}\negress:\n- to: [{ipBlock: {cidr: 10.0.0.0/8, except: [11.0.0.0/16]}}]\n"),
        "spec.egress[0].to[0].ipBlock.except[0]",
        "not strictly inside",
    );
    assert_problem(
        &k8s_np("podSelector: {}\negress:\n- to: [{}]\n"),
        "spec.egress[0].to[0]",
        "empty peer",
    );
}

#[test]
fn problems_carry_origin_and_object() {
    let problems = validate(&snapshot(&acnp_egress(
        "action: Drop, from: [{podSelector: {}}]",
    )));
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].origin, Path::new("t.yaml"));
    assert_eq!(problems[0].object.kind, Some(Kind::ClusterNetworkPolicy));
    assert_eq!(problems[0].object.name, "p");
}

#[test]
fn a_given_name_equal_to_antreas_generated_name_conflicts() {
    // `ingress-allow-216bba8` is the name Antrea's webhook gives `{action:
    // Allow}` (core/tests/data/antrea-rule-names/cases.json, first vector).
    assert_problem(
        &acnp("priority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Allow}\n- {action: Drop, name: ingress-allow-216bba8}\n"),
        "spec.ingress[1].name",
        "`ingress-allow-216bba8` is the generated name of spec.ingress[0]",
    );
    // Antrea keeps one set of names for ingress and egress together.
    assert_problem(
        &acnp("priority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Allow}\negress:\n- {action: Drop, name: ingress-allow-216bba8}\n"),
        "spec.egress[0].name",
        "`ingress-allow-216bba8` is the generated name of spec.ingress[0]",
    );
    assert_valid(&acnp("priority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Allow, enableLogging: true}\n- {action: Drop, name: ingress-allow-216bba8}\n"));
}

#[test]
fn source_ports() {
    let rule = |ports: &str| acnp_ingress(&format!("action: Allow, ports: [{ports}]"));
    assert_valid(&rule("{protocol: TCP, sourcePort: 32768, sourceEndPort: 60999}, {sourcePort: 53}, {protocol: UDP, port: 53, sourcePort: 1000, sourceEndPort: 1000}, {port: http, sourcePort: 1}"));
    let f = "spec.ingress[0].ports[0]";
    assert_problem(
        &rule("{sourceEndPort: 9000}"),
        &format!("{f}.sourceEndPort"),
        "requires sourcePort",
    );
    assert_problem(
        &rule("{sourcePort: 9000, sourceEndPort: 8080}"),
        &format!("{f}.sourceEndPort"),
        "must not be lower than sourcePort 9000, got 8080",
    );
    assert_problem(
        &rule("{sourcePort: 0}"),
        &format!("{f}.sourcePort"),
        "must be between 1 and 65535, got 0",
    );
    assert_problem(
        &rule("{sourcePort: 80, sourceEndPort: 65536}"),
        &format!("{f}.sourceEndPort"),
        "must be between 1 and 65535, got 65536",
    );
    assert_problem(
        &rule("{sourcePort: 70000, sourceEndPort: 80}"),
        &format!("{f}.sourcePort"),
        "must be between 1 and 65535, got 70000",
    );
}

#[test]
fn selector_labels_follow_kubernetes_syntax() {
    let applied = |sel: &str| {
        acnp(&format!(
            "priority: 1\nappliedTo: [{{podSelector: {sel}}}]\n"
        ))
    };
    assert_valid(&applied(
        "{matchLabels: {app.kubernetes.io/name: web, tier: ''}, matchExpressions: [{key: env, operator: In, values: [prod]}]}",
    ));
    assert_problem(
        &applied("{matchLabels: {'-app': web}}"),
        "spec.appliedTo[0].podSelector.matchLabels",
        "invalid label key `-app`: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
    );
    assert_problem(
        &applied("{matchLabels: {app: 'a b'}}"),
        "spec.appliedTo[0].podSelector.matchLabels.app",
        "invalid label value `a b`: must consist of alphanumeric characters",
    );
    assert_problem(
        &applied("{matchLabels: {Example.com/app: web}}"),
        "spec.appliedTo[0].podSelector.matchLabels",
        "invalid label key `Example.com/app`: prefix part must be a lowercase DNS subdomain",
    );
    assert_problem(
        &applied("{matchExpressions: [{key: 'a$', operator: Exists}]}"),
        "spec.appliedTo[0].podSelector.matchExpressions[0].key",
        "invalid label key `a$`",
    );
    assert_problem(
        &applied("{matchExpressions: [{key: a, operator: In, values: ['x/y']}]}"),
        "spec.appliedTo[0].podSelector.matchExpressions[0].values[0]",
        "invalid label value `x/y`",
    );
    assert_problem(
        &applied("{matchExpressions: [{key: a, operator: NotIn}]}"),
        "spec.appliedTo[0].podSelector.matchExpressions[0].values",
        "must be non-empty for operator NotIn",
    );
    assert_problem(
        &applied("{matchExpressions: [{key: a, operator: Exists, values: [x]}]}"),
        "spec.appliedTo[0].podSelector.matchExpressions[0].values",
        "must be empty for operator Exists",
    );
    // Peers, groups and Kubernetes NetworkPolicies too.
    assert_problem(
        &acnp_ingress("action: Drop, from: [{namespaceSelector: {matchLabels: {'a b': x}}}]"),
        "spec.ingress[0].from[0].namespaceSelector.matchLabels",
        "invalid label key `a b`",
    );
    assert_problem(
        &acnp_ingress("action: Drop, from: [{nodeSelector: {matchLabels: {a: '-x'}}}]"),
        "spec.ingress[0].from[0].nodeSelector.matchLabels.a",
        "invalid label value `-x`",
    );
    assert_problem(
        &cluster_group("g", "namespaceSelector: {matchLabels: {'x/': y}}"),
        "spec.namespaceSelector.matchLabels",
        "invalid label key `x/`: name part must not be empty",
    );
    assert_problem(
        &k8s_np("podSelector: {matchLabels: {'a:b': c}}\n"),
        "spec.podSelector.matchLabels",
        "invalid label key `a:b`",
    );
    assert_problem(
        &k8s_np("podSelector: {}\ningress:\n- from: [{podSelector: {matchLabels: {a: 'b c'}}}]\n"),
        "spec.ingress[0].from[0].podSelector.matchLabels.a",
        "invalid label value `b c`",
    );
}

#[test]
fn same_labels_keys_are_qualified_names() {
    assert_valid(&acnp_ingress(
        "action: Drop, from: [{namespaces: {sameLabels: [org, kubernetes.io/metadata.name]}}]",
    ));
    assert_problem(
        &acnp_ingress("action: Drop, from: [{namespaces: {sameLabels: [org, 'bad key']}}]"),
        "spec.ingress[0].from[0].namespaces.sameLabels[1]",
        "invalid label key `bad key`",
    );
    assert_problem(
        &acnp_ingress("action: Drop, from: [{namespaces: {sameLabels: ['']}}]"),
        "spec.ingress[0].from[0].namespaces.sameLabels[0]",
        "invalid label key ``: name part must not be empty",
    );
}

#[test]
fn node_selector_is_not_allowed_in_a_rule_applied_to() {
    assert_valid(&acnp(
        "priority: 1\nappliedTo: [{nodeSelector: {}}]\ningress:\n- {action: Drop}\n",
    ));
    assert_problem(
        &acnp("priority: 1\ningress:\n- {action: Drop, appliedTo: [{nodeSelector: {}}]}\n"),
        "spec.ingress[0].appliedTo[0].nodeSelector",
        "not allowed in a rule-level appliedTo (only in spec.appliedTo)",
    );
}

#[test]
fn ip_block_or_fqdn_with_selectors_is_a_warning() {
    assert_warning(
        &acnp_ingress("action: Drop, from: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]"),
        "spec.ingress[0].from[0].ipBlock",
        "only ipBlock is used in this peer, as in Antrea; ignored: podSelector",
    );
    assert_warning(
        &acnp_egress(
            "action: Drop, to: [{fqdn: a.com, namespaceSelector: {}, ipBlock: {cidr: 10.0.0.0/8}}]",
        ),
        "spec.egress[0].to[0].ipBlock",
        "ignored: namespaceSelector, fqdn",
    );
    assert_warning(
        &acnp_egress("action: Drop, to: [{fqdn: a.com, podSelector: {}}]"),
        "spec.egress[0].to[0].fqdn",
        "only fqdn is used in this peer, as in Antrea; ignored: podSelector",
    );
    // group, serviceAccount and nodeSelector still stand alone.
    assert_problem(
        &acnp_ingress("action: Drop, from: [{nodeSelector: {}, ipBlock: {cidr: 10.0.0.0/8}}]"),
        "spec.ingress[0].from[0].nodeSelector",
        "cannot be set with other fields in the same peer (also set: ipBlock)",
    );
}

#[test]
fn multicast_and_unicast_do_not_mix() {
    assert_valid(&acnp_egress(
        "action: Drop, to: [{ipBlock: {cidr: 225.1.2.3/32}}, {ipBlock: {cidr: 239.0.0.0/8}}]",
    ));
    assert_problem(
        &acnp_egress("action: Drop, to: [{ipBlock: {cidr: 225.1.2.3/32}}, {ipBlock: {cidr: 10.0.0.0/8}}]"),
        "spec.egress[0].to",
        "multicast and unicast addresses cannot be mixed in one rule (to[0] is multicast, to[1] is unicast)",
    );
    let findings = check(&snapshot(&acnp_egress(
        "action: Drop, to: [{ipBlock: {cidr: 225.1.2.3/32}, podSelector: {}}]",
    )));
    assert_eq!(
        findings.errors.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        ["t.yaml: ClusterNetworkPolicy p: spec.egress[0].to[0].ipBlock: a multicast address cannot be set with selectors in the same peer"]
    );
    assert_valid(&cluster_group(
        "m",
        "ipBlocks: [{cidr: 224.0.0.0/4}, {cidr: 225.1.1.1/32}]",
    ));
    assert_problem(
        &cluster_group("m", "ipBlocks: [{cidr: 10.0.0.0/8}, {cidr: 225.1.1.1/32}]"),
        "spec.ipBlocks",
        "multicast and unicast addresses cannot be mixed (ipBlocks[1] is multicast, ipBlocks[0] is unicast)",
    );
}

#[test]
fn group_member_fields_as_antreas_webhook() {
    for spec in [
        "nodeSelector: {matchLabels: {role: control-plane}}",
        "externalEntitySelector: {matchLabels: {app: vm}}",
        "externalEntitySelector: {}\nnamespaceSelector: {matchLabels: {env: prod}}",
        "namespaceSelector: {}",
        "podSelector: {}",
    ] {
        assert_valid(&cluster_group("g", spec));
    }
    assert_valid(&group(
        "shop",
        "g",
        "externalEntitySelector: {}\nnamespaceSelector: {}",
    ));
    let both = "at most one of podSelector, nodeSelector, externalEntitySelector, serviceReference, ipBlock, ipBlocks or childGroups can be set (namespaceSelector only with podSelector or externalEntitySelector), found";
    for (spec, found) in [
        (
            "nodeSelector: {}\nnamespaceSelector: {}",
            "namespaceSelector and nodeSelector",
        ),
        (
            "nodeSelector: {}\npodSelector: {}",
            "podSelector and nodeSelector",
        ),
        (
            "podSelector: {}\nexternalEntitySelector: {}",
            "podSelector and externalEntitySelector",
        ),
        (
            "podSelector: {}\nnamespaceSelector: {}\nexternalEntitySelector: {}",
            "podSelector and namespaceSelector and externalEntitySelector",
        ),
        (
            "nodeSelector: {}\nserviceReference: {name: s, namespace: n}",
            "nodeSelector and serviceReference",
        ),
    ] {
        assert_problem(
            &cluster_group("g", spec),
            "spec",
            &format!("{both} {found}"),
        );
    }
    assert_problem(
        &group("shop", "g", "nodeSelector: {}"),
        "spec.nodeSelector",
        "a Group cannot select Nodes (only a ClusterGroup can)",
    );
}

#[test]
fn legacy_static_tier_names_are_the_lowercase_tiers() {
    for legacy in crate::model::LEGACY_STATIC_TIERS {
        let spec = format!("tier: {legacy}\npriority: 1\nappliedTo: [{{podSelector: {{}}}}]\ningress:\n- {{action: Drop}}\n");
        assert_valid(&acnp(&spec));
        assert_valid(&annp(&spec));
    }
    // Antrea keeps only these exact spellings.
    assert_problem(
        &acnp("tier: EMERGENCY\npriority: 1\nappliedTo: [{podSelector: {}}]\n"),
        "spec.tier",
        "Tier `EMERGENCY` does not exist",
    );
    assert_problem(
        &acnp("tier: Baseline\npriority: 1\nappliedTo: [{podSelector: {}}]\ningress:\n- {action: Pass}\n"),
        "spec.ingress[0].action",
        "Pass is not allowed in the baseline Tier",
    );
}

#[test]
fn log_labels_have_the_shape_of_a_label_value() {
    assert_valid(&acnp_ingress(
        "action: Drop, enableLogging: true, logLabel: my_label-1.x",
    ));
    assert_valid(&acnp_ingress(
        "action: Drop, enableLogging: true, logLabel: ''",
    ));
    assert_problem(
        &acnp_ingress("action: Drop, enableLogging: true, logLabel: 'my label'"),
        "spec.ingress[0].logLabel",
        "invalid log label `my label`: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
    );
    assert_problem(
        &acnp_ingress(&format!("action: Drop, logLabel: {}", "a".repeat(64))),
        "spec.ingress[0].logLabel",
        "must be no more than 63 characters",
    );
}

#[test]
fn dry_run_annotation_values_other_than_true_are_warnings() {
    let acnp = |value: &str| {
        format!(
            "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata:\n  name: p\n  annotations: {{tollgate.io/dry-run: '{value}'}}\nspec:\n  priority: 1\n  appliedTo: [{{podSelector: {{}}}}]\n  ingress: [{{action: Drop}}]\n"
        )
    };
    assert_warning(
        &acnp("True"),
        "metadata.annotations.tollgate.io/dry-run",
        "\"True\" is not \"true\": the policy is enforced",
    );
    assert_warning(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  annotations: {tollgate.io/dry-run: 'true'}\n",
        "metadata.annotations.tollgate.io/dry-run",
        "only policies can be dry-run",
    );
    let findings = check(&snapshot(&acnp("true")));
    assert!(
        findings.errors.is_empty() && findings.warnings.is_empty(),
        "{findings:?}"
    );
}

/// A checker kept across snapshots that share objects finds what a fresh
/// check finds at each step: a policy that did not change is checked
/// again when a Tier or group it is checked against came, changed or went
/// (its findings depend on them), and an object read from elsewhere is
/// checked again. Mutation: `Checker::walk` keeping the findings when the
/// Tiers and groups changed (no `kept.clear()`): the policy keeps "Tier
/// `mytier` does not exist" once the Tier exists: fails; findings kept
/// whatever the object's origin: the moved object is named by its old
/// file: fails.
#[test]
fn a_kept_checker_finds_what_a_fresh_check_finds_as_tiers_and_groups_change() {
    let policy = snapshot(&acnp(
        "priority: 1\ntier: mytier\nappliedTo: [{group: g}]\ningress: [{action: Drop, from: [{group: h}]}]\n",
    ));
    let tier = snapshot(&tier("mytier", 10));
    let g = snapshot(&cluster_group("g", "podSelector: {}\n"));
    let h = |spec: &str| snapshot(&cluster_group("h", spec));
    let (h_pods, h_block) = (
        h("podSelector: {}\n"),
        h("ipBlocks: [{cidr: 10.0.0.0/8}]\n"),
    );
    let with = |parts: &[&Snapshot]| Snapshot {
        objects: parts
            .iter()
            .flat_map(|s| s.objects.iter().cloned())
            .collect(),
    };
    let steps = [
        with(&[&policy]),
        with(&[&policy, &tier]),
        with(&[&policy, &tier, &g]),
        with(&[&policy, &tier, &g, &h_pods]),
        with(&[&policy, &tier, &g, &h_block]),
        with(&[&policy, &g, &h_block]),
        with(&[&policy, &g, &h_block]),
    ];
    let mut checker = Checker::new(true);
    let mut seen = Vec::new();
    for step in &steps {
        let kept = checker.check(step);
        let fresh = check(step);
        assert_eq!(render(&kept.errors), render(&fresh.errors));
        assert_eq!(render(&kept.warnings), render(&fresh.warnings));
        seen.push(render(&fresh.errors) + &render(&fresh.warnings));
    }
    seen.dedup();
    assert!(
        seen.len() >= 4,
        "the steps find different things: {seen:#?}"
    );
    // The same object read from another file (the Tiers and groups as at
    // the last check): checked again, named so.
    checker.check(&steps[0]);
    let mut moved = steps[0].clone();
    moved.objects[0].origin = Path::new("u.yaml").into();
    let errors = render(&checker.check(&moved).errors);
    assert!(errors.contains("u.yaml"), "{errors}");
}

//! Every example of the Antrea spec that Antrea admits
//! (`tests/data/spec/*.yaml`, with the groups and Tiers they reference
//! added) loads and validates without a single problem; the four that write
//! `action: Deny`, which Antrea's schema refuses, are refused with a hint;
//! deliberately broken variants are rejected with the expected message.

use std::fs;
use std::path::{Path, PathBuf};

use tollgate::decode::parse_documents;
use tollgate::source::{load_and_validate, load_paths};
use tollgate::validate::{check, validate, Problem};

fn spec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/spec")
}

/// The spec's examples that write `action: Deny` (not an Antrea action),
/// with the field where each does.
const DENY_EXAMPLES: [(&str, &str); 4] = [
    ("allow-self-ns.yaml", "spec.egress[1].action"),
    ("deny-self-ns-a-to-b.yaml", "spec.ingress[0].action"),
    (
        "isolation-based-on-org-and-env.yaml",
        "spec.ingress[1].action",
    ),
    ("isolation-based-on-org.yaml", "spec.egress[1].action"),
];

fn is_deny_example(path: &Path) -> bool {
    DENY_EXAMPLES
        .iter()
        .any(|(name, _)| path.file_name().is_some_and(|f| f == *name))
}

/// Every spec example Antrea admits.
fn spec_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(spec_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !is_deny_example(p))
        .collect();
    files.sort();
    files
}

fn read(name: &str) -> String {
    fs::read_to_string(spec_dir().join(name)).unwrap()
}

/// The text of a spec file without what this suite added after the
/// example itself.
fn example_only(name: &str) -> String {
    let text = read(name);
    match text.find("# Added") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

fn problems_of(text: &str) -> Vec<Problem> {
    let (objects, mut problems) = parse_documents(Path::new("variant.yaml"), text);
    assert!(problems.is_empty(), "variant does not decode: {problems:?}");
    problems.extend(validate(&tollgate::model::Snapshot { objects }));
    problems
}

#[track_caller]
fn assert_rejected(text: &str, field: &str, reason: &str) {
    let problems = problems_of(text);
    let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.field == field && p.reason.contains(reason)),
        "expected `{field}: …{reason}…` among {shown:#?}"
    );
}

#[test]
fn every_valid_spec_example_validates_cleanly() {
    let files = spec_files();
    assert!(files.len() >= 27, "spec examples missing: {files:?}");
    let mut objects = 0;
    for file in &files {
        match load_and_validate(std::slice::from_ref(file)) {
            Ok(snapshot) => {
                assert!(!snapshot.objects.is_empty(), "{} is empty", file.display());
                objects += snapshot.objects.len();
            }
            Err(problems) => {
                let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
                panic!("{} is rejected:\n{}", file.display(), shown.join("\n"));
            }
        }
    }
    assert!(objects >= 45, "only {objects} objects read");
}

#[test]
fn the_examples_also_validate_together() {
    // The two `test-annp-by-name` examples are one object in two versions;
    // keep one of them.
    let files: Vec<PathBuf> = spec_files()
        .into_iter()
        .filter(|f| !f.ends_with("test-annp-by-name-legacy-label.yaml"))
        .collect();
    let (snapshot, problems) = load_paths(&files);
    assert!(problems.is_empty(), "{problems:?}");
    let problems = validate(&snapshot);
    let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert!(problems.is_empty(), "{shown:#?}");
}

#[test]
fn deny_examples_are_refused_with_a_hint() {
    for (name, field) in DENY_EXAMPLES {
        let (_, problems) = load_paths(&[spec_dir().join(name)]);
        let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 1, "{shown:#?}");
        assert_eq!(problems[0].field, field);
        assert_eq!(
            problems[0].reason,
            "unknown action `Deny`, expected one of Allow, Drop, Reject, Pass (did you mean Drop?)"
        );
        // With Drop, as the spec meant, the example validates.
        let fixed = read(name).replace("action: Deny", "action: Drop");
        assert!(problems_of(&fixed).is_empty(), "{name}");
    }
}

#[test]
fn the_directory_loads_as_one_source() {
    let (snapshot, problems) = load_paths(&[spec_dir()]);
    let deny: Vec<&Problem> = problems
        .iter()
        .filter(|p| p.reason.contains("(did you mean Drop?)"))
        .collect();
    assert_eq!(deny.len(), problems.len(), "{problems:?}");
    assert_eq!(deny.len(), DENY_EXAMPLES.len(), "{problems:?}");
    // Loading the whole directory sees the duplicate test-annp-by-name; the
    // file read later (names sort `-` before `.`) is the one reported.
    let problems = validate(&snapshot);
    assert_eq!(problems.len(), 1, "{problems:?}");
    let shown = problems[0].to_string();
    assert!(
        shown.contains("/test-annp-by-name.yaml: NetworkPolicy.crd.antrea.io default/test-annp-by-name: metadata.name: duplicate object: already defined in ")
            && shown.ends_with("/test-annp-by-name-legacy-label.yaml"),
        "{shown}"
    );
}

#[test]
fn pass_in_the_baseline_tier_is_rejected() {
    let text = read("default-cluster-deny.yaml").replace(
        "  ingress:\n    - action: Drop",
        "  ingress:\n    - action: Pass",
    );
    assert_rejected(
        &text,
        "spec.ingress[0].action",
        "Pass is not allowed in the baseline Tier",
    );
}

#[test]
fn unresolved_cluster_groups_are_warnings() {
    // Antrea admits references to groups not created yet; `validate` warns.
    let warnings = |text: &str| {
        let (objects, problems) = parse_documents(Path::new("variant.yaml"), text);
        assert!(problems.is_empty(), "{problems:?}");
        let findings = check(&tollgate::model::Snapshot { objects });
        assert!(findings.errors.is_empty(), "{:?}", findings.errors);
        findings
            .warnings
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        warnings(&example_only("acnp-with-cluster-groups.yaml")),
        [
            "variant.yaml: ClusterNetworkPolicy acnp-with-cluster-groups: spec.appliedTo[0].group: ClusterGroup `test-cg-with-db-selector` does not exist (yet): selects nothing until it is defined",
            "variant.yaml: ClusterNetworkPolicy acnp-with-cluster-groups: spec.ingress[0].from[0].group: ClusterGroup `test-cg-with-frontend-selector` does not exist (yet): selects nothing until it is defined",
            "variant.yaml: ClusterNetworkPolicy acnp-with-cluster-groups: spec.egress[0].to[0].group: ClusterGroup `test-cg-with-ip-block` does not exist (yet): selects nothing until it is defined",
        ]
    );
    // The spec's nested ClusterGroup names a child it never defines.
    let nested = warnings(&example_only("cluster-groups.yaml"));
    assert!(
        nested.iter().any(|w| w.ends_with("spec.childGroups[1]: ClusterGroup `test-cg-ip-blocks` does not exist (yet): selects nothing until it is defined")),
        "{nested:#?}"
    );
    let nested = warnings(&example_only("groups.yaml"));
    assert!(
        nested.iter().any(|w| w.ends_with("spec.childGroups[1]: Group `test-grp-ip-blocks` does not exist in Namespace default (yet): selects nothing until it is defined")),
        "{nested:#?}"
    );
}

#[test]
fn to_services_with_ports_is_rejected() {
    let text = read("acnp-drop-to-services.yaml").replace(
        "      name: DropToServices",
        "      ports:\n        - port: 80\n      name: DropToServices",
    );
    assert_rejected(
        &text,
        "spec.egress[0].toServices",
        "cannot be used with `to`, `ports` or `protocols`",
    );
}

#[test]
fn except_outside_cidr_is_rejected() {
    let text = read("ip-block-except.yaml").replace("10.168.128.0/24", "10.169.128.0/24");
    assert_rejected(
        &text,
        "spec.egress[0].to[0].ipBlock.except[0]",
        "10.169.128.0/24 is not strictly inside cidr 10.168.0.0/16",
    );
    assert_rejected(&text, "spec.ipBlocks[0].except[0]", "not strictly inside");
}

#[test]
fn l7_rule_with_drop_is_rejected() {
    let text = read("ingress-allow-http-request-to-api-v2.yaml").replace(
        "      action: Allow      # All other",
        "      action: Drop       # All other",
    );
    assert_rejected(
        &text,
        "spec.ingress[0].l7Protocols",
        "can only be used with action Allow, not Drop",
    );
}

#[test]
fn fqdn_in_ingress_is_rejected() {
    let text = read("acnp-fqdn-all-foobar.yaml")
        .replace("  egress:", "  ingress:")
        .replace("    to:", "    from:");
    assert_rejected(
        &text,
        "spec.ingress[0].from[0].fqdn",
        "only allowed in the `to` of egress rules",
    );
}

#[test]
fn annp_applied_to_a_namespace_selecting_group_is_rejected() {
    let text = read("annp-with-groups.yaml").replace(
        "    - group: \"test-grp-with-db-selector\"",
        "    - group: \"test-grp-nondb-in-db-namespaces\"",
    );
    assert_rejected(
        &text,
        "spec.appliedTo[0].group",
        "selects by namespaceSelector",
    );
}

#[test]
fn igmp_report_in_ingress_is_rejected() {
    let text = read("acnp-with-igmp-drop.yaml").replacen("igmpType: 0x11", "igmpType: 0x16", 1);
    assert_rejected(
        &text,
        "spec.ingress[0].protocols[0].igmp.igmpType",
        "only support the IGMP membership query (0x11), got 0x16",
    );
}

#[test]
fn reserved_tier_priority_is_rejected() {
    let text = read("mytier.yaml").replace("priority: 10", "priority: 250");
    assert_rejected(
        &text,
        "spec.priority",
        "custom Tier priority must be between 0 and 249",
    );
}

#[test]
fn node_port_policy_with_egress_is_rejected() {
    let text = format!(
        "{}  egress:\n    - action: Drop\n",
        read("acnp-deny-external-client-nodeport-svc-access.yaml")
    );
    assert_rejected(&text, "spec.egress[0]", "can only have ingress rules");
}

// ------------------------------------------- Antrea's own examples (parity-b)

fn antrea_doc(name: &str) -> tollgate::model::Snapshot {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/antrea-docs")
        .join(name);
    match load_and_validate(std::slice::from_ref(&path)) {
        Ok(snapshot) => snapshot,
        Err(problems) => {
            let shown: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            panic!("{name} is rejected:\n{}", shown.join("\n"));
        }
    }
}

/// The verdict for a TCP flow `src:sport -> dst:dport` on the Node `node`.
fn tcp_verdict(
    snapshot: &tollgate::model::Snapshot,
    node: &str,
    (src, sport): (&str, u16),
    (dst, dport): (&str, u16),
) -> tollgate::packet::flow::Verdict {
    use tollgate::compile::{compile, LocalNode};
    use tollgate::packet::flow::{Flow, Transport};
    let ruleset = compile(
        snapshot,
        &LocalNode {
            name: node.into(),
            ..Default::default()
        },
    );
    let flow = Flow {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        transport: Transport::Tcp {
            src_port: sport,
            dst_port: dport,
        },
        local: None,
    };
    ruleset.classify(&flow, &tollgate::fqdn::NoFqdn).verdict
}

#[test]
fn antrea_docs_source_port_e2e_policies() {
    use tollgate::packet::flow::Verdict::{Allow, Drop};
    let snapshot = antrea_doc("source-port.yaml");
    let b_to_a =
        |sport, dport| tcp_verdict(&snapshot, "n", ("10.0.0.2", sport), ("10.0.0.1", dport));
    // An ephemeral client port is dropped on any port; another is not.
    assert_eq!(b_to_a(40000, 80), Drop);
    assert_eq!(b_to_a(40000, 8080), Drop);
    assert_eq!(b_to_a(1000, 80), Allow);
    assert_eq!(b_to_a(61000, 81), Allow);
    // a -> b is not selected.
    assert_eq!(
        tcp_verdict(&snapshot, "n", ("10.0.0.1", 40000), ("10.0.0.2", 80)),
        Allow
    );
}

#[test]
fn antrea_docs_node_policies_with_node_cluster_groups() {
    use tollgate::packet::flow::Verdict::{Allow, Drop};
    let snapshot = antrea_doc("node-cluster-groups.yaml");
    let on = |node| {
        move |src: &str, dst: &str, port| tcp_verdict(&snapshot, node, (src, 40000), (dst, port))
    };
    let control_plane = on("k8s-node-control-plane");
    assert_eq!(control_plane("10.10.1.1", "192.168.240.200", 80), Allow);
    assert_eq!(
        control_plane("192.168.240.201", "192.168.240.200", 80),
        Drop
    );
    assert_eq!(
        control_plane("192.168.240.201", "192.168.240.200", 22),
        Allow
    );
    assert_eq!(
        control_plane("192.168.240.200", "192.168.240.201", 22),
        Drop
    );
    assert_eq!(control_plane("192.168.240.200", "192.168.77.9", 22), Drop);
    assert_eq!(control_plane("192.168.240.200", "192.168.78.9", 22), Allow);
    // The worker is not in the appliedTo group: nothing applies there.
    let snapshot = antrea_doc("node-cluster-groups.yaml");
    assert_eq!(
        tcp_verdict(
            &snapshot,
            "k8s-node-worker-1",
            ("192.168.240.201", 40000),
            ("192.168.240.200", 22)
        ),
        Allow
    );
}

#[test]
fn antrea_docs_external_node_policy() {
    use tollgate::packet::flow::Verdict::{Allow, Reject};
    let snapshot = antrea_doc("external-node.yaml");
    // On the ExternalNode `vm-db`, annp1 rejects SSH from `role: front`
    // entities and from 172.16.100.5.
    let ssh_from = |src| tcp_verdict(&snapshot, "vm-db", (src, 40000), ("172.16.10.10", 22));
    assert_eq!(ssh_from("172.16.10.20"), Reject);
    assert_eq!(ssh_from("172.16.100.5"), Reject);
    assert_eq!(ssh_from("172.16.100.6"), Allow);
    // Elsewhere the policy applies to nothing.
    assert_eq!(
        tcp_verdict(
            &snapshot,
            "vm-front",
            ("172.16.100.5", 40000),
            ("172.16.10.20", 22)
        ),
        Allow
    );
}

#[test]
fn antrea_docs_variants_are_rejected() {
    let text = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/antrea-docs/source-port.yaml"),
    )
    .unwrap();
    assert_rejected(
        &text.replacen("          sourcePort: 32768\n", "", 1),
        "spec.ingress[0].ports[0].sourceEndPort",
        "requires sourcePort",
    );
    let text = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/antrea-docs/external-node.yaml"),
    )
    .unwrap();
    assert_rejected(
        &text.replace(
            "  namespace: vm-ns\nspec:\n  externalEntitySelector:",
            "  namespace: vm-ns\nspec:\n  podSelector: {}\n  externalEntitySelector:",
        ),
        "spec",
        "found podSelector and externalEntitySelector",
    );
}

/// The network-policy-api user stories (`site-src/user-stories.md`:
/// cluster-wide deny, cluster-wide allow, delegation with `Pass` and named
/// ports, baseline guardrails) in `v1alpha2`, story 4 (tenants) in the
/// `v1alpha1` `sameLabels` form (the `v1alpha2` API cannot express it yet),
/// and Antrea's `v1alpha1` samples (`docs/admin-network-policy.md`, the
/// first peer shape): every one validates.
#[test]
fn network_policy_api_user_stories_validate() {
    let cnp = |name: &str, tier: &str, priority: u32, body: &str| {
        format!(
            "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n  tier: {tier}\n  priority: {priority}\n{body}---\n"
        )
    };
    let stories = [
        cnp(
            "cluster-wide-deny-example",
            "Admin",
            10,
            "  subject:\n    namespaces: {matchLabels: {kubernetes.io/metadata.name: sensitive-ns}}\n  ingress:\n  - name: select-all-deny-all\n    action: Deny\n    from: [{namespaces: {matchLabels: {}}}]\n",
        ),
        cnp(
            "cluster-wide-allow-example",
            "Admin",
            30,
            "  subject: {namespaces: {}}\n  ingress:\n  - name: allow-monitoring-ns-ingress\n    action: Accept\n    from: [{namespaces: {matchLabels: {kubernetes.io/metadata.name: monitoring-ns}}}]\n  egress:\n  - name: allow-kube-dns-egress\n    action: Accept\n    to:\n    - pods:\n        namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n        podSelector: {matchLabels: {app: kube-dns}}\n",
        ),
        cnp(
            "pub-svc-delegate-example",
            "Admin",
            20,
            "  subject: {namespaces: {}}\n  egress:\n  - action: Pass\n    to:\n    - pods:\n        namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: bar-ns-1}}\n        podSelector: {matchLabels: {app: svc-pub}}\n    protocols:\n    - tcp: {destinationPort: {number: 8080}}\n    - destinationNamedPort: web-alt\n    - udp: {destinationPort: {number: 53}}\n",
        ),
        cnp(
            "default",
            "Baseline",
            10,
            "  subject: {namespaces: {}}\n  ingress:\n  - action: Deny\n    from: [{namespaces: {}}]\n",
        ),
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: tenant-creation-example}\nspec:\n  priority: 50\n  subject:\n    namespaces:\n      matchExpressions: [{key: tenant, operator: Exists}]\n  ingress:\n  - action: Pass\n    from: [{namespaces: {sameLabels: [tenant]}}]\n  - action: Deny\n    from: [{namespaces: {namespaceSelector: {}}}]\n---\n".to_string(),
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: BaselineAdminNetworkPolicy\nmetadata: {name: default}\nspec:\n  subject: {namespaces: {}}\n  ingress:\n  - action: Deny\n    from:\n    - namespaces:\n        namespaceSelector: {}\n".to_string(),
    ];
    for story in &stories {
        let problems = problems_of(story);
        assert!(problems.is_empty(), "{story}\n{problems:#?}");
    }
    // The story 4 text the API publishes (`matchExpressions` as a map with
    // `;`) is not valid YAML for a selector: refused, not guessed at.
    let (_, problems) = parse_documents(
        Path::new("story4.yaml"),
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: t}\nspec:\n  tier: Admin\n  priority: 50\n  subject:\n    namespaces:\n      matchExpressions: {key: \"tenant\"; operator: Exists}\n",
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
}

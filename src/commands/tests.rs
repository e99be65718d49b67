use super::get::{filter_fqdn_rows, fqdn_rows, fqdn_selectors};
use super::render::FqdnRow;
use super::render::{
    dry_run_text, render_endpoints, render_event, render_fqdn, render_policies, render_skipped,
    select_json,
};
use crate::cli::{GetFilter, GetOutput, SkippedFilter};
use crate::datapath::{plan::fqdn_set, Family};
use crate::explain::{DryRunReport, EndpointReport};
use crate::fqdn::FqdnPattern;
use crate::ruleset::PolicySummary;
use crate::status::LearnedSetReport;

#[test]
fn skipped_objects_render_as_a_table_json_and_yaml() {
    use crate::source::kube::{Identity, Reason, Refusal};
    let refused = [Refusal {
        kind: "ClusterNetworkPolicy".into(),
        namespace: None,
        name: "in-bad-tier".into(),
        id: Identity {
            api_version: "crd.antrea.io/v1beta1".into(),
            api_kind: "ClusterNetworkPolicy".into(),
            uid: "u-1".into(),
            generation: Some(2),
            resource_version: "41".into(),
        },
        reason: Reason::PolicySkipped,
        problems: vec!["spec.tier: no Tier `bad`".into()],
    }];
    let all = SkippedFilter::default();
    let text = render_skipped(&refused, &all, GetOutput::Table).unwrap();
    assert_eq!(
        text,
        "KIND                 NAMESPACE NAME        REASON        MESSAGE\n\
         ClusterNetworkPolicy -         in-bad-tier PolicySkipped spec.tier: no Tier `bad`\n"
    );
    let json = render_skipped(&refused, &all, GetOutput::Json).unwrap();
    let back: Vec<Refusal> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, refused);
    assert!(json.contains(r#""resourceVersion": "41""#), "{json}");
    let yaml = render_skipped(&refused, &all, GetOutput::Yaml).unwrap();
    assert!(
        yaml.contains("uid: u-1") && yaml.contains("generation: 2"),
        "{yaml}"
    );
    assert_eq!(
        render_skipped(&[], &all, GetOutput::Table).unwrap(),
        "no object skipped or partly enforced\n"
    );
}

/// `-n` keeps the objects of a Namespace, `-p` those of a name (in any
/// Namespace, or cluster-scoped, without `-n`), in every format.
#[test]
fn skipped_objects_filter_by_namespace_and_name() {
    use crate::source::kube::{Identity, Reason, Refusal};
    let refusal = |kind: &str, namespace: Option<&str>, name: &str| Refusal {
        kind: kind.into(),
        namespace: namespace.map(str::to_string),
        name: name.into(),
        id: Identity {
            api_version: "v1".into(),
            api_kind: kind.to_string().into(),
            uid: format!("u-{name}"),
            generation: None,
            resource_version: "1".into(),
        },
        reason: Reason::PolicyPartiallyEnforced,
        problems: vec!["spec.appliedTo[0].group: no group".into()],
    };
    let refused = [
        refusal("ClusterNetworkPolicy", None, "web"),
        refusal("NetworkPolicy", Some("shop"), "web"),
        refusal("NetworkPolicy", Some("shop"), "db"),
        refusal("NetworkPolicy", Some("bank"), "web"),
    ];
    let filter = |namespace: Option<&str>, name: Option<&str>| SkippedFilter {
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
    };
    let shown = |filter: SkippedFilter| -> Vec<String> {
        let json = render_skipped(&refused, &filter, GetOutput::Json).unwrap();
        let back: Vec<Refusal> = serde_json::from_str(&json).unwrap();
        back.iter()
            .map(|r| format!("{}/{}", r.namespace.as_deref().unwrap_or("-"), r.name))
            .collect()
    };
    assert_eq!(shown(filter(Some("shop"), None)), ["shop/web", "shop/db"]);
    assert_eq!(
        shown(filter(None, Some("web"))),
        ["-/web", "shop/web", "bank/web"]
    );
    assert_eq!(shown(filter(Some("bank"), Some("web"))), ["bank/web"]);
    assert!(shown(filter(Some("shop"), Some("nobody"))).is_empty());
    let table =
        render_skipped(&refused, &filter(Some("shop"), Some("db")), GetOutput::Wide).unwrap();
    assert_eq!(table.lines().count(), 2, "{table}");
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("NetworkPolicy shop      db "),
        "{table}"
    );
    assert_eq!(
        render_skipped(&refused, &filter(Some("none"), None), GetOutput::Table).unwrap(),
        "no object skipped or partly enforced\n"
    );
}

/// A long applied-to list is summarised in the table (how many, the
/// first three) and whole in `-o wide` and JSON.
#[test]
fn policies_summarise_long_applied_to_lists_in_the_table_only() {
    use crate::ruleset::{PolicyKind, PolicyRef};
    let summary = PolicySummary {
        policy: PolicyRef {
            kind: PolicyKind::AntreaClusterNetworkPolicy,
            namespace: None,
            name: "wide-net".into(),
        },
        tier: Some("application".into()),
        tier_priority: Some(250),
        priority: Some(5.0),
        rules: 1,
        rule_names: vec!["allow-all".into()],
        applied_to: ["a", "b", "c", "d", "e"].map(String::from).to_vec(),
        dry_run: false,
    };
    let all = GetFilter::default();
    let cell = |output: GetOutput| -> String {
        let text = render_policies(std::slice::from_ref(&summary), &all, output).unwrap();
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        row[5..row.len() - 1].join(" ")
    };
    assert_eq!(cell(GetOutput::Table), "5: a,b,c,...");
    assert_eq!(cell(GetOutput::Wide), "a,b,c,d,e");
    let json = render_policies(std::slice::from_ref(&summary), &all, GetOutput::Json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v[0]["appliedTo"],
        serde_json::json!(["a", "b", "c", "d", "e"])
    );
    let yaml = render_policies(&[summary], &all, GetOutput::Yaml).unwrap();
    assert!(yaml.contains("- e"), "{yaml}");
}

#[test]
fn fqdn_selectors_follow_the_endpoints_asked_for() {
    let endpoint = |name: &str, fqdn: &[&str]| EndpointReport {
        endpoint: name.into(),
        kind: "Pod".into(),
        namespace: name.split_once('/').map(|(ns, _)| ns.to_string()),
        addresses: Vec::new(),
        policies: Vec::new(),
        fqdn: fqdn.iter().map(|s| s.to_string()).collect(),
    };
    let endpoints = [
        endpoint("a/x", &["*.x.test"]),
        endpoint("a/y", &["y.test", "*.x.test"]),
        endpoint("b/z", &["z.test"]),
    ];
    let filter = |namespace: Option<&str>, pod: Option<&str>| GetFilter {
        namespace: namespace.map(str::to_string),
        pod: pod.map(str::to_string),
    };
    let names = |patterns: Vec<FqdnPattern>| -> Vec<String> {
        patterns.iter().map(ToString::to_string).collect()
    };
    // From the agent's endpoints (no policies given).
    let every = fqdn_selectors(&[], &endpoints, &filter(None, None));
    assert_eq!(names(every), ["*.x.test", "y.test", "z.test"]);
    let a = fqdn_selectors(&[], &endpoints, &filter(Some("a"), None));
    assert_eq!(names(a), ["*.x.test", "y.test"]);
    let y = fqdn_selectors(&[], &endpoints, &filter(Some("a"), Some("y")));
    assert_eq!(names(y), ["y.test", "*.x.test"]);
    // From the policies given: their order, filtered the same way.
    let all = [FqdnPattern::new("z.test"), FqdnPattern::new("y.test")];
    assert_eq!(
        names(fqdn_selectors(&all, &endpoints, &filter(None, None))),
        ["z.test", "y.test"]
    );
    assert_eq!(
        names(fqdn_selectors(&all, &endpoints, &filter(Some("b"), None))),
        ["z.test"]
    );
    assert!(fqdn_selectors(&all, &endpoints, &filter(None, Some("nobody"))).is_empty());
    // Unnamed sets go once a filter is given.
    let rows = vec![
        FqdnRow {
            selector: Some("z.test".into()),
            set: None,
            address: None,
            ttl: None,
            source: None,
        },
        FqdnRow {
            selector: None,
            set: Some("s".into()),
            address: None,
            ttl: None,
            source: None,
        },
    ];
    assert_eq!(filter_fqdn_rows(rows.clone(), &filter(None, None)).len(), 2);
    assert_eq!(filter_fqdn_rows(rows, &filter(Some("b"), None)).len(), 1);
}

#[test]
fn fqdn_table_names_sets_by_selector() {
    let allowed = FqdnPattern::new("*.allowed.test");
    let empty = FqdnPattern::new("quiet.test");
    let sets = [
        LearnedSetReport {
            name: fqdn_set(&allowed, Family::V4),
            entries: vec![
                ("10.0.0.9".parse().unwrap(), 20),
                ("10.0.0.1".parse().unwrap(), 7),
            ],
        },
        LearnedSetReport {
            name: "tollgate-fqdn-stale-v4".to_string(),
            entries: vec![("10.0.0.2".parse().unwrap(), 3)],
        },
    ];
    let sources = [crate::status::FqdnSource {
        selector: "*.allowed.test".into(),
        address: "10.0.0.9".parse().unwrap(),
        source: "resolved".into(),
    }];
    let rows = fqdn_rows(&sets, &[allowed.clone(), empty], &sources);
    let text = render_fqdn(&rows, GetOutput::Table).unwrap();
    let set = fqdn_set(&allowed, Family::V4);
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        vec![
            vec!["SELECTOR", "SET", "ADDRESS", "TTL", "SOURCE"],
            vec!["*.allowed.test", &set, "10.0.0.1", "7", "-"],
            vec!["*.allowed.test", &set, "10.0.0.9", "20", "resolved"],
            vec!["quiet.test", "-", "-", "-", "-"],
            vec!["-", "tollgate-fqdn-stale-v4", "10.0.0.2", "3", "-"],
        ]
    );
}

fn node_with_addresses(n: usize) -> EndpointReport {
    EndpointReport {
        endpoint: "node:n1".into(),
        kind: "Node".into(),
        namespace: None,
        addresses: (1..=n)
            .map(|i| format!("10.0.0.{i}").parse().unwrap())
            .collect(),
        policies: vec!["AntreaClusterNetworkPolicy:node".into()],
        fqdn: vec![],
    }
}

/// A Node's many addresses are summarised in the table (count and the
/// first two) and whole with `-o wide`; the row fits a terminal.
#[test]
fn endpoint_addresses_are_summarised_in_the_table_only() {
    let list = [node_with_addresses(12)];
    let table = render_endpoints(&list, &GetFilter::default(), GetOutput::Table).unwrap();
    let row = table.lines().nth(1).unwrap();
    assert!(row.contains(" 12: 10.0.0.1,10.0.0.2,... "), "{table}");
    assert!(row.len() <= super::render::COLUMNS, "{row}");
    let wide = render_endpoints(&list, &GetFilter::default(), GetOutput::Wide).unwrap();
    assert!(wide.contains("10.0.0.1,10.0.0.2,10.0.0.3,"), "{wide}");
    assert!(wide.contains(",10.0.0.12 "), "{wide}");
    let two = render_endpoints(
        &[node_with_addresses(2)],
        &GetFilter::default(),
        GetOutput::Table,
    )
    .unwrap();
    assert!(two.contains(" 10.0.0.1,10.0.0.2 "), "{two}");
}

/// `-o jsonpath=`: kubectl's braces or RFC 9535's `$`, values joined by
/// spaces, strings bare and other values as JSON.
#[test]
fn jsonpath_selects_values_of_the_json_rendering() {
    use crate::cli::{Cli, Command, GetCommand, GetFormat};
    use clap::Parser;
    let json = render_endpoints(
        &[node_with_addresses(2)],
        &GetFilter::default(),
        GetOutput::Json,
    )
    .unwrap();
    for (asked, path) in [
        ("jsonpath={[*].endpoint}", "$[*].endpoint"),
        ("jsonpath=$[*].endpoint", "$[*].endpoint"),
        ("jsonpath={ [0].addresses }", "$[0].addresses"),
    ] {
        let cli = Cli::try_parse_from(["tollgate", "get", "endpoints", "-o", asked]).unwrap();
        let Command::Get {
            what: GetCommand::Endpoints { output, .. },
        } = cli.command
        else {
            panic!()
        };
        assert_eq!(output.output, GetFormat::JsonPath(path.into()), "{asked}");
    }
    assert_eq!(select_json(&json, "$[*].endpoint").unwrap(), "node:n1\n");
    assert_eq!(
        select_json(&json, "$[0].addresses").unwrap(),
        "[\"10.0.0.1\",\"10.0.0.2\"]\n"
    );
    assert_eq!(
        select_json(&json, "$[*].addresses[*]").unwrap(),
        "10.0.0.1 10.0.0.2\n"
    );
    assert_eq!(select_json(&json, "$[*].nothing").unwrap(), "\n");
}

/// An observed decision as a line: names where the ruleset knows them,
/// IPv6 addresses with a port in brackets, the deciding rule or `(no
/// rule)`, the HTTP request of an L7 decision.
#[test]
fn observe_lines_name_endpoints_rules_and_requests() {
    use crate::observe::{FlowEvent, FlowSide, HttpSummary};
    let side = |address: &str, port: Option<u16>, name: Option<&str>| FlowSide {
        address: address.parse().unwrap(),
        port,
        name: name.map(str::to_string),
    };
    let mut event = FlowEvent {
        time: "2026-11-28T13:00:00.000001Z".into(),
        verdict: "Drop".into(),
        protocol: "TCP".into(),
        src: side("fd00::2", Some(40000), None),
        dst: side("fd00::3", Some(80), Some("apps/web")),
        policy: Some("AntreaClusterNetworkPolicy:web".into()),
        rule: Some("deny".into()),
        tier: Some("securityops".into()),
        direction: Some("Ingress".into()),
        http: None,
    };
    assert_eq!(
        render_event(&event),
        "2026-11-28T13:00:00.000001Z [fd00::2]:40000 -> apps/web:80 TCP Drop \
         by AntreaClusterNetworkPolicy:web rule deny (Ingress)"
    );
    event.verdict = "Allow".into();
    event.src = side("10.0.0.2", None, None);
    event.dst = side("10.0.0.3", None, None);
    event.protocol = "ICMP".into();
    event.policy = None;
    event.rule = None;
    event.direction = None;
    assert_eq!(
        render_event(&event),
        "2026-11-28T13:00:00.000001Z 10.0.0.2 -> 10.0.0.3 ICMP Allow (no rule)"
    );
    event.http = Some(HttpSummary {
        method: "GET".into(),
        host: Some("shop.test".into()),
        path: "/api".into(),
    });
    assert!(render_event(&event).contains(" ICMP Allow GET shop.test/api (no rule)"));
}

/// `get policies` marks a dry-run policy in the table and as `dryRun` in
/// JSON (absent for an enforced one).
#[test]
fn dry_run_policies_are_marked() {
    use crate::ruleset::{PolicyKind, PolicyRef};
    let summary = |name: &str, dry_run: bool| PolicySummary {
        policy: PolicyRef {
            kind: PolicyKind::K8sNetworkPolicy,
            namespace: Some("shop".into()),
            name: name.into(),
        },
        tier: None,
        tier_priority: None,
        priority: None,
        rules: 0,
        rule_names: Vec::new(),
        applied_to: vec!["shop/web".into()],
        dry_run,
    };
    let policies = [summary("deny-all", true), summary("allow-web", false)];
    let all = GetFilter::default();
    let text = render_policies(&policies, &all, GetOutput::Table).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[1].starts_with("K8sNetworkPolicy:shop/deny-all (dry-run) "),
        "{text}"
    );
    assert!(
        lines[2].starts_with("K8sNetworkPolicy:shop/allow-web "),
        "{text}"
    );
    assert!(!lines[2].contains("dry-run"), "{text}");
    let json = render_policies(&policies, &all, GetOutput::Json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["dryRun"], true);
    assert!(v[1].get("dryRun").is_none(), "{json}");
}

/// `trace`'s dry-run line: a change is said to be not enforced; an
/// unchanged verdict is said to be the enforced one; a dry-run Kubernetes
/// NetworkPolicy's isolation is named as such.
#[test]
fn trace_text_shows_the_dry_run_verdict_beside_the_enforced_one() {
    let report =
        |verdict: &str, changed: bool, rule: Option<&str>, tier: Option<&str>| DryRunReport {
            verdict: verdict.into(),
            changed,
            direction: Some("Ingress".into()),
            policy: Some("AntreaClusterNetworkPolicy:dry-web".into()),
            tier: tier.map(str::to_string),
            rule: rule.map(str::to_string),
            action: Some("Drop".into()),
        };
    assert_eq!(
        dry_run_text(&report("Drop", true, Some("drop-web"), Some("securityops"))),
        "dry-run: would Drop by Ingress AntreaClusterNetworkPolicy:dry-web rule drop-web (tier securityops) (not enforced)"
    );
    let mut isolation = report("Drop", true, None, None);
    isolation.policy = Some("K8sNetworkPolicy:shop/deny-all".into());
    assert_eq!(
        dry_run_text(&isolation),
        "dry-run: would Drop by Ingress K8sNetworkPolicy:shop/deny-all isolation (not enforced)"
    );
    let unchanged = DryRunReport {
        direction: None,
        policy: None,
        ..report("Allow", false, None, None)
    };
    assert_eq!(dry_run_text(&unchanged), "dry-run: Allow, as enforced");
}

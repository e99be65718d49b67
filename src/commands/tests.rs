use std::collections::BTreeMap;

use super::get::{filter_fqdn_rows, fqdn_rows, fqdn_selectors, FqdnRow};
use super::render::{render_fqdn, render_policies, render_skipped};
use crate::cli::{GetFilter, GetOutput, SkippedFilter};
use crate::datapath::{plan::fqdn_set, Family, LearnedSet};
use crate::explain::EndpointReport;
use crate::fqdn::FqdnPattern;
use crate::ruleset::PolicySummary;

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
            api_kind: kind.into(),
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
    let sets: BTreeMap<String, LearnedSet> = [
        (
            fqdn_set(&allowed, Family::V4),
            LearnedSet {
                family: Family::V4,
                entries: vec![
                    ("10.0.0.9".parse().unwrap(), 20),
                    ("10.0.0.1".parse().unwrap(), 7),
                ],
            },
        ),
        (
            "tollgate-fqdn-stale-v4".to_string(),
            LearnedSet {
                family: Family::V4,
                entries: vec![("10.0.0.2".parse().unwrap(), 3)],
            },
        ),
    ]
    .into();
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

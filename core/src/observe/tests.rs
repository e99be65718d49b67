use std::sync::Arc;

use super::*;
use crate::compile::{compile, LocalNode};
use crate::model::Snapshot;
use crate::packet::flow::Transport;

const OBJECTS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.3}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: data, labels: {app: db}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.4}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web-in}
spec:
  priority: 1
  tier: securityops
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - name: drop-db
    action: Drop
    from: [{podSelector: {matchLabels: {app: db}}}]
"#;

fn ruleset() -> Ruleset {
    let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), OBJECTS);
    assert!(problems.is_empty(), "{problems:?}");
    let local = LocalNode {
        name: "n1".into(),
        ..LocalNode::default()
    };
    compile(&Snapshot { objects }, &local)
}

fn observed(src: &str, dst: &str, port: u16, verdict: Verdict, by: DecidedBy) -> Observed {
    Observed {
        time: Timestamp::from_unix_micros(1_700_000_000_123_456),
        flow: Flow {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            transport: Transport::Tcp {
                src_port: 40000,
                dst_port: port,
            },
            local: None,
        },
        verdict,
        by,
        request: None,
    }
}

#[test]
fn events_name_endpoints_and_the_deciding_rule() {
    let ruleset = ruleset();
    let rule = ruleset
        .policies()
        .first()
        .map(|p| p.policy.clone())
        .unwrap();
    let decided = ruleset.classify(
        &observed("10.0.0.4", "10.0.0.3", 80, Verdict::Drop, DecidedBy::NoRule).flow,
        &crate::fqdn::NoFqdn,
    );
    let by = match &decided.deciding().outcome {
        crate::ruleset::Outcome::Rule { rule } => DecidedBy::Rule(Arc::clone(rule)),
        other => panic!("{other:?}"),
    };
    let event = FlowEvent::of(
        &observed("10.0.0.4", "10.0.0.3", 80, Verdict::Drop, by),
        &ruleset,
    );
    assert_eq!(event.time, "2023-11-14T22:13:20.123456Z");
    assert_eq!(event.verdict, "Drop");
    assert_eq!(event.src.name.as_deref(), Some("data/db"));
    assert_eq!(event.dst.name.as_deref(), Some("shop/web"));
    assert_eq!((event.src.port, event.dst.port), (Some(40000), Some(80)));
    assert_eq!(event.policy, Some(rule.to_string()));
    assert_eq!(event.rule.as_deref(), Some("drop-db"));
    assert_eq!(event.direction.as_deref(), Some("Ingress"));
    let outside = FlowEvent::of(
        &observed(
            "192.0.2.1",
            "10.0.0.3",
            80,
            Verdict::Allow,
            DecidedBy::NoRule,
        ),
        &ruleset,
    );
    assert_eq!((outside.src.name, outside.policy), (None, None));
}

#[test]
fn filters_by_verdict_namespace_and_pod() {
    let ruleset = ruleset();
    let event = |src, verdict| {
        FlowEvent::of(
            &observed(src, "10.0.0.3", 80, verdict, DecidedBy::NoRule),
            &ruleset,
        )
    };
    let drop = event("10.0.0.4", Verdict::Drop);
    let allow = event("192.0.2.1", Verdict::Allow);
    let filter = |verdicts: &[&str], ns: Option<&str>, pod: Option<&str>| ObserveFilter {
        verdicts: verdicts.iter().map(|v| v.to_string()).collect(),
        namespace: ns.map(str::to_string),
        pod: pod.map(str::to_string),
    };
    assert!(filter(&[], None, None).matches(&drop));
    assert!(filter(&["drop"], None, None).matches(&drop));
    assert!(!filter(&["drop"], None, None).matches(&allow));
    assert!(filter(&["reject", "ALLOW"], None, None).matches(&allow));
    // Either side's Namespace or name.
    assert!(filter(&[], Some("data"), None).matches(&drop));
    assert!(filter(&[], Some("shop"), None).matches(&allow));
    assert!(!filter(&[], Some("data"), None).matches(&allow));
    assert!(!filter(&[], Some("sho"), None).matches(&allow));
    assert!(filter(&[], None, Some("data/db")).matches(&drop));
    assert!(!filter(&[], None, Some("data/db")).matches(&allow));
    assert!(!filter(&["allow"], Some("data"), None).matches(&drop));
}

#[test]
fn history_keeps_the_latest_and_answers_the_last_n_asked_for() {
    let ruleset = ruleset();
    let mut history = History::new(3);
    for port in 1..=5 {
        let verdict = if port % 2 == 0 {
            Verdict::Drop
        } else {
            Verdict::Allow
        };
        history.push(observed(
            "10.0.0.4",
            "10.0.0.3",
            port,
            verdict,
            DecidedBy::NoRule,
        ));
    }
    assert_eq!(history.len(), 3);
    let ports = |events: Vec<FlowEvent>| -> Vec<Option<u16>> {
        events.into_iter().map(|e| e.dst.port).collect()
    };
    let all = ObserveFilter::default();
    assert_eq!(
        ports(history.latest(10, &all, &ruleset)),
        [Some(3), Some(4), Some(5)]
    );
    assert_eq!(ports(history.latest(2, &all, &ruleset)), [Some(4), Some(5)]);
    let drops = ObserveFilter {
        verdicts: vec!["drop".into()],
        ..ObserveFilter::default()
    };
    assert_eq!(ports(history.latest(10, &drops, &ruleset)), [Some(4)]);
    let mut none = History::new(0);
    none.push(observed(
        "10.0.0.4",
        "10.0.0.3",
        1,
        Verdict::Drop,
        DecidedBy::NoRule,
    ));
    assert!(none.is_empty());
}

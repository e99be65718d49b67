use super::*;

/// One vector of `core/tests/data/antrea-rule-names/cases.json`.
#[derive(serde::Deserialize)]
struct Case {
    direction: String,
    rule: serde_json::Value,
    expected: String,
}

#[test]
fn names_match_antreas_webhook() {
    let cases: Vec<Case> = serde_json::from_str(include_str!(
        "../../../tests/data/antrea-rule-names/cases.json"
    ))
    .unwrap();
    assert_eq!(cases.len(), 33);
    for case in cases {
        let rule: Rule = serde_json::from_value(case.rule.clone()).unwrap();
        let direction = match case.direction.as_str() {
            "ingress" => Direction::Ingress,
            _ => Direction::Egress,
        };
        assert_eq!(
            rule.generated_name(direction),
            case.expected,
            "rule {} hashed as {}",
            case.rule,
            antrea_json(&rule)
        );
    }
}

#[test]
fn go_field_order_and_omitempty() {
    let rule: Rule = serde_json::from_value(serde_json::json!({
        "name": "ignored",
        "from": [{"podSelector": {}}],
        "ports": [{"port": 80}],
        "action": "Allow",
    }))
    .unwrap();
    assert_eq!(
        antrea_json(&rule),
        r#"{"action":"Allow","ports":[{"port":80}],"from":[{"podSelector":{}}],"enableLogging":false}"#
    );
}

#[test]
fn strings_are_escaped_as_go_does() {
    assert_eq!(go_string("a<b>&c"), r#""a\u003cb\u003e\u0026c""#);
    assert_eq!(go_string("q\"\\"), r#""q\"\\""#);
    // Go 1.22 and later (Antrea's toolchain) write \b and \f short.
    assert_eq!(go_string("\u{8}\u{c}\n\r\t\u{1}"), r#""\b\f\n\r\t\u0001""#);
    assert_eq!(
        go_string("\u{2028}\u{2029}é\u{7f}"),
        "\"\\u2028\\u2029é\u{7f}\""
    );
}

/// Antrea's own vectors: pkg/controller/networkpolicy/mutate_test.go,
/// `TestMutateAntreaClusterNetworkPolicy` ("acnp-create-mutate").
#[test]
fn names_match_antreas_mutate_test() {
    for (direction, rule, expected) in [
        (
            Direction::Ingress,
            serde_json::json!({"action": "Allow", "from": [{"podSelector": {"matchLabels": {"foo1": "bar1"}}}]}),
            "ingress-allow-c4f16d3",
        ),
        (
            Direction::Ingress,
            serde_json::json!({"action": "Allow", "from": [{"podSelector": {"matchLabels": {"foo2": "bar2"}}}]}),
            "ingress-allow-be87b58",
        ),
        (
            Direction::Egress,
            serde_json::json!({"action": "Allow", "to": [{"podSelector": {"matchLabels": {"foo2": "bar2"}}}]}),
            "egress-allow-44b2575",
        ),
    ] {
        let rule: Rule = serde_json::from_value(rule).unwrap();
        assert_eq!(rule.generated_name(direction), expected);
    }
}

/// A decoded policy's copies carry its rules' generated names, computed
/// once per direction, and the names are no part of a rule's value.
/// Mutation: `GeneratedNames::get` ignoring the direction (one cell for
/// both) names the egress rule `ingress-…`: fails.
#[test]
fn generated_names_are_computed_once_and_carried_by_copies() {
    let object = crate::model::Object::from_value(serde_json::json!({
        "apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
        "metadata": {"name": "p"},
        "spec": {"priority": 1, "appliedTo": [{"podSelector": {}}],
                 "ingress": [{"action": "Drop", "from": [{"podSelector": {}}]}],
                 "egress": [{"action": "Drop", "to": [{"podSelector": {}}]}]}
    }))
    .unwrap();
    let crate::model::Object::ClusterNetworkPolicy(policy) = object.clone() else {
        panic!("a ClusterNetworkPolicy");
    };
    let ingress = &policy.spec.ingress[0];
    let egress = &policy.spec.egress[0];
    assert!(ingress.generated.0[0].get().is_some(), "named when decoded");
    assert!(egress.generated.0[1].get().is_some());
    let fresh: Rule = serde_json::from_value(serde_json::to_value(ingress).unwrap()).unwrap();
    assert!(fresh.generated.0[0].get().is_none());
    assert_eq!(&fresh, ingress, "the cache is no part of the value");
    assert_eq!(
        ingress.generated_name(Direction::Ingress),
        fresh.generated_name(Direction::Ingress)
    );
    assert!(ingress
        .generated_name(Direction::Ingress)
        .starts_with("ingress-drop-"));
    assert!(egress
        .generated_name(Direction::Egress)
        .starts_with("egress-drop-"));
}

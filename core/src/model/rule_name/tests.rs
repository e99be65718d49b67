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

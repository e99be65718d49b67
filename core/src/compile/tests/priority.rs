//! Effective priority as Antrea's e2e tests check it (`testACNPRulePriority`,
//! `testACNPPriorityOverride`, `testACNPTierOverride`, `testACNPCustomTiers`,
//! `testACNPPriorityConflictingRule`, `testACNPPriorityOverrideDefaultDeny`
//! in `test/e2e/antreapolicy_test.go`), as truth tables over Namespaces
//! x, y, z × Pods a, b, c on TCP 80 with the deciding policy of Antrea's
//! `NPEvaluation` checks; then the rules of policies that share Tier and
//! priority across kinds and directions, and for the network-policy-api
//! kinds, which Antrea orders the same way.

use crate::fqdn::NoFqdn;
use crate::model::Direction;
use crate::ruleset::RuleRef;

use super::*;

/// An Antrea ClusterNetworkPolicy `name` of `priority` in `tier`.
fn acnp(name: &str, tier: &str, priority: &str, applied_to: &str, rules: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n  priority: {priority}\n  tier: {tier}\n  appliedTo: [{applied_to}]\n{rules}---\n"
    )
}

/// appliedTo every Pod of Namespace `ns`.
fn in_ns(ns: &str) -> String {
    format!("{{namespaceSelector: {{matchLabels: {{ns: \"{ns}\"}}}}}}")
}

/// appliedTo Pod `pod` of Namespace `ns`.
fn pod(ns: &str, pod: &str) -> String {
    format!(
        "{{podSelector: {{matchLabels: {{app: {pod}}}}}, namespaceSelector: {{matchLabels: {{ns: \"{ns}\"}}}}}}"
    )
}

/// One rule on TCP 80 with `action` towards (egress) or from (ingress) the
/// peer `peer`.
fn rule(action: &str, direction: Direction, peer: &str) -> String {
    let field = match direction {
        Direction::Ingress => "from",
        Direction::Egress => "to",
    };
    format!(
        "  - action: {action}\n    ports: [{{protocol: TCP, port: 80}}]\n    {field}: [{peer}]\n"
    )
}

fn ingress(rules: &[String]) -> String {
    format!("  ingress:\n{}", rules.concat())
}

fn egress(rules: &[String]) -> String {
    format!("  egress:\n{}", rules.concat())
}

/// The rule that decided `direction` of the flow `from` → `to` on TCP 80.
fn decided_by(
    rs: &Ruleset,
    from: (usize, usize),
    to: (usize, usize),
    direction: Direction,
) -> Option<RuleRef> {
    let decision = rs.classify(&tcp(ip(from.0, from.1), ip(to.0, to.1), 80), &NoFqdn);
    let side = match direction {
        Direction::Ingress => &decision.ingress,
        Direction::Egress => &decision.egress,
    };
    side.rule().map(|r| (**r).clone())
}

/// Asserts that `policy` decided `direction` of `from` → `to` with `action`
/// (Antrea's `NPEvaluation.Expect`).
fn assert_decided(
    rs: &Ruleset,
    from: (usize, usize),
    to: (usize, usize),
    direction: Direction,
    policy: &str,
    action: &str,
) {
    let rule = decided_by(rs, from, to, direction)
        .unwrap_or_else(|| panic!("{from:?} -> {to:?}: no rule decided"));
    assert_eq!(
        (rule.policy.name.as_str(), format!("{:?}", rule.action)),
        (policy, action.to_string()),
        "{from:?} -> {to:?}"
    );
}

#[test]
fn e2e_acnp_rule_priority() {
    // Two ACNPs of priority 5 in one Tier: rule 0 of acnp-deny (Drop to y)
    // comes before rule 1 of acnp-allow (Allow to y), and rule 0 of
    // acnp-allow (Allow to z) before rule 1 of acnp-deny (Drop to z).
    let rs = ruleset(&format!(
        "{}{}",
        acnp(
            "acnp-deny",
            "application",
            "5",
            &in_ns("x"),
            &egress(&[
                rule("Drop", Direction::Egress, &in_ns("y")),
                rule("Drop", Direction::Egress, &in_ns("z")),
            ])
        ),
        acnp(
            "acnp-allow",
            "application",
            "5",
            &in_ns("x"),
            &egress(&[
                rule("Allow", Direction::Egress, &in_ns("z")),
                rule("Allow", Direction::Egress, &in_ns("y")),
            ])
        ),
    ));
    assert_matrix(&rs, |from, to| !(from.0 == X && to.0 == Y));
    assert_eq!(decided_by(&rs, (X, B), (X, A), Direction::Egress), None);
    assert_decided(&rs, (X, A), (Y, A), Direction::Egress, "acnp-deny", "Drop");
    assert_decided(
        &rs,
        (X, A),
        (Z, A),
        Direction::Egress,
        "acnp-allow",
        "Allow",
    );
}

#[test]
fn rules_of_equal_priority_are_consulted_and_ranked_by_index() {
    // What `trace -v` lists: rule 0 of both policies (kind and name break
    // the tie), then rule 1 of both.
    let rs = ruleset(&format!(
        "{}{}",
        acnp(
            "acnp-deny",
            "application",
            "5",
            &in_ns("x"),
            &egress(&[
                rule("Drop", Direction::Egress, &in_ns("y")),
                rule("Drop", Direction::Egress, &in_ns("z")),
            ])
        ),
        acnp(
            "acnp-allow",
            "application",
            "5",
            &in_ns("x"),
            &egress(&[
                rule("Allow", Direction::Egress, &in_ns("z")),
                rule("Allow", Direction::Egress, &in_ns("y")),
                rule("Allow", Direction::Egress, &in_ns("x")),
            ])
        ),
    ));
    // x/a → x/b: no rule matches, every egress rule of x/a is consulted.
    let [egress, _] = rs.consulted(&tcp(ip(X, A), ip(X, B), 81), &NoFqdn);
    let order: Vec<(String, usize)> = egress
        .iter()
        .map(|c| (c.rule.policy.name.clone(), c.rule.index))
        .collect();
    let want = [
        ("acnp-allow", 0),
        ("acnp-deny", 0),
        ("acnp-allow", 1),
        ("acnp-deny", 1),
        ("acnp-allow", 2),
    ];
    assert_eq!(
        order,
        want.map(|(name, index)| (name.to_string(), index)).to_vec()
    );
    let ranks: Vec<u32> = egress.iter().map(|c| c.rule.rank).collect();
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{ranks:?}");
    // `get policies`: the policies in tie-break order.
    let names: Vec<&str> = rs
        .policies()
        .iter()
        .map(|p| p.policy.name.as_str())
        .collect();
    assert_eq!(names, ["acnp-allow", "acnp-deny"]);
}

/// The three policies of `testACNPPriorityOverride` (priorities 1.001 >
/// 1.002 > 1.003) or `testACNPTierOverride` (Tiers emergency >
/// securityops > application).
fn override_policies(tiers: [&str; 3], priorities: [&str; 3]) -> [String; 3] {
    [
        // Highest: drops z/b → x/a.
        acnp(
            "p1",
            tiers[0],
            priorities[0],
            &pod("x", "a"),
            &ingress(&[rule("Drop", Direction::Ingress, &pod("z", "b"))]),
        ),
        // Medium: allows z → x/a.
        acnp(
            "p2",
            tiers[1],
            priorities[1],
            &pod("x", "a"),
            &ingress(&[rule("Allow", Direction::Ingress, &in_ns("z"))]),
        ),
        // Lowest: drops z → x.
        acnp(
            "p3",
            tiers[2],
            priorities[2],
            &in_ns("x"),
            &ingress(&[rule("Drop", Direction::Ingress, &in_ns("z"))]),
        ),
    ]
}

/// Both steps of `testACNPPriorityOverride` / `testACNPTierOverride`.
fn assert_override(prefix: &str, [p1, p2, p3]: [String; 3]) {
    let two = ruleset(&format!("{prefix}{p3}{p2}"));
    assert_matrix(&two, |from, to| !(from.0 == Z && to.0 == X && to.1 != A));
    assert_eq!(decided_by(&two, (Y, A), (X, A), Direction::Ingress), None);
    assert_decided(&two, (Z, B), (X, A), Direction::Ingress, "p2", "Allow");
    assert_decided(&two, (Z, B), (X, B), Direction::Ingress, "p3", "Drop");
    let all = ruleset(&format!("{prefix}{p3}{p1}{p2}"));
    assert_matrix(&all, |from, to| {
        !(from.0 == Z && to.0 == X && (to.1 != A || from.1 == B))
    });
    assert_eq!(decided_by(&all, (Y, A), (X, A), Direction::Ingress), None);
    assert_decided(&all, (Z, A), (X, A), Direction::Ingress, "p2", "Allow");
    assert_decided(&all, (Z, A), (X, B), Direction::Ingress, "p3", "Drop");
    assert_decided(&all, (Z, B), (X, A), Direction::Ingress, "p1", "Drop");
}

#[test]
fn e2e_acnp_priority_override() {
    let same_tier = ["application"; 3];
    assert_override(
        "",
        override_policies(same_tier, ["1.001", "1.002", "1.003"]),
    );
}

#[test]
fn e2e_acnp_tier_override() {
    let tiers = ["emergency", "securityops", "application"];
    assert_override("", override_policies(tiers, ["100", "10", "1"]));
}

#[test]
fn e2e_acnp_custom_tiers() {
    let tiers = "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: high-priority}\nspec: {priority: 245}\n---\napiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: low-priority}\nspec: {priority: 246}\n---\n";
    let high = acnp(
        "acnp-tier-high",
        "high-priority",
        "100",
        &pod("x", "a"),
        &ingress(&[rule("Allow", Direction::Ingress, &in_ns("z"))]),
    );
    let low = acnp(
        "acnp-tier-low",
        "low-priority",
        "1",
        &in_ns("x"),
        &ingress(&[rule("Drop", Direction::Ingress, &in_ns("z"))]),
    );
    let rs = ruleset(&format!("{tiers}{low}{high}"));
    assert_matrix(&rs, |from, to| !(from.0 == Z && to.0 == X && to.1 != A));
    assert_eq!(decided_by(&rs, (Y, A), (X, A), Direction::Ingress), None);
    assert_decided(
        &rs,
        (Z, B),
        (X, A),
        Direction::Ingress,
        "acnp-tier-high",
        "Allow",
    );
    assert_decided(
        &rs,
        (Z, B),
        (X, B),
        Direction::Ingress,
        "acnp-tier-low",
        "Drop",
    );
}

#[test]
fn e2e_acnp_priority_conflicting_rule() {
    let drop = acnp(
        "acnp-drop",
        "application",
        "1",
        &in_ns("x"),
        &ingress(&[rule("Drop", Direction::Ingress, &in_ns("z"))]),
    );
    let allow = acnp(
        "acnp-allow",
        "application",
        "2",
        &in_ns("x"),
        &ingress(&[rule("Allow", Direction::Ingress, &in_ns("z"))]),
    );
    let rs = ruleset(&format!("{drop}{allow}"));
    assert_matrix(&rs, |from, to| !(from.0 == Z && to.0 == X));
    assert_eq!(decided_by(&rs, (Y, A), (X, A), Direction::Ingress), None);
    assert_decided(&rs, (Z, A), (X, A), Direction::Ingress, "acnp-drop", "Drop");
}

#[test]
fn e2e_acnp_priority_override_default_deny() {
    let deny_all: String = NAMESPACES
        .iter()
        .map(|ns| {
            format!("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: default-deny, namespace: {ns}}}\nspec: {{podSelector: {{}}, policyTypes: [Ingress]}}\n---\n")
        })
        .collect();
    let priority2 = acnp(
        "acnp-priority2",
        "application",
        "2",
        &in_ns("x"),
        &ingress(&[rule("Allow", Direction::Ingress, &in_ns("z"))]),
    );
    let priority1 = acnp(
        "acnp-priority1",
        "application",
        "1",
        &pod("x", "a"),
        &ingress(&[rule("Drop", Direction::Ingress, &in_ns("z"))]),
    );
    let rs = ruleset(&format!("{deny_all}{priority2}{priority1}"));
    assert_matrix(&rs, |from, to| from.0 == Z && to.0 == X && to.1 != A);
    assert!(matches!(
        rs.classify(&tcp(ip(Y, A), ip(X, A), 80), &NoFqdn)
            .ingress
            .outcome,
        Outcome::K8sDefaultDeny
    ));
    assert_decided(
        &rs,
        (Z, B),
        (X, A),
        Direction::Ingress,
        "acnp-priority1",
        "Drop",
    );
    assert_decided(
        &rs,
        (Z, B),
        (X, B),
        Direction::Ingress,
        "acnp-priority2",
        "Allow",
    );
}

#[test]
fn acnp_and_annp_of_one_tier_and_priority_interleave_by_index() {
    // ACNP before ANNP at one index (kind breaks the tie); the ANNP's rule
    // 0 still beats the ACNP's rule 1.
    let annp = "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {name: drop-y, namespace: x}\nspec:\n  priority: 5\n  appliedTo: [{podSelector: {}}]\n  egress:\n  - action: Drop\n    ports: [{protocol: TCP, port: 80}]\n    to: [{namespaceSelector: {matchLabels: {ns: \"y\"}}}]\n---\n";
    let allow = acnp(
        "allow",
        "application",
        "5",
        &in_ns("x"),
        &egress(&[
            rule("Allow", Direction::Egress, &pod("y", "a")),
            rule("Allow", Direction::Egress, &in_ns("y")),
        ]),
    );
    let rs = ruleset(&format!("{annp}{allow}"));
    assert_matrix(&rs, |from, to| !(from.0 == X && to.0 == Y && to.1 != A));
    assert_decided(&rs, (X, A), (Y, A), Direction::Egress, "allow", "Allow");
    assert_decided(&rs, (X, A), (Y, B), Direction::Egress, "drop-y", "Drop");
}

#[test]
fn rule_indices_count_per_direction() {
    // Policy a's first egress rule is egress rule 0, whatever its ingress
    // rules: it beats b's egress rule 1.
    let a = acnp(
        "a",
        "application",
        "5",
        &in_ns("x"),
        &format!(
            "{}{}",
            ingress(&[
                rule("Allow", Direction::Ingress, &in_ns("x")),
                rule("Allow", Direction::Ingress, &in_ns("x")),
            ]),
            egress(&[rule("Allow", Direction::Egress, &in_ns("y"))])
        ),
    );
    let b = acnp(
        "b",
        "application",
        "5",
        &in_ns("x"),
        &egress(&[
            rule("Drop", Direction::Egress, &in_ns("z")),
            rule("Drop", Direction::Egress, &in_ns("y")),
        ]),
    );
    let rs = ruleset(&format!("{b}{a}"));
    assert_matrix(&rs, |from, to| !(from.0 == X && to.0 == Z));
    assert_decided(&rs, (X, A), (Y, A), Direction::Egress, "a", "Allow");
}

#[test]
fn policies_of_other_priorities_or_tiers_do_not_interleave() {
    // acnp-allow at priority 5.5 (or in a later Tier) comes after every
    // rule of acnp-deny, its rule 0 included.
    for (tier, priority) in [("application", "5.5"), ("baseline", "5")] {
        let deny = acnp(
            "acnp-deny",
            "application",
            "5",
            &in_ns("x"),
            &egress(&[
                rule("Drop", Direction::Egress, &pod("y", "a")),
                rule("Drop", Direction::Egress, &in_ns("z")),
            ]),
        );
        let allow = acnp(
            "acnp-allow",
            tier,
            priority,
            &in_ns("x"),
            &egress(&[rule("Allow", Direction::Egress, &in_ns("z"))]),
        );
        let rs = ruleset(&format!("{deny}{allow}"));
        assert_matrix(&rs, |from, to| {
            !(from.0 == X && (to.0 == Z || to == (Y, A)))
        });
    }
}

#[test]
fn network_policy_api_policies_of_one_priority_interleave_by_index() {
    // Antrea gives their rules (Tier priority, priority, rule index) too.
    let to_ns = |action: &str, ns: &str| {
        format!(
            "  - action: {action}\n    to: [{{namespaces: {{matchLabels: {{ns: \"{ns}\"}}}}}}]\n"
        )
    };
    let subject = "  subject:\n    namespaces: {matchLabels: {ns: \"x\"}}\n";
    let body = |first: &str, second: &str| format!("{subject}  egress:\n{first}{second}");
    for (kind, tier, deny, allow) in [
        ("v1alpha1", "", "Deny", "Allow"),
        ("v1alpha2", "Admin", "Deny", "Accept"),
        ("v1alpha2", "Baseline", "Deny", "Accept"),
    ] {
        let policy = |name: &str, body: String| {
            match kind {
            "v1alpha1" => format!("apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n  priority: 5\n{body}---\n"),
            _ => format!("apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {{name: {name}}}\nspec:\n  tier: {tier}\n  priority: 5\n{body}---\n"),
        }
        };
        let rs = ruleset(&format!(
            "{}{}",
            policy("deny", body(&to_ns(deny, "y"), &to_ns(deny, "z"))),
            policy("allow", body(&to_ns(allow, "z"), &to_ns(allow, "y"))),
        ));
        assert_matrix(&rs, |from, to| !(from.0 == X && to.0 == Y));
        assert_decided(&rs, (X, A), (Y, A), Direction::Egress, "deny", "Drop");
        assert_decided(&rs, (X, A), (Z, A), Direction::Egress, "allow", "Allow");
    }
}

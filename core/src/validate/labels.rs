//! Label syntax in selectors, as Kubernetes defines it: keys are qualified
//! names (`[prefix/]name`), values are label values, and expressions use
//! their operator's shape. Antrea's webhook checks `matchLabels` and
//! `sameLabels` keys; tollgate also checks `matchExpressions`, which
//! Antrea's controller cannot turn into a selector (docs/guide/antrea-compat.md).
//! Syntax only: never evaluates a selector.

use crate::model::{LabelSelector, SelectorOperator};

use super::Report;

/// Longest name part of a key, and longest label value.
const MAX_NAME: usize = 63;
/// Longest DNS subdomain prefix of a key.
const MAX_PREFIX: usize = 253;

/// Every key, value and expression of `selector` (at `path`).
pub(super) fn check_selector(report: &mut Report<'_>, path: &str, selector: &LabelSelector) {
    report.selector(path, selector);
    for (key, value) in &selector.match_labels {
        if let Some(reason) = qualified_name_problem(key) {
            report.add(
                format!("{path}.matchLabels"),
                format!("invalid label key `{key}`: {reason}"),
            );
        }
        if let Some(reason) = label_value_problem(value) {
            report.add(
                format!("{path}.matchLabels.{key}"),
                format!("invalid label value `{value}`: {reason}"),
            );
        }
    }
    for (i, expression) in selector.match_expressions.iter().enumerate() {
        let epath = format!("{path}.matchExpressions[{i}]");
        if let Some(reason) = qualified_name_problem(&expression.key) {
            report.add(
                format!("{epath}.key"),
                format!("invalid label key `{}`: {reason}", expression.key),
            );
        }
        match expression.operator {
            SelectorOperator::In | SelectorOperator::NotIn => {
                if expression.values.is_empty() {
                    report.add(
                        format!("{epath}.values"),
                        format!("must be non-empty for operator {:?}", expression.operator),
                    );
                }
                for (j, value) in expression.values.iter().enumerate() {
                    if let Some(reason) = label_value_problem(value) {
                        report.add(
                            format!("{epath}.values[{j}]"),
                            format!("invalid label value `{value}`: {reason}"),
                        );
                    }
                }
            }
            SelectorOperator::Exists | SelectorOperator::DoesNotExist => {
                if !expression.values.is_empty() {
                    report.add(
                        format!("{epath}.values"),
                        format!("must be empty for operator {:?}", expression.operator),
                    );
                }
            }
        }
    }
}

/// Why `key` is not a Kubernetes qualified name, if it is not.
pub(super) fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("prefix part must not be empty".into());
        }
        if prefix.len() > MAX_PREFIX {
            return Some(format!(
                "prefix part must be no more than {MAX_PREFIX} characters"
            ));
        }
        if !is_dns_subdomain(prefix) {
            return Some(
                "prefix part must be a lowercase DNS subdomain (e.g. 'example.com')".into(),
            );
        }
    }
    if name.is_empty() {
        return Some("name part must not be empty".into());
    }
    name_problem(name).map(|reason| format!("name part {reason}"))
}

/// Why `value` is not a Kubernetes label value, if it is not (empty is valid).
pub(super) fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    name_problem(value)
}

/// The shared rule of a key's name part and a label value: at most 63
/// characters, alphanumerics, `-`, `_` and `.`, alphanumeric at both ends.
fn name_problem(text: &str) -> Option<String> {
    if text.len() > MAX_NAME {
        return Some(format!("must be no more than {MAX_NAME} characters"));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends_ok = text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    (!(text.chars().all(allowed) && ends_ok)).then(|| {
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into()
    })
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of lowercase
/// alphanumerics and `-`, alphanumeric at both ends, each at most 63.
fn is_dns_subdomain(text: &str) -> bool {
    text.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= MAX_NAME
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for ok in [
            "app",
            "a",
            "kubernetes.io/metadata.name",
            "app.kubernetes.io/name",
            "My_Key-1.x",
            "x/y",
        ] {
            assert_eq!(qualified_name_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "-app",
            "app-",
            "a b",
            "app$",
            "/name",
            "Example.com/name",
            "ex_ample.com/name",
            "a/b/c",
            "prefix/",
            &"a".repeat(64),
        ] {
            assert!(qualified_name_problem(bad).is_some(), "{bad}");
        }
        assert_eq!(qualified_name_problem(&"a".repeat(63)), None);
    }

    #[test]
    fn label_values() {
        for ok in ["", "web", "v1.2_3-x", "A"] {
            assert_eq!(label_value_problem(ok), None, "{ok}");
        }
        for bad in ["-web", "web-", "a b", "a/b", "a:b", &"v".repeat(64)] {
            assert!(label_value_problem(bad).is_some(), "{bad}");
        }
    }
}

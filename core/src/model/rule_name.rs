//! Antrea's generated rule names. Antrea's mutating webhook names a rule
//! without `name` `<ingress|egress>-<action>-<hash>`, the hash being the
//! first 7 hex digits of the SHA-1 of Go's `json.Marshal` of the
//! `crd.antrea.io/v1beta1` `Rule`. This module writes those exact bytes —
//! Go's field order, `omitempty` and string escaping — and must never hash
//! anything else (serde's output differs in order and escaping).
//!
//! Known limit: CIDRs and IGMP group addresses are kept parsed, so a
//! non-canonical spelling (`FD00::/64`) hashes as its canonical form.

use std::fmt::Write as _;

use litemap::LiteMap;
use sha1::{Digest, Sha1};

use super::antrea::{
    AntreaPolicy, AppliedTo, Direction, IpBlock, L7Protocol, NamespaceMatchType, Peer, PolicyPort,
    PolicyProtocol, PortProtocol, PortValue, Rule, RuleAction,
};
use super::meta::{LabelSelector, NamespacedName, PeerService, SelectorOperator};

impl AntreaPolicy {
    /// Computes the generated name of each rule that has none, once.
    pub fn name_rules(&self) {
        let rules = (self.spec.ingress.iter().map(|r| (Direction::Ingress, r)))
            .chain(self.spec.egress.iter().map(|r| (Direction::Egress, r)));
        for (direction, rule) in rules {
            if rule.name.as_deref().is_none_or(str::is_empty) {
                rule.generated_name(direction);
            }
        }
    }
}

impl Rule {
    /// The rule's name, or the `[ingress|egress]-[action]-[hash]` Antrea
    /// generates, so audit log, `trace` and `get` show an Antrea cluster's names.
    pub fn effective_name(&self, direction: Direction) -> String {
        if let Some(name) = self.name.as_deref().filter(|n| !n.is_empty()) {
            return name.to_string();
        }
        self.generated_name(direction)
    }

    /// The name Antrea's mutating webhook gives this rule in `direction`,
    /// ignoring any given name; computed once per decoded rule.
    pub fn generated_name(&self, direction: Direction) -> String {
        self.generated
            .get(direction, || {
                let digest = Sha1::digest(antrea_json(self).as_bytes());
                let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
                let dir = match direction {
                    Direction::Ingress => "ingress",
                    Direction::Egress => "egress",
                };
                format!("{dir}-{}-{}", self.action.lowercase(), &hex[..7])
            })
            .to_string()
    }
}

/// `json.Marshal` of the rule as Antrea's webhook sees it, without its name
/// (the webhook only names rules whose name is empty).
fn antrea_json(rule: &Rule) -> String {
    let mut o = GoObject::new();
    o.raw("action", &go_string(action(rule.action)));
    o.list("ports", &rule.ports, port);
    o.list("protocols", &rule.protocols, protocol);
    o.list("l7Protocols", &rule.l7_protocols, l7);
    o.list("from", &rule.from, peer);
    o.list("to", &rule.to, peer);
    o.list("toServices", &rule.to_services, peer_service);
    o.raw(
        "enableLogging",
        if rule.enable_logging { "true" } else { "false" },
    );
    o.string("logLabel", rule.log_label.as_deref());
    o.list("appliedTo", &rule.applied_to, applied_to);
    o.finish()
}

fn action(action: RuleAction) -> &'static str {
    match action {
        RuleAction::Allow => "Allow",
        RuleAction::Drop => "Drop",
        RuleAction::Reject => "Reject",
        RuleAction::Pass => "Pass",
    }
}

fn port(p: &PolicyPort) -> String {
    let mut o = GoObject::new();
    o.string(
        "protocol",
        p.protocol.map(|p| match p {
            PortProtocol::Tcp => "TCP",
            PortProtocol::Udp => "UDP",
            PortProtocol::Sctp => "SCTP",
        }),
    );
    if let Some(port) = &p.port {
        match port {
            PortValue::Number(n) => o.raw("port", &n.to_string()),
            PortValue::Name(name) => o.raw("port", &go_string(name)),
        }
    }
    o.number("endPort", p.end_port);
    o.number("sourcePort", p.source_port);
    o.number("sourceEndPort", p.source_end_port);
    o.finish()
}

fn protocol(p: &PolicyProtocol) -> String {
    let mut o = GoObject::new();
    if let Some(icmp) = &p.icmp {
        let mut inner = GoObject::new();
        inner.number("icmpType", icmp.icmp_type);
        inner.number("icmpCode", icmp.icmp_code);
        o.raw("icmp", &inner.finish());
    }
    if let Some(igmp) = &p.igmp {
        let mut inner = GoObject::new();
        inner.number("igmpType", igmp.igmp_type);
        inner.string(
            "groupAddress",
            igmp.group_address.map(|a| a.to_string()).as_deref(),
        );
        o.raw("igmp", &inner.finish());
    }
    o.finish()
}

fn l7(p: &L7Protocol) -> String {
    let mut o = GoObject::new();
    if let Some(http) = &p.http {
        let mut inner = GoObject::new();
        inner.string("host", http.host.as_deref());
        inner.string("method", http.method.as_deref());
        inner.string("path", http.path.as_deref());
        o.raw("http", &inner.finish());
    }
    if let Some(tls) = &p.tls {
        let mut inner = GoObject::new();
        inner.string("sni", tls.sni.as_deref());
        o.raw("tls", &inner.finish());
    }
    o.finish()
}

fn peer(p: &Peer) -> String {
    let mut o = GoObject::new();
    if let Some(block) = &p.ip_block {
        o.raw("ipBlock", &ip_block(block));
    }
    o.selector("podSelector", p.pod_selector.as_ref());
    o.selector("namespaceSelector", p.namespace_selector.as_ref());
    if let Some(ns) = &p.namespaces {
        let mut inner = GoObject::new();
        inner.string(
            "match",
            ns.match_.map(|m| match m {
                NamespaceMatchType::SelfNamespace => "Self",
            }),
        );
        inner.list("sameLabels", &ns.same_labels, |s| go_string(s));
        o.raw("namespaces", &inner.finish());
    }
    o.selector(
        "externalEntitySelector",
        p.external_entity_selector.as_deref(),
    );
    o.string("group", p.group.as_deref());
    o.string("fqdn", p.fqdn.as_deref());
    if let Some(sa) = &p.service_account {
        o.raw("serviceAccount", &namespaced_name(sa));
    }
    o.selector("nodeSelector", p.node_selector.as_deref());
    o.finish()
}

fn applied_to(a: &AppliedTo) -> String {
    let mut o = GoObject::new();
    o.selector("podSelector", a.pod_selector.as_ref());
    o.selector("namespaceSelector", a.namespace_selector.as_ref());
    o.selector(
        "externalEntitySelector",
        a.external_entity_selector.as_deref(),
    );
    o.string("group", a.group.as_deref());
    if let Some(sa) = &a.service_account {
        o.raw("serviceAccount", &namespaced_name(sa));
    }
    if let Some(svc) = &a.service {
        o.raw("service", &namespaced_name(svc));
    }
    o.selector("nodeSelector", a.node_selector.as_deref());
    o.finish()
}

fn ip_block(b: &IpBlock) -> String {
    let mut o = GoObject::new();
    o.raw("cidr", &go_string(&b.cidr.to_string()));
    o.list("except", &b.except, |e| go_string(&e.to_string()));
    o.finish()
}

fn namespaced_name(n: &NamespacedName) -> String {
    let mut o = GoObject::new();
    o.string("name", Some(&n.name));
    o.string("namespace", Some(&n.namespace));
    o.finish()
}

fn peer_service(s: &PeerService) -> String {
    let mut o = GoObject::new();
    o.string("name", Some(&s.name));
    o.string("namespace", Some(&s.namespace));
    o.string("scope", s.scope.as_deref());
    o.finish()
}

fn selector(s: &LabelSelector) -> String {
    let mut o = GoObject::new();
    o.map("matchLabels", &s.match_labels);
    o.list("matchExpressions", &s.match_expressions, |e| {
        let mut inner = GoObject::new();
        inner.raw("key", &go_string(&e.key));
        inner.raw(
            "operator",
            &go_string(match e.operator {
                SelectorOperator::In => "In",
                SelectorOperator::NotIn => "NotIn",
                SelectorOperator::Exists => "Exists",
                SelectorOperator::DoesNotExist => "DoesNotExist",
            }),
        );
        inner.list("values", &e.values, |v| go_string(v));
        inner.finish()
    });
    o.finish()
}

/// A JSON object written field by field, in the caller's (Go's) order, with
/// `omitempty` applied by the typed helpers.
struct GoObject {
    out: String,
}

impl GoObject {
    fn new() -> GoObject {
        GoObject { out: "{".into() }
    }

    /// A field whose value is already JSON (never omitted).
    fn raw(&mut self, key: &str, value: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        self.out.push_str(&go_string(key));
        self.out.push(':');
        self.out.push_str(value);
    }

    /// `string,omitempty`: omitted when absent or empty.
    fn string(&mut self, key: &str, value: Option<&str>) {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            self.raw(key, &go_string(v));
        }
    }

    /// `*int32,omitempty`: omitted when absent (a present 0 is written).
    fn number(&mut self, key: &str, value: Option<i32>) {
        if let Some(n) = value {
            self.raw(key, &n.to_string());
        }
    }

    /// `*LabelSelector,omitempty`: a present empty selector is `{}`.
    fn selector(&mut self, key: &str, value: Option<&LabelSelector>) {
        if let Some(s) = value {
            self.raw(key, &selector(s));
        }
    }

    /// `[]T,omitempty`: omitted when empty.
    fn list<T>(&mut self, key: &str, items: &[T], item: impl Fn(&T) -> String) {
        if !items.is_empty() {
            let parts: Vec<String> = items.iter().map(item).collect();
            self.raw(key, &format!("[{}]", parts.join(",")));
        }
    }

    /// `map[string]string,omitempty`: keys sorted, as Go sorts them.
    fn map(&mut self, key: &str, map: &LiteMap<String, String>) {
        if !map.is_empty() {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", go_string(k), go_string(v)))
                .collect();
            self.raw(key, &format!("{{{}}}", parts.join(",")));
        }
    }

    fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// A JSON string as Go's `encoding/json` writes it: HTML-safe (`<`, `>`, `&`
/// as `\u003c`…), U+2028/U+2029 escaped, other control characters as `\n`,
/// `\r`, `\t`, `\b`, `\f` or `\u00XX`, everything else verbatim.
fn go_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;

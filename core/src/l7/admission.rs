//! What an L7 connection's rules require: the rules that decided it
//! ([`Requirement`]: every request must match one of a rule's `http`
//! alternatives, a ClientHello one of its `tls` alternatives) and how a
//! ruleset admits a connection to inspection ([`L7Policy`],
//! [`Admission`]). Pure.

use std::sync::Arc;

use crate::fqdn::FqdnLookup;
use crate::http::{HttpRule, RequestHead};
use crate::model::TlsProtocol;
use crate::packet::flow::{Flow, Verdict};
use crate::ruleset::{Endpoint, RuleRef, Ruleset};

/// One L7 rule that decided the connection: every HTTP request must match
/// one of its `http` alternatives, a TLS connection's ClientHello one of
/// its `tls` alternatives.
#[derive(Clone, Debug)]
pub struct Requirement {
    pub rule: Arc<RuleRef>,
    /// The endpoint the rule applies to, for the audit log.
    pub endpoint: Option<Endpoint>,
    http: Vec<HttpRule>,
    pub(super) tls: Vec<TlsProtocol>,
}

impl Requirement {
    pub fn new(rule: Arc<RuleRef>, endpoint: Option<Endpoint>) -> Requirement {
        let http = rule
            .l7
            .iter()
            .filter_map(|p| p.http.as_ref().map(HttpRule::new))
            .collect();
        let tls = rule.l7.iter().filter_map(|p| p.tls.clone()).collect();
        Requirement {
            rule,
            endpoint,
            http,
            tls,
        }
    }

    pub(super) fn allows(&self, request: &RequestHead) -> bool {
        self.http.iter().any(|rule| rule.matches(request))
    }

    pub(super) fn allows_sni(&self, sni: Option<&str>) -> bool {
        self.tls.iter().any(|rule| crate::tls::matches(rule, sni))
    }
}

/// What the policy says about a connection when its first request arrives.
#[derive(Clone, Debug)]
pub enum Admission {
    /// Allowed subject to these L7 rules (at least one).
    Inspect(Vec<Requirement>),
    /// Allowed with no L7 rule deciding (the policy changed since the SYN).
    Allow,
    /// Not allowed any more.
    Deny,
}

/// The policy as the L7 worker asks it. Implemented by the ruleset.
pub trait L7Policy {
    fn admission(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> Admission;
}

impl L7Policy for Ruleset {
    fn admission(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> Admission {
        let decision = self.classify(flow, fqdn);
        if decision.verdict != Verdict::Allow {
            return Admission::Deny;
        }
        let rules: Vec<Requirement> = [&decision.egress, &decision.ingress]
            .into_iter()
            .filter_map(|direction| {
                let rule = direction.rule().filter(|rule| !rule.l7.is_empty())?;
                Some(Requirement::new(
                    Arc::clone(rule),
                    direction.endpoint.clone(),
                ))
            })
            .collect();
        if rules.is_empty() {
            Admission::Allow
        } else {
            Admission::Inspect(rules)
        }
    }
}

//! Which directions of a classifier [`Decision`] the audit log records, and
//! what it prints about them: the deciding rule when it has
//! `enableLogging` (or its Kubernetes NetworkPolicy's Namespace is
//! annotated), the implicit Kubernetes default drop of an annotated
//! Namespace, and every change a dry-run policy would make (whatever its
//! logging settings: that line is what dry-run is for). Pure: the packet,
//! its length and the time are added by [`Subject::record`].

use std::sync::Arc;

use crate::model::Direction;
use crate::packet::flow::{Flow, Verdict};
use crate::ruleset::{
    Decision, DirectionDecision, DryRunCause, DryRunChange, Endpoint, Outcome, PolicyKind, RuleRef,
    Ruleset,
};

use super::{AuditRecord, Decider, Timestamp, NIL};

/// What the audit log says about one direction of a decision, apart from
/// the packet and the time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub decider: Decider,
    pub direction: Direction,
    pub verdict: Verdict,
    pub priority: Option<u32>,
    pub applied_to: String,
    pub log_label: Option<String>,
    /// A dry-run policy's verdict (see [`AuditRecord::dry_run`]).
    pub dry_run: bool,
}

impl Subject {
    /// The audited directions of `decision`, whose final verdict (after the
    /// worker's own overrides) is `verdict`. An allowed flow logs each
    /// direction whose allowing rule is audited (Antrea logs the egress and
    /// the ingress rule separately); a denied flow logs the direction that
    /// denied it.
    pub fn of(decision: &Decision, verdict: Verdict, ruleset: &Ruleset) -> Vec<Subject> {
        if verdict == Verdict::Allow {
            [&decision.egress, &decision.ingress]
                .into_iter()
                .filter_map(|d| Subject::of_direction(d, verdict, ruleset))
                .collect()
        } else {
            Subject::of_direction(decision.deciding(), verdict, ruleset)
                .into_iter()
                .collect()
        }
    }

    /// The subject for a decision `rule` made about a flow of `endpoint`
    /// outside the classifier (an L7 request verdict), if the rule is
    /// audited.
    pub fn of_rule(rule: &Arc<RuleRef>, endpoint: &Endpoint, verdict: Verdict) -> Option<Subject> {
        rule.enable_logging.then(|| Subject {
            decider: decider_of(rule),
            direction: rule.direction,
            verdict,
            priority: Some(rule.rank),
            applied_to: endpoint.to_string(),
            log_label: rule.log_label.clone(),
            dry_run: false,
        })
    }

    /// The line of a dry-run `change`: its verdict, direction and cause
    /// (the dry-run rule, or the dry-run Kubernetes NetworkPolicy that
    /// would isolate the endpoint).
    pub fn of_dry_run(change: &DryRunChange<'_>) -> Subject {
        let (decider, priority, log_label) = match change.cause {
            DryRunCause::Rule { rule } => {
                (decider_of(rule), Some(rule.rank), rule.log_label.clone())
            }
            DryRunCause::Isolation { policy } => (
                Decider::K8sIsolation {
                    policy: policy.to_string(),
                },
                None,
                None,
            ),
        };
        Subject {
            decider,
            direction: change.direction.direction,
            verdict: change.verdict,
            priority,
            applied_to: change
                .direction
                .endpoint
                .as_ref()
                .map_or_else(|| NIL.to_string(), ToString::to_string),
            log_label,
            dry_run: true,
        }
    }

    fn of_direction(
        decision: &DirectionDecision,
        verdict: Verdict,
        ruleset: &Ruleset,
    ) -> Option<Subject> {
        let endpoint = decision.endpoint.as_ref()?;
        match &decision.outcome {
            Outcome::Rule { rule } => Subject::of_rule(rule, endpoint, verdict),
            Outcome::K8sDefaultDeny if ruleset.logs_k8s_default_drop(endpoint) => Some(Subject {
                decider: Decider::K8sDefaultDrop,
                direction: decision.direction,
                verdict,
                priority: None,
                applied_to: endpoint.to_string(),
                log_label: None,
                dry_run: false,
            }),
            _ => None,
        }
    }

    /// The audit record of this subject for a packet seen at `time`.
    pub fn record(self, time: Timestamp, flow: Flow, packet_length: u32) -> AuditRecord {
        AuditRecord {
            time,
            decider: self.decider,
            direction: self.direction,
            verdict: self.verdict,
            priority: self.priority,
            applied_to: self.applied_to,
            flow,
            packet_length,
            log_label: self.log_label,
            reason: None,
            request: None,
            dry_run: self.dry_run,
        }
    }
}

fn decider_of(rule: &Arc<RuleRef>) -> Decider {
    let policy = rule.policy.to_string();
    match rule.policy.kind {
        PolicyKind::K8sNetworkPolicy => Decider::K8s { policy },
        PolicyKind::AntreaClusterNetworkPolicy | PolicyKind::AntreaNetworkPolicy => {
            Decider::Antrea {
                policy,
                rule: rule.name.clone().unwrap_or_default(),
                baseline: rule.tier.as_deref() == Some(crate::model::BASELINE_TIER),
            }
        }
        PolicyKind::AdminNetworkPolicy
        | PolicyKind::BaselineAdminNetworkPolicy
        | PolicyKind::ClusterNetworkPolicy => Decider::Antrea {
            policy,
            rule: rule.name.clone().unwrap_or_default(),
            baseline: rule.tier.as_deref() == Some(crate::model::NpTier::Baseline.as_str()),
        },
    }
}

//! The filter table's `TOLLGATE-FORWARD` ([`Plan::forward_completion`])
//! and the rules that reject what carries the reject mark. Pure.

use super::privileged::privileged_rule;
use super::{mark_match, Family, Plan};
use crate::config::PrivilegedHook;

impl Plan<'_> {
    /// The filter table's `TOLLGATE-FORWARD`: what the mangle table passed
    /// on is accepted when tollgate allowed it (a verdict mark; a packet
    /// of an allowed or inspected connection; a privileged entry), so that
    /// the runtimes' rules further down do not undo it, and rejected when
    /// it carries the reject mark. Everything else falls through to the
    /// rest of FORWARD.
    pub(super) fn forward_completion(&self) -> Vec<String> {
        let marks = &self.config.mark_mask;
        let allow = mark_match(marks, marks.allow);
        let reject = mark_match(marks, marks.reject);
        let l7 = mark_match(marks, marks.l7);
        let l7_active = mark_match(marks, marks.l7_active());
        let unmarked = mark_match(marks, 0);
        let mut rules = vec![
            format!(
                "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark {allow} -j ACCEPT"
            ),
            // Inspected connections' packets without a verdict mark, ahead
            // of the rules for marks (the last rule takes the others).
            format!(
                "-m mark --mark {unmarked} -m conntrack --ctstate RELATED,ESTABLISHED \
                 -m connmark --mark {l7_active} -j ACCEPT"
            ),
            format!("-m mark --mark {allow} -j ACCEPT"),
            format!("-m mark --mark {l7} -j ACCEPT"),
            format!("-m mark --mark {l7_active} -j ACCEPT"),
        ];
        rules.extend(reject_rules(&reject, self.family));
        rules.push(format!("-m connmark --mark {l7} -j ACCEPT"));
        rules.push(format!(
            "-m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark {l7_active} -j ACCEPT"
        ));
        rules.extend(
            self.config
                .privileged
                .iter()
                .filter(|p| {
                    Family::of(&p.cidr.addr()) == self.family && p.on(PrivilegedHook::Forward)
                })
                .flat_map(|entry| {
                    ["-s", "-d"].map(|dir| privileged_rule(entry, dir, "", self.family))
                }),
        );
        rules
    }
}

/// The two rules that reject what carries the `reject` mark.
pub(super) fn reject_rules(reject: &str, family: Family) -> [String; 2] {
    [
        format!("-p tcp -m mark --mark {reject} -j REJECT --reject-with tcp-reset"),
        format!(
            "-m mark --mark {reject} -j REJECT --reject-with {}",
            match family {
                Family::V4 => "icmp-admin-prohibited",
                Family::V6 => "icmp6-adm-prohibited",
            }
        ),
    ]
}

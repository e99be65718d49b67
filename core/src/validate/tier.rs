//! Tiers: custom Tiers keep clear of the static Tiers' names and of the
//! priorities reserved for `application` and `baseline`, a priority belongs
//! to the first Tier that uses it, and there are at most 20 Tiers. A Tier
//! that restates a static one exactly is accepted as is. Reports only:
//! never renumbers or drops a Tier.

use crate::model::{Tier, STATIC_TIERS};

use super::{Index, Report};

/// Custom Tiers must have a priority below this (250 and above are reserved
/// for `application` and `baseline`).
const CUSTOM_TIER_PRIORITY_LIMIT: i32 = 250;

/// Antrea supports at most this many Tiers, the six static ones included.
const MAX_TIERS: usize = 20;

/// A Tier object that restates a static Tier exactly (as `kubectl get tiers
/// -o yaml` prints them) is not a custom Tier and is accepted as is.
pub(super) fn is_static_redeclaration(tier: &Tier) -> bool {
    STATIC_TIERS
        .iter()
        .any(|&(name, priority)| tier.metadata.name == name && tier.spec.priority == priority)
}

pub(super) fn static_tier_names() -> String {
    STATIC_TIERS
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn check_tier(report: &mut Report<'_>, index: &Index<'_>, tier: &Tier) {
    if is_static_redeclaration(tier) {
        return;
    }
    let name = tier.metadata.name.as_str();
    let priority = tier.spec.priority;
    if STATIC_TIERS.iter().any(|&(n, _)| n == name) {
        report.add(
            "metadata.name",
            format!("`{name}` is a static Tier; a custom Tier cannot reuse its name"),
        );
    }
    if !(0..CUSTOM_TIER_PRIORITY_LIMIT).contains(&priority) {
        report.add(
            "spec.priority",
            format!(
                "custom Tier priority must be between 0 and {} (250 and above are reserved), got {priority}",
                CUSTOM_TIER_PRIORITY_LIMIT - 1
            ),
        );
    }
    // The first Tier (static ones first, then in snapshot order) to use a
    // priority owns it; later ones are reported.
    let position = index
        .custom_tiers
        .iter()
        .position(|t| std::ptr::eq(*t, tier))
        .unwrap_or(0);
    let earlier = STATIC_TIERS
        .iter()
        .copied()
        .chain(
            index.custom_tiers[..position]
                .iter()
                .map(|t| (t.metadata.name.as_str(), t.spec.priority)),
        )
        .find(|&(n, p)| p == priority && n != name);
    if let Some((other, _)) =
        earlier.filter(|_| (0..CUSTOM_TIER_PRIORITY_LIMIT).contains(&priority))
    {
        report.add(
            "spec.priority",
            format!("priority {priority} is already used by Tier {other}"),
        );
    }
    let custom_allowed = MAX_TIERS - STATIC_TIERS.len();
    if position >= custom_allowed {
        report.add(
            "metadata.name",
            format!(
                "at most {MAX_TIERS} Tiers are supported ({} static and {custom_allowed} custom)",
                STATIC_TIERS.len()
            ),
        );
    }
}

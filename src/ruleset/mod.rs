//! The compiled policy of a node and the questions asked of it.

mod classify;
mod rule;

pub use classify::{Decision, DirectionDecision, LocalSide, Outcome};
pub use rule::{Block, CompiledRule, PeerMatch, PolicyKind, PolicyRef, RuleRef, ServiceMatch};

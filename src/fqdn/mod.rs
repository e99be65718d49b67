//! FQDN peers: what a selector matches ([`FqdnPattern`]), the in-memory
//! mirror of the addresses learned for each selector from DNS answers
//! ([`FqdnLearner`]), and the turning of queued reply packets into the DNS
//! messages it learns from ([`DnsSnooper`]). Pure: no DNS traffic, no ipset
//! writes, no clock reads.

mod learner;
mod pattern;
mod snoop;
mod step;
mod table;

pub use snoop::{
    DnsSnooper, Release, SnoopEvent, Snooped, DEFAULT_MAX_TCP_FLOWS, DEFAULT_MAX_TCP_MESSAGE,
};

pub use learner::{
    FqdnLearner, IpsetChange, LearnedAt, LearnerConfig, LearnerCounters, RestoredEntry,
    MAX_IPSET_TIMEOUT_SECS,
};

pub use step::{DnsStep, SetWrite};
pub use table::{Expired, FqdnTable, TableLookup};

pub(crate) use pattern::glob_match;
pub use pattern::{FqdnLookup, FqdnPattern, NoFqdn, StaticFqdn};

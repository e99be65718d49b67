//! FQDN peers: what a selector matches ([`FqdnPattern`]), the in-memory
//! mirror of the addresses learned for each selector from DNS answers
//! ([`FqdnLearner`]), the turning of queued query and reply packets into
//! DNS messages ([`DnsSnooper`]), and the queries still waiting for the
//! answer they alone may teach ([`OutstandingQueries`]), when exact names
//! are resolved ahead ([`ResolveSchedule`]), and which learned set writes
//! share a batch and which replies its acknowledgement releases
//! ([`SetWriteQueue`]). Pure: no DNS traffic, no ipset writes, no clock
//! reads.

mod learner;
mod pattern;
mod queries;
mod resolve;
mod snoop;
mod step;
mod table;
mod writes;

pub use snoop::{
    DnsSnooper, Release, ReplyPath, SnoopEvent, Snooped, DEFAULT_MAX_TCP_FLOWS,
    DEFAULT_MAX_TCP_MESSAGE, DNS_PORT,
};

pub use queries::{
    Answered, Direction, DnsFlow, OutstandingQueries, QueryBounds, Transport,
    DEFAULT_MAX_OUTSTANDING_QUERIES, DEFAULT_QUERY_TIMEOUT_SECS,
};

pub use learner::{
    FqdnLearner, IpsetChange, LearnedAt, LearnerConfig, LearnerCounters, RestoredEntry, Source,
    DEFAULT_MAX_TTL_SECS, MAX_IPSET_TIMEOUT_SECS,
};

pub use resolve::{
    FqdnResolve, QueryType, ResolveBounds, ResolveOutcome, ResolveQuery, ResolveSchedule,
    UnknownResolve, DEFAULT_RESOLVE_BACKOFF_CAP_SECS, DEFAULT_RESOLVE_CONCURRENCY,
};
pub use step::{DnsCounters, DnsCounts, DnsStep, Learned, SetWrite};
pub use table::{Expired, FqdnTable, TableLookup};
pub use writes::{Pushed, SetWriteQueue, WriteBatch, DEFAULT_WRITE_QUEUE, MAX_WRITE_BATCH};

pub(crate) use pattern::glob_match;
pub use pattern::{FqdnLookup, FqdnPattern, NoFqdn, StaticFqdn};

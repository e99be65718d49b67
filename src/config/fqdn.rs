//! `fqdn`: how DNS answers are learned for FQDN rules, their bounds, and
//! resolving exact names ahead. Keys, defaults and checks; pure.

use std::net::IpAddr;

use serde::Deserialize;

use super::ConfigError;
use crate::fqdn::{
    FqdnResolve, LearnerConfig, QueryBounds, ResolveBounds, DEFAULT_MAX_OUTSTANDING_QUERIES,
    DEFAULT_MAX_TTL_SECS, DEFAULT_QUERY_TIMEOUT_SECS, DEFAULT_RESOLVE_BACKOFF_CAP_SECS,
    DEFAULT_RESOLVE_CONCURRENCY, DEFAULT_WRITE_QUEUE, MAX_IPSET_TIMEOUT_SECS,
};

/// Default floor on the TTL of learned addresses (seconds): covers the
/// connect and its retries after a TTL-0 answer.
pub const DEFAULT_FQDN_MIN_TTL: u32 = 5;
/// Default NFLOG group of the copies of DNS queries.
pub const DEFAULT_DNS_LOG_GROUP: u16 = 101;
/// Default receive buffer of the query-copy socket: each copy takes
/// about 8 KiB of it (the kernel's smallest NFLOG buffer is 4 KiB), so
/// some 500 unanswered queries wait between two drains.
pub const DEFAULT_QUERY_LOG_BUFFER: usize = 4 << 20;
/// Smallest per-name bound accepted (the upstream FQDN selector proposal
/// requires at least 100).
pub const MIN_FQDN_MAX_PER_NAME: usize = 100;
/// Default and largest bound on addresses remembered in total (the default
/// `maxelem` of an ipset, which the FQDN sets keep).
pub const MAX_FQDN_ADDRESSES: usize = 65_536;

/// How DNS answers are learned for FQDN rules.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FqdnConfig {
    /// NFQUEUE of DNS replies and of queries over TCP (default: the first
    /// after the connection queues).
    #[arg(long = "dns-queue", value_name = "N")]
    pub dns_queue: u16,
    /// NFLOG group of the copies of DNS queries over UDP (default 101):
    /// the queries pass, their copies tell the DNS worker what was asked.
    #[arg(skip)]
    pub dns_log_group: u16,
    /// Bytes of receive buffer of the DNS worker's NFLOG socket (default
    /// 4194304; the kernel's floor applies): copies it cannot hold are
    /// lost, and replies to their queries are released unlearned.
    #[arg(skip)]
    pub query_log_buffer: usize,
    /// Learn only from replies of these DNS servers; empty: from any.
    #[arg(long = "dns-trusted-server", value_name = "IP")]
    pub trusted_servers: Vec<IpAddr>,
    /// Floor on the TTL of learned addresses, seconds (default 5).
    #[arg(long = "fqdn-min-ttl", value_name = "SECS")]
    pub min_ttl: u32,
    /// Ceiling on the TTL of learned addresses, seconds (default 86400,
    /// at least fqdn.minTtl and 1): how long one answer can keep an
    /// address allowed.
    #[arg(long = "fqdn-max-ttl", value_name = "SECS")]
    pub max_ttl: u32,
    /// DNS queries remembered until answered (default 65536, at least 1):
    /// a reply is learned from only if it answers one.
    #[arg(skip)]
    pub max_outstanding_queries: usize,
    /// Seconds a remembered query waits for its answer (default 30, at
    /// least 1).
    #[arg(skip)]
    pub query_timeout: u32,
    /// Addresses remembered per name (default 128, at least 100).
    #[arg(skip)]
    pub max_addresses_per_name: usize,
    /// Addresses remembered in all (default and at most 65536).
    #[arg(skip)]
    pub max_addresses: usize,
    /// Learned set writes queued for the kernel before a reply whose
    /// writes do not fit waits for the queue to be written (default 4096,
    /// at least 1): replies are delayed, never dropped or released early.
    #[arg(skip)]
    pub write_queue: usize,
    /// Whether tollgate resolves exact FQDN selectors itself, when they
    /// appear and before their addresses time out: exact (default) or off
    /// (snooping only). Wildcards are always snoop-only.
    #[arg(long = "fqdn-resolve", value_name = "exact|off")]
    pub resolve: FqdnResolve,
    /// DNS servers (port 53) tollgate asks for exact names, in order;
    /// empty: the nameservers of the node's /etc/resolv.conf.
    #[arg(long = "fqdn-resolver", value_name = "IP")]
    pub resolvers: Vec<IpAddr>,
    /// Queries for exact names in flight at once, one thread each
    /// (default 8, 2 to 64): each policy gets its share, names that got
    /// no answer at most half.
    #[arg(skip)]
    pub resolve_concurrency: usize,
    /// Longest wait, seconds, before a name that keeps failing (no answer,
    /// NXDOMAIN, no record of the type) is asked again (default 300, 1 to
    /// 86400).
    #[arg(skip)]
    pub resolve_backoff_cap: u32,
}

impl Default for FqdnConfig {
    fn default() -> Self {
        FqdnConfig {
            dns_queue: 101,
            dns_log_group: DEFAULT_DNS_LOG_GROUP,
            query_log_buffer: DEFAULT_QUERY_LOG_BUFFER,
            trusted_servers: Vec::new(),
            min_ttl: DEFAULT_FQDN_MIN_TTL,
            max_ttl: DEFAULT_MAX_TTL_SECS,
            max_outstanding_queries: DEFAULT_MAX_OUTSTANDING_QUERIES,
            query_timeout: DEFAULT_QUERY_TIMEOUT_SECS,
            max_addresses_per_name: 128,
            max_addresses: MAX_FQDN_ADDRESSES,
            write_queue: DEFAULT_WRITE_QUEUE,
            resolve: FqdnResolve::default(),
            resolvers: Vec::new(),
            resolve_concurrency: DEFAULT_RESOLVE_CONCURRENCY,
            resolve_backoff_cap: DEFAULT_RESOLVE_BACKOFF_CAP_SECS,
        }
    }
}

impl FqdnConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bound = |key, value: usize, reason| ConfigError::Bound {
            key,
            value: value as u64,
            reason,
        };
        let (per_name, total) = (self.max_addresses_per_name, self.max_addresses);
        if per_name < MIN_FQDN_MAX_PER_NAME {
            return Err(bound(
                "fqdn.maxAddressesPerName",
                per_name,
                "must be at least 100",
            ));
        }
        if total < per_name {
            return Err(bound(
                "fqdn.maxAddresses",
                total,
                "must be at least fqdn.maxAddressesPerName",
            ));
        }
        if total > MAX_FQDN_ADDRESSES {
            return Err(bound(
                "fqdn.maxAddresses",
                total,
                "must be at most 65536 (the FQDN sets' maxelem)",
            ));
        }
        if self.max_ttl < self.min_ttl.max(1) {
            return Err(ConfigError::Bound {
                key: "fqdn.maxTtl",
                value: u64::from(self.max_ttl),
                reason: "must be at least fqdn.minTtl and 1",
            });
        }
        if self.max_ttl > MAX_IPSET_TIMEOUT_SECS {
            return Err(ConfigError::Bound {
                key: "fqdn.maxTtl",
                value: u64::from(self.max_ttl),
                reason: "must be at most 2147483 (the largest ipset timeout)",
            });
        }
        if self.max_outstanding_queries == 0 {
            return Err(bound("fqdn.maxOutstandingQueries", 0, "must be at least 1"));
        }
        if self.query_timeout == 0 {
            return Err(bound("fqdn.queryTimeout", 0, "must be at least 1"));
        }
        if self.write_queue == 0 {
            return Err(bound("fqdn.writeQueue", 0, "must be at least 1"));
        }
        if !(2..=64).contains(&self.resolve_concurrency) {
            return Err(bound(
                "fqdn.resolveConcurrency",
                self.resolve_concurrency,
                "must be between 2 and 64",
            ));
        }
        if !(1..=86_400).contains(&self.resolve_backoff_cap) {
            return Err(ConfigError::Bound {
                key: "fqdn.resolveBackoffCap",
                value: u64::from(self.resolve_backoff_cap),
                reason: "must be between 1 and 86400 seconds",
            });
        }
        Ok(())
    }

    /// The bounds of the outstanding-query table.
    pub fn query_bounds(&self) -> QueryBounds {
        QueryBounds {
            max_outstanding: self.max_outstanding_queries,
            timeout_secs: self.query_timeout,
        }
    }

    /// The timing of resolving ahead: the learner's TTL bounds, the
    /// concurrency and backoff cap set here, the default rates.
    pub fn resolve_bounds(&self) -> ResolveBounds {
        ResolveBounds {
            min_ttl_secs: self.min_ttl,
            max_ttl_secs: self.max_ttl,
            concurrency: self.resolve_concurrency,
            max_backoff_ms: u64::from(self.resolve_backoff_cap) * 1000,
            ..ResolveBounds::default()
        }
    }

    /// The learner's bounds.
    pub fn learner(&self) -> LearnerConfig {
        LearnerConfig {
            min_ttl_secs: self.min_ttl,
            max_ttl_secs: self.max_ttl,
            max_addresses_per_name: self.max_addresses_per_name,
            max_addresses: self.max_addresses,
        }
    }
}

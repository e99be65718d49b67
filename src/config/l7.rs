//! `l7`: how connections under L7 rules are inspected: the queues, the
//! deny response, urgent data and HTTP framing. Keys, defaults and checks;
//! pure.

use std::time::Duration;

use serde::Deserialize;

use super::values::seconds;
use super::{ConfigError, QueueRange};
use crate::http::{FramingPolicy, BODYLESS_METHODS};
use crate::l7::{DenyResponse, UrgentData};

/// How connections under L7 rules are inspected.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct L7Config {
    /// NFQUEUE of client→server payload of L7 connections (default: the
    /// first queue after the connection queues that the DNS queue does not
    /// take).
    #[arg(skip)]
    pub queue: u16,
    /// Number of L7 queues from l7.queue on, one worker thread each
    /// (default 2, at most 64): each connection goes to one of them by its
    /// client port, both directions alike.
    #[arg(long = "l7-queues", value_name = "N")]
    pub queues: u16,
    /// Answer to a denied HTTP request: 403 (default) or reset.
    #[arg(long = "l7-deny-response", value_name = "403|reset")]
    pub deny_response: DenyResponse,
    /// Flows tracked at once (default 65536); the least recently used is
    /// forgotten first.
    #[arg(skip)]
    pub max_flows: usize,
    /// Idle time after which a flow's state is forgotten, seconds (default
    /// 600); its connection is then reset on its next request bytes.
    #[arg(skip)]
    #[serde(rename = "idleTimeoutSeconds", deserialize_with = "seconds")]
    pub idle_timeout: Duration,
    /// A client segment with TCP urgent data (URG or an urgent pointer):
    /// reset the connection (default), or strip URG and the pointer so the
    /// server reads the byte in-band, as tollgate inspected it.
    #[arg(long = "l7-urgent-data", value_name = "reset|strip")]
    pub urgent_data: UrgentData,
    /// Deny requests backends commonly frame differently (default true):
    /// bodies on GET, HEAD, DELETE, TRACE; obsolete line folding; bare CR
    /// or LF; duplicate Content-Length; Content-Length with
    /// Transfer-Encoding; Transfer-Encoding other than `chunked`.
    #[arg(skip)]
    pub strict_framing: bool,
    /// Methods among GET, HEAD, DELETE, TRACE whose requests may carry a
    /// body under strict framing (default none).
    #[arg(skip)]
    pub allow_body_on: Vec<String>,
}

impl Default for L7Config {
    fn default() -> Self {
        L7Config {
            queue: 102,
            queues: DEFAULT_L7_QUEUES,
            deny_response: DenyResponse::default(),
            max_flows: 65_536,
            idle_timeout: Duration::from_secs(600),
            urgent_data: UrgentData::default(),
            strict_framing: true,
            allow_body_on: Vec::new(),
        }
    }
}

/// Default `l7.queues`.
pub const DEFAULT_L7_QUEUES: u16 = 2;
/// Largest `l7.queues`.
pub const MAX_L7_QUEUES: u16 = 64;

impl L7Config {
    /// The L7 queue numbers (as checked by [`AgentConfig::validate`]).
    pub fn range(&self) -> QueueRange {
        let count = self.queues.clamp(1, MAX_L7_QUEUES);
        QueueRange {
            base: self.queue,
            count: count.min(u16::MAX - self.queue + 1),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let at_least_one = |key, value| ConfigError::Bound {
            key,
            value,
            reason: "must be at least 1",
        };
        if !(1..=MAX_L7_QUEUES).contains(&self.queues)
            || u32::from(self.queue) + u32::from(self.queues) - 1 > u32::from(u16::MAX)
        {
            return Err(ConfigError::Bound {
                key: "l7.queues",
                value: u64::from(self.queues),
                reason: "must be between 1 and 64, the last queue at most 65535",
            });
        }
        if self.max_flows == 0 {
            return Err(at_least_one("l7.maxFlows", 0));
        }
        if self.idle_timeout.is_zero() {
            return Err(at_least_one("l7.idleTimeoutSeconds", 0));
        }
        if let Some(method) = self
            .allow_body_on
            .iter()
            .find(|m| !BODYLESS_METHODS.contains(&m.as_str()))
        {
            return Err(ConfigError::AllowBodyOn {
                method: method.clone(),
            });
        }
        Ok(())
    }

    /// The framing the inspector's request trackers apply.
    pub fn framing(&self) -> FramingPolicy {
        match (self.strict_framing, self.allow_body_on.is_empty()) {
            (false, _) => FramingPolicy::Lenient,
            (true, true) => FramingPolicy::Strict,
            (true, false) => FramingPolicy::StrictAllowingBodies(self.allow_body_on.clone().into()),
        }
    }
}

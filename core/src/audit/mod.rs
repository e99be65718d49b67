//! The audit log's pure core: the spec's `np.log` line format, the 1-second
//! deduplication of Drop and Reject lines, and the best-effort rate limit.
//! Time is always passed in; writing the lines to a file is the agent's job.
//!
//! One line per logged connection, exactly as the Antrea spec shows:
//!
//! ```text
//! 2023/07/04 12:45:21.804416 IngressDefaultRule AntreaNetworkPolicy:default/reject-tcp-policy RejectTCPRequest Ingress Reject 16 default/nettoolv3 10.10.1.7 53646 10.10.1.14 80 TCP 60 tcp-log-label
//! 2023/07/03 23:24:37.424024 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy RejectICMPRequest Egress Reject 14500 default/nettool 10.10.1.7 <nil> 10.10.2.3 <nil> ICMP 84 icmp-log-label [2 packets in 1.000855539s]
//! ```
//!
//! tollgate appends `key="value"` columns (quoted and escaped, so a
//! request cannot forge a column or a line): `reason="…"` when more than
//! the rule decided, and for an HTTP request decided by an L7 rule its
//! `method="…" host="…" path="…"`. With `audit.format: json` each line is
//! one JSON object with the same fields ([`AuditFormat`]). A dry-run
//! policy's line ([`AuditRecord::dry_run`]) has the disposition
//! `DryRun<Verdict>` (`DryRunDrop`) where the action goes: what the
//! dry-run policy would have done to a connection the enforced policy
//! decided otherwise.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::http::RequestHead;
use crate::model::Direction;
use crate::packet::flow::{Flow, Verdict};

mod subject;

pub use subject::Subject;

/// A point in time as the audit log prints it: civil UTC date and time with
/// microseconds. Built from a Unix timestamp so the format is pure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    /// Microseconds since the Unix epoch.
    pub unix_micros: u64,
}

impl Timestamp {
    pub fn from_unix_micros(unix_micros: u64) -> Timestamp {
        Timestamp { unix_micros }
    }

    fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.unix_micros.saturating_sub(earlier.unix_micros))
    }

    /// `yyyy-mm-ddThh:mm:ss.uuuuuuZ` (RFC 3339, UTC).
    pub fn rfc3339(self) -> String {
        let text = self.format();
        format!("{}T{}Z", text[..10].replace('/', "-"), &text[11..])
    }

    /// `yyyy/mm/dd hh:mm:ss.uuuuuu` in UTC.
    pub fn format(self) -> String {
        let secs = self.unix_micros / 1_000_000;
        let micros = self.unix_micros % 1_000_000;
        let (year, month, day) = civil_from_days((secs / 86_400) as i64);
        let rem = secs % 86_400;
        format!(
            "{year:04}/{month:02}/{day:02} {:02}:{:02}:{:02}.{micros:06}",
            rem / 3600,
            rem / 60 % 60,
            rem % 60
        )
    }
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Who decided: an Antrea rule, a Kubernetes NetworkPolicy rule, or the
/// implicit default drop of an isolated Pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Decider {
    /// `AntreaClusterNetworkPolicy:name` / `AntreaNetworkPolicy:ns/name`,
    /// the rule's (possibly generated) name, and whether its Tier is
    /// `baseline` (logged in the default-rule stage, as Antrea does).
    Antrea {
        policy: String,
        rule: String,
        baseline: bool,
    },
    /// `K8sNetworkPolicy:ns/name`; Kubernetes rules have no name.
    K8s { policy: String },
    /// Not allowed by any NetworkPolicy of an isolated Pod.
    K8sDefaultDrop,
    /// The default drop of the isolation by `K8sNetworkPolicy:ns/name`:
    /// a dry-run policy's line names the dry-run policy that would isolate.
    K8sIsolation { policy: String },
}

/// One logged connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    pub time: Timestamp,
    pub decider: Decider,
    pub direction: Direction,
    pub verdict: Verdict,
    /// The rule's position in evaluation order (the spec prints the
    /// OpenFlow priority here; tollgate's equivalent is the rule's rank);
    /// `None` prints `<nil>` (K8s default drop).
    pub priority: Option<u32>,
    /// The endpoint the rule applied to, `ns/name` (or the Node's name).
    pub applied_to: String,
    pub flow: Flow,
    /// Length of the first packet, bytes.
    pub packet_length: u32,
    pub log_label: Option<String>,
    /// Why, beyond the rule (an L7 refusal such as `strict framing: body
    /// on GET`): printed after the label as `reason="…"`; lines without
    /// one keep the spec's format exactly.
    pub reason: Option<String>,
    /// The HTTP request an L7 rule decided: printed last as
    /// `method="…" host="…" path="…"` (an absent Host as `host=""`).
    pub request: Option<RequestHead>,
    /// What a dry-run policy would have done (`verdict`) to a connection
    /// the enforced policy decided otherwise: the action column reads
    /// `DryRun<verdict>`.
    pub dry_run: bool,
}

/// How the audit log writes a record: the spec's np.log line (`text`,
/// the default) or one JSON object per line (`json`) for log shippers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuditFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for AuditFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(AuditFormat::Text),
            "json" => Ok(AuditFormat::Json),
            _ => Err(format!("audit format {s:?}: expected text or json")),
        }
    }
}

impl<'de> Deserialize<'de> for AuditFormat {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for AuditFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AuditFormat::Text => "text",
            AuditFormat::Json => "json",
        })
    }
}

/// How many packets a deduplicated line stands for, and over how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeats {
    pub packets: u64,
    pub over: Duration,
}

impl AuditRecord {
    /// The stage name the spec prints in the third column.
    fn table(&self) -> &'static str {
        match (&self.decider, self.direction) {
            (
                Decider::K8sDefaultDrop
                | Decider::K8sIsolation { .. }
                | Decider::Antrea { baseline: true, .. },
                Direction::Ingress,
            ) => "IngressDefaultRule",
            (
                Decider::K8sDefaultDrop
                | Decider::K8sIsolation { .. }
                | Decider::Antrea { baseline: true, .. },
                Direction::Egress,
            ) => "EgressDefaultRule",
            (Decider::K8s { .. }, Direction::Ingress) => "IngressRule",
            (Decider::K8s { .. }, Direction::Egress) => "EgressRule",
            (Decider::Antrea { .. }, Direction::Ingress) => "AntreaPolicyIngressRule",
            (Decider::Antrea { .. }, Direction::Egress) => "AntreaPolicyEgressRule",
        }
    }

    /// The line, without a dedup summary and without a newline.
    pub fn line(&self) -> String {
        format!("{} {}", self.time.format(), self.fields())
    }

    /// The action column: the verdict, `DryRun<verdict>` for a dry-run
    /// policy's.
    fn disposition(&self) -> String {
        if self.dry_run {
            format!("DryRun{}", self.verdict)
        } else {
            self.verdict.to_string()
        }
    }

    /// Every column after the date and time: what deduplication compares.
    fn fields(&self) -> String {
        let (policy, rule) = match &self.decider {
            Decider::Antrea { policy, rule, .. } => (policy.as_str(), rule.as_str()),
            Decider::K8s { policy } | Decider::K8sIsolation { policy } => (policy.as_str(), NIL),
            Decider::K8sDefaultDrop => ("K8sNetworkPolicy", NIL),
        };
        let port = |p: Option<u16>| p.map_or_else(|| NIL.to_string(), |p| p.to_string());
        let mut out = String::with_capacity(180);
        let _ = write!(
            out,
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            self.table(),
            policy,
            rule,
            self.direction.as_str(),
            self.disposition(),
            self.priority
                .map_or_else(|| NIL.to_string(), |p| p.to_string()),
            self.applied_to,
            self.flow.src,
            port(self.flow.transport.src_port()),
            self.flow.dst,
            port(self.flow.transport.dst_port()),
            self.flow.transport.name(),
            self.packet_length,
            self.log_label.as_deref().unwrap_or(NIL)
        );
        if let Some(reason) = &self.reason {
            let _ = write!(out, " reason={:?}", reason);
        }
        if let Some(request) = &self.request {
            let host = request.host.as_deref().unwrap_or_default();
            let _ = write!(
                out,
                " method={:?} host={:?} path={:?}",
                request.method, host, request.path
            );
        }
        out
    }

    /// The record as `format` writes it, stamped `time`, with the
    /// deduplication summary when it stands for repeated packets.
    pub fn render(&self, format: AuditFormat, time: Timestamp, repeats: Option<Repeats>) -> String {
        match format {
            AuditFormat::Text => {
                let mut line = format!("{} {}", time.format(), self.fields());
                if let Some(Repeats { packets, over }) = repeats {
                    let _ = write!(line, " [{packets} packets in {}]", go_duration(over));
                }
                line
            }
            AuditFormat::Json => self.json(time, repeats).to_string(),
        }
    }

    /// The JSON object of [`AuditFormat::Json`]: the np.log columns by
    /// name (`null` for `<nil>`), the time in RFC 3339.
    fn json(&self, time: Timestamp, repeats: Option<Repeats>) -> Value {
        let (policy, rule) = match &self.decider {
            Decider::Antrea { policy, rule, .. } => (policy.as_str(), Some(rule.as_str())),
            Decider::K8s { policy } | Decider::K8sIsolation { policy } => (policy.as_str(), None),
            Decider::K8sDefaultDrop => ("K8sNetworkPolicy", None),
        };
        let mut object = json!({
            "time": time.rfc3339(),
            "table": self.table(),
            "policy": policy,
            "rule": rule,
            "direction": self.direction.as_str(),
            "action": self.disposition(),
            "priority": self.priority,
            "appliedTo": self.applied_to,
            "srcIP": self.flow.src.to_string(),
            "srcPort": self.flow.transport.src_port(),
            "dstIP": self.flow.dst.to_string(),
            "dstPort": self.flow.transport.dst_port(),
            "protocol": self.flow.transport.name(),
            "length": self.packet_length,
            "logLabel": self.log_label,
        });
        let Value::Object(map) = &mut object else {
            return object;
        };
        if let Some(reason) = &self.reason {
            map.insert("reason".into(), reason.as_str().into());
        }
        if let Some(request) = &self.request {
            map.insert(
                "http".into(),
                json!({
                    "method": request.method,
                    "host": request.host,
                    "path": request.path,
                }),
            );
        }
        if let Some(Repeats { packets, over }) = repeats {
            map.insert("packets".into(), packets.into());
            map.insert("durationSeconds".into(), over.as_secs_f64().into());
        }
        object
    }
}

const NIL: &str = "<nil>";

/// Formats a duration as Go's `time.Duration.String()` does for the
/// summary (`1.000855539s`, `250ms`).
fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    let trim = |whole: u128, frac: u128, digits: usize, unit: &str| {
        let frac = format!("{frac:0digits$}");
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            format!("{whole}{unit}")
        } else {
            format!("{whole}.{frac}{unit}")
        }
    };
    if nanos < 1_000_000 {
        return trim(nanos / 1_000, nanos % 1_000, 3, "µs");
    }
    if nanos < 1_000_000_000 {
        return trim(nanos / 1_000_000, nanos % 1_000_000, 6, "ms");
    }
    trim(nanos / 1_000_000_000, nanos % 1_000_000_000, 9, "s")
}

/// The 1-second deduplication buffer for Drop and Reject lines, as
/// Antrea's agent does it: two packets are duplicates when every column
/// but the time is equal (same rule, endpoints, ports, length, label). The
/// first packet is logged at once; repeats within the window are counted;
/// when the window closes, if there were repeats, the line is written again
/// stamped with the closing time and the summary `[N packets in D]`, D the
/// time from the first packet to the close (so about one second: the
/// spec's `[2 packets in 1.000855539s]`). Allow lines are never
/// deduplicated.
#[derive(Debug)]
pub struct Deduplicator {
    window: Duration,
    format: AuditFormat,
    /// Line columns → (first packet's record, packets seen).
    open: HashMap<String, (AuditRecord, u64)>,
    max_keys: usize,
}

impl Deduplicator {
    /// `max_keys` bounds memory: past it, new keys are logged without
    /// deduplication rather than grow the table.
    pub fn new(window: Duration, max_keys: usize, format: AuditFormat) -> Deduplicator {
        Deduplicator {
            window,
            format,
            open: HashMap::new(),
            max_keys,
        }
    }

    /// Offers a record; returns the lines to write now (summaries of
    /// windows closed by then first, then this record's line if it opens a
    /// window or is an Allow).
    pub fn offer(&mut self, record: AuditRecord) -> Vec<String> {
        let mut lines = self.flush(record.time);
        if record.verdict == Verdict::Allow {
            lines.push(record.render(self.format, record.time, None));
            return lines;
        }
        let key = record.fields();
        match self.open.get_mut(&key) {
            Some((_, count)) => *count += 1,
            None => {
                lines.push(record.render(self.format, record.time, None));
                if self.open.len() < self.max_keys {
                    self.open.insert(key, (record, 1));
                }
            }
        }
        lines
    }

    /// Closes the windows that are at least `window` old at `now` and
    /// returns their summary lines, oldest first.
    pub fn flush(&mut self, now: Timestamp) -> Vec<String> {
        let window = self.window;
        self.close(now, |first| now.since(first) >= window)
    }

    /// Closes every window at `now` (shutdown).
    pub fn close_all(&mut self, now: Timestamp) -> Vec<String> {
        self.close(now, |_| true)
    }

    /// When the oldest open window closes, if any is open.
    pub fn next_close(&self) -> Option<Timestamp> {
        let window = u64::try_from(self.window.as_micros()).unwrap_or(u64::MAX);
        self.open
            .values()
            .map(|(first, _)| first.time.unix_micros.saturating_add(window))
            .min()
            .map(Timestamp::from_unix_micros)
    }

    fn close(&mut self, now: Timestamp, due: impl Fn(Timestamp) -> bool) -> Vec<String> {
        let mut closed: Vec<(AuditRecord, u64)> = Vec::new();
        self.open.retain(|_, entry| {
            if due(entry.0.time) {
                closed.push(entry.clone());
                false
            } else {
                true
            }
        });
        closed.sort_by_key(|(first, _)| first.time);
        closed
            .into_iter()
            .filter(|(_, count)| *count > 1)
            .map(|(first, packets)| {
                let over = now.since(first.time);
                first.render(self.format, now, Some(Repeats { packets, over }))
            })
            .collect()
    }
}

/// Token bucket: at most `rate` lines per second with bursts of `burst`.
/// Over the limit a line is skipped and counted, never delayed.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Timestamp>,
    pub skipped: u64,
}

impl RateLimiter {
    pub fn new(rate: u32, burst: u32) -> RateLimiter {
        RateLimiter {
            rate: f64::from(rate),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: None,
            skipped: 0,
        }
    }

    /// Whether a line may be written at `now`.
    pub fn admit(&mut self, now: Timestamp) -> bool {
        if let Some(last) = self.last {
            let elapsed = now.since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.skipped += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests;

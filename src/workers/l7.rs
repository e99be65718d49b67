//! The L7 queue's handler: each segment goes through the pure [`Gate`];
//! its injections are sent before its verdicts are given, while the
//! connection's mark still lets them pass. It counts and hands audit
//! records and the requests decided (to `tollgate observe`) on; it never
//! decides anything itself or logs per packet.

use std::num::NonZeroUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;

use super::audit::AuditSink;
use super::inject::Injector;
use super::nfqueue::Queue;
use super::observe::ObserveSink;
use super::runtime::{self, wall_clock, Handler, QueueError, QueueSpec, Verdicts};
use super::Observers;
use crate::audit::Subject;
use crate::config::{DatapathConfig, L7Config};
use crate::counters;
use crate::fqdn::FqdnTable;
use crate::http::DEFAULT_MAX_HEAD;
use crate::l7::{Detail, Gate, Inspector, L7Policy, RequestRecord, Tally, MAX_DEFERRED_TOTAL};
use crate::marks::FailMode;
use crate::observe::Observed;
use crate::packet::flow::Verdict;
use crate::packet::{Discard, FlowKey, Queued};
use crate::ruleset::DecidedBy;

/// Whole packets: a request head must be read from the segment itself.
const COPY_RANGE: u16 = 0xffff;
/// Packets the kernel holds for the L7 queue, including withheld ones.
const QUEUE_MAX_LEN: u32 = 16_384;

counters! {
    /// What an L7 queue's worker saw and did.
    pub struct L7Counters: one per queue {
        requests_allowed: Counter "l7_requests" { result = "allowed" } = "HTTP requests decided by L7 rules, by result (allowed or denied)",
        requests_denied: Counter "l7_requests" { result = "denied" } = "HTTP requests decided by L7 rules, by result (allowed or denied)",
        resets: Counter "l7_resets" = "Connections closed without a 403 (not HTTP, malformed, state lost)",
        held: Counter "l7_held" = "Segments dropped after a gap in the stream or repeating deferred bytes",
        deferred: Counter "l7_deferred" = "Segments whose verdict waited for the rest of a request head",
        deferred_evicted: Counter "l7_deferred_evicted" = "Connections forgotten because too many segments were held overall",
        malformed: Counter "l7_malformed" = "Packets on the L7 queue that were not readable TCP segments (dropped)",
        inject_errors: Counter "l7_inject_errors" = "Packets closing a denied connection that could not be sent",
        urgent_reset: Counter "l7_urgent_data" { action = "reset" } = "Client segments with TCP urgent data, by what they got (reset: the connection; stripped: URG and the urgent pointer cleared)",
        urgent_stripped: Counter "l7_urgent_data" { action = "stripped" } = "Client segments with TCP urgent data, by what they got (reset: the connection; stripped: URG and the urgent pointer cleared)",
        framing_denied: Counter "l7_strict_framing_denied" = "Requests denied by strict framing (also counted in l7_requests{result=\"denied\"})",
        discarded_checksum: Counter "l7_discarded" { reason = "checksum" } = "Client segments (and server SYN-ACKs) dropped unread because their receiver would discard them, by reason",
        discarded_tcp_option: Counter "l7_discarded" { reason = "tcp_option" } = "Client segments (and server SYN-ACKs) dropped unread because their receiver would discard them, by reason",
        discarded_ip_extension: Counter "l7_discarded" { reason = "ip_extension" } = "Client segments (and server SYN-ACKs) dropped unread because their receiver would discard them, by reason",
        discarded_flags: Counter "l7_discarded" { reason = "flags" } = "Client segments (and server SYN-ACKs) dropped unread because their receiver would discard them, by reason",
        discarded_paws: Counter "l7_discarded" { reason = "paws" } = "Client segments (and server SYN-ACKs) dropped unread because their receiver would discard them, by reason",
        discarded_stale_ack: Counter "l7_discarded" { reason = "stale_ack" } = "Client segments (and server SYN-ACKs) dropped unread because their receiver would discard them, by reason",
        flows: Gauge "l7_flows_active" = "Connections under L7 inspection",
    }
}

impl L7Counters {
    fn tally(&self, tally: Tally) {
        for (happened, counter) in [
            (tally.malformed, &self.malformed),
            (tally.deferred, &self.deferred),
            (tally.evicted, &self.deferred_evicted),
            (tally.held, &self.held),
            (tally.reset, &self.resets),
            (tally.urgent_reset, &self.urgent_reset),
            (tally.urgent_stripped, &self.urgent_stripped),
        ] {
            if happened {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(reason) = tally.discarded {
            let counter = match reason {
                Discard::Checksum => &self.discarded_checksum,
                Discard::TcpOption => &self.discarded_tcp_option,
                Discard::IpExtension => &self.discarded_ip_extension,
                Discard::Flags => &self.discarded_flags,
                Discard::Paws => &self.discarded_paws,
                Discard::StaleAck => &self.discarded_stale_ack,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Binds the L7 queues (`l7.queues` from `l7.queue` on) and opens their
/// raw sockets in the calling thread's network namespace (errors are
/// returned here), then starts one worker thread per queue, each with its
/// own flows and counters; they run until the process exits. The kernel
/// sends every packet of a connection to the same queue.
pub fn spawn<P>(
    datapath: &DatapathConfig,
    config: &L7Config,
    policy: Arc<ArcSwap<P>>,
    fqdn: Arc<FqdnTable>,
    observers: Observers,
) -> Result<(), QueueError>
where
    P: L7Policy + Send + Sync + 'static,
{
    for queue in config.range().iter() {
        spawn_one(
            queue,
            datapath,
            config,
            Arc::clone(&policy),
            Arc::clone(&fqdn),
            observers.clone(),
        )?;
    }
    Ok(())
}

fn spawn_one<P>(
    queue: u16,
    datapath: &DatapathConfig,
    config: &L7Config,
    policy: Arc<ArcSwap<P>>,
    fqdn: Arc<FqdnTable>,
    observers: Observers,
) -> Result<(), QueueError>
where
    P: L7Policy + Send + Sync + 'static,
{
    let spec = QueueSpec {
        queue,
        name: "L7 queue",
        copy_range: COPY_RANGE,
        max_len: QUEUE_MAX_LEN,
        fail_open: datapath.fail_mode == FailMode::Open,
        // Rewrites (urgent data) patch the TCP checksum incrementally, and
        // requests are read segment by segment: the kernel segments GSO
        // packets and completes their checksums before queueing them.
        gso: false,
        receive_buffer: datapath.queue_receive_buffer_bytes,
    };
    let max_flows = NonZeroUsize::new(config.max_flows).unwrap_or(NonZeroUsize::MIN);
    let (idle_timeout, deny_response) = (config.idle_timeout, config.deny_response);
    let (urgent_data, framing) = (config.urgent_data, config.framing());
    let marks = datapath.mark_mask;
    let stats = Arc::new(L7Counters::default());
    let handler_stats = Arc::clone(&stats);
    let metrics = Arc::clone(&observers.metrics);
    let open = move || {
        let socket = Queue::open(spec)?;
        let injector = Injector::open().map_err(QueueError::setup(queue, "raw sockets"))?;
        let inspector = Inspector::new(max_flows, idle_timeout, DEFAULT_MAX_HEAD, deny_response)
            .normalising(urgent_data, framing.clone());
        let handler = Segments {
            gate: Gate::new(inspector, MAX_DEFERRED_TOTAL, marks),
            injector,
            policy: Arc::clone(&policy),
            fqdn: Arc::clone(&fqdn),
            stats: Arc::clone(&handler_stats),
            observe: observers.observe.clone(),
            audit: observers.audit.clone(),
        };
        Ok((socket, handler))
    };
    runtime::spawn(open, stats, &metrics)
}

/// The handler of the L7 queue.
struct Segments<P> {
    gate: Gate,
    injector: Injector,
    policy: Arc<ArcSwap<P>>,
    fqdn: Arc<FqdnTable>,
    stats: Arc<L7Counters>,
    observe: ObserveSink,
    audit: Option<AuditSink>,
}

impl<P: L7Policy> Handler for Segments<P> {
    fn packet(&mut self, packet: Queued<'_>, now: Instant, out: &mut Verdicts) {
        let policy = self.policy.load();
        let step = self
            .gate
            .segment(&packet, (&**policy, &self.fqdn.lookup(now)), now);
        self.stats.tally(step.tally);
        if let Some(flow) = &step.flow {
            let length = u32::try_from(packet.payload.len()).unwrap_or(u32::MAX);
            for record in &step.requests {
                self.record_request(flow, record, length);
            }
        }
        for injection in &step.injections {
            if self.injector.send(injection).is_err() {
                self.stats.inject_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        for (id, action) in step.verdicts {
            out.give(id, action);
        }
    }

    fn tick(&mut self, now: Instant, out: &mut Verdicts) {
        for (id, action) in self.gate.sweep(now) {
            out.give(id, action);
        }
        let flows = self.gate.flows() as u64;
        self.stats.flows.store(flows, Ordering::Relaxed);
    }
}

impl<P> Segments<P> {
    /// Counts one request decision (urgent data is counted by its tally),
    /// and writes it to the audit log when the deciding rule has
    /// `enableLogging` (a denied request as `Reject`: the client is
    /// answered), with the reason when more than the rule decided.
    fn record_request(&self, flow: &FlowKey, record: &RequestRecord, packet_length: u32) {
        let verdict = if record.allowed {
            Verdict::Allow
        } else {
            Verdict::Reject
        };
        match (&record.detail, record.allowed) {
            (Some(Detail::UrgentData { .. }), _) => {}
            (detail, false) => {
                self.stats.requests_denied.fetch_add(1, Ordering::Relaxed);
                if matches!(detail, Some(Detail::Framing(_))) {
                    self.stats.framing_denied.fetch_add(1, Ordering::Relaxed);
                }
            }
            (_, true) => {
                self.stats.requests_allowed.fetch_add(1, Ordering::Relaxed);
            }
        }
        let time = wall_clock();
        if !matches!(record.detail, Some(Detail::UrgentData { .. })) {
            self.observe.offer(Observed {
                time,
                flow: flow.flow(),
                verdict,
                by: record.rule.as_ref().map_or(DecidedBy::NoRule, |(rule, _)| {
                    DecidedBy::Rule(Arc::clone(rule))
                }),
                request: record.request.clone().map(Box::new),
            });
        }
        let (Some(audit), Some((rule, Some(endpoint)))) = (&self.audit, &record.rule) else {
            return;
        };
        if let Some(subject) = Subject::of_rule(rule, endpoint, verdict) {
            let mut line = subject.record(time, flow.flow(), packet_length);
            line.reason = record.detail.as_ref().map(ToString::to_string);
            line.request = record.request.clone();
            audit.offer(line);
        }
    }
}

//! The L7 queue's decisions by packet id: the [`Inspector`]'s action on a
//! segment becomes verdicts for it and for what [`Deferred`] withholds,
//! plus the packets closing a denied connection; a segment to rewrite
//! (urgent data stripped) is accepted rewritten, also when released later;
//! a segment its receiver would discard (a server's SYN-ACK included) is
//! dropped unread.
//! Pure: time is passed in; the worker sends the injections, then gives the
//! verdicts in order.

use std::collections::HashMap;
use std::time::Instant;

use super::admission::L7Policy;
use super::defer::Deferred;
use super::inspect::{DenyReason, Inspector, L7Action, RequestRecord};
use super::response::{deny_packets, Injection};
use crate::fqdn::FqdnLookup;
use crate::marks::MarkLayout;
use crate::packet::{
    parse_segment, Action, Discard, FlowKey, LocalSide, PacketId, Queued, Rewrite,
};

/// Most segments withheld at once over all connections: well below the L7
/// queue's length (16,384), so clients that send part of a head and
/// vanish cannot fill the queue. Past it, the connection deferring longest
/// is forgotten (its segments dropped; its next bytes reset it).
pub const MAX_DEFERRED_TOTAL: usize = 4096;

/// What one segment led to.
#[derive(Debug, Default, PartialEq)]
pub struct GateStep {
    /// In the order the kernel is to get them; the segment's own id is
    /// missing while it is withheld.
    pub verdicts: Vec<(PacketId, Action)>,
    /// Packets closing a denied connection, to send before the verdicts.
    pub injections: Vec<Injection>,
    /// The request decisions on the segment's connection (`flow`).
    pub requests: Vec<RequestRecord>,
    pub flow: Option<FlowKey>,
    pub tally: Tally,
}

/// What happened to a segment, for the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Not a readable TCP segment (dropped).
    pub malformed: bool,
    /// Withheld until its request head is complete.
    pub deferred: bool,
    /// A connection was given up to stay within [`MAX_DEFERRED_TOTAL`].
    pub evicted: bool,
    /// Dropped, the connection left open (after a gap, or repeating
    /// withheld bytes).
    pub held: bool,
    /// The connection is closed without a 403.
    pub reset: bool,
    /// Carried urgent data, and the connection was reset for it.
    pub urgent_reset: bool,
    /// Carried urgent data, cleared before the segment is accepted.
    pub urgent_stripped: bool,
    /// Dropped unread: its receiver would discard it, for this reason.
    pub discarded: Option<Discard>,
}

/// The L7 state of one queue: connections followed, segments withheld.
pub struct Gate {
    inspector: Inspector,
    deferred: Deferred,
    /// The rewrites of withheld segments, by id (bounded by the withheld).
    rewrites: HashMap<PacketId, Rewrite>,
    marks: MarkLayout,
}

impl Gate {
    pub fn new(inspector: Inspector, max_deferred: usize, marks: MarkLayout) -> Gate {
        Gate {
            inspector,
            deferred: Deferred::new(max_deferred),
            rewrites: HashMap::new(),
            marks,
        }
    }

    /// Decides one queued segment seen at `now`: a server's SYN-ACK (the
    /// policy is asked then, with the FQDN names learned so far) or
    /// client→server payload.
    pub fn segment<P: L7Policy + ?Sized>(
        &mut self,
        packet: &Queued<'_>,
        (policy, fqdn): (&P, &dyn FqdnLookup),
        now: Instant,
    ) -> GateStep {
        let (id, mark, marks) = (packet.id, packet.mark, self.marks);
        let mut step = GateStep::default();
        let segment = match parse_segment(packet.payload) {
            Ok(segment) => segment,
            Err(_) => {
                step.tally.malformed = true;
                step.verdicts.push((id, Action::Drop));
                return step;
            }
        };
        if segment.syn_ack {
            if let Some(reason) = segment.discard {
                // The client would discard it too; the server retransmits.
                step.tally.discarded = Some(reason);
                step.verdicts.push((id, Action::Drop));
                return step;
            }
            // The SYN-ACK runs server→client: the Node's side of it is the
            // opposite side of the client→server flow.
            let local = packet.local.map(LocalSide::opposite);
            let replaced = self
                .inspector
                .handshake(&segment, local, (policy, fqdn), now);
            if let Some(old) = replaced {
                self.drop_withheld(&old, &mut step.verdicts);
            }
            let mark = marks.apply(mark, marks.l7_active());
            step.verdicts.push((id, Action::Repeat { mark }));
            return step;
        }
        let key = segment.key;
        let inspection = self.inspector.inspect(&segment, now);
        step.requests = inspection.requests;
        step.flow = Some(key);
        step.tally.urgent_stripped = inspection.rewrite.is_some()
            && matches!(
                inspection.action,
                L7Action::Pass | L7Action::Defer | L7Action::Release
            );
        let accept =
            |rewrite: Option<Rewrite>| rewrite.map_or(Action::Accept, Action::AcceptRewritten);
        match inspection.action {
            L7Action::Pass => step.verdicts.push((id, accept(inspection.rewrite))),
            L7Action::Defer => {
                step.tally.deferred = true;
                if let Some(rewrite) = inspection.rewrite {
                    self.rewrites.insert(id, rewrite);
                }
                if let Some((evicted, ids)) = self.deferred.hold(key, id, now) {
                    step.tally.evicted = true;
                    self.inspector.forget(&evicted);
                    for id in ids {
                        self.rewrites.remove(&id);
                        step.verdicts.push((id, Action::Drop));
                    }
                }
            }
            L7Action::Release => {
                for released in self.deferred.take(&key) {
                    let rewrite = self.rewrites.remove(&released);
                    step.verdicts.push((released, accept(rewrite)));
                }
                step.verdicts.push((id, accept(inspection.rewrite)));
            }
            L7Action::Hold => {
                step.tally.held = true;
                step.verdicts.push((id, Action::Drop));
            }
            L7Action::Discard(reason) => {
                step.tally.discarded = Some(reason);
                step.verdicts.push((id, Action::Drop));
                // A discarded RST closes nothing.
                return step;
            }
            L7Action::Deny(denial) => {
                step.tally.urgent_reset = denial.reason == DenyReason::UrgentData;
                step.tally.reset = !matches!(
                    denial.reason,
                    DenyReason::Request { .. } | DenyReason::Framing { .. }
                );
                self.drop_withheld(&key, &mut step.verdicts);
                step.injections = deny_packets(&segment, &denial);
                let mark = marks.apply(mark, marks.l7_denied());
                step.verdicts.push((id, Action::Repeat { mark }));
            }
        }
        if segment.rst {
            // The inspector forgot the connection: nothing withheld for it
            // will ever be released.
            self.drop_withheld(&key, &mut step.verdicts);
        }
        step
    }

    /// Forgets connections closed or idle long enough (see
    /// [`Inspector::sweep`]); returns the drops of their withheld segments.
    pub fn sweep(&mut self, now: Instant) -> Vec<(PacketId, Action)> {
        let mut drops = Vec::new();
        let mut forgotten = Vec::new();
        self.inspector.sweep(now, |key| forgotten.push(key));
        for key in forgotten {
            self.drop_withheld(&key, &mut drops);
        }
        drops
    }

    /// Connections followed.
    pub fn flows(&self) -> usize {
        self.inspector.len()
    }

    fn drop_withheld(&mut self, key: &FlowKey, verdicts: &mut Vec<(PacketId, Action)>) {
        for id in self.deferred.take(key) {
            self.rewrites.remove(&id);
            verdicts.push((id, Action::Drop));
        }
    }
}

#[cfg(test)]
mod tests;

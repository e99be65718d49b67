//! The run loop of the agent: events in (policy changes, SIGHUP,
//! shutdown, a retry falling due), reloads and convergence attempts out.
//! It logs and meters what the [`Reconciler`](super::converge::Reconciler)
//! reports and decides nothing itself.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use crate::compile::compile;
use crate::datapath;
use crate::telemetry::ReloadResult;

use super::signals::{self, Event};
use super::{host, Running};

impl Running {
    /// Handles events until a shutdown is asked for; retries a failed
    /// apply when it is due.
    pub(super) fn serve(&mut self, inbox: &Receiver<Event>) {
        loop {
            let received = match self.reconciler.retry_in(Instant::now()) {
                None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(wait) => inbox.recv_timeout(wait),
            };
            let event = match received {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) => {
                    self.sync();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let event = match event {
                Event::PolicyChanged => signals::settle(inbox),
                other => other,
            };
            match event {
                Event::Shutdown => return,
                Event::Reload | Event::PolicyChanged => self.reload(),
            }
        }
    }

    /// Reads the source again and converges to it: the new ruleset
    /// replaces any pending one and is tried at once (workers pick it up
    /// with their next packet once the kernel is ready for it). An invalid
    /// or missing policy directory leaves everything as it was.
    fn reload(&mut self) {
        let complete = self.source.complete();
        let snapshot = self.source.latest();
        let node = match host::local_node(&self.config.node) {
            Ok(node) => node,
            Err(error) => {
                tracing::error!(%error, "reload failed");
                self.reloaded(ReloadResult::Failed, Some(error.to_string()));
                return;
            }
        };
        match snapshot {
            Ok(snapshot) => {
                self.reconciler.offer(compile(&snapshot, &node));
                match self.sync() {
                    Some(error) => self.reloaded(ReloadResult::Failed, Some(error)),
                    None if complete => self.status.set_snapshot_complete(true),
                    None => {}
                }
            }
            Err(problems) => {
                let text = problems
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                tracing::error!("reload rejected: {text}");
                self.reloaded(ReloadResult::Rejected, Some(format!("rejected: {text}")));
            }
        }
    }

    /// One attempt to converge, logged and metered; a failure schedules
    /// the retry. Returns why a pending ruleset is still not in force.
    pub(super) fn sync(&mut self) -> Option<String> {
        let config = &self.config;
        let queues = config.queue_numbers();
        let done = self.reconciler.converge(
            &mut self.kernel,
            |enforced, fqdn| datapath::desired(&config.datapath, &queues, enforced, fqdn),
            &mut self.fqdn,
            Instant::now(),
        );
        if done.switched {
            self.put_in_force();
            self.reloaded(ReloadResult::Applied, None);
        }
        let Some((error, delay)) = done.failed else {
            if let Some(recovered) = done.recovered {
                tracing::info!(
                    "datapath apply recovered after {} attempts",
                    recovered.attempts
                );
            }
            self.metrics.datapath_behind(false);
            self.status.datapath(None);
            if done.realized {
                if done.generation == 1 {
                    self.metrics.started();
                }
                let (generation, changed) = (done.generation, done.changed);
                tracing::info!(generation, changed, "ruleset applied");
            }
            return None;
        };
        tracing::error!("datapath apply failed: {error}; retrying in {delay:?}");
        self.metrics.datapath_apply_failed(&error);
        self.metrics.datapath_behind(true);
        self.status.datapath(Some(error.to_string()));
        done.pending.then(|| error.to_string())
    }

    /// Publishes the ruleset in force as the current generation.
    pub(super) fn put_in_force(&self) {
        let ruleset = self.reconciler.in_force().load();
        let generation = self.reconciler.generation();
        self.metrics
            .ruleset_applied(generation, ruleset.policies().len(), ruleset.rule_count());
        self.status.applied(generation);
    }

    /// Records how a reload ended.
    fn reloaded(&self, result: ReloadResult, error: Option<String>) {
        self.metrics.reload(result);
        self.status.reloaded(error);
    }
}

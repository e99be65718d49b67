//! Every counter set of the agent, registered once: each queue's sets by
//! their workers, read as one [`QueueSnapshot`] per queue (the worker's
//! sets, then the kernel's counters of that queue), and the sets of the
//! agent's other subsystems (the agent itself, the Kubernetes and Docker
//! sources, the audit writer), read as one list of [`Sample`]s. Metrics,
//! `tollgate status` and the shutdown log all read them here. It counts
//! nothing itself.

use std::sync::{Arc, RwLock};

use super::kernel;
use crate::counters::{CounterSet, Scope, Series};

/// One value read from a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub series: &'static Series,
    pub scope: Scope,
    pub value: u64,
}

/// Everything counted for one queue: its worker's sets, then the kernel's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSnapshot {
    pub queue: u16,
    /// The worker's name (`queue`, `dns`, `L7 queue`): the title of its
    /// shutdown log line.
    pub name: &'static str,
    pub samples: Vec<Sample>,
}

impl QueueSnapshot {
    /// `NAME stats queue=N key=value … (other counters 0)`, the shutdown
    /// log line: the counters above 0 only, so that it reads at a glance.
    pub fn line(&self) -> String {
        use std::fmt::Write as _;
        let mut line = format!("{} stats queue={}", self.name, self.queue);
        let mut zero = 0;
        for sample in &self.samples {
            match sample.value {
                0 => zero += 1,
                value => {
                    let _ = write!(line, " {}={value}", sample.series.key);
                }
            }
        }
        match (zero, zero == self.samples.len()) {
            (0, _) => {}
            (_, true) => line.push_str(" (every counter 0)"),
            (_, false) => line.push_str(" (other counters 0)"),
        }
        line
    }
}

/// The counter sets of one queue.
struct Entry {
    queue: u16,
    name: &'static str,
    sets: Vec<Arc<dyn CounterSet>>,
}

/// Every queue's counter sets, by queue number (the connection queues,
/// the DNS queue and the L7 queues are each a range of their own, so a
/// worker's queues stay together).
#[derive(Default)]
pub struct Registry {
    entries: RwLock<Vec<Entry>>,
    /// The subsystems' sets, in the order registered.
    sets: RwLock<Vec<Arc<dyn CounterSet>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// Registers the counter sets of `queue`, whose worker is called `name`.
    /// A queue registered before under the same name keeps its place and
    /// gains the sets it does not hold yet (the same `Arc`), after its own:
    /// the agent registers the DNS counters at its start, so they are
    /// exported at zero, and the DNS worker registers them again with its
    /// queue's loop counters when it starts.
    pub fn register(&self, queue: u16, name: &'static str, sets: Vec<Arc<dyn CounterSet>>) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        match entries
            .iter_mut()
            .find(|e| e.queue == queue && e.name == name)
        {
            Some(entry) => {
                for set in sets {
                    if !entry.sets.iter().any(|held| same_set(held, &set)) {
                        entry.sets.push(set);
                    }
                }
            }
            None => {
                let at = entries.partition_point(|e| e.queue <= queue);
                entries.insert(at, Entry { queue, name, sets });
            }
        }
    }

    /// Registers the counter set of a subsystem that is not a queue (one
    /// per agent: its series carry no `queue` label).
    pub fn register_set(&self, set: Arc<dyn CounterSet>) {
        let mut sets = self.sets.write().unwrap_or_else(|e| e.into_inner());
        if !sets.iter().any(|held| same_set(held, &set)) {
            sets.push(set);
        }
    }

    /// The current values of the subsystems' sets, in the order registered.
    pub fn subsystem_samples(&self) -> Vec<Sample> {
        let sets = self.sets.read().unwrap_or_else(|e| e.into_inner());
        let mut samples = Vec::new();
        for set in sets.iter() {
            let scope = set.scope();
            set.visit(&mut |series, value| {
                samples.push(Sample {
                    series,
                    scope,
                    value,
                })
            });
        }
        samples
    }

    /// The current values of every registered queue, each followed by the
    /// kernel's counters of that queue (read once, for all queues).
    pub fn snapshot(&self) -> Vec<QueueSnapshot> {
        self.snapshot_with(&kernel::read())
    }

    fn snapshot_with(&self, kernel: &[(u16, kernel::KernelCounters)]) -> Vec<QueueSnapshot> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .map(|entry| {
                let mut samples = Vec::new();
                let kernel = kernel
                    .iter()
                    .filter(|(queue, _)| *queue == entry.queue)
                    .map(|(_, counters)| counters as &dyn CounterSet);
                for set in entry.sets.iter().map(|s| &**s).chain(kernel) {
                    let scope = set.scope();
                    set.visit(&mut |series, value| {
                        samples.push(Sample {
                            series,
                            scope,
                            value,
                        })
                    });
                }
                QueueSnapshot {
                    queue: entry.queue,
                    name: entry.name,
                    samples,
                }
            })
            .collect()
    }
}

/// Whether two handles point at the same set (by address; the vtables of
/// one type may differ between codegen units).
fn same_set(a: &Arc<dyn CounterSet>, b: &Arc<dyn CounterSet>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::counters;

    counters! {
        /// A set for the tests.
        pub struct TestCounters: one per agent {
            parsed: Counter "test_replies" { result = "parsed" } = "Replies, by result",
            failed: Counter "test_replies" { result = "failed" } = "Replies, by result",
            current: Gauge "test_current" = "Something current",
        }
    }

    #[test]
    fn snapshots_list_queues_by_number_with_their_kernel_counters() {
        let registry = Registry::default();
        let first = Arc::new(TestCounters::default());
        first.failed.fetch_add(2, Ordering::Relaxed);
        registry.register(100, "queue", vec![first, Arc::new(TestCounters::default())]);
        registry.register(53, "dns", vec![Arc::new(TestCounters::default())]);
        let kernel = kernel::parse("   53  1 4 2 65535 0 1 9 1\n  999 0 0 2 128 0 0 1 1\n");
        let snapshot = registry.snapshot_with(&kernel);
        assert_eq!(snapshot.len(), 2);
        assert_eq!(
            snapshot[0].line(),
            "dns stats queue=53 kernel_waiting=4 kernel_user_dropped=1 kernel_queued=9 \
             (other counters 0)"
        );
        assert_eq!(snapshot[0].samples[3].scope, Scope::Queue);
        assert_eq!(snapshot[1].samples.len(), 6, "two sets, no kernel line");
        assert_eq!(
            snapshot[1].line(),
            "queue stats queue=100 failed=2 (other counters 0)"
        );
        let quiet = Registry::default();
        quiet.register(7, "queue", vec![Arc::new(TestCounters::default())]);
        assert_eq!(
            quiet.snapshot_with(&[])[0].line(),
            "queue stats queue=7 (every counter 0)"
        );
    }

    #[test]
    fn a_queue_registered_again_gains_only_the_sets_it_lacks() {
        let registry = Registry::default();
        let early = Arc::new(TestCounters::default());
        registry.register(53, "dns", vec![early.clone()]);
        assert_eq!(registry.snapshot_with(&[])[0].samples.len(), 3);
        early.failed.fetch_add(4, Ordering::Relaxed);
        let loop_counters = Arc::new(TestCounters::default());
        registry.register(53, "dns", vec![early, loop_counters]);
        registry.register(10, "queue", vec![Arc::new(TestCounters::default())]);
        let snapshot = registry.snapshot_with(&[]);
        assert_eq!(snapshot.len(), 2);
        assert_eq!(
            snapshot[1].line(),
            "dns stats queue=53 failed=4 (other counters 0)"
        );
    }
}

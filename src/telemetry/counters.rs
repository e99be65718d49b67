//! Counters declared once: `counters!` makes a struct of atomics and its
//! visitor, and the [`Registry`] holds every queue's sets, which metrics,
//! `tollgate status` and the shutdown log all read through that visitor.
//! Nothing here names a counter; counting never blocks a packet.

use std::sync::{Arc, RwLock};

use super::kernel;

/// How a value behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (exported with a `_total` suffix).
    Counter,
    /// A current value.
    Gauge,
}

/// Whether a set's series carry a `queue` label: every queue has its own
/// set (`Queue`), or an agent has at most one (`Agent`: the DNS and L7
/// queues), whose series need no label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Queue,
    Agent,
}

/// One declared counter.
#[derive(Debug, PartialEq, Eq)]
pub struct Series {
    /// The field name: the key in `tollgate status` and the shutdown log.
    pub key: &'static str,
    /// The metric name, without the `tollgate_` prefix and `_total` suffix.
    pub metric: &'static str,
    /// A constant label telling apart the series of one metric.
    pub label: Option<(&'static str, &'static str)>,
    pub help: &'static str,
    pub kind: Kind,
}

/// A set of counters declared with `counters!`.
pub trait CounterSet: Send + Sync {
    fn scope(&self) -> Scope;

    /// Calls `f` with every counter and its current value, in the order of
    /// the declaration.
    fn visit(&self, f: &mut dyn FnMut(&'static Series, u64));
}

/// Declares a set of counters:
///
/// ```text
/// counters! {
///     /// What the DNS worker saw.
///     pub struct DnsCounters: one per agent {
///         parsed: Counter "dns_replies" { result = "parsed" } = "DNS replies inspected, by result",
///         untrusted: Counter "dns_untrusted" = "Replies from servers outside dnsTrustedServers",
///     }
/// }
/// ```
///
/// gives `pub struct DnsCounters { pub parsed: AtomicU64, pub untrusted:
/// AtomicU64 }` (`Default`), its [`Series`] as `DnsCounters::SERIES`, and
/// its [`CounterSet`] implementation. `one per queue` or `one per agent`
/// is its [`Scope`]; `Counter` or `Gauge` each field's [`Kind`].
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident: one per $scope:ident {
            $(
                $field:ident: $kind:ident $metric:literal $({ $lk:ident = $lv:literal })? = $help:literal
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        $vis struct $name {
            $(
                #[doc = $help]
                pub $field: ::std::sync::atomic::AtomicU64,
            )*
        }

        impl $name {
            /// Every counter of the set, in declaration order.
            pub const SERIES: &'static [$crate::telemetry::counters::Series] = &[
                $(
                    $crate::telemetry::counters::Series {
                        key: stringify!($field),
                        metric: $metric,
                        label: $crate::telemetry::counters::counters!(@label $($lk = $lv)?),
                        help: $help,
                        kind: $crate::telemetry::counters::Kind::$kind,
                    },
                )*
            ];
        }

        impl $crate::telemetry::counters::CounterSet for $name {
            fn scope(&self) -> $crate::telemetry::counters::Scope {
                $crate::telemetry::counters::counters!(@scope $scope)
            }

            fn visit(
                &self,
                f: &mut dyn FnMut(&'static $crate::telemetry::counters::Series, u64),
            ) {
                let values = [$(self.$field.load(::std::sync::atomic::Ordering::Relaxed)),*];
                for (series, value) in Self::SERIES.iter().zip(values) {
                    f(series, value);
                }
            }
        }
    };
    (@label) => { None };
    (@label $lk:ident = $lv:literal) => { Some((stringify!($lk), $lv)) };
    (@scope queue) => { $crate::telemetry::counters::Scope::Queue };
    (@scope agent) => { $crate::telemetry::counters::Scope::Agent };
}

pub(crate) use counters;

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
    /// `NAME stats queue=N key=value …`, the shutdown log line.
    pub fn line(&self) -> String {
        use std::fmt::Write as _;
        let mut line = format!("{} stats queue={}", self.name, self.queue);
        for sample in &self.samples {
            let _ = write!(line, " {}={}", sample.series.key, sample.value);
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

/// Every queue's counter sets, in the order they were registered.
#[derive(Default)]
pub struct Registry {
    entries: RwLock<Vec<Entry>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// Registers the counter sets of `queue`, whose worker is called `name`.
    pub fn register(&self, queue: u16, name: &'static str, sets: Vec<Arc<dyn CounterSet>>) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        entries.push(Entry { queue, name, sets });
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    counters! {
        /// A set for the tests.
        pub struct TestCounters: one per agent {
            parsed: Counter "test_replies" { result = "parsed" } = "Replies, by result",
            failed: Counter "test_replies" { result = "failed" } = "Replies, by result",
            current: Gauge "test_current" = "Something current",
        }
    }

    #[test]
    fn the_macro_declares_the_struct_its_series_and_its_visitor() {
        let c = TestCounters::default();
        c.parsed.fetch_add(3, Ordering::Relaxed);
        c.current.store(7, Ordering::Relaxed);
        assert_eq!(
            TestCounters::SERIES[0],
            Series {
                key: "parsed",
                metric: "test_replies",
                label: Some(("result", "parsed")),
                help: "Replies, by result",
                kind: Kind::Counter,
            }
        );
        assert_eq!(TestCounters::SERIES[2].label, None);
        assert_eq!(TestCounters::SERIES[2].kind, Kind::Gauge);
        assert_eq!(c.scope(), Scope::Agent);
        let mut seen = Vec::new();
        c.visit(&mut |series, value| seen.push((series.key, value)));
        assert_eq!(seen, [("parsed", 3), ("failed", 0), ("current", 7)]);
    }

    #[test]
    fn snapshots_list_queues_in_order_with_their_kernel_counters() {
        let registry = Registry::default();
        let first = Arc::new(TestCounters::default());
        first.failed.fetch_add(2, Ordering::Relaxed);
        registry.register(100, "queue", vec![first, Arc::new(TestCounters::default())]);
        registry.register(53, "dns", vec![Arc::new(TestCounters::default())]);
        let kernel = kernel::parse("   53  1 4 2 65535 0 1 9 1\n  999 0 0 2 128 0 0 1 1\n");
        let snapshot = registry.snapshot_with(&kernel);
        assert_eq!(snapshot.len(), 2);
        assert_eq!(snapshot[0].samples.len(), 6, "two sets, no kernel line");
        assert_eq!(
            snapshot[0].line(),
            "queue stats queue=100 parsed=0 failed=2 current=0 parsed=0 failed=0 current=0"
        );
        assert_eq!(
            snapshot[1].line(),
            "dns stats queue=53 parsed=0 failed=0 current=0 kernel_waiting=4 \
             kernel_queue_dropped=0 kernel_user_dropped=1 kernel_queued=9"
        );
        assert_eq!(snapshot[1].samples[3].scope, Scope::Queue);
    }
}

//! Counters declared once: `counters!` makes a struct of atomics and its
//! visitor ([`CounterSet`]), which metrics, `tollgate status` and the
//! shutdown log all read through the agent's telemetry registry. Nothing
//! here names a counter or a Prometheus type; counting never blocks a
//! packet.

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

impl Series {
    /// The name `/metrics` exports the series under, with its label:
    /// `tollgate_reloads_total{result="applied"}`, `tollgate_policies`.
    pub fn exposed_name(&self) -> String {
        let suffix = match self.kind {
            Kind::Counter => "_total",
            Kind::Gauge => "",
        };
        let label = self
            .label
            .map_or(String::new(), |(k, v)| format!("{{{k}=\"{v}\"}}"));
        format!("tollgate_{}{suffix}{label}", self.metric)
    }
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
///     pub struct DnsCounters: one per agent, counted in DnsCounts {
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
///
/// With `counted in DnsCounts`, also its plain twin: `pub struct DnsCounts`
/// with a `u64` per counter and an `Option<u64>` per gauge (`Default`:
/// nothing counted), which a pure step returns and the edge adds to the
/// set with `DnsCounts::add_to` (counters are added, gauges that are
/// `Some` are set).
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident: one per $scope:ident, counted in $counts:ident {
            $(
                $field:ident: $kind:ident $metric:literal $({ $lk:ident = $lv:literal })? = $help:literal
            ),* $(,)?
        }
    ) => {
        $crate::counters! {
            $(#[$meta])*
            $vis struct $name: one per $scope {
                $($field: $kind $metric $({ $lk = $lv })? = $help),*
            }
        }

        #[doc = concat!("What one step counted, added to [`", stringify!($name), "`] by the edge.")]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        $vis struct $counts {
            $(
                #[doc = $help]
                pub $field: $crate::counters!(@plain $kind),
            )*
        }

        impl $counts {
            /// Adds the counts to `set`: counters grow, gauges counted are set.
            pub fn add_to(&self, set: &$name) {
                $($crate::counters!(@add $kind, self.$field, set.$field);)*
            }
        }
    };
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
            pub const SERIES: &'static [$crate::counters::Series] = &[
                $(
                    $crate::counters::Series {
                        key: stringify!($field),
                        metric: $metric,
                        label: $crate::counters!(@label $($lk = $lv)?),
                        help: $help,
                        kind: $crate::counters::Kind::$kind,
                    },
                )*
            ];
        }

        impl $crate::counters::CounterSet for $name {
            fn scope(&self) -> $crate::counters::Scope {
                $crate::counters!(@scope $scope)
            }

            fn visit(
                &self,
                f: &mut dyn FnMut(&'static $crate::counters::Series, u64),
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
    (@scope queue) => { $crate::counters::Scope::Queue };
    (@scope agent) => { $crate::counters::Scope::Agent };
    (@plain Counter) => { u64 };
    (@plain Gauge) => { Option<u64> };
    (@add Counter, $count:expr, $counter:expr) => {
        if $count != 0 {
            $counter.fetch_add($count, ::std::sync::atomic::Ordering::Relaxed);
        }
    };
    (@add Gauge, $count:expr, $gauge:expr) => {
        if let Some(value) = $count {
            $gauge.store(value, ::std::sync::atomic::Ordering::Relaxed);
        }
    };
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    counters! {
        /// A set for the tests.
        pub struct MacroCounters: one per agent, counted in MacroCounts {
            parsed: Counter "macro_replies" { result = "parsed" } = "Replies, by result",
            failed: Counter "macro_replies" { result = "failed" } = "Replies, by result",
            current: Gauge "macro_current" = "Something current",
        }
    }

    #[test]
    fn the_macro_declares_the_struct_its_series_and_its_visitor() {
        let c = MacroCounters::default();
        c.parsed.fetch_add(3, Ordering::Relaxed);
        c.current.store(7, Ordering::Relaxed);
        assert_eq!(
            MacroCounters::SERIES[0],
            Series {
                key: "parsed",
                metric: "macro_replies",
                label: Some(("result", "parsed")),
                help: "Replies, by result",
                kind: Kind::Counter,
            }
        );
        assert_eq!(MacroCounters::SERIES[2].label, None);
        assert_eq!(MacroCounters::SERIES[2].kind, Kind::Gauge);
        assert_eq!(c.scope(), Scope::Agent);
        let mut seen = Vec::new();
        c.visit(&mut |series, value| seen.push((series.key, value)));
        assert_eq!(seen, [("parsed", 3), ("failed", 0), ("current", 7)]);
    }

    #[test]
    fn the_plain_twin_adds_counters_and_sets_the_gauges_it_counted() {
        let c = MacroCounters::default();
        c.current.store(7, Ordering::Relaxed);
        let mut counts = MacroCounts {
            parsed: 2,
            ..MacroCounts::default()
        };
        counts.add_to(&c);
        counts.add_to(&c);
        assert_eq!(c.parsed.load(Ordering::Relaxed), 4);
        assert_eq!(
            c.current.load(Ordering::Relaxed),
            7,
            "a gauge not counted stays"
        );
        counts.current = Some(0);
        counts.add_to(&c);
        assert_eq!(c.current.load(Ordering::Relaxed), 0);
        assert_eq!(c.failed.load(Ordering::Relaxed), 0);
    }
}

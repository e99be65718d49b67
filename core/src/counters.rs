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
#[macro_export]
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
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    counters! {
        /// A set for the tests.
        pub struct MacroCounters: one per agent {
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
}

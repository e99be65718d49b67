//! The segments the L7 queue withholds while a request head is incomplete,
//! by packet id per connection, under one global cap whose eviction takes
//! the connection deferring longest through an ordered index. Pure: the
//! caller owns the packets, the clock and the verdicts.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::packet::{FlowKey, PacketId};

/// When a connection started deferring; the counter keeps the keys of
/// connections that started at the same instant apart, in arrival order.
type Since = (Instant, u64);

/// The withheld segments of one connection.
#[derive(Debug)]
struct Held {
    since: Since,
    /// In arrival order.
    ids: Vec<PacketId>,
}

/// Every withheld segment.
#[derive(Debug)]
pub struct Deferred {
    flows: HashMap<FlowKey, Held>,
    /// Connections by when they started deferring, oldest first.
    oldest: BTreeMap<Since, FlowKey>,
    /// Segments withheld over all connections.
    total: usize,
    max_total: usize,
    arrivals: u64,
}

impl Deferred {
    /// At most `max_total` segments withheld at once (at least one).
    pub fn new(max_total: usize) -> Deferred {
        Deferred {
            flows: HashMap::new(),
            oldest: BTreeMap::new(),
            total: 0,
            max_total: max_total.max(1),
            arrivals: 0,
        }
    }

    /// Withholds segment `id` of `key`, seen at `now`. Past the cap, the
    /// connection deferring longest (possibly `key`) is no longer withheld:
    /// returns it with its segments' ids, oldest first.
    pub fn hold(
        &mut self,
        key: FlowKey,
        id: PacketId,
        now: Instant,
    ) -> Option<(FlowKey, Vec<PacketId>)> {
        let held = self.flows.entry(key).or_insert_with(|| {
            let since = (now, self.arrivals);
            self.arrivals += 1;
            self.oldest.insert(since, key);
            Held {
                since,
                ids: Vec::new(),
            }
        });
        held.ids.push(id);
        self.total += 1;
        if self.total <= self.max_total {
            return None;
        }
        let (_, oldest) = self.oldest.pop_first()?;
        let held = self.flows.remove(&oldest)?;
        self.total -= held.ids.len();
        Some((oldest, held.ids))
    }

    /// Stops withholding `key`'s segments; returns their ids, oldest first.
    pub fn take(&mut self, key: &FlowKey) -> Vec<PacketId> {
        let Some(held) = self.flows.remove(key) else {
            return Vec::new();
        };
        self.oldest.remove(&held.since);
        self.total -= held.ids.len();
        held.ids
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(port: u16) -> FlowKey {
        FlowKey {
            client: ([10, 0, 0, 1], port).into(),
            server: ([10, 0, 0, 2], 80).into(),
        }
    }

    #[test]
    fn ids_are_kept_per_connection_in_arrival_order() {
        let now = Instant::now();
        let mut d = Deferred::new(10);
        assert_eq!(d.hold(key(1), 7, now), None);
        assert_eq!(d.hold(key(2), 8, now), None);
        assert_eq!(d.hold(key(1), 9, now), None);
        assert_eq!(d.total, 3);
        assert_eq!(d.take(&key(1)), [7, 9]);
        assert_eq!(d.take(&key(1)), Vec::<PacketId>::new());
        assert_eq!(d.total, 1);
        assert_eq!(d.take(&key(2)), [8]);
        assert_eq!(d.total, 0);
    }

    #[test]
    fn past_the_cap_the_connection_deferring_longest_goes() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut d = Deferred::new(3);
        d.hold(key(1), 1, at(0));
        d.hold(key(2), 2, at(5));
        d.hold(key(1), 3, at(10));
        // The fourth segment overflows: connection 1 started first.
        assert_eq!(d.hold(key(3), 4, at(20)), Some((key(1), vec![1, 3])));
        assert_eq!(d.total, 2);
        // Connection 2 is now the oldest; the same instant keeps arrival order.
        d.hold(key(4), 5, at(20));
        assert_eq!(d.hold(key(5), 6, at(20)), Some((key(2), vec![2])));
        assert_eq!(d.hold(key(6), 7, at(20)), Some((key(3), vec![4])));
        assert_eq!(d.total, 3);
    }

    #[test]
    fn a_released_connection_leaves_the_eviction_order() {
        let t0 = Instant::now();
        let mut d = Deferred::new(2);
        d.hold(key(1), 1, t0);
        d.hold(key(2), 2, t0 + Duration::from_millis(1));
        assert_eq!(d.take(&key(1)), [1]);
        // Connection 1 deferring again counts from now: 2 is older.
        d.hold(key(1), 3, t0 + Duration::from_millis(2));
        assert_eq!(
            d.hold(key(1), 4, t0 + Duration::from_millis(3)),
            Some((key(2), vec![2]))
        );
        // At the cap the newest connection itself can be the oldest left.
        let mut alone = Deferred::new(1);
        alone.hold(key(9), 1, t0);
        assert_eq!(alone.hold(key(9), 2, t0), Some((key(9), vec![1, 2])));
        assert_eq!(alone.total, 0);
    }
}

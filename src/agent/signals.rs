//! What wakes the run loop ([`Event`]): SIGHUP asks for a reload,
//! SIGTERM and SIGINT for a shutdown, a source's notifier for a policy
//! change, settled by the sources' [`Debounce`], and the Docker source's
//! for an inventory change, acted on at once (the source settles its own
//! bursts). It only turns signals into events; it never acts on them.
#![allow(clippy::disallowed_methods)] // policy-change events are debounced on the clock.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::source::Debounce;

/// What wakes the run loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    PolicyChanged,
    /// The Docker inventory changed: a container's addresses came or went,
    /// so the reload must not wait (an address no container holds is
    /// closed until the inventory knows its new holder).
    InventoryChanged,
    Reload,
    Shutdown,
}

/// Sends an event for every SIGHUP, SIGTERM and SIGINT, from a thread of
/// its own, until `events` is closed.
pub fn listen(events: Sender<Event>) -> Result<(), std::io::Error> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let event = if signal == SIGHUP {
                    Event::Reload
                } else {
                    Event::Shutdown
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        })?;
    Ok(())
}

/// After a policy change, waits until the sources have been quiet for a
/// while ([`Debounce`]); a shutdown or SIGHUP meanwhile wins.
pub fn settle(inbox: &Receiver<Event>) -> Event {
    let mut debounce = Debounce::default();
    debounce.changed(Instant::now());
    loop {
        let now = Instant::now();
        if debounce.take(now) {
            return Event::PolicyChanged;
        }
        let wait = debounce.due().map_or(Duration::ZERO, |due| due - now);
        match inbox.recv_timeout(wait) {
            Ok(Event::PolicyChanged) => debounce.changed(Instant::now()),
            Ok(Event::InventoryChanged) => return Event::InventoryChanged,
            Err(RecvTimeoutError::Timeout) => return Event::PolicyChanged,
            Ok(other) => return other,
            Err(RecvTimeoutError::Disconnected) => return Event::Shutdown,
        }
    }
}

/// After an inventory change, takes the events already waiting (one
/// reload reads the latest inventory for all of them); a shutdown among
/// them wins, a policy change is read by the same reload.
pub fn drain(inbox: &Receiver<Event>) -> Event {
    let mut event = Event::InventoryChanged;
    while let Ok(next) = inbox.try_recv() {
        match next {
            Event::Shutdown => return Event::Shutdown,
            Event::Reload => event = Event::Reload,
            Event::PolicyChanged | Event::InventoryChanged => {}
        }
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn settle_waits_for_quiet_and_lets_shutdown_win() {
        let (tx, rx) = mpsc::channel();
        tx.send(Event::PolicyChanged).unwrap();
        assert_eq!(settle(&rx), Event::PolicyChanged);
        assert!(rx.try_recv().is_err(), "burst drained");
        tx.send(Event::PolicyChanged).unwrap();
        tx.send(Event::Shutdown).unwrap();
        assert_eq!(settle(&rx), Event::Shutdown);
    }

    #[test]
    fn an_inventory_change_is_not_held_back_and_drains_what_waits() {
        let (tx, rx) = mpsc::channel();
        tx.send(Event::PolicyChanged).unwrap();
        tx.send(Event::InventoryChanged).unwrap();
        assert_eq!(settle(&rx), Event::InventoryChanged, "acted on at once");
        for event in [Event::InventoryChanged, Event::PolicyChanged] {
            tx.send(event).unwrap();
        }
        assert_eq!(drain(&rx), Event::InventoryChanged);
        assert!(rx.try_recv().is_err(), "drained");
        tx.send(Event::InventoryChanged).unwrap();
        tx.send(Event::Shutdown).unwrap();
        assert_eq!(drain(&rx), Event::Shutdown);
    }
}

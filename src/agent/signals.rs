//! What wakes the run loop ([`Event`]): SIGHUP asks for a reload,
//! SIGTERM and SIGINT for a shutdown, the policy directory's notifier for
//! a policy change, settled here by [`Debounce`], and the notifiers of the
//! sources that settle their own bursts (the Docker inventory, the
//! Kubernetes source's snapshots and AddressGroups) for a change acted on
//! at once. It only turns signals into events; it never acts on them.
#![allow(clippy::disallowed_methods)] // policy-change events are debounced on the clock.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::source::Debounce;

/// What wakes the run loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A policy file changed: settled here before the reload.
    PolicyChanged,
    /// A source that settles its own bursts changed: the Docker inventory
    /// (a container's addresses came or went: an address no container
    /// holds is closed until the inventory knows its new holder), a
    /// Kubernetes snapshot (debounced by the source), the AddressGroups an
    /// agent in controller mode holds (each slice whole). The reload must
    /// not wait again.
    Settled,
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
    let mut debounce = Debounce::STEPS;
    debounce.changed(Instant::now());
    loop {
        let now = Instant::now();
        if debounce.take(now) {
            return Event::PolicyChanged;
        }
        let wait = debounce.due().map_or(Duration::ZERO, |due| due - now);
        match inbox.recv_timeout(wait) {
            Ok(Event::PolicyChanged) => debounce.changed(Instant::now()),
            Ok(Event::Settled) => return Event::Settled,
            Err(RecvTimeoutError::Timeout) => return Event::PolicyChanged,
            Ok(other) => return other,
            Err(RecvTimeoutError::Disconnected) => return Event::Shutdown,
        }
    }
}

/// After a settled change, takes the events already waiting (one
/// reload reads the latest inventory for all of them); a shutdown among
/// them wins, a policy change is read by the same reload.
pub fn drain(inbox: &Receiver<Event>) -> Event {
    let mut event = Event::Settled;
    while let Ok(next) = inbox.try_recv() {
        match next {
            Event::Shutdown => return Event::Shutdown,
            Event::Reload => event = Event::Reload,
            Event::PolicyChanged | Event::Settled => {}
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
    fn a_settled_change_is_not_held_back_and_drains_what_waits() {
        let (tx, rx) = mpsc::channel();
        tx.send(Event::PolicyChanged).unwrap();
        tx.send(Event::Settled).unwrap();
        assert_eq!(settle(&rx), Event::Settled, "acted on at once");
        for event in [Event::Settled, Event::PolicyChanged] {
            tx.send(event).unwrap();
        }
        assert_eq!(drain(&rx), Event::Settled);
        assert!(rx.try_recv().is_err(), "drained");
        tx.send(Event::Settled).unwrap();
        tx.send(Event::Shutdown).unwrap();
        assert_eq!(drain(&rx), Event::Shutdown);
    }
}

//! The `observe` answer: the decisions a client asked for, a JSON line
//! each — the last ones from the hub's history, then, when it follows,
//! each new one as the hub copies it, with a `lost` line when it read too
//! slowly to keep up. Each line has [`TIMEOUT`] to be taken; a follower
//! that closes its end is noticed within [`IDLE_CHECK`]. It reads the hub
//! and the ruleset in force; it never blocks a worker (the hub drops what a
//! slow client cannot take).
#![allow(clippy::disallowed_methods)] // each line's deadline reads the clock.

use std::io::{ErrorKind, Read};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use super::answer::write_answer;
use super::{AgentStatus, Response, TIMEOUT};
use crate::observe::{FlowEvent, ObserveFilter};

/// How often an idle follower's connection is checked for a close.
pub const IDLE_CHECK: Duration = Duration::from_millis(500);

/// Answers `observe` on `stream` until done (without `follow`) or until
/// the client goes.
pub(super) fn answer(
    stream: &UnixStream,
    status: &AgentStatus,
    filter: &ObserveFilter,
    follow: bool,
    last: usize,
) -> std::io::Result<()> {
    let send = |response: &Response| {
        let mut text = serde_json::to_string(response).map_err(std::io::Error::other)?;
        text.push('\n');
        write_answer(stream, text.as_bytes(), Instant::now() + TIMEOUT)
    };
    let events = |events: Vec<FlowEvent>| {
        events
            .into_iter()
            .try_for_each(|event| send(&Response::Event(Box::new(event))))
    };
    let Some(hub) = status.observe.get() else {
        return send(&Response::Error(
            "the agent records no decisions yet".into(),
        ));
    };
    if !follow {
        return events(hub.history().latest(last, filter, &status.ruleset.load()));
    }
    let follow = match hub.follow() {
        Ok(follow) => follow,
        Err(busy) => return send(&Response::Error(busy)),
    };
    events(follow.history.latest(last, filter, &status.ruleset.load()))?;
    let mut reported = 0;
    loop {
        match follow.decisions.recv_timeout(IDLE_CHECK) {
            Ok(observed) => {
                let lost = follow.lost.load(Ordering::Relaxed);
                if lost > reported {
                    send(&Response::Lost(lost - reported))?;
                    reported = lost;
                }
                let event = FlowEvent::of(&observed, &status.ruleset.load());
                if filter.matches(&event) {
                    send(&Response::Event(Box::new(event)))?;
                }
            }
            Err(RecvTimeoutError::Timeout) if closed(stream)? => return Ok(()),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

/// Whether the client has closed its end (it sends nothing after its
/// request: a read of 0 bytes is the close).
fn closed(stream: &UnixStream) -> std::io::Result<bool> {
    stream.set_read_timeout(Some(Duration::from_millis(1)))?;
    let mut byte = [0u8; 1];
    match (&*stream).read(&mut byte) {
        Ok(0) => Ok(true),
        Ok(_) => Ok(false),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(false),
        Err(e) if e.kind() == ErrorKind::Interrupted => Ok(false),
        Err(_) => Ok(true),
    }
}

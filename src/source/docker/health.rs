//! What the Docker source knows about the engine's API, for `status` and
//! the log: the containers last listed, the API version agreed, since when
//! requests fail. It never talks to the API itself.
#![allow(clippy::disallowed_methods)] // the outage's start and the source's age are read on the clock.

use std::sync::Mutex;
use std::time::Instant;

/// What the source knows about the API, for `status`.
#[derive(Debug)]
pub struct DockerHealth {
    pub(super) host: String,
    started: Instant,
    state: Mutex<HealthState>,
}

#[derive(Debug, Default)]
pub(super) struct HealthState {
    /// Containers of the last inventory; `None` before the first list.
    pub(super) containers: Option<usize>,
    /// The API version agreed on the current (or last) connection.
    version: Option<String>,
    /// Since when the API fails, and the last error.
    pub(super) failing: Option<(Instant, String)>,
    errors: u64,
}

/// A change of the API's state worth one log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// The first failure before any list.
    NotReached,
    /// The first failure after an inventory was published.
    Lost,
    /// A failure of an outage already logged.
    Same,
}

impl DockerHealth {
    pub(super) fn new(host: String) -> DockerHealth {
        DockerHealth {
            host,
            started: Instant::now(),
            state: Mutex::new(HealthState::default()),
        }
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn negotiated(&self, version: String) {
        self.state().version = Some(version);
    }

    pub(super) fn published(&self, containers: usize) {
        let mut state = self.state();
        state.containers = Some(containers);
        state.failing = None;
    }

    /// Counts a failure; says whether it starts an outage, and which.
    pub(super) fn failed(&self, error: &str) -> Change {
        let mut state = self.state();
        state.errors += 1;
        let change = match (&state.failing, state.containers) {
            (Some(_), _) => Change::Same,
            (None, None) => Change::NotReached,
            (None, Some(_)) => Change::Lost,
        };
        let since = state.failing.take().map_or_else(Instant::now, |(at, _)| at);
        state.failing = Some((since, error.to_string()));
        change
    }

    /// One line for `status`: connected with how many containers;
    /// unreachable since when, the containers' addresses unknown; or not
    /// reached yet, with the startup policy holding.
    pub fn describe(&self) -> String {
        let state = self.state();
        let api = state
            .version
            .as_deref()
            .map_or_else(String::new, |v| format!(" (API {v})"));
        match (&state.failing, state.containers) {
            (None, Some(containers)) => format!(
                "docker {}{api}: connected, {containers} containers",
                self.host
            ),
            (None, None) => format!(
                "docker {}: connecting for {}s, no inventory yet (the startup policy holds)",
                self.host,
                self.started.elapsed().as_secs()
            ),
            (Some((_, error)), None) => format!(
                "docker {}: NOT REACHED YET for {}s ({} failed requests), no inventory: the startup policy holds until the first list; retrying: {error}",
                self.host,
                self.started.elapsed().as_secs(),
                state.errors
            ),
            (Some((since, error)), Some(containers)) => format!(
                "docker {}{api}: UNREACHABLE for {}s ({} failed requests), the addresses of the {containers} containers last listed are unknown until the next list (the startup policy holds for them), retrying: {error}",
                self.host,
                since.elapsed().as_secs(),
                state.errors
            ),
        }
    }
}

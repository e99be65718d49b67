//! The README's first command, after its install and build steps: the
//! demo lab (`scripts/lab.sh up`, `demo`, `observe`, `down`) with the
//! example policies in `rules/`, run with this checkout's `tollgate`.
//!
//! `scripts/lab.sh` has fixed namespace names (`tg-node`, `tg-client1`, …)
//! and state paths (`/run/tollgate-lab`, `/etc/netns/tg-*`), so a developer
//! may have the lab up while the suite runs: the test runs it in a private
//! mount namespace with its own tmpfs on `/run` and `/etc/netns`, where the
//! lab's named namespaces, state and resolver files are its own and vanish
//! with it. The shell always ends with `lab.sh down` (each step has its own
//! `timeout`, shorter than the test's), so no lab process outlives the test.
//! Nothing is configured in the root namespace: the lab wires only its own
//! namespaces (see the script's header).

use std::process::Command;
use std::time::Duration;

use crate::harness::netns::run_with_timeout;
use crate::harness::{missing_precondition, skip};

/// `up` builds the lab and waits for the agent's first ruleset; `demo`
/// runs ~20 probes of at most 2 s; `observe` reads the agent.
const STEP_WAIT: u64 = 90;
const TEST_WAIT: Duration = Duration::from_secs(4 * STEP_WAIT + 30);

/// The lab runs, the example policies allow and deny what the README says,
/// the names learned from DNS answers are listed by the agent, and the
/// audit log, metrics and status the demo promises are shown without an
/// error. Positive control and negative cases in one run: allowed and
/// denied probes of the same kind (HTTP to web from client1 and client2;
/// an allowed and a blocked name).
///
/// Mutation (tried): `lab.sh demo` calling `tollgate get fqdn` without
/// `--socket "$STATE/tollgate.sock"` (the lab's agent answers on its own
/// socket) → the learned-names section holds the client's error and no
/// address, and the test fails.
#[test]
fn the_readme_demo_lab_shows_what_it_promises() {
    let test = "the_readme_demo_lab_shows_what_it_promises";
    let tools = [
        "unshare", "timeout", "curl", "nc", "ping", "python3", "dnsmasq",
    ];
    if let Some(reason) = missing_precondition(&tools) {
        skip(test, &reason);
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let script = format!(
        "set -u
mkdir -p /etc/netns
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /etc/netns
mkdir -p /run/netns /run/lock
trap 'timeout -k 5 {STEP_WAIT} scripts/lab.sh down >/dev/null 2>&1' EXIT
cd {root}
timeout -k 5 {STEP_WAIT} scripts/lab.sh up || exit 10
timeout -k 5 {STEP_WAIT} scripts/lab.sh demo || exit 11
timeout -k 5 {STEP_WAIT} scripts/lab.sh observe || exit 12
"
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "bash", "-c", &script])
        .env("TOLLGATE", env!("CARGO_BIN_EXE_tollgate"));
    let out = run_with_timeout(cmd, TEST_WAIT);
    let text = &out.stdout;
    assert!(
        out.success(),
        "the demo lab failed ({:?}):\n{text}\n{}",
        out.status,
        out.stderr
    );
    let outcome = |probe: &str| -> &str {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(probe))
            .unwrap_or_else(|| panic!("no probe {probe:?} in:\n{text}"));
        line.split_whitespace().last().unwrap_or_default()
    };
    for (probe, expected) in [
        ("client1 -> web    HTTP GET http://10.99.3.2/", "ALLOWED"),
        ("client2 -> web    HTTP GET http://10.99.3.2/", "DENIED"),
        ("client1 -> web    HTTP over IPv6", "ALLOWED"),
        ("client2 -> node   HTTP :8080", "DENIED"),
        ("client1 -> www.allowed.test HTTP", "ALLOWED"),
        ("client1 -> www.blocked.test HTTP", "DENIED"),
        ("client1 -> 10.99.3.20 HTTP (no lookup)", "DENIED"),
    ] {
        assert_eq!(outcome(probe), expected, "{probe}:\n{text}");
    }
    let learned = section(text, "learned from DNS answers", "queues (node namespace)");
    assert!(
        learned.contains("10.99.3.10") && !learned.contains("tollgate:"),
        "get fqdn lists the allowed name's address from the lab's agent:\n{learned}"
    );
    let audit = section(text, "== audit log", "== metrics");
    assert!(
        audit.lines().any(|l| l.contains(" Drop ")),
        "an audit line of a denied probe:\n{audit}"
    );
    let metrics = section(text, "== metrics", "== status");
    assert!(
        metrics.contains("tollgate_verdicts_total{"),
        "verdict metrics:\n{metrics}"
    );
    let status = section(text, "== status", "The lab is still up");
    assert!(
        status.contains("datapath:           in sync") && status.contains("QUEUE"),
        "the status summary:\n{status}"
    );
}

/// The lines of `text` from the one starting with `from` up to the one
/// starting with `to` (exclusive).
fn section<'a>(text: &'a str, from: &str, to: &str) -> &'a str {
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("no {from:?} in:\n{text}"));
    let rest = &text[start..];
    let end = rest.find(to).unwrap_or(rest.len());
    &rest[..end]
}

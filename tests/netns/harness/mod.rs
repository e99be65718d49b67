//! End-to-end harness: builds throw-away network-namespace labs, runs the
//! `tollgate` binary inside them and probes the wire. It owns only the
//! namespaces, processes and temporary files it creates, and must never touch
//! the root namespace's firewall or addresses outside its labs.
//!
//! A test names itself in [`TEST_IDS`]; its index gives it a private address
//! range (`10.<index>.<link>.0/24`, `fd00:<index>:<link>::/64`) and a
//! namespace prefix `tg<index>-<pid>-` so tests run in parallel without
//! sharing anything. Every namespace, spawned process, in-process server
//! and temporary directory is removed when the [`Lab`] is dropped, also while
//! a failing test unwinds. Namespaces left behind by a killed test process
//! are reaped by the next harness run (their pid no longer exists).
//!
//! A test reads like this:
//!
//! ```ignore
//! let Some(lab) = Lab::builder("my_test").peer("client").ipv6().build() else {
//!     return; // skipped (not root / tool missing), never under CI=true
//! };
//! lab.serve_tcp("node", 8080, Service::Echo);        // listening on return
//! lab.write_policy("node.yaml", YAML);               // atomic write into policies/
//! let mut agent = lab.start_agent(lab.agent_options());
//! agent.wait_generation(1);                          // `ruleset applied generation=1`
//! lab.assert_tcp("client", (lab.node_addr("client"), 8080), TcpOutcome::TimedOut);
//! ```
//!
//! Skip policy: without root or a required tool the harness prints
//! `SKIPPED: reason` and the test returns early — unless `CI=true`, where it
//! panics, so CI can never pass with the end-to-end suite silently skipped.

pub mod agent;
pub mod bare;
pub mod dns;
pub mod firewall;
pub mod lab;
pub mod netns;
pub mod probe;
pub mod server;
#[cfg(test)]
mod tests;

pub use agent::{Agent, AgentOptions, FailMode};
pub use bare::{capture_stderr, is_root, wait_exit, wait_until, within, NetNs};
pub use dns::{DnsRecord, Resolution};
pub use firewall::FirewallState;
pub use lab::Lab;
pub use probe::{PingOutcome, TcpOutcome, UdpOutcome};
pub use server::Service;

use std::time::Duration;

/// Every end-to-end test, by function name. The position (1-based) is the
/// test's index: its address range and namespace prefix. Append new tests at
/// the end; never reuse an index. Indexes 98 (`benches/e2e.sh`) and 99
/// (`scripts/lab.sh`) are taken.
pub const TEST_IDS: &[&str] = &[
    "node_ingress_drop_vs_reject",
    "ipblock_allow_except_then_drop",
    "icmp_echo_dropped_tcp_passes",
    "node_egress_to_ipblock_dropped",
    "pod_traffic_by_pod_and_namespace_selector",
    "tier_priority_and_pass_order",
    "k8s_default_deny_not_undone_by_baseline",
    "established_connection_survives_policy_change",
    "bulk_transfer_queues_only_first_packets",
    "fail_closed_after_kill",
    "fail_open_after_kill",
    "clean_shutdown_restores_firewall",
    "restart_after_kill_leaves_no_duplicates",
    "reload_rejects_invalid_and_applies_valid",
    "harness_probes_classify_outcomes",
    "harness_cleans_up_on_panic",
    "inventory_change_and_sighup_reload",
    "harness_dns_server_answers",
    "pod_egress_to_node_selector_dropped",
    "interfaces_limit_enforcement",
    "node_protection_story",
    "kubernetes_policy_and_label_change_on_the_wire",
    "ipv6_outcomes_equal_ipv4",
    "neighbour_discovery_survives_drop_all",
    "extension_headers_cannot_hide_the_transport",
    "fragmented_first_packet_cannot_bypass",
    "address_added_after_start_is_enforced",
    "stray_segments_cannot_probe_a_closed_node",
    "failing_iptables_restore_keeps_previous_policy",
    "failing_ipset_keeps_previous_membership",
    "kill_during_reload_fails_closed_and_restart_converges",
    "restart_with_dns_down_keeps_learned_names",
    "vanishing_policy_directory_keeps_last_good_ruleset",
    "syn_flood_fail_closed_lets_no_denied_connection_through",
    "syn_flood_fail_open_bypasses_only_while_overrun",
    "l7_denied_requests_stay_denied_when_the_worker_is_overrun",
];

/// How long a probe waits before it calls an expected denial "timed out".
/// Short, because every denied probe pays it in full.
pub const DENY_WAIT: Duration = Duration::from_secs(2);
/// How long a probe waits for something expected to succeed: generous, it
/// costs nothing when the answer comes, and the machine may be loaded.
pub const ALLOW_WAIT: Duration = Duration::from_secs(6);
/// Deadline for the agent to install a ruleset or finish shutting down.
pub const AGENT_WAIT: Duration = Duration::from_secs(30);

/// Reports a missing precondition. Returns normally (the caller then skips)
/// outside CI; panics when `CI=true`.
pub fn skip(reason: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("end-to-end test cannot run in CI: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
}

/// The tools every lab needs.
pub const BASE_TOOLS: &[&str] = &[
    "ip",
    "iptables",
    "ip6tables",
    "iptables-save",
    "ip6tables-save",
    "ipset",
    "ss",
    "sysctl",
];

/// Returns the reason the environment cannot run a lab with `tools`, if any.
pub fn missing_precondition(tools: &[&str]) -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("end-to-end tests need root (network namespaces, iptables)".into());
    }
    let missing: Vec<&str> = BASE_TOOLS
        .iter()
        .chain(tools)
        .copied()
        .filter(|t| find_in_path(t).is_none())
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "missing tools: {} (apt-get install iproute2 iptables ipset iputils-ping curl)",
            missing.join(", ")
        ));
    }
    None
}

/// The path of an executable named `tool` on `PATH` (plus the sbin
/// directories, which a non-login root shell may lack).
pub fn find_in_path(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(Into::into))
        .map(|dir| dir.join(tool))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Polls `check` until it returns `Some`, at most until `timeout` passes.
/// The interval is short and fixed; the loop is bounded by the deadline.
pub fn poll_until<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

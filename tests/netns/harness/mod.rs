//! End-to-end harness: builds throw-away network-namespace labs, runs the
//! `tollgate` binary inside them and probes the wire. It owns only the
//! namespaces, processes and temporary files it creates, and must never touch
//! the root namespace's firewall or addresses outside its labs.
//!
//! Every root test starts the same way, with [`Lab::builder`]: the builder
//! checks root and the tools the test needs (or skips, see below), and
//! creates the namespaces. A test names itself in [`TEST_IDS`]; its index
//! gives it a namespace prefix `tg<index>-<tag>-` (`<tag>`: five random
//! characters per test process, so two checkouts running the suite at once
//! never share a name) and a private address range for the links the lab
//! wires itself (`10.<index>.<link>.0/24`, `fd00:<index>:<link>::/64`).
//! Tests that wire their own topology ask for unlinked namespaces and keep
//! their own addresses. Every namespace, spawned process, in-process server
//! and temporary directory is removed when the [`Lab`] is dropped, also
//! while a failing test unwinds. Namespaces left behind by a killed test
//! process are reaped by the next harness run (see [`lab`]).
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
//! Skip policy: without root or a required tool, [`skip`] prints one line
//! `SKIPPED: <test> <reason>` (the only skip marker; `scripts/test.sh`
//! counts it) and the test returns early — unless `CI=true`, where it
//! panics, so CI can never pass with the end-to-end suite silently skipped.

pub mod agent;
pub mod dns;
pub mod docker;
pub mod engine;
pub mod firewall;
pub mod lab;
pub mod metrics;
pub mod netns;
pub mod podman;
pub mod probe;
pub mod server;
#[cfg(test)]
mod tests;

pub use agent::{worker_counter, Agent, AgentOptions, FailMode};
pub use dns::{DnsRecord, Resolution};
pub use firewall::FirewallState;
pub use lab::Lab;
pub use netns::Netns;
pub use probe::{PingOutcome, TcpOutcome, UdpOutcome};
pub use server::Service;

use std::time::Duration;

/// Every end-to-end test, by function name. The position (1-based) is the
/// test's index: its address range and namespace prefix. Append new tests at
/// the end; never reuse an index. Indexes 98 (`benches/e2e.sh`) and 99
/// (`scripts/lab.sh`) are taken: the 98th test and later get 100 onwards.
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
    "kubernetes_policy_and_label_change_via_fake_api_server",
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
    // Tests that wire their own topology in unlinked namespaces, with
    // their own addresses (see each module's doc).
    "install_is_idempotent_and_teardown_leaves_foreign_rules",
    "allow_reject_drop_through_the_queue",
    "run_enforces_reloads_and_cleans_up",
    "agent_keeps_only_network_capabilities",
    "allowed_names_reachable_others_denied_with_drop_reject_and_cname",
    "first_connection_right_after_the_answer_never_loses_the_race",
    "ttl_expiry_denies_new_connections_and_keeps_established_ones",
    "dns_over_tcp_and_the_tcp_retry_of_a_truncated_answer_are_learned",
    "forged_and_malformed_replies_are_not_learned_and_the_worker_keeps_running",
    "only_trusted_servers_are_learned_from_when_configured",
    "restart_keeps_learned_addresses_working",
    "policy_change_starts_new_selectors_empty_and_destroys_removed_sets",
    "fqdn_rules_added_by_a_reload_start_the_dns_worker",
    "netlink_client_adds_refreshes_and_deletes_entries",
    "ingress_requests_are_matched_one_by_one",
    "reset_response_fails_fast",
    "spec_egress_example_allows_dns_and_http_to_bar_com_only",
    "pod_behind_the_node_is_inspected_in_forward",
    "raw_requests_cannot_bypass_l7_rules",
    "closed_connections_leave_the_flow_table",
    "audit_log_dedups_drops_and_logs_each_allowed_connection",
    "rate_limit_skips_lines_without_losing_packets",
    "metrics_move_with_traffic_and_status_answers",
    "kubernetes_policy_and_default_drop_are_audited_in_an_annotated_namespace",
    "harness_reaps_only_labs_of_gone_processes",
    "image_enforces_with_the_hosts_iptables_backend",
    "image_follows_a_legacy_iptables_host",
    "image_restart_never_opens_the_node",
    "image_crash_never_opens_the_node",
    "vanishing_and_unreadable_policy_files_keep_the_last_good_ruleset",
    "a_truncated_file_paused_mid_write_never_lifts_its_policy",
    "a_huge_sparse_policy_file_is_refused_unread",
    "a_panicking_worker_is_restarted_and_livez_is_red_meanwhile",
    "a_stalled_worker_makes_the_agent_exit_with_code_3",
    "readyz_is_red_until_the_first_kubernetes_snapshot_is_applied",
    "idle_metrics_clients_do_not_fail_the_probes",
    "a_queue_held_by_another_process_is_named_in_the_error",
    "a_panicking_l7_worker_is_restarted_too",
    "sigterm_restart_under_probing_never_opens",
    "kill9_restart_under_probing_never_opens",
    "kubernetes_restart_with_a_slow_first_list_never_opens",
    "policy_changed_while_down_applies_at_start_without_an_open_window",
    "kubernetes_startup_policy_holds_until_the_first_list",
    "second_agent_is_refused_and_drift_is_repaired",
    "cleanup_on_exit_removes_everything_at_the_stop",
    "forged_reply_from_the_pods_own_interface_is_not_learned_ipv4",
    "forged_reply_from_the_pods_own_interface_is_not_learned_ipv6",
    "replies_on_the_servers_path_teach_only_as_answers_with_bounded_ttl",
    "replies_made_on_the_node_teach_only_from_the_nodes_own_addresses",
    "source_port_range_is_matched_on_the_wire",
    "node_cluster_groups_in_a_node_policy_on_the_wire",
    "urgent_data_resets_l7_connections",
    "stripped_urgent_data_reaches_the_server_in_band",
    "strict_framing_denies_with_the_reason",
    "kubernetes_external_entity_crd_missing_then_installed_then_removed",
    "dangling_group_reference_warns_once_per_reload_and_applies",
    "admin_deny_holds_against_application_allow_not_securityops_allow",
    "admin_pass_goes_to_network_policy_and_baseline_deny_is_undone_by_it",
    "domain_names_accept_is_learned_from_a_real_dns_answer",
    "rules_added_after_a_lookup_apply_to_the_answers_clients_hold",
    "resolved_addresses_follow_the_ttl_to_a_changed_address",
    "resolve_off_leaves_held_answers_to_snooping",
    "a_dead_resolver_delays_neither_policy_nor_snooping",
    "every_declared_counter_is_scraped_from_a_running_agent",
    "l7_audit_lines_carry_method_host_and_path_in_text_and_json",
    "live_trace_and_endpoints_name_what_the_wire_enforces",
    "podman_harness_runs_labelled_containers_and_cleans_up",
    "docker_containers_are_the_inventory_and_policies_hold_on_the_wire",
    "docker_restart_is_followed_and_removal_leaves_no_address",
    "docker_api_gone_closes_the_container_addresses_until_listed",
    "docker_fqdn_egress_from_a_container",
    "docker_user_hook_enforces_and_leaves_dockers_rules_alone",
    "dockerd_restart_opens_nothing_and_the_buried_jump_is_restored",
    "bridged_traffic_unseen_is_named_by_status",
    "firewall_flush_is_repaired_within_the_drift_interval",
    "podman_network_reload_opens_nothing",
    "run_example_starts_the_image_and_enforces",
    "compose_example_starts_the_image_and_enforces",
    "a_cached_verdict_is_answered_by_the_kernel_and_a_policy_change_replaces_it",
    "a_pod_label_change_invalidates_cached_verdicts",
    "verdict_cache_off_caches_nothing",
    "a_syn_flood_at_a_denied_port_stays_in_the_kernel",
    "cached_allows_outlive_the_agent_but_not_a_changed_policy",
    "forwarded_udp_and_icmp_verdicts_are_cached_and_counted",
    "dns_queries_answered_from_the_cache_are_still_snooped",
    "a_full_cache_set_refuses_and_counts",
    "a_stuck_l7_worker_does_not_stop_the_other_l7_queues",
    "one_stuck_l7_queue_stops_every_l7_request",
    "a_tiny_receive_buffer_overflows_and_is_counted",
    "idle_l7_flows_are_forgotten_on_time_without_traffic",
    "docker_fresh_container_is_enforced_within_a_bound",
    "docker_podman_restart_is_covered_within_a_bound",
    "docker_network_connect_adds_the_new_address",
    "docker_rename_is_followed_by_get_and_trace",
    "docker_api_absent_at_start_holds_the_startup_policy",
    "docker_exposed_port_is_a_named_port_on_the_wire",
    "podman_network_reload_opens_nothing_with_cni",
    "privileged_ssh_covers_the_node_not_routed_pods",
    "a_stuck_l7_queue_leaves_other_connections_of_the_same_client_answered",
    "equal_priority_policies_interleave_rules_by_index_on_the_wire",
    "slow_names_of_one_policy_do_not_delay_another_policys_refresh",
    "a_thousand_missing_names_cost_the_resolver_little",
    "each_record_type_is_learned_alone_when_the_other_is_refused_or_silent",
    "privileged_entries_never_exempt_a_pod_reaching_its_node",
    "unsolicited_icmp_crosses_no_policy",
    "bridged_neighbour_discovery_between_enforced_pods",
    "routed_pod_cannot_send_as_its_neighbour_ipv4",
    "routed_pod_cannot_send_as_its_neighbour_ipv6",
    "bridged_container_cannot_claim_its_neighbours_address_ipv4",
    "bridged_container_cannot_claim_its_neighbours_address_ipv6",
    "podman_container_cannot_claim_its_neighbours_address",
    "segments_the_server_discards_cannot_rewrite_an_l7_request",
    "a_withheld_client_hello_cannot_be_rewritten_to_a_denied_name",
    "docker_containers_are_the_inventory_and_policies_hold_on_the_wire_with_docker",
    "docker_restart_is_followed_and_removal_leaves_no_address_with_docker",
    "docker_api_gone_closes_the_container_addresses_until_listed_with_docker",
    "docker_fqdn_egress_from_a_container_with_docker",
    "docker_fresh_container_is_enforced_within_a_bound_with_docker",
    "docker_podman_restart_is_covered_within_a_bound_with_docker",
    "docker_network_connect_adds_the_new_address_with_docker",
    "docker_rename_is_followed_by_get_and_trace_with_docker",
    "docker_api_absent_at_start_holds_the_startup_policy_with_docker",
    "docker_exposed_port_is_a_named_port_on_the_wire_with_docker",
    "tollgate_before_dockerd_and_a_network_created_while_it_runs_decide_first",
    "dockerd_restart_without_live_restore_lets_no_denied_connection_through",
    "dockerd_restart_with_live_restore_lets_no_denied_connection_through",
    "a_new_container_is_closed_from_its_first_moment_both_ways",
    "published_ports_through_docker_proxy_are_judged_as_their_client",
    "docker_compose_v1_underscore_names_are_the_pods",
    "kubernetes_pod_addresses_are_closed_until_the_pod_is_known",
    "a_label_key_typo_in_a_peer_warns_on_each_reload_and_in_status",
    "an_empty_policy_directory_says_everything_is_allowed",
    "uninstall_cleans_up_the_moment_the_agent_stops_and_leaves_a_foreign_ruleset_untouched",
    "a_macvlan_endpoint_is_reported_as_bypassing_and_a_routed_one_is_not",
    "l7_denied_requests_stay_denied_across_restarts_that_change_l7_queues",
    "renumbered_queues_never_hand_an_l7_connection_to_another_worker",
    "a_dry_run_drop_lets_traffic_flow_logs_and_counts_it_until_promoted",
    "a_dry_run_kubernetes_isolation_follows_the_annotation_through_watch_events",
    "observe_shows_the_agents_decisions_and_follows_new_ones",
    "log_level_changes_at_once_and_bundle_holds_the_agents_state",
    "prometheus_scrapes_an_agent_and_every_dashboard_query_returns_data",
    "diff_live_compares_the_agents_snapshot_and_the_wire_agrees",
    "a_dry_run_only_pod_stays_open_without_an_agent_under_fail_closed",
    "kubernetes_remote_label_change_is_patched_and_the_endpoint_set_changed_in_place",
    "fresh_names_at_once_share_batches_and_no_reply_goes_before_its_write",
    "a_full_write_queue_delays_replies_and_drops_none",
    "a_full_dns_queue_drops_replies_instead_of_releasing_them_unlearned",
    "queries_pass_unheld_and_their_copies_still_teach",
    "a_reply_judged_before_its_querys_copy_is_read_is_released_unlearned",
    "a_restarted_dns_worker_binds_its_query_copies_again",
    "kubernetes_controller_mode_enforces_remote_peers_from_an_address_group",
    "kubernetes_controller_and_two_node_agents_enforce_each_others_peers_and_outlive_the_controller",
    // The second Node's lab of the test above (two labs, two ranges).
    "kubernetes_controller_and_two_node_agents_second_node",
    "kubernetes_moving_between_watch_and_controller_mode_never_lets_a_denied_client_through",
    "kubernetes_a_group_missing_a_listed_slice_is_waited_for_on_the_wire",
    "kubernetes_controller_mode_warns_about_nothing_it_cannot_see",
    "a_hundred_routed_pods_are_guarded",
    "netlink_set_writes_match_ipset_restore",
    "a_change_no_decision_reads_keeps_the_cached_verdicts",
    "kubernetes_controller_mode_takes_other_nodes_from_a_node_group",
    "the_resolvers_route_is_asked_again_after_a_route_or_link_change",
    "an_upgrade_moves_the_rules_naming_a_generations_sets_to_the_lookup_sets",
    "kubernetes_controller_mode_enforces_a_namespaces_policies_from_its_first_local_pod",
];

/// How long a probe waits before it calls an expected denial "timed out".
/// Short, because every denied probe pays it in full.
pub const DENY_WAIT: Duration = Duration::from_secs(2);
/// How long a probe waits for something expected to succeed: generous, it
/// costs nothing when the answer comes, and the machine may be loaded.
pub const ALLOW_WAIT: Duration = Duration::from_secs(6);
/// Deadline for the agent to install a ruleset or finish shutting down.
pub const AGENT_WAIT: Duration = Duration::from_secs(30);

/// Reports that `test` cannot run for `reason`. Outside CI it prints the
/// skip marker `SKIPPED: <test> <reason>` and returns (the caller then
/// returns too); under `CI=true` it panics instead.
///
/// The marker is written to the process's stderr directly, not with
/// `eprintln!`, which the test runner captures: it shows in every run, and
/// `scripts/test.sh` counts the lines.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("end-to-end test {test} cannot run under CI=true: {reason}");
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test} {reason}");
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
            "missing tools: {} (scripts/install-deps.sh installs them)",
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

/// Polls `check` until it holds; panics naming `what` after `timeout`.
#[track_caller]
pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    if poll_until(timeout, || check().then_some(())).is_none() {
        panic!("timed out after {timeout:?} waiting for {what}");
    }
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

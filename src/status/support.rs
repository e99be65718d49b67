//! What `tollgate bundle` asks the agent for: what only the agent can
//! tell from inside its namespace and process — its command line, the
//! configuration in force, the last lines of its log, the kernel's
//! netfilter state and sets of tollgate's, and the tools' versions. It
//! reads them when asked, never keeps them, and writes nothing.

use super::{AgentStatus, SupportReport};

impl AgentStatus {
    pub(super) fn support(&self) -> SupportReport {
        let kernel = self.kernel.map(|kernel| kernel.dump());
        let (iptables_save, ip6tables_save, ebtables_save, ipsets, tools) = match kernel {
            Some(dump) => (
                dump.iptables_save,
                dump.ip6tables_save,
                dump.ebtables_save,
                dump.ipsets,
                dump.versions,
            ),
            None => Default::default(),
        };
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|r| format!("kernel {}", r.trim()))
            .unwrap_or_else(|e| format!("kernel: {e}"));
        let agent = format!(
            "tollgate {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            crate::telemetry::metrics::COMMIT
        );
        SupportReport {
            command_line: std::env::args().collect(),
            config: self.config.clone(),
            log: crate::logging::tail(),
            iptables_save,
            ip6tables_save,
            ebtables_save,
            ipsets,
            versions: [agent, release].into_iter().chain(tools).collect(),
        }
    }
}

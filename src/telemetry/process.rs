//! The standard `process_*` metrics of the agent itself, read from
//! `/proc/self` at scrape time (prometheus-client has no process
//! collector): CPU seconds, resident and virtual memory, open and maximum
//! file descriptors, start time. Parsing is pure ([`ProcessStats::parse`]);
//! [`ProcessStats::read`] is the only reader. A missing file leaves its
//! metric out; it never fails a scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// Clock ticks per second of `/proc/*/stat` times: the kernel's USER_HZ,
/// 100 on every Linux ABI (Prometheus' own procfs library assumes it too).
const USER_HZ: f64 = 100.0;

/// What `/proc/self` says about the process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// From the texts of `/proc/self/stat`, `/proc/self/status`,
    /// `/proc/self/limits` and `/proc/stat` (for the boot time), and the
    /// number of entries of `/proc/self/fd`.
    pub fn parse(
        stat: &str,
        status: &str,
        limits: &str,
        system_stat: &str,
        open_fds: Option<u64>,
    ) -> ProcessStats {
        // The command name (field 2) may hold spaces and parentheses: the
        // fields after it start after the last ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        // Counted from field 3 (state) at index 0.
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        let cpu_seconds = field(14)
            .zip(field(15))
            .map(|(user, system)| (user + system) as f64 / USER_HZ);
        let boot_time = system_stat
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<u64>().ok());
        let start_time_seconds = field(22)
            .zip(boot_time)
            .map(|(ticks, boot)| boot as f64 + ticks as f64 / USER_HZ);
        let kib = |key: &str| {
            status.lines().find_map(|l| {
                let value = l.strip_prefix(key)?.trim().strip_suffix("kB")?;
                value.trim().parse::<u64>().ok().map(|k| k * 1024)
            })
        };
        let max_fds = limits.lines().find_map(|l| {
            let soft = l
                .strip_prefix("Max open files")?
                .split_whitespace()
                .next()?;
            soft.parse::<u64>().ok()
        });
        ProcessStats {
            cpu_seconds,
            resident_bytes: kib("VmRSS:"),
            virtual_bytes: kib("VmSize:"),
            open_fds,
            max_fds,
            start_time_seconds,
        }
    }

    /// The current values of this process.
    pub fn read() -> ProcessStats {
        let text = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as u64);
        ProcessStats::parse(
            &text("/proc/self/stat"),
            &text("/proc/self/status"),
            &text("/proc/self/limits"),
            &text("/proc/stat"),
            open_fds,
        )
    }
}

/// Exports [`ProcessStats::read`] at every scrape, without a prefix (the
/// names every Prometheus client uses).
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = ProcessStats::read();
        if let Some(seconds) = stats.cpu_seconds {
            let metric = ConstCounter::new(seconds);
            let help = "Total user and system CPU time spent in seconds";
            metric.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                stats.resident_bytes.map(|b| b as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                stats.virtual_bytes.map(|b| b as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                stats.open_fds.map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                stats.max_fds.map(|n| n as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                stats.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                ConstGauge::new(value).encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    MetricType::Gauge,
                )?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_stats_from_proc_texts() {
        // A command name with a space and a parenthesis.
        let stat = "4242 (tollgate (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 123400 0 0";
        let status = "Name:\ttollgate\nVmSize:\t  123456 kB\nVmRSS:\t    2048 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        let system = "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n";
        let stats = ProcessStats::parse(stat, status, limits, system, Some(7));
        assert_eq!(
            stats,
            ProcessStats {
                cpu_seconds: Some(3.0),
                resident_bytes: Some(2048 * 1024),
                virtual_bytes: Some(123_456 * 1024),
                open_fds: Some(7),
                max_fds: Some(1024),
                start_time_seconds: Some(1_700_001_234.0),
            }
        );
        assert_eq!(
            ProcessStats::parse("garbage", "", "", "", None),
            ProcessStats::default()
        );
    }

    #[test]
    fn this_process_has_all_its_stats() {
        let stats = ProcessStats::read();
        assert!(stats.cpu_seconds.is_some(), "{stats:?}");
        assert!(stats.resident_bytes.unwrap() > 0);
        assert!(stats.open_fds.unwrap() >= 3);
        assert!(stats.start_time_seconds.unwrap() > 1_600_000_000.0);
    }
}

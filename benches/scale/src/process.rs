//! What the run reads of its child processes (the controller, the real
//! agents) from `/proc`, and the child killed when dropped. Reads only.

use std::process::Child;

/// A child process (the controller, an agent), killed when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// VmRSS of `pid`, in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// What VmRSS is made of, in MiB: the process's own memory (RssAnon:
/// heap, stacks) and the pages of files it maps (RssFile: the
/// executable's code and data, the libraries; shared with every process
/// mapping them, and the kernel may drop them under pressure).
pub fn rss_parts_mib(pid: u32) -> (f64, f64) {
    (status_mib(pid, "RssAnon:"), status_mib(pid, "RssFile:"))
}

/// A `kB` line of `/proc/<pid>/status`, in MiB (0 when unreadable).
fn status_mib(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// utime + stime of `pid` and of the children it waited for (an agent's
/// `iptables-save`/`-restore` and `ipset` processes), in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let (own, children) = cpu_split(pid);
    own + children
}

/// utime + stime of `pid`, and of the children it waited for, in seconds
/// (clock ticks of 1/100 s, Linux's USER_HZ).
pub fn cpu_split(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is the
    // first, utime the 12th, stime the 13th, cutime and cstime the next.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        (ticks(11) + ticks(12)) / 100.0,
        (ticks(13) + ticks(14)) / 100.0,
    )
}

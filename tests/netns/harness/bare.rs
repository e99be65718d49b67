//! A single bare network namespace for the root-only kernel tests of the
//! datapath and queue modules (`tests/datapath_netns.rs`,
//! `tests/queue_netns.rs`, `tests/run_smoke.rs`): each test creates its
//! own, named `tg-dp-<tag>-<pid>`, and deletes it on drop. Multi-namespace
//! topologies with routed peers are [`super::Lab`]'s job.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct NetNs(pub String);

impl NetNs {
    pub fn create(tag: &str) -> NetNs {
        let name = format!("tg-dp-{tag}-{}", std::process::id());
        let status = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap();
        assert!(status.success(), "ip netns add {name}");
        NetNs(name)
    }

    /// Moves the calling thread into the namespace; sockets it opens and
    /// commands it spawns are in the namespace.
    pub fn enter(&self) {
        let file = File::open(format!("/run/netns/{}", self.0)).unwrap();
        // SAFETY: setns on a valid namespace fd affects only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }

    /// A command run inside the namespace with `ip netns exec`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.0]).args(args);
        command
    }

    pub fn sh(&self, script: &str) -> Output {
        self.command(&["sh", "-c", script]).output().unwrap()
    }

    /// Runs a shell script that must succeed; returns its stdout.
    pub fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Whether the root-only tests can run. Not root: skipped, except under
/// CI (`CI=true`), where skipping would hide a missing capability.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    if !root {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "network-namespace tests need root under CI"
        );
        eprintln!("skipped: needs root to create network namespaces");
    }
    root
}

/// Polls `check` every 20 ms until it holds; panics after `deadline`.
pub fn wait_until(what: &str, deadline: Duration, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !check() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `f` on a thread inside `ns`: sockets it creates live there, and
/// keep working when handed back to the caller.
pub fn within<T: Send>(ns: &NetNs, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter();
            f()
        })
        .join()
        .unwrap()
    })
}

/// Collects a spawned child's stderr (spawned with `Stdio::piped()`) line
/// by line into a shared string, on a thread of its own, so tests can poll
/// the agent's log while it runs.
pub fn capture_stderr(child: &mut std::process::Child) -> std::sync::Arc<std::sync::Mutex<String>> {
    use std::io::{BufRead, BufReader};
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = std::sync::Arc::clone(&log);
    let stderr = child.stderr.take().expect("stderr is piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    log
}

/// Waits up to `deadline` for a child to exit; `None` if it is still
/// running then (the caller decides how to fail).
pub fn wait_exit(
    child: &mut std::process::Child,
    deadline: Duration,
) -> Option<std::process::ExitStatus> {
    let end = std::time::Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if std::time::Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

//! Named network namespaces (`ip netns`): running a closure inside one on a
//! short-lived thread, and running commands or shell scripts inside one
//! with a timeout. Sockets created inside [`Netns::enter`] keep their
//! namespace after the thread ends, so no harness thread ever stays in a
//! lab namespace.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a shell script run with [`Netns::sh`] may take: bounded, and
/// generous (the longest, 200 sequential curls, takes a few seconds).
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// A network namespace known to `ip netns` by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Netns {
    name: String,
}

/// What a command run with [`Netns::exec`] produced.
#[derive(Debug)]
pub struct CmdOutput {
    /// `None` when the command was killed at its timeout.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The exit code; `None` when killed (by a signal or at the timeout).
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// Panics with the command's output unless it exited 0.
    #[track_caller]
    pub fn expect_success(self, what: &str) -> Self {
        assert!(
            self.success(),
            "{what} failed ({:?})\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

impl Netns {
    pub fn new(name: impl Into<String>) -> Self {
        Netns { name: name.into() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a new thread that has joined this namespace and returns
    /// its result (`f` may borrow from the caller). Panics if the namespace
    /// cannot be entered; a panic in `f` is passed on.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|scope| {
            let handle = scope.spawn(|| {
                let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                // SAFETY: setns on a valid namespace fd affects only this
                // thread, which exists for this closure alone.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
                f()
            });
            match handle.join() {
                Ok(value) => value,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs `f` on a new detached thread that has joined this namespace
    /// (for work that outlives the caller's statement, e.g. a
    /// [`super::probe::Prober`]); join the handle to get its result.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: setns on a valid namespace fd affects only this
            // thread, which exists for this closure alone.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
    }

    /// A command that runs `argv` inside this namespace.
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).args(argv);
        cmd
    }

    /// Runs `argv` inside this namespace, killing it after `timeout`.
    pub fn exec(&self, argv: &[&str], timeout: Duration) -> CmdOutput {
        run_with_timeout(self.command(argv), timeout)
    }

    /// Runs `argv` and panics unless it succeeds within 10 s.
    #[track_caller]
    pub fn run(&self, argv: &[&str]) -> CmdOutput {
        self.exec(argv, Duration::from_secs(10))
            .expect_success(&format!("[{}] {}", self.name, argv.join(" ")))
    }

    /// Runs a `sh -c` script inside this namespace, killing it after
    /// [`SCRIPT_TIMEOUT`]; the caller judges the outcome.
    pub fn sh(&self, script: &str) -> CmdOutput {
        self.exec(&["sh", "-c", script], SCRIPT_TIMEOUT)
    }

    /// Runs a `sh -c` script that must succeed; returns its stdout.
    #[track_caller]
    pub fn ok(&self, script: &str) -> String {
        self.sh(script)
            .expect_success(&format!("[{}] {script}", self.name))
            .stdout
    }

    /// Runs a `sh -c` script of read-only netfilter dumps (`*-save`,
    /// `ipset list`) that must succeed; returns its stdout. A run that
    /// failed because an `*-save` raced an agent's generation switch (the
    /// tool reads the rules, then each `--match-set`'s name by index, and
    /// the set was destroyed in between: "Set with index 15 in kernel
    /// doesn't exist") is run again, at most three times in all, as the
    /// agent's own reads do.
    #[track_caller]
    pub fn dump(&self, script: &str) -> String {
        let mut output = self.sh(script);
        for _ in 1..3 {
            if output.success() || !output.stderr.contains("in kernel doesn't exist") {
                break;
            }
            output = self.sh(script);
        }
        output
            .expect_success(&format!("[{}] {script}", self.name))
            .stdout
    }

    /// Pids of the processes living in this namespace.
    pub fn pids(&self) -> Vec<i32> {
        let out = run_with_timeout(
            {
                let mut c = Command::new("ip");
                c.args(["netns", "pids", &self.name]);
                c
            },
            Duration::from_secs(5),
        );
        out.stdout
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

/// Runs `cmd` with piped output; kills it when `timeout` passes.
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> CmdOutput {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    CmdOutput {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

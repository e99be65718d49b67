//! The `tollgate run` process under test, started in a lab's node namespace
//! with the lab's policy directory and a status socket of its own in the lab
//! directory (never the shared default under `/run/tollgate`). Its stderr
//! goes to a file that tests wait on (`ruleset applied generation=N`,
//! `reload rejected:`, `shutdown complete`). Dropping an [`Agent`] kills the
//! process if it still runs and, when the test is failing, prints the log.

use std::fs::File;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;

use super::lab::Lab;
use super::{poll_until, AGENT_WAIT};

/// `--fail-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    Open,
    Closed,
}

/// The command line of `tollgate run`.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub node_name: String,
    pub node_labels: Vec<(String, String)>,
    pub node_addresses: Vec<IpAddr>,
    pub queues: Option<u16>,
    pub queue_base: Option<u16>,
    pub fail_mode: Option<FailMode>,
    pub privileged: Vec<String>,
    pub extra_args: Vec<String>,
    /// Kubernetes mode with this kubeconfig instead of the policy directory.
    pub kubeconfig: Option<PathBuf>,
    /// `--status-socket`; by default `tollgate.sock` in the lab directory.
    pub status_socket: PathBuf,
    /// Extra environment of the agent process (e.g. a `PATH` that puts
    /// fault-injecting wrappers of `iptables-restore` first).
    pub env: Vec<(String, String)>,
}

impl AgentOptions {
    /// Node `node` labelled `kubernetes.io/os=linux`, owning every node
    /// address of `lab`; everything else at the agent's defaults.
    pub fn new(lab: &Lab) -> Self {
        AgentOptions {
            node_name: "node".into(),
            node_labels: vec![("kubernetes.io/os".into(), "linux".into())],
            node_addresses: lab.node_addresses(),
            queues: None,
            queue_base: None,
            fail_mode: None,
            privileged: Vec::new(),
            extra_args: Vec::new(),
            kubeconfig: None,
            status_socket: lab.dir().join("tollgate.sock"),
            env: Vec::new(),
        }
    }

    pub fn node_name(mut self, name: &str) -> Self {
        self.node_name = name.into();
        self
    }

    /// Replaces the node's labels.
    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.node_labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self
    }

    /// Appends extra command-line arguments.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.extra_args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    pub fn fail_mode(mut self, mode: FailMode) -> Self {
        self.fail_mode = Some(mode);
        self
    }

    pub fn queues(mut self, n: u16) -> Self {
        self.queues = Some(n);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node_labels.push((key.into(), value.into()));
        self
    }

    fn command_line(&self, policies: &str) -> Vec<String> {
        let mut args: Vec<String> = match &self.kubeconfig {
            Some(path) => vec![
                "run".into(),
                "--kubernetes".into(),
                "--kubeconfig".into(),
                path.display().to_string(),
            ],
            None => vec!["run".into(), "--policies".into(), policies.into()],
        };
        args.extend(["--node-name".into(), self.node_name.clone()]);
        if !self.node_labels.is_empty() {
            let labels: Vec<String> = self
                .node_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            args.extend(["--node-labels".into(), labels.join(",")]);
        }
        for a in &self.node_addresses {
            args.extend(["--node-address".into(), a.to_string()]);
        }
        if let Some(n) = self.queues {
            args.extend(["--queues".into(), n.to_string()]);
        }
        if let Some(n) = self.queue_base {
            args.extend(["--queue-base".into(), n.to_string()]);
        }
        if let Some(mode) = self.fail_mode {
            let mode = match mode {
                FailMode::Open => "open",
                FailMode::Closed => "closed",
            };
            args.extend(["--fail-mode".into(), mode.into()]);
        }
        for p in &self.privileged {
            args.extend(["--privileged".into(), p.clone()]);
        }
        args.extend([
            "--status-socket".into(),
            self.status_socket.display().to_string(),
        ]);
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// A running (or finished) `tollgate run`.
pub struct Agent {
    child: Child,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Agent {
    /// Starts the agent; returns at once (wait for the log to see it ready).
    pub fn start(lab: &Lab, options: AgentOptions) -> Agent {
        let n = (0..1000)
            .find(|n| !lab.dir().join(format!("agent-{n}.log")).exists())
            .expect("fewer than 1000 agents per lab");
        let log = lab.dir().join(format!("agent-{n}.log"));
        let stderr = File::create(&log).expect("create agent log");
        let stdout = stderr.try_clone().expect("clone log handle");
        let policies = lab.policy_dir();
        let args = options.command_line(policies.to_str().expect("utf-8 temp path"));
        let argv: Vec<&str> = std::iter::once(env!("CARGO_BIN_EXE_tollgate"))
            .chain(args.iter().map(String::as_str))
            .collect();
        // `ip netns exec` execs the binary: the child's pid is tollgate's.
        let mut cmd = lab.node().command(&argv);
        cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.envs(options.env.iter().map(|(k, v)| (k, v)));
        let child = cmd.spawn().expect("spawn tollgate");
        Agent {
            child,
            log,
            status: None,
        }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid fits i32")
    }

    /// Everything the agent wrote so far, without terminal colour codes.
    pub fn log(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(
            &std::fs::read(&self.log).unwrap_or_default(),
        ))
    }

    /// Whether the process has exited (and records its status).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits until a log line contains `pattern`; returns that line. Panics
    /// with the log when the deadline passes or the agent exits first.
    #[track_caller]
    pub fn wait_for_log(&mut self, pattern: &str, timeout: Duration) -> String {
        self.wait_for_line(timeout, pattern, |l| l.contains(pattern))
    }

    /// Waits for `ruleset applied generation=<n>` (exactly `n`).
    #[track_caller]
    pub fn wait_generation(&mut self, n: u64) -> String {
        let what = format!("ruleset applied generation={n}");
        self.wait_for_line(AGENT_WAIT, &what, |l| {
            l.split_once("ruleset applied generation=")
                .is_some_and(|(_, rest)| {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse() == Ok(n)
                })
        })
    }

    /// Number of log lines containing `pattern`.
    pub fn count_log(&self, pattern: &str) -> usize {
        self.log_lines(pattern).len()
    }

    /// The log's lines that contain `pattern`.
    pub fn log_lines(&self, pattern: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(pattern))
            .map(str::to_string)
            .collect()
    }

    #[track_caller]
    fn wait_for_line(
        &mut self,
        timeout: Duration,
        what: &str,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        let found = poll_until(timeout, || {
            let log = self.log();
            if let Some(line) = log.lines().find(|l| matches(l)) {
                return Some(Ok(line.to_string()));
            }
            self.exited().map(Err)
        });
        match found {
            Some(Ok(line)) => line,
            Some(Err(status)) => panic!(
                "agent exited ({status}) before logging {what:?}; log:\n{}",
                self.log()
            ),
            None => panic!(
                "agent did not log {what:?} within {timeout:?}; log:\n{}",
                self.log()
            ),
        }
    }

    /// Sends `signal` to the agent.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) of our own child, which has not been reaped yet
        // (we only reap in `wait_exit`/`exited`, after which we never signal).
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(
            rc,
            0,
            "kill({}, {signal}): {}",
            self.pid(),
            std::io::Error::last_os_error()
        );
    }

    /// SIGHUP: asks for a reload.
    pub fn reload(&self) {
        self.signal(libc::SIGHUP);
    }

    /// SIGTERM, then waits for the process to exit; returns its status.
    #[track_caller]
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(AGENT_WAIT)
    }

    /// SIGTERM; asserts a clean exit (status 0, `shutdown complete`
    /// logged) and returns the whole log.
    #[track_caller]
    pub fn stop(&mut self) -> String {
        let status = self.terminate();
        let log = self.log();
        assert!(status.success(), "agent exit {status}; log:\n{log}");
        assert!(log.contains("shutdown complete"), "log:\n{log}");
        log
    }

    /// SIGKILL (no cleanup by the agent), then reaps it.
    pub fn kill9(&mut self) -> ExitStatus {
        self.signal(libc::SIGKILL);
        self.wait_exit(AGENT_WAIT)
    }

    #[track_caller]
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        match poll_until(timeout, || self.exited()) {
            Some(status) => status,
            None => panic!(
                "agent still running after {timeout:?}; log:\n{}",
                self.log()
            ),
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- tollgate log {} ----\n{}",
                self.log.display(),
                self.log()
            );
        }
    }
}

/// Removes ANSI CSI sequences (`ESC [ ... letter`), which a logger may emit
/// around field names even when writing to a file.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Lab {
    /// `tollgate cleanup` in the node namespace.
    pub fn tollgate_cleanup(&self) -> super::netns::CmdOutput {
        self.node()
            .exec(&[env!("CARGO_BIN_EXE_tollgate"), "cleanup"], AGENT_WAIT)
    }
}

/// Counter `key` of the agent's `worker` queue (`dns`, `queue`, …) in its
/// `tollgate status` answer on `socket` (0 when the worker does not count
/// it); `None` while the agent does not answer.
pub fn worker_counter(socket: &std::path::Path, worker: &str, key: &str) -> Option<u64> {
    use tollgate::status::{Request, Response};
    match tollgate::status::request(socket, &Request::Status) {
        Ok(Response::Status(report)) => Some(
            report
                .queues
                .iter()
                .find(|q| q.worker == worker)
                .and_then(|q| q.counters.get(key))
                .unwrap_or(0),
        ),
        _ => None,
    }
}

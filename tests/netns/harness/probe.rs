//! Probes that observe the firewall on the wire: TCP connects classified by
//! how they end, UDP exchanges, ICMP echo, curl, and the kernel's NFQUEUE
//! counters. TCP and UDP probes run in-process (a thread entered into the
//! namespace), so the classification comes from the exact errno.
//!
//! A probe says exactly what happened or fails the test: only a real
//! timeout is `TimedOut` (`NoReply` for ping: its exit code 1), and any
//! other error — a local failure unrelated to the firewall, such as
//! ENETDOWN or EADDRNOTAVAIL — panics with the error, so a deny assertion
//! can never pass because the network under it is broken.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::lab::FreshSources;
use super::netns::Netns;
use super::{poll_until, AGENT_WAIT};

/// How a new TCP connection attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOutcome {
    /// The three-way handshake completed.
    Connected,
    /// A TCP RST answered the SYN (ECONNREFUSED).
    Refused,
    /// An ICMP error answered (host/net unreachable, administratively
    /// prohibited).
    Unreachable,
    /// Nothing answered before the timeout.
    TimedOut,
}

/// How a UDP request/answer exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpOutcome {
    Answered,
    /// ICMP port unreachable came back.
    Refused,
    /// Another ICMP error came back (e.g. administratively prohibited).
    Unreachable,
    TimedOut,
}

/// The result of one ICMP echo request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PingOutcome {
    Reply,
    NoReply,
}

/// One line of `/proc/net/netfilter/nfnetlink_queue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCounters {
    pub queue: u32,
    pub portid: u32,
    pub queue_total: u64,
    pub copy_mode: u32,
    pub copy_range: u32,
    pub queue_dropped: u64,
    pub user_dropped: u64,
    /// The id of the last packet queued: grows by one per queued packet.
    pub id_sequence: u64,
}

/// What a probe's socket error says happened on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// A TCP RST or an ICMP port unreachable (ECONNREFUSED).
    Refused,
    /// Another ICMP error: host or network unreachable, administratively
    /// prohibited (EHOSTUNREACH, ENETUNREACH, EACCES, EPERM).
    Unreachable,
    /// Nothing came back before the deadline: a connect's own timeout, a
    /// read timeout (EAGAIN) or the kernel's ETIMEDOUT.
    TimedOut,
}

/// Classifies the socket error of a `probe` (named in the panic); panics on
/// an error that is not an outcome on the wire.
pub fn wire_error(e: &std::io::Error, probe: &str) -> WireError {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => WireError::Refused,
        Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EACCES | libc::EPERM) => {
            WireError::Unreachable
        }
        Some(libc::ETIMEDOUT) => WireError::TimedOut,
        _ if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => WireError::TimedOut,
        _ => panic!(
            "{probe} probe failed locally, not on the wire: {e} ({:?})",
            e.kind()
        ),
    }
}

/// How a failed connect ended; panics on an error that is not an outcome
/// on the wire.
pub fn classify_connect(e: &std::io::Error) -> TcpOutcome {
    match wire_error(e, "TCP") {
        WireError::Refused => TcpOutcome::Refused,
        WireError::Unreachable => TcpOutcome::Unreachable,
        WireError::TimedOut => TcpOutcome::TimedOut,
    }
}

/// Connects from `ns` to `to` within `timeout`.
pub fn tcp_connect(ns: &Netns, to: SocketAddr, timeout: Duration) -> TcpOutcome {
    match tcp_stream(ns, to, timeout) {
        Ok(_) => TcpOutcome::Connected,
        Err(e) => classify_connect(&e),
    }
}

/// Connects from `ns` to `to` from the source address `from` (a fresh
/// source of the lab: [`super::FreshSources`]).
pub fn tcp_connect_from(ns: &Netns, from: IpAddr, to: SocketAddr, timeout: Duration) -> TcpOutcome {
    match ns.enter(move || connect_from(from, to, timeout)) {
        Ok(_) => TcpOutcome::Connected,
        Err(e) => classify_connect(&e),
    }
}

/// A TCP connection bound to `from` before it connects (in the calling
/// thread's namespace).
fn connect_from(from: IpAddr, to: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(to),
        socket2::Type::STREAM,
        None,
    )?;
    socket.bind(&SocketAddr::new(from, 0).into())?;
    socket.connect_timeout(&to.into(), timeout)?;
    Ok(socket.into())
}

/// Connects from `ns` to `to` and returns the stream (it stays in `ns`).
pub fn tcp_stream(ns: &Netns, to: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    ns.enter(move || TcpStream::connect_timeout(&to, timeout))
}

/// Sends `payload` on `stream`, reads the same number of bytes back, and
/// says whether they matched (for [`super::Service::Echo`]).
pub fn echo_roundtrip(
    stream: &mut TcpStream,
    payload: &[u8],
    timeout: Duration,
) -> std::io::Result<bool> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(payload)?;
    let mut back = vec![0u8; payload.len()];
    stream.read_exact(&mut back)?;
    Ok(back == payload)
}

/// Sends one datagram from `ns` to `to` and waits for any answer.
pub fn udp_exchange(ns: &Netns, to: SocketAddr, timeout: Duration) -> UdpOutcome {
    ns.enter(move || {
        let local: SocketAddr = if to.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let socket = UdpSocket::bind(local).expect("bind UDP probe");
        socket.connect(to).expect("connect UDP probe");
        socket.set_read_timeout(Some(timeout)).expect("timeout");
        if let Err(e) = socket.send(b"tollgate-probe") {
            return udp_error(&e);
        }
        let mut buf = [0u8; 64];
        match socket.recv(&mut buf) {
            Ok(_) => UdpOutcome::Answered,
            Err(e) => udp_error(&e),
        }
    })
}

fn udp_error(e: &std::io::Error) -> UdpOutcome {
    match wire_error(e, "UDP") {
        WireError::Refused => UdpOutcome::Refused,
        WireError::Unreachable => UdpOutcome::Unreachable,
        WireError::TimedOut => UdpOutcome::TimedOut,
    }
}

/// One `ping` from `ns` to `to`, waiting at most `timeout` for the reply.
/// Exit 0 is a reply, exit 1 no reply (ping's own meaning); anything else
/// (2: an error such as an unreachable network, 127: no ping) panics.
pub fn ping(ns: &Netns, to: IpAddr, timeout: Duration) -> PingOutcome {
    let wait = timeout.as_secs().max(1).to_string();
    let to = to.to_string();
    let out = ns.exec(
        &["ping", "-n", "-c", "1", "-W", &wait, &to],
        timeout + Duration::from_secs(3),
    );
    match out.code() {
        Some(0) => PingOutcome::Reply,
        Some(1) => PingOutcome::NoReply,
        _ => panic!(
            "ping {to} failed locally ({:?}):\n{}{}",
            out.status, out.stdout, out.stderr
        ),
    }
}

/// `curl` from `ns`: the HTTP status code, or curl's exit code on failure.
pub fn curl(ns: &Netns, url: &str, timeout: Duration) -> Result<u16, i32> {
    let max = format!("{:.1}", timeout.as_secs_f64());
    let out = ns.exec(
        &[
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            &max,
            url,
        ],
        timeout + Duration::from_secs(3),
    );
    match out.status.and_then(|s| s.code()) {
        Some(0) => out.stdout.trim().parse().map_err(|_| -1),
        Some(code) => Err(code),
        None => Err(-1),
    }
}

/// The NFQUEUE counters of `ns` (the proc file is per network namespace).
pub fn queue_counters(ns: &Netns) -> Vec<QueueCounters> {
    let out = ns.run(&["cat", "/proc/net/netfilter/nfnetlink_queue"]);
    out.stdout.lines().filter_map(parse_queue_line).collect()
}

fn parse_queue_line(line: &str) -> Option<QueueCounters> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 8 {
        return None;
    }
    Some(QueueCounters {
        queue: f[0].parse().ok()?,
        portid: f[1].parse().ok()?,
        queue_total: f[2].parse().ok()?,
        copy_mode: f[3].parse().ok()?,
        copy_range: f[4].parse().ok()?,
        queue_dropped: f[5].parse().ok()?,
        user_dropped: f[6].parse().ok()?,
        id_sequence: f[7].parse().ok()?,
    })
}

/// Sum of `id_sequence` over all queues: packets ever queued in `ns`.
pub fn total_queued(counters: &[QueueCounters]) -> u64 {
    counters.iter().map(|c| c.id_sequence).sum()
}

/// One connection attempt of a [`Prober`]: when it started (from the
/// prober's start), how it ended, and the fresh source it came from (none:
/// the namespace's own address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub at: Duration,
    pub outcome: TcpOutcome,
    pub from: Option<IpAddr>,
}

/// What a [`Prober`] connects to, and from where: the namespace's own
/// address (the same tuple every time: from its second decision on, the
/// kernel verdict cache answers it) or a fresh source address per attempt
/// (a tuple no worker has decided: the agent's queues must answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probed {
    pub to: SocketAddr,
    pub fresh: bool,
}

impl Probed {
    /// `to` from a fresh source address per attempt.
    pub fn fresh(to: SocketAddr) -> Probed {
        Probed { to, fresh: true }
    }
}

impl From<SocketAddr> for Probed {
    fn from(to: SocketAddr) -> Probed {
        Probed { to, fresh: false }
    }
}

impl std::fmt::Display for Probed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fresh {
            true => write!(f, "{} (fresh sources)", self.to),
            false => write!(f, "{} (cached tuple)", self.to),
        }
    }
}

/// Continuous probing: for each target, a thread in a namespace starts a
/// new TCP connection attempt every `every` — each on its own thread, so
/// an attempt waiting for its `timeout` does not delay the next one, and
/// a change on the wire is seen within `every` — until [`Prober::finish`]
/// or the `limit` passes, and records every attempt (a connection is
/// closed at once). For watching what new connections meet while
/// something (an agent restart) happens. A fresh target's attempts each
/// come from the next address of a [`FreshSources`] pool.
pub struct Prober {
    started: Instant,
    stop: Arc<AtomicBool>,
    targets: Vec<Probed>,
    attempts: Vec<Arc<Mutex<Vec<Attempt>>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Prober {
    /// Probes `targets` from the namespace's own address.
    pub fn start(
        ns: &Netns,
        targets: &[SocketAddr],
        every: Duration,
        timeout: Duration,
        limit: Duration,
    ) -> Prober {
        let targets: Vec<Probed> = targets.iter().map(|t| Probed::from(*t)).collect();
        Prober::start_with(ns, &targets, None, every, timeout, limit)
    }

    /// Probes `targets`, the fresh ones from `sources`.
    pub fn start_with(
        ns: &Netns,
        targets: &[Probed],
        sources: Option<&FreshSources>,
        every: Duration,
        timeout: Duration,
        limit: Duration,
    ) -> Prober {
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let mut attempts = Vec::new();
        let mut threads = Vec::new();
        for &target in targets {
            let record = Arc::new(Mutex::new(Vec::new()));
            attempts.push(Arc::clone(&record));
            let stop = Arc::clone(&stop);
            let sources = match target.fresh {
                true => Some(sources.expect("fresh targets need a pool").clone()),
                false => None,
            };
            // Threads started from a thread inside the namespace are in it.
            threads.push(ns.spawn(move || {
                let mut attempts = Vec::new();
                while !stop.load(Ordering::SeqCst) && started.elapsed() < limit {
                    let begun = Instant::now();
                    let record = Arc::clone(&record);
                    let from = sources.as_ref().map(|s| s.next(target.to.is_ipv6()));
                    attempts.push(std::thread::spawn(move || {
                        let connected = match from {
                            Some(from) => connect_from(from, target.to, timeout),
                            None => TcpStream::connect_timeout(&target.to, timeout),
                        };
                        let outcome = match connected {
                            Ok(_) => TcpOutcome::Connected,
                            Err(e) => classify_connect(&e),
                        };
                        record.lock().unwrap().push(Attempt {
                            at: begun - started,
                            outcome,
                            from,
                        });
                    }));
                    attempts.retain(|a: &JoinHandle<()>| !a.is_finished());
                    // Pacing, not waiting for a condition.
                    if let Some(rest) = every.checked_sub(begun.elapsed()) {
                        std::thread::sleep(rest);
                    }
                }
                for attempt in attempts {
                    attempt.join().expect("probe attempt");
                }
            }));
        }
        Prober {
            started,
            stop,
            targets: targets.to_vec(),
            attempts,
            threads,
        }
    }

    /// Time since the prober started, on the attempts' clock.
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Attempts to `target` that ended so far, by start time.
    pub fn attempts(&self, target: impl Into<Probed>) -> Vec<Attempt> {
        let target = target.into();
        let i = self
            .targets
            .iter()
            .position(|t| *t == target)
            .unwrap_or_else(|| panic!("{target} is not probed"));
        sorted(&self.attempts[i])
    }

    /// Waits (at most [`AGENT_WAIT`]) until each of `targets` was attempted
    /// `n` times after `since`; fails the test if the prober stalled.
    #[track_caller]
    pub fn wait_attempts<T: Into<Probed> + Copy>(&self, targets: &[T], since: Duration, n: usize) {
        let done = poll_until(AGENT_WAIT, || {
            targets
                .iter()
                .all(|t| self.attempts(*t).iter().filter(|a| a.at >= since).count() >= n)
                .then_some(())
        });
        assert!(done.is_some(), "the prober stalled");
    }

    /// Waits (at most [`AGENT_WAIT`]) until each of `targets` connected `n`
    /// times after `since`; false if one did not (the caller says why).
    pub fn wait_connected<T: Into<Probed> + Copy>(
        &self,
        targets: &[T],
        since: Duration,
        n: usize,
    ) -> bool {
        poll_until(AGENT_WAIT, || {
            targets
                .iter()
                .all(|t| self.connected_since(*t, since) >= n)
                .then_some(())
        })
        .is_some()
    }

    /// Connections to `target` that succeeded after `since`.
    pub fn connected_since(&self, target: impl Into<Probed>, since: Duration) -> usize {
        connected_from(&self.attempts(target), since).len()
    }

    /// Stops probing, waits for the attempts under way; returns every
    /// target's attempts by start time, in target order.
    pub fn finish(mut self) -> Vec<(Probed, Vec<Attempt>)> {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            thread.join().expect("prober thread");
        }
        self.targets
            .iter()
            .zip(&self.attempts)
            .map(|(t, a)| (*t, sorted(a)))
            .collect()
    }
}

/// The attempts of `attempts` that started at or after `since` and
/// connected: what a test asserts is empty once a deny is in force
/// (over [`Prober::finish`]'s attempts, which include those still under
/// way when it was called).
pub fn connected_from(attempts: &[Attempt], since: Duration) -> Vec<&Attempt> {
    attempts
        .iter()
        .filter(|a| a.at >= since && a.outcome == TcpOutcome::Connected)
        .collect()
}

fn sorted(attempts: &Mutex<Vec<Attempt>>) -> Vec<Attempt> {
    let mut attempts = attempts.lock().unwrap().clone();
    attempts.sort_by_key(|a| a.at);
    attempts
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The longest time new connections failed: from the start of a failed
/// attempt to the start of the next one that connected (or of the last
/// attempt, when none did), over all runs of failures; with the first
/// and last failed attempt of that run.
pub fn longest_failure(attempts: &[Attempt]) -> Option<(Duration, Attempt, Attempt)> {
    let mut longest: Option<(Duration, Attempt, Attempt)> = None;
    let mut run: Option<(Attempt, Attempt)> = None;
    let end = attempts.last().map(|a| a.at);
    for attempt in attempts {
        match (attempt.outcome, run) {
            (TcpOutcome::Connected, Some((first, last))) => {
                let window = attempt.at - first.at;
                if longest.is_none_or(|(w, _, _)| window > w) {
                    longest = Some((window, first, last));
                }
                run = None;
            }
            (TcpOutcome::Connected, None) => {}
            (_, Some((first, _))) => run = Some((first, *attempt)),
            (_, None) => run = Some((*attempt, *attempt)),
        }
    }
    if let (Some((first, last)), Some(end)) = (run, end) {
        let window = end - first.at;
        if longest.is_none_or(|(w, _, _)| window > w) {
            longest = Some((window, first, last));
        }
    }
    longest
}

fn describe(attempts: &[Attempt]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for a in attempts {
        *counts.entry(format!("{:?}", a.outcome)).or_insert(0) += 1;
    }
    format!("{counts:?}")
}

/// The moments of one agent restart (or container restart), on a
/// [`Prober`]'s clock.
#[derive(Clone, Copy, Debug)]
pub struct Restart {
    /// The old agent was told to stop (or killed).
    pub down: Duration,
    /// It had exited: nothing reads the queues from here on.
    pub gone: Duration,
    /// The new agent was started (or, to measure from there, the API
    /// server answered its lists).
    pub restarted: Duration,
    /// Until then no agent decides: the old one is gone, the new one has
    /// no complete snapshot yet (file mode: its start; Kubernetes mode:
    /// the lists' answer).
    pub quiet_until: Duration,
    /// The new agent logged `ruleset applied generation=1`.
    pub ready: Duration,
    /// The prober's attempt timeout.
    pub attempt: Duration,
}

/// What [`judge_restart`] measured: the longest time from the new agent's
/// start to the next allowed connection, for cached tuples and for fresh
/// ones.
#[derive(Clone, Copy, Debug)]
pub struct Windows {
    pub cached: Duration,
    pub fresh: Duration,
}

/// Checks the probing of a restart, whose targets at port `denied` are
/// rejected by the policy and the others allowed: no denied connection
/// succeeded; allowed ones failed only between the stop and the new
/// agent's ruleset; while no agent decided, the kernel verdict cache
/// answered the cached tuples as the policy says (allowed connected,
/// denied refused) and nobody answered the fresh ones (every attempt
/// timed out: fail-closed, no queue read); from the new agent's ruleset
/// on, every tuple gets the policy's verdict (fresh ones from the new
/// agent). Prints a `LIFECYCLE-WINDOW <label> <target>` line per allowed
/// target, with the window from the new agent's start to the next allowed
/// connection and the longest failure run (which includes the time the
/// agent was kept down); returns the windows.
#[track_caller]
pub fn judge_restart(
    results: &[(Probed, Vec<Attempt>)],
    restart: Restart,
    denied: u16,
    label: &str,
) -> Windows {
    let Restart {
        down,
        gone,
        restarted,
        quiet_until,
        ready,
        attempt,
    } = restart;
    let mut windows = Windows {
        cached: Duration::ZERO,
        fresh: Duration::ZERO,
    };
    for (target, attempts) in results {
        assert!(attempts.len() > 5, "{target}: {}", describe(attempts));
        let denied = target.to.port() == denied;
        let through: Vec<_> = attempts
            .iter()
            .filter(|a| denied && a.outcome == TcpOutcome::Connected)
            .collect();
        assert!(
            through.is_empty(),
            "{label}: denied {target} connected {} times ({restart:?}): {through:?}",
            through.len()
        );
        // While no agent decides: the cache answers, or nobody does.
        let expected_quiet = match (target.fresh, denied) {
            (true, _) => TcpOutcome::TimedOut,
            (false, true) => TcpOutcome::Refused,
            (false, false) => TcpOutcome::Connected,
        };
        let quiet: Vec<_> = attempts
            .iter()
            .filter(|a| a.at >= gone && a.at + attempt <= quiet_until)
            .collect();
        let wrong: Vec<_> = quiet
            .iter()
            .filter(|a| a.outcome != expected_quiet)
            .collect();
        assert!(
            wrong.is_empty(),
            "{label}: {target} while no agent decided ({gone:?}..{quiet_until:?}) must be {expected_quiet:?}: {wrong:?}"
        );
        // The new agent's verdicts, from its ruleset on.
        let expected_after = match denied {
            true => TcpOutcome::Refused,
            false => TcpOutcome::Connected,
        };
        let wrong: Vec<_> = attempts
            .iter()
            .filter(|a| a.at >= ready && a.outcome != expected_after)
            .collect();
        assert!(
            wrong.is_empty(),
            "{label}: {target} after the new agent's ruleset ({ready:?}) must be {expected_after:?}: {wrong:?}"
        );
        if denied {
            continue;
        }
        for a in attempts
            .iter()
            .filter(|a| a.outcome != TcpOutcome::Connected)
        {
            assert!(
                a.at + attempt >= down && a.at <= ready,
                "{label}: allowed {target} failed outside the restart ({down:?}..{ready:?}): {a:?}"
            );
        }
        let back = attempts
            .iter()
            .find(|a| a.at >= restarted && a.outcome == TcpOutcome::Connected)
            .unwrap_or_else(|| panic!("{label}: {target} never allowed again after the restart"));
        let window = back.at - restarted;
        let run = longest_failure(attempts).map_or(Duration::ZERO, |(w, _, _)| w);
        println!(
            "LIFECYCLE-WINDOW {label} {target}: {} ms from the start (of the new agent; of the list's answer for \
             *-after-list) to the next allowed connection; longest failure run {} ms incl. the time kept down \
             (stop at {down:?}, exited at {gone:?}, start at {restarted:?}, in force at {ready:?}; \
             {quiet} attempts while no agent decided; {})",
            window.as_millis(),
            run.as_millis(),
            describe(attempts),
            quiet = quiet.len(),
        );
        let longest = match target.fresh {
            true => &mut windows.fresh,
            false => &mut windows.cached,
        };
        *longest = (*longest).max(window);
    }
    windows
}

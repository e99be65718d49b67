//! The status API of a running agent: a Unix stream socket (mode 0600 in a
//! 0700 directory, so only root reaches it) answering one JSON request per
//! connection with one JSON response, and the client the CLI uses
//! (`tollgate status`, `tollgate get policies`). The agent owns an
//! [`AgentStatus`] that it updates on every (re)load; the server only
//! reads it. Nothing here touches the packet path.
//!
//! ```text
//! → {"request":"status"}
//! ← {"status":{"uptimeSeconds":12,"rulesetGeneration":2,…}}
//! → {"request":"policies"}
//! ← {"policies":[{"policy":{"kind":"AntreaClusterNetworkPolicy",…},…}]}
//! ← {"error":"unknown request"}
//! ```
#![allow(clippy::disallowed_methods)] // the status server reports uptime.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::marks::FailMode;
use crate::ruleset::{PolicySummary, Ruleset};
use crate::telemetry::Registry;

/// Where `tollgate run` listens and the CLI connects unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/tollgate/tollgate.sock";
/// How long either side waits for the other.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request line read.
const MAX_REQUEST: u64 = 4096;

/// Why the status API failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("status socket {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("status socket {path} is in use by a running agent")]
    InUse { path: PathBuf },
    #[error("status socket {path}: the agent answered {answer:?}")]
    Protocol { path: PathBuf, answer: String },
    #[error("the agent: {0}")]
    Agent(String),
}

/// What a client asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "camelCase")]
pub enum Request {
    Status,
    Policies,
}

/// What the agent answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Response {
    Status(Box<StatusReport>),
    Policies(Vec<PolicySummary>),
    Error(String),
}

/// `tollgate status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub version: String,
    pub node_name: String,
    pub uptime_seconds: u64,
    pub ruleset_generation: u64,
    pub policies: usize,
    pub rules: usize,
    pub fail_mode: String,
    /// The last reload (`None` until one happened).
    pub last_reload: Option<ReloadReport>,
    /// Why the kernel does not match the desired state (the last apply
    /// failed; a retry is scheduled), or `None` when it does.
    #[serde(default)]
    pub datapath_behind: Option<String>,
    pub queues: Vec<QueueReport>,
    pub audit_log: Option<PathBuf>,
    pub metrics_address: Option<String>,
}

/// How the last reload ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadReport {
    pub seconds_ago: u64,
    /// `None` when it was applied.
    pub error: Option<String>,
}

/// One queue's counters: its worker's, then the kernel's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueReport {
    pub queue: u16,
    /// The worker reading the queue: `queue` (new connections), `dns`,
    /// `L7 queue`.
    pub worker: String,
    pub counters: Counts,
}

/// Counter values by key, in the order they are declared; a JSON object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts(pub Vec<(String, u64)>);

impl Counts {
    /// The value of counter `key`.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

impl Serialize for Counts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Counts {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> serde::de::Visitor<'de> for InOrder {
            type Value = Counts;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of counter values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Counts, A::Error> {
                let mut counts = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    counts.push(entry);
                }
                Ok(Counts(counts))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}

/// What the agent knows about itself, shared with the status server.
pub struct AgentStatus {
    started: Instant,
    node_name: String,
    fail_mode: FailMode,
    audit_log: Option<PathBuf>,
    metrics_address: Option<String>,
    ruleset: Arc<ArcSwap<Ruleset>>,
    counters: Arc<Registry>,
    state: Mutex<State>,
    /// Whether the first complete snapshot is in force (readiness input).
    snapshot_complete: AtomicBool,
}

#[derive(Default)]
struct State {
    generation: u64,
    last_reload: Option<(Instant, Option<String>)>,
    datapath_behind: Option<String>,
}

/// The fixed facts of an agent, for [`AgentStatus::new`].
pub struct AgentFacts {
    pub node_name: String,
    pub fail_mode: FailMode,
    pub audit_log: Option<PathBuf>,
    pub metrics_address: Option<String>,
}

impl AgentStatus {
    pub fn new(
        facts: AgentFacts,
        ruleset: Arc<ArcSwap<Ruleset>>,
        counters: Arc<Registry>,
    ) -> AgentStatus {
        AgentStatus {
            started: Instant::now(),
            node_name: facts.node_name,
            fail_mode: facts.fail_mode,
            audit_log: facts.audit_log,
            metrics_address: facts.metrics_address,
            ruleset,
            counters,
            state: Mutex::new(State::default()),
            snapshot_complete: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A ruleset was put in force as `generation`.
    pub fn applied(&self, generation: u64) {
        self.state().generation = generation;
    }

    /// The first complete snapshot of the source is in force (`true`);
    /// until then the agent decides nothing.
    pub fn set_snapshot_complete(&self, complete: bool) {
        self.snapshot_complete.store(complete, Ordering::SeqCst);
    }

    /// Whether the first complete snapshot is in force.
    pub fn snapshot_complete(&self) -> bool {
        self.snapshot_complete.load(Ordering::SeqCst)
    }

    /// The last kernel write failed (`Some(why)`), or the kernel matches.
    pub fn datapath(&self, behind: Option<String>) {
        self.state().datapath_behind = behind;
    }

    /// A reload ended; `error` says why it did not apply.
    pub fn reloaded(&self, error: Option<String>) {
        self.state().last_reload = Some((Instant::now(), error));
    }

    pub fn report(&self) -> StatusReport {
        let ruleset = self.ruleset.load();
        let state = self.state();
        let queues = self
            .counters
            .snapshot()
            .into_iter()
            .map(|queue| QueueReport {
                queue: queue.queue,
                worker: queue.name.to_string(),
                counters: Counts(
                    queue
                        .samples
                        .iter()
                        .map(|s| (s.series.key.to_string(), s.value))
                        .collect(),
                ),
            })
            .collect();
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_string(),
            node_name: self.node_name.clone(),
            uptime_seconds: self.started.elapsed().as_secs(),
            ruleset_generation: state.generation,
            policies: ruleset.policies().len(),
            rules: ruleset.rule_count(),
            fail_mode: self.fail_mode.to_string(),
            last_reload: state.last_reload.as_ref().map(|(at, error)| ReloadReport {
                seconds_ago: at.elapsed().as_secs(),
                error: error.clone(),
            }),
            datapath_behind: state.datapath_behind.clone(),
            queues,
            audit_log: self.audit_log.clone(),
            metrics_address: self.metrics_address.clone(),
        }
    }

    /// The answer to one request.
    pub fn answer(&self, request: &Request) -> Response {
        match request {
            Request::Status => Response::Status(Box::new(self.report())),
            Request::Policies => Response::Policies(self.ruleset.load().policies().to_vec()),
        }
    }
}

/// The listening socket; removes its file when dropped.
pub struct StatusServer {
    path: PathBuf,
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `path` (creating its directory with mode 0700 when missing; a
/// stale socket left by a killed agent is replaced, a live one is an
/// error) with mode 0600, and serves on a thread until the process exits.
pub fn serve(path: &Path, status: Arc<AgentStatus>) -> Result<StatusServer, StatusError> {
    let io = |error| StatusError::Io {
        path: path.to_path_buf(),
        error,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(StatusError::InUse {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = bind_private(path).map_err(io)?;
    let server = StatusServer {
        path: path.to_path_buf(),
    };
    std::thread::Builder::new()
        .name("status".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Err(error) = answer(stream, &status) {
                    tracing::debug!(%error, "status client");
                }
            }
        })
        .map_err(io)?;
    Ok(server)
}

/// Binds `path` with mode 0600 from the first moment anyone else could
/// reach it, without touching the process-wide umask: the socket is bound
/// in a fresh 0700 directory beside `path`, given mode 0600 there, then
/// renamed into place.
fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let staging = dir.join(format!(
        ".{}.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let staged = staging.join("s");
    let create = || std::fs::DirBuilder::new().mode(0o700).create(&staging);
    if let Err(error) = create() {
        if error.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(error);
        }
        // Left by an agent with our process id that died while binding
        // (in a container, every agent is process 1).
        let _ = std::fs::remove_file(&staged);
        std::fs::remove_dir(&staging)?;
        create()?;
    }
    let bound = UnixListener::bind(&staged).and_then(|listener| {
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(listener)
    });
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    bound
}

fn answer(stream: UnixStream, status: &AgentStatus) -> std::io::Result<()> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let mut line = String::new();
    BufReader::new((&stream).take(MAX_REQUEST)).read_line(&mut line)?;
    let response = match serde_json::from_str::<Request>(line.trim()) {
        Ok(request) => status.answer(&request),
        Err(error) => Response::Error(format!("bad request: {error}")),
    };
    let mut text = serde_json::to_string(&response).map_err(std::io::Error::other)?;
    text.push('\n');
    (&stream).write_all(text.as_bytes())
}

/// Sends one request to the agent listening on `path`.
pub fn request(path: &Path, request: &Request) -> Result<Response, StatusError> {
    let io = |error| StatusError::Io {
        path: path.to_path_buf(),
        error,
    };
    let stream = UnixStream::connect(path).map_err(io)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    let mut text = serde_json::to_string(request).map_err(|e| io(std::io::Error::other(e)))?;
    text.push('\n');
    (&stream).write_all(text.as_bytes()).map_err(io)?;
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).map_err(io)?;
    match serde_json::from_str::<Response>(answer.trim()) {
        Ok(Response::Error(message)) => Err(StatusError::Agent(message)),
        Ok(response) => Ok(response),
        Err(_) => Err(StatusError::Protocol {
            path: path.to_path_buf(),
            answer,
        }),
    }
}

/// `tollgate status` as text.
pub fn render_status(report: &StatusReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "node:               {}", report.node_name);
    let _ = writeln!(out, "version:            {}", report.version);
    let _ = writeln!(out, "uptime:             {}s", report.uptime_seconds);
    let _ = writeln!(out, "ruleset generation: {}", report.ruleset_generation);
    let _ = writeln!(
        out,
        "policies loaded:    {} ({} rules)",
        report.policies, report.rules
    );
    let reload = match &report.last_reload {
        None => "none since start".to_string(),
        Some(ReloadReport {
            seconds_ago,
            error: None,
        }) => format!("applied {seconds_ago}s ago"),
        Some(ReloadReport {
            seconds_ago,
            error: Some(error),
        }) => format!("FAILED {seconds_ago}s ago: {error}"),
    };
    let _ = writeln!(out, "last reload:        {reload}");
    let datapath = match &report.datapath_behind {
        None => "in sync".to_string(),
        Some(error) => format!("BEHIND, retrying: {error}"),
    };
    let _ = writeln!(out, "datapath:           {datapath}");
    let _ = writeln!(out, "fail mode:          {}", report.fail_mode);
    let _ = writeln!(
        out,
        "audit log:          {}",
        report
            .audit_log
            .as_ref()
            .map_or("off".to_string(), |p| p.display().to_string())
    );
    let _ = writeln!(
        out,
        "metrics:            {}",
        report.metrics_address.as_deref().unwrap_or("off")
    );
    // One table per kind of worker, its counters as columns.
    for group in report.queues.chunk_by(|a, b| a.worker == b.worker) {
        let keys: Vec<&str> = group[0]
            .counters
            .0
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        let header = std::iter::once(group[0].worker.to_uppercase())
            .chain(keys.iter().map(|k| k.to_uppercase().replace('_', "-")))
            .collect();
        let rows: Vec<Vec<String>> = std::iter::once(header)
            .chain(group.iter().map(|q| {
                std::iter::once(q.queue.to_string())
                    .chain(
                        keys.iter()
                            .map(|k| q.counters.get(k).unwrap_or(0).to_string()),
                    )
                    .collect()
            }))
            .collect();
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let _ = writeln!(out);
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            let _ = writeln!(out, "{}", cells.join(" ").trim_end());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::workers::ConnectionCounters;

    fn status() -> Arc<AgentStatus> {
        let ruleset = Arc::new(ArcSwap::from_pointee(Ruleset::default()));
        let stats = Arc::new(ConnectionCounters::default());
        stats.allowed.fetch_add(2, Ordering::Relaxed);
        let counters = Arc::new(Registry::default());
        counters.register(100, "queue", vec![stats]);
        Arc::new(AgentStatus::new(
            AgentFacts {
                node_name: "n1".into(),
                fail_mode: FailMode::Closed,
                audit_log: None,
                metrics_address: Some("127.0.0.1:9100".into()),
            },
            ruleset,
            counters,
        ))
    }

    #[test]
    fn requests_and_responses_are_one_json_line_each() {
        assert_eq!(
            serde_json::to_string(&Request::Status).unwrap(),
            r#"{"request":"status"}"#
        );
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"request":"policies"}"#).unwrap(),
            Request::Policies
        );
        let s = status();
        s.applied(1);
        s.reloaded(Some("bad.yaml: nope".into()));
        let Response::Status(report) = s.answer(&Request::Status) else {
            panic!()
        };
        assert_eq!(report.ruleset_generation, 1);
        assert_eq!(report.queues[0].counters.get("allowed"), Some(2));
        let text = render_status(&report);
        assert!(
            text.contains("last reload:        FAILED 0s ago: bad.yaml: nope"),
            "{text}"
        );
        assert!(text.contains("fail mode:          closed"));
        assert!(text.contains("datapath:           in sync"), "{text}");
        s.datapath(Some("iptables-restore: exited with 1".into()));
        let Response::Status(behind) = s.answer(&Request::Status) else {
            panic!()
        };
        assert!(render_status(&behind)
            .contains("datapath:           BEHIND, retrying: iptables-restore: exited with 1"));
        s.datapath(None);
        assert!(text.contains("\n100   2       0       0 "), "{text}");
        let json = serde_json::to_string(&Response::Status(report.clone())).unwrap();
        assert!(json.starts_with(r#"{"status":{"version":"#), "{json}");
        assert_eq!(
            serde_json::from_str::<Response>(&json).unwrap(),
            Response::Status(report)
        );
    }

    #[test]
    fn socket_round_trip_mode_0600_and_stale_socket_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/tollgate.sock");
        let server = serve(&path, status()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert!(matches!(
            request(&path, &Request::Policies).unwrap(),
            Response::Policies(p) if p.is_empty()
        ));
        assert!(matches!(
            serve(&path, status()),
            Err(StatusError::InUse { .. })
        ));
        // A garbage request gets an error answer.
        let stream = UnixStream::connect(&path).unwrap();
        (&stream).write_all(b"nonsense\n").unwrap();
        let mut answer = String::new();
        BufReader::new(&stream).read_line(&mut answer).unwrap();
        assert!(answer.starts_with(r#"{"error":"bad request"#), "{answer}");
        drop(server);
        assert!(!path.exists());
        // A stale socket file (no listener) is replaced.
        let stale = UnixListener::bind(&path).unwrap();
        drop(stale);
        let _server = serve(&path, status()).unwrap();
        assert!(request(&path, &Request::Status).is_ok());
    }

    #[test]
    fn binding_leaves_nothing_behind_even_after_a_crashed_bind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sock");
        let leftover = dir.path().join(format!(".t.sock.{}", std::process::id()));
        std::fs::create_dir(&leftover).unwrap();
        std::fs::write(leftover.join("s"), b"").unwrap();
        let _server = serve(&path, status()).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["t.sock"]);
        assert!(request(&path, &Request::Status).is_ok());
    }
}

//! The audit log's writer: workers hand records to an [`AuditSink`] (a
//! bounded channel; when it is full the record is skipped and counted,
//! a packet never waits), and one thread deduplicates, rate-limits and
//! appends the lines to the configured file, rotating it by size and
//! keeping a bounded number of old files (`np.log.1` newest … `np.log.N`).
//! This is the only code that writes the audit file.
#![allow(clippy::disallowed_methods)] // the writer thread stamps and rate-limits lines on the clock.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::AuditConfig;
use crate::counters;

use crate::audit::{AuditFormat, AuditRecord, Deduplicator, RateLimiter, Timestamp};
use crate::packet::flow::Verdict;

counters! {
    /// What became of the audit lines. Registered by the agent in every
    /// mode (zero with the audit log off).
    pub struct AuditCounters: one per agent {
        written: Counter "audit_lines_written" = "Audit log lines written",
        skipped_queue_full: Counter "audit_lines_skipped" { reason = "queue_full" } = "Audit log lines not written, by reason",
        skipped_rate_limit: Counter "audit_lines_skipped" { reason = "rate_limit" } = "Audit log lines not written, by reason",
        skipped_io_error: Counter "audit_lines_skipped" { reason = "io_error" } = "Audit log lines not written, by reason",
    }
}

/// Records in flight between the workers and the writer.
pub const CHANNEL_CAPACITY: usize = 4096;
/// Open Drop/Reject windows; beyond it new keys are logged undeduplicated.
const MAX_DEDUP_KEYS: usize = 10_000;
/// Longest the writer sleeps without a record; it wakes earlier when a
/// dedup window is due to close.
const TICK: Duration = Duration::from_millis(100);

/// Why the audit log could not be opened or rotated.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit log {path}: {error}")]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("audit log writer thread: {0}")]
    Spawn(std::io::Error),
}

enum Message {
    Record(Box<AuditRecord>),
    /// Close every open window, write, and acknowledge (shutdown).
    Flush(SyncSender<()>),
}

/// The workers' end of the audit log. Cloned per worker.
#[derive(Clone)]
pub struct AuditSink {
    tx: SyncSender<Message>,
    counters: Arc<AuditCounters>,
}

impl AuditSink {
    /// Hands a record to the writer without waiting; a full channel skips
    /// (and counts) the record.
    pub fn offer(&self, record: AuditRecord) {
        match self.tx.try_send(Message::Record(Box::new(record))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters
                    .skipped_queue_full
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Writes every pending summary and waits (at most `timeout`) until
    /// they are on disk. Used at shutdown.
    pub fn flush(&self, timeout: Duration) {
        let (ack, done) = mpsc::sync_channel(1);
        if self.tx.send(Message::Flush(ack)).is_ok() {
            let _ = done.recv_timeout(timeout);
        }
    }
}

/// Opens the file at `path` (errors are returned before any thread runs)
/// and starts the writer thread, with the rate and rotation of `config`.
pub fn spawn(
    path: &Path,
    config: &AuditConfig,
    counters: Arc<AuditCounters>,
) -> Result<AuditSink, AuditError> {
    spawn_with_clock(path, config, counters, now)
}

/// [`spawn`] with the clock the writer reads for its dedup windows and its
/// rate limit: the wall clock in the agent, a fixed one in tests.
fn spawn_with_clock(
    path: &Path,
    config: &AuditConfig,
    counters: Arc<AuditCounters>,
    clock: fn() -> Timestamp,
) -> Result<AuditSink, AuditError> {
    let file = RotatingFile::open(path, config.max_bytes, config.max_files)?;
    let (tx, rx) = mpsc::sync_channel(CHANNEL_CAPACITY);
    let writer = Writer {
        file,
        dedup: Deduplicator::new(Duration::from_secs(1), MAX_DEDUP_KEYS, config.format),
        format: config.format,
        limiter: RateLimiter::new(config.rate, config.burst),
        counters: Arc::clone(&counters),
        clock,
    };
    std::thread::Builder::new()
        .name("audit".into())
        .spawn(move || writer.run(&rx))
        .map_err(AuditError::Spawn)?;
    Ok(AuditSink { tx, counters })
}

fn now() -> Timestamp {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    Timestamp::from_unix_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

struct Writer {
    file: RotatingFile,
    format: AuditFormat,
    dedup: Deduplicator,
    limiter: RateLimiter,
    counters: Arc<AuditCounters>,
    clock: fn() -> Timestamp,
}

impl Writer {
    fn run(mut self, rx: &Receiver<Message>) {
        loop {
            let wait = self.dedup.next_close().map_or(TICK, |close| {
                Duration::from_micros(close.unix_micros.saturating_sub((self.clock)().unix_micros))
                    .min(TICK)
            });
            match rx.recv_timeout(wait) {
                Ok(message) => {
                    self.handle(message);
                    while let Ok(message) = rx.try_recv() {
                        self.handle(message);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    let now = (self.clock)();
                    let lines = self.dedup.close_all(now);
                    self.write(lines, now);
                    let _ = self.file.flush();
                    return;
                }
            }
            let now = (self.clock)();
            let lines = self.dedup.flush(now);
            self.write(lines, now);
            if let Err(error) = self.file.flush() {
                tracing::warn!(%error, "audit log flush failed");
            }
        }
    }

    fn handle(&mut self, message: Message) {
        match message {
            Message::Record(record) if record.verdict == Verdict::Allow => {
                // Allow lines are never deduplicated: ask the limiter
                // before formatting, so a flood costs no formatting.
                let now = (self.clock)();
                let closed = self.dedup.flush(record.time);
                self.write(closed, now);
                if self.limiter.admit(now) {
                    self.append(&record.render(self.format, record.time, None));
                } else {
                    self.counters
                        .skipped_rate_limit
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            Message::Record(record) => {
                let lines = self.dedup.offer(*record);
                self.write(lines, (self.clock)());
            }
            Message::Flush(ack) => {
                let now = (self.clock)();
                let lines = self.dedup.close_all(now);
                self.write(lines, now);
                let _ = self.file.flush();
                let _ = ack.try_send(());
            }
        }
    }

    fn write(&mut self, lines: Vec<String>, now: Timestamp) {
        for line in lines {
            if self.limiter.admit(now) {
                self.append(&line);
            } else {
                self.counters
                    .skipped_rate_limit
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Appends an admitted line.
    fn append(&mut self, line: &str) {
        match self.file.write_line(line) {
            Ok(()) => {
                self.counters.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                self.counters
                    .skipped_io_error
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "audit log write failed");
            }
        }
    }
}

/// An append-only file rotated by size: `path` → `path.1` → … →
/// `path.{max_files}` (the oldest is deleted). `max_files = 0` keeps no
/// old file (the log restarts empty).
pub struct RotatingFile {
    path: PathBuf,
    file: BufWriter<File>,
    size: u64,
    max_bytes: u64,
    max_files: u32,
}

impl RotatingFile {
    /// Opens `path` for appending, creating it (0640) and its missing
    /// parent directories (0750).
    pub fn open(path: &Path, max_bytes: u64, max_files: u32) -> Result<RotatingFile, AuditError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)
                .map_err(|error| AuditError::Open {
                    path: path.to_path_buf(),
                    error,
                })?;
        }
        let file = open_append(path)?;
        let size = file.metadata().map_or(0, |m| m.len());
        Ok(RotatingFile {
            path: path.to_path_buf(),
            file: BufWriter::new(file),
            size,
            max_bytes,
            max_files,
        })
    }

    /// Appends `line` and a newline, rotating first if the line would
    /// take the file past its size limit.
    pub fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        let len = line.len() as u64 + 1;
        if self.size > 0 && self.size + len > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.size += len;
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let numbered = |n: u32| {
            let mut name = self.path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.max_files == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            let _ = std::fs::remove_file(numbered(self.max_files));
            for n in (1..self.max_files).rev() {
                let from = numbered(n);
                if from.exists() {
                    std::fs::rename(&from, numbered(n + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        let file = open_append(&self.path).map_err(|e| match e {
            AuditError::Open { error, .. } => error,
            AuditError::Spawn(error) => error,
        })?;
        self.file = BufWriter::new(file);
        self.size = 0;
        Ok(())
    }
}

fn open_append(path: &Path) -> Result<File, AuditError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
        .map_err(|error| AuditError::Open {
            path: path.to_path_buf(),
            error,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Decider;
    use crate::model::Direction;
    use crate::packet::flow::{Flow, Transport};
    use crate::telemetry::Metrics;

    fn record(verdict: Verdict, src_port: u16, micros: u64) -> AuditRecord {
        AuditRecord {
            time: Timestamp::from_unix_micros(micros),
            decider: Decider::Antrea {
                policy: "AntreaClusterNetworkPolicy:p".into(),
                rule: "r".into(),
                baseline: false,
            },
            direction: Direction::Ingress,
            verdict,
            priority: Some(1),
            applied_to: "n".into(),
            flow: Flow {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                transport: Transport::Tcp {
                    src_port,
                    dst_port: 80,
                },
                local: None,
            },
            packet_length: 60,
            log_label: None,
            reason: None,
            request: None,
            dry_run: false,
        }
    }

    #[test]
    fn writer_thread_dedups_limits_and_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("np.log");
        let metrics = Metrics::new();
        let counters = Arc::new(AuditCounters::default());
        metrics.counters().register_set(counters.clone());
        let config = AuditConfig {
            burst: 4,
            rate: 1,
            ..AuditConfig::default()
        };
        // A clock that stands still: the limiter never refills, however
        // long the writer thread is kept waiting.
        fn frozen() -> Timestamp {
            Timestamp::from_unix_micros(1_700_000_000_000_000)
        }
        let sink = spawn_with_clock(&path, &config, counters, frozen).unwrap();
        let t = frozen().unix_micros;
        for i in 0..10 {
            sink.offer(record(Verdict::Drop, 1000, t + i));
        }
        for i in 0..5 {
            sink.offer(record(Verdict::Allow, 2000 + i, t + 100));
        }
        sink.flush(Duration::from_secs(5));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // The Drop line and 3 Allow lines use the burst of 4; the last two
        // Allow lines and the Drop summary are skipped (rate 1/s).
        assert!(
            lines[0].contains(" Drop ") && !lines[0].contains('['),
            "{text}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.contains(" Allow ")).count(),
            3,
            "{text}"
        );
        let rendered = metrics.render();
        let written = lines.len();
        assert_eq!(written, 4, "{text}");
        assert!(
            rendered.contains(&format!("tollgate_audit_lines_written_total {written}\n")),
            "{rendered}"
        );
        assert!(
            rendered.contains(&format!(
                "tollgate_audit_lines_skipped_total{{reason=\"rate_limit\"}} {}\n",
                7 - written
            )),
            "{rendered}"
        );
    }

    #[test]
    fn a_full_channel_skips_and_counts() {
        let metrics = Metrics::new();
        let counters = Arc::new(AuditCounters::default());
        metrics.counters().register_set(counters.clone());
        let (tx, _rx) = mpsc::sync_channel(1);
        let sink = AuditSink { tx, counters };
        sink.offer(record(Verdict::Allow, 1, 1));
        sink.offer(record(Verdict::Allow, 2, 1));
        sink.offer(record(Verdict::Allow, 3, 1));
        assert!(metrics
            .render()
            .contains("tollgate_audit_lines_skipped_total{reason=\"queue_full\"} 2\n"));
    }

    #[test]
    fn rotation_keeps_a_bounded_number_of_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("np.log");
        let mut file = RotatingFile::open(&path, 25, 2).unwrap();
        for i in 0..10 {
            // 10 bytes + newline: two lines per file.
            file.write_line(&format!("line-{i:05}")).unwrap();
        }
        file.flush().unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&path), "line-00008\nline-00009\n");
        assert_eq!(
            read(&dir.path().join("np.log.1")),
            "line-00006\nline-00007\n"
        );
        assert_eq!(
            read(&dir.path().join("np.log.2")),
            "line-00004\nline-00005\n"
        );
        assert!(!dir.path().join("np.log.3").exists());
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
    }

    #[test]
    fn no_old_files_when_max_files_is_zero() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("np.log");
        let mut file = RotatingFile::open(&path, 12, 0).unwrap();
        for i in 0..3 {
            file.write_line(&format!("line-{i:05}")).unwrap();
        }
        file.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "line-00002\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn appends_creates_directories_and_rejects_an_unusable_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("np.log");
        std::fs::write(&path, "old\n").unwrap();
        let mut file = RotatingFile::open(&path, 1 << 20, 1).unwrap();
        file.write_line("new").unwrap();
        file.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\nnew\n");
        let nested = dir.path().join("var/log/tollgate/np.log");
        RotatingFile::open(&nested, 1 << 20, 1).unwrap();
        let mode = std::fs::metadata(nested.parent().unwrap())
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o750
        );
        // A regular file where a directory must be.
        assert!(RotatingFile::open(&path.join("np.log"), 10, 1).is_err());
    }
}

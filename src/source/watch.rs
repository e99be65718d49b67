//! The standalone source: [`Directory`] reads a policy directory whole on
//! every reload, once its files have settled, and [`PolicyWatch`] watches
//! it (inotify, across the directory being removed or replaced: the parent
//! is watched too). The watch only wakes the run loop; it never reads
//! policies itself.
//!
//! A reload is refused (the ruleset in force stays) when a file cannot be
//! read, is over the [`PolicyFilesConfig`] bounds, is still being written after
//! [`super::DEBOUNCE_MAX`], or held objects at the last accepted load and
//! holds none now: a writer that truncates a file and then pauses must not
//! remove its policies. Deleting the file removes them.
#![allow(clippy::disallowed_methods)] // the directory watch waits for files to settle, on the clock and the files' times.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use super::files::{self, Stamps};
use super::{load_paths_within, Settled, Settling, Source, SourceError};
use crate::config::PolicyFilesConfig;
use crate::model::Snapshot;
use crate::validate::{check, Problem};

/// Why the policy directory cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("policy directory {path}: {source}")]
    Missing {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy directory {path}: not a directory")]
    NotADirectory { path: PathBuf },
    #[error("watching {path}: {source}")]
    Notify {
        path: PathBuf,
        source: notify::Error,
    },
}

/// What [`PolicyWatch::refresh`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// The watched directory is still there.
    Unchanged,
    /// A different directory is there now; it is watched from now on.
    Rewatched,
    /// Nothing (or not a directory) is there.
    Missing,
}

/// A policy directory: an invalid or missing one is refused whole.
pub struct Directory {
    /// As given (problems name files under it).
    dir: PathBuf,
    limits: PolicyFilesConfig,
    watch: PolicyWatch,
    /// Objects per file at the last load handed out.
    accepted: BTreeMap<PathBuf, usize>,
}

impl Directory {
    /// Starts watching `dir`, which must exist; `changed` is called (on the
    /// watcher's thread) for every change in or of it.
    pub fn start(
        dir: &Path,
        limits: PolicyFilesConfig,
        changed: impl Fn() + Send + 'static,
    ) -> Result<Directory, WatchError> {
        Ok(Directory {
            dir: dir.to_path_buf(),
            limits,
            watch: PolicyWatch::start(dir, changed)?,
            accepted: BTreeMap::new(),
        })
    }

    /// Reads the directory once its files have settled and did not change
    /// while being read: the snapshot, its problems and the files' stamps.
    fn read_settled(&self) -> Result<(Snapshot, Vec<Problem>, Stamps), Vec<Problem>> {
        let mut settling = Settling::new(Instant::now());
        loop {
            let stamps = files::stamps(&self.dir);
            let age = stamps
                .last_change()
                .and_then(|changed| age(changed, SystemTime::now()));
            match settling.observe(stamps.clone(), age, Instant::now()) {
                Settled::Yes => {}
                Settled::WaitUntil(at) => {
                    std::thread::sleep(at.saturating_duration_since(Instant::now()));
                    continue;
                }
                Settled::StillChanging(waited) => {
                    let e = SourceError::StillChanging {
                        quiet_ms: super::DEBOUNCE.as_millis(),
                        waited_ms: waited.as_millis(),
                    };
                    return Err(vec![e.into_problem(&self.dir)]);
                }
            }
            let (snapshot, problems) =
                load_paths_within(std::slice::from_ref(&self.dir), &self.limits);
            if files::stamps(&self.dir) == stamps {
                return Ok((snapshot, problems, stamps));
            }
        }
    }
}

/// How long before `now` the time `changed` (nanoseconds since the epoch)
/// was; `None` when it is in the future.
fn age(changed: i128, now: SystemTime) -> Option<Duration> {
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    let ago = i128::try_from(now).ok()?.checked_sub(changed)?;
    u64::try_from(ago).ok().map(Duration::from_nanos)
}

impl Source for Directory {
    /// Re-establishes the watch if the directory was replaced, then reads
    /// it once settled and validates it; refuses files that were emptied,
    /// logs the validation warnings of an accepted read. A directory read
    /// whole is always complete.
    fn latest(&mut self) -> Result<Option<Arc<Snapshot>>, Vec<Problem>> {
        match self.watch.refresh() {
            Ok(Refresh::Unchanged) => {}
            Ok(Refresh::Rewatched) => tracing::info!("policy directory watch re-established"),
            Ok(Refresh::Missing) => {
                tracing::warn!("policy directory missing; keeping the ruleset in force")
            }
            Err(error) => tracing::error!(%error, "policy directory not watched"),
        }
        let (snapshot, mut problems, stamps) = self.read_settled()?;
        let objects = stamps.objects(&snapshot);
        problems.extend(files::emptied(&self.accepted, &objects));
        let findings = check(&snapshot);
        problems.extend(findings.errors);
        if !problems.is_empty() {
            return Err(problems);
        }
        // Enforced all the same (Antrea admits these objects too).
        for warning in &findings.warnings {
            tracing::warn!("policy warning: {warning}");
        }
        self.accepted = objects;
        Ok(Some(Arc::new(snapshot)))
    }
}

/// The watch of one policy directory.
pub struct PolicyWatch {
    dir: PathBuf,
    watcher: RecommendedWatcher,
    /// Device and inode of the directory being watched.
    watching: Option<(u64, u64)>,
}

impl PolicyWatch {
    /// Starts watching `dir`, which must exist; `changed` is called (on the
    /// watcher's thread) for every change in or of it.
    pub fn start(
        dir: &Path,
        changed: impl Fn() + Send + 'static,
    ) -> Result<PolicyWatch, WatchError> {
        let dir = std::path::absolute(dir).map_err(|source| WatchError::Missing {
            path: dir.to_path_buf(),
            source,
        })?;
        let identity = identity(&dir)?;
        let notify_error = |source| WatchError::Notify {
            path: dir.clone(),
            source,
        };
        let inside = dir.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let relevant = match event {
                    // Reading the files ourselves produces access events.
                    Ok(event) => {
                        !matches!(event.kind, EventKind::Access(_))
                            && (event.paths.is_empty()
                                || event.paths.iter().any(|p| p.starts_with(&inside)))
                    }
                    Err(_) => true,
                };
                if relevant {
                    changed();
                }
            })
            .map_err(notify_error)?;
        watcher
            .watch(&dir, RecursiveMode::Recursive)
            .map_err(notify_error)?;
        if let Some(parent) = dir.parent() {
            watcher
                .watch(parent, RecursiveMode::NonRecursive)
                .map_err(notify_error)?;
        }
        Ok(PolicyWatch {
            dir,
            watcher,
            watching: Some(identity),
        })
    }

    /// Checks that the directory being watched is the one under the
    /// directory's name, and watches the new one if not.
    pub fn refresh(&mut self) -> Result<Refresh, WatchError> {
        let Ok(identity) = identity(&self.dir) else {
            if self.watching.take().is_some() {
                // Removed: the kernel dropped the watch. Renamed away: the
                // watch follows the old directory, whose changes no longer
                // matter. Either way, stop; an error means it was gone.
                let _ = self.watcher.unwatch(&self.dir);
            }
            return Ok(Refresh::Missing);
        };
        if self.watching == Some(identity) {
            return Ok(Refresh::Unchanged);
        }
        let _ = self.watcher.unwatch(&self.dir);
        self.watcher
            .watch(&self.dir, RecursiveMode::Recursive)
            .map_err(|source| WatchError::Notify {
                path: self.dir.clone(),
                source,
            })?;
        self.watching = Some(identity);
        Ok(Refresh::Rewatched)
    }
}

/// Device and inode of the directory at `path`.
fn identity(path: &Path) -> Result<(u64, u64), WatchError> {
    let meta = std::fs::metadata(path).map_err(|source| WatchError::Missing {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(WatchError::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    Ok((meta.dev(), meta.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tollgate-watch-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("policies")).unwrap();
        dir
    }

    /// Waits for a wake-up; drains the burst that follows.
    fn woke(rx: &mpsc::Receiver<()>) -> bool {
        let got = rx.recv_timeout(Duration::from_secs(5)).is_ok();
        while rx.recv_timeout(Duration::from_millis(100)).is_ok() {}
        got
    }

    const TIER: &str =
        "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: t}\nspec: {priority: 10}\n";

    fn shown(problems: Vec<Problem>) -> Vec<String> {
        problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn emptied_and_unreadable_files_are_refused_until_fixed_or_removed() {
        let root = temp("emptied");
        let dir = root.join("policies");
        let file = dir.join("a.yaml");
        std::fs::write(&file, TIER).unwrap();
        let mut source = Directory::start(&dir, PolicyFilesConfig::default(), || {}).unwrap();
        assert_eq!(source.latest().unwrap().unwrap().objects.len(), 1);

        // Truncated (a writer that then pauses): refused, however long.
        std::fs::File::create(&file).unwrap();
        let refused = shown(source.latest().unwrap_err());
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].starts_with(&format!(
                "{}: held 1 object(s) and now holds none",
                file.display()
            )),
            "{refused:?}"
        );
        assert!(source.latest().is_err(), "still refused");
        // Written back: accepted.
        std::fs::write(&file, TIER).unwrap();
        assert_eq!(source.latest().unwrap().unwrap().objects.len(), 1);

        // A dangling symlink: refused, naming it.
        let link = dir.join("b.yaml");
        std::os::unix::fs::symlink("nowhere.yaml", &link).unwrap();
        let refused = shown(source.latest().unwrap_err());
        assert_eq!(
            refused,
            [format!(
                "{}: symlink to nowhere.yaml: No such file or directory (os error 2)",
                link.display()
            )]
        );
        std::fs::remove_file(&link).unwrap();

        // Removing the file is how its policies go.
        std::fs::remove_file(&file).unwrap();
        assert!(source.latest().unwrap().unwrap().objects.is_empty());
        // A file created empty was never anything else: no problem.
        std::fs::File::create(&file).unwrap();
        assert!(source.latest().unwrap().unwrap().objects.is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn missing_directory_is_a_clear_error() {
        let error = PolicyWatch::start(Path::new("/nonexistent/tollgate-policies"), || {})
            .err()
            .unwrap();
        assert!(matches!(error, WatchError::Missing { .. }));
        assert!(error
            .to_string()
            .starts_with("policy directory /nonexistent/tollgate-policies: "));
    }

    #[test]
    fn follows_the_directory_across_removal_and_rename() {
        let root = temp("follow");
        let dir = root.join("policies");
        let (tx, rx) = mpsc::channel();
        let mut watch = PolicyWatch::start(&dir, move || {
            let _ = tx.send(());
        })
        .unwrap();

        // First, while no other event can be in flight.
        std::fs::write(root.join("sibling.log"), "x").unwrap();
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "siblings in the parent are ignored"
        );
        std::fs::write(dir.join("a.yaml"), "x").unwrap();
        assert!(woke(&rx), "change inside");

        std::fs::remove_dir_all(&dir).unwrap();
        assert!(woke(&rx), "removal");
        assert_eq!(watch.refresh().unwrap(), Refresh::Missing);
        std::fs::create_dir(&dir).unwrap();
        assert!(woke(&rx), "the name comes back");
        assert_eq!(watch.refresh().unwrap(), Refresh::Rewatched);
        std::fs::write(dir.join("b.yaml"), "x").unwrap();
        assert!(woke(&rx), "change inside the new directory");
        assert_eq!(watch.refresh().unwrap(), Refresh::Unchanged);

        std::fs::rename(&dir, root.join("old")).unwrap();
        assert!(woke(&rx), "renamed away");
        assert_eq!(watch.refresh().unwrap(), Refresh::Missing);
        let staged = root.join("staged");
        std::fs::create_dir(&staged).unwrap();
        while rx.recv_timeout(Duration::from_millis(100)).is_ok() {}
        std::fs::rename(&staged, &dir).unwrap();
        assert!(woke(&rx), "renamed into place");
        assert_eq!(watch.refresh().unwrap(), Refresh::Rewatched);
        std::fs::write(dir.join("c.yaml"), "x").unwrap();
        assert!(woke(&rx), "change inside the renamed-in directory");
        std::fs::remove_dir_all(&root).unwrap();
    }
}

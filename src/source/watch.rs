//! The standalone source: [`Directory`] reads a policy directory whole on
//! every reload, and [`PolicyWatch`] watches it (inotify, across the
//! directory being removed or replaced: the parent is watched too). The
//! watch only wakes the run loop; it never reads policies itself.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use super::{load_and_validate, Source};
use crate::model::Snapshot;
use crate::validate::Problem;

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
    watch: PolicyWatch,
}

impl Directory {
    /// Starts watching `dir`, which must exist; `changed` is called (on the
    /// watcher's thread) for every change in or of it.
    pub fn start(dir: &Path, changed: impl Fn() + Send + 'static) -> Result<Directory, WatchError> {
        Ok(Directory {
            dir: dir.to_path_buf(),
            watch: PolicyWatch::start(dir, changed)?,
        })
    }
}

impl Source for Directory {
    /// Re-establishes the watch if the directory was replaced, then reads
    /// and validates it. A directory read whole is always complete.
    fn latest(&mut self) -> Result<Option<Arc<Snapshot>>, Vec<Problem>> {
        match self.watch.refresh() {
            Ok(Refresh::Unchanged) => {}
            Ok(Refresh::Rewatched) => tracing::info!("policy directory watch re-established"),
            Ok(Refresh::Missing) => {
                tracing::warn!("policy directory missing; keeping the ruleset in force")
            }
            Err(error) => tracing::error!(%error, "policy directory not watched"),
        }
        load_and_validate(std::slice::from_ref(&self.dir)).map(|s| Some(Arc::new(s)))
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

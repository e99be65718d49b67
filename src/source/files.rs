//! Reads policy and inventory objects from YAML/JSON files and directories
//! into a [`Snapshot`]. This is the only module of the policy pipeline that
//! touches the filesystem; it decodes documents into typed objects and never
//! judges them (that is [`crate::validate`]'s job).
//!
//! A directory contributes its `*.yaml`, `*.yml` and `*.json` files, sorted
//! by name, not recursing; hidden files and editor leftovers (`foo~`,
//! `#foo#`) are skipped. A file may hold several `---`-separated documents;
//! empty documents are skipped and a `v1` `List` contributes its `items`.
//!
//! Every policy-named entry counts: one that cannot be read (a dangling or
//! looping symlink, no permission, a directory or FIFO called `x.yaml`, an
//! I/O error) is a problem naming it, never skipped. Sizes are bounded
//! ([`PolicyFilesConfig`]) from the metadata before anything is read, and again while
//! reading, so a huge or sparse file is refused without being read.

use std::collections::BTreeMap;
use std::fs::{self, File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::config::PolicyFilesConfig;
use crate::decode::parse_documents_within;
use crate::model::{ObjectRef, Snapshot};
use crate::validate::{validate, Problem};

/// Why a file or directory could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read: {source}")]
    Read { source: io::Error },
    #[error("cannot list directory: {source}")]
    ListDir { source: io::Error },
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error("symlink to {target}: {source}")]
    Symlink { target: PathBuf, source: io::Error },
    #[error("not a regular file but a {kind}")]
    NotAFile { kind: &'static str },
    #[error(
        "{size} bytes, more than the limit of {max} bytes per file (policyFiles.maxFileBytes)"
    )]
    TooLarge { size: u64, max: u64 },
    #[error(
        "grew past the limit of {max} bytes per file while being read (policyFiles.maxFileBytes)"
    )]
    Grew { max: u64 },
    #[error("the policy files hold {total} bytes, more than the limit of {max} bytes in all (policyFiles.maxTotalBytes)")]
    TotalTooLarge { total: u64, max: u64 },
    #[error("held {objects} object(s) and now holds none, as a half-written file would; refused (delete the file to remove its policies)")]
    Emptied { objects: usize },
    #[error("still being written: a policy file changed within the last {quiet_ms} ms for {waited_ms} ms")]
    StillChanging { quiet_ms: u128, waited_ms: u128 },
}

impl SourceError {
    /// The problem of `origin` (a file or the directory) this error is.
    pub fn into_problem(self, origin: &Path) -> Problem {
        Problem {
            origin: origin.to_path_buf(),
            object: ObjectRef::default(),
            field: String::new(),
            reason: self.to_string(),
        }
    }
}

/// [`load_paths_within`] at the default bounds.
pub fn load_paths(paths: &[PathBuf]) -> (Snapshot, Vec<Problem>) {
    load_paths_within(paths, &PolicyFilesConfig::default())
}

/// Reads every path (a file, or a directory of files) into one snapshot, in
/// path order then file order then document order. Problems are collected,
/// not fatal: every readable object is still returned. Files over the
/// limits are not read; when all files together are over
/// [`PolicyFilesConfig::max_total_bytes`], none is.
pub fn load_paths_within(
    paths: &[PathBuf],
    limits: &PolicyFilesConfig,
) -> (Snapshot, Vec<Problem>) {
    let mut snapshot = Snapshot::default();
    let mut problems = Vec::new();
    let mut files = Vec::new();
    for path in paths {
        match fs::metadata(path) {
            Ok(meta) if meta.is_dir() => match list_dir(path) {
                Ok(listed) => {
                    for (file, found) in listed {
                        match found {
                            Ok(meta) => files.push((file, meta)),
                            Err(e) => problems.push(e.into_problem(&file)),
                        }
                    }
                }
                Err(e) => problems.push(e.into_problem(path)),
            },
            Ok(meta) => match regular(meta) {
                Ok(meta) => files.push((path.clone(), meta)),
                Err(e) => problems.push(e.into_problem(path)),
            },
            Err(source) => problems.push(SourceError::Read { source }.into_problem(path)),
        }
    }
    // A file over the limit is refused alone; the others count in all.
    files.retain(|(file, meta)| {
        let fits = meta.len() <= limits.max_file_bytes;
        if !fits {
            let e = SourceError::TooLarge {
                size: meta.len(),
                max: limits.max_file_bytes,
            };
            problems.push(e.into_problem(file));
        }
        fits
    });
    let total: u64 = files.iter().map(|(_, meta)| meta.len()).sum();
    if total > limits.max_total_bytes {
        let origin = match paths {
            [one] => one.as_path(),
            _ => Path::new("policy files"),
        };
        let e = SourceError::TotalTooLarge {
            total,
            max: limits.max_total_bytes,
        };
        problems.push(e.into_problem(origin));
        return (snapshot, problems);
    }
    for (file, _) in files {
        match read_text(&file, limits.max_file_bytes) {
            Ok(text) => {
                let (objects, file_problems) =
                    parse_documents_within(&file, &text, limits.max_objects_per_file);
                snapshot.objects.extend(objects);
                problems.extend(file_problems);
            }
            Err(e) => problems.push(e.into_problem(&file)),
        }
    }
    (snapshot, problems)
}

/// [`load_and_validate_within`] at the default bounds.
pub fn load_and_validate(paths: &[PathBuf]) -> Result<Snapshot, Vec<Problem>> {
    load_and_validate_within(paths, &PolicyFilesConfig::default())
}

/// [`load_paths_within`] followed by [`validate`]: the snapshot only when
/// there is no problem at all, otherwise every problem found.
pub fn load_and_validate_within(
    paths: &[PathBuf],
    limits: &PolicyFilesConfig,
) -> Result<Snapshot, Vec<Problem>> {
    let (snapshot, mut problems) = load_paths_within(paths, limits);
    problems.extend(validate(&snapshot));
    if problems.is_empty() {
        Ok(snapshot)
    } else {
        Err(problems)
    }
}

/// A policy file of a directory with its metadata (symlinks followed), or
/// why it cannot be read.
type Listed = (PathBuf, Result<Metadata, SourceError>);

/// The policy files of `dir`, sorted.
fn list_dir(dir: &Path) -> Result<Vec<Listed>, SourceError> {
    let mut files = Vec::new();
    let entries = fs::read_dir(dir).map_err(|source| SourceError::ListDir { source })?;
    for entry in entries {
        let entry = entry.map_err(|source| SourceError::ListDir { source })?;
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !is_policy_file_name(name) {
            continue;
        }
        // Follows symlinks, so a ConfigMap mount's `..data` links work.
        let found = match fs::metadata(&path) {
            Ok(meta) => regular(meta),
            Err(source) => Err(match fs::read_link(&path) {
                Ok(target) => SourceError::Symlink { target, source },
                Err(_) => SourceError::Read { source },
            }),
        };
        files.push((path, found));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// The metadata of a regular file; anything else cannot hold policies.
fn regular(meta: Metadata) -> Result<Metadata, SourceError> {
    let file_type = meta.file_type();
    let kind = if file_type.is_file() {
        return Ok(meta);
    } else if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "device"
    } else {
        "special file"
    };
    Err(SourceError::NotAFile { kind })
}

/// What identifies one state of a policy file: a file replaced, rewritten,
/// truncated or touched gets another stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub device: u64,
    pub inode: u64,
    pub size: u64,
    /// Modification and status-change times, nanoseconds since the epoch.
    pub modified: i128,
    pub changed: i128,
}

impl Stamp {
    fn of(meta: &Metadata) -> Stamp {
        let nanos = |secs: i64, nsec: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
        Stamp {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.len(),
            modified: nanos(meta.mtime(), meta.mtime_nsec()),
            changed: nanos(meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The state of a policy directory: its own stamp (entries added, removed
/// or renamed change it) and every policy-named entry's, `None` for one
/// that cannot be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stamps {
    pub dir: Option<Stamp>,
    pub files: BTreeMap<PathBuf, Option<Stamp>>,
}

impl Stamps {
    /// The latest status change (nanoseconds since the epoch): the kernel
    /// sets it on every write, truncation, rename and chmod, and no one
    /// can set it back.
    pub fn last_change(&self) -> Option<i128> {
        let files = self.files.values().flatten();
        self.dir.iter().chain(files).map(|s| s.changed).max()
    }

    /// Objects per file of `snapshot`, for every file listed here.
    pub fn objects(&self, snapshot: &Snapshot) -> BTreeMap<PathBuf, usize> {
        let mut counts: BTreeMap<PathBuf, usize> =
            self.files.keys().map(|f| (f.clone(), 0)).collect();
        for sourced in &snapshot.objects {
            if let Some(n) = counts.get_mut(&*sourced.origin) {
                *n += 1;
            }
        }
        counts
    }
}

/// The stamps of `dir` and of its policy files, as [`load_paths`] reads them.
pub fn stamps(dir: &Path) -> Stamps {
    let files = match list_dir(dir) {
        Ok(files) => files
            .into_iter()
            .map(|(file, meta)| (file, meta.ok().as_ref().map(Stamp::of)))
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    Stamps {
        dir: fs::metadata(dir).ok().as_ref().map(Stamp::of),
        files,
    }
}

/// The files that held objects at the last load (`before`) and hold none
/// now (`now`, as [`Stamps::objects`] counts them): one problem each.
/// A file removed is not in `now`; that is how policies are removed. Pure.
pub fn emptied(before: &BTreeMap<PathBuf, usize>, now: &BTreeMap<PathBuf, usize>) -> Vec<Problem> {
    before
        .iter()
        .filter(|(file, held)| **held > 0 && now.get(*file) == Some(&0))
        .map(|(file, held)| SourceError::Emptied { objects: *held }.into_problem(file))
        .collect()
}

/// `*.yaml`, `*.yml` or `*.json`, not hidden, not an editor backup or lock.
pub(crate) fn is_policy_file_name(name: &str) -> bool {
    if name.starts_with('.') || name.starts_with('#') || name.ends_with('~') {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    [".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| lower.len() > ext.len() && lower.ends_with(ext))
}

/// Reads a file whose metadata showed it at most `max` bytes: the opened
/// file is checked again, and the read stops once more than `max` bytes
/// came (it may grow meanwhile).
fn read_text(file: &Path, max: u64) -> Result<String, SourceError> {
    let read = |source| SourceError::Read { source };
    // Non-blocking, so a FIFO swapped in after the check cannot hang the
    // open; the opened file is checked again.
    let opened = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
        .map_err(read)?;
    let meta = regular(opened.metadata().map_err(read)?)?;
    if meta.len() > max {
        return Err(SourceError::TooLarge {
            size: meta.len(),
            max,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    opened.take(max + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > max {
        return Err(SourceError::Grew { max });
    }
    String::from_utf8(bytes).map_err(|_| SourceError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    const TIER: &str = "apiVersion: crd.antrea.io/v1beta1
kind: Tier
metadata:
  name: mytier
spec:
  priority: 10
";

    fn write(dir: &Path, name: &str, text: &str) {
        fs::write(dir.join(name), text).unwrap();
    }

    fn names(snapshot: &Snapshot) -> Vec<String> {
        snapshot.iter().map(|o| o.metadata().name.clone()).collect()
    }

    #[test]
    fn directory_files_are_read_sorted_and_filtered() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "b.yaml", &TIER.replace("mytier", "b"));
        write(d, "a.yml", &TIER.replace("mytier", "a"));
        write(
            d,
            "c.json",
            r#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "c"}}"#,
        );
        write(d, ".hidden.yaml", &TIER.replace("mytier", "hidden"));
        write(d, "d.yaml~", &TIER.replace("mytier", "backup"));
        write(d, "#e.yaml#", &TIER.replace("mytier", "autosave"));
        write(d, "notes.txt", "not yaml: [");
        fs::create_dir(d.join("sub")).unwrap();
        write(&d.join("sub"), "x.yaml", &TIER.replace("mytier", "nested"));
        let (snapshot, problems) = load_paths(&[d.to_path_buf()]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(names(&snapshot), ["a", "b", "c"]);
        assert_eq!(*snapshot.objects[0].origin, *d.join("a.yml"));
    }

    /// The one problem of loading `dir`, shown.
    fn only_problem(dir: &Path, limits: &PolicyFilesConfig) -> String {
        let (_, problems) = load_paths_within(&[dir.to_path_buf()], limits);
        assert_eq!(problems.len(), 1, "{problems:?}");
        problems[0].to_string()
    }

    #[test]
    fn unreadable_policy_entries_are_problems_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(d, "good.yaml", TIER);
        std::os::unix::fs::symlink("gone.yaml", d.join("dangling.yaml")).unwrap();
        std::os::unix::fs::symlink("loop.yaml", d.join("loop.yaml")).unwrap();
        fs::create_dir(d.join("dir.yaml")).unwrap();
        // std cannot make a FIFO; mkfifo(1) can.
        let made = std::process::Command::new("mkfifo")
            .arg(d.join("fifo.yaml"))
            .status()
            .unwrap();
        assert!(made.success());
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.yaml")).unwrap();
        let (snapshot, problems) = load_paths(&[d.to_path_buf()]);
        assert_eq!(names(&snapshot), ["mytier"], "readable files still load");
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let at = |name: &str| d.join(name).display().to_string();
        assert_eq!(
            shown,
            [
                format!(
                    "{}: symlink to gone.yaml: No such file or directory (os error 2)",
                    at("dangling.yaml")
                ),
                format!("{}: not a regular file but a directory", at("dir.yaml")),
                format!("{}: not a regular file but a FIFO", at("fifo.yaml")),
                format!(
                    "{}: symlink to loop.yaml: Too many levels of symbolic links (os error 40)",
                    at("loop.yaml")
                ),
                format!("{}: not a regular file but a device", at("zero.yaml")),
            ]
        );
    }

    #[test]
    fn a_huge_sparse_file_is_refused_without_being_read() {
        let dir = tempfile::tempdir().unwrap();
        let huge = fs::File::create(dir.path().join("huge.yaml")).unwrap();
        huge.set_len(2 << 30).unwrap();
        let shown = only_problem(dir.path(), &PolicyFilesConfig::default());
        assert!(
            shown.ends_with(
                "huge.yaml: 2147483648 bytes, more than the limit of 4194304 bytes per file (policyFiles.maxFileBytes)"
            ),
            "{shown}"
        );
    }

    #[test]
    fn a_file_that_grew_after_it_was_listed_is_checked_again_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.yaml");
        fs::write(&file, "0123456789").unwrap();
        let shown = read_text(&file, 5).unwrap_err().to_string();
        assert_eq!(
            shown,
            "10 bytes, more than the limit of 5 bytes per file (policyFiles.maxFileBytes)"
        );
        assert_eq!(read_text(&file, 10).unwrap(), "0123456789");
    }

    #[test]
    fn the_total_size_is_bounded_before_any_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.yaml", TIER);
        write(dir.path(), "b.yaml", TIER);
        let limits = PolicyFilesConfig {
            max_total_bytes: TIER.len() as u64 * 2 - 1,
            ..PolicyFilesConfig::default()
        };
        let (snapshot, problems) = load_paths_within(&[dir.path().to_path_buf()], &limits);
        assert!(snapshot.objects.is_empty(), "nothing read");
        assert_eq!(
            problems[0].to_string(),
            format!(
                "{}: the policy files hold {} bytes, more than the limit of {} bytes in all (policyFiles.maxTotalBytes)",
                dir.path().display(),
                TIER.len() * 2,
                TIER.len() * 2 - 1
            )
        );
    }

    #[test]
    fn stamps_change_with_every_rewrite_and_emptied_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.yaml", TIER);
        write(dir.path(), "b.yaml", TIER.replace("mytier", "b").as_str());
        let first = stamps(dir.path());
        assert_eq!(first.files.len(), 2);
        assert_eq!(stamps(dir.path()), first, "reading changes nothing");
        let (snapshot, _) = load_paths(&[dir.path().to_path_buf()]);
        let before = first.objects(&snapshot);
        assert_eq!(before.values().collect::<Vec<_>>(), [&1, &1]);

        fs::File::create(dir.path().join("a.yaml")).unwrap(); // truncates
        let truncated = stamps(dir.path());
        assert_ne!(truncated, first);
        assert!(truncated.last_change() >= first.last_change());
        fs::remove_file(dir.path().join("b.yaml")).unwrap();
        let now = stamps(dir.path());
        let (snapshot, problems) = load_paths(&[dir.path().to_path_buf()]);
        assert!(problems.is_empty(), "an empty file alone is no problem");
        let problems = emptied(&before, &now.objects(&snapshot));
        assert_eq!(
            problems.len(),
            1,
            "a removed file is no problem: {problems:?}"
        );
        assert_eq!(
            problems[0].to_string(),
            format!(
                "{}: held 1 object(s) and now holds none, as a half-written file would; refused (delete the file to remove its policies)",
                dir.path().join("a.yaml").display()
            )
        );
    }

    #[test]
    fn a_file_path_is_read_whatever_its_extension() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policy.txt");
        fs::write(&file, TIER).unwrap();
        let (snapshot, problems) = load_paths(&[file]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(names(&snapshot), ["mytier"]);
    }

    #[test]
    fn yaml_syntax_errors_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "bad.yaml",
            "apiVersion: v1\nkind: [Pod\nmetadata: {}\n",
        );
        write(dir.path(), "good.yaml", TIER);
        let (snapshot, problems) = load_paths(&[dir.path().to_path_buf()]);
        assert_eq!(names(&snapshot), ["mytier"], "other files still load");
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert_eq!(p.origin, dir.path().join("bad.yaml"));
        assert!(p.field.starts_with("line "), "{p}");
        assert!(p.reason.starts_with("YAML syntax: "), "{p}");
        assert!(
            !p.reason.contains(" at line "),
            "position is in the field only: {p}"
        );
    }

    #[test]
    fn missing_path_and_non_utf8_files_are_problems() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "bin.yaml", "");
        fs::write(dir.path().join("bin.yaml"), [0xff, 0xfe, 0x00]).unwrap();
        let missing = dir.path().join("missing.yaml");
        let (_, problems) = load_paths(&[missing.clone(), dir.path().to_path_buf()]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0].origin, missing);
        assert!(problems[0].reason.starts_with("cannot read: "));
        assert_eq!(problems[1].reason, "not UTF-8 text");
    }

    #[test]
    fn load_and_validate_returns_validation_problems_too() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "t.yaml",
            &TIER.replace("priority: 10", "priority: 100"),
        );
        let problems = load_and_validate(&[dir.path().to_path_buf()]).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].reason.contains("securityops"),
            "{}",
            problems[0]
        );
        write(dir.path(), "t.yaml", TIER);
        let snapshot = load_and_validate(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(names(&snapshot), ["mytier"]);
    }
}

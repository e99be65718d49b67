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
//! ([`Limits`]) from the metadata before anything is read, and again while
//! reading, so a huge or sparse file is refused without being read.

use std::collections::BTreeMap;
use std::fs::{self, File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::model::{DecodeError, Kind, Object, ObjectRef, Snapshot, Sourced};
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
    #[error("{size} bytes, more than the limit of {max} bytes per file")]
    TooLarge { size: u64, max: u64 },
    #[error("grew past the limit of {max} bytes per file while being read")]
    Grew { max: u64 },
    #[error("the policy files hold {total} bytes, more than the limit of {max} bytes in all")]
    TotalTooLarge { total: u64, max: u64 },
    #[error("more than {max} objects in one file")]
    TooManyObjects { max: usize },
    #[error("YAML syntax: {message}")]
    Syntax {
        message: String,
        line: Option<u64>,
        column: Option<u64>,
    },
    #[error("held {objects} object(s) and now holds none, as a half-written file would; refused (delete the file to remove its policies)")]
    Emptied { objects: usize },
    #[error("still being written: a policy file changed within the last {quiet_ms} ms for {waited_ms} ms")]
    StillChanging { quiet_ms: u128, waited_ms: u128 },
}

impl SourceError {
    /// The problem of `origin` (a file or the directory) this error is.
    pub fn into_problem(self, origin: &Path) -> Problem {
        let field = match &self {
            SourceError::Syntax {
                line: Some(line),
                column,
                ..
            } => match column {
                Some(column) => format!("line {line}, column {column}"),
                None => format!("line {line}"),
            },
            _ => String::new(),
        };
        Problem {
            origin: origin.to_path_buf(),
            object: ObjectRef::default(),
            field,
            reason: self.to_string(),
        }
    }
}

/// Bounds on what policy files may hold, checked before a file is parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest file read, in bytes.
    pub file_bytes: u64,
    /// Largest sum of the sizes of the files of one load, in bytes.
    pub total_bytes: u64,
    /// Most objects one file may hold (documents, and items of a `List`).
    pub objects_per_file: usize,
}

/// Default [`Limits::file_bytes`]: 4 MiB. The API server refuses objects
/// above ~1.5 MiB (etcd's request limit), so this holds the largest single
/// object with room, or thousands of ordinary policies.
pub const DEFAULT_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Default [`Limits::total_bytes`]: 16 MiB, four full files, some 40,000
/// ordinary policies (each file is also held to the parser's budget of
/// 250,000 YAML nodes, some 6,000 ordinary policies).
pub const DEFAULT_TOTAL_BYTES: u64 = 16 * 1024 * 1024;
/// Default [`Limits::objects_per_file`].
pub const DEFAULT_OBJECTS_PER_FILE: usize = 10_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            file_bytes: DEFAULT_FILE_BYTES,
            total_bytes: DEFAULT_TOTAL_BYTES,
            objects_per_file: DEFAULT_OBJECTS_PER_FILE,
        }
    }
}

/// [`load_paths_within`] at the default [`Limits`].
pub fn load_paths(paths: &[PathBuf]) -> (Snapshot, Vec<Problem>) {
    load_paths_within(paths, &Limits::default())
}

/// Reads every path (a file, or a directory of files) into one snapshot, in
/// path order then file order then document order. Problems are collected,
/// not fatal: every readable object is still returned. Files over the
/// limits are not read; when all files together are over
/// [`Limits::total_bytes`], none is.
pub fn load_paths_within(paths: &[PathBuf], limits: &Limits) -> (Snapshot, Vec<Problem>) {
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
        let fits = meta.len() <= limits.file_bytes;
        if !fits {
            let e = SourceError::TooLarge {
                size: meta.len(),
                max: limits.file_bytes,
            };
            problems.push(e.into_problem(file));
        }
        fits
    });
    let total: u64 = files.iter().map(|(_, meta)| meta.len()).sum();
    if total > limits.total_bytes {
        let origin = match paths {
            [one] => one.as_path(),
            _ => Path::new("policy files"),
        };
        let e = SourceError::TotalTooLarge {
            total,
            max: limits.total_bytes,
        };
        problems.push(e.into_problem(origin));
        return (snapshot, problems);
    }
    for (file, _) in files {
        match read_text(&file, limits.file_bytes) {
            Ok(text) => {
                let (objects, file_problems) = parse_documents_within(&file, &text, limits);
                snapshot.objects.extend(objects);
                problems.extend(file_problems);
            }
            Err(e) => problems.push(e.into_problem(&file)),
        }
    }
    (snapshot, problems)
}

/// [`load_paths`] followed by [`validate`]: the snapshot only when there is
/// no problem at all, otherwise every problem found.
pub fn load_and_validate(paths: &[PathBuf]) -> Result<Snapshot, Vec<Problem>> {
    let (snapshot, mut problems) = load_paths(paths);
    problems.extend(validate(&snapshot));
    if problems.is_empty() {
        Ok(snapshot)
    } else {
        Err(problems)
    }
}

/// [`parse_documents_within`] at the default [`Limits`].
pub fn parse_documents(origin: &Path, text: &str) -> (Vec<Sourced>, Vec<Problem>) {
    parse_documents_within(origin, text, &Limits::default())
}

/// Decodes the documents of one file's text, at most
/// [`Limits::objects_per_file`] objects. Pure; `origin` only labels the
/// results.
pub fn parse_documents_within(
    origin: &Path,
    text: &str,
    limits: &Limits,
) -> (Vec<Sourced>, Vec<Problem>) {
    // YAML 1.2 booleans only: a Namespace called `no` or a label value `on`
    // stays a string. Duplicate keys are errors (the library default).
    // The library's hostile-input budget (depth 64, 250,000 nodes, 1M
    // events counting replayed aliases, alias/anchor ratio) stays; its
    // 1,024 documents per file becomes the object limit.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = limits.objects_per_file;
    let options = serde_saphyr::options! {
        strict_booleans: true,
        budget: Some(budget),
    };
    let documents = match serde_saphyr::from_multiple_with_options::<Value>(text, options) {
        Ok(documents) => documents,
        Err(e) => return (Vec::new(), vec![syntax_error(&e).into_problem(origin)]),
    };
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    let mut index = 0;
    for document in documents {
        if document.is_null() {
            continue;
        }
        for value in expand_list(document) {
            index += 1;
            if index > limits.objects_per_file {
                let e = SourceError::TooManyObjects {
                    max: limits.objects_per_file,
                };
                return (Vec::new(), vec![e.into_problem(origin)]);
            }
            let object_ref = readable_ref(&value, index);
            match Object::from_value(value) {
                Ok(object) => objects.push(Sourced {
                    origin: origin.to_path_buf(),
                    object,
                }),
                Err(e) => problems.push(decode_problem(origin, object_ref, e)),
            }
        }
    }
    (objects, problems)
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
            if let Some(n) = counts.get_mut(&sourced.origin) {
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
fn is_policy_file_name(name: &str) -> bool {
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

fn syntax_error(e: &serde_saphyr::Error) -> SourceError {
    let location = e.location();
    let options = serde_saphyr::render_options! {
        snippets: serde_saphyr::SnippetMode::Off,
    };
    let mut message = e.without_snippet().render_with_options(options);
    // The position goes into the problem's field; drop it from the text.
    if let Some(l) = location {
        let suffix = format!(" at line {}, column {}", l.line(), l.column());
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
    }
    SourceError::Syntax {
        message,
        line: location.map(|l| l.line()),
        column: location.map(|l| l.column()),
    }
}

/// A `v1` `List` (what `kubectl get -o yaml` prints) becomes its items.
fn expand_list(document: Value) -> Vec<Value> {
    let is_list = document.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && document.get("kind").and_then(Value::as_str) == Some("List");
    match document {
        Value::Object(mut map) if is_list => match map.remove("items") {
            Some(Value::Array(items)) => items,
            Some(other) => vec![other],
            None => Vec::new(),
        },
        other => vec![other],
    }
}

/// As much of `Kind namespace/name` as can be read from an undecodable
/// document; an unnamed document is called `#N` (its position in the file).
fn readable_ref(value: &Value, index: usize) -> ObjectRef {
    let kind = match (
        value.get("apiVersion").and_then(Value::as_str),
        value.get("kind").and_then(Value::as_str),
    ) {
        (Some(api_version), Some(kind)) => Kind::from_type(api_version, kind),
        _ => None,
    };
    let metadata = value.get("metadata");
    let name = metadata
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map_or_else(|| format!("#{index}"), str::to_string);
    let namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let namespace = match kind {
        Some(k) if k.is_namespaced() => Some(namespace.unwrap_or_else(|| "default".into())),
        Some(_) => None,
        None => namespace,
    };
    ObjectRef {
        kind,
        namespace,
        name,
    }
}

fn decode_problem(origin: &Path, object: ObjectRef, e: DecodeError) -> Problem {
    let (field, reason) = match e {
        DecodeError::MissingType(field) => (field.to_string(), "missing or not a string".into()),
        DecodeError::UnknownKind { api_version, kind } => (
            "kind".to_string(),
            format!("{api_version} {kind} is not a kind tollgate reads"),
        ),
        DecodeError::Field { path, reason } => (path, reason),
    };
    Problem {
        origin: origin.to_path_buf(),
        object,
        field,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::model::Kind;

    const TIER: &str = "apiVersion: crd.antrea.io/v1beta1
kind: Tier
metadata:
  name: mytier
spec:
  priority: 10
";

    const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
status:
  podIP: 10.0.0.5
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
        assert_eq!(snapshot.objects[0].origin, d.join("a.yml"));
    }

    /// The one problem of loading `dir`, shown.
    fn only_problem(dir: &Path, limits: &Limits) -> String {
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
        let shown = only_problem(dir.path(), &Limits::default());
        assert!(
            shown.ends_with(
                "huge.yaml: 2147483648 bytes, more than the limit of 4194304 bytes per file"
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
        assert_eq!(shown, "10 bytes, more than the limit of 5 bytes per file");
        assert_eq!(read_text(&file, 10).unwrap(), "0123456789");
    }

    #[test]
    fn the_total_size_is_bounded_before_any_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.yaml", TIER);
        write(dir.path(), "b.yaml", TIER);
        let limits = Limits {
            total_bytes: TIER.len() as u64 * 2 - 1,
            ..Limits::default()
        };
        let (snapshot, problems) = load_paths_within(&[dir.path().to_path_buf()], &limits);
        assert!(snapshot.objects.is_empty(), "nothing read");
        assert_eq!(
            problems[0].to_string(),
            format!(
                "{}: the policy files hold {} bytes, more than the limit of {} bytes in all",
                dir.path().display(),
                TIER.len() * 2,
                TIER.len() * 2 - 1
            )
        );
    }

    #[test]
    fn objects_per_file_are_bounded_lists_included() {
        let limits = Limits {
            objects_per_file: 2,
            ..Limits::default()
        };
        let two = format!("{TIER}---\n{POD}");
        let (objects, problems) = parse_documents_within(Path::new("two.yaml"), &two, &limits);
        assert_eq!((objects.len(), problems.len()), (2, 0));
        let three = format!("{two}---\n{TIER}");
        let (objects, problems) = parse_documents_within(Path::new("t.yaml"), &three, &limits);
        assert!(objects.is_empty());
        assert!(problems[0].reason.contains("documents"), "{}", problems[0]);
        let list = "apiVersion: v1\nkind: List\nitems:\n".to_string()
            + &"- {apiVersion: v1, kind: Namespace, metadata: {name: n}}\n".repeat(3);
        let (objects, problems) = parse_documents_within(Path::new("l.yaml"), &list, &limits);
        assert!(objects.is_empty());
        assert_eq!(
            problems[0].to_string(),
            "l.yaml: more than 2 objects in one file"
        );
    }

    #[test]
    fn alias_bombs_and_deep_nesting_stop_at_the_budget() {
        // Nine levels of ten aliases: a billion leaves if expanded.
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..10 {
            let refs = vec![format!("*a{}", level - 1); 10].join(", ");
            bomb += &format!("a{level}: &a{level} [{refs}]\n");
        }
        // The budget's error is the proof that expansion stopped (without
        // it this would not finish); no wall-clock bound, which a loaded
        // machine exceeded (issue 29).
        let (objects, problems) = parse_documents(Path::new("bomb.yaml"), &bomb);
        assert!(objects.is_empty());
        assert!(
            problems[0].reason.starts_with("YAML syntax: "),
            "{}",
            problems[0]
        );
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let (_, problems) = parse_documents(Path::new("deep.yaml"), &deep);
        assert!(
            problems[0].reason.starts_with("YAML syntax: "),
            "{}",
            problems[0]
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
    fn multi_document_files_skip_empty_documents() {
        let text = format!("---\n# only a comment\n---\n{TIER}---\n---\n{POD}...\n");
        let (objects, problems) = parse_documents(Path::new("m.yaml"), &text);
        assert!(problems.is_empty(), "{problems:?}");
        let kinds: Vec<Kind> = objects.iter().map(|s| s.object.kind()).collect();
        assert_eq!(kinds, [Kind::Tier, Kind::Pod]);
    }

    #[test]
    fn a_v1_list_contributes_its_items() {
        let text = "apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: one}}
- {apiVersion: v1, kind: Namespace, metadata: {name: two}}
";
        let (objects, problems) = parse_documents(Path::new("l.yaml"), text);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(objects.len(), 2);
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
    fn unknown_kind_is_a_problem_naming_the_object() {
        let text =
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\n";
        let (objects, problems) = parse_documents(Path::new("k.yaml"), text);
        assert!(objects.is_empty());
        assert_eq!(
            problems[0].to_string(),
            "k.yaml: document shop/web: kind: apps/v1 Deployment is not a kind tollgate reads"
        );
    }

    #[test]
    fn unknown_field_is_a_problem_with_its_path() {
        let text = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 1
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Allow
  - action: Drop
    form: [{podSelector: {}}]
";
        let (objects, problems) = parse_documents(Path::new("u.yaml"), text);
        assert!(objects.is_empty());
        assert_eq!(problems.len(), 1);
        let p = &problems[0];
        assert_eq!(p.object.kind, Some(Kind::ClusterNetworkPolicy));
        assert_eq!(p.object.name, "p");
        assert_eq!(p.field, "spec.ingress[1].form");
        assert!(p.reason.contains("unknown field `form`"), "{p}");
    }

    #[test]
    fn bad_value_names_the_field_and_unnamed_documents_get_their_position() {
        let text = format!("{TIER}---\napiVersion: v1\nkind: Namespace\nmetadata: {{labels: 3}}\n");
        let (objects, problems) = parse_documents(Path::new("v.yaml"), &text);
        assert_eq!(objects.len(), 1);
        assert_eq!(problems.len(), 1);
        let shown = problems[0].to_string();
        assert!(
            shown.starts_with("v.yaml: Namespace #2: metadata.labels: "),
            "{shown}"
        );
    }

    #[test]
    fn yaml_1_1_booleans_stay_strings() {
        let text =
            "apiVersion: v1\nkind: Pod\nmetadata: {name: y, namespace: no, labels: {on: off}}\n";
        let (objects, problems) = parse_documents(Path::new("b.yaml"), text);
        assert!(problems.is_empty(), "{problems:?}");
        let meta = objects[0].object.metadata();
        assert_eq!(
            (meta.name.as_str(), meta.namespace.as_deref()),
            ("y", Some("no"))
        );
        assert_eq!(meta.labels.get("on").map(String::as_str), Some("off"));
    }

    #[test]
    fn duplicate_keys_are_syntax_errors() {
        let text = "apiVersion: v1\nkind: Pod\nkind: Node\nmetadata: {name: a}\n";
        let (objects, problems) = parse_documents(Path::new("d.yaml"), text);
        assert!(objects.is_empty());
        assert!(problems[0].reason.contains("duplicate"), "{}", problems[0]);
    }

    #[test]
    fn missing_api_version_is_reported() {
        let (_, problems) =
            parse_documents(Path::new("x.yaml"), "kind: Pod\nmetadata: {name: a}\n");
        assert_eq!(problems[0].field, "apiVersion");
        assert_eq!(problems[0].reason, "missing or not a string");
    }

    #[test]
    fn hex_igmp_type_parses_as_an_integer() {
        let text = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: igmp}
spec:
  priority: 5
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Drop
    protocols:
    - igmp: {igmpType: 0x11, groupAddress: 224.0.0.1}
";
        let (objects, problems) = parse_documents(Path::new("h.yaml"), text);
        assert!(problems.is_empty(), "{problems:?}");
        let Object::ClusterNetworkPolicy(policy) = &objects[0].object else {
            panic!("not an ACNP");
        };
        let igmp = policy.spec.ingress[0].protocols[0].igmp.as_ref().unwrap();
        assert_eq!(igmp.igmp_type, Some(0x11));
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

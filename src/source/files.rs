//! Reads policy and inventory objects from YAML/JSON files and directories
//! into a [`Snapshot`]. This is the only module of the policy pipeline that
//! touches the filesystem; it decodes documents into typed objects and never
//! judges them (that is [`crate::validate`]'s job).
//!
//! A directory contributes its `*.yaml`, `*.yml` and `*.json` files, sorted
//! by name, not recursing; hidden files and editor leftovers (`foo~`,
//! `#foo#`) are skipped. A file may hold several `---`-separated documents;
//! empty documents are skipped and a `v1` `List` contributes its `items`.

use std::fs;
use std::io;
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
    #[error("YAML syntax: {message}")]
    Syntax {
        message: String,
        line: Option<u64>,
        column: Option<u64>,
    },
}

impl SourceError {
    fn into_problem(self, origin: &Path) -> Problem {
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

/// Reads every path (a file, or a directory of files) into one snapshot, in
/// path order then file order then document order. Problems are collected,
/// not fatal: every readable object is still returned.
pub fn load_paths(paths: &[PathBuf]) -> (Snapshot, Vec<Problem>) {
    let mut snapshot = Snapshot::default();
    let mut problems = Vec::new();
    for path in paths {
        let files = match fs::metadata(path) {
            Ok(meta) if meta.is_dir() => match list_dir(path) {
                Ok(files) => files,
                Err(e) => {
                    problems.push(e.into_problem(path));
                    continue;
                }
            },
            Ok(_) => vec![path.clone()],
            Err(source) => {
                problems.push(SourceError::Read { source }.into_problem(path));
                continue;
            }
        };
        for file in files {
            match read_text(&file) {
                Ok(text) => {
                    let (objects, file_problems) = parse_documents(&file, &text);
                    snapshot.objects.extend(objects);
                    problems.extend(file_problems);
                }
                Err(e) => problems.push(e.into_problem(&file)),
            }
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

/// Most documents one file may hold.
pub const MAX_DOCUMENTS_PER_FILE: usize = 100_000;

/// Decodes the documents of one file's text. Pure; `origin` only labels the
/// results.
pub fn parse_documents(origin: &Path, text: &str) -> (Vec<Sourced>, Vec<Problem>) {
    // YAML 1.2 booleans only: a Namespace called `no` or a label value `on`
    // stays a string. Duplicate keys are errors (the library default).
    // The library's default budget stops at 1,024 documents per file; a
    // generated policy file may hold more. Other hostile-input limits stay.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = MAX_DOCUMENTS_PER_FILE;
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

fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, SourceError> {
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
        if fs::metadata(&path).map(|m| m.is_file()).unwrap_or(false) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
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

fn read_text(file: &Path) -> Result<String, SourceError> {
    let bytes = fs::read(file).map_err(|source| SourceError::Read { source })?;
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
        fs::create_dir(d.join("sub.yaml")).unwrap();
        write(
            &d.join("sub.yaml"),
            "x.yaml",
            &TIER.replace("mytier", "nested"),
        );
        let (snapshot, problems) = load_paths(&[d.to_path_buf()]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(names(&snapshot), ["a", "b", "c"]);
        assert_eq!(snapshot.objects[0].origin, d.join("a.yml"));
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

//! YAML and JSON documents to typed objects: one file's text to the
//! [`Sourced`] objects it holds and a [`Problem`] for each document that
//! cannot be decoded. Never reads a file (the agent's `source::files`
//! does, and hands the text here) and never judges an object (that is
//! [`crate::validate`]'s job).
//!
//! A text may hold several `---`-separated documents; empty documents are
//! skipped and a `v1` `List` contributes its `items`. YAML is read with
//! 1.2 booleans and the parser's hostile-input budget.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::model::{DecodeError, Kind, Object, ObjectRef, Sourced};
use crate::validate::Problem;

#[cfg(test)]
mod tests;

/// Default most objects one file may hold (`policyFiles.maxObjectsPerFile`).
pub const DEFAULT_OBJECTS_PER_FILE: usize = 10_000;

/// Why a whole text could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The message, then (when the position is known) the line it points
    /// at with a caret under the column.
    #[error("YAML syntax: {message}{excerpt}")]
    Syntax {
        message: String,
        line: Option<u64>,
        column: Option<u64>,
        excerpt: String,
    },
    #[error("more than {max} objects in one file (the limit is policyFiles.maxObjectsPerFile)")]
    TooManyObjects { max: usize },
}

impl DocumentError {
    /// The problem of `origin` this error is: a syntax error's position is
    /// its field.
    pub fn into_problem(self, origin: &Path) -> Problem {
        let field = match &self {
            DocumentError::Syntax {
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

/// [`parse_documents_within`] at [`DEFAULT_OBJECTS_PER_FILE`].
pub fn parse_documents(origin: &Path, text: &str) -> (Vec<Sourced>, Vec<Problem>) {
    parse_documents_within(origin, text, DEFAULT_OBJECTS_PER_FILE)
}

/// Decodes the documents of one file's text, at most `max_objects`
/// objects (documents, and items of a `List`). `origin` only labels the
/// results.
pub fn parse_documents_within(
    origin: &Path,
    text: &str,
    max_objects: usize,
) -> (Vec<Sourced>, Vec<Problem>) {
    // YAML 1.2 booleans only: a Namespace called `no` or a label value `on`
    // stays a string. Duplicate keys are errors (the library default).
    // The library's hostile-input budget (depth 64, 250,000 nodes, 1M
    // events counting replayed aliases, alias/anchor ratio) stays; its
    // 1,024 documents per file becomes the object limit.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = max_objects;
    let options = serde_saphyr::options! {
        strict_booleans: true,
        budget: Some(budget),
    };
    let documents = match serde_saphyr::from_multiple_with_options::<Value>(text, options) {
        Ok(documents) => documents,
        Err(e) => {
            return (
                Vec::new(),
                vec![syntax_error(&e, text).into_problem(origin)],
            )
        }
    };
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    let mut index = 0;
    let shared: Arc<Path> = origin.into();
    for document in documents {
        if document.is_null() {
            continue;
        }
        for value in expand_list(document) {
            index += 1;
            if index > max_objects {
                let e = DocumentError::TooManyObjects { max: max_objects };
                return (Vec::new(), vec![e.into_problem(origin)]);
            }
            let object_ref = readable_ref(&value, index);
            match Object::from_value(value) {
                Ok(object) => objects.push(Sourced::new(shared.clone(), object)),
                Err(e) => problems.push(decode_problem(origin, object_ref, e)),
            }
        }
    }
    (objects, problems)
}

fn syntax_error(e: &serde_saphyr::Error, text: &str) -> DocumentError {
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
    let line = location.map(|l| l.line());
    let column = location.map(|l| l.column());
    DocumentError::Syntax {
        message,
        line,
        column,
        excerpt: excerpt(text, line, column),
    }
}

/// The line `line` (1-based) of `text` with a caret under `column`
/// (1-based), on two lines of their own, as compilers show errors:
///
/// ```text
///    5 |   labels: {app: web
///      |           ^
/// ```
///
/// Empty when the line is unknown or not in the text. Tabs are kept so
/// the caret lines up; a very long line is cut around the column.
fn excerpt(text: &str, line: Option<u64>, column: Option<u64>) -> String {
    const WIDTH: usize = 100;
    let Some(number) = line.filter(|&l| l > 0) else {
        return String::new();
    };
    let Some(source) = text.lines().nth(number as usize - 1) else {
        return String::new();
    };
    let chars: Vec<char> = source.chars().collect();
    let column = column
        .map_or(0, |c| (c.max(1) - 1) as usize)
        .min(chars.len());
    let start = column.saturating_sub(WIDTH / 2);
    let end = (start + WIDTH).min(chars.len());
    let shown: String = chars[start..end].iter().collect();
    let pad: String = chars[start..column]
        .iter()
        .map(|c| if *c == '\t' { '\t' } else { ' ' })
        .collect();
    let gutter = number.to_string().len();
    format!("\n{number:>gutter$} | {shown}\n{:gutter$} | {pad}^", "")
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
            match Kind::unknown_type_hint(&kind) {
                Some(hint) => format!("{api_version} {kind} is not a kind tollgate reads: {hint}"),
                None => format!("{api_version} {kind} is not a kind tollgate reads"),
            },
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

//! `tollgate diff` and `tollgate get matrix`: where each side is read —
//! a policy directory, a git revision of one (`git:REV:PATH`, read with
//! the system's `git`, no checkout), or the running agent (`live`, its
//! snapshot over the status socket) — and the inventory swapped in with
//! `--inventory`. The comparison and the matrix are `review`'s (core);
//! rendering is `review_render.rs`'s. Nothing here decides a verdict.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use super::review_render::{render_diff, render_matrix, render_matrix_diff};
use super::{ask, unexpected, CommandError, NodeIdentity};
use crate::cli::{DiffArgs, FailOn, MatrixArgs, NodeArgs};
use crate::compile::LocalNode;
use crate::decode::parse_documents;
use crate::model::{Object, Snapshot, Sourced};
use crate::review::{self, ChangeKind, MatrixPort, Side};
use crate::source::files::is_policy_file_name;
use crate::status::{Request, Response, SnapshotReport};
use crate::validate::Problem;

/// Where one side of a review is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Directory(PathBuf),
    /// A directory (or file) of a git repository at a revision.
    Git {
        revision: String,
        path: String,
    },
    /// The running agent.
    Live,
}

impl Input {
    /// `live`, `git:REV:PATH` (PATH relative to the working directory's
    /// repository root; empty: the root), or a directory.
    pub fn parse(text: &str) -> Result<Input, CommandError> {
        if text == "live" {
            return Ok(Input::Live);
        }
        if let Some(rest) = text.strip_prefix("git:") {
            let (revision, path) = rest.split_once(':').ok_or_else(|| {
                CommandError::Usage(format!("{text:?}: write a git revision as git:REV:PATH"))
            })?;
            if revision.is_empty() {
                return Err(CommandError::Usage(format!("{text:?}: no revision")));
            }
            return Ok(Input::Git {
                revision: revision.to_string(),
                path: path.trim_end_matches('/').to_string(),
            });
        }
        Ok(Input::Directory(PathBuf::from(text)))
    }
}

/// A side's objects, not validated yet, and the agent's Node when read
/// from it.
struct Read {
    objects: Vec<Sourced>,
    node: Option<LocalNode>,
}

/// Reads `input`: its objects, or every problem decoding them.
fn read(input: &Input, socket: &Path) -> Result<Read, CommandError> {
    let (objects, problems, node) = match input {
        Input::Directory(dir) => {
            if !dir.is_dir() {
                return Err(CommandError::Usage(format!(
                    "{}: not a directory (a side is a directory, git:REV:PATH or live)",
                    dir.display()
                )));
            }
            let (snapshot, problems) = crate::source::load_paths(std::slice::from_ref(dir));
            (snapshot.objects, problems, None)
        }
        Input::Git { revision, path } => {
            let mut objects = Vec::new();
            let mut problems = Vec::new();
            for file in git_files(revision, path)? {
                let text = git(&["show", &format!("{revision}:{file}")])?;
                let origin = PathBuf::from(format!("git:{revision}:{file}"));
                let (o, p) = parse_documents(&origin, &text);
                objects.extend(o);
                problems.extend(p);
            }
            (objects, problems, None)
        }
        Input::Live => {
            let report = match ask(socket, &Request::Snapshot)? {
                Response::Snapshot(report) => report,
                other => return Err(unexpected(&other)),
            };
            let (objects, problems) = live_objects(&report);
            let node = LocalNode {
                name: report.node_name.clone(),
                labels: report.node_labels.clone().into_iter().collect(),
                addresses: report.node_addresses.clone(),
            };
            (objects, problems, Some(node))
        }
    };
    if !problems.is_empty() {
        return Err(CommandError::Invalid(problems));
    }
    Ok(Read { objects, node })
}

/// The agent's documents decoded, as if read from a file called `live`.
pub fn live_objects(report: &SnapshotReport) -> (Vec<Sourced>, Vec<Problem>) {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": report.objects});
    parse_documents(Path::new("live"), &list.to_string())
}

/// Runs `git` in the working directory; its output, or what it said.
#[allow(clippy::disallowed_methods)] // `git:REV:PATH` is read by the system's git.
fn git(args: &[&str]) -> Result<String, CommandError> {
    let output = Command::new("git")
        .args(args)
        .output()
        .map_err(|e| CommandError::Usage(format!("running git: {e}")))?;
    if !output.status.success() {
        return Err(CommandError::Usage(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    String::from_utf8(output.stdout)
        .map_err(|_| CommandError::Usage(format!("git {}: not UTF-8", args.join(" "))))
}

/// The policy files of `path` at `revision` (a directory's own files, as
/// the agent reads a directory, or the file itself), named from the
/// repository's root.
fn git_files(revision: &str, path: &str) -> Result<Vec<String>, CommandError> {
    // Paths are the working directory's, as git takes them; `--full-name`
    // lists them from the root, as `git show REV:FILE` reads them.
    let spec = if path.is_empty() { "." } else { path };
    let list = |spec: &str| git(&["ls-tree", "-z", "--full-name", revision, "--", spec]);
    let entries = match list(&format!("{spec}/"))? {
        files if files.is_empty() => list(spec)?,
        files => files,
    };
    let mut files = Vec::new();
    for entry in entries.split('\0').filter(|e| !e.is_empty()) {
        // `<mode> <type> <object>\t<path>`
        let Some((meta, file)) = entry.split_once('\t') else {
            continue;
        };
        let name = file.rsplit('/').next().unwrap_or(file);
        if meta.split(' ').nth(1) == Some("blob") && is_policy_file_name(name) {
            files.push(file.to_string());
        }
    }
    if files.is_empty() {
        return Err(CommandError::Usage(format!(
            "git:{revision}:{path}: no policy file (*.yaml, *.yml, *.json) there"
        )));
    }
    files.sort();
    Ok(files)
}

/// Whether an object is inventory (what `--inventory` swaps in) rather
/// than policy.
fn is_inventory(object: &Object) -> bool {
    matches!(
        object,
        Object::Node(_)
            | Object::Namespace(_)
            | Object::Pod(_)
            | Object::Service(_)
            | Object::ServiceAccount(_)
            | Object::ExternalEntity(_)
    )
}

/// A side's snapshot, validated, and the Node it is compiled for.
struct Loaded {
    snapshot: Snapshot,
    node: Option<LocalNode>,
}

/// Reads `input`, its inventory replaced by `inventory`'s when given, and
/// validates the result.
fn load(input: &Input, inventory: Option<&Read>, socket: &Path) -> Result<Loaded, CommandError> {
    let side = read(input, socket)?;
    let objects = match inventory {
        None => side.objects,
        Some(inventory) => side
            .objects
            .into_iter()
            .filter(|o| !is_inventory(&o.object))
            .chain(
                inventory
                    .objects
                    .iter()
                    .filter(|o| is_inventory(&o.object))
                    .cloned(),
            )
            .collect(),
    };
    let snapshot = Snapshot { objects };
    let problems = crate::validate::validate(&snapshot);
    if !problems.is_empty() {
        return Err(CommandError::Invalid(problems));
    }
    let node = side.node.or_else(|| inventory.and_then(|i| i.node.clone()));
    Ok(Loaded { snapshot, node })
}

/// The default Node of a side: the command line's, else the agent's when
/// some side was read from it, else the snapshot's only Node.
fn local_node(
    loaded: &Loaded,
    live: Option<&LocalNode>,
    node: &NodeArgs,
) -> Result<LocalNode, CommandError> {
    match (node.node_name.is_some(), loaded.node.as_ref().or(live)) {
        (false, Some(live)) => Ok(live.clone()),
        _ => NodeIdentity::from(node).resolve(&loaded.snapshot),
    }
}

/// Both sides of `tollgate diff`, compiled.
fn sides(args: &DiffArgs) -> Result<(Side, Side), CommandError> {
    let socket = &args.socket.socket;
    let inventory = match &args.inventory {
        Some(text) => Some(read(&Input::parse(text)?, socket)?),
        None => None,
    };
    let old = load(&Input::parse(&args.old)?, inventory.as_ref(), socket)?;
    let new = load(&Input::parse(&args.new)?, inventory.as_ref(), socket)?;
    let live = old.node.clone().or_else(|| new.node.clone());
    let old_node = local_node(&old, live.as_ref(), &args.node)?;
    let new_node = local_node(&new, live.as_ref(), &args.node)?;
    Ok((
        Side::compile(&old.snapshot, &old_node),
        Side::compile(&new.snapshot, &new_node),
    ))
}

/// `tollgate diff`: the report in the format asked for. With
/// `--exit-code`: 0 no change (of the `--fail-on` kind), 1 changes, 2 any
/// error (invalid policies included).
pub fn diff(args: &DiffArgs) -> Result<ExitCode, CommandError> {
    let (before, after) = match sides(args) {
        Ok(sides) => sides,
        Err(error) if args.exit_code => {
            match error {
                CommandError::Invalid(problems) => {
                    for problem in &problems {
                        eprintln!("{problem}");
                    }
                    eprintln!("{} problem(s) found", problems.len());
                }
                CommandError::Usage(message) => eprintln!("tollgate: {message}"),
            }
            return Ok(ExitCode::from(2));
        }
        Err(error) => return Err(error),
    };
    let report = review::diff(&before, &after, args.expand);
    let text = match args.output {
        crate::cli::DiffOutput::Matrix => {
            let names = common_names(&before, &after, None);
            let mut ports = review::rule_ports(&before);
            ports.extend(review::rule_ports(&after));
            ports.sort();
            ports.dedup();
            let old = review::matrix(&before, &names, &ports, None);
            let new = review::matrix(&after, &names, &ports, None);
            render_matrix_diff(&old, &new)
        }
        output => render_diff(&report, output)?,
    };
    print!("{text}");
    let counted = report.changes.iter().any(|c| match args.fail_on {
        FailOn::Any => true,
        FailOn::Opened => c.kind() == ChangeKind::Opened,
        FailOn::Closed => c.kind() == ChangeKind::Closed,
    });
    Ok(if args.exit_code && counted {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The endpoint names of both sides (of the Namespace when given).
fn common_names(before: &Side, after: &Side, namespace: Option<&str>) -> Vec<String> {
    let mut names: Vec<String> = before
        .endpoints()
        .keys()
        .chain(after.endpoints().keys())
        .filter(|name| in_namespace(name, namespace))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

fn in_namespace(name: &str, namespace: Option<&str>) -> bool {
    namespace.is_none_or(|ns| name.strip_prefix(ns).is_some_and(|r| r.starts_with('/')))
}

/// `tollgate get matrix`: of the policies given, else of the agent's.
pub fn matrix(args: &MatrixArgs) -> Result<ExitCode, CommandError> {
    let socket = &args.socket.socket;
    let loaded = if args.policies.is_empty() {
        load(&Input::Live, None, socket)?
    } else {
        let snapshot =
            crate::source::load_and_validate(&args.policies).map_err(CommandError::Invalid)?;
        Loaded {
            snapshot,
            node: None,
        }
    };
    let node = local_node(&loaded, None, &args.node)?;
    let side = Side::compile(&loaded.snapshot, &node);
    let ports = if args.ports.is_empty() {
        review::rule_ports(&side)
    } else {
        args.ports
            .iter()
            .map(|p| p.trim().parse::<MatrixPort>())
            .collect::<Result<_, _>>()
            .map_err(CommandError::Usage)?
    };
    if ports.is_empty() {
        return Err(CommandError::Usage(
            "no rule names a port: say which with --ports".into(),
        ));
    }
    let names = common_names(&side, &side, args.namespace.as_deref());
    let matrix = review::matrix(&side, &names, &ports, args.group_by.as_deref());
    print!("{}", render_matrix(&matrix, args.output)?);
    Ok(ExitCode::SUCCESS)
}

//! The subcommands that read — `validate`, `trace`, `get`, `status`,
//! `observe`, `bundle` — `log-level`, `cleanup`, and the shell's
//! `completion` and `man`, each a function from its arguments to what it
//! prints and its exit code. File reading is delegated to `source`, the
//! evaluation to `explain`, the asking to `status`'s client, the
//! uninstall to `agent`; `main.rs` only dispatches and turns a
//! [`CommandError`] into its message and exit code. Nothing here decides
//! a verdict.
//!
//! - this file: the errors, the local Node's identity, loading policies,
//!   asking the agent, `--watch`, and `validate`, `trace`, `status`,
//!   `log-level`, `cleanup`;
//! - `view.rs`: [`View`], the running agent or the policies given, picked
//!   in one place;
//! - `get.rs`: `get`, and what its filters select;
//! - `observe.rs`: `observe`;
//! - `bundle.rs`: `bundle`, the files it writes;
//! - `shell.rs`: `completion` and `man`, from the clap definition;
//! - `review.rs`: `diff` and `get matrix`, and where their sides are read;
//!   `review_render.rs`: how they print;
//! - `render.rs`: every rendering, and the one `table()`.

mod bundle;
mod controller;
mod get;
mod observe;
mod render;
mod review;
mod review_render;
mod shell;
#[cfg(test)]
mod tests;
mod view;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use bundle::bundle;
pub use controller::controller;
pub use get::get;
pub use observe::observe;
pub(crate) use render::{render_queues, render_status};
pub use review::{diff, live_objects, matrix, Input};
pub use shell::{completion, man};
pub use view::View;

use crate::cli::{
    LimitArgs, LogLevelArgs, NodeArgs, StatusArgs, StatusOutput, StatusPart, TraceArgs, WatchArgs,
};
use crate::compile::{compile, LocalNode};
use crate::config::{AgentConfig, MachineDefaults, PolicyFilesConfig};
use crate::model::{Kind, Object, Snapshot};
use crate::ruleset::Ruleset;
use crate::source;
use crate::status::{Request, Response, StatusError};
use crate::telemetry::Check;
use crate::validate::{Inventory, Problem, Whole};
use render::render_trace;

/// Why an offline command could not produce its answer.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The policies did not validate; one entry per problem.
    #[error("{} problem(s) in the policies", .0.len())]
    Invalid(Vec<Problem>),
    #[error("{0}")]
    Usage(String),
}

/// The local Node's identity given on the command line; unset parts come
/// from the single `v1 Node` of the snapshot, if there is one.
#[derive(Clone, Debug, Default)]
pub struct NodeIdentity {
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub addresses: Vec<IpAddr>,
}

impl NodeIdentity {
    /// Resolves the identity against a snapshot's Node objects.
    pub fn resolve(&self, snapshot: &Snapshot) -> Result<LocalNode, CommandError> {
        let nodes: Vec<&str> = snapshot
            .iter()
            .filter_map(|o| match o {
                Object::Node(n) => Some(n.metadata.name.as_str()),
                _ => None,
            })
            .collect();
        let name = match (&self.name, nodes.as_slice()) {
            (Some(name), _) => name.clone(),
            (None, [only]) => only.to_string(),
            (None, []) => DEFAULT_NODE_NAME.to_string(),
            (None, several) => {
                return Err(CommandError::Usage(format!(
                    "the policies hold several Nodes ({}); say which is local with --node-name",
                    several.join(", ")
                )))
            }
        };
        Ok(LocalNode {
            name,
            labels: self.labels.clone().into_iter().collect(),
            addresses: self.addresses.clone(),
        })
    }
}

impl From<&NodeArgs> for NodeIdentity {
    fn from(args: &NodeArgs) -> NodeIdentity {
        NodeIdentity {
            name: args.node_name.clone(),
            labels: args.node_labels.clone().unwrap_or_default(),
            addresses: args.node_addresses.clone(),
        }
    }
}

/// Asks the running agent listening on `socket`.
pub fn ask(socket: &Path, request: &Request) -> Result<Response, CommandError> {
    crate::status::request(socket, request).map_err(|e| match e {
        StatusError::Agent(message) => CommandError::Usage(message),
        e => CommandError::Usage(format!("{e} (is `tollgate run` running?)")),
    })
}

/// A probe's name as the command line spells it.
fn check_name(check: Check) -> &'static str {
    match check {
        Check::Live => "live",
        Check::Ready => "ready",
    }
}

/// The local Node's name when neither the command line nor the policies name it.
pub const DEFAULT_NODE_NAME: &str = crate::validate::DEFAULT_NODE;

/// The agent's `policyFiles` bounds as `limits` set them (its
/// configuration file and `--set`), for reading files offline as the
/// agent reads them.
pub fn policy_files(limits: &LimitArgs) -> Result<PolicyFilesConfig, CommandError> {
    let text = match &limits.config {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| CommandError::Usage(format!("reading {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let file = limits.config.as_deref().zip(text.as_deref());
    // Only `policyFiles` is used: the machine's facts do not matter here.
    let machine = MachineDefaults {
        node_name: DEFAULT_NODE_NAME.into(),
        queues: 1,
    };
    AgentConfig::load(&machine, file, &limits.set)
        .map(|loaded| loaded.config.policy_files)
        .map_err(|e| CommandError::Usage(e.to_string()))
}

/// Loads, validates and compiles the policies at `paths`, within `limits`.
pub fn load_ruleset(
    paths: &[PathBuf],
    limits: &PolicyFilesConfig,
    node: &NodeIdentity,
) -> Result<(Snapshot, Ruleset), CommandError> {
    let snapshot =
        source::load_and_validate_within(paths, limits).map_err(CommandError::Invalid)?;
    let local = node.resolve(&snapshot)?;
    let ruleset = compile(&snapshot, &local);
    Ok((snapshot, ruleset))
}

/// `tollgate validate`: the one-line summary of a valid set of objects.
pub fn validate_summary(snapshot: &Snapshot) -> String {
    let mut counts: BTreeMap<Kind, usize> = BTreeMap::new();
    for object in snapshot.iter() {
        *counts.entry(object.kind()).or_default() += 1;
    }
    let files: std::collections::BTreeSet<_> = snapshot.objects.iter().map(|s| &s.origin).collect();
    let parts: Vec<String> = counts
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    format!(
        "valid: {} object(s) in {} file(s){}{}",
        snapshot.objects.len(),
        files.len(),
        if parts.is_empty() { "" } else { ": " },
        parts.join(", ")
    )
}

/// `tollgate validate`: what is valid but probably not what the author
/// meant ([`crate::validate::intent`]), with every Node of the inventory
/// compiled as the local one. `directories` are the paths given that are
/// directories: read whole, as the agent reads them, they are also warned
/// about when they hold no objects, no policy or no inventory.
pub fn intent_warnings(directories: &[PathBuf], snapshot: &Snapshot) -> Vec<Problem> {
    let origin = PathBuf::from(
        directories
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    );
    let whole = match directories.is_empty() {
        true => Whole::Files,
        false => Whole::Source {
            origin: &origin,
            inventory: Inventory::Whole,
        },
    };
    let nodes = crate::validate::inventory_nodes(snapshot);
    let rulesets: Vec<Ruleset> = nodes.iter().map(|node| compile(snapshot, node)).collect();
    let compiled: Vec<(&LocalNode, &Ruleset)> = nodes.iter().zip(&rulesets).collect();
    crate::validate::intent(snapshot, whole, &compiled)
}

/// `tollgate validate`: the summary of valid policies on stdout and what
/// is probably not meant as warnings on stderr, or the problems.
pub fn validate(paths: &[PathBuf], limits: &LimitArgs) -> Result<ExitCode, CommandError> {
    let limits = policy_files(limits)?;
    let snapshot =
        source::load_and_validate_within(paths, &limits).map_err(CommandError::Invalid)?;
    for warning in crate::validate::check(&snapshot).warnings {
        eprintln!("warning: {warning}");
    }
    let directories: Vec<PathBuf> = paths.iter().filter(|p| p.is_dir()).cloned().collect();
    for warning in intent_warnings(&directories, &snapshot) {
        eprintln!("warning: {warning}");
    }
    println!("{}", validate_summary(&snapshot));
    Ok(ExitCode::SUCCESS)
}

/// `tollgate trace`: offline against `--policies`, else asked of the
/// agent. With `--exit-code`: 0 allowed, 1 denied, 2 any error (invalid
/// policies included).
pub fn trace(args: &TraceArgs) -> Result<ExitCode, CommandError> {
    let node = &args.node;
    let identity = node.node_name.is_some() || node.node_labels.is_some();
    if args.policies.is_empty() && (identity || !node.node_addresses.is_empty()) {
        return Err(CommandError::Usage(
            "--node-name, --node-labels and --node-address describe the Node for --policies; the agent traces as its own Node".into(),
        ));
    }
    let limits = policy_files(&args.limits)?;
    let view = match View::new(&args.policies, &limits, node, &args.socket.socket) {
        Ok(view) => view,
        Err(CommandError::Invalid(problems)) if args.exit_code => {
            for problem in &problems {
                eprintln!("{problem}");
            }
            eprintln!("{} problem(s) found", problems.len());
            return Ok(ExitCode::from(2));
        }
        Err(error) => return Err(error),
    };
    let report = view.trace(args.request())?;
    print!("{}", render_trace(&report, args.output, args.verbose)?);
    Ok(if args.exit_code && !report.allowed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `tollgate status`: the agent's report as text (a summary and a line per
/// queue), wide (every metric and counter too), the queues' tables alone,
/// or JSON; with `check`, the probe's name when it passes, else exit 1
/// with the reason.
pub fn status(args: &StatusArgs) -> Result<ExitCode, CommandError> {
    let socket = args.socket.socket.as_path();
    if let Some(check) = args.check {
        return match ask(socket, &Request::Check { probe: check })? {
            Response::Check(report) if report.ok => {
                println!("{}", check_name(check));
                Ok(ExitCode::SUCCESS)
            }
            Response::Check(report) => {
                eprintln!(
                    "not {}: {}",
                    check_name(check),
                    report.reason.as_deref().unwrap_or("no reason given")
                );
                Ok(ExitCode::from(1))
            }
            other => Err(unexpected(&other)),
        };
    }
    repeat(&args.watch, true, || {
        let report = match ask(socket, &Request::Status)? {
            Response::Status(report) => report,
            other => return Err(unexpected(&other)),
        };
        Ok(match (args.part, args.output) {
            (_, StatusOutput::Json) => {
                serde_json::to_string_pretty(&report)
                    .map_err(|e| CommandError::Usage(e.to_string()))?
                    + "\n"
            }
            (Some(StatusPart::Queues), _) => render_queues(&report),
            (None, StatusOutput::Wide) => render_status(&report, true),
            (None, StatusOutput::Text) => render_status(&report, false),
        })
    })
}

/// Prints `answer()`; with `--watch`, asks again every interval and
/// prints each answer that differs from the last one printed (`every`:
/// each answer), after a blank line, until interrupted, the agent's error
/// (exit 2) or a closed stdout.
pub fn repeat(
    watch: &WatchArgs,
    every: bool,
    mut answer: impl FnMut() -> Result<String, CommandError>,
) -> Result<ExitCode, CommandError> {
    use std::io::Write as _;
    let mut last = answer()?;
    let mut out = std::io::stdout();
    if out
        .write_all(last.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
        || !watch.watch
    {
        return Ok(ExitCode::SUCCESS);
    }
    let interval = std::time::Duration::from_secs_f64(watch.interval.clamp(0.1, 3600.0));
    loop {
        std::thread::sleep(interval);
        let next = answer()?;
        if every || next != last {
            let written = write!(out, "\n{next}").and_then(|()| out.flush());
            if written.is_err() {
                return Ok(ExitCode::SUCCESS);
            }
            last = next;
        }
    }
}

/// `tollgate log-level`: the running agent's log filter, changed first
/// when one is given.
pub fn log_level(args: &LogLevelArgs) -> Result<ExitCode, CommandError> {
    if let Some(filter) = &args.filter {
        // Refused here with the flag's own message rather than the agent's.
        crate::logging::filter(Some(filter)).map_err(|e| CommandError::Usage(e.to_string()))?;
    }
    let request = Request::LogLevel {
        filter: args.filter.clone(),
    };
    match ask(&args.socket.socket, &request)? {
        Response::LogLevel(filter) => println!("{filter}"),
        other => return Err(unexpected(&other)),
    }
    Ok(ExitCode::SUCCESS)
}

/// `tollgate cleanup`: removes what tollgate installed in this network
/// namespace and says what it removed, one item per line, and how long
/// after the agent's lock was free.
pub fn cleanup(wait: bool) -> Result<ExitCode, CommandError> {
    let waiting = |pid: Option<u32>| {
        let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        eprintln!("waiting for the agent{pid} to stop; its rules enforce until then");
    };
    let (removed, took) = crate::agent::cleanup(wait, waiting)
        .map_err(|e| CommandError::Usage(format!("cleanup: {e}")))?;
    if removed.is_empty() {
        println!("nothing of tollgate's is installed in this network namespace");
    } else {
        println!("removed:");
        for item in removed.items() {
            println!("  {item}");
        }
        println!("in {} ms", took.as_millis());
    }
    Ok(ExitCode::SUCCESS)
}

/// An answer that does not fit the request.
fn unexpected(response: &Response) -> CommandError {
    CommandError::Usage(format!("the agent answered unexpectedly: {response:?}"))
}

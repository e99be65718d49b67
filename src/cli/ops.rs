//! The clap types of the operator's commands around a running agent:
//! `status`, `observe`, `bundle`, `log-level`, `--watch`, and the shell's
//! `completion` and `man`. Words to values only, as the rest of `cli`.

use std::path::PathBuf;

use clap::Args;

use super::{OutputFormat, SocketArgs};
use crate::telemetry::Check;

/// Options of `tollgate status`.
#[derive(Args, Clone, Debug)]
pub struct StatusArgs {
    /// `queues`: only the counter tables of the queues.
    #[arg(value_enum, value_name = "PART")]
    pub part: Option<StatusPart>,
    #[command(flatten)]
    pub socket: SocketArgs,
    /// `text` (default: a summary and one health line per queue), `wide`
    /// (also every metric of the agent and every counter of every queue)
    /// or `json` (everything).
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: StatusOutput,
    /// Probe instead: exit 0 when the agent is live (every worker
    /// running and draining) or ready (a complete policy snapshot
    /// applied and the kernel matching it), 1 when not (the reason on
    /// stderr), 2 when the agent cannot be reached.
    #[arg(long, value_enum, value_name = "live|ready", conflicts_with_all = ["output", "part", "watch"])]
    pub check: Option<Check>,
    #[command(flatten)]
    pub watch: WatchArgs,
}

/// What `tollgate status PART` shows alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusPart {
    /// Every counter of every queue, a table per kind of worker.
    Queues,
}

/// Output format of `tollgate status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusOutput {
    Text,
    Wide,
    Json,
}

/// `--watch` of `status` and `get endpoints`.
#[derive(Args, Clone, Copy, Debug)]
pub struct WatchArgs {
    /// Ask again every `--interval` and print the answer when it changed
    /// (`status`: every time), until interrupted.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Seconds between two questions with `--watch`.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 2.0,
        requires = "watch"
    )]
    pub interval: f64,
}

/// Verdicts `tollgate observe --verdict` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VerdictFilter {
    Drop,
    Reject,
    Allow,
}

/// Options of `tollgate observe`.
#[derive(Args, Clone, Debug)]
pub struct ObserveArgs {
    #[command(flatten)]
    pub socket: SocketArgs,
    /// Only these verdicts (repeatable, or comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub verdict: Vec<VerdictFilter>,
    /// Only flows with an endpoint in this Namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Only flows of this Pod (in `-n`, default `default`).
    #[arg(short = 'p', long, value_name = "POD")]
    pub pod: Option<String>,
    /// Keep printing decisions as they are made, until interrupted.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// How many of the latest decisions to print first (the agent keeps
    /// the last 4096).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub last: usize,
    /// `text` (one line per decision) or `json` (one object per line).
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: OutputFormat,
}

/// Options of `tollgate bundle`.
#[derive(Args, Clone, Debug)]
pub struct BundleArgs {
    #[command(flatten)]
    pub socket: SocketArgs,
    /// Where to write: a `.tar.gz` (or `.tgz`) file, `-` for a `.tar.gz`
    /// on stdout, or a directory (created; it must not exist or be
    /// empty). Default: `tollgate-bundle-NODE-TIME.tar.gz` here.
    #[arg(value_name = "PATH")]
    pub path: Option<PathBuf>,
}

/// Options of `tollgate log-level`.
#[derive(Args, Clone, Debug)]
pub struct LogLevelArgs {
    #[command(flatten)]
    pub socket: SocketArgs,
    /// The new filter: a level (`debug`) or directives
    /// (`info,tollgate=debug`), as `--log-level` of `run`. Without it,
    /// the filter in force is printed.
    #[arg(value_name = "FILTER")]
    pub filter: Option<String>,
}

/// Options of `tollgate man`.
#[derive(Args, Clone, Debug)]
pub struct ManArgs {
    /// Write `tollgate.1` and a page per subcommand (`tollgate-run.1`,
    /// `tollgate-get-policies.1`, …) into this directory; without it,
    /// `tollgate.1` goes to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

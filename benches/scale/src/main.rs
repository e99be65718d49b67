//! The cluster-scale simulation of issue 32 (`benches/scale.sh`, which
//! runs it inside a network namespace of its own): the fake API server
//! with its indexed fan-out, a generated cluster of N Nodes and P Pods
//! with churn, the real `tollgate controller` as a child process, two
//! real agents in network namespaces of their own, and a simulated agent
//! (watch and store) for every other Node. Prints what each agent
//! receives, what the server sends, the controller's and the real
//! agents' memory and CPU, and the time from a Pod or policy change until
//! each affected agent has it; the last line is the summary. Design and figures:
//! `docs/design/scale.md`; how to run: `docs/dev/bench.md`.
#![allow(clippy::disallowed_methods)] // a bench: it reads the clock.

mod agents;
mod churn;
mod cluster;
mod measure;
mod process;
mod real;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::churn::Rates;
use crate::cluster::Size;

struct Args {
    size: Size,
    churn: Duration,
    rates: Rates,
    tollgate: String,
    work: std::path::PathBuf,
    /// The network namespaces of the two real agents.
    netns: [String; 2],
}

const USAGE: &str = "usage: tollgate-scale --nodes N --pods P --tollgate BIN --work DIR \
--netns-wide NS --netns-local NS [--churn-seconds S] [--pod-changes PER_S] [--status-writes PER_S] [--node-reports PER_S]";

fn args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut nodes, mut pods, mut tollgate, mut work) = (None, None, None, None);
    let (mut wide, mut local) = (None, None);
    let mut churn = 60.0;
    let mut rates = Rates {
        pod_changes: 30.0,
        status_writes: 150.0,
        namespace_changes: 0.5,
        policy_edits: 0.2,
        node_reports: f64::NAN,
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--nodes" => nodes = Some(number()? as usize),
            "--pods" => pods = Some(number()? as usize),
            "--churn-seconds" => churn = number()?,
            "--pod-changes" => rates.pod_changes = number()?,
            "--status-writes" => rates.status_writes = number()?,
            "--node-reports" => rates.node_reports = number()?,
            "--tollgate" => tollgate = Some(value),
            "--work" => work = Some(value.into()),
            "--netns-wide" => wide = Some(value),
            "--netns-local" => local = Some(value),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let (Some(nodes), Some(pods), Some(tollgate), Some(work), Some(wide), Some(local)) =
        (nodes, pods, tollgate, work, wide, local)
    else {
        return Err(USAGE.into());
    };
    if nodes < 3 || pods < 2 * cluster::PODS_PER_NAMESPACE {
        return Err("at least 3 Nodes and 200 Pods".into());
    }
    if rates.node_reports.is_nan() {
        // The kubelet's status report, every 5 min (`nodeStatusReportFrequency`).
        rates.node_reports = nodes as f64 / 300.0;
    }
    Ok(Args {
        size: Size { nodes, pods },
        churn: Duration::from_secs_f64(churn),
        rates,
        tollgate,
        work,
        netns: [wide, local],
    })
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("tollgate-scale: {e}");
            return ExitCode::from(2);
        }
    };
    match measure::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate-scale: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Steps of the run, printed as they end.
fn step(what: &str, started: Instant) {
    eprintln!("scale: {what} in {:.1} s", started.elapsed().as_secs_f64());
}

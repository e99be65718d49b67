//! The `tollgate` binary: parses the command line and maps results to exit
//! codes — 0 success (a trace that ends in Drop included, unless
//! `--exit-code`: then 1 for a denied flow and 2 for any error), 1 invalid
//! policies (or, for `status --check`, not live / not ready), 2 usage,
//! configuration or runtime errors (for `status --check`: the agent cannot
//! be reached), 3 for `run` when a worker stalled (the process exits to be
//! restarted). The work is done in the library: `agent::run` for `run`,
//! `commands` for the others.

use std::process::ExitCode;

use clap::Parser;
use tollgate::agent::AgentError;
use tollgate::cli::{Cli, Command, RunArgs};
use tollgate::commands::{self, CommandError};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(CommandError::Invalid(problems)) => {
            for problem in &problems {
                println!("{problem}");
            }
            eprintln!("{} problem(s) found", problems.len());
            ExitCode::from(1)
        }
        Err(CommandError::Usage(message)) => {
            eprintln!("tollgate: {message}");
            ExitCode::from(2)
        }
    }
}

/// `tollgate run`: runs until SIGTERM/SIGINT. Problems are printed by the
/// agent's error message, one per line.
fn run_agent(args: RunArgs) -> ExitCode {
    match tollgate::agent::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tollgate: {error:#}");
            let invalid_policies = matches!(
                error.downcast_ref::<AgentError>(),
                Some(AgentError::InvalidPolicies(_))
            );
            ExitCode::from(if invalid_policies { 1 } else { 2 })
        }
    }
}

fn run(command: Command) -> Result<ExitCode, CommandError> {
    match command {
        Command::Run(args) => Ok(run_agent(args)),
        Command::Validate { paths, limits } => commands::validate(&paths, &limits),
        Command::Trace(args) => commands::trace(&args),
        Command::Diff(args) => commands::diff(&args),
        Command::Get { what } => commands::get(&what),
        Command::Cleanup { wait } => commands::cleanup(wait),
        Command::Status(args) => commands::status(&args),
        Command::Observe(args) => commands::observe(&args),
        Command::Bundle(args) => commands::bundle(&args),
        Command::LogLevel(args) => commands::log_level(&args),
        Command::Completion { shell } => commands::completion(shell),
        Command::Man(args) => commands::man(&args),
        Command::Controller(args) => commands::controller(&args),
    }
}

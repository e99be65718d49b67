//! The `tollgate` command line: parses arguments and maps errors to exit
//! codes (2 for invalid configuration or policies, 1 for other failures).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tollgate::agent::{AgentError, RunArgs};

#[derive(Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Enforce the policies of a directory on this node until SIGTERM/SIGINT.
    Run(RunArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Run(args) => tollgate::agent::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tollgate: {error:#}");
            let invalid_input = error
                .downcast_ref::<AgentError>()
                .is_some_and(AgentError::is_invalid_input);
            ExitCode::from(if invalid_input { 2 } else { 1 })
        }
    }
}
